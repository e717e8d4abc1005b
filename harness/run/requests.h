// harness/run/requests.h — the engine requests of one config: one per prompt of the case's prompt
// set, arriving as the config's arrival pattern says, the warm copies of prompt 0 after
// prompt 0 has surely finished; and the same requests each arriving at step 0, for the bs=1
// baselines.
#ifndef INVAR_HARNESS_REQUESTS_H
#define INVAR_HARNESS_REQUESTS_H

#include "../../engine/engine.h" // engine_request
#include "case_file.h"          // case_file
#include "matrix.h"             // run_config
#include "prompts.h"            // prompt_set
#include "resolve.h"            // resolved_config

// Fills reqs[0 .. p->count) (the batched runs) and alone[0 .. p->count) (the baselines).
void config_requests(const case_file *c, const resolved_config *rc, const run_config *cfg,
                     const prompt_set *p, engine_request *reqs, engine_request *alone);

#endif
