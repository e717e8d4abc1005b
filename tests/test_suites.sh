#!/usr/bin/env bash
# tests/test_suites.sh — the suite runner of make check (tests/suites.sh) on toy suites: a
# parallel run starts them longest first by a record (not in the order named), gathers their
# logs in the order named, counts a failure, writes its own record; CHECK_SUITES runs only the
# suites a file names, and a file it cannot read is exit 2.
set -u
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/invar-test-suites.XXXXXX") || exit 2
trap 'rm -rf "$work"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# A runner script over four toy suites: each appends its name to a start log when it starts.
cat >"$work/runner.sh" <<RUNNER
set -u
. "$here/suites.sh"
toy() { echo "\$1" >>"$work/started"; echo "output of \$1"; sleep "\$2"; [ "\$1" != fails ]; }
suite "short" toy short 0.2
suite "fails" toy fails 0.1
suite "mid" toy mid 0.5
suite "long" toy long 1
suite_wait
print_failures
suite_record "$work/record.tsv"
echo "counts \$passed \$failed"
RUNNER
printf '# a comment line, skipped\n1\tshort\n3\tmid\n9\tlong\n' >"$work/hints.tsv"

: >"$work/started"
CHECK_JOBS=1 SUITE_SECONDS_HINTS="$work/hints.tsv" CHECK_LOG="$work/check.log" \
    bash "$work/runner.sh" >"$work/one.out" 2>&1
[ "$(tr '\n' ' ' <"$work/started")" = "short fails mid long " ] ||
    fail "CHECK_JOBS=1: not in the order named: $(tr '\n' ' ' <"$work/started")"

: >"$work/started"
CHECK_JOBS=2 SUITE_SECONDS_HINTS="$work/hints.tsv" CHECK_LOG="$work/check.log" \
    bash "$work/runner.sh" >"$work/two.out" 2>&1
# Longest first by the hints ("fails" has none and counts 30 s): fails and long at once (their
# start lines may come in either order), then mid as fails ends, short as mid ends.
[ "$(head -2 "$work/started" | sort | tr '\n' ' ')$(tail -n +3 "$work/started" | tr '\n' ' ')" = \
  "fails long mid short " ] || fail "CHECK_JOBS=2: not longest first: $(tr '\n' ' ' <"$work/started")"
grep -q "^counts 3 1$" "$work/two.out" || fail "CHECK_JOBS=2: not 3 passed and 1 failed: $(tail -1 "$work/two.out")"
[ "$(grep '^=== ' "$work/check.log" | tr '\n' ' ')" = "=== short === fails === mid === long " ] ||
    fail "the log is not in the order named: $(grep '^=== ' "$work/check.log" | tr '\n' ' ')"
grep -q "^output of long$" "$work/check.log" || fail "a suite's output is not in the log"
[ "$(cut -f2 "$work/record.tsv" | tr '\n' ' ')" = "short fails mid long " ] &&
    [ "$(awk -F'\t' '$2 == "long" {print $1}' "$work/record.tsv")" -ge 1 ] ||
    fail "the record is not each suite's time in the order named: $(tr '\n\t' '; ' <"$work/record.tsv")"

# This build's record comes before the hints: short recorded longest and fails shortest, the
# first two to start are short and long.
printf '50\tshort\n0\tfails\n' >"$work/own.tsv"
: >"$work/started"
CHECK_JOBS=2 SUITE_SECONDS_HINTS="$work/hints.tsv" SUITE_SECONDS="$work/own.tsv" \
    CHECK_LOG="$work/check.log" bash "$work/runner.sh" >/dev/null 2>&1
[ "$(head -2 "$work/started" | sort | tr '\n' ' ')" = "long short " ] ||
    fail "the build's own record did not come before the hints: $(tr '\n' ' ' <"$work/started")"

# CHECK_SUITES: only the suites named, the rest said to be left out.
printf 'mid\nlong\n' >"$work/only.txt"
: >"$work/started"
CHECK_SUITES="$work/only.txt" CHECK_JOBS=2 CHECK_LOG="$work/check.log" bash "$work/runner.sh" \
    >"$work/only.out" 2>&1
[ "$(sort "$work/started" | tr '\n' ' ')" = "long mid " ] ||
    fail "CHECK_SUITES: ran $(tr '\n' ' ' <"$work/started")"
grep -q "^not run: 2 suites CHECK_SUITES" "$work/only.out" || fail "CHECK_SUITES: the suites left out are not said"
CHECK_SUITES="$work/no-such-file" bash "$work/runner.sh" >"$work/bad.out" 2>&1
rc=$?
[ "$rc" = 2 ] && grep -q "no-such-file: cannot read it" "$work/bad.out" ||
    fail "CHECK_SUITES naming no file: exit $rc, $(head -1 "$work/bad.out")"

[ "$fails" = 0 ] && echo "test_suites: ok" || { echo "test_suites: $fails failed"; exit 1; }
