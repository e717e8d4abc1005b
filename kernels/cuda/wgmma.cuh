// kernels/cuda/wgmma.cuh — Hopper (sm_90a) building blocks: warpgroup MMA, its shared-memory
// operand descriptors and fences, and TMA copies completing on mbarriers.
// Operands: K-major bf16 tiles in the 128-byte swizzle layout (row r at r*128, its 16-byte chunk c
// at chunk c ^ (r % 8)), starting on 1024-byte boundaries. Accumulator fragment of m64nNk16 (f32),
// thread = 32w + 4r + q of the warpgroup: d[4j], d[4j+1] at row 16w + r, cols 8j + 2q, + 1;
// d[4j+2], d[4j+3] at row 16w + r + 8, the same cols.
#ifndef INVAR_KERNELS_CUDA_WGMMA_CUH
#define INVAR_KERNELS_CUDA_WGMMA_CUH

#include <stdint.h>  // uint32_t, uint64_t

#include "../ops.h"  // mla_attention_args
#include "mma.cuh"   // smem_addr, cp_async16, cp_async_commit

// Only in the sm_90a pass; elsewhere its kernels compile to nothing and are never picked.
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define INVAR_WGMMA 1
#else
#define INVAR_WGMMA 0
#endif

// Byte offset of 16-byte chunk `chunk` (0..7) of row `row` in a 128B-swizzled K-major tile.
__device__ __forceinline__ int sw128_offset(int row, int chunk) {
    return row * 128 + ((chunk ^ (row & 7)) << 4);
}

#if INVAR_WGMMA
// Descriptor (PTX ISA, "Matrix Descriptor Format"): start address >> 4 in bits 0-13, leading byte
// offset >> 4 in 16-29 (1), stride byte offset >> 4 in 32-45 (1024), swizzle 128 B in 62-63.
// wgmma_desc_sw128_lo rebuilds it from its low word, the only part that moves with the address: a
// loop steps the low word by one add.
__device__ __forceinline__ uint64_t wgmma_desc_sw128_lo(uint32_t lo) {
    return (uint64_t)lo | ((uint64_t)(1024 >> 4) << 32) | ((uint64_t)1 << 62);
}
__device__ __forceinline__ uint64_t wgmma_desc_sw128(const void *tile) {
    const uint32_t addr = (uint32_t)smem_addr(tile);
    return wgmma_desc_sw128_lo(((addr & 0x3FFFFu) >> 4) | (1u << 16));
}

// An MN-major ("transposed") operand in the same layout: 64 M/N values a row, the next 64
// `mn_block_bytes` on.
__device__ __forceinline__ uint64_t wgmma_desc_sw128_mn(const void *tile, uint32_t mn_block_bytes) {
    uint64_t addr = smem_addr(tile);
    return ((addr & 0x3FFFF) >> 4) | ((uint64_t)(mn_block_bytes >> 4) << 16) | ((uint64_t)(1024 >> 4) << 32) |
           ((uint64_t)1 << 62);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }

// Per-warpgroup register budgets of a warp-specialized CTA (the producer lowers, the consumers
// raise into what it freed). Every warp of the warpgroup executes it; an increase the CTA's pool
// cannot grant waits forever.
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N)); }
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N)); }

// Generic-proxy writes to shared memory (cp.async, st.shared) become visible to wgmma only after
// this fence in each writing thread.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// Keeps the compiler from moving accumulator reads or writes across a wgmma fence or wait.
template <int N>
__device__ __forceinline__ void wgmma_hold(float (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+f"(d[i])::"memory");
}
// The same for an A operand in registers (bf16 pairs), which an in-flight wgmma still reads.
template <int N>
__device__ __forceinline__ void wgmma_hold(uint32_t (&a)[N]) {
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+r"(a[i])::"memory");
}

// Accumulator operands of an inline wgmma: read and written ("+f", the chain continues) or written
// only ("=f", scale-d = 0 starts it).
#define WGMMA_ACC4(d, i) "+f"(d[(i)]), "+f"(d[(i) + 1]), "+f"(d[(i) + 2]), "+f"(d[(i) + 3])
#define WGMMA_ACC16(d, i) WGMMA_ACC4(d, i), WGMMA_ACC4(d, (i) + 4), WGMMA_ACC4(d, (i) + 8), WGMMA_ACC4(d, (i) + 12)
#define WGMMA_ACC32(d, i) WGMMA_ACC16(d, i), WGMMA_ACC16(d, (i) + 16)
#define WGMMA_OUT4(d, i) "=f"(d[(i)]), "=f"(d[(i) + 1]), "=f"(d[(i) + 2]), "=f"(d[(i) + 3])
#define WGMMA_OUT16(d, i) WGMMA_OUT4(d, i), WGMMA_OUT4(d, (i) + 4), WGMMA_OUT4(d, (i) + 8), WGMMA_OUT4(d, (i) + 12)
#define WGMMA_OUT32(d, i) WGMMA_OUT16(d, i), WGMMA_OUT16(d, (i) + 16)

// One K-major bf16 wgmma into fp32, d = A(64x16) * B(Nx16)ᵀ (+ d when SCALE is nonzero): REGS the
// accumulators' list, A, B and SCALE the operand numbers after it.
#define WGMMA_SS_BF16(N, REGS, A, B, SCALE)                                              \
    "{\n"                                                                                \
    ".reg .pred p;\n"                                                                    \
    "setp.ne.b32 p, %" #SCALE ", 0;\n"                                                   \
    "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32.bf16.bf16 " REGS ", %" #A ", %" #B   \
    ", p, 1, 1, 0, 0;\n"                                                                 \
    "}\n"
// Accumulator operand lists: 36, 48, 64, 72 or 96 floats a thread ({%0,...,%N-1}).
#define WGMMA_OPERANDS_0_47                                                                      \
    "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,"     \
    "%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47"
#define WGMMA_OPERANDS_48_63 "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63"
#define WGMMA_OPERANDS_64_95                                                                     \
    "%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,"                           \
    "%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95"
#define WGMMA_OPERANDS_64_71 "%64,%65,%66,%67,%68,%69,%70,%71"
#define WGMMA_REGS36                                                                             \
    "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24," \
    "%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35}"
#define WGMMA_REGS48 "{" WGMMA_OPERANDS_0_47 "}"
#define WGMMA_REGS64 "{" WGMMA_OPERANDS_0_47 "," WGMMA_OPERANDS_48_63 "}"
#define WGMMA_REGS72 "{" WGMMA_OPERANDS_0_47 "," WGMMA_OPERANDS_48_63 "," WGMMA_OPERANDS_64_71 "}"
#define WGMMA_REGS96 "{" WGMMA_OPERANDS_0_47 "," WGMMA_OPERANDS_48_63 "," WGMMA_OPERANDS_64_95 "}"

// d += A(64x16, desc_a) * B(128x16, desc_b)ᵀ, both K-major, accumulated in fp32.
__device__ __forceinline__ void wgmma_m64n128k16_bf16(float (&d)[64], uint64_t desc_a, uint64_t desc_b) {
    asm volatile(WGMMA_SS_BF16(128, WGMMA_REGS64, 64, 65, 66)
                 : WGMMA_ACC32(d, 0), WGMMA_ACC32(d, 32)
                 : "l"(desc_a), "l"(desc_b), "r"(1));
}
// d += A(64x16, desc_a) * B(192x16, desc_b)ᵀ: the 128-column instruction's per-element
// arithmetic (each element from its own A row, B column and accumulator) over 192 columns.
__device__ __forceinline__ void wgmma_m64n192k16_bf16(float (&d)[96], uint64_t desc_a, uint64_t desc_b) {
    asm volatile(WGMMA_SS_BF16(192, WGMMA_REGS96, 96, 97, 98)
                 : WGMMA_ACC32(d, 0), WGMMA_ACC32(d, 32), WGMMA_ACC32(d, 64)
                 : "l"(desc_a), "l"(desc_b), "r"(1));
}
// d += A(64x16, desc_a) * B(96x16, desc_b)ᵀ: the same per-element arithmetic over 96 columns.
__device__ __forceinline__ void wgmma_m64n96k16_bf16(float (&d)[48], uint64_t desc_a, uint64_t desc_b) {
    asm volatile(WGMMA_SS_BF16(96, WGMMA_REGS48, 48, 49, 50)
                 : WGMMA_ACC32(d, 0), WGMMA_ACC16(d, 32)
                 : "l"(desc_a), "l"(desc_b), "r"(1));
}

// d += A(64x16, desc_a) * B(144x16, desc_b)ᵀ: the same per-element arithmetic over 144 columns.
__device__ __forceinline__ void wgmma_m64n144k16_bf16(float (&d)[72], uint64_t desc_a, uint64_t desc_b) {
    asm volatile(WGMMA_SS_BF16(144, WGMMA_REGS72, 72, 73, 74)
                 : WGMMA_ACC32(d, 0), WGMMA_ACC32(d, 32), WGMMA_ACC4(d, 64), WGMMA_ACC4(d, 68)
                 : "l"(desc_a), "l"(desc_b), "r"(1));
}

// d += A(64x16, desc_a) * B(72x16, desc_b)ᵀ: the same over 72 columns.
__device__ __forceinline__ void wgmma_m64n72k16_bf16(float (&d)[36], uint64_t desc_a, uint64_t desc_b) {
    asm volatile(WGMMA_SS_BF16(72, WGMMA_REGS36, 36, 37, 38)
                 : WGMMA_ACC32(d, 0), WGMMA_ACC4(d, 32)
                 : "l"(desc_a), "l"(desc_b), "r"(1));
}

// The K-major bf16 instruction of WN columns (72, 96, 128, 144 or 192): d holds WN / 2 floats a
// thread.
template <int WN>
__device__ __forceinline__ void wgmma_k16_bf16(float (&d)[WN / 2], uint64_t desc_a, uint64_t desc_b) {
    static_assert(WN == 72 || WN == 96 || WN == 128 || WN == 144 || WN == 192, "the GEMM's instruction widths");
    if constexpr (WN == 72) wgmma_m64n72k16_bf16(d, desc_a, desc_b);
    else if constexpr (WN == 96) wgmma_m64n96k16_bf16(d, desc_a, desc_b);
    else if constexpr (WN == 128) wgmma_m64n128k16_bf16(d, desc_a, desc_b);
    else if constexpr (WN == 144) wgmma_m64n144k16_bf16(d, desc_a, desc_b);
    else wgmma_m64n192k16_bf16(d, desc_a, desc_b);
}

// Four 8 x 8 bf16 matrices in the mma fragment layout into shared memory: lanes 8k .. 8k + 7 give
// the addresses of matrix k's rows.
__device__ __forceinline__ void stmatrix_x4(const void *row, uint32_t m0, uint32_t m1, uint32_t m2, uint32_t m3) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(smem_addr(row)), "r"(m0),
                 "r"(m1), "r"(m2), "r"(m3)
                 : "memory");
}

// The same four matrices transposed on the way.
__device__ __forceinline__ void stmatrix_x4_trans(const void *row, uint32_t m0, uint32_t m1, uint32_t m2, uint32_t m3) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(smem_addr(row)),
                 "r"(m0), "r"(m1), "r"(m2), "r"(m3)
                 : "memory");
}

// --- TMA (cp.async.bulk.tensor) completing on an mbarrier ---

__device__ __forceinline__ void mbar_init(uint64_t *bar, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
// Makes the initialized barriers visible to the copy engine.
__device__ __forceinline__ void mbar_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
__device__ __forceinline__ void mbar_expect_tx(uint64_t *bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t *bar, uint32_t parity) {
    asm volatile(
        "{\n"
        ".reg .pred done;\n"
        "WAIT_AGAIN:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra WAIT_AGAIN;\n"
        "}\n" ::"r"(smem_addr(bar)), "r"(parity) : "memory");
}
// One arrival; for a slot wgmma read, after the wgmma_wait that retired those reads.
__device__ __forceinline__ void mbar_arrive(uint64_t *bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}
// Box at (inner, outer) of a 2-D tensor map into shared memory; out-of-range elements are zeros
// and still count toward the barrier's transaction bytes.
__device__ __forceinline__ void tma_load_2d(void *dst, const void *tmap, uint64_t *bar, int inner, int outer) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
        ::"r"(smem_addr(dst)), "l"(tmap), "r"(inner), "r"(outer), "r"(smem_addr(bar)) : "memory");
}
// The same with an L2 cache policy (l2_policy.cuh).
__device__ __forceinline__ void tma_load_2d_hint(void *dst, const void *tmap, uint64_t *bar, int inner, int outer,
                                                 uint64_t policy) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
        " [%0], [%1, {%2, %3}], [%4], %5;\n"
        ::"r"(smem_addr(dst)), "l"(tmap), "r"(inner), "r"(outer), "r"(smem_addr(bar)), "l"(policy) : "memory");
}
// The same from a 3-D tensor map: the box at (inner, outer) of matrix `batch`.
__device__ __forceinline__ void tma_load_3d(void *dst, const void *tmap, uint64_t *bar, int inner, int outer,
                                            int batch) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n"
        ::"r"(smem_addr(dst)), "l"(tmap), "r"(inner), "r"(outer), "r"(batch), "r"(smem_addr(bar)) : "memory");
}

// The same with an L2 cache policy (l2_policy.cuh).
__device__ __forceinline__ void tma_load_3d_hint(void *dst, const void *tmap, uint64_t *bar, int inner, int outer,
                                                 int batch, uint64_t policy) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
        " [%0], [%1, {%2, %3, %4}], [%5], %6;\n"
        ::"r"(smem_addr(dst)), "l"(tmap), "r"(inner), "r"(outer), "r"(batch), "r"(smem_addr(bar)), "l"(policy)
        : "memory");
}

// The box at (inner, outer) of matrix `batch` of a 3-D tensor map into L2 only: no barrier, no
// shared memory; a later load of the box finds it there.
__device__ __forceinline__ void tma_prefetch_l2_3d(const void *tmap, int inner, int outer, int batch) {
    asm volatile("cp.async.bulk.prefetch.tensor.3d.L2.global.tile [%0, {%1, %2, %3}];\n"
                 ::"l"(tmap), "r"(inner), "r"(outer), "r"(batch) : "memory");
}

// --- TMA stores (cp.async.bulk.tensor, shared to global, in bulk async-groups) ---

// The box at (inner, outer) of matrix `batch` of a 3-D tensor map from shared memory; elements
// outside the tensor are not written. The thread's stores form a group at bulk_commit that only it
// can wait for.
__device__ __forceinline__ void tma_store_3d(const void *tmap, const void *src, int inner, int outer, int batch) {
    asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];\n"
                 ::"l"(tmap), "r"(smem_addr(src)), "r"(inner), "r"(outer), "r"(batch) : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// This thread's groups have read their shared memory (it may be written again).
__device__ __forceinline__ void bulk_wait_read_all() { asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory"); }
// This thread's groups are complete, their writes done.
__device__ __forceinline__ void bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }
#endif

// --- MLA: Q of one token's head group into the swizzled layout ---
// HEADS heads x (512 latent + 64 rope) values, box d / 64 holding dims d .. d + 63 of every head:
// 16-byte cp.async pieces (one commit group; the caller waits) when `aligned`, else value by value.
// Heads from a.H on (a call of fewer heads than a unit's, padded) are zeros, nothing read.
template <int HEADS, int THREADS>
__device__ __forceinline__ void mla_load_q_sw128(const mla_attention_args &a, bool aligned, int t, int h0, uint8_t *sQ) {
    constexpr int L = 512, D = 576, BOX = HEADS * 128;
    if (aligned) {
        for (int i = threadIdx.x; i < HEADS * (D / 8); i += THREADS) {
            const int row = i / (D / 8), c = i % (D / 8), h = h0 + row;
            const bool real = h < a.H;
            const long hr = real ? h : 0;  // a zero-byte copy still names a valid address
            const uint16_t *src = c < L / 8 ? a.q_lat + t * a.ld_q_lat + hr * L + c * 8
                                            : a.q_pe + t * a.ld_q_pe + hr * a.head_stride_q_pe + (c - L / 8) * 8;
            cp_async16(sQ + (c / 8) * BOX + sw128_offset(row, c % 8), src, real ? 16 : 0);
        }
        cp_async_commit();
    } else {
        for (int i = threadIdx.x; i < HEADS * D; i += THREADS) {
            const int row = i / D, col = i % D, h = h0 + row;
            const uint16_t v = h >= a.H  ? (uint16_t)0
                               : col < L ? a.q_lat[t * a.ld_q_lat + (long)h * L + col]
                                         : a.q_pe[t * a.ld_q_pe + (long)h * a.head_stride_q_pe + (col - L)];
            *(uint16_t *)(sQ + (col / 64) * BOX + sw128_offset(row, (col % 64) / 8) + (col % 8) * 2) = v;
        }
    }
}

#endif
