// kernels/order_log.h — what a kernel set that picks its reduction orders from the batch's
// shape records of its choices, so a run that did not catch it can say which ops never
// changed order at the case's shapes (and so could not have shown batch variance there).
//
// An op notes, per call, a `shape` key (what fixes the function: N and K for a GEMM, D for a
// norm, ...) and an `order` key (the choice it made: split count, block size, ...). An op has
// "varied" once one shape key was seen with two order keys. A choice the set cannot observe
// (cuBLAS's kernel) is noted as unobservable instead.
#ifndef INVAR_KERNELS_ORDER_LOG_H
#define INVAR_KERNELS_ORDER_LOG_H

#include <stdbool.h>  // bool
#include <stdint.h>   // uint64_t

// The ops whose order a set may pick from the batch.
typedef enum {
    ORDER_GEMM,
    ORDER_RMSNORM,
    ORDER_MLA_ATTENTION,
    ORDER_MHA_PREFILL,
    ORDER_MOE_ROUTE,
    ORDER_MOE_EXPERTS,
    ORDER_MOE_COMBINE,
    ORDER_LOGPROBS,
    ORDER_OPS
} order_op;

typedef struct order_log order_log;

#ifdef __cplusplus
extern "C" {
#endif

order_log *order_log_create(void);
void order_log_destroy(order_log *log);
// Forgets every choice (a new config starts from nothing).
void order_log_reset(order_log *log);

// Call `op` at `shape` reduced in `order`. NULL log: nothing (sets that do not record).
void order_log_note(order_log *log, order_op op, uint64_t shape, uint64_t order);
// Call `op` chose an order the set cannot see (a library's internal heuristic).
void order_log_note_unobservable(order_log *log, order_op op, const char *why);

typedef enum {
    ORDER_NOT_CALLED,      // the op never ran
    ORDER_FIXED,           // every shape was reduced in one order: order-free here
    ORDER_VARIED,          // some shape was reduced in two orders
    ORDER_UNOBSERVABLE,    // the choice is made where the set cannot see it
} order_status;

order_status order_log_status(const order_log *log, order_op op);
const char *order_op_name(order_op op);

// "one order only: mla_attention, moe_combine; changed order: rmsnorm; not observable: gemm
// (why)" — the ops that ran, by what the log saw of their orders. Returns buf.
const char *order_log_describe(const order_log *log, char *buf, int len);

#ifdef __cplusplus
}
#endif

#endif
