// common/source_id.h — which source tree this invar was built from, fixed at build time (the
// Makefile passes it): meta.csv's invar_commit and `invar --version`. Asking git at run time
// would name the checkout of the current directory, not the build's.
#ifndef INVAR_COMMON_SOURCE_ID_H
#define INVAR_COMMON_SOURCE_ID_H

// The commit of the tree the build came from, "-dirty" appended when tracked files differed
// from it; "unknown" only when the tree was not a git checkout of its own.
const char *invar_source_id(void);

#endif
