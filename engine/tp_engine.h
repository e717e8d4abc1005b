// engine/tp_engine.h — the engine at tensor-parallel degree T: T engines, one per rank, each
// with its own kernel set (its own device; on the CPU its own thread pool), its own part of the
// weights (engine/tp_part.h), KV cache and scheduler, driven at once on T threads of one
// process (common/rank_threads.h) and meeting in the kernel set's collectives. Every rank
// schedules the same batches (the scheduler is deterministic and every rank samples the same
// token from the same gathered logits), as vLLM's SPMD workers run one scheduler output;
// rank 0's records are the results.
//
// T = 1 is the plain engine, called on the caller's thread: the same bits as engine_create.
// On CUDA rank r's set lives on GPU r (the caller creates it there); each rank's thread binds
// to its set's device first (ops.h: bind_thread) and the group's NCCL communicator is opened
// through rank 0's set (ops.h: open_group). Every rank's set is of one device kind.
#ifndef INVAR_ENGINE_TP_ENGINE_H
#define INVAR_ENGINE_TP_ENGINE_H

#include <stdbool.h>          // bool
#include <stdint.h>           // uint64_t
#include "engine.h"           // engine, engine_limits, engine_result, engine_stats

typedef struct tp_engine tp_engine;

// ops[r] is rank r's kernel set (the caller keeps them, and destroys them after the engine).
// Returns with the calling thread bound to rank 0's device.
tp_engine *tp_engine_create(const model_config *cfg, weight_source *src, ops_set *const *ops,
                            int T, const engine_limits *limits, uint64_t seed);
void tp_engine_destroy(tp_engine *t);

// engine_generate on every rank; results are rank 0's. False (why in err) when the engine
// refused the schedule, or when a rank's records differ from rank 0's (the ranks disagree:
// a broken collective).
bool tp_engine_generate(tp_engine *t, const engine_request *reqs, int n,
                        const engine_sched *sched, engine_result *results, engine_stats *stats,
                        char *err, int err_len);

const model_config *tp_engine_config(const tp_engine *t);
// engine_observe_rows on rank 0 (every rank runs the same steps).
void tp_engine_observe_rows(tp_engine *t, engine_rows_observer fn, void *ctx);
int tp_engine_size(const tp_engine *t);
// engine_failed_request of rank 0 after a failed tp_engine_generate (at T > 1 such a failure
// stops the process), or -1.
int tp_engine_failed_request(const tp_engine *t);

#endif
