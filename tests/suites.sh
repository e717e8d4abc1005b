# tests/suites.sh — sourced by run_all.sh and run_sanitize.sh: the suite runner and counter, and
# the suites both run on their build (every cmocka unit test binary; every fuzz target's corpus
# and saved reproducers through the plain replay driver, tests/fuzz/replay.c, no clang needed).
# SUITE_PREFIX is put before each suite's name.
#
# CHECK_JOBS=N runs up to N suites at once (default: the number of cores, at most 16; 1 runs
# them one after another, streaming their output). In parallel each suite's closing line is
# printed as soon as it ends, its output goes to a log, and the logs are gathered whole, in the
# order the suites were named, into CHECK_LOG (default BUILD/check.log) at the next
# suite_wait, so that file reads as a sequential run's; the outputs of failed suites are
# printed again at the end (print_failures).
#
# In parallel the suites named before a suite_wait start longest first: taken in the order
# named, a long suite named late ends alone after the rest (results/check/check-times.csv has
# GPU hosts' checks both ways). A suite's expected time is its last
# one in SUITE_SECONDS (a file of "seconds<TAB>name" lines, the record the last check on this
# build wrote) or else in SUITE_SECONDS_HINTS (one committed for this kind of host); a suite in
# neither counts SUITE_SECONDS_DEFAULT (30). suite_record FILE writes this run's times there.
#
# CHECK_SUITES=FILE runs only the suites FILE names (one whole name a line, as its closing line
# says it): a part of the check timed alone. The rest are counted in suite_unselected.
passed=0 failed=0 skipped=0
failures=()
failed_ids=()   # the parallel logs of the failed suites, printed by print_failures
suite_jobs=${CHECK_JOBS:-$(nproc 2>/dev/null || echo 1)}
[ "$suite_jobs" -gt 16 ] && suite_jobs=16
suite_dir=$(mktemp -d "${TMPDIR:-/tmp}/invar-suites.XXXXXX") || exit 2
trap 'rm -rf "$suite_dir"' EXIT
suite_count=0   # suites (and skips) named: their order in the output
suite_shown=0   # of those, the ones already gathered
suite_queue=()  # ids of the suites named but not started (parallel runs)
declare -A suite_expected=()  # name -> expected seconds, read at the first suite_start_queued
suite_times=()  # "seconds<TAB>name" of each suite gathered, for suite_record
suite_unselected=0  # suites CHECK_SUITES leaves out
declare -A suite_selected=()
if [ -n "${CHECK_SUITES:-}" ]; then
    [ -r "$CHECK_SUITES" ] || { echo "suites.sh: CHECK_SUITES=$CHECK_SUITES: cannot read it" >&2; exit 2; }
    while IFS= read -r line; do [ -n "$line" ] && suite_selected[$line]=1; done <"$CHECK_SUITES"
    [ "${#suite_selected[@]}" -gt 0 ] || { echo "suites.sh: CHECK_SUITES=$CHECK_SUITES names no suite" >&2; exit 2; }
fi
if [ "$suite_jobs" -gt 1 ]; then
    check_log=${CHECK_LOG:-${BUILD:-build}/check.log}
    mkdir -p "$(dirname "$check_log")" && : >"$check_log" || exit 2
    echo "suites' whole outputs, in order: $check_log"
fi

suite_closing() {  # suite_closing NAME OK|FAILED SECONDS: the closing line
    echo "--- ${SUITE_PREFIX:-}$1: $2 in $3 s"
}

suite_count_verdict() {  # suite_count_verdict NAME OK|FAILED
    if [ "$2" = ok ]; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
        failures+=("$1")
    fi
}

suite() {  # suite NAME COMMAND...: runs one suite (in the background with CHECK_JOBS > 1)
    local name=$1 start=$SECONDS verdict=ok id
    shift
    if [ -n "${CHECK_SUITES:-}" ] && [ -z "${suite_selected[$name]:-}" ]; then
        suite_unselected=$((suite_unselected + 1))
        return
    fi
    if [ "$suite_jobs" -le 1 ]; then
        echo
        echo "=== ${SUITE_PREFIX:-}$name"
        "$@" || verdict=FAILED
        suite_count_verdict "$name" "$verdict"
        suite_times+=("$((SECONDS - start))"$'\t'"${SUITE_PREFIX:-}$name")
        suite_closing "$name" "$verdict" $((SECONDS - start))
        return
    fi
    suite_count=$((suite_count + 1))
    id=$(printf '%04d' "$suite_count")
    printf '%s\n' "$name" >"$suite_dir/$id.name"
    printf '%q ' "$@" >"$suite_dir/$id.command"  # run by eval: shell functions are commands too
    suite_queue+=("$id")
}

suite_expected_read() {  # suite_expected_read FILE...: "seconds<TAB>name" lines; a later file's time wins
    local f seconds name
    for f in "$@"; do
        [ -n "$f" ] && [ -r "$f" ] || continue
        while IFS=$'\t' read -r seconds name; do
            case $seconds in '' | *[!0-9]*) continue ;; esac
            [ -n "$name" ] && suite_expected[$name]=$seconds
        done <"$f"
    done
}

suite_start_queued() {  # starts the queued suites, longest expected first, suite_jobs at a time
    [ "${#suite_queue[@]}" -gt 0 ] || return 0
    [ "${#suite_expected[@]}" -gt 0 ] || suite_expected_read "${SUITE_SECONDS_HINTS:-}" "${SUITE_SECONDS:-}"
    local id name order
    order=$(for id in "${suite_queue[@]}"; do
                name=$(cat "$suite_dir/$id.name")
                printf '%s\t%s\n' "${suite_expected[${SUITE_PREFIX:-}$name]:-${SUITE_SECONDS_DEFAULT:-30}}" "$id"
            done | sort -t$'\t' -k1,1nr -k2,2 | cut -f2)
    suite_queue=()
    for id in $order; do
        while [ "$(jobs -rp | wc -l)" -ge "$suite_jobs" ]; do wait -n; done
        name=$(cat "$suite_dir/$id.name")
        (
            start=$SECONDS
            if eval "$(cat "$suite_dir/$id.command")" >"$suite_dir/$id.log" 2>&1 </dev/null; then
                verdict=ok
            else
                verdict=FAILED
            fi
            echo "$verdict $((SECONDS - start))" >"$suite_dir/$id.verdict"
            suite_closing "$name" "$verdict" $((SECONDS - start))  # one short line: written whole
        ) &
    done
}

suite_record() {  # suite_record FILE: this run's suite times, "seconds<TAB>name", for SUITE_SECONDS
    [ "${#suite_times[@]}" -gt 0 ] || return 0
    printf '%s\n' "${suite_times[@]}" >"$1.tmp" && mv "$1.tmp" "$1" ||
        echo "suites.sh: could not write the suites' times to $1" >&2
}

skip_suite() {  # skip_suite MESSAGE: a suite that cannot run here, counted and said in order
    if [ "$suite_jobs" -le 1 ]; then
        echo
        echo "=== SKIP: $1"
        skipped=$((skipped + 1))
        return
    fi
    echo "=== SKIP: $1"
    suite_count=$((suite_count + 1))
    printf '%s\n' "$1" >"$suite_dir/$(printf '%04d' "$suite_count").skip"
}

suite_wait() {  # suite_wait: starts the suites queued, waits for them, gathers their logs in order
    [ "$suite_jobs" -gt 1 ] && suite_start_queued
    wait
    local id verdict seconds name
    while [ "$suite_shown" -lt "$suite_count" ]; do
        suite_shown=$((suite_shown + 1))
        id=$(printf '%04d' "$suite_shown")
        if [ -f "$suite_dir/$id.skip" ]; then
            printf '\n=== SKIP: %s\n' "$(cat "$suite_dir/$id.skip")" >>"$check_log"
            skipped=$((skipped + 1))
            continue
        fi
        name=$(cat "$suite_dir/$id.name")
        read -r verdict seconds <"$suite_dir/$id.verdict" 2>/dev/null || { verdict=FAILED; seconds=0; }
        {
            echo
            echo "=== ${SUITE_PREFIX:-}$name"
            cat "$suite_dir/$id.log" 2>/dev/null
            suite_closing "$name" "$verdict" "$seconds"
        } >>"$check_log"
        suite_count_verdict "$name" "$verdict"
        suite_times+=("$seconds"$'\t'"${SUITE_PREFIX:-}$name")
        [ "$verdict" = ok ] || failed_ids+=("$id")
    done
}

unit_and_replay_suites() {  # unit_and_replay_suites BUILD [TEST]: TEST left to the caller
    local t r name
    for t in "$1"/tests/test_*; do
        case "$t" in *.o | *.d) continue ;; esac
        [ -x "$t" ] || continue
        [ "$(basename "$t")" = "${2:-}" ] && continue
        suite "$(basename "$t")" "$t"
    done
    for r in "$1"/fuzz/replay_*; do
        [ -x "$r" ] || continue
        name=${r##*/replay_}
        suite "fuzz replay: $name (tests/fuzz/$name)" "$r" "tests/fuzz/$name"
    done
}

print_failures() {  # the failed suites' whole outputs (parallel runs), then their names
    suite_wait
    local id
    for id in "${failed_ids[@]}"; do
        echo
        echo "=== ${SUITE_PREFIX:-}$(cat "$suite_dir/$id.name") (FAILED; output as in $check_log)"
        cat "$suite_dir/$id.log" 2>/dev/null
    done
    echo
    if [ "${#failures[@]}" -gt 0 ]; then
        printf 'failed: %s\n' "${failures[@]}"
    fi
    [ "$suite_unselected" = 0 ] || echo "not run: $suite_unselected suites CHECK_SUITES ($CHECK_SUITES) does not name"
    [ "$suite_jobs" -gt 1 ] && echo "suites' whole outputs, in order: $check_log"
    return 0
}
