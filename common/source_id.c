// common/source_id.c — the build's source tree (common/source_id.h).
#include "source_id.h"

// Built outside the Makefile (no -D): the tree is not known, and saying so is the honest answer.
#ifndef INVAR_SOURCE_ID
#define INVAR_SOURCE_ID "unknown"
#endif

const char *invar_source_id(void) { return INVAR_SOURCE_ID; }

#ifndef INVAR_BUILD_DEFINES
#define INVAR_BUILD_DEFINES ""
#endif

const char *invar_build_defines(void) { return INVAR_BUILD_DEFINES[0] ? INVAR_BUILD_DEFINES : "-"; }
