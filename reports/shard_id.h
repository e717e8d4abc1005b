// reports/shard_id.h — "I/N", the shard of a matrix a report covers (`invar run --shard I/N`,
// meta.csv's shard row). Read by the runner, by `invar report merge` and by `invar report diff`,
// so the one spelling is parsed in one place.
#ifndef INVAR_REPORTS_SHARD_ID_H
#define INVAR_REPORTS_SHARD_ID_H

#include <stdbool.h>  // bool

// A CI job matrix wider than this is a mistake, not a plan; it also bounds the merge's tables.
#define SHARD_MAX_COUNT 1024

typedef struct {
    int index;  // I, from 1
    int count;  // N; 0: not a shard (the whole matrix)
} shard_id;

// Parses "I/N" with 1 <= I <= N <= SHARD_MAX_COUNT, decimal digits only. False with why.
bool shard_id_parse(const char *text, shard_id *out, char *why, int why_len);

#endif
