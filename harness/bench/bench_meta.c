// harness/bench/bench_meta.c — a bench run's meta.csv (harness/bench/bench_meta.h).
#include "bench_meta.h"

#include <stdio.h>                      // snprintf
#include <string.h>                     // strcmp

#include "../../common/check.h"         // invar_die, INVAR_EXIT_SYSTEM
#include "../../reports/run_meta.h"     // run_meta_write
#include "../../sets/registry.h"        // cuda_device_describe, cuda_device_count, tp_devices_describe

void bench_meta_write(const char *out_dir, const char *device, int argc, char **argv,
                      bool finished) {
    cuda_device_info dev;
    const bool cuda = strcmp(device, "cuda") == 0 && cuda_device_describe(&dev);
    // The tensor-parallel rows' library and links, as the run report records them.
    char nccl[64], links[256];
    tp_devices_describe(cuda ? "cuda" : "cpu", cuda ? cuda_device_count() : 1, nccl,
                        (int)sizeof nccl, links, (int)sizeof links);
    const char *keys[] = {"collective_library", "gpu_links", "finished"},
               *values[] = {nccl, links, finished ? "yes" : "no"};
    run_meta_input in = {.device = cuda ? dev.name : "cpu",
                         .driver = cuda ? dev.driver : NULL,
                         .cuda_runtime = cuda ? dev.runtime : NULL,
                         .cublas = cuda ? dev.cublas : NULL,
                         .compute_capability = cuda ? dev.compute_capability : NULL,
                         .argc = argc, .argv = argv, .n_extra = 3,
                         .extra_keys = keys, .extra_values = values};
    char err[512];
    if (!run_meta_write(out_dir, &in, err, sizeof err))
        invar_die(INVAR_EXIT_SYSTEM, "writing %s/meta.csv: %s", out_dir, err);
}
