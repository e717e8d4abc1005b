#!/usr/bin/env bash
# tests/gpu_mla_check.sh OUT_DIR — the invariant MLA decode kernels on the H200, in one go (about
# 4-5 minutes; issue 17): build (CUDA + NCCL, the Debian libraries from DEPS_PREFIX, default
# /tmp/deps, unpacked there from .deps/*.deb when missing), then
#   0. tests/ptxas_budgets.sh                     the warp-specialized kernels' launch registers,
#                                                 no spills (the 16-head kernel's setmaxnreg)
#   1. test_cuda_ops, the MLA tests               rows bitwise alone, in batches, in reverse, at
#                                                 other split sizes; the f64 oracle
#   2. invar kernels --device cuda --op mla_attention
#   3. invar bench --device cuda --only mla --quick, BENCH_RUNS times (default 3), for medians
# Each step's output goes to OUT_DIR/<step>.log (CSVs under OUT_DIR/bench-<i>/); a summary is
# printed last: per shape the median over runs of the invariant kernel's time, share of copy
# bandwidth and TFLOP/s (and the share a plain read of the same cache reaches), then issue 17's targets: >= 80% of copy on every memory-bound 16-head
# shape (a cache over twice L2, as `invar bench` counts them), B=1 L=16k <= 30 us, 128 heads
# >= 300 TFLOP/s (at B >= 32). Steps share a time budget (MLA_CHECK_BUDGET_S, default 400 s).
# Exit 0 when every step ran and did what it should (a target missed is reported, not failed).
set -u
out=${1:?usage: tests/gpu_mla_check.sh OUT_DIR}
cd "$(dirname "$0")/.." || exit 2
runs=${BENCH_RUNS:-3}
budget=${MLA_CHECK_BUDGET_S:-400}
# shellcheck source=tests/gpu_steps.sh
. tests/gpu_steps.sh  # open_out, gpu_info, build_or_exit, step, status, overall
open_out "$out"

gpu_info
build_or_exit gpu_mla_check 300
step ptxas 120 bash tests/ptxas_budgets.sh "$out"
step test_cuda_ops 200 env INVAR_TEST_FILTER='test_mla_attention_*' build/tests/test_cuda_ops
step kernels_mla_attention 150 build/invar kernels --device cuda --op mla_attention --out "$out/kernels-mla"
for i in $(seq 1 "$runs"); do
    step "bench_$i" 100 build/invar bench --device cuda --only mla --quick --out "$out/bench-$i"
done

# bench_mla.csv rows: batch, context, heads, inv_us, ref_us, inv_gbs, ref_gbs, inv_pct_copy,
# ref_pct_copy, inv_tflops, ref_tflops, floor_read_us, floor_read_pct_copy (a plain read of the cache,
# timed the same way: the floor; absent from tables written before it)
summarize() {
    local files=()
    for i in $(seq 1 "$runs"); do
        [ -s "$out/bench-$i/bench_mla.csv" ] && files+=("$out/bench-$i/bench_mla.csv")
    done
    if [ "${#files[@]}" = 0 ]; then echo "no bench CSV: no MLA summary"; return; fi
    awk -F, "$awk_median"'
        FNR == 1 { next }
        {
            gsub(/"/, "")
            key = $1 " " $2 " " $3
            if (!(key in us)) order[++n] = key
            us[key] = us[key] " " $4; pct[key] = pct[key] " " $8; tf[key] = tf[key] " " $10
            if (NF >= 13) rpct[key] = rpct[key] " " $13
        }
        END {
            printf "%5s %7s %5s %9s %8s %9s %10s   (medians of %d runs)\n", "batch", "context", "heads", "inv us", "% copy", "TFLOP/s", "read %copy", ARGC - 1
            lo = 1e9; tlo = 1e9
            for (k = 1; k <= n; k++) {
                split(order[k], f, " ")
                u = median(us[order[k]]); p = median(pct[order[k]]); t = median(tf[order[k]])
                rp = order[k] in rpct ? sprintf("%9.1f%%", median(rpct[order[k]])) : ""
                printf "%5d %7d %5d %9.1f %7.1f%% %9.1f %10s\n", f[1], f[2], f[3], u, p, t, rp
                if (f[3] == 16 && f[1] * f[2] * 1152 > 2 * 60 * 1048576 && p < lo) { lo = p; lo_key = "B=" f[1] " L=" f[2] }
                if (f[3] == 16 && f[1] == 1 && f[2] == 16384) b1 = u
                if (f[3] == 128 && f[1] >= 32 && t < tlo) { tlo = t; tlo_key = "B=" f[1] " L=" f[2] }
            }
            if (lo < 1e9) printf "16 heads, memory-bound shapes: lowest share of copy %.1f%% (%s) (target >= 80%%)\n", lo, lo_key
            if (b1 != "") printf "16 heads, B=1 L=16k: %.1f us (target <= 30)\n", b1
            if (tlo < 1e9) printf "128 heads, B >= 32: lowest %.1f TFLOP/s (%s) (target >= 300)\n", tlo, tlo_key
        }' "${files[@]}"
}
{
    echo
    echo "=== gpu_mla_check summary ($(date -u +%Y-%m-%dT%H:%MZ), commit $(tree_commit))"
    head -n 1 "$out/gpu.txt"
    printf '%s\n' "${status[@]}"
    echo "--- ptxas: $(tail -n 2 "$out/ptxas.log" 2>/dev/null | tr '\n' ' ')"
    echo "--- test_cuda_ops: $(grep -E '^\[  (PASSED|FAILED|SKIPPED) +\]|^SKIP' "$out/test_cuda_ops.log" 2>/dev/null | tr '\n' ' ')"
    grep -E "^mla_attention|^\[  FAILED|ERROR|differs" "$out/test_cuda_ops.log" 2>/dev/null | head -n 14 | sed 's/^/    /'
    echo "--- kernels mla_attention: $(tail -n 1 "$out/kernels_mla_attention.log" 2>/dev/null)"
    grep -E '^(ok|VARIES|FAIL|SKIP) ' "$out/kernels_mla_attention.log" 2>/dev/null | cut -c1-120 | sed 's/^/    /'
    echo "--- bench (CSVs in $out/bench-*):"
    summarize
    echo "gpu_mla_check: $([ "$overall" = 0 ] && echo ok || echo FAILED); logs in $out"
} | tee "$out/summary.txt"
exit "$overall"
