#!/usr/bin/env bash
# tests/test_triage.sh BUILD — the triage side of `invar run`: the first differing op of every
# config where a request differs (summary.csv's first_op, the console line, summary.md), and
# none where none differs; `--only GLOB` runs the matching configs, and one merged into a
# config not chosen runs itself with the outcome the whole run gave it; `--request N` compares
# request N alone (its bs=1 run and it inside every batch) and reports only it; a finished
# --only run resumes with its selection; bad values are exit 2 naming the flag. A few seconds
# on 2 cores; KEEP=1 keeps the work directory.
set -u
BUILD=${1:-build}
INVAR="$BUILD/invar"
command -v python3 >/dev/null || { echo "FAIL: python3 is needed to read the CSVs"; exit 1; }
[ -x "$INVAR" ] || { echo "FAIL: $INVAR not built"; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/invar-triage.XXXXXX")
trap '[ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# 4 configs, 3 runs: force_prefix_caching changes nothing on mla-unified, so each =true config
# is merged into its =false twin; the reference set is the negative control.
cat >"$work/triage.ini" <<'INI'
[case]
name = triage
model = tiny
seed = 11

[prompts]
count = 3
min_len = 20
max_len = 70
max_new_tokens = 3
temperature = 0
top_k = 3

[matrix]
devices = cpu
kernel_sets = invariant, reference
force_prefix_caching = false, true
max_num_batched_tokens = 32
batch_sizes = 1, 3
threads = 1
INI

"$INVAR" run --case "$work/triage.ini" --out "$work/full" >"$work/full.log" 2>&1 ||
    { cat "$work/full.log"; fail "the whole run exited $?"; }
grep -q "first differing op: " "$work/full.log" || fail "no 'first differing op:' line on the console"
grep -q "first differing op: " "$work/full/summary.md" || fail "summary.md names no first differing op"

ops="embedding rmsnorm gemm rope residual_add silu_mul kv_cache_write mla_attention mha_prefill merge_attention moe_route moe_experts moe_combine logprobs all_reduce all_gather_columns"
python3 - "$work/full/summary.csv" "$ops" <<'PY' || fail "first_op of the whole run"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1], newline="")))
ops = sys.argv[2].split()
assert len(rows) == 4, f"{len(rows)} rows"
for r in rows:
    if r["merged_into"]:
        continue
    if r["first_request"]:
        op = r["first_op"].split(" ")[0]
        assert op in ops, f"{r['config']}: first_op '{r['first_op']}' names no op"
        assert " alone, M=" in r["first_op"] and f" at bs={r['first_batch_size']}" in r["first_op"], r["first_op"]
    else:
        assert r["first_op"] == "", f"{r['config']}: first_op '{r['first_op']}' without a divergence"
ref = [r for r in rows if r["kernel_set"] == "reference" and not r["merged_into"]]
assert ref and ref[0]["first_op"] and "ulp" in ref[0]["first_op"], "the caught control names no op"
PY

# The JUnit failure message carries it: the caught control's row, its verdict turned to FAIL,
# rendered again.
mkdir -p "$work/render"
cp "$work/full/meta.csv" "$work/full/divergence.csv" "$work/render/"
python3 - "$work/full/summary.csv" "$work/render/summary.csv" <<'PY' || fail "writing the FAIL row"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1], newline="")))
for r in rows:
    if r["kernel_set"] == "reference" and not r["merged_into"]:
        r["verdict"] = "FAIL"
w = csv.DictWriter(open(sys.argv[2], "w", newline=""), fieldnames=list(rows[0]), quoting=csv.QUOTE_ALL)
w.writeheader()
w.writerows(rows)
PY
"$INVAR" report render "$work/render" >"$work/render.log" 2>&1 || { cat "$work/render.log"; fail "render exited $?"; }
python3 - "$work/render" <<'PY' || fail "junit.xml's failure message"
import csv, sys, xml.etree.ElementTree as ET
rows = [r for r in csv.DictReader(open(sys.argv[1] + "/summary.csv", newline="")) if r["verdict"] == "FAIL"]
failures = {tc.get("name"): tc.find("failure") for tc in ET.parse(sys.argv[1] + "/junit.xml").iter("testcase")}
for r in rows:
    f = failures.get(r["config"])
    assert f is not None, f"{r['config']}: no <failure>"
    assert "first differing op: " + r["first_op"] in f.get("message"), f.get("message")
assert rows
PY

# --only: the two =true configs, each merged into a config not chosen, run themselves.
"$INVAR" run -q --case "$work/triage.ini" --only '*force_prefix_caching=true' --out "$work/only" \
    >"$work/only.log" 2>&1 || { cat "$work/only.log"; fail "--only exited $?"; }
python3 - "$work/full/summary.csv" "$work/only/summary.csv" <<'PY' || fail "--only's report"
import csv, sys
full = {r["config"]: r for r in csv.DictReader(open(sys.argv[1], newline=""))}
only = list(csv.DictReader(open(sys.argv[2], newline="")))
names = [r["config"] for r in only]
assert names == [n for n in full if n.endswith("force_prefix_caching=true")], names
for r in only:
    twin = full[full[r["config"]]["merged_into"]]
    assert r["merged_into"] == "", f"{r['config']} merged into {r['merged_into']}, which did not run"
    for col in ("verdict", "observed", "requests_compared", "differing_requests", "first_request",
                "first_step", "first_batch_logprob", "first_op"):
        assert r[col] == twin[col], f"{r['config']}: {col} '{r[col]}', the whole run's '{twin[col]}'"
PY
"$INVAR" run -q --resume "$work/only" >"$work/resume.log" 2>&1 ||
    { cat "$work/resume.log"; fail "resuming the --only run exited $?"; }
grep -q "2 of 2 configs finished before, 0 to go" "$work/resume.log" ||
    { cat "$work/resume.log"; fail "the resumed --only run did not keep its selection"; }

# --request 1: only request 1, alone and in every batch (1, 3 and the repeat: 3 comparisons).
"$INVAR" run -q --case "$work/triage.ini" --request 1 --out "$work/req" >"$work/req.log" 2>&1 ||
    { cat "$work/req.log"; fail "--request exited $?"; }
python3 - "$work/req" <<'PY' || fail "--request's report"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1] + "/summary.csv", newline="")))
for r in rows:
    if r["merged_into"]:
        continue
    assert r["requests_compared"] == "3", f"{r['config']}: {r['requests_compared']} compared"
    assert r["first_request"] in ("", "1"), f"{r['config']}: first request {r['first_request']}"
    assert "--request 1" in r["note"], r["note"]
assert any(r["first_request"] == "1" for r in rows), "request 1 differs nowhere"
div = list(csv.DictReader(open(sys.argv[1] + "/divergence.csv", newline="")))
assert div and all(d["request"] == "1" for d in div), sorted({d["request"] for d in div})
PY

expect_2() {  # expect_2 WHAT PATTERN ARGS...: exit 2 and PATTERN in the message
    local what=$1 pattern=$2
    shift 2
    "$INVAR" run "$@" >"$work/bad.log" 2>&1
    local rc=$?
    [ "$rc" = 2 ] || { cat "$work/bad.log"; fail "$what: exit $rc, expected 2"; }
    grep -q -- "$pattern" "$work/bad.log" || { cat "$work/bad.log"; fail "$what: no '$pattern' in the message"; }
}
expect_2 "--only matching nothing" "--only: 'gpu/\*' matches none" --case "$work/triage.ini" --only 'gpu/*' --out "$work/bad"
expect_2 "--request past the requests" "--request: 3: .* runs 3 requests (0 to 2)" --case "$work/triage.ini" --request 3 --out "$work/bad"
expect_2 "--request not a number" "--request" --case "$work/triage.ini" --request one --out "$work/bad"
expect_2 "--request negative" "--request" --case "$work/triage.ini" --request -1 --out "$work/bad"
expect_2 "--resume with --only" "--resume" --resume "$work/only" --only 'cpu/*'
echo "triage: first_op on every differing config, --only with merges, --request, resume and bad values"
