// harness/run/requests.c — the engine requests of one config (harness/run/requests.h).
#include "requests.h"

#include <stdlib.h>             // free

#include "../../common/check.h" // invar_malloc
#include "arrivals.h"           // arrivals_schedule

// Prompt 0 arrives at step 0 and is admitted first, so it leads the running list and takes the
// whole budget each step: its prefill needs ceil(len / budget) steps (one without chunking),
// and each of its other tokens one more; the warm copies arrive after that.
void config_requests(const case_file *c, const resolved_config *rc, const run_config *cfg,
                     const prompt_set *p, engine_request *reqs, engine_request *alone) {
    int *steps = invar_malloc((size_t)p->count * sizeof *steps, "arrival steps");
    arrivals_schedule(cfg->arrivals, p->first_warm, c->seed, steps);
    int budget = rc->max_num_batched_tokens;
    int prefill_steps = rc->chunked_prefill ? (p->lens[0] + budget - 1) / budget : 1;
    int warm = steps[0] + prefill_steps + c->max_new_tokens;
    if (p->first_warm > 0 && warm < steps[p->first_warm - 1]) warm = steps[p->first_warm - 1];
    for (int i = p->first_warm; i < p->count; i++) steps[i] = warm;
    for (int i = 0; i < p->count; i++) {
        reqs[i] = (engine_request){
            .prompt = p->tokens[i],
            .prompt_len = p->lens[i],
            .max_new_tokens = c->max_new_tokens,
            .temperature = c->temperature,
            .seed = p->seeds[i],
            .arrival_step = steps[i],
        };
        alone[i] = reqs[i];
        alone[i].arrival_step = 0;
    }
    free(steps);
}
