#!/usr/bin/env bash
# tests/localize_mutants.sh — how often localization names the op a kernel bug is in. Plants each
# CPU kernel mutant of tests/mutants/ (class kernel, device cpu, touching kernels/cpu/) in a
# scratch copy of the tree, runs cases/smoke.ini and, when smoke does not catch it,
# cases/ci.ini; for a mutant a case catches, the first differing op of its failing invariant
# config (summary.csv's first_op, its first word) must be the mutated op: the patch header's
# `checks: kernels:OP`, else the op its name and file say. Not part of make check: a build and
# a case or two per mutant take minutes in all (the result file states how long).
#
#   bash tests/localize_mutants.sh [OUT]    OUT: results folder (default build/localize-mutants)
#   LOCALIZE_MUTANTS=a,b                    only these mutants
#   LOCALIZE_JOBS=N                         make -jN (default: nproc)
#
# Writes OUT/mutants.csv (mutant, mutated op, case that caught it, named op, match, first_op)
# and prints the figure; exit 0 when at least 95% of the caught mutants are named right.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/build/localize-mutants}
jobs=${LOCALIZE_JOBS:-$(nproc 2>/dev/null || echo 2)}
work="$out/tree"
mkdir -p "$out" || { echo "localize_mutants: cannot create $out"; exit 2; }
out=$(cd "$out" && pwd)
work="$out/tree"
export GIT_CEILING_DIRECTORIES="$out"
# shellcheck source=tests/mutants/header.sh
. "$root/tests/mutants/header.sh"
# shellcheck source=tests/mutants/tree.sh
. "$root/tests/mutants/tree.sh"  # tree_copy, cpu_kernel_mutant

# The op a patch mutates: its first kernels:OP check, else its name's op, else its file's.
mutated_op() {
    local patch=$1 name c file
    for c in $(header "$patch" checks); do
        case "$c" in kernels:*) c=${c#kernels:}; echo "${c%_f32}"; return ;; esac
    done
    name=$(basename "$patch" .patch)
    for c in merge-attention:merge_attention moe-combine:moe_combine moe-experts:moe_experts \
             moe-route:moe_route silu:silu_mul residual:residual_add all-reduce:all_reduce; do
        case "$name" in *"${c%%:*}"*) echo "${c#*:}"; return ;; esac
    done
    file=$(grep -m1 '^diff --git a/kernels/cpu/' "$patch" | sed 's|^diff --git a/kernels/cpu/||; s| .*||; s|\.c$||')
    echo "$file"
}

started=$(date +%s)
rm -rf "$work"
mkdir -p "$work"
tree_copy "$root" "$work" || { echo "localize_mutants: cannot copy the tree"; exit 2; }
[ -d "$root/build" ] && cp -a "$root/build" "$work/build"
echo "localize_mutants: building the unmutated copy in $work (-j$jobs)"
nice make -C "$work" --no-print-directory -j"$jobs" CUDA=0 build/invar >"$out/base-build.log" 2>&1 ||
    { tail -n 20 "$out/base-build.log"; echo "localize_mutants: the tree does not build"; exit 2; }

csv="$out/mutants.csv"
echo "mutant,mutated_op,caught_by,named_op,match,first_op" >"$csv"
caught=0 named=0
for patch in "$root"/tests/mutants/*.patch; do
    name=$(basename "$patch" .patch)
    if [ -n "${LOCALIZE_MUTANTS:-}" ] && [[ ",$LOCALIZE_MUTANTS," != *",$name,"* ]]; then continue; fi
    cpu_kernel_mutant "$patch" || continue
    grep -q '^diff --git a/kernels/cpu/' "$patch" || continue
    op=$(mutated_op "$patch")
    if ! (cd "$work" && git apply "$patch") 2>"$out/$name.log"; then
        echo "localize_mutants: $name does not apply"; exit 2
    fi
    by=-
    if nice make -C "$work" --no-print-directory -j"$jobs" CUDA=0 build/invar >>"$out/$name.log" 2>&1; then
        for case_name in smoke ci; do
            rm -rf "$out/report"
            if ! (cd "$work" && timeout 900 nice build/invar run -q --case "cases/$case_name.ini" \
                    --out "$out/report") >>"$out/$name.log" 2>&1; then
                by=case:$case_name
                break
            fi
        done
    else
        by=build-failed
    fi
    (cd "$work" && git apply -R "$patch") || { echo "localize_mutants: $name does not revert"; exit 2; }
    if [ "${by#case:}" = "$by" ]; then
        echo "$name,$op,$by,,," >>"$csv"
        printf '%-48s %-16s %s\n' "$name" "$op" "not caught by a case"
        continue
    fi
    # The first failing config whose expectation was invariance, and its first differing op.
    first_op=$(python3 - "$out/report/summary.csv" <<'EOF'
import csv, sys
for row in csv.DictReader(open(sys.argv[1], newline="")):
    if row["verdict"] == "FAIL" and row["expected"] == "invariant" and row.get("first_op"):
        print(row["first_op"])
        break
EOF
)
    named_op=${first_op%% *}
    match=no
    caught=$((caught + 1))
    if [ "$named_op" = "$op" ]; then match=yes; named=$((named + 1)); fi
    printf '%s,%s,%s,%s,%s,"%s"\n' "$name" "$op" "$by" "$named_op" "$match" "${first_op//\"/\"\"}" >>"$csv"
    printf '%-48s %-16s %-11s named %-16s %s\n' "$name" "$op" "$by" "${named_op:--}" "$match"
done
seconds=$(( $(date +%s) - started ))
if [ "$caught" = 0 ]; then
    echo "localize_mutants: no mutant was caught by a case ($seconds s)"
    exit 1
fi
pct=$((100 * named / caught))
echo "localize_mutants: the mutated op named for $named of $caught case-caught CPU kernel mutants ($pct%) in $seconds s; $csv"
[ $((100 * named)) -ge $((95 * caught)) ]
