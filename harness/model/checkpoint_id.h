// harness/model/checkpoint_id.h — the identity of a checkpoint directory, recorded in meta.csv so a
// resumed run never mixes two sets of weights into one report. Cheap by default: config.json's
// (and any *.index.json's) xxh64 and, per *.safetensors file, its size, mtime and the xxh64 of
// its header (the 8-byte length and the JSON: names, dtypes, shapes, offsets); with `full`, each
// safetensors file's whole-content xxh64 too (reads every byte: `invar run --hash-weights`).
// Text form, files in name order: "config.json: xxh64=H; model.safetensors: size=N
// mtime=S.NNNNNNNNN header_xxh64=H[ xxh64=H]".
#ifndef INVAR_HARNESS_CHECKPOINT_ID_H
#define INVAR_HARNESS_CHECKPOINT_ID_H

#include <stdbool.h>  // bool

// The identity of `dir` into *out (malloc'd, the caller frees). False with the file and cause
// in err when a file cannot be read.
bool checkpoint_id_compute(const char *dir, bool full, char **out, char *err, int err_len);

// Whether a recorded identity and a fresh one are the same; when not, `what` names the first
// difference: "model.safetensors: mtime was S, now S'", "config.json: xxh64 was H, now H'",
// "x.safetensors: gone", "y.safetensors: new".
bool checkpoint_id_same(const char *was, const char *now, char *what, int what_len);

#endif
