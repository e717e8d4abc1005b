// harness/check/op_run.c — the one run that every op of the table shares: rows built from their
// seeds into the buffers the op's section declares (harness/check/ops/op_section.h), outputs
// poisoned, the op called, outputs downloaded and checked written, gaps and unused slots checked
// untouched.
#include "op_run.h"

#include <math.h>                   // ldexpf, fabsf
#include <stdlib.h>                 // free
#include <string.h>                 // memcpy, memset

#include "../../kernels/bf16.h"     // float_to_bf16, bf16_to_float
#include "../../common/check.h"    // invar_malloc, invar_calloc, invar_die
#include "../../common/hash.h"     // invar_mix64, invar_uniform
#include "ops/op_section.h"         // op_section, op_buffer, op_batch, the sections

// --- random inputs ---------------------------------------------------------------------------

op_rng op_rng_from(uint64_t seed, uint64_t stream) {
    return (op_rng){invar_mix64(seed ^ invar_mix64(stream))};
}
uint64_t op_rng_u64(op_rng *r) { return invar_mix64(r->state++); }
float op_rng_float(op_rng *r, float lo, float hi) {
    return lo + (hi - lo) * invar_uniform(op_rng_u64(r));
}
int op_rng_int(op_rng *r, int n) { return (int)(op_rng_u64(r) % (uint64_t)n); }

void op_fill_bf16(bf16 *p, long n, op_rng *r, float lo, float hi) {
    for (long i = 0; i < n; i++) p[i] = float_to_bf16(op_rng_float(r, lo, hi));
}

// Magnitudes spread over 2^-6..2^6 with random signs: large terms swamp small ones and partly
// cancel, so the fp32 error of a sum depends on its order by more than an ulp and survives the
// bf16 rounding of the output more often than with values of one magnitude.
void op_fill_bf16_wide(bf16 *p, long n, op_rng *r, float scale) {
    for (long i = 0; i < n; i++) {
        float v = scale * op_rng_float(r, 0.5f, 1.0f) * ldexpf(1.0f, op_rng_int(r, 13) - 6);
        p[i] = float_to_bf16(op_rng_int(r, 2) ? v : -v);
    }
}

void op_fill_bf16_patterns(bf16 *p, long n, op_rng *r, float max_abs) {
    for (long i = 0; i < n; i++) {
        bf16 v;
        do v = (bf16)op_rng_u64(r);
        while (!(fabsf(bf16_to_float(v)) <= max_abs));  // NaN fails too
        p[i] = v;
    }
}

void op_distinct_ids(int32_t *ids, int k, int n, op_rng *r) {
    for (int j = 0; j < k; j++) {
        int id;
        bool seen;
        do {
            id = op_rng_int(r, n);
            seen = false;
            for (int i = 0; i < j; i++) seen |= ids[i] == id;
        } while (seen);
        ids[j] = id;
    }
}

void op_shuffle(int32_t *perm, int n, op_rng *r) {
    for (int i = 0; i < n; i++) perm[i] = i;
    for (int i = n - 1; i > 0; i--) {
        int j = op_rng_int(r, i + 1);
        int32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

// --- the case: declared buffers and shared inputs ---------------------------------------------

int op_buffer_add(op_case *c, enum op_buffer_kind kind, const char *what, int elem,
                  int per_row, long width, long ld) {
    if (c->n_buf == OP_MAX_BUFFERS || ld < width)
        invar_die(INVAR_EXIT_INPUT, "op table: buffer %s: too many buffers or ld < width",
                  what);
    c->buf[c->n_buf] = (op_buffer){kind, what, elem, per_row, width, ld, 1};
    return c->n_buf++;
}

static void *dev_upload(ops_set *ops, const void *host, size_t bytes, const char *what) {
    void *d = ops->alloc(ops, bytes, what);
    ops->upload(ops, d, host, bytes);
    return d;
}

void op_shared_take(op_case *c, int i, void *host, size_t bytes, const char *what) {
    c->host[i] = host;
    c->shared[i] = dev_upload(c->ops, host, bytes, what);
}

void op_shared_bf16(op_case *c, int i, long n, float lo, float hi, const char *what) {
    op_rng r = op_rng_from(c->seed, 1000 + (uint64_t)i);
    bf16 *host = invar_malloc((size_t)n * sizeof(bf16), what);
    op_fill_bf16(host, n, &r, lo, hi);
    op_shared_take(c, i, host, (size_t)n * sizeof(bf16), what);
}

op_case *op_case_open(const op_entry *op, ops_set *ops, const op_shape *shape, uint64_t seed) {
    op_case *c = invar_calloc(1, sizeof *c, "kernel check case");
    c->ops = ops;
    c->s = shape;
    c->seed = seed;
    c->section = op->section;
    c->fill = thread_pool_create(0);
    op->section->declare(c);
    return c;
}

// Host memory the set uploads from without a wait where it has such memory, else plain.
static bool pinned(const ops_set *ops) { return ops->alloc_host && ops->upload_async; }

// Buffer i's host and device copies given back (none is fine).
static void case_room_release(op_case *c, int i) {
    if (c->dev[i]) c->ops->release(c->ops, c->dev[i]);
    if (pinned(c->ops)) c->ops->release_host(c->ops, c->stage[i]);
    else free(c->stage[i]);
    c->dev[i] = c->stage[i] = NULL;
    c->room[i] = 0;
}

void op_case_close(op_case *c) {
    if (c->state_free) c->state_free(c);
    for (int i = 0; i < OP_MAX_BUFFERS; i++) case_room_release(c, i);
    for (int i = 0; i < OP_MAX_SHARED; i++) {
        if (c->shared[i]) c->ops->release(c->ops, c->shared[i]);
        free(c->host[i]);
    }
    thread_pool_destroy(c->fill);
    free(c);
}

static bool is_output(const op_buffer *b) { return b->kind == OP_OUT || b->kind == OP_ROW_INOUT; }
static bool is_row_input(const op_buffer *b) {
    return b->kind == OP_ROW_IN || b->kind == OP_ROW_INOUT;
}
// Bytes of one row (one slot) of a per-row buffer.
static size_t slot_bytes(const op_buffer *b) { return (size_t)b->per_row * b->ld * b->elem; }

size_t op_case_row_bytes(const op_case *c) {
    size_t n = 0;
    for (int i = 0; i < c->n_buf; i++)
        if (is_output(&c->buf[i])) n += slot_bytes(&c->buf[i]);
    return n;
}

double op_case_error(op_case *c, uint64_t row_seed, const void *row_out) {
    return c->section->error(c, row_seed, row_out);
}

typedef struct {
    op_case *c;
    const uint64_t *seeds;
    const void *const *rows;
    double *errs;
} errors_job;

static void error_range(void *arg, long begin, long end) {
    const errors_job *j = arg;
    for (long i = begin; i < end; i++) j->errs[i] = op_case_error(j->c, j->seeds[i], j->rows[i]);
}

// Safe on the pool: an oracle builds its one row with op_row_alone, which never uses the pool
// (op_for_rows runs a single row on the calling thread).
void op_case_errors(op_case *c, int n, const uint64_t *seeds, const void *const *rows, double *errs) {
    errors_job j = {c, seeds, rows, errs};
    op_for_rows(c, n, error_range, &j);
}

// --- rows and batches ------------------------------------------------------------------------

// Buffer i's host and device copies, grown to hold at least bytes; the host copy is returned.
static void *case_room(op_case *c, int i, size_t bytes) {
    ops_set *ops = c->ops;
    if (bytes == 0) bytes = 1;
    if (bytes > c->room[i]) {
        case_room_release(c, i);
        c->stage[i] = pinned(ops) ? ops->alloc_host(ops, bytes, c->buf[i].what)
                                  : invar_malloc(bytes, c->buf[i].what);
        c->dev[i] = ops->alloc(ops, bytes, c->buf[i].what);
        c->room[i] = bytes;
    }
    return c->stage[i];
}

void *op_batch_input(op_batch *b, op_case *c, int i, long elems) {
    b->elems[i] = elems;
    b->host[i] = case_room(c, i, (size_t)(elems > 0 ? elems : 0) * c->buf[i].elem);
    return b->host[i];
}

void op_for_rows(const op_case *c, long n, thread_pool_fn fn, void *arg) {
    if (n > 1 && c->fill) thread_pool_for(c->fill, n, fn, arg);
    else if (n > 0) fn(arg, 0, n);
}

typedef struct {
    const op_case *c;
    const uint64_t *seeds;
    void **host;
} rows_job;

static void build_row_range(void *arg, long begin, long end) {
    const rows_job *j = arg;
    const op_case *c = j->c;
    void *in[OP_MAX_BUFFERS] = {0};
    for (long m = begin; m < end; m++) {
        for (int i = 0; i < c->n_buf; i++)
            if (is_row_input(&c->buf[i]))
                in[i] = (unsigned char *)j->host[i] + (size_t)m * slot_bytes(&c->buf[i]);
        c->section->row(c, j->seeds[m], in);
    }
}

// Input bytes under which a batch's rows are built on the calling thread: waking the pool
// costs more than a few small rows (most batches of the small-batch pass are 1 to 3 rows).
#define BUILD_ALONE_BYTES (128 << 10)

// Builds rows [0, n) of the per-row input buffers in host[] from seeds; gaps stay poisoned.
static void build_rows(const op_case *c, int n, const uint64_t *seeds, void **host) {
    if (!c->section->row) return;
    rows_job j = {c, seeds, host};
    size_t bytes = 0;
    for (int i = 0; i < c->n_buf; i++)
        if (is_row_input(&c->buf[i])) bytes += (size_t)n * slot_bytes(&c->buf[i]);
    if (bytes < BUILD_ALONE_BYTES) build_row_range(&j, 0, n);
    else op_for_rows(c, n, build_row_range, &j);
}

void **op_row_alone(const op_case *c, uint64_t seed) {
    void **in = invar_calloc(OP_MAX_BUFFERS, sizeof *in, "kernel check row");
    for (int i = 0; i < c->n_buf; i++)
        if (is_row_input(&c->buf[i])) {
            in[i] = invar_malloc(slot_bytes(&c->buf[i]), c->buf[i].what);
            memset(in[i], OP_POISON, slot_bytes(&c->buf[i]));
        }
    build_rows(c, 1, &seed, in);
    return in;
}

void op_row_free(const op_case *c, void **in) {
    for (int i = 0; i < c->n_buf; i++) free(in[i]);
    free(in);
}

// Whether element i (of elem bytes) of host still holds the poison.
static bool poisoned(const unsigned char *host, long i, int elem) {
    for (int k = 0; k < elem; k++)
        if (host[(size_t)i * elem + k] != OP_POISON) return false;
    return true;
}

// Every sub-row of a used slot written up to width and untouched past it; unused slots
// untouched.
static bool check_written(const op_buffer *f, const unsigned char *host, int M,
                          const int32_t *row_slot) {
    int slots = M * f->slots_per_row;
    bool *used = invar_calloc((size_t)slots, sizeof *used, "kernel check slots");
    for (int m = 0; m < M; m++) used[row_slot ? row_slot[m] : m] = true;
    bool ok = true;
    for (long s = 0; s < slots; s++)
        for (long r = 0; r < f->per_row; r++)
            for (long e = 0; e < f->ld; e++) {
                long i = (s * f->per_row + r) * f->ld + e;
                ok &= poisoned(host, i, f->elem) == (!used[s] || e >= f->width);
            }
    free(used);
    return ok;
}

bool op_case_run(op_case *c, int M, const uint64_t *seeds, void *out) {
    ops_set *ops = c->ops;
    op_batch b = {.M = M, .seeds = seeds};
    for (int i = 0; i < c->n_buf; i++) {
        op_buffer *f = &c->buf[i];
        if (f->kind == OP_BATCH_IN) continue;
        b.elems[i] = (long)M * f->slots_per_row * f->per_row * f->ld;
        b.host[i] = case_room(c, i, (size_t)b.elems[i] * f->elem);
        memset(b.host[i], OP_POISON, (size_t)b.elems[i] * f->elem);  // outputs and gaps
    }
    build_rows(c, M, seeds, b.host);
    if (c->section->batch) c->section->batch(c, &b);
    for (int i = 0; i < c->n_buf; i++) {
        size_t bytes = (size_t)b.elems[i] * c->buf[i].elem;
        if (!b.host[i]) b.host[i] = case_room(c, i, 0);  // a batch input the batch left empty
        b.dev[i] = c->dev[i];
        if (pinned(ops)) ops->upload_async(ops, b.dev[i], b.host[i], bytes);
        else ops->upload(ops, b.dev[i], b.host[i], bytes);
    }
    c->section->call(c, &b);
    ops->sync(ops);

    bool ok = true;
    size_t row_bytes = op_case_row_bytes(c), at = 0;
    for (int i = 0; i < c->n_buf; i++) {
        const op_buffer *f = &c->buf[i];
        if (!is_output(f)) continue;
        ops->download(ops, b.host[i], b.dev[i], (size_t)b.elems[i] * f->elem);
        const int32_t *slot = f->slots_per_row > 1 ? b.row_slot : NULL;
        ok &= check_written(f, b.host[i], M, slot);
        for (int m = 0; m < M; m++)
            memcpy((unsigned char *)out + (size_t)m * row_bytes + at,
                   (unsigned char *)b.host[i] + (size_t)(slot ? slot[m] : m) * slot_bytes(f),
                   slot_bytes(f));
        at += slot_bytes(f);
    }
    free(b.row_slot);
    return ok;
}
