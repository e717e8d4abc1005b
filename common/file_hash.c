// common/file_hash.c — xxHash64 of a file's bytes (common/file_hash.h).
#include "file_hash.h"

#include <errno.h>     // errno, EIO
#include <stdio.h>     // fopen, fread, ferror, fclose, snprintf
#include <string.h>    // strerror
#include <xxhash.h>    // XXH64_createState, XXH64_reset, XXH64_update, XXH64_digest

bool invar_file_xxh64(const char *path, long long limit, uint64_t *out, char *err, int err_len) {
    errno = 0;
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, (size_t)err_len, "%s: cannot open to hash: %s", path, strerror(errno));
        return false;
    }
    XXH64_state_t *s = XXH64_createState();
    bool ok = s && XXH64_reset(s, 0) == XXH_OK;
    char buf[65536];
    unsigned long long left = limit < 0 ? ~0ull : (unsigned long long)limit;
    while (ok && left > 0) {
        size_t want = left < sizeof buf ? (size_t)left : sizeof buf;
        size_t n = fread(buf, 1, want, f);
        if (n == 0) break;
        ok = XXH64_update(s, buf, n) == XXH_OK;
        left -= n;
    }
    ok = ok && !ferror(f);
    if (ok) *out = XXH64_digest(s);
    else snprintf(err, (size_t)err_len, "%s: reading to hash failed: %s", path,
                  strerror(errno ? errno : EIO));
    XXH64_freeState(s);
    fclose(f);
    return ok;
}
