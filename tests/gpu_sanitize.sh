#!/usr/bin/env bash
# tests/gpu_sanitize.sh BUILD [TOOL...] — what `make gpu-sanitize` runs: compute-sanitizer's
# memcheck, racecheck, synccheck and initcheck (or the tools named) over the CUDA unit tests and
# a small shape set of the kernel checker (`invar kernels --device cuda --quick --set
# invariant`). Passes when no tool reports an error or hazard in invar's own kernels.
#
# Reports inside cuBLAS/cuBLASLt's kernels are not invar's to fix and are left out of the
# verdict by kernel name (they are printed, counted, and kept in the log):
#   splitKreduce  cuBLASLt's split-K reduction reads workspace it did not initialise
#                 (initcheck reports by the hundred thousand on the H200)
#   nvjet / gemm / gemv / xmma / cutlass / cublas  cuBLAS's own GEMM kernels (racecheck reports
#                 errors and hazards inside nvjet_sm90_*_splitK_* on the H200)
# Without a CUDA device: a visible SKIP, exit 0.
set -u
BUILD=${1:-build}
shift || true
TOOLS=${*:-memcheck racecheck synccheck initcheck}
LOGDIR=${GPU_SANITIZE_LOGS:-$BUILD/gpu-sanitize}
LIBRARY_KERNELS='splitKreduce|nvjet|gemmSN|gemmk1|gemv|xmma|cutlass|cublas|Kernel2'

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
    echo "SKIP: gpu-sanitize: no CUDA device (nvidia-smi lists no GPU)"
    exit 0
fi
SANITIZER=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
if [ ! -x "$SANITIZER" ]; then
    echo "gpu-sanitize: compute-sanitizer not found (CUDA toolkit's bin/)" >&2
    exit 2
fi
mkdir -p "$LOGDIR" || exit 3

# Each report block starts with "========= <what>" and names its kernel in a following
# "=========     at <kernel>(...)" line; racecheck's hazards name it on the same line.
# Prints "ours library" counts.
count_reports() {
    awk -v lib="$LIBRARY_KERNELS" '
        function close_report() { if (open) { if (kernel ~ lib) library++; else ours++; open = 0 } }
        /^========= (Invalid|Uninitialized|Error|Barrier|Race|Program hit|Warning: Race|Hazard|Misaligned|Out-of-range|Malloc|Cuda API error|Address)/ {
            close_report(); open = 1; kernel = $0; next }
        open && /^=========     at / { kernel = $0; close_report() }
        END { close_report(); printf "%d %d\n", ours + 0, library + 0 }' "$1"
}

failed=0
for tool in $TOOLS; do
    for target in cuda_ops kernels; do
        log="$LOGDIR/$tool-$target.log"
        if [ "$target" = cuda_ops ]; then
            cmd=("$BUILD/tests/test_cuda_ops")
        else
            cmd=("$BUILD/invar" kernels --device cuda --quick --set invariant --out "$LOGDIR/kernels-$tool")
        fi
        start=$(date +%s)
        "$SANITIZER" --tool "$tool" --print-limit 100000 "${cmd[@]}" >"$log" 2>&1
        rc=$?
        read -r ours library < <(count_reports "$log")
        summary=$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$log" | tail -n 1)
        verdict=ok
        if [ "$ours" -gt 0 ] || { [ "$rc" -ne 0 ] && [ "$library" -eq 0 ]; }; then
            verdict=FAIL
            failed=$((failed + 1))
        fi
        printf '%-5s %-9s %-9s invar: %d  cuBLAS (left out): %d  exit %d  %ds  %s\n' "$verdict" \
            "$tool" "$target" "$ours" "$library" "$rc" "$(($(date +%s) - start))" "$summary"
    done
done
echo "gpu-sanitize: logs in $LOGDIR"
[ "$failed" = 0 ]
