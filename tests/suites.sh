# tests/suites.sh — sourced by run_all.sh and run_sanitize.sh: the suite counter, and the suites
# both run on their build (every cmocka unit test binary; every fuzz target's corpus and saved
# reproducers through the plain replay driver, tests/fuzz/replay.c, no clang needed).
# SUITE_PREFIX is put before each suite's name.
passed=0 failed=0 skipped=0
failures=()

suite() {  # suite NAME COMMAND...: runs one suite, counts it, says how long it took
    local name=$1 start=$SECONDS verdict=ok
    shift
    echo
    echo "=== ${SUITE_PREFIX:-}$name"
    if "$@"; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
        failures+=("$name")
        verdict=FAILED
    fi
    echo "--- ${SUITE_PREFIX:-}$name: $verdict in $((SECONDS - start)) s"
}

unit_and_replay_suites() {  # unit_and_replay_suites BUILD
    local t r name
    for t in "$1"/tests/test_*; do
        case "$t" in *.o | *.d) continue ;; esac
        [ -x "$t" ] || continue
        suite "$(basename "$t")" "$t"
    done
    for r in "$1"/fuzz/replay_*; do
        [ -x "$r" ] || continue
        name=${r##*/replay_}
        suite "fuzz replay: $name (tests/fuzz/$name)" "$r" "tests/fuzz/$name"
    done
}

print_failures() {
    echo
    if [ "${#failures[@]}" -gt 0 ]; then
        printf 'failed: %s\n' "${failures[@]}"
    fi
}
