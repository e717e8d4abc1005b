// reference/cpu/rmsnorm_blocked.c — RMSNorm whose block shape switches with the token count,
// as GPU norm kernels do: with few rows one row is spread over several chunks (more threads
// per row), their sums of squares merged pairwise; past a token count each row gets one
// chunk. A row's sum of squares, hence its scale, changes with M.
#include "ref_cpu_ops.h"

#include <math.h>                           // sqrtf

#include "../../kernels/bf16.h"             // bf16_to_float, float_to_bf16
#include "../../common/check.h"            // invar_die
#include "../../common/thread_pool.h"  // thread_pool_for
#include "../../kernels/order_log.h"        // order_log_note
#include "ref_cpu_set.h"                    // ref_cpu_policy_of
#include "../../kernels/cpu/inv_cpu.h"        // inv_cpu_pool, inv_cpu_threads

#define MAX_CHUNKS 8
#define MIN_CHUNK 32  // elements; a chunk never shorter than this
#define LANES 4       // interleaved accumulators within a chunk

int ref_rmsnorm_chunks(int M, int D) {
    int chunks = M <= 4 ? 8 : M <= 32 ? 4 : M <= 256 ? 2 : 1;
    while (chunks > 1 && D / chunks < MIN_CHUNK) chunks /= 2;
    return chunks;
}

typedef struct {
    bf16 *out;
    long ld_out, ld_x;
    const bf16 *x, *w;
    int D, chunks;
    float eps;
} rmsnorm_job;

static float chunk_sum_squares(const bf16 *x, int d0, int d1) {
    float acc[LANES] = {0};
    for (int d = d0; d < d1; d++) {
        float v = bf16_to_float(x[d]);
        acc[(d - d0) % LANES] += v * v;
    }
    return (acc[0] + acc[2]) + (acc[1] + acc[3]);
}

static void rmsnorm_rows(void *arg, long begin, long end) {
    const rmsnorm_job *j = arg;
    int chunk = (j->D + j->chunks - 1) / j->chunks;
    for (long m = begin; m < end; m++) {
        const bf16 *x = j->x + m * j->ld_x;
        float partial[MAX_CHUNKS];
        for (int c = 0; c < j->chunks; c++) {
            int d0 = c * chunk, d1 = d0 + chunk < j->D ? d0 + chunk : j->D;
            partial[c] = d0 < d1 ? chunk_sum_squares(x, d0, d1) : 0.0f;
        }
        for (int width = j->chunks / 2; width >= 1; width /= 2)  // pairwise, as a block reduce
            for (int c = 0; c < width; c++) partial[c] += partial[c + width];
        float inv = 1.0f / sqrtf(partial[0] / (float)j->D + j->eps);
        bf16 *out = j->out + m * j->ld_out;
        for (int d = 0; d < j->D; d++) {
            float normed = bf16_to_float(float_to_bf16(bf16_to_float(x[d]) * inv));
            out[d] = float_to_bf16(bf16_to_float(j->w[d]) * normed);
        }
    }
}

void ref_cpu_rmsnorm(ops_set *ops, bf16 *out, long ld_out, const bf16 *x, long ld_x,
                     const bf16 *w, int M, int D, float eps) {
    if (ld_out == 0) ld_out = D;  // 0 means dense, as gemm's strides
    if (ld_x == 0) ld_x = D;
    if (M < 0 || D <= 0 || ld_out < D || ld_x < D)
        invar_die(INVAR_EXIT_INPUT, "rmsnorm (reference cpu): bad shape M=%d D=%d ld_out=%ld ld_x=%ld",
                  M, D, ld_out, ld_x);
    int chunks = ref_cpu_policy_of(ops)->rmsnorm_chunks(M, D);
    if (chunks < 1 || chunks > MAX_CHUNKS)
        invar_die(INVAR_EXIT_INPUT, "rmsnorm (reference cpu): policy chose %d chunks (1..%d)",
                  chunks, MAX_CHUNKS);
    order_log_note(ops->orders, ORDER_RMSNORM, (uint64_t)D, (uint64_t)chunks);
    rmsnorm_job j = {out, ld_out, ld_x, x, w, D, chunks, eps};
    thread_pool_for(inv_cpu_pool(ops), M, rmsnorm_rows, &j);
}
