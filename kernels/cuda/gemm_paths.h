// kernels/cuda/gemm_paths.h — the GEMM's dispatch paths as the invariant CUDA set declares them
// for coverage: "gemm:" and inv_cuda_gemm_plan_describe's name (the plan's tile and split mode,
// then its load). One list for inv_cuda.cu and tests/test_gemm_plan.c, which holds it equal to
// the plans gemm_plan_choose returns on 132 SMs: a plan added without its name here, or a name
// left after its plan went, fails there rather than as an unreachable path on a GPU.
#ifndef INVAR_KERNELS_CUDA_GEMM_PATHS_H
#define INVAR_KERNELS_CUDA_GEMM_PATHS_H

// sm_90a (wgmma): every plan gemm_plan_choose can return.
#define GEMM_SM90_PATHS                                                                                    \
    "gemm:64x128 tma", "gemm:64x128 cp.async", "gemm:64x128 scalar", "gemm:64x128/sk tma",                \
    "gemm:64x192 tma", "gemm:128x192 tma", "gemm:128x256 tma", "gemm:128x256 cp.async",                  \
    "gemm:128x256/sk tma", "gemm:128x256/sk-tail tma", "gemm:64x128/cta tma", "gemm:64x128/cta cp.async", \
    "gemm:64x128/cta scalar", "gemm:64x128/cta+sk tma", "gemm:64x96/cta tma", "gemm:64x72/cta tma",      \
    "gemm:128x96/cta tma", "gemm:128x128/cta tma", "gemm:128x128/cta cp.async",                           \
    "gemm:128x128/cta+sk tma", "gemm:128x144/cta tma", "gemm:128x192/cta tma", "gemm:128x256/cta tma",    \
    "gemm:64x128/grid tma", "gemm:64x128/grid+last tma", "gemm:64x128/grid+persistent tma",              \
    "gemm:128x192/grid tma", "gemm:128x256/grid tma"

// Other GPUs: the portable mma.sync kernel, whose splits are one (no split-K off sm_90a).
#define GEMM_PORTABLE_PATH "gemm:mma.sync"

#endif
