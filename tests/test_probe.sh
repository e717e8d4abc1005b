#!/usr/bin/env bash
# tests/test_probe.sh BUILD — invar probe against hostile servers (tests/servers/bad_server.py's
# one-way modes, and invar serve itself), on 127.0.0.1 only. Each check is a verdict probe must
# not get wrong:
#   - INCONCLUSIVE (exit 4), never PASS: answers shorter than asked, one answer for every
#     prompt, a server that serves one request at a time (invar serve --max-num-seqs 1 with the
#     reference set, seen through its /metrics; vLLM's running-requests gauge, sampled; a server
#     without metrics, seen through timings);
#   - ERROR (exit 2), never FAIL or PASS: NaN or Infinity logprobs, numbers sent as strings or
#     hex floats, trailing JSON, answers far longer than asked (memory stays bounded), a server
#     that never answers (probe stops after two timeouts instead of waiting out every request);
#   - exit 2 naming the problem: a 100 MB model list, a vocab_size that is no size;
#   - a server's error text reaches the console and summary.md printable only;
#   - FAIL (exit 1) for answers whose length changes with the batch, printed as lengths, and
#     observed batch-variant with the batch sizes listed largest first;
#   - PASS (exit 0) for a server without metrics that does serve requests together.
set -u
BUILD=${1:-build}
# shellcheck source=tests/servers/fixture.sh
. "$(dirname "$0")/servers/fixture.sh"  # fixture_start, pids, wait_port_file, fail
fixture_start probe-hostile

start_bad() {  # start_bad MODE [--gauge]: tests/servers/bad_server.py in MODE; sets PORT
    local file="$OUT/port-$1${2:-}"
    rm -f "$file"
    python3 tests/servers/bad_server.py --port-file "$file" --mode "$@" &
    pids+=($!)
    PORT=$(wait_port_file "$file" $!) || fail "bad_server.py --mode $* did not start"
}

# probe_expect MODE EXIT TEXT [ARGS...]: probe the server on PORT with cases/probe-faults.ini;
# the exit code must be EXIT and the console must say TEXT (a grep -E pattern).
probe_expect() {
    local mode=$1 want=$2 text=$3 rc
    shift 3
    "$INVAR" probe --url "http://127.0.0.1:$PORT" --case cases/probe-faults.ini \
        --out "$OUT/$mode" "$@" >"$OUT/$mode.log" 2>&1
    rc=$?
    [ "$rc" = "$want" ] && grep -q -E "$text" "$OUT/$mode.log" || {
        cat "$OUT/$mode.log"
        fail "probe vs $mode: exit $rc and no '$text'; expected exit $want"
    }
    echo "ok: $mode: exit $rc, $(grep -m1 -o -E "$text" "$OUT/$mode.log")"
}

# 1. INCONCLUSIVE: nothing differs and nothing fails, yet nothing was shown.
start_bad short
probe_expect short 4 "INCONCLUSIVE: 18 answers held fewer tokens than the 3 asked"
grep -q '"inconclusive","SKIP"' "$OUT/short/summary.csv" || fail "short: summary row not inconclusive/SKIP"
grep -q '<skipped' "$OUT/short/junit.xml" || fail "short: JUnit does not mark the row skipped"
start_bad canned
probe_expect canned 4 "one answer to all 6 different prompts"
start_bad serial
probe_expect serial 4 "INCONCLUSIVE: the batched runs were never served together: at most"
start_bad parallel
# at most the 6 in flight, though the server is slower alone (it waits for company)
probe_expect parallel 0 "served together: ([1-5]\\.[0-9]+|6\\.00) requests at once at bs=6 \\(from timings\\)"
# The same two servers with vLLM's running-requests gauge at /metrics: probe samples it.
start_bad serial --gauge
probe_expect serial-gauge 4 "running-requests gauge at /metrics never showed more than 1"
start_bad parallel --gauge
probe_expect parallel-gauge 0 "served together: up to [2-6] requests running at once"

# 2. ERROR: answers that are no answers; exit 2, each reason in requests.csv.
for m in "nan:is NaN" "infinity:is Infinity" "strings:token_logprobs\\[0\\] is not a number" \
         "hex:token_logprobs\\[0\\] is not a number" "trailing:bytes follow the answer"; do
    start_bad "${m%%:*}"
    probe_expect "${m%%:*}" 2 "^ERROR server/arrivals=at_once"
    grep -q -E "${m#*:}" "$OUT/${m%%:*}/requests.csv" || fail "${m%%:*}: requests.csv names no '${m#*:}'"
done

# Answers of 100 MB: refused as they arrive, so the probe's memory stays near that of a run on
# small answers (the same binary: a CUDA build maps its libraries, hundreds of MB, either way).
probe_rss() {  # probe_rss MODE: "EXIT PEAK_RSS_KB" of a probe against the server on PORT
    python3 - "$INVAR" "$PORT" "$OUT" "$1" <<'PY'
import resource, subprocess, sys
invar, port, out, mode = sys.argv[1:5]
with open(f"{out}/{mode}.log", "w") as log:
    rc = subprocess.call([invar, "probe", "--url", f"http://127.0.0.1:{port}", "--case",
                          "cases/probe-faults.ini", "--out", f"{out}/{mode}"], stdout=log,
                         stderr=subprocess.STDOUT)
print(rc, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
PY
}
start_bad canned
set -- $(probe_rss canned-rss)
small_kb=$2
start_bad huge
set -- $(probe_rss huge)
[ "$1" = 2 ] || { cat "$OUT/huge.log"; fail "huge answers: exit $1, expected 2 (ERROR)"; }
grep -q "answer longer than" "$OUT/huge/requests.csv" || fail "huge: requests.csv says nothing of the length"
[ "$2" -lt $((small_kb + 16384)) ] ||
    fail "huge answers: the probe peaked at $2 KB RSS, $small_kb KB on small answers: expected under 16 MB more (each answer is capped near 72 KB)"
echo "ok: huge: exit 2, answers refused past their expected size, peak RSS $2 KB ($small_kb KB on small answers)"

# A server that never answers: two timeouts, then nothing more is sent.
start_bad never
t0=$(date +%s)
probe_expect never 2 "answered none of the bs=1 requests" --timeout 1
t1=$(date +%s)
grep -q "not sent: the probe stopped sending" "$OUT/never/requests.csv" ||
    fail "never: requests.csv has no unsent request"
! grep -q ',"bs=6",' "$OUT/never/requests.csv" || fail "never: a batch was sent after the server answered nothing"
echo "ok: never: stopped after two timeouts in $((t1 - t0)) s"

# 3. A server's error text with terminal escapes: printable only, in the console and summary.md.
start_bad escape
probe_expect escape 2 "HTTP 400: \\?\\[2J\\?\\[31mred alert"
! grep -q $'\x1b' "$OUT/escape.log" "$OUT/escape/summary.md" "$OUT/escape/requests.csv" ||
    fail "escape: a raw escape byte reached the console or the reports"

# 4. The model list: too long, or a vocabulary size that is none.
start_bad bigmodels
probe_expect bigmodels 2 "the answer is longer than [0-9]+ bytes: not an OpenAI model list"
start_bad vocab-neg
probe_expect vocab-neg 2 "vocab_size of bad is -5, not a vocabulary size"
start_bad vocab-huge
probe_expect vocab-huge 2 "vocab_size of bad is 2000000000, not a vocabulary size"

# 5. A length that changes with the batch: FAIL, printed as token counts, not ulps.
start_bad lengthvary
probe_expect lengthvary 1 "first: batch 6 request [0-9]+: 2 tokens vs 3 at bs=1"
# The same server with the batch sizes listed largest first (6, then 1): the repeat runs at the
# largest and is compared with that size's run wherever the list puts it, so the answer is
# batch-variant, not nondeterministic (a repeat held against bs=1's run would differ).
sed 's/^batch_sizes = 6$/batch_sizes = 6, 1/' cases/probe-faults.ini >"$OUT/descending.ini"
"$INVAR" probe --url "http://127.0.0.1:$PORT" --case "$OUT/descending.ini" --out "$OUT/descending" \
    >"$OUT/descending.log" 2>&1
rc=$?
[ "$rc" = 1 ] && grep -q '"batch-variant","FAIL"' "$OUT/descending/summary.csv" || {
    cat "$OUT/descending.log"
    fail "lengthvary with batch_sizes = 6, 1: exit $rc, not a FAIL observed batch-variant"
}

# 6. invar serve with the reference set that never batches: INCONCLUSIVE, not a vacuous PASS.
rm -f "$OUT/port-serial-serve"
"$INVAR" serve --model tiny --kernel-set reference --port 0 --port-file "$OUT/port-serial-serve" \
    --threads 2 --max-num-seqs 1 --seed 5 >"$OUT/serve-serial.log" 2>&1 &
pids+=($!)
PORT=$(wait_port_file "$OUT/port-serial-serve" $!) || { cat "$OUT/serve-serial.log"; fail "invar serve did not start"; }
"$INVAR" probe --url "http://127.0.0.1:$PORT" --case cases/serve.ini --step-ms 10 \
    --out "$OUT/serve-serial" >"$OUT/serve-serial-probe.log" 2>&1
rc=$?
cat "$OUT/serve-serial-probe.log"
[ "$rc" = 4 ] || fail "probe vs serve --max-num-seqs 1 --kernel-set reference: exit $rc, expected 4"
grep -q "counted no step with two requests or more" "$OUT/serve-serial-probe.log" ||
    fail "serve --max-num-seqs 1: the note does not say the batches were never served together"
echo "probe vs hostile servers: all checks held"
