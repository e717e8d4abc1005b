#!/usr/bin/env bash
# tests/test_bridge.sh BUILD — the Python bridge (python/invar_bridge) over numpy: Python functions
# judged by invar's kernel checker through BUILD/libinvar.so (an invariant RMSNorm, log_softmax
# and attention pass, batch-variant ones are caught or fail their claim, a base-2 lse read as
# natural is inaccurate, an exception is an ERROR row, numpy's own matmul and padded attention
# judged as they are), the engine run on a Python RMSNorm and GEMM, and tests/gpu_third_party.sh's
# CPU-checkable parts. Skipped, with a line, without a python3 that has numpy.
set -u
BUILD=${1:-build}
if ! py=$(bash "$(dirname "$0")/numpy_python.sh"); then
    echo "SKIP: the Python bridge: no python3 with numpy (Debian: python3-numpy)"
    exit 0
fi
here=$(cd "$(dirname "$0")" && pwd)
export PYTHONPATH="$here/../python:$here/bridge" INVAR_LIB
INVAR_LIB=$(cd "$BUILD" && pwd)/libinvar.so
work=$(mktemp -d "${TMPDIR:-/tmp}/invar-bridge.XXXXXX") || exit 2
trap 'rm -rf "$work"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# The bf16 helpers round as kernels/bf16.h does: to nearest even, NaN kept quiet.
"$py" - <<'EOF' || fail "bf16 helpers"
import numpy as np, invar_bridge as ib
# 1 + 1/256 and 1 + 3/256 are ties: to the even neighbour, 1.0 and 1 + 2/128.
f = np.array([1.0, 1.00390625, 1.01171875, -2.5, np.inf], dtype=np.float32)
bits = np.array([0x3F80, 0x3F80, 0x3F82, 0xC020, 0x7F80], dtype=np.uint16)
got = ib.f32_to_bf16(f)
assert (got == bits).all(), [hex(v) for v in got]
nan = ib.f32_to_bf16(np.array([np.nan], dtype=np.float32))[0]
assert (nan & 0x7F80) == 0x7F80 and (nan & 0x7F) != 0 and (nan & 0x40), hex(nan)
assert (ib.bf16_to_f32(bits[:4]) == np.array([1.0, 1.0, 1.015625, -2.5], dtype=np.float32)).all()
EOF

# logprobs' token and top-k (python/invar_bridge/_select.py) against invar's float64 oracle
# (f64_logprobs in libinvar.so) on sampled and greedy rows, ties among them: the same ids.
"$py" - <<'EOF' || fail "logprobs selection: not the oracle's token and top-k"
import ctypes as C, numpy as np, invar_bridge as ib
from invar_bridge import _abi, _select
lib = ib.library()
lib.f64_logprobs.argtypes = [C.POINTER(_abi.LogprobsArgs), C.c_void_p, C.c_void_p, C.c_void_p]
rng = np.random.default_rng(59)
R, V, k = 64, 1000, 8
logits = rng.uniform(-12, 12, (R, V)).astype(np.float32)
logits[5, [10, 500, 900]] = logits[6, [3, 4, 999]] = 13.0  # tied maxima, greedy and sampled
temperature = np.where(np.arange(R) % 4 == 1, 0.0, rng.uniform(0.5, 1.5, R)).astype(np.float32)
temperature[5] = 0.0
seed = rng.integers(0, 2**63, R, dtype=np.uint64)
position = rng.integers(0, 4096, R).astype(np.int32)
lp64, token, ids = np.empty((R, V)), np.empty(R, np.int32), np.empty((R, k), np.int32)
a = _abi.LogprobsArgs(logits=logits.ctypes.data, R=R, V=V, k=k, temperature=temperature.ctypes.data,
                      noise_seed=seed.ctypes.data, position=position.ctypes.data)
lib.f64_logprobs(C.byref(a), lp64.ctypes.data, token.ctypes.data, ids.ctypes.data)
got_token, got_lp, got_ids, got_top = _select.select(logits, lp64.astype(np.float32), temperature, seed, position, k)
assert (got_token == token).all(), f"tokens differ at rows {np.flatnonzero(got_token != token)}"
assert (got_ids == ids).all(), f"top-k ids differ at rows {np.flatnonzero((got_ids != ids).any(axis=1))}"
assert list(got_ids[5, :3]) == [10, 500, 900] and got_token[5] == 10, (got_ids[5], got_token[5])
assert (got_top == lp64.astype(np.float32)[np.arange(R)[:, None], ids]).all()
EOF

bridge() {  # bridge EXPECTED_EXIT NAME ARGS...: python3 -m invar_bridge ARGS, exit code checked
    local want=$1 name=$2 command=$3
    shift 3
    "$py" -m invar_bridge "$command" --out "$work/$name" "$@" >"$work/$name.log" 2>&1
    local rc=$?
    [ "$rc" = "$want" ] || { tail -n 15 "$work/$name.log"; fail "$name: exit $rc, not $want"; }
}
rows() { grep -c "\"$2\"" "$work/$1/kernels.csv" 2>/dev/null; }  # rows NAME STATUS

bridge 0 rms kernels --op rmsnorm --fn np_kernels:rmsnorm
[ "$(rows rms ok)" -ge 4 ] || fail "rms: fewer than 4 ok rows"
bridge 1 split_claimed kernels --op rmsnorm --fn np_kernels:rmsnorm_split_small
grep -q 'must be stable' "$work/split_claimed.log" || fail "split_claimed: its variance was not held against its claim"
bridge 0 split_honest kernels --op rmsnorm --fn np_kernels:rmsnorm_split_small --not-invariant
[ "$(rows split_honest VARIES)" -ge 1 ] || fail "split_honest: never caught varying"
bridge 1 broken kernels --op gemm --quick --fn np_kernels:broken
grep -q '"ERROR",.*"plugin","gemm: RuntimeError: no kernel for this shape"' "$work/broken/kernels.csv" ||
    fail "broken: the exception is no ERROR row with its message"
bridge 2 missing kernels --op gemm --fn np_kernels:no_such_function
bridge 0 rows kernels --op gemm --fn np_kernels:matmul_rows
[ "$(rows rows ok)" -ge 5 ] || fail "rows: fewer than 5 ok rows (every gemm shape, strided and batched ones too)"
# The same function through the fp32 store (gemm_f32: the lm_head's logits, TP-size slices'
# partials), where a batched product's outputs are 4 bytes an element apart.
bridge 0 rows_f32 kernels --op gemm_f32 --fn np_kernels:matmul_rows
[ "$(rows rows_f32 ok)" -ge 5 ] && grep -q '"gemm_f32",.*x4 heads.*"ok"' "$work/rows_f32/kernels.csv" ||
    fail "rows_f32: not every gemm_f32 shape ok, the batched one included"
bridge 2 f32_run run --case cases/smoke.ini --op gemm_f32 --fn np_kernels:matmul
# numpy's matmul, judged as it is: either verdict, but a verdict for every shape.
"$py" -m invar_bridge kernels --op gemm --fn np_kernels:matmul --out "$work/matmul" >"$work/matmul.log" 2>&1
rc=$?
n=$(($(wc -l <"$work/matmul/kernels.csv") - 1))
{ [ "$rc" -le 1 ] && [ "$n" -ge 5 ]; } || fail "numpy matmul: exit $rc, $n rows"
echo "numpy matmul: exit $rc, $(grep -c '"ok"' "$work/matmul/kernels.csv") of $n shapes stable ($("$py" -c 'import numpy; print("numpy", numpy.__version__)'))"

# logprobs: a log_softmax, the token and top-k taken as ops.h defines them (the ties shape holds
# the top-k to the lower id first).
bridge 0 lsm kernels --op logprobs --fn np_kernels:log_softmax
[ "$(rows lsm ok)" -ge 3 ] || fail "log_softmax: fewer than 3 ok rows (the ties shape among them)"
grep -q '"logprobs","V=1003 k=8 ties","ok"' "$work/lsm/kernels.csv" || fail "log_softmax: the ties shape is not ok"
bridge 1 lsm_split kernels --op logprobs --quick --fn np_kernels:log_softmax_split_small
grep -q 'must be stable' "$work/lsm_split.log" || fail "lsm_split: its variance was not held against its claim"
bridge 0 lsm_honest kernels --op logprobs --quick --fn np_kernels:log_softmax_split_small --not-invariant
[ "$(rows lsm_honest VARIES)" -ge 1 ] || fail "lsm_honest: never caught varying"

# mha_prefill: attention called as scaled_dot_product_attention over a padded batch.
bridge 0 sdpa_rows kernels --op mha_prefill --fn np_kernels:sdpa_rows
[ "$(rows sdpa_rows ok)" -ge 1 ] || fail "sdpa_rows: no ok row"
# A base-2 log-sum-exp: right when declared (its attribute), inaccurate when read as natural.
bridge 0 sdpa_log2 kernels --op mha_prefill --fn np_kernels:sdpa_log2
bridge 1 sdpa_log2_as_e kernels --op mha_prefill --fn np_kernels:sdpa_log2 --lse-base e
# (1/ln 2 - 1 = 0.4427: the lse's relative error, the output's own far below it)
grep -q '"mha_prefill","H=4 c=8 len<=256","FAIL","stable","yes",.*"4.427e-01"' "$work/sdpa_log2_as_e/kernels.csv" ||
    fail "sdpa_log2 read as natural: not inaccurate by a factor of ln 2"
bridge 2 lse_base_not_mha kernels --op gemm --fn np_kernels:matmul --lse-base 2
# numpy's padded batch, judged as it is: a verdict, and an lse the bridge computed.
"$py" -m invar_bridge kernels --op mha_prefill --fn np_kernels:sdpa --out "$work/sdpa" >"$work/sdpa.log" 2>&1
rc=$?
grep -q '"mha_prefill","H=4 c=8 len<=256","\(ok\|VARIES\)"' "$work/sdpa/kernels.csv" && [ "$rc" -le 1 ] ||
    fail "numpy sdpa: exit $rc, no verdict row"
echo "numpy sdpa (padded batch): exit $rc, $(grep -o '"mha_prefill","H=4 c=8 len<=256","[A-Za-z]*"' "$work/sdpa/kernels.csv")"

# The engine with its RMSNorm from Python.
bridge 0 engine run --case cases/ci.ini --op rmsnorm --fn np_kernels:rmsnorm -- -q
grep -q '"plugin:python:rmsnorm=np_kernels:rmsnorm#1",.*"PASS"' "$work/engine/summary.csv" ||
    fail "engine: the Python RMSNorm config did not pass"
# The engine with its GEMM from Python: numpy's matmul judged as it is (the run completes and
# the report names the function as the GEMM's source), and a batch-variant GEMM must be caught
# (an engine that silently took the invariant set's GEMM would pass it).
"$py" -m invar_bridge run --case cases/smoke.ini --op gemm --fn np_kernels:matmul --out "$work/engine_mm" -- -q \
    >"$work/engine_mm.log" 2>&1
rc=$?
verdict=$(grep -o '"plugin:python:gemm=np_kernels:matmul#[0-9]*",.*"\(PASS\|FAIL\)"' "$work/engine_mm/summary.csv" | grep -o '"[A-Z]*"$')
{ [ "$rc" -le 1 ] && [ -n "$verdict" ]; } || { tail -n 5 "$work/engine_mm.log"; fail "engine numpy matmul: exit $rc, no row naming it"; }
echo "engine with numpy's matmul as GEMM (smoke): exit $rc, verdict $verdict"
bridge 0 engine_split run --case cases/smoke.ini --op gemm --fn np_kernels:matmul_split_small --not-invariant -- -q
grep -q '"plugin:python:gemm=np_kernels:matmul_split_small#[0-9]*",.*"batch-variant","batch-variant","PASS"' \
    "$work/engine_split/summary.csv" || fail "engine: the batch-variant Python GEMM was not caught"

# tests/gpu_third_party.sh: its usage, its SKIP without torch and a GPU, and its table written
# on the CPU by the same driver over numpy stand-ins (THIRD_PARTY_FAKE=numpy), one third-party
# source missing (a SKIP row and line naming the repository and where to put the file).
here_root=$(cd "$here/.." && pwd)
bash "$here_root/tests/gpu_third_party.sh" >/dev/null 2>&1
[ $? = 2 ] || fail "gpu_third_party.sh without OUT: not exit 2"
THIRD_PARTY_FAKE=cuda bash "$here_root/tests/gpu_third_party.sh" "$work/tp-bad" >/dev/null 2>&1
[ $? = 2 ] || fail "gpu_third_party.sh THIRD_PARTY_FAKE=cuda: not exit 2"
if ! "$py" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    out=$(PYTHON=$py bash "$here_root/tests/gpu_third_party.sh" "$work/tp-skip" 2>&1)
    [ $? = 0 ] && grep -q '^SKIP: the third-party kernel table needs a GPU host with torch' <<<"$out" ||
        fail "gpu_third_party.sh without torch and a GPU: no SKIP line: $out"
fi
"$py" "$here_root/tests/third_party/table.py" --out "$work/tp-cpu" --device cpu >/dev/null 2>&1
[ $? = 2 ] || fail "table.py --device cpu without --fake: not exit 2"
"$py" "$here_root/tests/third_party/table.py" --out "$work/tp-cpu" --device cpu --fake numpy --jobs 0 >/dev/null 2>&1
[ $? = 2 ] || fail "table.py --jobs 0: not exit 2"
mkdir -p "$work/no-third-party"
PYTHON=$py THIRD_PARTY_FAKE=numpy THIRD_PARTY_DIR="$work/no-third-party" RESULTS_DIR="$work/tp-results" \
    THIRD_PARTY_JOBS=3 THIRD_PARTY_ARGS=--quick INVAR_LIB="$INVAR_LIB" bash "$here_root/tests/gpu_third_party.sh" "$work/tp" \
    >"$work/tp.log" 2>&1
rc=$?
csv="$work/tp/third_party.csv"
# tp_row KIND KERNEL (the torch and triton columns hold their versions where they are installed)
tp_row() { grep "^\"[^\"]*\",\"cpu\",\"[^\"]*\",\"[^\"]*\",\"[^\"]*\",\"$1\",\"$2\"," "$csv"; }
if [ "$rc" != 0 ] || [ ! -s "$csv" ]; then
    tail -n 20 "$work/tp.log"
    fail "gpu_third_party.sh THIRD_PARTY_FAKE=numpy: exit $rc, no table"
else
    head -1 "$csv" | grep -q '^"date_utc","device","commit","torch","triton","kind","kernel","source","op","adapter","claims_invariant","verdict","first_vary_M","first_vary_row","first_vary_shape","largest_M","worst_rel_l2_err","tol","accurate","seconds","note"$' ||
        fail "third_party.csv: not the documented columns"
    # Every invariant row has the largest M tried, every batch-variant one the M and row that vary.
    awk -F'","' 'NR > 1 && $12 == "invariant" && $16 == "" { bad++ }
                 NR > 1 && $12 == "batch-variant" && ($13 == "" || $14 == "") { bad++ }
                 END { exit bad > 0 }' "$csv" || fail "third_party.csv: a verdict without its M"
    tp_row kernel numpy.matmul | grep -q '"gemm","[^"]*","no","\(invariant\|batch-variant\)",' ||
        fail "third_party.csv: numpy.matmul has no verdict"
    tp_row kernel numpy.log_softmax | grep -q '"logprobs",.*"yes","invariant",.*"[0-9]*","[0-9.e+-]*","1.0e-04","yes"' ||
        fail "third_party.csv: numpy.log_softmax not invariant and accurate"
    tp_row kernel numpy.sdpa | grep -q '"mha_prefill",.*"\(invariant\|batch-variant\)",' ||
        fail "third_party.csv: numpy.sdpa has no verdict"
    tp_row kernel numpy.broken | grep -q '"error",.*RuntimeError: no kernel for this shape' ||
        fail "third_party.csv: the raising kernel is no error row with its message"
    tp_row kernel tml.matmul_persistent | grep -qF "\"skip\",\"\",\"\",\"\",\"\",\"\",\"\",\"\",\"\",\"SKIP: https://github.com/thinking-machines-lab/batch_invariant_ops: batch_invariant_ops/batch_invariant_ops.py: put it at $work/no-third-party/batch_invariant_ops/batch_invariant_ops.py\"" ||
        fail "third_party.csv: the missing source is no skip row naming the repository and the place"
    grep -q '^SKIP: https://github.com/thinking-machines-lab/batch_invariant_ops' "$work/tp.log" ||
        fail "gpu_third_party.sh: the missing source printed no SKIP line"
    tp_row engine numpy.matmul_split_small | grep -q '"batch-variant",.*expected batch-variant, observed batch-variant, PASS' ||
        fail "third_party.csv: the engine's batch-variant GEMM was not caught"
    # THIRD_PARTY_JOBS=3 ran the children at once; the rows keep kernels.py's order, the engine rows last.
    order=$(awk -F'","' 'NR > 1 { printf "%s:%s ", $6, $7 }' "$csv")
    want=$(cd "$here_root/tests/third_party" && "$py" -c 'import kernels as K
print(" ".join(["kernel:" + e[0] for e in K.FAKE_KERNELS] + ["engine:" + e[0] for e in K.FAKE_ENGINE]) + " ")')
    [ "$order" = "$want" ] || fail "third_party.csv with --jobs 3: rows out of order: $order (want $want)"
    ls "$work/tp-results/"*-cpu-*.csv >/dev/null 2>&1 || fail "gpu_third_party.sh: no dated copy under RESULTS_DIR"
    echo "gpu_third_party.sh on the CPU (numpy stand-ins): $(($(wc -l <"$csv") - 1)) rows, usage and skips checked"
fi

[ "$fails" = 0 ] && echo "the Python bridge: ok"
[ "$fails" = 0 ]
