#!/usr/bin/env bash
# tests/localize_mutants.sh — how often localization names the op a kernel bug is in. Plants each
# kernel mutant of tests/mutants/ (class kernel, not argued equivalent; on the CPU those of
# device cpu touching kernels/cpu/, on a GPU those of device cuda touching kernels/cuda/) in a
# scratch copy of the tree and runs the device's cases in order until one catches it (CPU:
# cases/smoke.ini, then cases/ci.ini; CUDA: cases/gpu.ini's invariant configs); for a mutant a
# case catches, the first differing op of its failing invariant config (summary.csv's first_op,
# its first word) must be the mutated op: the patch header's `checks: kernels:OP`, else the op
# its name and file say. An error row is scored by its first_op too (a run alone that broke: the
# first op whose rows held a NaN); a case that died on a CUDA kernel's fault by the op its
# launch check names when run again with CUDA_LAUNCH_BLOCKING=1. Not part of make check: a build
# and a case or two per mutant take minutes in all (the result file states how long).
#
#   bash tests/localize_mutants.sh [OUT]    OUT: results folder (default build/localize-mutants)
#   LOCALIZE_DEVICE=cpu|cuda                which mutants and cases (default cpu; cuda needs a GPU)
#   LOCALIZE_MUTANTS=a,b                    only these mutants
#   LOCALIZE_PARALLEL=N                     mutants judged at once, each in its own copy of the
#                                           built tree (default 1)
#   LOCALIZE_JOBS=N                         make -jN of each mutant's build (default: the cores
#                                           shared among LOCALIZE_PARALLEL)
#
# Writes OUT/mutants.csv (mutant, mutated op, case that caught it, named op, match, first_op)
# and prints the figure; exit 0 when at least 95% of the caught mutants are named right, 1 when
# fewer, 2 when the tree does not build or a patch does not apply.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/build/localize-mutants}
device=${LOCALIZE_DEVICE:-cpu}
parallel=${LOCALIZE_PARALLEL:-1}
case "$device" in
cpu) cases=(smoke ci) only=() build_flags=(CUDA=0) ;;
cuda)
    cases=(gpu) only=(--only 'cuda/invariant*') build_flags=()
    nvidia-smi -L >/dev/null 2>&1 ||
        { echo "localize_mutants: LOCALIZE_DEVICE=cuda needs a GPU (nvidia-smi lists none)"; exit 2; } ;;
*) echo "localize_mutants: LOCALIZE_DEVICE=$device: cpu or cuda"; exit 2 ;;
esac
[[ "$parallel" =~ ^[1-9][0-9]*$ ]] || { echo "localize_mutants: LOCALIZE_PARALLEL=$parallel: not a count"; exit 2; }
cores=$(nproc 2>/dev/null || echo 2)
jobs=${LOCALIZE_JOBS:-$((cores / parallel > 0 ? cores / parallel : 1))}
mkdir -p "$out" || { echo "localize_mutants: cannot create $out"; exit 2; }
out=$(cd "$out" && pwd)
work="$out/tree"
export GIT_CEILING_DIRECTORIES="$out"
# shellcheck source=tests/mutants/header.sh
. "$root/tests/mutants/header.sh"
# shellcheck source=tests/mutants/tree.sh
. "$root/tests/mutants/tree.sh"  # tree_copy

# The op a patch mutates: its first kernels:OP check, else its name's op, else its file's.
mutated_op() {
    local patch=$1 name c file
    for c in $(header "$patch" checks); do
        case "$c" in kernels:*) c=${c#kernels:}; echo "${c%_f32}"; return ;; esac
    done
    name=$(basename "$patch" .patch)
    for c in merge-attention:merge_attention moe-combine:moe_combine moe-experts:moe_experts \
             moe-route:moe_route silu:silu_mul residual:residual_add all-reduce:all_reduce \
             cuda-mla-:mla_attention cuda-gemm-:gemm rmsnorm:rmsnorm logprobs:logprobs; do
        case "$name" in *"${c%%:*}"*) echo "${c#*:}"; return ;; esac
    done
    file=$(grep -m1 '^diff --git a/kernels/[a-z]*/' "$patch" |
        sed 's|^diff --git a/kernels/[a-z]*/||; s| .*||; s|\.cu$||; s|\.c$||')
    echo "$file"
}

# The patches judged here: kernel bugs of this device, in its own kernels folder.
judged_here() {
    [ "$(header "$1" class)" = kernel ] && [ "$(header "$1" device)" = "$device" ] &&
        [ -z "$(header "$1" equivalent)" ] && grep -q "^diff --git a/kernels/$device/" "$1"
}

# The first failing config whose expectation was invariance, and its first differing op;
# "!error" when the case failed on an error (an engine error, or a crash that left no such row
# with an op: an illegal address kills the CUDA context), where there is no divergence to localize.
first_failing_op() {
    python3 - "$1" <<'PY'
import csv, sys
try:
    rows = list(csv.DictReader(open(sys.argv[1], newline="")))
except OSError:
    rows = []
failing = [r for r in rows if r["verdict"] == "FAIL" and r["expected"] == "invariant"]
named = [r["first_op"] for r in failing if r.get("first_op")]
if named:
    print(named[0])
elif not failing or all(r["observed"] == "error" for r in failing):
    print("!error")
else:
    print("")
PY
}

# A case that died on a kernel's fault (an illegal address kills the CUDA context: no row is
# written) is run again with CUDA_LAUNCH_BLOCKING=1 as invar's message advises, so the faulting
# kernel's own launch check reports it: "OP: the kernel faulted (MESSAGE)", else "!error".
faulting_op() {
    local dir=$1 case_name=$2 name=$3 msg
    grep -q 'CUDA_LAUNCH_BLOCKING=1 to have the faulting kernel' "$out/$name.log" || { echo '!error'; return; }
    rm -rf "$dir/report-blocking"
    msg=$(cd "$dir" && CUDA_LAUNCH_BLOCKING=1 timeout 900 nice build/invar run -q \
        --case "cases/$case_name.ini" "${only[@]}" --out "$dir/report-blocking" 2>&1 |
        grep -m1 -o 'invar: error: cuda: .*CUDA_LAUNCH_BLOCKING=1: this op.s kernel)')
    [ -n "$msg" ] || { echo '!error'; return; }
    msg=${msg#invar: error: cuda: }
    echo "${msg%%:*} (the kernel faulted: ${msg})"
}

# Whether the named op is the mutated one. CUDA's moe_experts runs its products on the GEMM
# kernels (grouped gemm_launch), so a bug in the GEMM's code may first show in moe_experts' rows:
# for a patch of kernels/cuda/gemm* files that name is right too.
names_mutated_op() {
    local patch=$1 op=$2 named=$3
    [ "$named" = "$op" ] && return 0
    [ "$op" = gemm ] && [ "$named" = moe_experts ] &&
        grep -q '^diff --git a/kernels/cuda/gemm' "$patch"
}

# judge PATCH: the mutant built and run in its own copy of the built tree; its csv row into
# rows/NAME, its line on stdout; 2 when it cannot be planted.
judge() {
    local patch=$1 name op dir by=- case_name first_op named_op match=no
    name=$(basename "$patch" .patch)
    op=$(mutated_op "$patch")
    dir="$out/m/$name"
    rm -rf "$dir"
    cp -a "$work" "$dir" || { echo "localize_mutants: cannot copy the tree for $name"; return 2; }
    if ! (cd "$dir" && git apply "$patch") 2>"$out/$name.log"; then
        echo "localize_mutants: $name does not apply"
        return 2
    fi
    if nice make -C "$dir" --no-print-directory -j"$jobs" "${build_flags[@]}" build/invar \
            >>"$out/$name.log" 2>&1; then
        for case_name in "${cases[@]}"; do
            rm -rf "$dir/report"
            if ! (cd "$dir" && timeout 900 nice build/invar run -q --case "cases/$case_name.ini" \
                    "${only[@]}" --out "$dir/report") >>"$out/$name.log" 2>&1; then
                by=case:$case_name
                break
            fi
        done
    else
        by=build-failed
    fi
    if [ "${by#case:}" = "$by" ]; then
        echo "$name,$op,$by,,," >"$out/rows/$name"
        printf '%-48s %-16s %s\n' "$name" "$op" "not caught by a case"
    else
        first_op=$(first_failing_op "$dir/report/summary.csv")
        if [ "$first_op" = "!error" ]; then first_op=$(faulting_op "$dir" "$case_name" "$name"); fi
        named_op=${first_op%% *}
        if [ "$first_op" = "!error" ]; then
            match=error named_op= first_op="the case failed on an error: nothing to localize"
        elif names_mutated_op "$patch" "$op" "$named_op"; then
            match=yes
        fi
        printf '%s,%s,%s,%s,%s,"%s"\n' "$name" "$op" "$by" "$named_op" "$match" \
            "${first_op//\"/\"\"}" >"$out/rows/$name"
        printf '%-48s %-16s %-11s named %-16s %s\n' "$name" "$op" "$by" "${named_op:--}" "$match"
    fi
    rm -rf "$dir"
}

started=$(date +%s)
rm -rf "$work" "$out/m" "$out/rows"
mkdir -p "$work" "$out/m" "$out/rows"
tree_copy "$root" "$work" || { echo "localize_mutants: cannot copy the tree"; exit 2; }
[ -d "$root/build" ] && cp -a "$root/build" "$work/build"
echo "localize_mutants: building the unmutated copy in $work ($device, -j$cores)"
nice make -C "$work" --no-print-directory -j"$cores" "${build_flags[@]}" build/invar \
    >"$out/base-build.log" 2>&1 ||
    { tail -n 20 "$out/base-build.log"; echo "localize_mutants: the tree does not build"; exit 2; }

# LOCALIZE_PARALLEL judges at a time, each in the background; a planting failure stops the run.
running=0 failed=0
for patch in "$root"/tests/mutants/*.patch; do
    name=$(basename "$patch" .patch)
    if [ -n "${LOCALIZE_MUTANTS:-}" ] && [[ ",$LOCALIZE_MUTANTS," != *",$name,"* ]]; then continue; fi
    judged_here "$patch" || continue
    if [ "$running" -ge "$parallel" ]; then
        wait -n || failed=1
        running=$((running - 1))
    fi
    [ "$failed" = 0 ] || break
    judge "$patch" &
    running=$((running + 1))
done
while [ "$running" -gt 0 ]; do
    wait -n || failed=1
    running=$((running - 1))
done
[ "$failed" = 0 ] || { echo "localize_mutants: a mutant could not be planted (above)"; exit 2; }

csv="$out/mutants.csv"
echo "mutant,mutated_op,caught_by,named_op,match,first_op" >"$csv"
for row in "$out"/rows/*; do [ -f "$row" ] && cat "$row"; done >>"$csv"
caught=$(awk -F, 'NR > 1 && $3 ~ /^case:/ && $5 != "error"' "$csv" | wc -l)
errors=$(awk -F, 'NR > 1 && $3 ~ /^case:/ && $5 == "error"' "$csv" | wc -l)
named=$(awk -F, 'NR > 1 && $3 ~ /^case:/ && $5 == "yes"' "$csv" | wc -l)
seconds=$(($(date +%s) - started))
if [ "$caught" = 0 ]; then
    echo "localize_mutants: no mutant was caught by a case as a divergence ($errors by an error; $seconds s)"
    exit 1
fi
pct=$((100 * named / caught))
echo "localize_mutants: the mutated op named for $named of $caught $device kernel mutants a case" \
    "caught as a divergence ($pct%); $errors more failed the case on an error (not localized)" \
    "in $seconds s; $csv"
[ $((100 * named)) -ge $((95 * caught)) ]
