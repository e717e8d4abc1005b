#!/usr/bin/env bash
# tests/gpu_third_party.sh OUT_DIR — the third-party kernel table on a GPU host, in one go: PyTorch's
# own kernels (torch.mm, F.linear, torch.bmm, F.rms_norm, torch.log_softmax, scaled_dot_product_
# attention per backend), Thinking Machines' batch_invariant_ops and vLLM's batch_invariant.py
# Triton kernels, each judged by `invar kernels` as an ops.h op through the Python bridge and a
# stated adapter (tests/third_party/kernels.py), then the engine with torch.mm and with the
# third-party invariant matmuls as its GEMM (tests/third_party/engine.ini).
#
# Needs: a python3 with torch and a CUDA device (else a SKIP line, exit 0); the CUDA build, made
# here like the other GPU scripts (DEPS_PREFIX, default /tmp/deps, unpacked from .deps/*.deb);
# third-party source in THIRD_PARTY_DIR (default third_party/, ignored by git, never committed):
#   third_party/batch_invariant_ops/batch_invariant_ops.py
#       from https://github.com/thinking-machines-lab/batch_invariant_ops
#   third_party/vllm/batch_invariant.py
#       vllm/model_executor/layers/batch_invariant.py from https://github.com/vllm-project/vllm
# A missing file is a SKIP row and line naming the repository and where to put it.
#
# Writes OUT_DIR/third_party.csv (tests/third_party/table.py's columns) and a copy dated by the
# run under results/third_party/. THIRD_PARTY_BUDGET_S (default 1500) bounds the table; kernels past it
# are rows saying so. THIRD_PARTY_JOBS (default 8) kernels are judged at once, each in its own
# process (the whole table took about 3 minutes on an H100 so). THIRD_PARTY_ARGS passes more flags to table.py (e.g. --quick, --only ...).
# THIRD_PARTY_FAKE=numpy runs the same driver with numpy stand-ins on the CPU instead (the
# script's own test: tests/test_bridge.sh). Exit 0 when the table was written, 1 when the build or
# the table failed, 2 bad usage.
set -u
if [ $# != 1 ] || [ -z "$1" ] || [ "${1#-}" != "$1" ]; then
    echo "usage: tests/gpu_third_party.sh OUT_DIR" >&2
    exit 2
fi
cd "$(dirname "$0")/.." || exit 2
fake=${THIRD_PARTY_FAKE:-}
if [ -n "$fake" ] && [ "$fake" != numpy ]; then
    echo "gpu_third_party: THIRD_PARTY_FAKE=$fake: only numpy" >&2
    exit 2
fi
py=${PYTHON:-python3}
# shellcheck source=tests/gpu_steps.sh
. tests/gpu_steps.sh  # open_out, gpu_info, unpack_deps, step, status, overall
open_out "$1"

if [ -n "$fake" ]; then
    if ! "$py" -c 'import numpy' 2>/dev/null; then
        echo "SKIP: the third-party table's CPU self-test: no $py with numpy"
        exit 0
    fi
    device=cpu
    lib=${INVAR_LIB:-build/libinvar.so}
    [ -f "$lib" ] || { echo "gpu_third_party: $lib: no libinvar.so (make builds it)" >&2; exit 1; }
else
    why=$("$py" -c 'import torch, sys
if not torch.cuda.is_available(): sys.exit("torch " + torch.__version__ + " sees no CUDA device")' 2>&1)
    if [ $? != 0 ]; then
        echo "SKIP: the third-party kernel table needs a GPU host with torch: ${why##*$'\n'}"
        exit 0
    fi
    device=cuda
    gpu_info
    unpack_deps "$deps"
    step build 600 make DEPS_PREFIX="$deps" CUDA=1 -j"$(nproc 2>/dev/null || echo 16)" all
    if [ "$overall" != 0 ]; then
        echo "gpu_third_party: the build failed; see $out/build.log"
        exit 1
    fi
    lib=build/libinvar.so
fi

tp_dir=${THIRD_PARTY_DIR:-third_party}
for f in batch_invariant_ops/batch_invariant_ops.py vllm/batch_invariant.py; do
    [ -f "$tp_dir/$f" ] || echo "note: $tp_dir/$f is missing: its kernels will be SKIP rows"
done
INVAR_LIB=$(cd "$(dirname "$lib")" && pwd)/$(basename "$lib")
export INVAR_LIB PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
# shellcheck disable=SC2086  # THIRD_PARTY_ARGS is a list of flags
"$py" tests/third_party/table.py --out "$out" --device "$device" ${fake:+--fake "$fake"} \
    --budget-s "${THIRD_PARTY_BUDGET_S:-1500}" --jobs "${THIRD_PARTY_JOBS:-8}" ${THIRD_PARTY_ARGS:-}
rc=$?
if [ "$rc" != 0 ] || [ ! -s "$out/third_party.csv" ]; then
    echo "gpu_third_party: the table failed (exit $rc)"
    exit 1
fi
# The dated copy: results/third_party/DATE-DEVICE-COMMIT.csv (RESULTS_DIR for another place).
results=${RESULTS_DIR:-results/third_party}
mkdir -p "$results" || exit 1
name=$(date -u +%Y-%m-%d)-$(tr -c 'A-Za-z0-9\n' '-' <<<"${device}" | head -c 40)-$(tree_commit).csv
[ "$device" = cuda ] && name=$(date -u +%Y-%m-%d)-$("$py" -c 'import torch; print(torch.cuda.get_device_name(0))' |
    tr -c 'A-Za-z0-9\n' '-' | head -c 40)-$(tree_commit).csv
cp "$out/third_party.csv" "$results/$name" || exit 1
echo "table: $out/third_party.csv, copied to $results/$name"
awk -F'","' 'NR > 1 { n[$12]++ } END { for (v in n) printf "%s %d; ", v, n[v]; print "" }' "$out/third_party.csv"
exit 0
