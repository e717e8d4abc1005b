#!/usr/bin/env bash
# tests/gpu_tp_check.sh OUT_DIR — tensor parallelism on the two-GPU H200 host, in one go (about
# 5-7 minutes): build (CUDA + NCCL, the Debian libraries from DEPS_PREFIX, default /tmp/deps,
# unpacked there from .deps/*.deb when missing), then
#   1. build/tests/test_cuda_tp        the CUDA all-reduces against the CPU sets' bits, NCCL's
#                                      accuracy, the uneven all-gather
#   2. invar kernels --device cuda --op all_reduce
#   3. invar run --case cases/gpu-tp.ini
#   4. invar bench --device cuda --only tp   (all-reduce vs NCCL, decode tok/s at T = 1, 2;
#                                      --quick unless BENCH_FULL=1)
# Each step's output goes to OUT_DIR/<step>.log (CSVs and reports beside them); a summary is
# printed last. Exit 0 when every step did what it should, 1 otherwise.
#
# NVLink multicast stays off: NCCL_NVLS_ENABLE=0 unless already set (invar also sets it itself
# without overwriting). Nothing here changes the GPUs' settings.
set -u
out=${1:?usage: tests/gpu_tp_check.sh OUT_DIR}
cd "$(dirname "$0")/.." || exit 2
# shellcheck source=tests/gpu_steps.sh
. tests/gpu_steps.sh  # open_out, build_or_exit, step, status, overall
open_out "$out"
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}

# --- the build ---------------------------------------------------------------------------------
{ nvidia-smi -L; nvidia-smi topo -m; } >"$out/gpus.txt" 2>&1
build_or_exit gpu_tp_check 420

# --- the checks --------------------------------------------------------------------------------
step test_cuda_tp 180 build/tests/test_cuda_tp
step kernels_all_reduce 240 build/invar kernels --device cuda --op all_reduce --out "$out/kernels"
step run_gpu_tp 360 build/invar run --case cases/gpu-tp.ini --out "$out/run-gpu-tp"
bench_flags=(--quick)
[ "${BENCH_FULL:-0}" = 1 ] && bench_flags=()
step bench_tp 360 build/invar bench --device cuda --only tp "${bench_flags[@]}" --out "$out/bench"

# --- summary -----------------------------------------------------------------------------------
{
    echo
    echo "=== gpu_tp_check summary ($(date -u +%Y-%m-%dT%H:%MZ), commit $(tree_commit))"
    grep -m1 -E '^GPU 1' "$out/gpus.txt" >/dev/null || echo "fewer than two GPUs listed by nvidia-smi: the TP checks SKIP"
    printf '%s\n' "${status[@]}"
    echo "--- test_cuda_tp:       $(grep -E '^\[  (PASSED|FAILED|SKIPPED) +\]|^SKIP' "$out/test_cuda_tp.log" | tr '\n' ' ')"
    echo "--- kernels all_reduce: $(tail -n 1 "$out/kernels_all_reduce.log")"
    grep -E '^(ok|VARIES|FAIL|SKIP) ' "$out/kernels_all_reduce.log" | sed 's/^/    /'
    echo "--- cases/gpu-tp.ini:   $(tail -n 1 "$out/run_gpu_tp.log")"
    grep -E '^(PASS|FAIL|SKIP) ' "$out/run_gpu_tp.log" | cut -c1-110 | sed 's/^/    /'
    grep -o -m1 'ranks on GPUs [^;]*' "$out/run-gpu-tp/summary.csv" 2>/dev/null | sed 's/^/    /'
    echo "--- bench (CSVs in $out/bench):"
    sed -n '/^tensor parallelism over/,$p' "$out/bench_tp.log" | sed 's/^/    /'
    echo "gpu_tp_check: $([ "$overall" = 0 ] && echo ok || echo FAILED); logs in $out"
} | tee "$out/summary.txt"
exit "$overall"
