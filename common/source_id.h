// common/source_id.h — which source tree this invar was built from, and with which experiment
// defines, fixed at build time (the Makefile passes them): meta.csv's invar_commit and
// build_defines, and `invar --version`. Asking git at run time would name the checkout of the
// current directory, not the build's.
#ifndef INVAR_COMMON_SOURCE_ID_H
#define INVAR_COMMON_SOURCE_ID_H

// The commit of the tree the build came from, "-dirty" appended when tracked files differed
// from it; "unknown" only when the tree was not a git checkout of its own.
const char *invar_source_id(void);

// The kernel experiment's compile-time choices the CUDA build was made with (the Makefile's
// NVCC_DEFINES, e.g. "-DGEMM_GATHER_TMA_W=0"), "-" when none: two builds of one commit time
// differently, and a filed bench run must say which it was.
const char *invar_build_defines(void);

#endif
