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
SUITE_PREFIX="sanitize: "
# shellcheck source=tests/suites.sh
. "$(dirname "$0")/suites.sh"

unit_and_replay_suites "$BUILD"
suite "invar run --case cases/smoke.ini" "$BUILD/invar" run --case cases/smoke.ini -q \
    --out "$BUILD/report/smoke"

print_failures
echo "sanitize: $passed passed, $failed failed"
[ "$failed" = 0 ]
