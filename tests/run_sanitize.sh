#!/usr/bin/env bash
# tests/run_sanitize.sh BUILD — what `make sanitize` runs on its ASan+UBSan build: every CPU unit
# test, the fuzz corpus replays and `invar run --case cases/smoke.ini`. A sanitizer report
# aborts the process (the build uses -fno-sanitize-recover), which fails its suite. Closes with
# "sanitize: N passed, N failed".
set -u
BUILD=${1:-build-sanitize}
# Leaks are reported too; halt_on_error makes every report fatal, abort_on_error leaves a core
# dump's worth of signal for the exit status.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:halt_on_error=1:abort_on_error=1:strict_string_checks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
passed=0 failed=0
failures=()

suite() {  # suite NAME COMMAND...
    local name=$1
    shift
    echo
    echo "=== sanitize: $name"
    if "$@"; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
        failures+=("$name")
    fi
}

for t in "$BUILD"/tests/test_*; do
    case "$t" in *.o | *.d) continue ;; esac
    [ -x "$t" ] || continue
    suite "$(basename "$t")" "$t"
done
for r in "$BUILD"/fuzz/replay_*; do
    [ -x "$r" ] || continue
    name=${r##*/replay_}
    suite "fuzz replay: $name" "$r" "tests/fuzz/$name"
done
suite "invar run --case cases/smoke.ini" "$BUILD/invar" run --case cases/smoke.ini -q \
    --out "$BUILD/report/smoke"

echo
if [ "${#failures[@]}" -gt 0 ]; then
    printf 'failed: %s\n' "${failures[@]}"
fi
echo "sanitize: $passed passed, $failed failed"
[ "$failed" = 0 ]
