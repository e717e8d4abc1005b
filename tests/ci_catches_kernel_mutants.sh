#!/usr/bin/env bash
# tests/ci_catches_kernel_mutants.sh — every CPU kernel mutant of tests/mutants/ (class: kernel,
# device: cpu, not argued equivalent) that `invar kernels` catches must also be caught by an
# engine run of `make check`: cases/ci.ini (the CI matrix), cases/reach.ini (past the size
# thresholds ci.ini's tiny model stays under), cases/long.ini (contexts past the attention's
# split), cases/long-context.ini (one past 4,096 keys beside a shorter one) or
# cases/long-batch.ini (129 long contexts decoding together). A kernel bug the kernel
# checker sees but these cases let through means their shapes, prompts or batches do not reach
# it. Run by `make nightly`
# (tests/README.md states its time); exit 0 when the rule holds for every mutant, 1 otherwise,
# 2 when the tree does not build or a patch does not apply.
#
#   bash tests/ci_catches_kernel_mutants.sh [OUT]      scratch copies and logs in OUT
#                                                      (default build-ci-mutants)
#   MUTANTS=a,b                                        only these mutants
#   CASES="cases/x.ini cases/y.ini"                    other cases than the four above
#   KEEP_BASE=1                                        keep the built unmutated copy for the
#                                                      next run into the same OUT
#   CI_MUTANTS_PARALLEL=N                              mutants judged at once, each in its own
#                                                      copy (default 1; lines come as they finish)
#
# The patches are read from the copy of the tree the sweep builds (OUT/base), so a tree edited
# while a sweep runs changes nothing in it.
# Each mutant is planted in a copy of the tree and the cases run in order: the first catch settles
# it. Only a mutant that every case misses is given to `invar kernels --device cpu --set invariant`;
# caught there, it is a miss of the cases (exit 1); missed there too, it is no concern of this
# rule (the mutation suite judges it). tests/ci_mutants_known_misses.txt lists the misses a
# CPU-sized case cannot reach, each with its reason: those are reported, not failed, and one
# that a case catches after all fails the run until it is taken off the list.
set -u

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
out=${1:-$root/build-ci-mutants}
read -r -a case_files <<<"${CASES:-cases/ci.ini cases/reach.ini cases/long.ini cases/long-context.ini cases/long-batch.ini}"
cases_named="${case_files[*]}"
jobs=$(nproc 2>/dev/null || echo 2)
parallel=${CI_MUTANTS_PARALLEL:-1}
case "$parallel" in ''|*[!0-9]*|0) echo "ci-mutants: CI_MUTANTS_PARALLEL=$parallel: a whole number from 1" >&2; exit 2 ;; esac
mkdir -p "$out" || { echo "ci-mutants: cannot create $out"; exit 2; }
out=$(cd "$out" && pwd)
export GIT_CEILING_DIRECTORIES="$out"  # git apply inside $out must not find the repository
# shellcheck source=tests/mutants/header.sh
. "$here/mutants/header.sh"  # header
# shellcheck source=tests/mutants/tree.sh
. "$here/mutants/tree.sh"  # tree_copy, cpu_kernel_mutant

# The unmutated copy, built once; each mutant copies it and rebuilds what its patch touches.
base="$out/base"
if [ ! -x "$base/build/invar" ]; then
    rm -rf "$base" && mkdir -p "$base"
    tree_copy "$root" "$base" || { echo "ci-mutants: cannot copy the tree"; exit 2; }
    # A head start: the tree's own objects and programs, not its reports (nightly's among them).
    if [ -d "$root/build" ]; then
        tar -C "$root" --exclude=build/nightly --exclude=build/report --exclude=build/bench -cf - build |
            tar -xf - -C "$base" || { echo "ci-mutants: cannot copy $root/build"; exit 2; }
    fi
    echo "ci-mutants: building the unmutated tree in $base (CUDA=0, -j$jobs)"
    nice make -C "$base" --no-print-directory -j"$jobs" CUDA=0 BUILD=build build/invar \
        >"$out/base-build.log" 2>&1 || { tail -n 20 "$out/base-build.log"; echo "ci-mutants: the tree does not build"; exit 2; }
fi
for c in "${case_files[@]}"; do
    (cd "$base" && nice build/invar run --case "$c" --out "$out/base-report/$(basename "$c" .ini)" \
        --quiet) >>"$out/base-run.log" 2>&1 || {
        tail -n 20 "$out/base-run.log"
        echo "ci-mutants: $c fails on the unmutated tree: fix that first"
        exit 2
    }
done

catching_case() {  # catching_case DIR LOG: runs the cases in DIR's tree in order; prints the first that fails
    local c
    for c in "${case_files[@]}"; do
        if ! (cd "$1" && timeout 900 nice build/invar run --case "$c" \
            --out "$1/report/$(basename "$c" .ini)" --quiet) >>"$2" 2>&1; then
            echo "$c"
            return
        fi
    done
}

patches=()
if [ -n "${MUTANTS:-}" ]; then
    IFS=',' read -r -a wanted <<<"$MUTANTS"
    for n in "${wanted[@]}"; do
        [ -f "$base/tests/mutants/$n.patch" ] || { echo "ci-mutants: no such mutant: $n"; exit 2; }
        patches+=("$base/tests/mutants/$n.patch")
    done
else
    for p in "$base"/tests/mutants/*.patch; do patches+=("$p"); done
fi

known_file="$base/tests/ci_mutants_known_misses.txt"
known_reason() {  # known_reason NAME: the listed reason, or nothing
    [ -f "$known_file" ] && awk -v n="$1" '$1 == n { $1 = ""; sub(/^ /, ""); print; exit }' "$known_file"
}

# judge PATCH: plants it in a copy of the base, prints its line and leaves its kind (case, known,
# missed, neither, stale, error) in OUT/verdicts/NAME.
judge() {
    local p=$1 name t0=$SECONDS dir caught_by reason kind
    name=$(basename "$p" .patch)
    dir="$out/$name"
    kind=error
    if ! { rm -rf "$dir" && cp -a "$base" "$dir"; }; then
        echo "$name: cannot copy $base"
    elif ! (cd "$dir" && git apply "$p") >"$out/$name.log" 2>&1; then
        echo "$name: does not apply"
    elif ! nice make -C "$dir" --no-print-directory -j"$mjobs" CUDA=0 BUILD=build build/invar >>"$out/$name.log" 2>&1; then
        echo "$name: does not build ($out/$name.log)"
    else
        caught_by=$(catching_case "$dir" "$out/$name.log")
        if [ -z "$caught_by" ]; then
            if (cd "$dir" && timeout 900 nice build/invar kernels --device cpu --set invariant \
                --out "$dir/kernels") >>"$out/$name.log" 2>&1; then
                kind=neither
                echo "$name: missed by $cases_named and by invar kernels (not this rule's) [$((SECONDS - t0)) s]"
            elif reason=$(known_reason "$name") && [ -n "$reason" ]; then
                kind=known
                echo "$name: missed by $cases_named, caught by invar kernels: a known miss ($reason) [$((SECONDS - t0)) s]"
            else
                kind=missed
                echo "$name: MISSED by $cases_named, caught by invar kernels: $(grep -a -m1 -E '<- must be stable|^FAIL' "$out/$name.log" | tr -s ' ' | cut -c1-160) [$((SECONDS - t0)) s]"
            fi
        else
            kind=case
            echo "$name: caught by $caught_by: $(grep -a -m1 -E '^FAIL' "$out/$name.log" | cut -c1-100) [$((SECONDS - t0)) s]"
            if [ -n "$(known_reason "$name")" ]; then
                kind=stale
                echo "$name: listed in $known_file but caught: take it off the list"
            fi
        fi
    fi
    echo "$kind" >"$out/verdicts/$name"
    rm -rf "$dir"
}

start=$SECONDS
mjobs=$(( jobs / parallel > 0 ? jobs / parallel : 1 ))  # make's jobs a mutant
rm -rf "$out/verdicts" && mkdir -p "$out/verdicts"
names=()
for p in "${patches[@]}"; do
    cpu_kernel_mutant "$p" || continue
    names+=("$(basename "$p" .patch)")
    while [ "$(jobs -rp | wc -l)" -ge "$parallel" ]; do wait -n; done
    judge "$p" &
done
wait
judged=${#names[@]} by_case=0 neither=0 known=0 errors=0 missed=() stale=()
for name in "${names[@]}"; do
    case "$(cat "$out/verdicts/$name" 2>/dev/null)" in
    case) by_case=$((by_case + 1)) ;;
    stale) by_case=$((by_case + 1)); stale+=("$name") ;;
    neither) neither=$((neither + 1)) ;;
    known) known=$((known + 1)) ;;
    missed) missed+=("$name") ;;
    *) errors=$((errors + 1)) ;;
    esac
done
[ "${KEEP_BASE:-0}" = 1 ] || rm -rf "$base"
echo
echo "ci-mutants: $judged CPU kernel mutants: $by_case caught by $cases_named, ${#missed[@]} missed by" \
     "it but caught by invar kernels, $known known misses, ${#stale[@]} listed but caught," \
     "$neither missed by both; $((SECONDS - start)) s"
[ "$errors" = 0 ] || { echo "ci-mutants: $errors mutant(s) did not apply or build (their lines above)"; exit 2; }
[ "$judged" -gt 0 ] && [ "${#missed[@]}" = 0 ] && [ "${#stale[@]}" = 0 ]
