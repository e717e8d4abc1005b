// reports/shard_id.c — parsing "I/N" (reports/shard_id.h).
#include "shard_id.h"

#include <ctype.h>  // isdigit
#include <stdio.h>  // snprintf

// Digits only, so "+1", " 2" or "1e1" never read as a shard; false past SHARD_MAX_COUNT.
static bool read_number(const char **p, int *out) {
    long v = 0;
    const char *s = *p;
    if (!isdigit((unsigned char)*s)) return false;
    for (; isdigit((unsigned char)*s); s++) {
        v = v * 10 + (*s - '0');
        if (v > SHARD_MAX_COUNT) return false;
    }
    *p = s;
    *out = (int)v;
    return true;
}

bool shard_id_parse(const char *text, shard_id *out, char *why, int why_len) {
    const char *p = text;
    int i = 0, n = 0;
    bool ok = read_number(&p, &i) && *p++ == '/' && read_number(&p, &n) && *p == '\0';
    if (!ok) {
        snprintf(why, (size_t)why_len, "'%s' is not I/N (two whole numbers, N at most %d)", text,
                 SHARD_MAX_COUNT);
        return false;
    }
    if (n < 1 || i < 1 || i > n) {
        snprintf(why, (size_t)why_len, "'%s': I must be from 1 to N (N >= 1)", text);
        return false;
    }
    *out = (shard_id){.index = i, .count = n};
    return true;
}
