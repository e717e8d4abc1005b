#!/usr/bin/env bash
# tests/test_plugin.sh BUILD — plugin kernel sets end to end (kernels/invar_plugin.h): the engine
# on a plugin's RMSNorm through a case's kernel_sets and through `invar run --kernel-set`; a claim
# of invariance that does not hold FAILs, an unclaimed batch-variant op is caught, NaN rows in
# batched calls make an error row (not a dead run) naming the op that differed first, and in a run
# alone one naming the op whose rows first held a NaN; at TP = 2, ranks that disagree make an
# error row; every refused plugin exits 2 naming the file and the symbol or field. The plugins
# are tests/plugins/test_plugin.c's variants in BUILD/plugins.
set -u
BUILD=${1:-build}
invar=$(cd "$(dirname "$BUILD/invar")" && pwd)/invar
plugins=$(cd "$BUILD/plugins" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/invar-plugin.XXXXXX") || exit 2
trap 'rm -rf "$work"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# Short relative paths: a case file's line holds at most 197 characters.
mkdir -p "$work/p"
for v in rmsnorm_invariant rmsnorm_split_small rmsnorm_split_small_honest rmsnorm_nan_batched rmsnorm_nan_long_rows \
         logprobs_rank_off bad_claim mixed; do
    ln -s "$plugins/$v.so" "$work/p/$v.so"
done
cat >"$work/plugins.ini" <<'EOF'
[case]
name = plugins
model = tiny
seed = 77

[prompts]
count = 8
min_len = 4
max_len = 40
max_new_tokens = 6
temperature = 0
top_k = 5

[matrix]
devices = cpu
kernel_sets = plugin:p/rmsnorm_nan_batched.so, plugin:p/rmsnorm_nan_long_rows.so, plugin:p/rmsnorm_invariant.so, plugin:p/rmsnorm_split_small.so, plugin:p/rmsnorm_split_small_honest.so
batch_sizes = 1, 8
max_num_batched_tokens = 64
threads = 2
EOF

# row CONFIG: the config's summary.csv row
row() { grep "^\"plugins\",\"$1\"," "$work/out/summary.csv"; }
expect_row() {  # expect_row CONFIG EXPECTED OBSERVED VERDICT
    local r
    r=$(row "$1") || { fail "$1: no summary.csv row"; return; }
    grep -q "\"$2\",\"$3\",\"$4\"" <<<"$r" || fail "$1: not expected=$2 observed=$3 $4: $r"
}

before=$fails
(cd "$work" && "$invar" run --case plugins.ini --out out -q >run.log 2>&1)
rc=$?
[ "$rc" = 1 ] || { cat "$work/run.log"; fail "the plugins case exited $rc, not 1 (one claim must fail)"; }
expect_row cpu/plugin:p/rmsnorm_invariant.so invariant invariant PASS
expect_row cpu/plugin:p/rmsnorm_split_small.so invariant batch-variant FAIL
expect_row cpu/plugin:p/rmsnorm_split_small_honest.so batch-variant batch-variant PASS
# NaN rows only in batched calls: an error row (the configs after it still ran, above), its
# broken record in the note and the op that differed first named against the request alone.
expect_row cpu/plugin:p/rmsnorm_nan_batched.so invariant error FAIL
# (a row of NaN logits samples id -1 on both devices: the engine refuses it at once)
row cpu/plugin:p/rmsnorm_nan_batched.so | grep -q 'engine_generate (bs=8) refused: step [0-9]*, request [0-9]*: sampled token -1 outside the vocabulary' ||
    fail "rmsnorm_nan_batched: no refused id -1 in the note: $(row cpu/plugin:p/rmsnorm_nan_batched.so)"
row cpu/plugin:p/rmsnorm_nan_batched.so | grep -q '"rmsnorm (D=256) in layer 0, call 0, position [0-9]*: M=[0-9]* row [0-9]* alone, M=[0-9]* row [0-9]* at bs=8 (the run that failed)' ||
    fail "rmsnorm_nan_batched: first_op does not name rmsnorm at bs=8: $(row cpu/plugin:p/rmsnorm_nan_batched.so)"
# NaN rows from M = 24 up: a long prompt's bs=1 baseline breaks, with no run to compare it
# with; the first op whose rows of it held a NaN is named.
expect_row cpu/plugin:p/rmsnorm_nan_long_rows.so invariant error FAIL
row cpu/plugin:p/rmsnorm_nan_long_rows.so | grep -q 'engine_generate (bs=1 baseline) refused: step [0-9]*, request [0-9]*: sampled token -1 outside the vocabulary' ||
    fail "rmsnorm_nan_long_rows: no refused bs=1 baseline in the note: $(row cpu/plugin:p/rmsnorm_nan_long_rows.so)"
row cpu/plugin:p/rmsnorm_nan_long_rows.so | grep -q '"rmsnorm (D=256) in layer 0, call 0, position 0: M=[0-9]* row 0 alone: the first output holding a NaN or an infinity (256 elements of the row; the run alone failed)"' ||
    fail "rmsnorm_nan_long_rows: first_op does not name rmsnorm's NaN rows: $(row cpu/plugin:p/rmsnorm_nan_long_rows.so)"
grep -q '^      first op with a NaN or an infinity: rmsnorm (D=256)' "$work/run.log" ||
    fail "rmsnorm_nan_long_rows: the console does not label its op as the first holding a NaN"
grep -q '^      first differing op: rmsnorm (D=256) .* at bs=8 (the run that failed)' "$work/run.log" ||
    fail "rmsnorm_nan_batched: the console does not label its op as the first differing one"
[ "$fails" = "$before" ] &&
    echo "plugins case: the invariant plugin passes, the false claim fails, the unclaimed variance is caught," \
        "NaN rows in batched calls are an error row whose first differing op is named, NaN rows in" \
        "a run alone name the op that first held one"

# Tensor parallelism: a plugin set on each rank of a TP = 2 group. The ranks of one whose
# logprobs are one ulp off on rank 1 record other logprobs: the engine refuses the run (no
# request of it is at fault) and the config is an error row, never compared on rank 0's records
# and judged as if it had run; the invariant plugin passes beside it.
cat >"$work/tp.ini" <<'EOF'
[case]
name = plugins-tp
model = tiny-tp
seed = 78

[prompts]
count = 4
min_len = 4
max_len = 20
max_new_tokens = 3
temperature = 0
top_k = 3

[matrix]
devices = cpu
kernel_sets = plugin:p/logprobs_rank_off.so, plugin:p/rmsnorm_invariant.so
tensor_parallel = 2
attention_backends = mla-unified, mla-split
batch_sizes = 1, 4
max_num_batched_tokens = 32
threads = 1
EOF
before=$fails
(cd "$work" && "$invar" run --case tp.ini --out tp -q >tp.log 2>&1)
rc=$?
[ "$rc" = 1 ] || { cat "$work/tp.log"; fail "the TP plugins case exited $rc, not 1"; }
tp_row() { grep "^\"plugins-tp\",\"$1\"," "$work/tp/summary.csv"; }
# On both backends (mla-split has no prefill-vs-decode run to fail in): the first run that
# failed is the one named, and the config stops there.
for b in mla-unified mla-split; do
    tp_row "cpu/plugin:p/logprobs_rank_off.so/backend=$b" |
        grep -q '"invariant","error","FAIL",.*"engine_generate (bs=1 baseline) refused: rank 1 of 2 recorded other tokens or logprobs than rank 0 for request 0: the ranks disagree"$' ||
        fail "logprobs_rank_off at TP = 2 on $b: not an error row naming the baseline's disagreement: $(tp_row "cpu/plugin:p/logprobs_rank_off.so/backend=$b")"
    tp_row "cpu/plugin:p/rmsnorm_invariant.so/backend=$b" | grep -q '"invariant","invariant","PASS"' ||
        fail "rmsnorm_invariant at TP = 2 on $b: not a PASS: $(tp_row "cpu/plugin:p/rmsnorm_invariant.so/backend=$b")"
done
[ "$fails" = "$before" ] &&
    echo "plugins at TP = 2: ranks that record other logprobs make an error row, the invariant plugin passes"

# --kernel-set overrides the case's sets.
(cd "$work" && "$invar" run --case plugins.ini --kernel-set plugin:p/rmsnorm_invariant.so --out one -q \
    >one.log 2>&1) || { cat "$work/one.log"; fail "--kernel-set plugin:p/rmsnorm_invariant.so: not exit 0"; }
n=$(($(wc -l <"$work/one/summary.csv") - 1))
[ "$n" = 1 ] || fail "--kernel-set: $n configs, not 1"
echo "--kernel-set plugin:PATH: one config, passed"

# A set that claims some of its ops (the RMSNorm) and not others (the residual add) is not a
# batch-invariant set: a run expects it to vary (its claim is held op by op, by invar kernels).
(cd "$work" && "$invar" run --case plugins.ini --kernel-set plugin:p/mixed.so --out mixed -q >mixed.log 2>&1) ||
    { cat "$work/mixed.log"; fail "--kernel-set plugin:p/mixed.so: not exit 0"; }
grep -q '^"plugins","cpu/plugin:p/mixed.so",.*"batch-variant","batch-variant","PASS"' "$work/mixed/summary.csv" ||
    fail "a set claiming some of its ops is not run as a batch-variant set: $(tail -1 "$work/mixed/summary.csv")"
echo "a plugin set claiming some of its ops runs as a batch-variant set"

# Refusals: exit 2 and a message naming the file and the symbol or field at fault.
refused() {  # refused VARIANT TEXT
    local out rc
    out=$(cd "$work" && "$invar" run --case plugins.ini --kernel-set "plugin:$plugins/$1.so" --out bad -q 2>&1)
    rc=$?
    [ "$rc" = 2 ] || fail "$1: exit $rc, not 2"
    grep -qF "$plugins/$1.so" <<<"$out" && grep -qF "$2" <<<"$out" ||
        fail "$1: message lacks the file or \"$2\": $out"
}
refused bad_abi_version "abi_version 2, but this invar speaks version 1"
refused bad_abi_unset "abi_version 0, but this invar speaks version 1"
refused bad_null_table "invar_plugin_entry returned NULL"
refused bad_device "its ops are for cuda, not for --device cpu"
refused bad_claim "claims gemm, which it does not provide"
refused no_entry "no symbol invar_plugin_entry"
refused create_fails "create(rank 0) returned NULL"
refused no_such_plugin "cannot load it as a shared object"
# In a case file: the file and line of the key.
sed 's|^kernel_sets = .*|kernel_sets = invariant, plugin:p/bad_claim.so|' "$work/plugins.ini" >"$work/bad.ini"
line=$(grep -n '^kernel_sets' "$work/bad.ini" | cut -d: -f1)
out=$(cd "$work" && "$invar" run --case bad.ini --out bad -q 2>&1)
rc=$?
[ "$rc" = 2 ] && grep -qF "bad.ini:$line:" <<<"$out" && grep -qF "claims gemm" <<<"$out" ||
    fail "bad plugin in a case file: exit $rc, message: $out"
echo "refused plugins: 8 messages checked"

# invar kernels --plugin: the plugin's ops held to its claims, each op in a process of its own.
kernels() {  # kernels VARIANT EXIT: checks it, the exit code expected
    "$invar" kernels --plugin "$plugins/$1.so" --out "$work/k-$1" >"$work/k-$1.log" 2>&1
    local rc=$?
    [ "$rc" = "$2" ] || { tail -n 20 "$work/k-$1.log"; fail "kernels --plugin $1: exit $rc, not $2"; }
}
status_rows() {  # status_rows VARIANT STATUS: how many rmsnorm rows have that status
    grep -c "\"rmsnorm\",\"[^\"]*\",\"$2\"" "$work/k-$1/kernels.csv"
}
before_kernels=$fails
kernels rmsnorm_invariant 0
kernels rmsnorm_split_small 1
kernels rmsnorm_split_small_honest 0
kernels rmsnorm_unclaimed 1
kernels mixed 1
kernels crash 1
kernels rmsnorm_fails_d512 1
[ "$(status_rows rmsnorm_invariant ok)" -ge 4 ] || fail "rmsnorm_invariant: fewer than 4 ok rows"
[ "$(status_rows rmsnorm_split_small VARIES)" -ge 4 ] || fail "rmsnorm_split_small: not caught at every shape"
grep -q '"residual_add",[^,]*,"ok",.*"plugin"' "$work/k-mixed/kernels.csv" ||
    fail "mixed: its unclaimed residual_add not checked as the plugin's"
grep -q "never varied at any shape" "$work/k-rmsnorm_unclaimed.log" ||
    fail "rmsnorm_unclaimed: an unclaimed op that never varied was not failed"
grep -q '"rmsnorm","D=512","CRASH",.*"plugin","the check died of signal 11' "$work/k-crash/kernels.csv" ||
    fail "crash: no CRASH row for rmsnorm at its first shape"
grep -q '"gemm","(all shapes)","SKIP",.*"invariant","not provided by the plugin"' "$work/k-crash/kernels.csv" ||
    fail "crash: the ops it does not provide are not reported as the invariant set's"
# A failure the plugin reports at one shape is that shape's ERROR row only: the next shapes are
# checked afresh.
grep -q '"rmsnorm","D=512","ERROR",.*D = 512 is not supported' "$work/k-rmsnorm_fails_d512/kernels.csv" ||
    fail "rmsnorm_fails_d512: no ERROR row for rmsnorm at D=512"
[ "$(status_rows rmsnorm_fails_d512 ERROR)" = 1 ] && [ "$(status_rows rmsnorm_fails_d512 ok)" -ge 3 ] ||
    fail "rmsnorm_fails_d512: not one ERROR row and the other shapes ok: $(grep '"rmsnorm"' "$work/k-rmsnorm_fails_d512/kernels.csv" | cut -c1-80)"
"$invar" report render "$work/k-crash" >/dev/null 2>&1 && grep -q '<error' "$work/k-crash/junit.xml" ||
    fail "crash: the CRASH row is no <error> in junit.xml"
"$invar" kernels --plugin "$plugins/bad_device.so" --device cpu --out "$work/k-bad" >/dev/null 2>"$work/k-bad.log"
[ $? = 2 ] && grep -qF "$plugins/bad_device.so" "$work/k-bad.log" ||
    fail "kernels --plugin bad_device --device cpu: not exit 2 naming the file"
# A CUDA plugin where CUDA cannot run: a visible SKIP, never a pass.
"$invar" kernels --plugin "$plugins/bad_device.so" --out "$work/k-cuda" >"$work/k-cuda.log" 2>&1
if [ $? = 0 ] && ! "$invar" kernels --device cuda --op residual_add --quick --out "$work/k-probe" 2>&1 | grep -q '^ok'; then
    grep -q '^SKIP: cuda kernel checks' "$work/k-cuda.log" || fail "a CUDA plugin without a GPU: no SKIP line"
fi
[ "$fails" = "$before_kernels" ] &&
    echo "invar kernels --plugin: claims held, the unclaimed variant caught, a crash is a CRASH row," \
        "a reported failure an ERROR row at its shape only"

[ "$fails" = 0 ] && echo "plugin sets: ok"
[ "$fails" = 0 ]
