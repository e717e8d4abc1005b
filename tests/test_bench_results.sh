#!/usr/bin/env bash
# tests/test_bench_results.sh BUILD — bench results as data: `invar bench` writes meta.csv beside
# its CSVs, `invar report bench --add` files a run as results/bench/<date>_<device>_<commit>/,
# `invar report bench` writes the page from the filed runs (the fixtures' page must equal
# tests/fixtures/bench_page.md; the committed kernels/cuda/BENCH.md must be results/bench's page,
# so a filed run without its page fails here), and `invar report diff` reads two run folders:
# exit 1 on a row slower than the threshold, 0 above it, writing nothing into either folder. A
# bench killed mid-run has meta.csv saying finished no, files, and its page says cut short.
# The fixtures (tests/fixtures/bench_results/) are hand-written, not measurements. About 5 s.
set -u
BUILD=${1:-build}
INVAR="$(cd "$(dirname "$BUILD/invar")" && pwd)/invar"
[ -x "$INVAR" ] || { echo "FAIL: $INVAR not built"; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/invar-bench-results.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
fixtures=tests/fixtures/bench_results
old=$fixtures/2026-01-01_fixture-gpu_aaaaaaaaaa
new=$fixtures/2026-01-02_fixture-gpu_bbbbbbbbbb

# The page of the fixtures, newest run first, the older one as a summary line.
"$INVAR" report bench "$fixtures" >"$work/page.md" || fail "report bench $fixtures: exit $?"
diff -u tests/fixtures/bench_page.md "$work/page.md" || fail "the fixtures' page differs from tests/fixtures/bench_page.md"
grep -q 'geometric mean over the 6 rows: \*\*0.984\*\*' "$work/page.md" || fail "no GEMM geomean 0.984"
grep -q '^- `2026-01-01_fixture-gpu_aaaaaaaaaa`: .*GEMM geomean invariant/cuBLAS 1.000' "$work/page.md" ||
    fail "no summary line for the older run"
grep -q '^| 32 | 61 | 69.5 | 70.4 | 380.00 | 375.00 | 0.987 |$' "$work/page.md" || fail "no routed-experts row"
echo "ok: report bench $fixtures: the newest run's tables, one line for the older"

# The committed page is the page of the committed runs.
"$INVAR" report bench results/bench --out "$work/BENCH.md" >/dev/null || fail "report bench results/bench: exit $?"
diff -u kernels/cuda/BENCH.md "$work/BENCH.md" ||
    fail "kernels/cuda/BENCH.md is not results/bench's page: run make bench-page and commit it"
echo "ok: kernels/cuda/BENCH.md is results/bench's page"

# A newer run with the decode rows only (cut short, or --only decode), filed the same day as the
# 01-02 fixture, hours later, under a folder name that sorts first: the newest by meta.csv's whole
# timestamp, not by day then name. Its own table first, then every section it lacks from the
# newest older run that has it (the 01-02 fixture, not the 01-01 one), under that run's name;
# the decode table is not repeated from an older run.
part="$work/partial/2026-01-02_fixture-gpu_0c0c0c0c0c"
mkdir -p "$part"
cp -r "$old" "$new" "$work/partial/"
sed -e 's/2026-01-01T00:00:00Z/2026-01-02T12:00:00Z/' -e 's/aaaaaaaaaa*/0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c/' \
    "$old/meta.csv" >"$part/meta.csv"
echo '"finished","no"' >>"$part/meta.csv"
cp "$old/bench_decode.csv" "$part/"
"$INVAR" report bench "$work/partial" >"$work/partial.md" || fail "report bench of a partial newest run: exit $?"
awk '/^## Newest run/ { s = "new" } /^## Sections the newest run lacks/ { s = "older" } /^## Older runs/ { s = "" }
     /^### / { print s ": " $0 } /^From `/ { print s ": " $2 }' "$work/partial.md" >"$work/partial.sections"
cat >"$work/partial.want" <<'WANT'
new: ### End to end: decode and prefill tokens/s
older: `2026-01-02_fixture-gpu_bbbbbbbbbb`
older: ### GEMM: invariant speed over cuBLAS
older: `2026-01-02_fixture-gpu_bbbbbbbbbb`
older: ### MLA decode: share of the device-to-device copy bandwidth
older: `2026-01-02_fixture-gpu_bbbbbbbbbb`
older: ### Routed experts (moe_experts): share of the device-to-device copy bandwidth
older: `2026-01-02_fixture-gpu_bbbbbbbbbb`
older: ### Tensor parallel: all-reduce against NCCL
older: `2026-01-02_fixture-gpu_bbbbbbbbbb`
older: ### TP-size invariance: decode tokens/s, option on against the rank-order default
older: `2026-01-02_fixture-gpu_bbbbbbbbbb`
older: ### One decode step op by op (`--profile`)
WANT
diff -u "$work/partial.want" "$work/partial.sections" || fail "a partial newest run's page: sections not as above"
grep -q '^From `2026-01-02_fixture-gpu_bbbbbbbbbb` (2026-01-02, Fixture GPU, invar bbbbbbbbbb built with -DGEMM_GATHER_TMA_W=0):$' "$work/partial.md" ||
    fail "the older sections do not describe the run they come from"
grep -q 'geometric mean over the 6 rows: \*\*0.984\*\*' "$work/partial.md" || fail "the GEMM table is not the 01-02 fixture's"
echo "ok: a partial newest run's page shows each section it lacks from the newest older run that has it"

# A newer run of one model only (`invar bench --only decode --model v3 --profile`): its tables
# first (the FLOP ceiling it timed, its v3 rows), then each model's rows it lacks from the newest
# older run that has them, that model named (v2-lite from the 01-02 fixture; the 01-01 one's
# v2-lite rows are older still), and the sections it lacks as above.
v3="$work/models/2026-01-03_fixture-gpu_cccccccccc"
mkdir -p "$v3"
cp -r "$old" "$new" "$work/models/"
# the 01-02 run timed v3 too: the newest run's v3 rows hide those
echo '"cuda","v3","1","128","64","39.0","40.0","0.9750"' >>"$work/models/$(basename "$new")/bench_decode.csv"
sed -e 's/2026-01-01T00:00:00Z/2026-01-03T00:00:00Z/' -e 's/aaaaaaaaaa*/cccccccccccccccccccccccccccccccccccccccc/' \
    "$old/meta.csv" >"$v3/meta.csv"
sed -n 1p "$new/bench_decode.csv" >"$v3/bench_decode.csv"
echo '"cuda","v3","1","128","64","40.0","41.0","0.9756"' >>"$v3/bench_decode.csv"
sed -n 1p "$new/bench_decode_ops.csv" >"$v3/bench_decode_ops.csv"
echo '"cuda","v3","1","gemm","30","900.0","910.0"' >>"$v3/bench_decode_ops.csv"
printf '%s\n' '"device","model","prompt_len","op","calls","invariant_us","reference_us"' \
    '"cuda","v3","4096","moe_experts T=4096","2","48000.0","47000.0"' >"$v3/bench_prefill_ops.csv"
printf '%s\n' '"N","K","M","ref_us","ref_tflops"' '"7168","18432","4096","1300.00","832.0"' >"$v3/bench_peak.csv"
"$INVAR" report bench "$work/models" >"$work/models.md" || fail "report bench of a one-model newest run: exit $?"
awk '/^## Newest run/ { s = "new" } /^## Sections the newest run lacks/ { s = "older" } /^## Older runs/ { s = "" }
     /^### / { print s ": " $0 } /^From `/ { print s ": " $2 " " $NF }' "$work/models.md" >"$work/models.sections"
cat >"$work/models.want" <<'WANT'
new: ### FLOP ceiling: cuBLAS on large cells (a run without the GEMM grid)
new: ### End to end: decode and prefill tokens/s
new: ### One decode step op by op (`--profile`)
new: ### The prefill row's step op by op (`--profile`)
older: `2026-01-02_fixture-gpu_bbbbbbbbbb` -DGEMM_GATHER_TMA_W=0):
older: ### GEMM: invariant speed over cuBLAS
older: `2026-01-02_fixture-gpu_bbbbbbbbbb` -DGEMM_GATHER_TMA_W=0):
older: ### MLA decode: share of the device-to-device copy bandwidth
older: `2026-01-02_fixture-gpu_bbbbbbbbbb` -DGEMM_GATHER_TMA_W=0):
older: ### Routed experts (moe_experts): share of the device-to-device copy bandwidth
older: `2026-01-02_fixture-gpu_bbbbbbbbbb` v2-lite:
older: ### End to end: decode and prefill tokens/s
older: `2026-01-02_fixture-gpu_bbbbbbbbbb` -DGEMM_GATHER_TMA_W=0):
older: ### Tensor parallel: all-reduce against NCCL
older: `2026-01-02_fixture-gpu_bbbbbbbbbb` -DGEMM_GATHER_TMA_W=0):
older: ### TP-size invariance: decode tokens/s, option on against the rank-order default
older: `2026-01-02_fixture-gpu_bbbbbbbbbb` v2-lite:
older: ### One decode step op by op (`--profile`)
WANT
diff -u "$work/models.want" "$work/models.sections" || fail "a one-model newest run's page: sections not as above"
grep -q '^| cuda | v3 | 1 | 128 | 64 | 40.0 | 41.0 | 0.9756 |$' "$work/models.md" &&
    grep -q '^| cuda | v2-lite | 1 | 128 | 64 | 100.0 | 102.0 | 0.9804 |$' "$work/models.md" ||
    fail "the v3 row or the older run's v2-lite row is missing"
[ "$(grep -c '^| cuda | v2-lite | 32 | 128 | 64 |' "$work/models.md")" = 1 ] || fail "an older run's v2-lite row shown twice"
grep -q '| 39.0 | 40.0 |' "$work/models.md" && fail "an older run's v3 row shown under the newest run's"
grep -q '^| cuda | v3 | 1 | gemm | 30 | 900.0 | 910.0 |$' "$work/models.md" &&
    grep -q '^| cuda | v3 | 4096 | moe_experts T=4096 | 2 | 48000.0 | 47000.0 |$' "$work/models.md" &&
    grep -q '^| 7168 | 18432 | 4096 | 1300.00 | 832.0 |$' "$work/models.md" ||
    fail "the one-model run's profile, prefill profile or FLOP ceiling rows are missing"
echo "ok: a one-model newest run's page shows the other model's rows from the newest older run that has them"

# No run yet: the page says so.
mkdir "$work/empty"
"$INVAR" report bench "$work/empty" | grep -q '^No bench results yet' || fail "an empty folder's page"
echo "ok: no runs: 'No bench results yet'"

# Filing: a run folder (the newer fixture as `invar bench --out` left it) under its date,
# device slug and commit; the same run again is exit 2; a folder without meta.csv is exit 2.
mkdir "$work/run" "$work/results"
cp "$new"/*.csv "$work/run/"
"$INVAR" report bench "$work/results" --add "$work/run" --out "$work/filed.md" >/dev/null ||
    fail "report bench --add: exit $?"
filed="$work/results/2026-01-02_fixture-gpu_bbbbbbbbbb"
for f in "$new"/*.csv; do
    cmp -s "$f" "$filed/$(basename "$f")" || fail "$filed/$(basename "$f") is not a copy of $f"
done
"$INVAR" report bench "$work/results" --add "$work/run" >"$work/again.log" 2>&1
[ $? = 2 ] && grep -q 'filed already' "$work/again.log" || { cat "$work/again.log"; fail "filing twice is not exit 2"; }
# Another run of that day, device and commit (another --only section: its own meta.csv) files
# beside it as NAME-2, and is refused in turn when filed again.
sed -i 's/^"command_line",.*/"command_line","bench --only tp"/' "$work/run/meta.csv"
"$INVAR" report bench "$work/results" --add "$work/run" >/dev/null 2>"$work/second.log" ||
    { cat "$work/second.log"; fail "a second run of the day, device and commit: exit $?"; }
cmp -s "$work/run/meta.csv" "$filed-2/meta.csv" || fail "the second run is not filed as $filed-2"
cmp -s "$new/meta.csv" "$filed/meta.csv" || fail "filing the second run changed the first"
"$INVAR" report bench "$work/results" --add "$work/run" >"$work/again2.log" 2>&1
[ $? = 2 ] && grep -q 'filed already' "$work/again2.log" && [ ! -e "$filed-3" ] ||
    { cat "$work/again2.log"; fail "filing the second run twice is not exit 2"; }
rm "$work/run/meta.csv"
"$INVAR" report bench "$work/results" --add "$work/run" >"$work/nometa.log" 2>&1
[ $? = 2 ] && grep -q 'meta.csv' "$work/nometa.log" || { cat "$work/nometa.log"; fail "a run without meta.csv is not exit 2"; }
echo "ok: report bench --add files a run once, as DATE_DEVICE_COMMIT, another of that day as -2"

# The diff of two run folders: the 10% slower GEMM row is a regression at 5%, not at 15%.
"$INVAR" report diff "$old" "$new" --md "$work/diff.md" >"$work/diff.log" 2>&1
rc=$?
[ "$rc" = 1 ] || { cat "$work/diff.log"; fail "report diff of the fixtures: exit $rc, not 1"; }
grep -q "+10.0%  N=576 K=7168 M=64  inv_us: 11.22 -> 12.34 (1.000 -> 0.909)" "$work/diff.log" || { cat "$work/diff.log"; fail "the slower row is not named"; }
grep -q '| N=576 K=7168 M=64 | inv_us | 11.22 | 12.34 | +10.0% |' "$work/diff.md" || fail "diff.md lacks the slower row"
"$INVAR" report diff "$old" "$new" --md "$work/diff15.md" --threshold 15 >"$work/diff15.log" 2>&1
rc=$?
[ "$rc" = 0 ] || { cat "$work/diff15.log"; fail "report diff --threshold 15: exit $rc, not 0"; }
[ ! -e "$new/diff.md" ] && [ ! -e "$old/diff.md" ] || fail "report diff --md wrote into a run folder"
echo "ok: report diff of two run folders: exit 1 at 5%, 0 at 15%, nothing written into them"

# A real run on this machine: `invar bench --device cpu` writes meta.csv, and it files.
"$INVAR" bench --device cpu --quick --out "$work/cpu" >"$work/cpu.log" 2>&1 || { cat "$work/cpu.log"; fail "bench --device cpu: exit $?"; }
grep -q '^"device","cpu"$' "$work/cpu/meta.csv" && grep -q '^"command_line","bench --device cpu --quick' "$work/cpu/meta.csv" ||
    fail "bench's meta.csv lacks the device or the command line"
"$INVAR" report bench "$work/cpu-results" --add "$work/cpu" >"$work/cpu-page.md" 2>/dev/null || fail "filing the cpu run: exit $?"
ls -d "$work/cpu-results/"*_cpu_* >/dev/null 2>&1 || fail "the cpu run is not filed as DATE_cpu_COMMIT"
grep -q '^### End to end: decode and prefill tokens/s' "$work/cpu-page.md" || fail "the cpu run's page has no decode table"
grep -q '^"finished","yes"$' "$work/cpu/meta.csv" || fail "a finished bench's meta.csv does not say finished yes"
echo "ok: bench --device cpu writes meta.csv; the run files and pages"

# A run cut short (killed once its meta.csv is there, before its sections end) still has
# meta.csv, saying finished no; it files, and its page says it was cut short.
"$INVAR" bench --device cpu --quick --out "$work/cut" >"$work/cut.log" 2>&1 &
pid=$!
for _ in $(seq 400); do
    [ -s "$work/cut/meta.csv" ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
done
kill -9 "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
grep -q '^"finished","no"$' "$work/cut/meta.csv" || { cat "$work/cut.log"; fail "a bench killed mid-run left no meta.csv saying finished no"; }
"$INVAR" report bench "$work/cut-results" --add "$work/cut" >"$work/cut-page.md" 2>"$work/cut-add.log" ||
    { cat "$work/cut-add.log"; fail "filing a run cut short: exit $?"; }
grep -q '^This run was cut short (meta.csv: finished no)' "$work/cut-page.md" &&
    grep -q '^## Newest run: .*, cut short$' "$work/cut-page.md" || fail "the page of a run cut short does not say so"
echo "ok: a bench killed mid-run files, its page marked cut short"
echo "test_bench_results: ok"
