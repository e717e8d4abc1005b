#!/usr/bin/env bash
# tests/test_shard.sh BUILD — `invar run --shard I/N` and `invar report merge`: a small CPU
# matrix run whole and as 3 shards; the shards merged give the whole run's summary.csv and
# divergence.csv (seconds aside), junit.xml and summary.md (timings, dates, hosts and the
# command line aside); `report diff` takes a shard's vanished configs for no regressions; a
# finished shard resumes as the same shard; the merge refuses shards of different seeds,
# commits or cases, a missing shard, a shard given twice, overlapping configs and an unfinished
# shard, each with exit 2 naming the directory and the field; merge and diff refuse an edited
# shard (a row edited to PASS, divergence.csv emptied, a config renamed, two shard rows in
# meta.csv: the seal) and call random bytes no summary.csv. A few seconds on 2 cores;
# KEEP=1 keeps the work directory.
set -u
BUILD=${1:-build}
INVAR="$BUILD/invar"
command -v python3 >/dev/null || { echo "FAIL: python3 is needed to compare the CSVs"; exit 1; }
[ -x "$INVAR" ] || { echo "FAIL: $INVAR not built"; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/invar-shard.XXXXXX")
trap '[ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# 8 configs, 5 runs: force_prefix_caching merges on mla-unified (which needs no forcing) and on
# the reference set; mla-split's two invariant configs differ (the forced one is the negative
# control). Shared prefixes, so prefix caching matters.
cat >"$work/shard.ini" <<'INI'
[case]
name = shard
model = tiny
seed = 5

[prompts]
count = 3
min_len = 70
max_len = 90
max_new_tokens = 2
temperature = 0
top_k = 3
shared_prefix_groups = 2
shared_prefix_len = 64

[matrix]
devices = cpu
kernel_sets = invariant, reference
attention_backends = mla-unified, mla-split
force_prefix_caching = false, true
max_num_batched_tokens = 32
batch_sizes = 1, 3
threads = 1
INI

"$INVAR" run -q --case "$work/shard.ini" --out "$work/full" >"$work/full.log" 2>&1 ||
    { cat "$work/full.log"; fail "the unsharded run exited $?"; }
for i in 1 2 3; do
    "$INVAR" run -q --case "$work/shard.ini" --shard "$i/3" --out "$work/s$i" >"$work/s$i.log" 2>&1 ||
        { cat "$work/s$i.log"; fail "shard $i/3 exited $?"; }
    grep -q '^"shard","'"$i"'/3"$' "$work/s$i/meta.csv" || fail "s$i/meta.csv has no shard row $i/3"
done
echo "configs per shard: $(for i in 1 2 3; do echo -n "$(($(wc -l <"$work/s$i/summary.csv") - 1)) "; done)"

"$INVAR" report merge "$work/merged" "$work/s3" "$work/s1" "$work/s2" >"$work/merge.log" 2>&1 ||
    { cat "$work/merge.log"; fail "merge exited $?"; }

python3 - "$work/full" "$work/merged" <<'PY' || fail "the merged report is not the unsharded one"
import csv, re, sys
full, merged = sys.argv[1], sys.argv[2]
def rows(d, name, drop=()):
    with open(f"{d}/{name}", newline="") as f:
        r = list(csv.reader(f))
    cols = [i for i, h in enumerate(r[0]) if h not in drop]
    return [[row[i] for i in cols] for row in r]
a, b = rows(full, "summary.csv", {"seconds"}), rows(merged, "summary.csv", {"seconds"})
assert a == b, f"summary.csv differs:\n{a}\n{b}"
assert len(a) == 9, f"summary.csv: {len(a) - 1} rows, expected 8"
a, b = rows(full, "divergence.csv"), rows(merged, "divergence.csv")
assert a == b, "divergence.csv differs"
assert len(a) > 1, "divergence.csv has no rows: the reference set was not caught"
# Run-specific: when and where it ran, how long it took, its command line, the shards and the
# seal of its files (their seconds differ).
masked = ("date_utc", "host", "command_line", "working_directory", "merged_shard", "merged_shards",
          "xxh64")
def junit(d):
    out = []
    for line in open(f"{d}/junit.xml"):
        m = re.search(r'<property name="([^":/]*)', line)
        if m and m.group(1) in masked:
            continue
        line = re.sub(r' (time|timestamp|hostname)="[^"]*"', r' \1="*"', line)
        out.append(line)
    return out
assert junit(full) == junit(merged), "junit.xml differs"
def md(d):
    text = open(f"{d}/summary.md").read()
    text = re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", "DATE", text)
    text = re.sub(r"host `[^`]*`", "host *", text)
    return re.sub(r"\d+\.\d s\b", "* s", text)
assert md(full) == md(merged), "summary.md differs"
print("merged = unsharded: summary.csv, divergence.csv, junit.xml, summary.md (timings aside)")
PY
grep -q '^"merged_shards","3"$' "$work/merged/meta.csv" || fail "merged/meta.csv: no merged_shards row"
grep -q '^"shard",' "$work/merged/meta.csv" && fail "merged/meta.csv kept a shard row"

# report diff: a single shard misses the other shards' configs on purpose; the merge misses none.
"$INVAR" report diff "$work/full" "$work/s2" >"$work/diff.log" 2>&1 ||
    { cat "$work/diff.log"; fail "diff against shard 2/3 exited $?"; }
grep -q "shard 2/3, meta.csv's shard row: not regressions" "$work/diff.log" ||
    { cat "$work/diff.log"; fail "diff does not say the new report is a shard"; }
"$INVAR" report diff "$work/full" "$work/merged" >"$work/diff.log" 2>&1 ||
    { cat "$work/diff.log"; fail "diff against the merge exited $?"; }
grep -q " 0 vanished;" "$work/diff.log" || { cat "$work/diff.log"; fail "the merge lost configs"; }

# A finished shard resumes as itself: --shard comes back from meta.csv, nothing runs again.
cp "$work/s2/summary.csv" "$work/s2.before"
"$INVAR" run --resume "$work/s2" >"$work/resume.log" 2>&1 || { cat "$work/resume.log"; fail "resume exited $?"; }
grep -q "shard 2/3: " "$work/resume.log" || { cat "$work/resume.log"; fail "resume is not shard 2/3"; }
grep -q "0 to go" "$work/resume.log" || { cat "$work/resume.log"; fail "resume ran configs again"; }
cmp -s "$work/s2.before" "$work/s2/summary.csv" || fail "resume changed s2/summary.csv"

# Refusals: exit 2, the message naming the directory and the field.
refused() {  # refused WHAT DIR FIELD ARGS...: `invar` with ARGS exits 2 naming DIR and FIELD
    local what=$1 dir=$2 field=$3 rc
    shift 3
    "$INVAR" "$@" >"$work/refused.log" 2>&1
    rc=$?
    [ "$rc" = 2 ] || { cat "$work/refused.log"; fail "$what: exit $rc, expected 2"; }
    grep -qF -- "$dir" "$work/refused.log" && grep -qF -- "$field" "$work/refused.log" ||
        { cat "$work/refused.log"; fail "$what: the message names not both '$dir' and '$field'"; }
    echo "refused, $what: $(head -n 1 "$work/refused.log")"
}
edited() {  # edited NAME FROM KEY VALUE: a copy of shard FROM with meta.csv's KEY set to VALUE
    cp -r "$work/$2" "$work/$1"
    sed -i "s|^\"$3\",.*|\"$3\",\"$4\"|" "$work/$1/meta.csv"
}
edited seed s2 seed 6
refused "a shard of another seed" "$work/seed" "seed" report merge "$work/m" "$work/s1" "$work/seed" "$work/s3"
edited commit s3 invar_commit 0123456789abcdef
refused "a shard of another commit" "$work/commit" "invar_commit" report merge "$work/m" "$work/s1" "$work/s2" "$work/commit"
edited defines s3 build_defines -DMLA_SPLIT_SIZE=256
refused "a shard of another build" "$work/defines" "build_defines" report merge "$work/m" "$work/s1" "$work/s2" "$work/defines"
edited case s2 case_xxh64 0123456789abcdef
refused "a shard of another case" "$work/case" "case_xxh64" report merge "$work/m" "$work/s1" "$work/case" "$work/s3"
refused "a missing shard" "shard 3/3" "missing" report merge "$work/m" "$work/s1" "$work/s2"
refused "a shard given twice" "$work/s2" "shard: 2/3 given twice" report merge "$work/m" "$work/s1" "$work/s2" "$work/s2" "$work/s3"
edited overlap s1 shard 3/3
refused "overlapping configs" "$work/overlap" "shard_configs" report merge "$work/m" "$work/s1" "$work/s2" "$work/overlap"
cp -r "$work/s1" "$work/cut" && head -n 2 "$work/s1/summary.csv" >"$work/cut/summary.csv"
refused "an unfinished shard" "$work/cut" "summary.csv" report merge "$work/m" "$work/cut" "$work/s2" "$work/s3"
refused "a report that is no shard" "$work/full" "shard: missing" report merge "$work/m" "$work/full" "$work/s2" "$work/s3"
# Edited shards (the seal: meta.csv's xxh64:FILE rows): refused by merge and by diff.
python3 - "$work" <<'PY2' || fail "no shard has a batch-variant row to edit"
import csv, shutil, sys
work = sys.argv[1]
for i in (1, 2, 3):
    rows = list(csv.reader(open(f"{work}/s{i}/summary.csv", newline="")))
    h = rows[0]
    for r in rows[1:]:
        if r[h.index("observed")] == "batch-variant":
            r[h.index("observed")], r[h.index("verdict")] = "invariant", "PASS"
            shutil.copytree(f"{work}/s{i}", f"{work}/forged")
            with open(f"{work}/forged/summary.csv", "w", newline="") as f:
                csv.writer(f, quoting=csv.QUOTE_ALL, lineterminator="\n").writerows(rows)
            open(f"{work}/forged.index", "w").write(str(i))
            sys.exit(0)
sys.exit(1)
PY2
forged_index=$(cat "$work/forged.index")
others=()
for i in 1 2 3; do [ "$i" = "$forged_index" ] || others+=("$work/s$i"); done
refused "a row edited to PASS" "$work/forged/summary.csv" "changed after" report merge "$work/m" "$work/forged" "${others[@]}"
refused "a row edited to PASS, diffed" "$work/forged/summary.csv" "changed after" report diff "$work/full" "$work/forged"
for i in 1 2 3; do [ "$(wc -l <"$work/s$i/divergence.csv")" -gt 1 ] && break; done
cp -r "$work/s$i" "$work/emptied" && head -n 1 "$work/s$i/divergence.csv" >"$work/emptied/divergence.csv"
others=()
for j in 1 2 3; do [ "$j" = "$i" ] || others+=("$work/s$j"); done
refused "divergence.csv emptied to its header" "$work/emptied/divergence.csv" "changed after" report merge "$work/m" "$work/emptied" "${others[@]}"
cp -r "$work/s1" "$work/renamed"
sed -i '2s|^"shard","[^"]*"|"shard","cpu/not-in-the-matrix"|' "$work/renamed/summary.csv"
grep -q 'cpu/not-in-the-matrix' "$work/renamed/summary.csv" || fail "the rename did not happen"
refused "a config renamed outside the matrix" "$work/renamed/summary.csv" "changed after" report merge "$work/m" "$work/renamed" "$work/s2" "$work/s3"
cp -r "$work/s1" "$work/twice" && echo '"shard","2/3"' >>"$work/twice/meta.csv"
refused "a meta.csv with two shard rows" "$work/twice/meta.csv" "shard: given twice" report merge "$work/m" "$work/twice" "$work/s2" "$work/s3"
refused "a meta.csv with two shard rows, diffed" "$work/twice/meta.csv" "shard: given twice" report diff "$work/full" "$work/twice"
cp -r "$work/s1" "$work/unsealed" && sed -i '/^"xxh64:/d' "$work/unsealed/meta.csv"
refused "a shard without its seal" "$work/unsealed/meta.csv" "xxh64:summary.csv: missing" report merge "$work/m" "$work/unsealed" "$work/s2" "$work/s3"
cp -r "$work/s1" "$work/noise" && head -c 3000 /dev/urandom | tr -d '\000' >"$work/noise/summary.csv"
refused "a random-bytes summary.csv" "$work/noise/summary.csv" "summary.csv" report merge "$work/m" "$work/noise" "$work/s2" "$work/s3"
grep -q "unfinished" "$work/refused.log" && { cat "$work/refused.log"; fail "random bytes called an unfinished shard"; }
grep -Eq "summary.csv:[0-9]+: " "$work/refused.log" || { cat "$work/refused.log"; fail "random bytes: no line named"; }
# The merge is sealed too: its own files' hashes, none of a shard's.
[ "$(grep -c '^"xxh64:' "$work/merged/meta.csv")" = 2 ] || fail "merged/meta.csv: not sealed once"
refused "--shard 4/3" "--shard" "I must be from 1 to N" run --case "$work/shard.ini" --shard 4/3 --out "$work/x"
refused "--shard 1of3" "--shard" "not I/N" run --case "$work/shard.ini" --shard 1of3 --out "$work/x"
refused "resuming a merge" "$work/merged" "merged_shards" run --resume "$work/merged"
[ -e "$work/m" ] && fail "a refused merge created its OUT directory"
echo "ok: 3 shards merged equal the unsharded run; refusals named the directory and the field"
