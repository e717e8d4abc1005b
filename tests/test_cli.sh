#!/usr/bin/env bash
# tests/test_cli.sh BUILD — the command line under bad and awkward input (issue 12): an empty
# --out and a repeated single-valued flag are exit 2 with a message naming the flag; case paths
# up to PATH_MAX (with spaces and non-ASCII characters) run and longer ones are exit 2; --resume
# with a relative case path works from another directory; `invar run` and `invar kernels` have
# their own default report directories and a run never renders another command's CSV; `report
# diff` refuses unreadable reports and counts vanished configs unless --partial; top_k = 0 runs;
# bench --profile writes one per-op table per batch and its CSV; bench --shape takes only the
# rows asked for, and refuses malformed ones and (with a GPU) ones the device cannot hold;
# kernels --shape checks one shape of one op and refuses a label the op's list lacks; --version
# and meta.csv's invar_commit name the build's source tree, not the current directory's;
# source_id.o is rebuilt when NVCC_DEFINES change, and every object when its flags do;
# kernels writes junit.xml and summary.md, lists a VARIES row's stable and varied M, and shows
# progress only on a terminal.
# Every command parses through one table-driven parser (harness/cli_args.h): --help of each,
# and its usage errors in one style, "invar COMMAND: FLAG: what is wrong" and a hint.
# About 15 s on 2 cores.
set -u
BUILD=${1:-build}
INVAR="$(cd "$(dirname "$BUILD/invar")" && pwd)/invar"
[ -x "$INVAR" ] || { echo "FAIL: $INVAR not built"; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/invar-cli.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# expect RC PATTERN ARGS...: invar ARGS exits RC and prints PATTERN (grep -E) on stdout/stderr.
expect() {
    local want=$1 pattern=$2
    shift 2
    "$INVAR" "$@" >"$work/out.log" 2>&1
    local rc=$?
    [ "$rc" = "$want" ] || { cat "$work/out.log"; fail "invar $*: exit $rc, not $want"; }
    grep -aEq -- "$pattern" "$work/out.log" || { cat "$work/out.log"; fail "invar $*: no '$pattern'"; }
    echo "ok: invar $(printf '%.80s' "$*") -> $rc: $(grep -aEm1 -- "$pattern" "$work/out.log" | cut -c1-110)"
}

# A case that runs in a fraction of a second; top_k = 0: only the chosen token and its logprob.
write_case() {
    cat >"$1" <<'INI'
[case]
name = cli
model = tiny
seed = 5

[prompts]
count = 2
min_len = 10
max_len = 20
max_new_tokens = 2
top_k = 0

[matrix]
devices = cpu
kernel_sets = invariant, reference
batch_sizes = 2
threads = 1
INI
}
write_case "$work/case.ini"

# Defect 8: an empty --out names --out, not --case.
expect 2 "invar run: --out: empty value" run --case "$work/case.ini" --out ""
expect 2 "invar run: --case: empty value" run --case ""
# Defect 12: repeated single-valued flags are refused, naming both values.
expect 2 "invar run: --case: given twice \('$work/case.ini', then 'other.ini'\)" \
    run --case "$work/case.ini" --case other.ini --out "$work/x"
expect 2 ": --out: given twice" run --case "$work/case.ini" --out "$work/a" --out "$work/b"
expect 2 ": --model: given twice" run --case "$work/case.ini" --model tiny --model tiny
expect 2 ": --attention-backend: given twice" run --case "$work/case.ini" \
    --attention-backend auto --attention-backend mla-split
expect 2 ": --resume: given twice" run --resume "$work/a" --resume "$work/b"
expect 2 "invar run: --cuda-graphs: 'yes' is not one of on\|off" run --case "$work/case.ini" --cuda-graphs yes
expect 2 "only -q may be added" run --resume "$work/a" --cuda-graphs on
expect 2 "invar serve: --cuda-graphs: backend mla-flash takes its decode split from the whole batch" \
    serve --model tiny --kernel-set reference --attention-backend mla-flash --cuda-graphs
expect 2 ": --op: given twice" kernels --op rmsnorm --op gemm
expect 2 ": --out: given twice" kernels --out "$work/k1" --out "$work/k2"
expect 2 ": --threshold: given twice" report diff "$work/a" "$work/b" --threshold 5 --threshold 6
expect 2 ": --out: given twice" bench --device cpu --out "$work/b1" --out "$work/b2"
expect 2 ": --seed: given twice" model write --config tiny --seed 1 --seed 2 --out "$work/m"
[ -e "$work/x" ] || [ -e "$work/a" ] || [ -e "$work/k1" ] || [ -e "$work/m" ] &&
    fail "a refused command created its output directory"

# --cuda-graphs on runs a case's configs with graphs: the note counts the replayed steps.
expect 0 "cuda_graphs: [0-9]+ decode steps padded to a bucket, [1-9][0-9]* replayed" \
    run --case "$work/case.ini" --cuda-graphs on --out "$work/graphs"

# One parser for every command (harness/cli_args.h): --help is generated from each command's
# table; an unknown flag, a missing value, a bad number and a stray argument are exit 2 in one
# style, "invar COMMAND: FLAG: what is wrong", with a hint to run `invar COMMAND --help`.
for c in run kernels bench "model write" "model check" "report render" "report plot" "report diff" \
    "report coverage"; do
    # shellcheck disable=SC2086  # the subcommand's words
    expect 0 "^usage: invar $c" $c --help
    # shellcheck disable=SC2086
    expect 2 "^invar $c: --bogus: unknown flag" $c --bogus
    grep -q "^run 'invar $c --help' for its usage" "$work/out.log" || fail "invar $c: no hint"
done
for c in "" report model; do
    # shellcheck disable=SC2086
    expect 0 "^usage: invar ${c:+$c }COMMAND" $c --help
    # shellcheck disable=SC2086
    expect 2 "^invar${c:+ $c}: 'nope': unknown command" $c nope
done
expect 2 "^invar run: --out: needs a value \(DIR\)" run --case "$work/case.ini" --out
expect 2 "^invar run: --case: required \(or --resume DIR\)" run -q
expect 2 "^invar run: --resume: takes the run's options" run --resume "$work/a" --out "$work/b"
expect 2 "^invar run: 'stray': unexpected argument" run --case "$work/case.ini" stray
expect 2 "^invar run: --quiet: takes no value" run --case "$work/case.ini" --quiet=yes
expect 2 "^invar kernels: --threads: 5000 is out of range \[0, 4096\]" kernels --threads 5000
expect 2 "^invar kernels: --seed: '-1' is not an unsigned integer" kernels --seed -1
expect 2 "^invar kernels: --device: 'gpu' is not one of cpu\|cuda\|all" kernels --device gpu
expect 2 "^invar kernels: --set: unknown kernel set 'nope'" kernels --set nope
expect 2 "^invar kernels: --op: unknown op 'nope'" kernels --op nope
# --shape: one shape of one op (a kernel path under compute-sanitizer), by its report label
expect 2 "^invar kernels: --shape: needs --op" kernels --shape 37x203
expect 2 "^invar kernels: --shape: gemm has no shape '18048x512' on --device cpu" kernels --op gemm --shape 18048x512 --device cpu
expect 2 "^gemm shapes on cpu: '128x256' '576x2048'" kernels --op gemm --shape 18048x512 --device cpu
# 1x7 (an --exhaustive shape: the label picks it all the same): K = 7 is too short for the
# reference's split K to reorder anything, so its negative control never varies there, whatever
# the inputs
expect 0 "^3 passed, 0 failed, 0 skipped" kernels --device cpu --op gemm --shape 1x7 --out "$work/k-shape" --threads 2
[ "$(grep -c '"1x7"' "$work/k-shape/kernels.csv")" = 3 ] && [ "$(grep -vc '"1x7"' "$work/k-shape/kernels.csv")" = 1 ] ||
    fail "kernels --shape 1x7: kernels.csv is not the header and the shape's three rows"
grep -q "^NOTE   reference cpu  gemm .*never varied at this shape" "$work/out.log" ||
    fail "kernels --shape: the reference set's all-shapes negative control not set aside"
# with --quick too (37x203 is no quick shape: the label, not the quick marks, picks it)
expect 0 "^3 passed, 0 failed, 0 skipped" kernels --device cpu --op gemm --shape 37x203 --quick --out "$work/k-shape-quick" --threads 2
[ "$(cut -d, -f4 "$work/k-shape-quick/kernels.csv" | sort -u | tr '\n' ' ')" = '"37x203" "shape" ' ] ||
    fail "kernels --shape 37x203 --quick: other shapes than 37x203 in kernels.csv"
expect 2 "^invar bench: --only: 'nope' is not one of gemm\|mla\|moe\|decode" bench --only nope
expect 2 "^invar bench: --shape: needs --only gemm \(N:K:M\) or --only mla \(batch:context:heads\)" bench --shape 1536:7168:1
expect 2 "^invar bench: --shape: needs --only gemm" bench --only decode --shape 1536:7168:1
expect 2 "^invar bench: --shape: '1536x7168:1' is not N:K:M \(three positive integers\)" \
    bench --only gemm --shape 1536x7168:1
expect 2 "^invar bench: --shape: '1536:7168:1:2' is not N:K:M" bench --only gemm --shape 1536:7168:1:2
expect 2 "^invar bench: --shape: '0:7168:1': N = 0 is out of range \[1, 1048576\]" bench --only gemm --shape 0:7168:1
expect 2 "^invar bench: --shape: '32:4000:16': context = 4000 is not a multiple of the 64-position cache block" \
    bench --only mla --shape 32:4000:16
expect 2 "^invar bench: --shape: '32:-4096:16' is not batch:context:heads" bench --only mla --shape 32:-4096:16
expect 2 "^invar bench: --shape: '99999999999999999999:1:1': N is out of range \[1, 1048576\]" \
    bench --only gemm --shape 99999999999999999999:1:1
expect 2 "^invar bench: --shape: times the CUDA kernels" bench --device cpu --only gemm --shape 64:64:1
expect 2 "^invar bench: --model: 'v4' is not one of v2-lite\|v3" bench --model v4
expect 2 "^invar bench: --model: picks the decode section's model; --only gemm runs no decode" bench --only gemm --model v3
expect 2 "^invar bench: --model: picks the CUDA decode section's model; --device cpu runs the tiny one" \
    bench --device cpu --model v2-lite
expect 2 "^invar model write: --out: required" model write --config tiny --seed 1
expect 2 "^invar model write: --shards: 0 is out of range \[1, 99999\]" \
    model write --config tiny --seed 1 --out "$work/m" --shards 0
expect 2 "^invar model check: DIR: missing" model check
expect 2 "^invar report diff: NEW_DIR: missing" report diff "$work/a"
expect 2 "^invar report diff: --threshold: 'x' is not a number" report diff "$work/a" "$work/b" --threshold x
expect 2 "^invar report render: DIR: empty value" report render ""
[ -e "$work/x" ] || [ -e "$work/a" ] || [ -e "$work/k1" ] || [ -e "$work/m" ] &&
    fail "a refused command created its output directory"

# bench --shape: only the given rows, in order, into the section's CSV (with a GPU); without
# one the same SKIP line as the whole bench.
"$INVAR" bench --quick --only gemm --shape 4096:512:1 --shape 4096:512:64 --out "$work/bs" >"$work/out.log" 2>&1
rc=$?
[ "$rc" = 0 ] || { cat "$work/out.log"; fail "bench --shape: exit $rc"; }
if grep -q '^SKIP: no CUDA device' "$work/out.log"; then
    echo "ok: bench --shape: SKIP without a CUDA device (the grid does the same)"
else
    rows=$(awk -F, 'NR > 1 { gsub(/"/, ""); printf "%s:%s:%s ", $1, $2, $3 }' "$work/bs/bench_gemm.csv")
    [ "$rows" = "4096:512:1 4096:512:64 " ] || fail "bench --shape: rows '$rows', not 4096:512:1 and 4096:512:64"
    grep -q '(the --shape rows)' "$work/out.log" || fail "bench --shape: the summary does not say the rows were chosen"
    echo "ok: bench --shape: the two rows asked for, in order"
    # a row the device cannot hold (2.2 TB of weights) is an impossible setting: exit 2 before
    # any output directory, naming the row, what it needs and what is free
    expect 2 "^invar bench: --shape: '1048576:1048576:1' needs [0-9.]+ GB of device memory \(with the rows of its N x K that follow it, which share its operands\), [0-9.]+ GB are free" \
        bench --quick --only gemm --shape 4096:512:1 --shape 1048576:1048576:1 --out "$work/big"
    [ -e "$work/big" ] && fail "bench --shape: a refused run created its output directory"
fi

# bench --profile (CPU, tiny model): the per-op table for each batch and its CSV, every row an
# op with a shape, calls a step and a time for each set (-1 where a set made no such call).
expect 0 "^decode step at batch 8, time per step by op" bench --device cpu --quick --profile --out "$work/bp"
[ "$(grep -c '^decode step at batch' "$work/out.log")" = 2 ] || fail "bench --profile: not one table per batch"
ops_csv="$work/bp/bench_decode_ops.csv"
[ -s "$ops_csv" ] || fail "bench --profile: no $ops_csv"
# (Times are differences of two runs' host-clock sums here, so a tiny op may come out below 0.)
awk -F'","' 'NR > 1 && !($4 ~ /^[a-z_]+ [^ ]*[=x]/ && $5 + 0 > 0 && $6 ~ /^-?[0-9]+\.[0-9]+$/ && $7 ~ /^-?[0-9]+\.[0-9]+"$/) {
         bad = 1; print "bad row: " $0 }
     NR > 1 { rows++ } END { exit bad || rows < 20 }' "$ops_csv" || fail "bench --profile: malformed $ops_csv"
grep -q '"gemm [0-9]*x[0-9]* M=1"' "$ops_csv" && grep -q '"mla_attention T=8 ' "$ops_csv" ||
    fail "bench --profile: the decode ops of batch 1 and 8 are not all there"
# At batch 1 every decode step makes the same calls (the prompt is one prefill step before them),
# so each op's calls a step is a whole number: the tiny model's 4 layers call the attention 4
# times a step, and the lm_head once. A count over the wrong number of steps is fractional.
awk -F'","' '$3 == 1 && $5 + 0 != int($5 + 0) { bad = 1; print "fractional calls at batch 1: " $0 }
     $3 == 1 && $4 ~ /^mla_attention / && $5 + 0 != 4 { bad = 1; print "attention calls: " $0 }
     END { exit bad }' "$ops_csv" || fail "bench --profile: calls a step at batch 1 are not the step's calls"
echo "ok: bench --profile: $(($(wc -l <"$ops_csv") - 1)) op rows"
# The prefill row's one step the same way, keyed by the prompt length: its MLA call holds the
# whole prompt, and every op runs once or more (calls are not a difference of two runs here).
grep -q '^prefill of 256 tokens (one step), time by op' "$work/out.log" || fail "bench --profile: no prefill table"
pre_csv="$work/bp/bench_prefill_ops.csv"
awk -F'","' 'NR > 1 && !($1 == "\"cpu" && $3 == 256 && $4 ~ /^[a-z_]+ [^ ]*[=x]/ && $5 + 0 >= 1 && $6 + 0 > 0 && $7 + 0 > 0) {
         bad = 1; print "bad row: " $0 }
     NR > 1 { rows++ } END { exit bad || rows < 10 }' "$pre_csv" || fail "bench --profile: malformed $pre_csv"
grep -q '"mla_attention T=256 ' "$pre_csv" || fail "bench --profile: the prefill's attention is not in $pre_csv"
echo "ok: bench --profile: $(($(wc -l <"$pre_csv") - 1)) prefill op rows"
# The roofline columns: the tiny model routes each token to 2 of 8 experts, so a decode step at
# batch 1 touches 2 and one at batch 8 between 2 and 8 (the prefill of 256 tokens: between 2 and
# 8); each set's share is its rate over the roofline's.
python3 - "$work/bp/bench_decode.csv" <<'PY' || fail "bench: the roofline columns of bench_decode.csv"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert [(r["phase"], r["batch"], r["prompt_len"]) for r in rows] == [
    ("decode", "1", "64"), ("decode", "8", "64"), ("prefill", "1", "256")], rows
for r in rows:
    b, ex = int(r["batch"]), float(r["roofline_experts_touched"])
    assert (ex == 2.0) if (b, r["phase"]) == (1, "decode") else (2.0 <= ex <= 8.0), r
    assert float(r["roofline_step_mb"]) > 0 and float(r["roofline_step_gflop"]) > 0, r
    assert r["roofline_bound"] == "memory-only", r  # no FLOP peak on the CPU
    roof = float(r["roofline_tok_s"])
    for s in ("invariant", "reference"):
        share = 100.0 * float(r[s + "_tok_s"]) / roof
        assert abs(share - float(r[s + "_pct_roofline"])) < 0.01 + 1e-3 * share, (s, r)
# Memory-bound, every row's roofline moves its bytes at the one copy bandwidth of the run: a
# decode step's tokens are its batch, a prefill's its prompt.
bw = [float(r["roofline_tok_s"]) * float(r["roofline_step_mb"]) /
      int(r["batch"] if r["phase"] == "decode" else r["prompt_len"]) for r in rows]
assert max(bw) - min(bw) < 1e-3 * max(bw), bw
PY
echo "ok: bench: roofline columns of the decode and prefill rows (experts touched, bytes, FLOPs, shares)"

# top_k = 0 runs, and the reference set is still caught (on the chosen tokens' logprobs).
expect 0 "2 passed, 0 failed" run --case "$work/case.ini" --out "$work/topk0"

# --resume re-parses the run's recorded command line with the same parser.
cp -r "$work/topk0" "$work/bad-meta"
python3 - "$work/bad-meta/meta.csv" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1], newline="")))
for r in rows:
    if r[0] == "command_line":
        r[1] += " --bogus"
csv.writer(open(sys.argv[1], "w", newline=""), quoting=csv.QUOTE_ALL).writerows(rows)
PY
expect 2 "bad-meta/meta.csv: command_line '.*': --bogus: unknown flag" run --resume "$work/bad-meta"
expect 0 "2 passed, 0 failed" run --out="$work/topk0-eq" --case="$work/case.ini" --

# Defect 7: a case path of about 3000 characters, with spaces and non-ASCII characters, runs;
# one over PATH_MAX is exit 2 with "path too long".
long="$work"
while [ ${#long} -lt 2900 ]; do long="$long/répertoire avec espaces ünd $(printf 'x%.0s' $(seq 1 150))"; done
mkdir -p "$long" || fail "mkdir of a ${#long}-character path"
write_case "$long/cas é.ini"
expect 0 "2 passed, 0 failed" run -q --case "$long/cas é.ini" --out "$work/long"
grep -Fq "$long/cas é.ini" "$work/long/meta.csv" || fail "meta.csv lacks the whole long case path"
expect 0 "resuming .*: 2 of 2 configs finished before" run -q --resume "$work/long"
too_long="$long$(printf '/%0200d' $(seq 1 7))/c.ini"
expect 2 "path too long" run --case "$too_long" --out "$work/too-long"
[ -e "$work/too-long" ] && fail "a refused run created its --out directory"

# Defect 11: a relative case path, resumed from another directory.
mkdir -p "$work/proj/cases" "$work/elsewhere"
write_case "$work/proj/cases/rel.ini"
(cd "$work/proj" && "$INVAR" run -q --case cases/rel.ini --out reports/rel >"$work/rel.log" 2>&1) ||
    { cat "$work/rel.log"; fail "the run with a relative case path failed"; }
(cd "$work/elsewhere" && "$INVAR" run -q --resume ../proj/reports/rel >"$work/rel-resume.log" 2>&1) ||
    { cat "$work/rel-resume.log"; fail "--resume with a relative case path from another directory failed"; }
grep -q "2 of 2 configs finished before" "$work/rel-resume.log" || fail "the resume kept nothing"
echo "ok: --resume of a run with a relative case path, from another directory"

# Defect 6: `invar run` and `invar kernels` default to their own directories...
mkdir -p "$work/defaults"
(cd "$work/defaults" && "$INVAR" run -q --case "$work/case.ini" >/dev/null 2>&1 &&
    "$INVAR" kernels --device cpu --set invariant --op residual_add --quick >/dev/null 2>&1) ||
    fail "runs with the default --out failed"
for f in run/summary.csv run/junit.xml kernels/kernels.csv; do
    [ -f "$work/defaults/build/report/$f" ] || fail "no build/report/$f"
done
[ -e "$work/defaults/build/report/run/kernels.csv" ] && fail "kernels.csv in the run's directory"
echo "ok: default report directories build/report/run and build/report/kernels"
# ... and a run into a directory holding another command's kernels.csv leaves it alone and
# renders only its own summary.csv.
mkdir -p "$work/shared"
cp "$work/defaults/build/report/kernels/kernels.csv" "$work/shared/kernels.csv"
cp "$work/shared/kernels.csv" "$work/kernels.before"
echo "stale" >"$work/shared/junit.xml"
expect 0 "2 passed" run -q --case "$work/case.ini" --out "$work/shared"
cmp -s "$work/kernels.before" "$work/shared/kernels.csv" || fail "the run changed kernels.csv"
cases=$(grep -c '<testcase' "$work/shared/junit.xml")
[ "$cases" = 2 ] || fail "junit.xml has $cases testcases, not the run's 2 configs"
grep -q "residual_add" "$work/shared/junit.xml" "$work/shared/summary.md" &&
    fail "the run rendered the foreign kernels.csv"
echo "ok: a run renders only its own CSVs"

# Defect 4: report diff against unreadable reports is exit 2 naming the file; a vanished config
# is a regression unless --partial.
base="$work/topk0"
for kind in random header-only no-config; do
    d="$work/diff-$kind"
    mkdir -p "$d"
    case $kind in
    random) head -c 4096 /dev/urandom >"$d/summary.csv" ;;
    header-only) head -n 1 "$base/summary.csv" >"$d/summary.csv" ;;
    no-config) python3 - "$base/summary.csv" "$d/summary.csv" <<'PY' ;;
import csv, sys
rows = list(csv.reader(open(sys.argv[1], newline="")))
i = rows[0].index("config")
csv.writer(open(sys.argv[2], "w", newline="")).writerows([r[:i] + r[i + 1:] for r in rows])
PY
    esac
    expect 2 "$d/summary.csv" report diff "$base" "$d"
done
mkdir -p "$work/diff-part"
head -n 2 "$base/summary.csv" >"$work/diff-part/summary.csv"
expect 1 "1 regression .*1 vanished" report diff "$base" "$work/diff-part"
expect 0 "0 regressions .*--partial" report diff "$base" "$work/diff-part" --partial
# invar kernels renders junit.xml and summary.md next to kernels.csv, as invar run does; a
# VARIES line names the M that were stable and the M that varied; progress goes to stderr only
# when stderr is a terminal.
"$INVAR" kernels --device cpu --set reference --op rmsnorm --quick --out "$work/kr" --threads 2 \
    >"$work/kr.log" 2>"$work/kr.err" || { cat "$work/kr.log" "$work/kr.err"; fail "kernels --set reference --op rmsnorm exited $?"; }
for f in junit.xml summary.md; do [ -s "$work/kr/$f" ] || fail "invar kernels wrote no $f"; done
rows=$(($(wc -l <"$work/kr/kernels.csv") - 1))
[ "$(grep -c '<testcase ' "$work/kr/junit.xml")" = $((rows + 1)) ] ||
    fail "junit.xml: not one testcase per kernels.csv row and one for the negative control"
# Validated where an xmllint starts (one unpacked from a DEPS_PREFIX tree may lack its libraries):
# as run_all.sh's own junit check, a visible skip otherwise.
if xmllint --version >/dev/null 2>&1; then
    xmllint --noout "$work/kr/junit.xml" || fail "junit.xml does not parse"
else
    echo "skip: kernels' junit.xml validation: xmllint not available or does not start (Debian: libxml2-utils)"
fi
grep -q '| reference | cpu | `rmsnorm` |' "$work/kr/summary.md" || fail "summary.md has no rmsnorm row"
python3 - "$work/kr/kernels.csv" "$work/kr.log" <<'PY2' || fail "a VARIES line does not list its stable and varied M"
import csv, re, sys
rows = [r for r in csv.DictReader(open(sys.argv[1])) if r["invariant"] == "no"]
lines = [l for l in open(sys.argv[2]) if l.startswith("VARIES")]
assert rows and len(rows) == len(lines), (len(rows), len(lines))
for r, l in zip(rows, lines):
    m = re.search(r"stable at M=([0-9,]+|none); varied at M=([0-9,]+)$", l.rstrip())
    assert m, l
    stable = set(m.group(1).split(",")) - {"none"}
    varied = set(m.group(2).split(","))
    assert r["first_vary_M"] in varied and not stable & varied, (l, r["first_vary_M"])
PY2
grep -q "shapes checked" "$work/kr.err" && fail "progress written to stderr that is not a terminal"
if command -v script >/dev/null; then
    script -qec "'$INVAR' kernels --device cpu --set reference --op rmsnorm --quick --out '$work/kt' --threads 2" \
        /dev/null >"$work/kt.tty" 2>&1 </dev/null
    grep -q "shapes checked" "$work/kt.tty" || fail "no progress on a terminal"
    script -qec "'$INVAR' kernels --device cpu --set reference --op rmsnorm --quick --out '$work/kt' --threads 2 2>'$work/kt.err'" \
        /dev/null >"$work/kt.tty" 2>&1 </dev/null
    grep -q "shapes checked" "$work/kt.err" && fail "progress written to a stderr that is a file (stdout a terminal)"
    echo "ok: invar kernels: junit.xml, summary.md, VARIES M lists, progress on a terminal only"
else
    echo "SKIP invar kernels progress on a terminal: no script(1)"
fi

# report coverage: runs split by op judged as one. A path reached in either run is covered, one
# the host cannot take is excused with its reason, one reached by neither fails; a file missing,
# a column missing or a reached value not yes/no/unreachable is exit 2 naming the file.
mkdir -p "$work/cov-a" "$work/cov-b" "$work/cov-c" "$work/cov-bad" "$work/cov-nocol"
printf 'set,device,path,reached,why_unreachable\ninvariant,cuda,gemm:x,yes,\ninvariant,cuda,gemm:y,no,\ninvariant,cuda,all_reduce:z,unreachable,"needs 2 GPUs, one a rank"\n' >"$work/cov-a/coverage.csv"
printf 'set,device,path,reached,why_unreachable\ninvariant,cuda,gemm:x,no,\ninvariant,cuda,gemm:y,yes,\ninvariant,cuda,all_reduce:z,unreachable,"needs 2 GPUs, one a rank"\n' >"$work/cov-b/coverage.csv"
printf 'set,device,path,reached,why_unreachable\ninvariant,cuda,gemm:x,yes,\ninvariant,cuda,gemm:y,no,\ninvariant,cuda,all_reduce:z,no,\n' >"$work/cov-c/coverage.csv"
printf 'set,device,path,reached\ninvariant,cuda,gemm:x,maybe\n' >"$work/cov-bad/coverage.csv"
printf 'set,device,reached\ninvariant,cuda,yes\n' >"$work/cov-nocol/coverage.csv"
expect 0 "^PATHS +invariant cuda coverage: 2 of 3 paths reached over 2 runs \(1 not reachable here\)" \
    report coverage "$work/cov-a" "$work/cov-b"
grep -q "not reachable here: all_reduce:z (needs 2 GPUs, one a rank)" "$work/out.log" || fail "coverage: no reason given"
expect 1 "unreached: gemm:y" report coverage "$work/cov-a" "$work/cov-c"
grep -Eq "^FAIL +invariant cuda coverage: 1 of 3 paths reached over 2 runs" "$work/out.log" || fail "coverage: no FAIL line"
expect 1 "unreached: all_reduce:z" report coverage "$work/cov-c"
expect 2 "cov-bad/coverage.csv: line 2: reached is 'maybe'" report coverage "$work/cov-a" "$work/cov-bad"
expect 2 "cov-nocol/coverage.csv: no column 'path'" report coverage "$work/cov-nocol"
expect 2 "cov-none/coverage.csv: cannot open" report coverage "$work/cov-none"
# Paths the CPU and CUDA sets share a name for (moe_route:*, merge_attention:row) stay apart by
# device: the CPU run's reach does not cover the CUDA set's.
mkdir -p "$work/cov-cpu" "$work/cov-cuda"
printf 'set,device,path,reached,why_unreachable\ninvariant,cpu,moe_route:warp,yes,\n' >"$work/cov-cpu/coverage.csv"
printf 'set,device,path,reached,why_unreachable\ninvariant,cuda,moe_route:warp,no,\n' >"$work/cov-cuda/coverage.csv"
expect 1 "unreached: moe_route:warp" report coverage "$work/cov-cpu" "$work/cov-cuda"
grep -Eq "^PATHS +invariant cpu +coverage: 1 of 1 paths reached" "$work/out.log" &&
    grep -Eq "^FAIL +invariant cuda +coverage: 0 of 1 paths reached" "$work/out.log" ||
    fail "coverage: the CPU and CUDA rows of one path were not judged apart"
# Real runs: one op's run reaches only its own paths, so alone it leaves the others unreached.
"$INVAR" kernels --device cpu --quick --op rmsnorm --out "$work/cov-rmsnorm" >/dev/null 2>&1 ||
    fail "invar kernels --op rmsnorm exited $?"
expect 1 "unreached: gemm:bf16" report coverage "$work/cov-rmsnorm"

# The build's own source tree (common/source_id.h), whatever the current directory: the tree's
# HEAD (and -dirty; then " built with" NVCC_DEFINES where a build has them), "unknown" only for
# a tree that is no checkout of its own; meta.csv's invar_commit is the same id.
root=$(cd "$(dirname "$0")/.." && pwd)
version=$("$INVAR" --version) || fail "invar --version exited $?"
[ "$(cd / && "$INVAR" --version)" = "$version" ] || fail "invar --version depends on the directory"
if head=$(git -C "$root" rev-parse HEAD 2>/dev/null) &&
    [ "$(git -C "$root" rev-parse --show-toplevel 2>/dev/null)" = "$root" ]; then
    case $version in
    "invar $head" | "invar $head-dirty" | "invar $head built with "* | "invar $head-dirty built with "*) ;;
    *) fail "invar --version says '$version', the tree's HEAD is $head" ;;
    esac
else
    [ "$version" = "invar unknown" ] || fail "invar --version says '$version' outside a checkout"
fi
grep -qxF "\"invar_commit\",\"${version#invar }\"" "$base/meta.csv" ||
    fail "$base/meta.csv: invar_commit is not '${version#invar }'"
# Run from inside another repository: meta.csv still names the build's tree, not that one.
if command -v git >/dev/null; then
    mkdir -p "$work/other-repo"
    (cd "$work/other-repo" && git init -q . && git -c user.name=t -c user.email=t@t commit -q --allow-empty -m other) ||
        fail "git init of a scratch repository failed"
    (cd "$work/other-repo" && "$INVAR" run -q --case "$work/case.ini" --out "$work/in-other-repo") >/dev/null 2>&1 ||
        fail "a run from inside another repository exited $?"
    grep -qxF "\"invar_commit\",\"${version#invar }\"" "$work/in-other-repo/meta.csv" ||
        fail "a run inside another repository: meta.csv's $(grep invar_commit "$work/in-other-repo/meta.csv"), not '${version#invar }'"
fi
echo "ok: $version, in meta.csv too"

# The stamp that rebuilds source_id.o follows NVCC_DEFINES: a CUDA build made again with other
# defines must say the new ones (one that kept the old object would file a bench run under the
# previous experiment's name). Only source_id.o is compiled, into a scratch build directory.
nvcc_here=$(command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
if [ -n "$nvcc_here" ] && ! make -s -n -C "$root" CUDA=1 NVCC="$nvcc_here" BUILD="$work/stamp-probe" \
        "$work/stamp-probe/source_id.stamp" >"$work/stamp.log" 2>&1; then
    why=$(grep -m1 -o 'CUDA=1 needs [^:]*' "$work/stamp.log" || head -c 120 "$work/stamp.log")
    echo "skip: the build stamp's NVCC_DEFINES (a CUDA build cannot be configured here: $why)"
elif [ -n "$nvcc_here" ]; then
    sb="$work/stamp-build"
    stamp_make() {  # stamp_make DEFINES: source_id.o of a CUDA build with NVCC_DEFINES=DEFINES
        make -s -C "$root" CUDA=1 NVCC="$nvcc_here" BUILD="$sb" NVCC_DEFINES="$1" \
            "$sb/common/source_id.o" >"$work/stamp.log" 2>&1 ||
            { cat "$work/stamp.log"; fail "make source_id.o with NVCC_DEFINES='$1' failed"; }
    }
    stamp_make -DSTAMP_ONE=1
    grep -aq -- '-DSTAMP_ONE=1' "$sb/common/source_id.o" || fail "source_id.o lacks -DSTAMP_ONE=1"
    before=$(stat -c %y "$sb/common/source_id.o")
    stamp_make -DSTAMP_ONE=1
    [ "$(stat -c %y "$sb/common/source_id.o")" = "$before" ] ||
        fail "source_id.o was rebuilt though neither the tree nor NVCC_DEFINES changed"
    stamp_make -DSTAMP_TWO=2
    grep -aq -- '-DSTAMP_TWO=2' "$sb/common/source_id.o" ||
        fail "NVCC_DEFINES changed to -DSTAMP_TWO=2 but source_id.o was not rebuilt: $(cat "$sb/source_id.stamp")"
    ! grep -aq -- '-DSTAMP_ONE=1' "$sb/common/source_id.o" || fail "source_id.o still says -DSTAMP_ONE=1"
    echo "ok: source_id.o rebuilt when NVCC_DEFINES changed, and only then"
    # Every object follows the stamp of its compile line: `make -q` calls a C object compiled
    # CPU-only stale under CUDA=1 or another OPT, and a .cu object stale under other
    # NVCC_DEFINES (that object is a stand-in, made after its stamp: a real one is minutes of nvcc).
    stale() {  # stale WANT TARGET MAKE-ARGS...: make -q exits WANT (0 up to date, 1 stale)
        local want=$1 target=$2
        shift 2
        make -q -C "$root" BUILD="$sb" "$@" "$sb/$target" >/dev/null 2>&1
        local rc=$?
        local stamp=cflags.stamp
        [ "${target%.cu.o}" = "$target" ] || stamp=nvflags.stamp
        [ "$rc" = "$want" ] ||
            fail "make -q $* $target: exit $rc where $want was due ($stamp: $(cat "$sb/$stamp" 2>/dev/null))"
    }
    make -s -C "$root" CUDA=0 BUILD="$sb" "$sb/common/check.o" >"$work/stamp.log" 2>&1 ||
        { cat "$work/stamp.log"; fail "make common/check.o failed"; }
    stale 0 common/check.o CUDA=0
    stale 1 common/check.o CUDA=1 NVCC="$nvcc_here"
    stale 1 common/check.o CUDA=0 OPT=-O1
    make -s -C "$root" CUDA=1 NVCC="$nvcc_here" BUILD="$sb" NVCC_DEFINES=-DSTAMP_ONE=1 "$sb/nvflags.stamp" ||
        fail "make nvflags.stamp failed"
    mkdir -p "$sb/kernels/cuda"
    for cu in logprobs gemm_sm90; do  # the plain rule's and the ptxas-reporting rule's
        touch "$sb/kernels/cuda/$cu.cu.o"
        stale 0 "kernels/cuda/$cu.cu.o" CUDA=1 NVCC="$nvcc_here" NVCC_DEFINES=-DSTAMP_ONE=1
        stale 1 "kernels/cuda/$cu.cu.o" CUDA=1 NVCC="$nvcc_here" NVCC_DEFINES=-DSTAMP_TWO=2
    done
    echo "ok: objects are stale under other flags (CUDA=1, OPT, NVCC_DEFINES), and only then"
else
    echo "skip: the build stamp's NVCC_DEFINES (no nvcc here: a CUDA build cannot be configured)"
fi
echo "cli: OK"
