#!/usr/bin/env bash
# tests/test_mutant_ledger.sh — tests/mutants/ledger.sh, which `make mutants` runs to write
# tests/mutants/LEDGER.md: rewriting the committed ledger from no state keeps every row (a
# CPU-only host keeps the verdicts a GPU host judged); a state file that judged the patch as it
# is replaces its row; a CUDA state that only compiled keeps the judged row; a row whose patch
# has changed since is "not run here"; and run.sh's ladder holds every CPU script suite of make
# check. Under a second; needs no build.
set -u
here=$(cd "$(dirname "$0")" && pwd)
ledger_sh="$here/mutants/ledger.sh"
work=$(mktemp -d "${TMPDIR:-/tmp}/invar-ledger.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
row() { grep -F "| \`$1\` |" "$2"; }

# From no state, twice: the second rewrite keeps every row of the first. (The committed ledger
# itself may lag a patch rebased since its run: that row is "not run here" until the next one.)
mkdir "$work/state"
cp "$here/mutants/LEDGER.md" "$work/LEDGER.md"
bash "$ledger_sh" "$work/state" "$work/LEDGER.md" >/dev/null || fail "ledger.sh: exit $?"
cp "$work/LEDGER.md" "$work/first.md"
bash "$ledger_sh" "$work/state" "$work/LEDGER.md" >/dev/null || fail "ledger.sh: exit $?"
diff -u "$work/first.md" "$work/LEDGER.md" || fail "a rewrite from no state changed the ledger"
[ "$(grep -c '^| `' "$work/LEDGER.md")" = "$(ls "$here"/mutants/*.patch | wc -l)" ] ||
    fail "not one row a patch"
echo "ok: a rewrite from no state keeps every row; one row a patch"

# A state file for a CPU mutant, as run.sh writes it: sum, verdict, line, seconds, host.
cpu=compare-min-steps
sum=$(sha1sum "$here/mutants/$cpu.patch" | cut -c1-40)
printf '%s\nsurvived\n%s: SURVIVED (checks run: unit:test_compare )\n7\ntesthost (2 cores, no GPU), 2026-01-01\n' \
    "$sum" "$cpu" >"$work/state/$cpu"
# A CUDA mutant compiled but not run here, judged before on a GPU host.
cuda=cuda-rope-fma-large-t
sum=$(sha1sum "$here/mutants/$cuda.patch" | cut -c1-40)
judged="| \`$cuda\` | kernel | cuda | caught | kernels:rope | 9 | gpuhost (16 cores, NVIDIA H200), 2026-01-01 | \`${sum:0:10}\` |"
grep -vF "| \`$cuda\` |" "$work/first.md" >"$work/LEDGER.md"
echo "$judged" >>"$work/LEDGER.md"
printf '%s\nskipped\n%s: skipped (no CUDA device)\n30\ntesthost (2 cores, no GPU), 2026-01-01\n' \
    "$sum" "$cuda" >"$work/state/$cuda"
# A row judged on a patch that has changed since.
stale=cuda-rmsnorm-threads-from-m
sed -i "/| \`$stale\` |/s/| \`[0-9a-f]*\` |\$/| \`0000000000\` |/" "$work/LEDGER.md"
bash "$ledger_sh" "$work/state" "$work/LEDGER.md" >/dev/null || fail "ledger.sh: exit $?"

row "$cpu" "$work/LEDGER.md" | grep -q '| survived | - | 7 | testhost (2 cores, no GPU), 2026-01-01 |' ||
    fail "the state's verdict did not replace $cpu's row: $(row "$cpu" "$work/LEDGER.md")"
[ "$(row "$cuda" "$work/LEDGER.md")" = "$judged" ] ||
    fail "a compile-only CUDA state replaced $cuda's judged row: $(row "$cuda" "$work/LEDGER.md")"
row "$stale" "$work/LEDGER.md" | grep -q "| not run here | - | - | not judged in this ledger's run |" ||
    fail "a row of a changed patch was kept: $(row "$stale" "$work/LEDGER.md")"
grep -q '^- cpu: .* [1-9][0-9]* survived' "$work/LEDGER.md" || fail "the counts miss the survivor"
echo "ok: a state replaces its row, a compile-only CUDA state keeps the judged one, a changed patch is not run here"
# The mutation ladder is make check's: every CPU script suite run_all.sh runs on a build is a
# rung of run.sh's (a script missing there let a bug make check catches survive the ladder).
missing=""
for name in $(grep -o 'bash tests/[a-z_]*\.sh "\$BUILD"' "$here/run_all.sh" | sed 's|bash tests/||; s|\.sh.*||' | sort -u); do
    case "$name" in *cuda* | *gpu*) continue ;; esac
    grep -q "script:$name\b" "$here/mutants/run.sh" || missing="$missing $name"
done
[ -z "$missing" ] || fail "make check's scripts missing from run.sh's ladder:$missing"
echo "ok: every CPU script suite of make check is a rung of the mutation ladder"
echo "test_mutant_ledger: ok"
