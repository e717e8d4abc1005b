#!/usr/bin/env bash
# tests/mutants/run.sh — the mutation suite (`make mutants`): plants each tests/mutants/*.patch
# in a scratch copy of the tree, rebuilds what the patch touches, and runs checks cheapest
# first until one fails. Prints one line per mutant and a closing count with the catch rate,
# then rewrites tests/mutants/LEDGER.md from the state files (tests/mutants/ledger.sh).
#
#   MUTANTS=a,b          only these mutants (names without .patch)
#   MUTANTS_FRESH=1      judge again the mutants already judged (state in build-mutants/state)
#   MUTANTS_KEEP=1       keep each scratch copy (build-mutants/NAME) instead of deleting it
#   MUTANTS_DIR=DIR      where the base copy, scratch copies and state live (build-mutants)
#   MUTANTS_JOBS=N       make -jN for the base and each mutant's rebuild (default: nproc, shared
#                        among MUTANTS_PARALLEL)
#   MUTANTS_PARALLEL=N   mutants judged at once, each in its own scratch copy of the one base
#                        (default 1; a GPU host's CUDA mutants spend most of their time in nvcc)
#
# A patch's leading '# key: value' lines (git apply ignores them) say what it is:
#   class   kernel, engine, comparator, verdict, runner or report (kernel mutants must be caught
#           by the kernel-level checks: a catch by a case is reported as end-to-end only)
#   device  cpu or cuda (cuda: compiled here, run only where nvidia-smi lists a GPU)
#   checks  the targeted checks, cheapest first: unit:TEST, kernels:OP (the invariant set;
#           kernels:OP/SET another, e.g. kernels:gemm/reference), case:NAME,
#           script:NAME (tests/NAME.sh BUILD, e.g. script:test_serve), and
#           kernels-exhaustive:OP (`invar kernels --exhaustive`, nightly's mode)
#   equivalent  why the mutant cannot change any bit: listed, not counted
# After the targeted checks every mutant still alive meets the ladder of `make check`'s CPU
# suites: every unit test, `invar kernels --device cpu`, then the CPU cases and scripted suites.
# A check that the unmutated tree fails as well catches nothing: the mutant goes on down the
# list, and a survivor's line names the checks that could not judge it.
set -u

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${MUTANTS_DIR:-$root/build-mutants}
state="$out/state"
base="$out/base"
mkdir -p "$state" || { echo "mutants: cannot create $state"; exit 2; }
# git apply inside build-mutants/ must not find the enclosing repository (it would then apply
# the patch relative to the repository root, i.e. to the real tree).
export GIT_CEILING_DIRECTORIES="$out"

gpu=0 gpu_name="no GPU"
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
    gpu=1
    gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
fi
where="$(uname -n) ($(nproc 2>/dev/null || echo '?') cores, $gpu_name)"  # a verdict's host, in the ledger

# shellcheck source=tests/mutants/header.sh
. "$here/header.sh"  # header, header_problem
# shellcheck source=tests/mutants/tree.sh
. "$here/tree.sh"  # tree_copy

# --- the base copy: the tree's tracked (and untracked, not ignored) files, built once --------
# Each base build is made only when a mutant of its device is judged: on a GPU host that has
# the CPU verdicts already (build-mutants/state carried over), only the CUDA base is built.
parallel=${MUTANTS_PARALLEL:-1}
[[ "$parallel" =~ ^[1-9][0-9]*$ ]] || { echo "mutants: MUTANTS_PARALLEL=$parallel: not a count"; exit 2; }
cores=$(nproc 2>/dev/null || echo 2)
jobs=${MUTANTS_JOBS:-$((cores / parallel > 0 ? cores / parallel : 1))}
copied=0 built_cpu=0 built_cuda=0

# head_start FROM TO: the tree's own build FROM (a folder of $root) as $base/TO, which make then
# brings up to date, but only if the dependency files name the copy's own targets: a .d that
# still says FROM/x.o leaves TO/x.o stale when a header changes.
head_start() {
    [ ! -d "$base/$2" ] || return 0
    cp -a "$root/$1" "$base/$2"
    find "$base/$2" -name '*.d' -exec sed -i "s|^$1/|$2/|" {} +
}

# build_base BUILD CUDA LOG WHAT: make all and the tests of the unmutated base, or exit 2.
build_base() {
    echo "mutants: building the unmutated $4 in $base/$1 (CUDA=$2, -j$jobs)"
    if ! nice make -C "$base" --no-print-directory -j"$jobs" CUDA="$2" BUILD="$1" all tests \
        >"$out/$3" 2>&1; then
        tail -n 20 "$out/$3"
        echo "mutants: the unmutated tree does not build (CUDA=$2); fix that first"
        exit 2
    fi
}

sync_base() {  # sync_base cpu|cuda
    if [ "$copied" = 0 ]; then
        mkdir -p "$base"
        [ -d "$root/build-cpu" ] && head_start build-cpu build
        tree_copy "$root" "$base" || { echo "mutants: cannot copy the tree"; exit 2; }
        copied=1
    fi
    if [ "$1" = cpu ] && [ "$built_cpu" = 0 ]; then
        build_base build 0 base-build.log base
        built_cpu=1
    fi
    # On a GPU host the CUDA mutants run: a CUDA base too, so each rebuilds only its own .cu;
    # its head start is the tree's own CUDA build (build/ on a GPU host) where there is one.
    if [ "$1" = cuda ] && [ "$gpu" = 1 ] && [ "$built_cuda" = 0 ]; then
        if [ -f "$root/build/libinvar.a" ] && ls "$root"/build/kernels/cuda/*.cu.o >/dev/null 2>&1; then
            head_start build build-cuda
        fi
        build_base build-cuda 1 base-build-cuda.log "CUDA base"
        built_cuda=1
    fi
}

# --- checks: each prints its output to $log; returns 0 when the mutant survived it ----------
first_failure() {  # the line of $log that says what failed
    local line="" pattern
    for pattern in '<- must be stable' '^FAIL' '\[  ERROR   \]|\[  FAILED  \]|[Ff]ailure!' \
                   'Assertion|error:|never varied|not written'; do
        line=$(grep -a -m1 -E "$pattern" "$1")
        [ -n "$line" ] && break
    done
    [ -n "$line" ] || line=$(grep -a -v '^\s*$' "$1" | tail -n 1)
    printf '%s' "$line" | tr -s ' ' | cut -c1-200
}

run_check() {  # run_check DIR CHECK LOG: 0 survived, 1 caught, 2 not applicable
    local dir=$1 check=$2 log=$3 kind=${2%%:*} arg=${2#*:} dev=cpu build=build
    [ "$MUTANT_DEVICE" = cuda ] && { dev=cuda; build=build-cuda; }
    local mk=(nice make -C "$dir" --no-print-directory -j"$jobs" BUILD="$build")
    [ "$dev" = cpu ] && mk+=(CUDA=0)
    case "$kind" in
    unit)
        [ -f "$dir/tests/$arg.c" ] || return 2
        "${mk[@]}" "$build/tests/$arg" >"$log" 2>&1 || return 1
        (cd "$dir" && timeout 600 "$build/tests/$arg") >"$log" 2>&1 || return 1 ;;
    units)
        "${mk[@]}" tests >"$log" 2>&1 || return 1
        local t
        for t in "$dir/$build"/tests/test_*; do
            case "$t" in *.o | *.d) continue ;; esac
            [ -x "$t" ] || continue
            (cd "$dir" && timeout 600 "$t") >"$log" 2>&1 || return 1
        done ;;
    kernels | kernels-exhaustive)
        local op=()
        case $arg in
            all) ;;
            */*) op=(--op "${arg%%/*}" --set "${arg#*/}") ;;
            *) op=(--op "$arg" --set invariant) ;;
        esac
        # kernels-exhaustive: the nightly mode (`make nightly`), for a mutant whose threshold
        # only its shapes reach; a catch there is a nightly catch, not a make check one
        [ "$kind" = kernels-exhaustive ] && op+=(--exhaustive)
        (cd "$dir" && timeout 600 nice "$build/invar" kernels --device "$dev" "${op[@]}" \
            --out "$build/report/kernels") >"$log" 2>&1 || return 1 ;;
    case)  # the run, then what make check expects of its report beyond the exit code
        (cd "$dir" && timeout 600 nice "$build/invar" run --case "cases/$arg.ini" \
            --out "$build/report/run/$arg") >"$log" 2>&1 || return 1
        (cd "$dir" && timeout 600 bash tests/case_expectations.sh "$arg" "$build/report/run/$arg" "$build") \
            >>"$log" 2>&1 || return 1 ;;
    script)  # a make check suite written as a script: tests/NAME.sh BUILD
        [ -f "$dir/tests/$arg.sh" ] || return 2
        "${mk[@]}" all >"$log" 2>&1 || return 1
        (cd "$dir" && timeout 600 bash "tests/$arg.sh" "$build") >"$log" 2>&1 || return 1 ;;
    *) echo "mutants: unknown check '$check'" >"$log"; return 2 ;;
    esac
    return 0
}

# base_fails CHECK: 0 when the unmutated base fails CHECK itself, so that a mutant failing it
# proves nothing (a check broken on the tree would count every mutant caught). Each check runs
# on the base once a run, lazily, its exit status kept in $out/base-checks; one at a time, as
# the checks share the base's report folders.
base_fails() {
    local dir="$out/base-checks" key="${MUTANT_DEVICE}-${1//[^A-Za-z0-9_.-]/_}"
    mkdir -p "$dir"
    (
        flock 9
        if [ ! -f "$dir/$key.rc" ]; then
            run_check "$base" "$1" "$dir/$key.log"
            echo $? >"$dir/$key.rc"
        fi
    ) 9>"$dir/lock"
    [ "$(cat "$dir/$key.rc" 2>/dev/null)" = 1 ]
}

# The ladder after the targeted checks: make check's CPU suites, cheapest first (its cases, then
# its scripted suites; the Python bridge's where python3 has numpy, as make check runs it).
LADDER_CPU="units:all kernels:all case:sampled case:ci case:small-model case:backends case:configs case:eviction case:warm-copies case:tp case:tp-size case:graphs case:reach case:long case:long-context case:long-batch script:test_suites script:test_cli script:test_resume script:test_shard script:test_triage script:test_serve script:test_probe script:test_plugin script:test_warm_copies script:test_model_dir script:test_bench_results script:doc_example script:test_serve_load"
if bash "$here/../numpy_python.sh" >/dev/null; then
    LADDER_CPU="$LADDER_CPU script:test_bridge"
fi
LADDER_CUDA="unit:test_cuda_ops kernels:all case:gpu"

judge() {  # judge PATCH: prints the mutant's line; sets VERDICT
    local patch=$1 name
    name=$(basename "$patch" .patch)
    local class device checks equivalent
    class=$(header "$patch" class)
    device=$(header "$patch" device)
    checks=$(header "$patch" checks)
    equivalent=$(header "$patch" equivalent)
    MUTANT_DEVICE=${device:-cpu}
    local problem
    problem=$(header_problem "$patch")
    if [ -n "$problem" ]; then
        VERDICT=invalid
        LINE="$name: invalid (malformed header: $problem)"
        return
    fi
    if [ -n "$equivalent" ]; then
        VERDICT=equivalent
        LINE="$name: equivalent, not counted ($equivalent)"
        return
    fi
    local dir="$out/$name"
    rm -rf "$dir"
    cp -a "$base" "$dir" || { echo "mutants: cannot copy $base"; exit 2; }
    if ! (cd "$dir" && git apply "$patch") >"$out/$name.apply.log" 2>&1; then
        VERDICT=invalid
        LINE="$name: invalid (does not apply: $(head -n1 "$out/$name.apply.log"))"
        return
    fi
    if [ "$MUTANT_DEVICE" = cuda ]; then
        local objs=() f
        for f in $(grep -E '^\+\+\+ b/.*\.cu$' "$patch" | sed 's|^+++ b/||'); do
            objs+=("build-cuda/$f.o")
        done
        if [ "$gpu" = 0 ]; then
            if nice make -C "$dir" --no-print-directory -j"$jobs" CUDA=1 BUILD=build-cuda "${objs[@]}" \
                >"$out/$name.build.log" 2>&1; then
                VERDICT=skipped
                LINE="$name: skipped (no CUDA device: patched and compiled with nvcc, not run)"
            else
                VERDICT=invalid
                LINE="$name: invalid (does not compile: $(grep -m1 -E 'error:|Error [0-9]' "$out/$name.build.log"))"
            fi
            return
        fi
        if ! nice make -C "$dir" --no-print-directory -j"$jobs" CUDA=1 BUILD=build-cuda all tests \
            >"$out/$name.build.log" 2>&1; then
            VERDICT=invalid
            LINE="$name: invalid (does not compile: $(grep -m1 -E 'error:|Error [0-9]' "$out/$name.build.log"))"
            return
        fi
    elif ! nice make -C "$dir" --no-print-directory -j"$jobs" CUDA=0 BUILD=build build/invar \
        >"$out/$name.build.log" 2>&1; then
        VERDICT=invalid
        LINE="$name: invalid (does not compile: $(grep -m1 -E 'error:|Error [0-9]' "$out/$name.build.log"))"
        return
    fi
    local ladder=$LADDER_CPU done=" " c rc log="$out/$name.check.log" broken=""
    [ "$MUTANT_DEVICE" = cuda ] && ladder=$LADDER_CUDA
    for c in $checks $ladder; do
        case "$done" in *" $c "*) continue ;; esac
        done="$done$c "
        run_check "$dir" "$c" "$log"
        rc=$?
        [ "$rc" = 1 ] || continue
        # A binary that cannot start (a missing shared library) judges nothing.
        if grep -q -E 'error while loading shared libraries|cannot open shared object file' "$log"; then
            VERDICT=invalid
            LINE="$name: invalid (does not run: $(grep -m1 -E 'error while loading' "$log" | cut -c1-160))"
            return
        fi
        if base_fails "$c"; then
            broken="$broken $c"
            continue
        fi
        local how="" first
        first=$(first_failure "$log")
        if [ "${c%%:*}" = kernels ] || [ "${c%%:*}" = kernels-exhaustive ]; then
            # A fingerprint note is a reduction order that followed M, whatever the bits did.
            if grep -q '<- .* order fingerprint ' "$log"; then
                how=" (order fingerprint)"
            elif ! grep -q '<- must be stable' "$log" && grep -q '^FAIL' "$log"; then
                how=" (accuracy only)"
            fi
        fi
        if [ "$class" = kernel ] && [ "${c%%:*}" = case ]; then how="$how (end-to-end only)"; fi
        VERDICT=caught
        LINE="$name: caught by $c$how: $first"
        [ "${MUTANTS_KEEP:-0}" = 1 ] || rm -rf "$dir"
        return
    done
    VERDICT=survived
    LINE="$name: SURVIVED (checks run:$done)"
    [ -z "$broken" ] || LINE="$LINE; the unmutated base fails$broken too: those judged nothing (logs in $out/base-checks)"
    [ "${MUTANTS_KEEP:-0}" = 1 ] || rm -rf "$dir"
}

# --- the mutants to judge ------------------------------------------------------------------
patches=()
if [ -n "${MUTANTS:-}" ]; then
    IFS=',' read -r -a wanted <<<"$MUTANTS"
    for n in "${wanted[@]}"; do
        [ -f "$here/$n.patch" ] || { echo "mutants: no such mutant: $n ($here/$n.patch)"; exit 2; }
        patches+=("$here/$n.patch")
    done
else
    for p in "$here"/*.patch; do patches+=("$p"); done
fi
[ "${#patches[@]}" -gt 0 ] || { echo "mutants: no patches in $here"; exit 2; }

# judge_and_note PATCH SUM: judge, print its line, write its state file (sum, verdict, line, then
# how long and where: what tests/mutants/ledger.sh writes LEDGER.md from).
judge_and_note() {
    local t0=$SECONDS secs
    judge "$1"
    secs=$((SECONDS - t0))
    echo "$LINE [$secs s]"
    printf '%s\n%s\n%s\n%s\n%s\n' "$2" "$VERDICT" "$LINE" "$secs" "$where, $(date -u +%Y-%m-%d)" \
        >"$state/$(basename "$1" .patch)"
}

rm -rf "$out/base-checks"  # the base is synced again below: its checks' verdicts with it
start=$SECONDS
running=0
judged=()
declare -A count=()
declare -A class_caught=() class_total=()
for p in "${patches[@]}"; do
    name=$(basename "$p" .patch)
    sum=$(sha1sum "$p" | cut -c1-40)
    st="$state/$name"
    if [ "${MUTANTS_FRESH:-0}" != 1 ] && [ -f "$st" ] && [ "$(sed -n 1p "$st")" = "$sum" ]; then
        VERDICT=$(sed -n 2p "$st")
        LINE=$(sed -n 3p "$st")
        # A CUDA mutant skipped for want of a device is judged again where there is one.
        if ! { [ "$VERDICT" = skipped ] && [ "$gpu" = 1 ]; }; then
            echo "$LINE (earlier run)"
            count[$VERDICT]=$((${count[$VERDICT]:-0} + 1))
            cls="$(header "$p" device)/$(header "$p" class)"
            [ "$VERDICT" = caught ] && class_caught[$cls]=$((${class_caught[$cls]:-0} + 1))
            case "$VERDICT" in caught | survived) class_total[$cls]=$((${class_total[$cls]:-0} + 1)) ;; esac
            continue
        fi
    fi
    dev=$(header "$p" device)
    sync_base "${dev:-cpu}"  # in this shell: the bases are built once, before any judge forks
    rm -f "$st"
    if [ "$parallel" = 1 ]; then
        judge_and_note "$p" "$sum"
    else
        if [ "$running" -ge "$parallel" ]; then
            wait -n
            running=$((running - 1))
        fi
        judge_and_note "$p" "$sum" &
        running=$((running + 1))
    fi
    judged+=("$p")
done
wait
# The verdicts of this run, from the state files its judges wrote.
for p in "${judged[@]}"; do
    name=$(basename "$p" .patch)
    VERDICT=$(sed -n 2p "$state/$name" 2>/dev/null)
    if [ -z "$VERDICT" ]; then
        VERDICT=invalid
        echo "$name: invalid (its judge stopped without a verdict)"
    fi
    count[$VERDICT]=$((${count[$VERDICT]:-0} + 1))
    cls="$(header "$p" device)/$(header "$p" class)"
    [ "$VERDICT" = caught ] && class_caught[$cls]=$((${class_caught[$cls]:-0} + 1))
    case "$VERDICT" in caught | survived) class_total[$cls]=$((${class_total[$cls]:-0} + 1)) ;; esac
done

caught=${count[caught]:-0} survived=${count[survived]:-0} skipped=${count[skipped]:-0}
echo
for cls in $(printf '%s\n' "${!class_total[@]}" | sort); do
    echo "  $cls: ${class_caught[$cls]:-0} of ${class_total[$cls]} caught"
done
rate="n/a"
[ $((caught + survived)) -gt 0 ] && rate="$((100 * caught / (caught + survived)))%"
echo "$caught caught, $survived survived, $skipped skipped" \
     "(${count[invalid]:-0} invalid, ${count[equivalent]:-0} equivalent not counted);" \
     "catch rate $rate; $((SECONDS - start)) s"
bash "$here/ledger.sh" "$state" "$here/LEDGER.md"
[ "$survived" = 0 ] && [ "${count[invalid]:-0}" = 0 ]
