// common/nccl_check.cuh — checked NCCL calls for the CUDA files that drive a tensor-parallel
// group: a failure names the op, the call and NCCL's reason, and exits 3 (common/check.h).
#ifndef INVAR_COMMON_NCCL_CHECK_CUH
#define INVAR_COMMON_NCCL_CHECK_CUH

#include <nccl.h>    // ncclResult_t, ncclGetErrorString, ncclGetLastError

#include "check.h"   // invar_die, INVAR_EXIT_SYSTEM

// ncclGetLastError(NULL) adds NCCL's own last message (often the peer or transport at fault).
#define NCCL_CHECK(op, call)                                                              \
    do {                                                                                  \
        ncclResult_t nr_ = (call);                                                        \
        if (nr_ != ncclSuccess)                                                           \
            invar_die(INVAR_EXIT_SYSTEM, "nccl: %s: %s failed: %s (%s)", (op), #call,     \
                      ncclGetErrorString(nr_), ncclGetLastError(NULL));                   \
    } while (0)

#endif
