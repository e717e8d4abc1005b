#!/usr/bin/env bash
# tests/gpu_gemm_check.sh OUT_DIR — the invariant GEMM's split-K on the H200, in one go (about
# 6-8 minutes; issue 16): build (CUDA + NCCL, the Debian libraries from DEPS_PREFIX, default
# /tmp/deps, unpacked there from .deps/*.deb when missing), then
#   0. tests/ptxas_budgets.sh                     ptxas -v: registers, spills per kernel; none may
#                                                 spill or serialize its wgmma (C7514/C7515), the
#                                                 persistent ones at 168 (two consumers) or 248
#   1. build/tests/test_cuda_ops                  bitwise rows over M = 1 ... 8192 on split and
#                                                 non-split shapes, the f64 oracle, every op
#   2. invar kernels --device cuda --op gemm      the checker, M on both sides of each path switch
#   3. invar kernels --device cuda --op gemm_f32
#   4. invar bench --device cuda --only gemm --quick, BENCH_RUNS times (default 3), for medians
# Each step's output goes to OUT_DIR/<step>.log (CSVs under OUT_DIR/bench-<i>/); a summary is
# printed last: per cell the median over runs of the invariant/cuBLAS ratio (each ratio from one
# run), their geometric mean, the worst cell, the M >= 1024 geometric mean, and at M <= 64 the
# invariant GEMM's share of copy bandwidth on weights of 20 MB or more (issue 16's targets:
# >= 0.85, no cell < 0.6, >= 0.95, >= 75%) beside the share a plain read of the same weights
# reaches, timed the same way (the bench's floor_read_us: the floor). Steps share a time
# budget (GEMM_CHECK_BUDGET_S, default 560 s): a step that would start past it is skipped and
# says so. Exit 0 when every step ran and did what it should, 1 otherwise. Nothing here changes
# the GPU's settings.
set -u
out=${1:?usage: tests/gpu_gemm_check.sh OUT_DIR}
cd "$(dirname "$0")/.." || exit 2
runs=${BENCH_RUNS:-3}
budget=${GEMM_CHECK_BUDGET_S:-560}
# shellcheck source=tests/gpu_steps.sh
. tests/gpu_steps.sh  # open_out, gpu_info, build_or_exit, step, status, overall
open_out "$out"

# --- the build ---------------------------------------------------------------------------------
gpu_info
build_or_exit gpu_gemm_check 300
# No kernel spills or has its wgmma serialized, and the warp-specialized kernels launch at the
# register counts their setmaxnreg budgets fill (tests/ptxas_budgets.sh, also a `make check` suite).
step ptxas 120 bash tests/ptxas_budgets.sh "$out"

# --- the checks --------------------------------------------------------------------------------
step test_cuda_ops 180 build/tests/test_cuda_ops
step kernels_gemm 150 build/invar kernels --device cuda --op gemm --out "$out/kernels-gemm"
step kernels_gemm_f32 150 build/invar kernels --device cuda --op gemm_f32 --out "$out/kernels-gemm_f32"
for i in $(seq 1 "$runs"); do
    step "bench_$i" 170 build/invar bench --device cuda --only gemm --quick --out "$out/bench-$i"
done

# --- summary -----------------------------------------------------------------------------------
# copy GB/s of each run, then every run's CSV rows: N, K, M, ratio, inv GB/s, splits, plan
summarize() {
    local files=() copies=()
    for i in $(seq 1 "$runs"); do
        [ -s "$out/bench-$i/bench_gemm.csv" ] || continue
        files+=("$out/bench-$i/bench_gemm.csv")
        copies+=("$(sed -n 's/^device-to-device copy: \([0-9.]*\) GB.*/\1/p' "$out/bench_$i.log")")
    done
    if [ "${#files[@]}" = 0 ]; then echo "no bench CSV: no GEMM summary"; return; fi
    awk -F, -v copies="${copies[*]}" "$awk_median"'
        { gsub(/"/, "") }  # the bench writes every CSV field quoted
        FNR == 1 { for (c = 1; c <= NF; c++) col[$c] = c; next }
        {
            key = $col["N"] "x" $col["K"] " M=" $col["M"]
            if (!(key in seen)) { seen[key] = 1; order[++cells] = key; nn[key] = $col["N"]; kk[key] = $col["K"]; mm[key] = $col["M"] }
            ratio[key] = ratio[key] " " $col["ratio_inv_over_ref"]
            gbs[key] = gbs[key] " " $col["inv_gbs"]
            if ("splits" in col) plan[key] = $col["splits"] " " $col["plan"]
            if ("floor_read_us" in col) rd[key] = rd[key] " " $col["floor_read_us"]
        }
        END {
            copy = median(copies)
            printf "%-18s %7s %21s %6s  %s\n", "cell (median of runs)", "ratio", "%copy (read floor)", "", "splits plan"
            worst = 1e9
            for (i = 1; i <= cells; i++) {
                k = order[i]; r = median(ratio[k]); g = median(gbs[k])
                lsum += log(r); n++
                if (r < worst) { worst = r; worst_key = k }
                if (mm[k] >= 1024) { lbig += log(r); nbig++ }
                share = ""
                if (mm[k] <= 64 && 2.0 * nn[k] * kk[k] >= 20e6) {
                    share = sprintf("%.1f%%", 100 * g / copy); ssum += g / copy; ns++
                    if (ns == 1 || g / copy < smin) { smin = g / copy; smin_key = k }
                    if (k in rd) {  # the floor: a plain read of the weights, timed the same way
                        rg = 2.0 * nn[k] * kk[k] / median(rd[k]) / 1e3
                        share = share sprintf(" (read %.1f%%)", 100 * rg / copy); rsum += rg / copy; nr++
                        if (k == smin_key) smin_read = sprintf(", where a plain read of its weights reaches %.1f%%", 100 * rg / copy)
                    }
                }
                printf "%-18s %7.3f %21s %6s  %s\n", k, r, share, (r < 0.6 ? "<0.6" : ""), plan[k]
            }
            printf "\nruns %d, copy %.0f GB/s (median)\n", split(copies, tmp, " "), copy
            printf "GEMM geomean invariant/cuBLAS %.3f (target >= 0.85)\n", exp(lsum / n)
            printf "worst cell %s at %.3f (target >= 0.6)\n", worst_key, worst
            if (nbig) printf "M >= 1024 geomean %.3f (target >= 0.95)\n", exp(lbig / nbig)
            if (ns) printf "M <= 64, weights >= 20 MB: share of copy bandwidth mean %.1f%%, lowest %.1f%% (%s%s) (target >= 75%%)\n", 100 * ssum / ns, 100 * smin, smin_key, smin_read
            if (nr) printf "  a plain read of the same weights, timed the same way: mean %.1f%% of copy\n", 100 * rsum / nr
        }' "${files[@]}"
}
{
    echo
    echo "=== gpu_gemm_check summary ($(date -u +%Y-%m-%dT%H:%MZ), commit $(tree_commit))"
    head -n 1 "$out/gpu.txt"
    printf '%s\n' "${status[@]}"
    echo "--- ptxas (gemm_sm90.cu): registers / spills per kernel"
    grep -E "Compiling entry|registers|spill" "$out/ptxas-gemm_sm90.log" 2>/dev/null |
        sed -e 's/.*_Z16gemm_sm90_kernelILi\([0-9]\)ELi\([0-9]\)ELi\([0-9]\)ELi\([0-9]\)ELi\([0-9]\)E.*/  WGS=\1 NI=\2 STAGES=\3 LOAD=\4 SPLIT=\5:/' \
            -e 's/.*_Z24gemm_split_reduce_kernel.*/  split reduce:/' -e 's/ptxas info    : //' | paste -d' ' - - - | cut -c1-150
    echo "--- test_cuda_ops: $(grep -E '^\[  (PASSED|FAILED|SKIPPED) +\]|^SKIP' "$out/test_cuda_ops.log" 2>/dev/null | tr '\n' ' ')"
    grep -E "^gemm split-K|^\[  FAILED|ERROR|differs" "$out/test_cuda_ops.log" 2>/dev/null | head -n 12 | sed 's/^/    /'
    for op in gemm gemm_f32; do
        echo "--- kernels $op: $(tail -n 1 "$out/kernels_$op.log" 2>/dev/null)"
        grep -E '^(ok|VARIES|FAIL|SKIP) ' "$out/kernels_$op.log" 2>/dev/null | cut -c1-120 | sed 's/^/    /'
    done
    echo "--- bench (CSVs in $out/bench-*):"
    summarize
    echo "gpu_gemm_check: $([ "$overall" = 0 ] && echo ok || echo FAILED); logs in $out"
} | tee "$out/summary.txt"
exit "$overall"
