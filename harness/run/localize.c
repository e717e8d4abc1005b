// harness/run/localize.c — the first differing op of a differing request (harness/run/localize.h).
//
// Runs on one engine whose rank 0 set is tapped: the request alone (every row it holds, hashed
// per op call), the batch (each row compared on the fly with the alone run's row of the same
// key; the first that differs is kept, bytes and all; rerun while none differs, up to
// LOCALIZE_BATCH_RERUNS times), and the request alone once more, keeping that key's row, so
// the two rows can be told apart element by element.
#include "localize.h"

#include <stdio.h>                      // snprintf
#include <stdlib.h>                     // free
#include <string.h>                     // memcpy, memcmp, strcmp

#include "../../common/check.h"        // invar_calloc, invar_malloc
#include "../../engine/tp_engine.h"     // tp_engine_*
#include "compare.h"                    // float_ulp_distance

static op_tap_rows_kind tap_kind(engine_rows_kind k) {
    return k == ENGINE_ROWS_KEYS ? OP_TAP_KEYS : k == ENGINE_ROWS_SAMPLES ? OP_TAP_SAMPLES
                                                                          : OP_TAP_TOKENS;
}

static void observe_rows(void *ctx, int layer, engine_rows_kind kind, const int32_t *request,
                         const int32_t *position, int n) {
    op_tap_rows(ctx, layer, tap_kind(kind), request, position, n);
}

// --- ULPs --------------------------------------------------------------------------------------

static long long bf16_ordered(uint16_t u) {
    long long magnitude = u & 0x7fff;
    return (u & 0x8000) ? -magnitude : magnitude;
}

long long localize_max_ulps(const op_tap_row *a, const op_tap_row *b, long *at,
                            long *ids_differing) {
    *at = -1;
    *ids_differing = 0;
    if (a->n_segments != b->n_segments || a->n_bytes != b->n_bytes) return -1;
    for (int s = 0; s < a->n_segments; s++)
        if (a->type[s] != b->type[s] || a->count[s] != b->count[s]) return -1;
    long long worst = 0;
    size_t offset = 0;
    long element = 0;
    for (int s = 0; s < a->n_segments; s++) {
        for (long i = 0; i < a->count[s]; i++, element++) {
            long long d = 0;
            if (a->type[s] == OP_TAP_BF16) {
                uint16_t x, y;
                memcpy(&x, a->bytes + offset, 2);
                memcpy(&y, b->bytes + offset, 2);
                offset += 2;
                d = bf16_ordered(x) - bf16_ordered(y);
                if (d < 0) d = -d;
            } else if (a->type[s] == OP_TAP_F32) {
                float x, y;
                memcpy(&x, a->bytes + offset, 4);
                memcpy(&y, b->bytes + offset, 4);
                offset += 4;
                d = (long long)float_ulp_distance(x, y);
            } else {
                *ids_differing += memcmp(a->bytes + offset, b->bytes + offset, 4) != 0;
                offset += 4;
            }
            if (d > worst) {
                worst = d;
                *at = element;
            }
        }
    }
    return worst;
}

// --- the text ----------------------------------------------------------------------------------

static int where(char *buf, size_t len, const op_tap_entry *e, int layers) {
    const char *kind = e->kind == OP_TAP_KEYS ? " (a context key)"
                       : e->kind == OP_TAP_SAMPLES ? " (its logits row)" : "";
    if (e->layer < 0)
        return snprintf(buf, len, "at the embedding, call %d, position %d%s", e->ordinal,
                        e->position, kind);
    if (e->layer >= layers)
        return snprintf(buf, len, "in the head, call %d, position %d%s", e->ordinal,
                        e->position, kind);
    return snprintf(buf, len, "in layer %d, call %d, position %d%s", e->layer, e->ordinal,
                    e->position, kind);
}

// The text of a first differing pair: a (alone) and b (in the batch), their rows where kept.
static void localize_describe(const op_tap_entry *a, const op_tap_entry *b, const op_tap_row *ra,
                              const op_tap_row *rb, const char *alone_label,
                              const char *batch_label, int layers, localization *out) {
    char place[160], ulps[160] = "";
    where(place, sizeof place, b, layers);
    out->found = true;
    snprintf(out->op, sizeof out->op, "%s", b->op);
    if (strcmp(a->op, b->op) != 0) {
        snprintf(out->text, sizeof out->text, "%s (%s) %s: M=%d row %d %s, where the run %s "
                 "ran %s (%s) M=%d row %d: the path differs", b->op, b->shape, place, b->M,
                 b->row, batch_label, alone_label, a->op, a->shape, a->M, a->row);
        return;
    }
    if (ra && rb) {
        long at, ids;
        long long u = localize_max_ulps(ra, rb, &at, &ids);
        if (u < 0) snprintf(ulps, sizeof ulps, "; the rows have other sizes");
        else if (u > 0)
            snprintf(ulps, sizeof ulps, "; max %lld ulp%s (element %ld)%s", u, u == 1 ? "" : "s",
                     at, ids ? ", ids differ too" : "");
        else if (ids) snprintf(ulps, sizeof ulps, "; %ld ids differ", ids);
        else snprintf(ulps, sizeof ulps, "; max 0 ulps (only the sign of a zero or a NaN's bits)");
    }
    snprintf(out->text, sizeof out->text, "%s (%s) %s: M=%d row %d %s, M=%d row %d %s%s",
             b->op, b->shape, place, a->M, a->row, alone_label, b->M, b->row, batch_label, ulps);
}

// --- the runs ----------------------------------------------------------------------------------

// A bug whose order hangs on timing (which CTA of a split lands last) can match the alone run in
// one batched rerun and differ in the next: the batch is rerun until a row differs, this often.
enum { LOCALIZE_BATCH_RERUNS = 3 };

// One run; its records are not read (the tap has what localization needs).
static bool run(tp_engine *eng, const localize_run *r, localization *out) {
    engine_result *res = invar_calloc((size_t)r->count, sizeof *res, "localization results");
    for (int i = 0; i < r->count; i++) {
        res[i].steps = invar_calloc((size_t)r->reqs[i].max_new_tokens + 1, sizeof *res[i].steps,
                                    "localization records");
        if (r->reqs[i].prompt_logprobs)
            res[i].prompt_steps = invar_calloc((size_t)r->reqs[i].prompt_len + 1,
                                               sizeof *res[i].prompt_steps, "localization records");
    }
    char err[512] = "";
    bool ok = tp_engine_generate(eng, r->reqs, r->count, &r->sched, res, NULL, err, sizeof err);
    if (!ok)
        snprintf(out->text, sizeof out->text, "localization: the engine refused the rerun %s: %.300s",
                 r->label, err);
    for (int i = 0; i < r->count; i++) {
        free(res[i].steps);
        free(res[i].prompt_steps);
    }
    free(res);
    return ok;
}

static op_tap_row copy_row(const op_tap_row *r) {
    op_tap_row c = *r;
    c.bytes = invar_malloc(r->n_bytes ? r->n_bytes : 1, "localized row");
    memcpy(c.bytes, r->bytes, r->n_bytes);
    return c;
}

// A fresh engine over rank_ops with rank 0's set tapped.
typedef struct {
    op_tap *tap;
    ops_set **ops;
    tp_engine *eng;
} tapped_engine;

static tapped_engine tapped_engine_create(ops_set *const *rank_ops, int ranks,
                                          const model_config *mc, weight_source *w,
                                          const engine_limits *limits, uint64_t seed) {
    tapped_engine t = {.tap = op_tap_wrap(rank_ops[0])};
    t.ops = invar_calloc((size_t)ranks, sizeof *t.ops, "tapped rank sets");
    for (int k = 0; k < ranks; k++) t.ops[k] = rank_ops[k];
    t.ops[0] = op_tap_set(t.tap);
    t.eng = tp_engine_create(mc, w, t.ops, ranks, limits, seed);
    tp_engine_observe_rows(t.eng, observe_rows, t.tap);
    return t;
}

static void tapped_engine_destroy(tapped_engine *t) {
    tp_engine_destroy(t->eng);
    op_tap_destroy(t->tap);
    free(t->ops);
}

bool localize_nonfinite(ops_set *const *rank_ops, int ranks, const model_config *mc,
                        weight_source *w, const engine_limits *limits, uint64_t seed,
                        const localize_run *alone, localization *out) {
    *out = (localization){0};
    tapped_engine t = tapped_engine_create(rank_ops, ranks, mc, w, limits, seed);
    op_tap_follow(t.tap, alone->follow);
    bool ran = run(t.eng, alone, out);
    int n;
    const op_tap_entry *e = op_tap_entries(t.tap, &n);
    int k = 0;
    while (k < n && e[k].nonfinite == 0) k++;
    if (k < n) {
        char place[160];
        where(place, sizeof place, &e[k], mc->num_hidden_layers);
        out->found = true;
        snprintf(out->op, sizeof out->op, "%s", e[k].op);
        snprintf(out->text, sizeof out->text, "%s (%s) %s: M=%d row %d %s: the first output "
                 "holding a NaN or an infinity (%ld element%s of the row; the run alone failed)",
                 e[k].op, e[k].shape, place, e[k].M, e[k].row, alone->label, e[k].nonfinite,
                 e[k].nonfinite == 1 ? "" : "s");
    } else if (ran) {
        snprintf(out->text, sizeof out->text, "no op's %d rows of the request %s held a NaN or "
                 "an infinity (the run alone failed past the ops)", n, alone->label);
    } else {
        char why[LOCALIZE_TEXT];
        snprintf(why, sizeof why, "%s", out->text);
        snprintf(out->text, sizeof out->text, "no op's %d rows of the request %s held a NaN or "
                 "an infinity (%.400s)", n, alone->label, why);
    }
    tapped_engine_destroy(&t);
    return out->found || ran;
}

bool localize_request(ops_set *const *rank_ops, int ranks, const model_config *mc,
                      weight_source *w, const engine_limits *limits, uint64_t seed,
                      const localize_run *alone, const localize_run *batch, localization *out) {
    *out = (localization){0};
    tapped_engine t = tapped_engine_create(rank_ops, ranks, mc, w, limits, seed);
    op_tap *tap = t.tap;
    tp_engine *eng = t.eng;
    op_tap_entry *first = NULL;
    op_tap_row batch_row = {0};
    bool ok = true;

    op_tap_follow(tap, alone->follow);
    int attempt = 0;
    bool batch_failed = false;
    if ((ok = run(eng, alone, out))) {
        int n_alone;
        const op_tap_entry *e = op_tap_entries(tap, &n_alone);
        op_tap_entry *alone_entries = invar_malloc((size_t)(n_alone ? n_alone : 1) * sizeof *e,
                                                   "alone rows");
        memcpy(alone_entries, e, (size_t)n_alone * sizeof *e);
        int n_batch = 0, m = -1;
        while (ok && m < 0 && attempt < LOCALIZE_BATCH_RERUNS) {
            attempt++;
            op_tap_follow(tap, batch->follow);
            op_tap_expect(tap, alone_entries, n_alone);
            ok = run(eng, batch, out);
            m = op_tap_first_mismatch(tap);
            // A batch that fails (a sampled id outside the vocabulary) after a row differed
            // still names that row's op: the failure is where its difference led.
            if (!ok && m >= 0) ok = batch_failed = true;
        }
        free(alone_entries);
        const op_tap_entry *b = op_tap_entries(tap, &n_batch);
        if (ok && m < 0) {
            long unplaced = op_tap_unplaced(tap);
            snprintf(out->text, sizeof out->text, "no op differs: in %d reruns the %d rows of the "
                     "request %s matched the %d %s%s", attempt, n_batch, batch->label, n_alone,
                     alone->label, unplaced ? " (some calls could not be placed)" : "");
        } else if (ok) {
            first = invar_malloc(2 * sizeof *first, "first differing rows");
            first[1] = b[m];
            first[0] = *op_tap_expected(tap, b[m].key);
            if (op_tap_captured(tap)) batch_row = copy_row(op_tap_captured(tap));
        }
    }
    if (ok && first) {
        op_tap_follow(tap, alone->follow);
        op_tap_capture(tap, first[1].key, 0);
        if ((ok = run(eng, alone, out))) {
            localize_describe(&first[0], &first[1], op_tap_captured(tap),
                              batch_row.bytes ? &batch_row : NULL, alone->label, batch->label,
                              mc->num_hidden_layers, out);
            size_t used = strlen(out->text);
            if (attempt > 1)
                snprintf(out->text + used, sizeof out->text - used, " (in batch rerun %d of %d: "
                         "the earlier ones matched)", attempt, LOCALIZE_BATCH_RERUNS);
            used = strlen(out->text);
            if (batch_failed)
                snprintf(out->text + used, sizeof out->text - used, "; the batched rerun then "
                         "failed as the run did");
        }
    }
    free(first);
    free(batch_row.bytes);
    tapped_engine_destroy(&t);
    return ok;
}
