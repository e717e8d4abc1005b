// harness/json_writer.h — invar's own JSON output: strings escaped, float32 values written so
// that they read back to the same bits. cJSON 1.7.15's printer writes a double with %1.15g and
// only falls back to %1.17g when that does not read back as the double; a float32 widened to
// double needs up to 17 digits for the double but only 9 for the float, and the reader must get
// the float's bits, so floats are written here with %.9g (enough for every float32 to round-trip
// through strtof, and through strtod then a cast to float: what %.9g writes of a float32 lies
// within 5e-9 of it, relatively, far from any midpoint between two floats, so the double step
// cannot change the result).
// -Infinity, Infinity and NaN are written as Python's json module writes them (not JSON, but
// what OpenAI-compatible Python servers send; invar probe reads them).
#ifndef INVAR_HARNESS_JSON_WRITER_H
#define INVAR_HARNESS_JSON_WRITER_H

#include <stdint.h>  // int64_t
#include <stdio.h>   // FILE

// A JSON string literal of `s`, quotes included.
void json_write_string(FILE *f, const char *s);
// A float32 value: %.9g, or -Infinity / Infinity / NaN.
void json_write_float(FILE *f, float v);
void json_write_int(FILE *f, int64_t v);

#endif
