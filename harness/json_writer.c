// harness/json_writer.c — JSON strings and float32 numbers that read back exactly
// (harness/json_writer.h).
#include "json_writer.h"

#include <inttypes.h>  // PRId64
#include <math.h>      // isnan, isinf

void json_write_string(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"': fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\n': fputs("\\n", f); break;
        case '\r': fputs("\\r", f); break;
        case '\t': fputs("\\t", f); break;
        default:
            if (*p < 0x20) fprintf(f, "\\u%04x", *p);
            else fputc(*p, f);
        }
    }
    fputc('"', f);
}

void json_write_float(FILE *f, float v) {
    if (isnan(v)) fputs("NaN", f);
    else if (isinf(v)) fputs(v < 0 ? "-Infinity" : "Infinity", f);
    else fprintf(f, "%.9g", (double)v);
}

void json_write_int(FILE *f, int64_t v) { fprintf(f, "%" PRId64, v); }
