#!/usr/bin/env bash
# tests/case_expectations.sh CASE DIR BUILD — what make check expects of cases/CASE.ini's report
# in DIR beyond the run's exit code: notes, controls caught in one place only, the rendered CI
# report. Exit 0 when every expectation holds (or CASE has none), 1 otherwise. make check
# (run_all.sh) runs it after each such case, and the mutation ladder (tests/mutants/run.sh) after
# its case rungs, so a bug only these catch is caught on both.
#
# tests/case_expectations.sh --cases prints the cases that have expectations, one a line.
set -u

# TP=1 vs TP=T as information: every invariant config of cases/tp.ini (all at T > 1) carries
# the note, with a number (the runner also ran its bs=1 baselines at T = 1).
tp_information_notes() {
    local rows noted
    rows=$(grep -c '"cpu/invariant/' "$1/summary.csv")
    noted=$(grep '"cpu/invariant/' "$1/summary.csv" |
            grep -cE 'information: TP=1 vs TP=[0-9]+ max \|Δ logprob\| [0-9.e+-]+ over [0-9]+ steps \(tokens agreed at [0-9]+')
    echo "cases/tp.ini: $rows invariant configs, $noted with the TP=1 vs TP=T note"
    [ "$rows" -gt 0 ] && [ "$rows" = "$noted" ]
}
# The all-reduce alone (invariant-ring): expected invariant and passing at T = 2, where two
# addends commute; expected batch-variant and caught at T = 3, 4 and 8 (columns expected,
# observed, verdict follow each other in summary.csv).
tp_ring_expectations() {
    local t want
    for t in 2 3 4 8; do
        want='"invariant","invariant","PASS"'
        [ "$t" -gt 2 ] && want='"batch-variant","batch-variant","PASS"'
        grep -q "\"cpu/invariant-ring/tensor_parallel=$t\".*$want" "$1/summary.csv" || {
            echo "cpu/invariant-ring/tensor_parallel=$t: not $want"
            return 1
        }
    done
    echo "invariant-ring: invariant at T = 2, caught at T = 3, 4, 8"
}
# cases/tp-size.ini: with the option every T passed bitwise equal to T = 1; without it (the
# control) every T noted a nonzero difference, so the comparison is one that can fail.
tp_size_expectations() {
    local t
    for t in 2 4 8; do
        grep -q "\"cpu/invariant/tensor_parallel=$t/tp_size_invariance=on\".*\"PASS\".*TP=1 vs TP=$t bitwise equal (0 of" \
            "$1/summary.csv" || { echo "tp_size_invariance = on at T = $t: not PASS bitwise equal"; return 1; }
        grep "\"cpu/invariant/tensor_parallel=$t/tp_size_invariance=off\"" "$1/summary.csv" |
            grep -qE "max \|Δ logprob\| [1-9]|max \|Δ logprob\| 0\.[0-9]*[1-9]" ||
            { echo "tp_size_invariance = off at T = $t: no difference from T = 1 (the control)"; return 1; }
    done
    echo "tp_size_invariance: T = 2, 4, 8 bitwise equal to T = 1; without it all three differ"
}
# cases/graphs.ini: every config that runs replayed decode steps, at T = 1 and 2 (its note
# counts them; the runner FAILs one that replayed none), and graphs are refused with the reason
# where they cannot run: with mla-flash's batch-scheduled split.
graphs_expectations() {
    local set t
    for set in invariant reference adversarial; do
        for t in 1 2; do
            grep -q "\"cpu/$set/backend=mla-unified/tensor_parallel=$t\".*\"PASS\".*cuda_graphs: [0-9]* decode steps padded to a bucket, [1-9][0-9]* replayed" \
                "$1/summary.csv" || { echo "cpu/$set at T = $t with cuda_graphs: not PASS with replayed steps"; return 1; }
        done
    done
    grep -q "\"cpu/reference/backend=mla-flash/tensor_parallel=1\".*cuda_graphs = on: backend mla-flash" "$1/summary.csv" ||
        { echo "cpu/reference with mla-flash: not skipped for graphs"; return 1; }
    echo "cuda_graphs: decode steps replayed on the three sets at T = 1 and 2; mla-flash skipped with the reason"
}
# control_caught_only DIR CASE CONFIG PATTERN WHERE: the negative control CONFIG of DIR's report
# has divergence rows, every one of them matching PATTERN (grep -E, after the config's column),
# and its summary row is batch-variant as expected: caught there and nowhere else.
control_caught_only() {
    local dir=$1 case=$2 config=$3 pattern=$4 where=$5 rows other
    rows=$(grep -c "^$config," "$dir/divergence.csv")
    other=$(grep "^$config," "$dir/divergence.csv" | grep -vEc "^$config,$pattern")
    echo "$config: $rows divergence rows, $other of them outside $where"
    [ "$rows" -gt 0 ] && [ "$other" = 0 ] &&
        grep -q "^\"$case\",$config,.*\"batch-variant\",\"batch-variant\",\"PASS\"" "$dir/summary.csv"
}

# The CI report as CI systems read it: JUnit XML (validated by a real XML parser where xmllint is;
# make check counts that as a skipped suite otherwise), Markdown, plots; one <testcase> per
# summary.csv row (config rows never span lines: the runner writes no newline inside a field).
ci_report() {
    "$BUILD/invar" report render "$1" || return 1
    local cases rows
    cases=$(grep -c '<testcase' "$1/junit.xml")
    rows=$(($(wc -l <"$1/summary.csv") - 1))
    echo "junit.xml: $cases testcases; summary.csv: $rows config rows"
    [ "$cases" = "$rows" ] || return 1
    if xmllint --version >/dev/null 2>&1; then
        xmllint --noout "$1/junit.xml" || return 1
    else
        echo "SKIP: junit.xml validation: xmllint not available (Debian: libxml2-utils)"
    fi
}

# --- each case's expectations: one table, listed by --cases and dispatched by name -----------
tp_expectations() { tp_information_notes "$1" && tp_ring_expectations "$1"; }
# The mla-split control with a cache for every request differs from its baselines in the batched
# run at max_num_seqs = 1 and nowhere else: the one config of make check that a runner skipping
# that run would leave uncaught.
eviction_expectations() {
    control_caught_only "$1" eviction '"cpu/invariant/backend=mla-split/kv_cache_blocks=0"' '"1",' "the run at bs=1"
}
# The control differs from its baselines in the warm copies (requests 3 and 4, served from the
# prefix cache) and nowhere else: a runner that compares the distinct prompts alone would leave it
# uncaught.
warm_copies_expectations() {
    control_caught_only "$1" warm-copies '"cpu/invariant"' '"[0-9]+","[34]",' "the warm copies (requests 3, 4)"
}
EXPECTATIONS="tp:tp_expectations tp-size:tp_size_expectations graphs:graphs_expectations
              eviction:eviction_expectations warm-copies:warm_copies_expectations ci:ci_report"

if [ "${1:-}" = --cases ]; then
    for e in $EXPECTATIONS; do echo "${e%%:*}"; done
    exit 0
fi
[ $# = 3 ] || { echo "usage: tests/case_expectations.sh CASE DIR BUILD | --cases" >&2; exit 2; }
CASE=$1 DIR=$2 BUILD=$3
for e in $EXPECTATIONS; do
    [ "${e%%:*}" = "$CASE" ] && { "${e#*:}" "$DIR"; exit; }
done
exit 0  # no expectations beyond the exit code
