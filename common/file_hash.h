// common/file_hash.h — the one file hash of the project: xxHash64 (seed 0) of a file or of its
// first bytes, for meta.csv's case hash and the checkpoint identity a resume checks.
#ifndef INVAR_COMMON_FILE_HASH_H
#define INVAR_COMMON_FILE_HASH_H

#include <stdbool.h>  // bool
#include <stdint.h>   // uint64_t

// The hash of the file's first `limit` bytes (limit < 0: all of it; a shorter file: what is
// there). False, with the reason in err naming the path, when it cannot be read.
bool invar_file_xxh64(const char *path, long long limit, uint64_t *out, char *err, int err_len);

#endif
