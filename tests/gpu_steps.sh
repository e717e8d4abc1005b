# tests/gpu_steps.sh — sourced by the one-call GPU scripts (gpu_gemm_check.sh, gpu_mla_check.sh,
# gpu_tp_check.sh): the Debian libraries unpacked for the build, and steps that each log to
# OUT/NAME.log and record a verdict and a time for the closing summary.
#   out       the output directory (absolute; open_out sets it)
#   budget    seconds all steps may take together (0: no budget); a step that would start with
#             less than 20 s left is skipped and says so
# build_or_exit runs the build as the first step.
# Sets: status (one summary line per step), overall (1 once a step failed, timed out or was
# skipped), awk_median (an awk function the summaries prepend to their programs); tree_commit
# names the tree a summary was measured on.
status=()
overall=0
# An awk function for the summaries: median(LIST), LIST numbers separated by spaces.
# shellcheck disable=SC2016,SC2034  # used by the scripts that source this one
awk_median='
        function median(list,   n, a, i, j, t) {
            n = split(list, a, " ")
            for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
            return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
        }'

budget=${budget:-0}

open_out() {  # open_out DIR: creates it; sets out (its absolute path) and deps (DEPS_PREFIX, or /tmp/deps)
    mkdir -p "$1" || exit 2
    out=$(cd "$1" && pwd)
    deps=${DEPS_PREFIX:-/tmp/deps}
}

tree_commit() {  # tree_commit: HEAD's short hash, "-dirty" when tracked files differ from it (as run_meta.c says it)
    local head
    head=$(git rev-parse --short HEAD 2>/dev/null) || { echo unknown; return; }
    [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null | head -1)" ] && head="$head-dirty"
    echo "$head"
}

gpu_info() {  # gpu_info: the GPU, its driver and clocks into $out/gpu.txt (its first line heads a summary)
    { nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv; } >"$out/gpu.txt" 2>&1
}

unpack_deps() {  # unpack_deps DIR: .deps/*.deb into DIR unless it holds them already
    if [ ! -f "$1/usr/include/cmocka.h" ] && ls .deps/*.deb >/dev/null 2>&1; then
        mkdir -p "$1" && for f in .deps/*.deb; do dpkg -x "$f" "$1" || exit 2; done
    fi
}

build_or_exit() {  # build_or_exit SCRIPT LIMIT_S: the CUDA build with $deps (unpacked first) as a step; exits 1 when it fails
    unpack_deps "$deps"
    step build "$2" make DEPS_PREFIX="$deps" CUDA=1 -j"$(nproc 2>/dev/null || echo 16)" all tests
    if [ "$overall" != 0 ]; then
        echo "$1: the build failed; see $out/build.log"
        exit 1
    fi
}

step() {  # step NAME TIMEOUT_S COMMAND...: runs it into $out/NAME.log, records the verdict
    local name=$1 limit=$2 start=$SECONDS rc left
    shift 2
    if [ "$budget" -gt 0 ]; then
        left=$((budget - SECONDS))
        if [ "$left" -lt 20 ]; then
            status+=("$(printf '%-22s %-26s' "$name" "SKIPPED (budget spent)")")
            overall=1
            return
        fi
        [ "$limit" -gt "$left" ] && limit=$left
    fi
    echo "=== $name (log: $out/$name.log, limit ${limit} s)"
    timeout "$limit" "$@" >"$out/$name.log" 2>&1
    rc=$?
    tail -n 3 "$out/$name.log"
    local verdict=ok
    if [ "$rc" = 124 ]; then verdict="TIMED OUT after ${limit} s"; overall=1
    elif [ "$rc" != 0 ]; then verdict="FAILED (exit $rc)"; overall=1; fi
    status+=("$(printf '%-22s %-26s %4d s' "$name" "$verdict" $((SECONDS - start)))")
}
