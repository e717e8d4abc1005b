#!/usr/bin/env bash
# tests/test_plugin_cuda.sh BUILD — CUDA plugins (tests/plugins/cuda_plugin.cu) on a GPU: an
# RMSNorm enqueued on the stream each call names passes `invar kernels --plugin`; the same kernel
# launched on the default stream races with invar's non-blocking stream and must be caught.
# run_all.sh runs it only where a CUDA device answers (a visible SKIP elsewhere).
set -u
BUILD=${1:-build}
work=$(mktemp -d "${TMPDIR:-/tmp}/invar-plugin-cuda.XXXXXX") || exit 2
trap 'rm -rf "$work"' EXIT
fails=0
check() {  # check VARIANT EXIT
    "$BUILD/invar" kernels --plugin "$BUILD/plugins/$1.so" --device cuda --op rmsnorm --out "$work/$1" \
        >"$work/$1.log" 2>&1
    local rc=$?
    tail -n 3 "$work/$1.log"
    [ "$rc" = "$2" ] || { echo "FAIL: $1: exit $rc, not $2"; fails=$((fails + 1)); }
}
check cuda_rmsnorm_stream 0
check cuda_rmsnorm_default_stream 1
[ "$fails" = 0 ] && echo "CUDA plugins: the stream's passes, the default stream's is caught"
[ "$fails" = 0 ]
