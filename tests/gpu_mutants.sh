#!/usr/bin/env bash
# tests/gpu_mutants.sh OUT_DIR — the CUDA mutants on a GPU host in one go: build (CUDA + NCCL, the
# Debian libraries from DEPS_PREFIX, default /tmp/deps, unpacked there from .deps/*.deb when
# missing), then `make mutants` over the CUDA mutants that tests/mutants/LEDGER.md lists as "not
# run here" (GPU_MUTANTS=a,b: those instead; GPU_MUTANTS=all: every CUDA mutant), judged
# GPU_MUTANTS_PARALLEL at a time (default 12: their time is mostly nvcc, one file each) within
# GPU_MUTANTS_BUDGET_S (default 540 s; a mutant cut off by it keeps no verdict). Writes
# OUT_DIR/mutants.log, OUT_DIR/state/ (one state file a judged mutant: copy them into
# build-mutants/state/ of a checkout and run tests/mutants/ledger.sh there to file the verdicts)
# and OUT_DIR/LEDGER.md. Exit 0 when every judged mutant was caught, 1 otherwise.
set -u
out=${1:?usage: tests/gpu_mutants.sh OUT_DIR}
cd "$(dirname "$0")/.." || exit 2
budget=0  # the mutants' own budget is their timeout below
# shellcheck source=tests/gpu_steps.sh
. tests/gpu_steps.sh  # open_out, gpu_info, build_or_exit, step, status, overall
open_out "$out"
gpu_info
build_or_exit gpu_mutants 300

list=${GPU_MUTANTS:-}
if [ -z "$list" ]; then
    list=$(grep '| cuda | not run here |' tests/mutants/LEDGER.md | sed 's/^| `\([^`]*\)`.*/\1/' | paste -sd, -)
elif [ "$list" = all ]; then
    list=$(for p in tests/mutants/cuda-*.patch; do basename "$p" .patch; done | paste -sd, -)
fi
if [ -z "$list" ]; then
    echo "gpu_mutants: the ledger lists no CUDA mutant as not run here (GPU_MUTANTS=all judges every one)"
    exit 0
fi
echo "gpu_mutants: $(echo "$list" | tr ',' '\n' | wc -l) mutants, ${GPU_MUTANTS_PARALLEL:-12} at a time"
MUTANTS_DIR="$out/work" MUTANTS_FRESH=1 MUTANTS_JOBS="$(nproc 2>/dev/null || echo 16)" \
    MUTANTS_PARALLEL="${GPU_MUTANTS_PARALLEL:-12}" MUTANTS="$list" DEPS_PREFIX="$deps" \
    timeout "${GPU_MUTANTS_BUDGET_S:-540}" bash tests/mutants/run.sh >"$out/mutants.log" 2>&1
rc=$?
mkdir -p "$out/state"
cp "$out/work/state/"* "$out/state/" 2>/dev/null
cp tests/mutants/LEDGER.md "$out/LEDGER.md"
grep -E '^[a-z0-9-]+: ' "$out/mutants.log" | cut -c1-160
tail -n 2 "$out/mutants.log"
[ "$rc" = 124 ] && echo "gpu_mutants: the budget ran out; the mutants judged so far are in $out/state"
[ "$rc" = 0 ]
