// harness/check/ops/collective.c — the kernel checker's all-reduce (harness/check/ops/op_section.h).
//
// A row is W values of one token on each of T ranks (a token's slice of a row-parallel
// output): row m sits at offset m * W of every rank's message of M * W elements, so the batch
// moves both the row's offset and the message size, the two things a ring's chunking reads.
// all_reduce sums bf16 messages; all_reduce_f32_tree, the TP-size-invariant mode's, fp32 ones
// (CPU sets only: the CUDA sets have no such op yet).
// The T ranks are T threads (common/rank_threads.h): on the CPU over one CPU communicator, on
// CUDA one GPU each over NCCL. Each rank's result for the row is compared, so a rank that
// disagrees with the others shows too.
#include <math.h>                          // ldexpf
#include <stdlib.h>                        // free
#include <string.h>                        // memcpy

#include "../../../common/check.h"         // invar_malloc, invar_calloc, invar_die
#include "../../../kernels/bf16.h"         // float_to_bf16
#include "../../../common/rank_threads.h"  // rank_threads_run
#include "../../../kernels/cpu/collective.h" // tp_comm_group_*
#include "../../../kernels/f64/f64.h"      // f64_all_reduce, f64_rel_l2_bf16
#include "../../../sets/registry.h"        // kernel_set_create_for_rank
#include "op_section.h"                    // op_section, op_buffer_add, op_rng

// contributions [M][T][W] as rows are built; messages [T][M*W] as ranks hold them; gather:
// the message row each output sub-row comes from; out [M][T][W], every rank's result.
enum { AR_IN = 0, AR_MSG = 1, AR_GATHER = 2, AR_OUT = 3 };

// W = 61: odd, so a ring's chunk boundaries (n * c / T) fall inside rows, at other places for
// every M. T = 2 cannot vary (two addends commute); from T = 3 on the reference and
// adversarial sets must be caught at each shape.
const op_shape all_reduce_cpu_shapes[] = {
    {.label = "T=2 W=61", .all_reduce = {.T = 2, .W = 61}, .max_M = 1024, .quick = true},
    {.label = "T=3 W=61", .all_reduce = {.T = 3, .W = 61}, .max_M = 1024, .quick = true,
     .must_vary = true},
    {.label = "T=4 W=61", .all_reduce = {.T = 4, .W = 61}, .max_M = 1024, .must_vary = true},
    {.label = "T=8 W=61", .all_reduce = {.T = 8, .W = 61}, .max_M = 1024, .quick = true,
     .must_vary = true},
    // A real model's message: hidden 7168 (DeepSeek-V3) at up to 256 tokens, past 2^20
    // elements from 147 tokens on, where an all-reduce may change algorithm.
    {.label = "T=4 W=7168", .all_reduce = {.T = 4, .W = 7168}, .max_M = 256, .must_vary = true},
    // --exhaustive: fewer values than ranks (empty ring chunks); an odd rank count over a
    // width off every multiple of it
    {.label = "T=3 W=2", .all_reduce = {.T = 3, .W = 2}, .max_M = 1024, .exhaustive = true,
     .must_vary = true},
    {.label = "T=5 W=1003", .all_reduce = {.T = 5, .W = 1003}, .max_M = 256, .exhaustive = true,
     .must_vary = true},
    {.label = NULL},
};
// On CUDA a rank is a GPU: a shape needs T of them (.devices) and is skipped, visibly, on a
// machine with fewer. T = 2 is what the two-GPU hosts measure (two addends commute: nothing can
// vary, every set must be stable and accurate); T = 4 and 8 are for machines not lent yet.
// W = 2048 is a V2-Lite hidden row: messages up to 2M elements, where NCCL changes protocol.
const op_shape all_reduce_cuda_shapes[] = {
    {.label = "T=2 W=61", .all_reduce = {.T = 2, .W = 61}, .max_M = 1024, .devices = 2,
     .quick = true},
    {.label = "T=2 W=2048", .all_reduce = {.T = 2, .W = 2048}, .max_M = 1024, .devices = 2},
    // A real hidden size: from M = 293 the message passes 8192 blocks x 256 threads and the
    // sum kernel's grid strides (at M = 256 it does not)
    {.label = "T=2 W=7168", .all_reduce = {.T = 2, .W = 7168}, .max_M = 1024, .devices = 2,
     .invariant_sets_only = true},
    {.label = "T=4 W=7168", .all_reduce = {.T = 4, .W = 7168}, .max_M = 1024, .devices = 4,
     .invariant_sets_only = true},
    {.label = "T=4 W=61", .all_reduce = {.T = 4, .W = 61}, .max_M = 1024, .devices = 4,
     .quick = true, .must_vary = true},
    {.label = "T=8 W=61", .all_reduce = {.T = 8, .W = 61}, .max_M = 1024, .devices = 8,
     .must_vary = true},
    {.label = NULL},
};

// The fp32 form: the same rows (residuals 2^-24 .. 2^-28 of B, below fp32's ulp of B), W = 61.
const op_shape all_reduce_f32_tree_cpu_shapes[] = {
    {.label = "T=2 W=61", .all_reduce = {.T = 2, .W = 61}, .max_M = 1024, .quick = true},
    {.label = "T=4 W=61", .all_reduce = {.T = 4, .W = 61}, .max_M = 1024, .quick = true,
     .must_vary = true},
    {.label = "T=8 W=61", .all_reduce = {.T = 8, .W = 61}, .max_M = 1024, .must_vary = true},
    {.label = "T=4 W=7168", .all_reduce = {.T = 4, .W = 7168}, .max_M = 256, .must_vary = true},
    {.label = NULL},
};
// On GPUs: a rank a GPU; the tree's order shows from T = 4 (the reference's NCCL ring from 3).
const op_shape all_reduce_f32_tree_cuda_shapes[] = {
    {.label = "T=2 W=61", .all_reduce = {.T = 2, .W = 61}, .max_M = 1024, .devices = 2, .quick = true},
    {.label = "T=2 W=7168", .all_reduce = {.T = 2, .W = 7168}, .max_M = 1024, .devices = 2,
     .invariant_sets_only = true},
    {.label = "T=4 W=61", .all_reduce = {.T = 4, .W = 61}, .max_M = 1024, .devices = 4, .quick = true,
     .must_vary = true},
    {.label = "T=8 W=61", .all_reduce = {.T = 8, .W = 61}, .max_M = 1024, .devices = 8, .must_vary = true},
    {.label = NULL},
};

static bool is_f32(const op_case *c) { return c->section == &all_reduce_f32_tree_op; }
static size_t elem_size(const op_case *c) { return is_f32(c) ? sizeof(float) : sizeof(bf16); }

static void all_reduce_declare(op_case *c) {
    int T = c->s->all_reduce.T, W = c->s->all_reduce.W, e = (int)elem_size(c);
    op_buffer_add(c, OP_ROW_IN, "all_reduce contributions", e, T, W, W);
    op_buffer_add(c, OP_BATCH_IN, "all_reduce messages", e, 1, 1, 1);
    op_buffer_add(c, OP_BATCH_IN, "all_reduce result rows", sizeof(int32_t), 1, 1, 1);
    op_buffer_add(c, OP_OUT, "all_reduce results", e, T, W, W);
}

// Element i of a row's values, stored as the op's element type holds it.
static void put(const op_case *c, void *v, long i, float x) {
    if (is_f32(c)) ((float *)v)[i] = x;
    else ((bf16 *)v)[i] = float_to_bf16(x);
}

// Each rank's values at its own magnitude, as row-parallel partial sums are. The odd elements
// from 3 on hold a cancelling pair (two ranks with +B and -B, as partial sums of opposite sign do) and
// residuals on the other ranks small enough that the rounding of B + residual is as large as the
// result itself: 2^-14 .. 2^-18 of B for bf16 messages (the fp32 sum is rounded to bf16), 2^-24
// .. 2^-28 for fp32 ones (below fp32's ulp of B). So a change in the order of the fp32 sum shows in
// the output. Without such elements every order of at most 8 bf16 addends rounds to the same bf16
// (the fp32 difference is 2^16 times below the output's ulp), and only a per-hop bf16 rounding
// (a ring) could show: that data let a pairwise tree over the ranks for big messages through
// (mutant held-all-reduce-tree-large-message).
static void all_reduce_row(const op_case *c, uint64_t seed, void *const *in) {
    int T = c->s->all_reduce.T, W = c->s->all_reduce.W, tiny = is_f32(c) ? -24 : -14;
    op_rng r = op_rng_from(seed, 17);
    void *v = in[AR_IN];  // [T][W]
    for (int rank = 0; rank < T; rank++) {
        float scale = op_rng_float(&r, 0.1f, 4.0f);
        for (int j = 0; j < W; j++) put(c, v, (long)rank * W + j, op_rng_float(&r, -scale, scale));
    }
    // Odd elements from 3 on: elements 0-2 keep a row's norm at the ranks' scale (a row of W = 2
    // has none), so a ring's per-hop rounding of a cancelled element (the reference set) stays
    // within the accuracy tolerance.
    for (int j = 3; j < W; j += 2) {
        float B = op_rng_float(&r, 0.5f, 4.0f);
        int a = op_rng_int(&r, T), b = (a + 1 + op_rng_int(&r, T - 1 > 0 ? T - 1 : 1)) % T;
        for (int rank = 0; rank < T; rank++) {
            float x = B * op_rng_float(&r, 0.5f, 1.0f) * ldexpf(1.0f, tiny - op_rng_int(&r, 5));
            put(c, v, (long)rank * W + j, op_rng_int(&r, 2) ? x : -x);
        }
        if (T > 1) {
            put(c, v, (long)a * W + j, B);
            put(c, v, (long)b * W + j, -B);
        }
    }
}

static void all_reduce_batch(op_case *c, op_batch *b) {
    int T = c->s->all_reduce.T, W = c->s->all_reduce.W, M = b->M;
    long n = (long)M * W;
    size_t e = elem_size(c);
    const char *rows = b->host[AR_IN];
    char *msg = op_batch_input(b, c, AR_MSG, (long)T * n);
    int32_t *gather = op_batch_input(b, c, AR_GATHER, (long)M * T);
    for (int m = 0; m < M; m++)
        for (int rank = 0; rank < T; rank++) {
            memcpy(msg + ((long)rank * n + (long)m * W) * e, rows + ((long)m * T + rank) * W * e,
                   (size_t)W * e);
            gather[m * T + rank] = rank * M + m;
        }
}

typedef struct {
    ops_set *ops;
    tp_comm_group *group;
    void *messages;
    long n;
    bool f32;
} ranks_job;

static void reduce_as_rank(void *arg, int rank) {
    const ranks_job *j = arg;
    tp_comm *comm = tp_comm_group_rank(j->group, rank);
    if (j->f32) j->ops->all_reduce_f32_tree(j->ops, comm, (float *)j->messages + rank * j->n, j->n);
    else j->ops->all_reduce(j->ops, comm, (bf16 *)j->messages + rank * j->n, j->n);
}

// The ranks share the case's one ops_set: the CPU sets' all-reduce reads nothing of it but
// its order policy.
static void all_reduce_call_cpu(op_case *c, const op_batch *b) {
    int T = c->s->all_reduce.T, W = c->s->all_reduce.W;
    ranks_job j = {c->ops, tp_comm_group_create(T), b->dev[AR_MSG], (long)b->M * W, is_f32(c)};
    rank_threads_run(T, reduce_as_rank, &j);
    tp_comm_group_destroy(j.group);
}

// On CUDA rank r is a set of the case's kind on GPU r (rank 0 the case's own set, on the
// current GPU 0) joined by NCCL: made at the shape's first batch and kept until op_case_close,
// since opening an NCCL communicator costs far more than a batch (c->state, freed by
// op_case_close through c->state_free).
typedef struct {
    int T;
    ops_set **ranks;
    tp_comm_group *group;
    bf16 **messages;     // [T]: rank r's message on its own GPU (rank 0: the batch's buffer)
    long capacity;       // elements each of messages[1..T-1] (and host) holds
    long n;              // this batch's message size
    bf16 *host;          // one rank's message, downloaded
} cuda_ranks;

static cuda_ranks *cuda_ranks_open(op_case *c) {
    int T = c->s->all_reduce.T;
    cuda_ranks *cr = invar_calloc(1, sizeof *cr, "all_reduce ranks");
    cr->T = T;
    cr->ranks = invar_calloc((size_t)T, sizeof *cr->ranks, "all_reduce rank sets");
    cr->messages = invar_calloc((size_t)T, sizeof *cr->messages, "all_reduce rank messages");
    cr->ranks[0] = c->ops;
    for (int r = 1; r < T; r++) {
        cr->ranks[r] = kernel_set_create_for_rank(c->ops->name, c->ops->device, 0, r);
        if (!cr->ranks[r])
            invar_die(INVAR_EXIT_SYSTEM, "kernels: no %s set on %s for rank %d", c->ops->name,
                      c->ops->device, r);
    }
    cr->group = tp_comm_group_create(T);
    c->ops->open_group(cr->ranks, T, cr->group);
    return cr;
}

static void all_reduce_close(op_case *c) {
    cuda_ranks *cr = c->state;
    if (!cr) return;
    tp_comm_group_destroy(cr->group);
    for (int r = 1; r < cr->T; r++) {
        if (cr->messages[r]) {
            cr->ranks[r]->bind_thread(cr->ranks[r]);
            cr->ranks[r]->release(cr->ranks[r], cr->messages[r]);
        }
        cr->ranks[r]->destroy(cr->ranks[r]);  // on its own GPU; the caller's device kept
    }
    c->ops->bind_thread(c->ops);
    free(cr->host);
    free(cr->messages);
    free(cr->ranks);
    free(cr);
    c->state = NULL;
}

static void reduce_on_gpu(void *arg, int rank) {
    const cuda_ranks *cr = arg;
    ops_set *ops = cr->ranks[rank];
    ops->bind_thread(ops);  // a fresh thread starts on GPU 0
    ops->all_reduce(ops, tp_comm_group_rank(cr->group, rank), cr->messages[rank], cr->n);
    ops->sync(ops);
}

// Each rank's message from the batch's host copy onto its GPU; the T ranks on T threads; each
// result back into the batch's device buffer at the rank's place, where the gather reads it.
static void all_reduce_call_cuda(op_case *c, const op_batch *b) {
    int T = c->s->all_reduce.T, W = c->s->all_reduce.W;
    long n = (long)b->M * W;
    size_t bytes = (size_t)n * sizeof(bf16);
    if (!c->state) {
        c->state = cuda_ranks_open(c);
        c->state_free = all_reduce_close;
    }
    cuda_ranks *cr = c->state;
    const bf16 *host_messages = b->host[AR_MSG];
    bf16 *dev_messages = b->dev[AR_MSG];
    for (int r = 1; r < T; r++) {
        ops_set *ops = cr->ranks[r];
        ops->bind_thread(ops);
        if (n > cr->capacity && cr->messages[r]) {
            ops->release(ops, cr->messages[r]);
            cr->messages[r] = NULL;
        }
        if (!cr->messages[r]) cr->messages[r] = ops->alloc(ops, bytes, "all_reduce rank message");
        ops->upload(ops, cr->messages[r], host_messages + r * n, bytes);
    }
    c->ops->bind_thread(c->ops);
    if (n > cr->capacity) {
        free(cr->host);
        cr->host = invar_malloc(bytes, "all_reduce rank result");
        cr->capacity = n;
    }
    cr->n = n;
    cr->messages[0] = dev_messages;
    rank_threads_run(T, reduce_on_gpu, cr);
    c->ops->bind_thread(c->ops);  // rank 0 ran on this thread, on GPU 0 already
    for (int r = 1; r < T; r++) {
        cr->ranks[r]->bind_thread(cr->ranks[r]);
        cr->ranks[r]->download(cr->ranks[r], cr->host, cr->messages[r], bytes);
        c->ops->bind_thread(c->ops);
        c->ops->upload(c->ops, dev_messages + r * n, cr->host, bytes);
    }
    cr->messages[0] = NULL;  // the batch's, released by the checker
}

static void all_reduce_call(op_case *c, const op_batch *b) {
    int W = c->s->all_reduce.W;
    if (c->ops->open_group && !is_f32(c)) all_reduce_call_cuda(c, b);
    else all_reduce_call_cpu(c, b);
    // Every rank's result row into the output, row-major by token: a gather is an embedding (an
    // fp32 row copied as twice as many 2-byte values).
    c->ops->embedding(c->ops, b->dev[AR_OUT], b->dev[AR_MSG], b->dev[AR_GATHER],
                      b->M * c->s->all_reduce.T, is_f32(c) ? 2 * W : W);
}

static double all_reduce_error(op_case *c, uint64_t seed, const void *row) {
    int T = c->s->all_reduce.T, W = c->s->all_reduce.W;
    void **in = op_row_alone(c, seed);
    const bf16 *ins[T];
    for (int rank = 0; rank < T; rank++) ins[rank] = (const bf16 *)in[AR_IN] + (long)rank * W;
    double *ref = invar_malloc((size_t)T * W * sizeof(double), "all_reduce oracle");
    f64_all_reduce(ref, ins, T, W);
    for (int rank = 1; rank < T; rank++)
        for (int j = 0; j < W; j++) ref[(long)rank * W + j] = ref[j];
    double err = f64_rel_l2_bf16(row, ref, (long)T * W);
    op_row_free(c, in);
    free(ref);
    return err;
}

static double all_reduce_f32_error(op_case *c, uint64_t seed, const void *row) {
    int T = c->s->all_reduce.T, W = c->s->all_reduce.W;
    void **in = op_row_alone(c, seed);
    const float *v = in[AR_IN];
    double *ref = invar_malloc((size_t)T * W * sizeof(double), "all_reduce oracle");
    for (int j = 0; j < W; j++) {
        double sum = 0.0;
        for (int rank = 0; rank < T; rank++) sum += v[(long)rank * W + j];
        for (int rank = 0; rank < T; rank++) ref[(long)rank * W + j] = sum;
    }
    double err = f64_rel_l2_f32(row, ref, (long)T * W);
    op_row_free(c, in);
    free(ref);
    return err;
}

const op_section all_reduce_op = {all_reduce_declare, all_reduce_row, all_reduce_batch,
                                  all_reduce_call, all_reduce_error};
const op_section all_reduce_f32_tree_op = {all_reduce_declare, all_reduce_row, all_reduce_batch,
                                           all_reduce_call, all_reduce_f32_error};
