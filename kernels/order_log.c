// kernels/order_log.c — the per-set record of reduction-order choices (kernels/order_log.h).
// A small open-addressing table of (op, shape) -> first order seen; a set notes a handful of
// shapes per op, so the table never grows. Notes come from the thread that calls the op
// (sets are driven by one host thread), so no lock is needed.
#include "order_log.h"

#include <stdio.h>   // snprintf
#include <stdlib.h>  // free
#include <string.h>  // memset

#include "../common/check.h"   // invar_calloc
#include "../common/hash.h"             // invar_mix64, invar_uniform, invar_gumbel_noise

#define SLOTS 1024   // shapes remembered over all ops; past that new shapes count as varied

typedef struct {
    bool used;
    int op;
    uint64_t shape, order;
} slot;

struct order_log {
    slot slots[SLOTS];
    bool called[ORDER_OPS], varied[ORDER_OPS], unobservable[ORDER_OPS];
    const char *why[ORDER_OPS];
};

order_log *order_log_create(void) { return invar_calloc(1, sizeof(order_log), "order log"); }

void order_log_destroy(order_log *log) { free(log); }

void order_log_reset(order_log *log) {
    if (log) memset(log, 0, sizeof *log);
}

void order_log_note(order_log *log, order_op op, uint64_t shape, uint64_t order) {
    if (!log) return;
    log->called[op] = true;
    if (log->varied[op]) return;
    uint64_t h = invar_mix64(shape * ORDER_OPS + (uint64_t)op);
    for (int probe = 0; probe < SLOTS; probe++) {
        slot *s = &log->slots[(h + (uint64_t)probe) % SLOTS];
        if (!s->used) {
            *s = (slot){.used = true, .op = op, .shape = shape, .order = order};
            return;
        }
        if (s->op == (int)op && s->shape == shape) {
            if (s->order != order) log->varied[op] = true;
            return;
        }
    }
    log->varied[op] = true;  // table full: claim nothing we cannot show
}

void order_log_note_unobservable(order_log *log, order_op op, const char *why) {
    if (!log) return;
    log->called[op] = true;
    log->unobservable[op] = true;
    log->why[op] = why;
}

order_status order_log_status(const order_log *log, order_op op) {
    if (!log->called[op]) return ORDER_NOT_CALLED;
    if (log->varied[op]) return ORDER_VARIED;
    if (log->unobservable[op]) return ORDER_UNOBSERVABLE;
    return ORDER_FIXED;
}

const char *order_op_name(order_op op) {
    static const char *const names[ORDER_OPS] = {
        "gemm", "rmsnorm", "mla_attention", "mha_prefill", "moe_route", "moe_experts",
        "moe_combine", "logprobs",
    };
    return op < ORDER_OPS ? names[op] : "?";
}

const char *order_log_describe(const order_log *log, char *buf, int len) {
    static const struct {
        order_status status;
        const char *label;
    } groups[] = {
        {ORDER_FIXED, "one order only"},
        {ORDER_VARIED, "changed order"},
        {ORDER_UNOBSERVABLE, "not observable"},
    };
    int used = 0;
    buf[0] = '\0';
    for (size_t g = 0; g < sizeof groups / sizeof groups[0]; g++) {
        int in_group = 0;
        for (int op = 0; op < ORDER_OPS && used < len; op++) {
            if (order_log_status(log, (order_op)op) != groups[g].status) continue;
            used += snprintf(buf + used, (size_t)(len - used), "%s%s%s%s",
                             in_group ? ", " : used ? "; " : "", in_group ? "" : groups[g].label,
                             in_group ? "" : ": ", order_op_name((order_op)op));
            if (groups[g].status == ORDER_UNOBSERVABLE && used < len)
                used += snprintf(buf + used, (size_t)(len - used), " (%s)", log->why[op]);
            in_group++;
        }
    }
    return buf;
}
