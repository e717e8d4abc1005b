#!/usr/bin/env bash
# tests/run_all.sh BUILD — what `make check` runs: every cmocka unit test binary, the kernel
# checker, the CI matrix, resuming a killed run, checkpoint directories as models and sharded
# runs merged; on a machine with a CUDA device also the CUDA kernel checks and the GPU matrix.
# Prints one closing line "N passed, N failed, N skipped in T s" (suites, not cases). Independent
# suites run CHECK_JOBS at a time (tests/suites.sh; default one per core): first everything that
# reads only the build, then, after a wait, the suites that read the reports of the first. In
# parallel each suite's closing line is printed as it ends; the whole outputs, in order, go to
# CHECK_LOG (default BUILD/check.log), and a failed suite's output is printed again at the end.
# Where nvcc is but BUILD is CPU-only, CHECK_CUDA_BUILD=DIR (set by `make check`) adds a suite
# that compiles the CUDA build in DIR.
set -u
BUILD=${1:-build}
REPORT="$BUILD/report"  # each report kind in its own directory: run/CASE, kernels/DEVICE
# cases/gpu.ini's shards and test_cuda_ops' on a GPU (below), checked before any suite starts.
gpu_shards=${GPU_SHARDS:-3}
cuda_ops_shards=${CUDA_OPS_SHARDS:-3}
for n in "GPU_SHARDS=$gpu_shards" "CUDA_OPS_SHARDS=$cuda_ops_shards"; do
    case ${n#*=} in
        '' | *[!0-9]* | 0*) echo "run_all.sh: $n is not a positive whole number" >&2; exit 2 ;;
    esac
done
# Cases run as 1 or 2 shards (case_suites, below): two where 4 or more suites run at once.
# cases/long-batch.ini, the longest engine suite (on a GPU host too), alone was the whole check's
# critical path on a 16-core GPU host; cases/ci.ini and cases/backends.ini, each about as long as
# a test_cuda_ops shard, ended that host's check once it split.
jobs=${CHECK_JOBS:-$(nproc 2>/dev/null || echo 2)}
two_if_parallel=$([ "$jobs" -ge 4 ] && echo 2 || echo 1)
long_batch_shards=${LONG_BATCH_SHARDS:-$two_if_parallel}
case_shards=${CASE_SHARDS:-$two_if_parallel}
for n in "LONG_BATCH_SHARDS=$long_batch_shards" "CASE_SHARDS=$case_shards"; do
    case ${n#*=} in 1 | 2) ;; *) echo "run_all.sh: $n: 1 or 2" >&2; exit 2 ;; esac
done
# shellcheck source=tests/suites.sh
. "$(dirname "$0")/suites.sh"

# A GPU that nvidia-smi lists but CUDA cannot use (a driver older than the runtime, a build
# without CUDA) counts as none: its suites are skipped with the reason, not passed on the SKIPs
# printed inside them.
gpu=0 no_gpu="no CUDA device (nvidia-smi lists no GPU)"
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
    why=$("$BUILD/invar" kernels --device cuda --set invariant --op residual_add --quick \
              --out "$REPORT/kernels/cuda-probe" 2>&1 |
          sed -n 's/^SKIP: cuda kernel checks: \(.*\) ([0-9]* checks skipped)$/\1/p')
    if [ -n "$why" ]; then
        no_gpu="nvidia-smi lists a GPU, but CUDA cannot use it: $why"
        echo "run_all.sh: $no_gpu; the GPU suites are skipped"
    else
        gpu=1
    fi
fi

# The suites start longest first (tests/suites.sh), by this build's last check, else by the
# record committed for this kind of host (results/check/).
SUITE_SECONDS="$BUILD/check-seconds.tsv"
SUITE_SECONDS_HINTS="$(dirname "$0")/../results/check/suite-seconds-$([ "$gpu" = 1 ] && echo gpu || echo cpu).tsv"

# Where nvcc is but the build checked is CPU-only (no GPU here), the CUDA build must still
# compile: one suite, started first since it is the longest by far (minutes of nvcc on a small
# machine; the suites below run beside it). `make check` names its directory in
# CHECK_CUDA_BUILD (empty: the build is CUDA already, or there is no nvcc; or the caller's
# CHECK_CUDA_BUILD= to save the minutes, which is said as a skip).
if [ -n "${CHECK_CUDA_BUILD:-}" ]; then
    # The parent make's jobserver is not passed down to this script: -j of its own.
    cuda_build() { MAKEFLAGS=$(sed 's/--jobserver-[a-z]*=[^ ]*//g; s/\(^\| \)-j[0-9]*//g' <<<"${MAKEFLAGS:-}") \
        make --no-print-directory -j"$(nproc 2>/dev/null || echo 2)" CUDA=1 BUILD="$CHECK_CUDA_BUILD" all tests; }
    suite "CUDA build compiles (make CUDA=1 BUILD=$CHECK_CUDA_BUILD all tests)" cuda_build
    suite_start_queued  # now, whatever the last check's record says: up to date there, not here
elif [ "$gpu" != 1 ] && ! grep -q -- '-DINVAR_CUDA' "$BUILD/cflags.stamp" 2>/dev/null &&
     { command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; }; then
    skip_suite "CUDA build compiles: not asked (CHECK_CUDA_BUILD is empty; make check sets it where nvcc is and the build is CPU-only)"
fi
# case_suites CASE SHARDS: cases/CASE.ini as one suite (report run/CASE), or as SHARDS suites side
# by side (--shard I/N, report run/CASE-shardI; merged below where a suite reads the report).
case_suites() {
    if [ "$2" = 1 ]; then
        suite "invar run --case cases/$1.ini" "$BUILD/invar" run --case "cases/$1.ini" --out "$REPORT/run/$1"
        return
    fi
    local i
    for i in $(seq 1 "$2"); do
        suite "invar run --case cases/$1.ini --shard $i/$2" "$BUILD/invar" run --case "cases/$1.ini" \
            --shard "$i/$2" --out "$REPORT/run/$1-shard$i"
    done
}
case_suites long-batch "$long_batch_shards"

if [ "$gpu" = 1 ]; then
    # test_cuda_ops, the longest unit suite on a GPU (141 s inside a parallel check on the H200),
    # as shards side by side: test i of the binary's list in shard i mod N + 1 (INVAR_TEST_SHARD).
    unit_and_replay_suites "$BUILD" test_cuda_ops
    for i in $(seq 1 "$cuda_ops_shards"); do
        suite "test_cuda_ops shard $i/$cuda_ops_shards" env INVAR_TEST_SHARD="$i/$cuda_ops_shards" \
            "$BUILD/tests/test_cuda_ops"
    done
else
    unit_and_replay_suites "$BUILD"
fi
suite "mutation patches still apply (tests/mutants/check_apply.sh)" bash tests/mutants/check_apply.sh
suite "the suite runner on toy suites (tests/test_suites.sh)" bash tests/test_suites.sh
# The include directions between the rooms, after its own negative control (planted wrong-way
# includes must be caught).
layering() { bash tests/layering.sh --self-test && bash tests/layering.sh; }
suite "include directions between the rooms (tests/layering.sh)" layering
# Comments say the rule and one reason; measurements live in results/ (issue 58's limits).
comment_share() {
    python3 tests/comment_share.py --max 30 --max-lines kernels/cuda/gemm_plan.cuh=300 kernels/cuda | tail -n 1
    test "${PIPESTATUS[0]}" = 0
}
suite "kernels/cuda at most 30% comment, gemm_plan.cuh at most 300 lines (tests/comment_share.py)" comment_share
# The warp-specialized kernels' register counts at launch (a wrong one hangs their setmaxnreg):
# ptxas alone, so wherever nvcc is, GPU or not.
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
    # A CUDA build's own ptxas reports (the Makefile's PTXAS_REPORTED), else a compile of its own.
    suite "ptxas register budgets (tests/ptxas_budgets.sh)" bash tests/ptxas_budgets.sh "$BUILD/ptxas" "$BUILD"
else
    skip_suite "ptxas register budgets: no nvcc (PATH or /usr/local/cuda/bin)"
fi

suite "invar kernels --device cpu" "$BUILD/invar" kernels --device cpu --out "$REPORT/kernels/cpu"
if [ "$gpu" = 1 ]; then
    suite "CUDA plugins: the call's stream vs the default stream (tests/test_plugin_cuda.sh)" \
        bash tests/test_plugin_cuda.sh "$BUILD"
else
    skip_suite "CUDA plugins (tests/test_plugin_cuda.sh): $no_gpu"
fi
if [ "$gpu" = 1 ]; then
    # One suite per op (each its own kernels.csv): they run side by side, and each says its time.
    # An earlier check's directories would count in the coverage read from them below.
    rm -rf "$REPORT/kernels/cuda"
    # The three longest (over 75 s whole on an H200 beside the others) run one suite per set.
    for op in $("$BUILD/invar" kernels --help | sed -n 's/^ops: //p'); do
        case $op in
            mla_attention | gemm | gemm_f32)
                for set in invariant reference adversarial; do  # every set `invar kernels --set` names
                    suite "invar kernels --device cuda --op $op --set $set" "$BUILD/invar" kernels --device cuda \
                        --op "$op" --set "$set" --out "$REPORT/kernels/cuda/$op/$set"
                done ;;
            *)
                suite "invar kernels --device cuda --op $op" "$BUILD/invar" kernels --device cuda --op "$op" \
                    --out "$REPORT/kernels/cuda/$op" ;;
        esac
    done
else
    skip_suite "invar kernels --device cuda: $no_gpu"
fi

# small-model: the adversarial set is the negative control where the reference set can be
# order-free (its CUDA configs run only on a GPU); sampled: temperature > 0, per-request seeds;
# tp: tensor parallelism at T = 2, 3, 4, 8 on the CPU (about 12 s on 2 cores); configs: KV
# blocks of 64, 7 and 1; eviction: a KV cache smaller than the run, and a control only bs=1
# catches; reach and long: past the size thresholds ci.ini's tiny model and short prompts stay
# under; long-context: a context past 4,096 keys beside a shorter one; long-batch: 129 long contexts decoding together; tp-size: TP = 2, 4, 8 bitwise equal
# to TP = 1; graphs: decode steps padded to CUDA graph buckets and replayed from recorded calls;
# warm-copies: a control only the warm copies of prompt 0 catch (cases/README.md says what each
# costs).
sharded_cases="ci backends"  # CASE_SHARDS's cases, merged below
for c in ci reach long long-context backends sampled small-model tp tp-size configs eviction graphs warm-copies; do  # long-batch: above
    if [[ " $sharded_cases " == *" $c "* ]]; then case_suites "$c" "$case_shards"; else case_suites "$c" 1; fi
done
# invar run end to end: a run killed with SIGKILL resumes to the same report; checkpoint
# directories as models give what the named configs give.
suite "invar run --resume after SIGKILL (tests/test_resume.sh)" bash tests/test_resume.sh "$BUILD"
suite "checkpoint directories as models (tests/test_model_dir.sh)" bash tests/test_model_dir.sh "$BUILD"
suite "bad and awkward command lines (tests/test_cli.sh)" bash tests/test_cli.sh "$BUILD"
suite "3 shards merged equal one run (tests/test_shard.sh)" bash tests/test_shard.sh "$BUILD"
suite "first differing op, --only and --request (tests/test_triage.sh)" bash tests/test_triage.sh "$BUILD"
suite "plugin kernel sets end to end and refused (tests/test_plugin.sh)" bash tests/test_plugin.sh "$BUILD"
suite "kernels/README.md's example as written (tests/doc_example.sh)" bash tests/doc_example.sh "$BUILD"
suite "bench results as data (tests/test_bench_results.sh)" bash tests/test_bench_results.sh "$BUILD"
suite "mutation ledger (tests/test_mutant_ledger.sh)" bash tests/test_mutant_ledger.sh
if bash tests/numpy_python.sh >/dev/null; then
    suite "the Python bridge over numpy (tests/test_bridge.sh)" bash tests/test_bridge.sh "$BUILD"
else
    skip_suite "the Python bridge: no python3 with numpy (Debian: python3-numpy)"
fi
# invar serve + invar probe on 127.0.0.1: invariant passes, reference/adversarial caught, steps
# shared, OpenAI errors, a misbehaving server, nothing listening (about 22 s on 2 cores).
suite "invar serve + invar probe (tests/test_serve.sh)" bash tests/test_serve.sh "$BUILD"
suite "invar probe vs hostile servers (tests/test_probe.sh)" bash tests/test_probe.sh "$BUILD"
suite "invar serve under load (tests/test_serve_load.sh)" bash tests/test_serve_load.sh "$BUILD"

# cases/gpu.ini, the longest suite whole (about 120 s on an H200 beside the others), runs as
# gpu_shards shards side by side (GPU_SHARDS, checked at the top), merged into one report below.
for c in gpu gpu-tp gpu-tp-size gpu-graphs; do  # gpu-tp(-size): T = 2 needs two GPUs, SKIP (visibly, per config) with one
    if [ "$gpu" != 1 ]; then
        skip_suite "invar run --case cases/$c.ini: $no_gpu"
    elif [ "$c" = gpu ]; then
        for i in $(seq 1 $gpu_shards); do
            suite "invar run --case cases/gpu.ini --shard $i/$gpu_shards" "$BUILD/invar" run --case cases/gpu.ini \
                --shard "$i/$gpu_shards" --out "$REPORT/run/gpu-shard$i"
        done
    else
        suite "invar run --case cases/$c.ini" "$BUILD/invar" run --case "cases/$c.ini" --out "$REPORT/run/$c"
    fi
done

# --- what reads the reports above ---------------------------------------------------------------
suite_wait
if [ "$case_shards" = 2 ]; then
    for c in $sharded_cases; do
        suite "cases/$c.ini's 2 shards merged (invar report merge)" "$BUILD/invar" report merge \
            "$REPORT/run/$c" "$REPORT/run/$c-shard1" "$REPORT/run/$c-shard2"
    done
    suite_wait  # ci's expectations below read its merged report
fi

# What make check expects of some cases' reports beyond their exit codes (notes, controls caught
# in one place only, ci's report rendered and its junit.xml checked; tests/case_expectations.sh,
# which the mutation ladder runs too).
for c in $(bash tests/case_expectations.sh --cases); do
    suite "cases/$c.ini's report as expected (tests/case_expectations.sh)" bash tests/case_expectations.sh \
        "$c" "$REPORT/run/$c" "$BUILD"
done
xmllint --version >/dev/null 2>&1 || skip_suite "junit.xml validation: xmllint not available (Debian: libxml2-utils)"
suite "cases/warm-copies.ini: the warm copies differ by rounding only (tests/test_warm_copies.sh)" \
    bash tests/test_warm_copies.sh "$BUILD"
if [ "$gpu" = 1 ]; then
    suite "cases/gpu.ini's $gpu_shards shards merged (invar report merge)" "$BUILD/invar" report merge \
        "$REPORT/run/gpu" $(for i in $(seq 1 $gpu_shards); do echo "$REPORT/run/gpu-shard$i"; done)
    # The per-op CUDA kernel suites above judge no coverage alone (each a partial run); together
    # every path the invariant CUDA set declares must be reached, or excused by this host (an
    # architecture's or a GPU count's).
    suite "CUDA path coverage over the per-op kernel suites (invar report coverage)" "$BUILD/invar" report coverage \
        $(find "$REPORT/kernels/cuda" -name coverage.csv -exec dirname {} \; | sort)
fi
print_failures
suite_record "$SUITE_SECONDS"
# The suites' wall time, side by side (the build before them not counted): issue 17's figure.
echo "check: $passed passed, $failed failed, $skipped skipped in $SECONDS s"
[ "$failed" = 0 ]
