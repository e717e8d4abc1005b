#!/usr/bin/env bash
# tests/ptxas_budgets.sh [OUT_DIR [BUILD]] — the warp-specialized kernels' registers, from
# `ptxas -v` of their sm_90a code (no GPU needed). In those kernels a producer warpgroup lowers its
# registers (setmaxnreg.dec) and the consumers raise theirs (setmaxnreg.inc) into what it freed,
# the budgets filling what the CTA launched with: a launch at fewer registers a thread would
# leave setmaxnreg.inc waiting forever, a hang rather than a wrong result, so the launch counts
# are checked here, where a toolchain change would show first. Also: no kernel of these files
# spills, and none has its wgmma serialized by ptxas (C7514/C7515: an "info" line, not a
# warning, and a 1.3-1.6x slower kernel).
#   kernels/cuda/gemm_sm90.cu             the persistent kernels at 168 registers (producer 24 +
#                                         two consumers at 240) or 248 (56 + one at 248)
#   kernels/cuda/mla_absorbed_h16_sm90.cu  both split kernels at 168 (producer 88 + two computing
#                                         warpgroups at 208)
# ptxas's output goes to OUT_DIR/ptxas-<file>.log (default: a temporary directory). Where BUILD
# is a `make CUDA=1` build, the reports it kept (OBJ.ptxas, the Makefile's PTXAS_REPORTED) are
# read instead, when newer than their file: the code that ships, and no second compile; else
# nvcc compiles the file. Exit 0 when every count is as above, 1 otherwise, 2 with neither.
set -u
out=${1:-}
build=${2:-}
[ -n "$out" ] || out=$(mktemp -d "${TMPDIR:-/tmp}/invar-ptxas.XXXXXX") || exit 2
mkdir -p "$out" || exit 2
# The objects are only ptxas's by-product: kept out of OUT_DIR (a device run returns few files).
obj=$(mktemp -d "${TMPDIR:-/tmp}/invar-ptxas-obj.XXXXXX") || exit 2
trap 'rm -rf "$obj"' EXIT
cd "$(dirname "$0")/.." || exit 2
nvcc_bin=$(command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
if [ -z "$nvcc_bin" ] && [ -z "$build" ]; then
    echo "ptxas_budgets: no nvcc (PATH or /usr/local/cuda/bin)" >&2
    exit 2
fi

status=0
# check FILE KERNEL_REGEX WANT ...: compiles FILE, then every entry whose name matches a regex
# must report WANT registers; every entry of FILE: no spill, no serialized wgmma.
check() {
    local file=$1 log
    shift
    log="$out/ptxas-$(basename "$file" .cu).log"
    if [ -n "$build" ] && [ -f "$build/$file.o" ] && [ "$build/$file.o.ptxas" -nt "$file" ] &&
       cp "$build/$file.o.ptxas" "$log"; then
        echo "ptxas_budgets: $file: read from $build/$file.o.ptxas"
    elif [ -z "$nvcc_bin" ]; then
        echo "ptxas_budgets: no report of $file in $build and no nvcc"
        status=1
        return
    elif ! "$nvcc_bin" -std=c++17 -O3 -DINVAR_CUDA -gencode arch=compute_90a,code=sm_90a -Xptxas -v \
        -c "$file" -o "$obj/$(basename "$file" .cu).o" >"$log" 2>&1; then
        echo "ptxas_budgets: $file does not compile; see $log"
        status=1
        return
    fi
    awk -v file="$file" -v rules="$*" '
        BEGIN { n = split(rules, r, " ") }
        /Compiling entry function/ { name = $0; want = 0
            for (i = 1; i < n; i += 2) if (name ~ r[i]) want = r[i + 1] }
        /bytes spill stores/ && !/ 0 bytes spill stores/ { print file ": spills: " name; bad = 1 }
        /C751[0-9]/ { print file ": wgmma serialized: " $0; bad = 1 }
        /Used [0-9]+ registers/ && want {
            regs = $0; sub(/.*Used /, "", regs); sub(/ registers.*/, "", regs); checked++
            if (regs != want) { print file ": launches at " regs " registers, not " want ": " name; bad = 1 }
        }
        END { print file ": " checked + 0 " warp-specialized kernels at their launch count"; exit bad || checked == 0 }' \
        "$log" || status=1
}
check kernels/cuda/gemm_sm90.cu gemm_sm90_ws_kernelILi2E 168 gemm_sm90_ws_kernelILi1E 248
check kernels/cuda/mla_absorbed_h16_sm90.cu mla_wgmma16_split_kernel 168
exit $status
