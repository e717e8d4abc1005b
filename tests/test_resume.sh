#!/usr/bin/env bash
# tests/test_resume.sh BUILD — `invar run --resume`: a run killed with SIGKILL part-way leaves
# CSVs that parse, and resuming it gives the report an uninterrupted run gives (the same config
# rows, verdicts, observations and divergences; timings aside), the same totals and exit code.
# Also: a row cut short is dropped and its config run again, and a changed case file is
# refused (exit 2) without touching the report. About 25 s on 2 cores.
set -u
BUILD=${1:-build}
INVAR="$BUILD/invar"
command -v python3 >/dev/null || { echo "FAIL: python3 is needed to parse the CSVs"; exit 1; }
[ -x "$INVAR" ] || { echo "FAIL: $INVAR not built"; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/invar-resume.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# 16 configs, 6 of which run (about 1.5 s each): merged ones (force_prefix_caching on a
# backend that needs no forcing; the reference set), refused ones (mla-flash with the
# invariant set), and configs merged into one finished before the kill. The reference set runs
# first, so the config finished before the kill (summary.csv's first row) has divergence rows
# that the resumed report must keep.
cat >"$work/resume.ini" <<'INI'
[case]
name = resume
model = tiny
seed = 99

[prompts]
count = 6
min_len = 70
max_len = 140
max_new_tokens = 4
temperature = 0
top_k = 3
shared_prefix_groups = 2
shared_prefix_len = 64

[matrix]
devices = cpu
kernel_sets = reference, invariant
attention_backends = mla-unified, mla-flash
force_prefix_caching = false, true
max_num_batched_tokens = 48
arrivals = at_once, staggered
batch_sizes = 1, 3, 6
threads = 2
INI

# The uninterrupted run.
"$INVAR" run -q --case "$work/resume.ini" --out "$work/full" >"$work/full.log" 2>&1
full_rc=$?
[ "$full_rc" = 0 ] || { cat "$work/full.log"; fail "uninterrupted run exited $full_rc"; }

# The interrupted one: SIGKILL once the first config's row is in summary.csv.
"$INVAR" run -q --case "$work/resume.ini" --out "$work/cut" >"$work/cut.log" 2>&1 &
pid=$!
for _ in $(seq 1 600); do
    rows=$( (wc -l <"$work/cut/summary.csv") 2>/dev/null || echo 0)
    [ "$rows" -ge 2 ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
done
kill -KILL "$pid" 2>/dev/null || fail "the run finished before it could be killed"
wait "$pid" 2>/dev/null
echo "killed the run after $(($(wc -l <"$work/cut/summary.csv") - 1)) summary row(s)"
[ -f "$work/cut/junit.xml" ] && fail "junit.xml exists after a kill: it should be written at the end only"

# Every row of both CSVs has the header's column count.
python3 - "$work/cut" <<'PY' || fail "the CSVs of the killed run do not parse"
import csv, sys
for name in ("summary.csv", "divergence.csv"):
    with open(f"{sys.argv[1]}/{name}", newline="") as f:
        rows = list(csv.reader(f))
    assert rows, f"{name}: empty"
    bad = [i + 1 for i, r in enumerate(rows) if len(r) != len(rows[0])]
    assert not bad, f"{name}: lines {bad} do not have {len(rows[0])} columns"
    print(f"{name}: {len(rows) - 1} rows of {len(rows[0])} columns")
PY

# A changed case file is refused, and the report is left as it was.
cp "$work/resume.ini" "$work/resume.ini.orig"
cp "$work/cut/summary.csv" "$work/summary.before"
echo "; edited" >>"$work/resume.ini"
"$INVAR" run --resume "$work/cut" >"$work/changed.log" 2>&1
rc=$?
[ "$rc" = 2 ] || { cat "$work/changed.log"; fail "--resume after the case changed exited $rc, not 2"; }
grep -q "changed since the run started" "$work/changed.log" || fail "no 'changed' message"
cmp -s "$work/summary.before" "$work/cut/summary.csv" || fail "a refused --resume changed summary.csv"
cp "$work/resume.ini.orig" "$work/resume.ini"

# A divergence row of a config that had not finished (as a kill mid-config leaves) is dropped.
last="cpu/invariant/backend=mla-flash/force_prefix_caching=true/arrivals=staggered"
grep -q "\"$last\"" "$work/cut/summary.csv" && fail "the run got to its last config before the kill"
printf '"%s","3","0","1","logprob","5","5","-1.5","-1.25","0.25","4194304"\n' "$last" \
    >>"$work/cut/divergence.csv"
# A row cut short by the kill (no newline at the end) is dropped, and its config runs again.
printf '"resume","cpu/invariant/backend=mla-unified/force_prefix_caching=false/arrivals=stag' \
    >>"$work/cut/summary.csv"

"$INVAR" run --resume "$work/cut" >"$work/resume.log" 2>&1
resume_rc=$?
[ "$resume_rc" = "$full_rc" ] || { cat "$work/resume.log"; fail "--resume exited $resume_rc, the uninterrupted run $full_rc"; }
grep -q "^resuming .*: [1-9][0-9]* of 16 configs finished before" "$work/resume.log" ||
    { cat "$work/resume.log"; fail "--resume did not keep the finished configs"; }
[ "$(tail -n 1 "$work/resume.log")" = "$(tail -n 1 "$work/full.log")" ] ||
    fail "totals differ: '$(tail -n 1 "$work/resume.log")' vs '$(tail -n 1 "$work/full.log")'"
[ -s "$work/cut/junit.xml" ] && [ -s "$work/cut/summary.md" ] || fail "--resume did not render junit.xml and summary.md"

# The same report, timings aside: every summary column but seconds, every divergence row.
python3 - "$work/full" "$work/cut" "$work/summary.before" <<'PY' || fail "the resumed report differs from the uninterrupted one"
import csv, sys
def table(d, name, drop=()):
    with open(f"{d}/{name}", newline="") as f:
        rows = list(csv.reader(f))
    head = rows[0]
    assert all(len(r) == len(head) for r in rows), f"{d}/{name}: ragged rows"
    keep = [i for i, h in enumerate(head) if h not in drop]
    return head, sorted(tuple(r[i] for i in keep) for r in rows[1:])
full, cut = sys.argv[1], sys.argv[2]
hs, a = table(full, "summary.csv", ("seconds",))
_, b = table(cut, "summary.csv", ("seconds",))
assert len(a) == 16 and len(b) == 16, (len(a), len(b))
assert a == b, "summary rows differ:\n" + "\n".join(map(str, set(a) ^ set(b)))
_, a = table(full, "divergence.csv")
_, b = table(cut, "divergence.csv")
with open(sys.argv[3], newline="") as f:  # summary.csv as the kill left it
    first = list(csv.reader(f))[1][1]
assert any(r[0] == first for r in a), f"{first} (finished before the kill) has no divergence row to keep"
assert a and a == b, f"divergence rows differ: {len(a)} vs {len(b)}"
print(f"summary.csv: 16 configs match; divergence.csv: {len(a)} rows match")
PY
echo "resume: OK"
