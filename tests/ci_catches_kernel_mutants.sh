#!/usr/bin/env bash
# tests/ci_catches_kernel_mutants.sh — every CPU kernel mutant of tests/mutants/ (class: kernel,
# device: cpu, not argued equivalent) that `invar kernels` catches must also be caught by an
# engine run of `make check`: cases/ci.ini (the CI matrix), cases/reach.ini (past the size
# thresholds ci.ini's tiny model stays under), cases/long.ini (contexts past the attention's
# split) or cases/long-batch.ini (129 of them decoding together). A kernel bug the kernel
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
#
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
read -r -a case_files <<<"${CASES:-cases/ci.ini cases/reach.ini cases/long.ini cases/long-batch.ini}"
cases_named="${case_files[*]}"
jobs=$(nproc 2>/dev/null || echo 2)
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
        [ -f "$here/mutants/$n.patch" ] || { echo "ci-mutants: no such mutant: $n"; exit 2; }
        patches+=("$here/mutants/$n.patch")
    done
else
    for p in "$here"/mutants/*.patch; do patches+=("$p"); done
fi

known_file="$here/ci_mutants_known_misses.txt"
known_reason() {  # known_reason NAME: the listed reason, or nothing
    [ -f "$known_file" ] && awk -v n="$1" '$1 == n { $1 = ""; sub(/^ /, ""); print; exit }' "$known_file"
}

start=$SECONDS
judged=0 by_case=0 neither=0 known=0 missed=() stale=()
for p in "${patches[@]}"; do
    name=$(basename "$p" .patch)
    cpu_kernel_mutant "$p" || continue
    judged=$((judged + 1))
    t0=$SECONDS
    dir="$out/$name"
    rm -rf "$dir" && cp -a "$base" "$dir" || { echo "ci-mutants: cannot copy $base"; exit 2; }
    (cd "$dir" && git apply "$p") >"$out/$name.log" 2>&1 || { echo "$name: does not apply"; exit 2; }
    nice make -C "$dir" --no-print-directory -j"$jobs" CUDA=0 BUILD=build build/invar \
        >>"$out/$name.log" 2>&1 || { echo "$name: does not build ($out/$name.log)"; exit 2; }
    caught_by=$(catching_case "$dir" "$out/$name.log")
    if [ -z "$caught_by" ]; then
        if (cd "$dir" && timeout 900 nice build/invar kernels --device cpu --set invariant \
            --out "$dir/kernels") >>"$out/$name.log" 2>&1; then
            neither=$((neither + 1))
            echo "$name: missed by $cases_named and by invar kernels (not this rule's) [$((SECONDS - t0)) s]"
        elif reason=$(known_reason "$name") && [ -n "$reason" ]; then
            known=$((known + 1))
            echo "$name: missed by $cases_named, caught by invar kernels: a known miss ($reason) [$((SECONDS - t0)) s]"
        else
            missed+=("$name")
            echo "$name: MISSED by $cases_named, caught by invar kernels: $(grep -a -m1 -E '<- must be stable|^FAIL' "$out/$name.log" | tr -s ' ' | cut -c1-160) [$((SECONDS - t0)) s]"
        fi
    else
        by_case=$((by_case + 1))
        echo "$name: caught by $caught_by: $(grep -a -m1 -E '^FAIL' "$out/$name.log" | cut -c1-100) [$((SECONDS - t0)) s]"
        if [ -n "$(known_reason "$name")" ]; then
            stale+=("$name")
            echo "$name: listed in $known_file but caught: take it off the list"
        fi
    fi
    rm -rf "$dir"
done
[ "${KEEP_BASE:-0}" = 1 ] || rm -rf "$base"
echo
echo "ci-mutants: $judged CPU kernel mutants: $by_case caught by $cases_named, ${#missed[@]} missed by" \
     "it but caught by invar kernels, $known known misses, ${#stale[@]} listed but caught," \
     "$neither missed by both; $((SECONDS - start)) s"
[ "$judged" -gt 0 ] && [ "${#missed[@]}" = 0 ] && [ "${#stale[@]}" = 0 ]
