#!/usr/bin/env bash
# tests/test_serve.sh BUILD — invar serve and invar probe end to end, on 127.0.0.1 only:
#   - probe against `serve --kernel-set invariant` passes (cases/serve.ini: chunked prefill,
#     prefix-cache hits across requests, sampling, two arrival patterns); against the reference
#     and adversarial sets it fails; with --cuda-graphs the same (decode steps replayed);
#   - concurrent requests share steps: serve's /metrics must show a step that ran the whole
#     batch of 4 (a batching window holds the first request for the others);
#   - bad requests get OpenAI-style errors (status and {"error": {...}} body);
#   - a misbehaving server (tests/servers/bad_server.py: HTTP 500, garbage, truncated JSON, a
#     slow reply, a dropped connection) gives a reason per request in requests.csv and an ERROR
#     (exit 2; tests/test_probe.sh holds the other hostile servers);
#   - probe against a port nothing listens on, or one that answers garbage, exits 2 with a
#     clear message;
#   - `invar report diff` reads probe's reports.
# Every server runs on a port the kernel picks (--port 0 / port files) and is killed on exit.
set -u
BUILD=${1:-build}
# shellcheck source=tests/servers/fixture.sh
. "$(dirname "$0")/servers/fixture.sh"  # fixture_start, pids, wait_port_file, fail
fixture_start serve

start_serve() {  # start_serve SET [ARG...]: starts invar serve on a free port, sets PORT and SERVE_PID
    local set=$1
    shift
    rm -f "$OUT/port-$set"
    "$INVAR" serve --model tiny --kernel-set "$set" --port 0 --port-file "$OUT/port-$set" \
        --threads 2 --max-num-batched-tokens 48 --batch-window-ms 40 --seed 5 "$@" \
        >"$OUT/serve-$set.log" 2>&1 &
    SERVE_PID=$!
    pids+=("$SERVE_PID")
    PORT=$(wait_port_file "$OUT/port-$set" "$SERVE_PID") ||
        { cat "$OUT/serve-$set.log"; fail "invar serve --kernel-set $set did not start"; }
}

http() {  # http METHOD PATH [BODY]: prints "STATUS BODY" (python3's urllib: no curl needed)
    python3 - "$PORT" "$@" <<'PY'
import sys, urllib.request, urllib.error
port, method, path = sys.argv[1:4]
data = sys.argv[4].encode() if len(sys.argv) > 4 else None
req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method,
                             headers={"Content-Type": "application/json"})
try:
    with urllib.request.urlopen(req, timeout=30) as r:
        print(r.status, r.read().decode())
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode())
PY
}

# 1. The invariant set passes; its steps really held the whole batch.
start_serve invariant
"$INVAR" probe --url "http://127.0.0.1:$PORT" --case cases/serve.ini --step-ms 10 \
    --out "$OUT/invariant" >"$OUT/probe-invariant.log" 2>&1
rc=$?
cat "$OUT/probe-invariant.log"
[ "$rc" = 0 ] || fail "probe vs serve --kernel-set invariant: exit $rc, expected 0"
[ "$(grep -c '"PASS"' "$OUT/invariant/summary.csv")" = 2 ] || fail "invariant: not 2 PASS rows"
metrics=$(http GET /metrics)
echo "$metrics" | grep -E 'batch_size|steps_total|prefix_cache_hits'
max=$(echo "$metrics" | sed -n 's/^invar_step_batch_size_max //p')
[ "$max" = 4 ] || fail "invariant: the largest step ran $max requests, expected the batch of 4"
hits=$(echo "$metrics" | sed -n 's/^invar_prefix_cache_hits_total //p')
[ "${hits:-0}" -gt 0 ] || fail "invariant: no prefix-cache hit across requests"
echo "serve ran steps of up to $max requests, $hits prefix-cache hits across requests"

# 2. OpenAI-style errors for bad requests.
check_error() {  # check_error WANT_STATUS BODY: the status and an error body naming the problem
    local got
    got=$(http POST /v1/completions "$2")
    case "$got" in
        "$1 {\"error\":{\"message\":"*) echo "ok: $1 for $2" ;;
        *) fail "request $2: expected HTTP $1 and an error body, got: $got" ;;
    esac
}
check_error 400 '{"prompt": "text"}'
check_error 400 '{"prompt": [1, 2, 99999]}'
check_error 400 '{"prompt": [1, 2], "max_tokens": 0}'
check_error 400 '{"prompt": [1, 2], "logprobs": 21}'
check_error 400 '{"prompt": [1, 2], "n": 2}'
check_error 400 'not json'
check_error 404 '{"prompt": [1, 2], "model": "gpt-nothing"}'
got=$(http GET /nowhere); case "$got" in "404 "*) ;; *) fail "GET /nowhere: $got" ;; esac
# Options that change the output are refused, never ignored; one JSON object only.
check_error 400 '{"prompt": [1, 2], "stop": ["x"]}'
check_error 400 '{"prompt": [1, 2], "logit_bias": {"3": 5}}'
check_error 400 '{"prompt": [1, 2]} {"prompt": [3]}'
# Each route answers its own method: 405 otherwise, never served as GET.
status_of() { http "$@" | cut -d' ' -f1; }
for m in DELETE PATCH PUT; do
    [ "$(status_of "$m" /v1/models)" = 405 ] || fail "$m /v1/models: not 405"
done
[ "$(status_of POST /v1/models '{}')" = 405 ] || fail "POST /v1/models: not 405"
got=$(http GET /v1/models/tiny)
case "$got" in "200 {\"id\":\"tiny\","*) ;; *) fail "GET /v1/models/tiny: $got" ;; esac
[ "$(status_of GET /v1/models/other)" = 404 ] || fail "GET /v1/models/other: not 404"
# max_completion_tokens is honoured, and each response has its own time.
before=$(date +%s)
sleep 1
got=$(http POST /v1/completions '{"prompt": [1, 2], "max_completion_tokens": 1, "logprobs": 1}')
python3 - "$before" "${got#* }" <<'PY' || fail "max_completion_tokens / created: $got"
import json, sys
before, body = int(sys.argv[1]), json.loads(sys.argv[2])
assert body["usage"]["completion_tokens"] == 1, body["usage"]
assert body["created"] > before, (body["created"], before)
PY
echo "ok: output-changing options refused, 405s, /v1/models/tiny, max_completion_tokens, created"
# A list of prompts (as vLLM's own batch-invariance test sends its batch): one choice per
# prompt, each with the bits of that prompt sent alone, greedy and sampled (the request's seed is
# every prompt's, as if each came alone with it: a place in the list must not change the noise).
python3 - "$PORT" <<'PY' || fail "a list of prompts: not the bits of each prompt alone"
import http.client, json, sys
port = int(sys.argv[1])
def post(body):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    text = r.read().decode()
    assert r.status == 200, text
    return json.loads(text, parse_float=str)["choices"]
prompts = [[5, 9, 100, 7], [300, 2], [44, 45, 46, 47, 48, 49]]
for opts in ({"max_tokens": 5, "logprobs": 3, "temperature": 0},
             {"max_tokens": 5, "logprobs": 3, "temperature": 0.9, "seed": 77}):
    together = post(dict(opts, prompt=prompts))
    assert [ch["index"] for ch in together] == [0, 1, 2], together
    for i, p in enumerate(prompts):
        alone = post(dict(opts, prompt=p))[0]
        assert alone["logprobs"] == together[i]["logprobs"], (opts, i, alone, together[i])
PY
echo "ok: a list of 3 prompts answered as 3 choices, each bitwise equal to its prompt alone, greedy and sampled"
# GET keeps the connection: two pipelined requests get two answers.
python3 - "$PORT" <<'PY' || fail "pipelined GETs: not two answers on one connection"
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5)
s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\nGET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
data, t0 = b"", time.monotonic()
while data.count(b"HTTP/1.1 200") < 2 and time.monotonic() - t0 < 5:
    chunk = s.recv(65536)
    if not chunk:
        break
    data += chunk
sys.exit(0 if data.count(b"HTTP/1.1 200") == 2 else 1)
PY
echo "ok: two pipelined GETs answered on one connection"
# Two Content-Length headers that disagree: 400 with an error body, never a guess; as a
# connection's first request (the gate reads it) and as a later one (the server's handler).
python3 - "$PORT" <<'PY' || fail "conflicting Content-Length headers: not refused with 400"
import socket, sys
body = b'{"prompt":[1,2],"max_tokens":1}'
bad = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
       b"Content-Length: %d\r\nContent-Length: 5\r\n\r\n" % len(body) + body)
for first in [b"", b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"]:
    s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5)
    s.sendall(first + bad)
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    if first:
        if not data.startswith(b"HTTP/1.1 200"):
            sys.exit(1)
        data = data[data.index(b"HTTP/1.1", 1):]
    if not (data.startswith(b"HTTP/1.1 400") and b'"error"' in data):
        print(f"first request {first!r}: {data[:200]!r}")
        sys.exit(1)
PY
echo "ok: conflicting Content-Length headers refused"
# Requests the HTTP layer itself refuses (a malformed head, one too large, an HTTP version
# other than 1.x, a body framed other than by Content-Length): each answered with its status
# and an OpenAI error body in JSON, never the HTTP library's HTML or a silent close.
python3 - "$PORT" <<'PY' || fail "the gate: a refused head not answered in JSON, or a good one not served (lines above)"
import json, socket, sys, time
port = int(sys.argv[1])
def raw(head):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(head)
    data = b""
    while True:
        try:
            chunk = s.recv(65536)
        except (ConnectionResetError, TimeoutError):
            break
        if not chunk:
            break
        data += chunk
    s.close()
    return data
cases = [
    (b"GET /health HTTP/1.1\r\nHost: x\r\nno colon in this line\r\n\r\n", 400),
    (b"GET /health HTTP/1.1\r\nHost: x\r\nBad Name: value\r\n\r\n", 400),
    (b"GET /health HTTP/x.y\r\nHost: x\r\n\r\n", 400),
    (b"GARBAGE\r\n\r\n", 400),
    (b"GET /health\r\n\r\n", 400),
    (b"GET /health HTTP/3.0\r\nHost: x\r\n\r\n", 505),
    (b"GET /health HTTP/0.9\r\nHost: x\r\n\r\n", 505),
    (b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 40000 + b"\r\n\r\n", 431),
    (b"GET /" + b"a" * 40000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414),
    (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 12x\r\n\r\n{}", 400),
    (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999999\r\n\r\n", 413),
    (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", 411),
    (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2 \r\n\r\n{}", 400),
    (b"GET /health HTTP/1.1\r\n" + b"".join(b"X-%d: v\r\n" % i for i in range(600)) + b"\r\n", 431),
    (b"GET /health HTTP/1.1\r\nCookie: " + b"a=1;" * 600 + b"\r\n\r\n", 431),
    (b"GET /health?" + b"a&" * 600 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 431),
]
bad = []
for head, want in cases:
    data = raw(head)
    top, _, body = data.partition(b"\r\n\r\n")
    lines = top.split(b"\r\n")
    ok = lines[0].startswith(b"HTTP/1.1 %d " % want)
    ok = ok and any(l.lower() == b"content-type: application/json" for l in lines[1:])
    try:
        ok = ok and isinstance(json.loads(body)["error"]["message"], str)
    except (ValueError, KeyError, TypeError):
        ok = False
    if not ok:
        bad.append(f"{head[:60]!r}...: expected {want} with a JSON error, got {data[:160]!r}")
# What must still pass: a head just under the limit, one ended by bare LFs, one sent in pieces.
def pieces(*parts):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    for part in parts:
        s.sendall(part)
        time.sleep(0.2)
    data = s.recv(65536)
    s.close()
    return data
for name, data in [
        ("a 15,000-byte header", raw(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                                     b"X-Big: " + b"a" * 15000 + b"\r\n\r\n")),
        ("bare LF line ends", raw(b"GET /health HTTP/1.1\nHost: x\nConnection: close\n\n")),
        ("500 header fields", raw(b"GET /health HTTP/1.1\r\nConnection: close\r\n" +
                                  b"".join(b"X-%d: v\r\n" % i for i in range(498)) + b"\r\n")),
        ("a cookie of 400 pairs and 100 query arguments",
         raw(b"GET /health?" + b"a=1&" * 100 + b" HTTP/1.1\r\nConnection: close\r\nCookie: " +
             b"c=1; " * 400 + b"\r\n\r\n")),
        ("a head in three pieces", pieces(b"GET /hea", b"lth HTTP/1.1\r\nHost: x\r\n", b"\r\n"))]:
    if not data.startswith(b"HTTP/1.1 200 "):
        bad.append(f"{name}: expected 200, got {data[:160]!r}")
# After the gate hands a connection on, the HTTP library reads it as any other: a short
# request after a long one that came in pieces on the same connection, a body sent after its
# head, each answered at once (not at the idle timeout).
def answer(s):
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = [int(l.split(b":")[1]) for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:")]
    while length and len(body) < length[0]:
        chunk = s.recv(65536)
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body
s = socket.create_connection(("127.0.0.1", port), timeout=3)
try:
    s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"p" * 3000 + b"\r\n")
    time.sleep(0.2)  # the head in two pieces: the gate waited for the rest
    s.sendall(b"\r\n")
    first = answer(s)
    s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    second = answer(s)
    if not (first.startswith(b"HTTP/1.1 200 ") and second.startswith(b"HTTP/1.1 200 ")):
        bad.append(f"a short request after a long one on one connection: {first[:60]!r} then {second[:60]!r}")
except TimeoutError:
    bad.append("a short request after a long one on one connection: no answer in 3 s")
s.close()
# A client that shuts its side with the head unfinished is closed at once (nothing more can come).
s = socket.create_connection(("127.0.0.1", port), timeout=3)
s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
s.shutdown(socket.SHUT_WR)
t0 = time.monotonic()
try:
    closed = s.recv(100) == b""
except ConnectionResetError:  # closed with the unread head in it: a reset, also closed
    closed = True
except TimeoutError:
    closed = False
if not closed or time.monotonic() - t0 > 1.0:
    bad.append("an unfinished head then a half-close: not closed within 1 s")
s.close()
s = socket.create_connection(("127.0.0.1", port), timeout=3)
body = b'{"prompt":[1,2],"max_tokens":1}'
try:
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % len(body))
    time.sleep(0.2)
    s.sendall(body)
    got = answer(s)
    if not got.startswith(b"HTTP/1.1 200 "):
        bad.append(f"a body sent 0.2 s after its head: {got[:100]!r}")
except TimeoutError:
    bad.append("a body sent 0.2 s after its head: no answer in 3 s")
s.close()
for b in bad:
    print(b)
sys.exit(1 if bad else 0)
PY
echo "ok: malformed, oversized, HTTP/0.9-3.0 and chunked requests answered with JSON errors; long, LF-ended, slow and kept-alive heads and late bodies served"
kill "$SERVE_PID"; wait "$SERVE_PID"
[ $? = 0 ] || fail "invar serve did not stop cleanly on SIGTERM"

# 3. The reference and adversarial sets are caught.
for set in reference adversarial; do
    start_serve "$set"
    "$INVAR" probe --url "http://127.0.0.1:$PORT/v1" --case cases/serve.ini --step-ms 10 \
        --out "$OUT/$set" >"$OUT/probe-$set.log" 2>&1
    rc=$?
    cat "$OUT/probe-$set.log"
    [ "$rc" = 1 ] || fail "probe vs serve --kernel-set $set: exit $rc, expected 1 (caught)"
    grep -qE '"(batch-variant|nondeterministic)","FAIL"' "$OUT/$set/summary.csv" ||
        fail "$set: no FAIL row observed batch-variant or nondeterministic"
    [ "$(wc -l <"$OUT/$set/divergence.csv")" -gt 1 ] || fail "$set: divergence.csv is empty"
    kill "$SERVE_PID"; wait "$SERVE_PID"
done

# 3b. With --cuda-graphs (on the CPU: recorded calls replayed with frozen arguments) the
# invariant server still passes and replayed decode steps; the reference one is still caught.
for set in invariant reference; do
    start_serve "$set" --cuda-graphs
    "$INVAR" probe --url "http://127.0.0.1:$PORT" --case cases/serve.ini --step-ms 10 \
        --out "$OUT/graphs-$set" >"$OUT/probe-graphs-$set.log" 2>&1
    rc=$?
    want=0
    [ "$set" = reference ] && want=1
    [ "$rc" = "$want" ] || { cat "$OUT/probe-graphs-$set.log"; fail "probe vs serve --kernel-set $set --cuda-graphs: exit $rc, expected $want"; }
    replays=$(http GET /metrics | sed -n 's/^invar_graph_replays_total //p')
    [ "${replays:-0}" -gt 0 ] || fail "serve --kernel-set $set --cuda-graphs: no decode step replayed"
    echo "ok: serve --kernel-set $set --cuda-graphs: probe exit $rc, $replays decode steps replayed"
    kill "$SERVE_PID"; wait "$SERVE_PID"
done

# 4. report diff reads probe's reports: the reference server regresses against the invariant one.
"$INVAR" report diff "$OUT/invariant" "$OUT/reference" >"$OUT/diff.log" 2>&1
rc=$?
cat "$OUT/diff.log"
[ "$rc" = 1 ] || fail "invar report diff invariant reference: exit $rc, expected 1 (a regression)"

# 5. A misbehaving server: a reason per request, ERROR, and every good answer still recorded.
rm -f "$OUT/port-bad"
python3 tests/servers/bad_server.py --port-file "$OUT/port-bad" --mode mixed &
pids+=($!)
PORT=$(wait_port_file "$OUT/port-bad" $!) || fail "tests/servers/bad_server.py did not start"
"$INVAR" probe --url "http://127.0.0.1:$PORT" --case cases/probe-faults.ini --timeout 1 \
    --out "$OUT/bad" >"$OUT/probe-bad.log" 2>&1
rc=$?
cat "$OUT/probe-bad.log"
[ "$rc" = 2 ] || fail "probe vs the misbehaving server: exit $rc, expected 2 (ERROR: a broken server)"
grep -q '"error","FAIL"' "$OUT/bad/summary.csv" || fail "bad server: summary row is not error/FAIL"
for reason in 'HTTP 500: the fixture fails this one on purpose' 'malformed or truncated JSON' \
    'Timeout was reached' 'Empty reply from server'; do
    grep -q "$reason" "$OUT/bad/requests.csv" || fail "requests.csv names no '$reason'"
done
good=$(grep -c '"ok",""' "$OUT/bad/requests.csv")
[ "$good" -ge 3 ] || fail "requests.csv holds $good good answers, expected one per run (3)"
echo "misbehaving server: every fault named in requests.csv, $good good answers kept"

# 6. Nothing listening, and garbage instead of HTTP: exit 2 with a clear message.
probe_refuses() {  # probe_refuses NAME PORT MESSAGE WHAT: probe must exit 2 saying MESSAGE
    local rc
    "$INVAR" probe --url "http://127.0.0.1:$2" --case cases/probe-faults.ini \
        --out "$OUT/$1" >"$OUT/$1.log" 2>&1
    rc=$?
    cat "$OUT/$1.log"
    [ "$rc" = 2 ] && grep -q "$3" "$OUT/$1.log" ||
        fail "probe $4: exit $rc, expected 2 and '$3'"
}
free_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')
probe_refuses none "$free_port" "cannot reach the server" "with nothing listening"
rm -f "$OUT/port-garbage"
python3 tests/servers/bad_server.py --port-file "$OUT/port-garbage" --mode garbage &
pids+=($!)
PORT=$(wait_port_file "$OUT/port-garbage" $!) || fail "the garbage server did not start"
probe_refuses garbage "$PORT" "GET http://127.0.0.1:$PORT/v1/models" "vs a garbage answer"
echo "serve and probe: all checks held"
