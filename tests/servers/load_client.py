#!/usr/bin/env python3
"""tests/servers/load_client.py — the client side of tests/test_serve_load.sh: one check per
command against an `invar serve` on 127.0.0.1:PORT (its pid given for RSS and signals). Exits 0
when the check held, 1 with what was seen otherwise. Standard library only.

  load_client.py --port P --pid PID identity|abandon|busy|uploads|slow|drain
"""
import argparse
import http.client
import json
import os
import resource
import signal
import socket
import sys
import threading
import time


def post(port, body, timeout=60):
    """(status, headers dict, body text) of POST /v1/completions."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    out = (r.status, {k.lower(): v for k, v in r.getheaders()}, r.read().decode())
    c.close()
    return out


def logprob_texts(text):
    """choices[0].logprobs with every number kept as its text: equal texts are equal bits."""
    return json.loads(text, parse_float=str, parse_int=str)["choices"][0]["logprobs"]


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise SystemExit(f"no VmRSS for pid {pid}")


def fail(msg):
    print(f"load_client: {msg}")
    sys.exit(1)


def identity(a):
    probe = {"prompt": [5, 17, 99, 3, 250, 41], "max_tokens": 8, "logprobs": 5,
             "temperature": 0.8, "seed": 7}
    status, _, alone = post(a.port, probe)
    if status != 200:
        fail(f"identity: alone: HTTP {status}: {alone}")
    results, errors = {}, []

    def send(i):
        body = probe if i == 0 else {"prompt": [i, i + 1, 2 * i % 500], "max_tokens": 6 + i % 5,
                                     "logprobs": 5, "temperature": 0.8, "seed": i}
        try:
            results[i] = post(a.port, body)
        except Exception as e:  # noqa: BLE001 — reported below
            errors.append(f"{i}: {e}")
    threads = [threading.Thread(target=send, args=(i,)) for i in range(17)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors or any(r[0] != 200 for r in results.values()):
        fail(f"identity: under load: {errors or [r[:1] for r in results.values()]}")
    if logprob_texts(results[0][2]) != logprob_texts(alone):
        fail("identity: the request's logprobs under load differ from alone")
    print("identity: the request among 16 others answered the same bits as alone")


def metrics(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    c.close()
    return {line.split()[0]: float(line.split()[1]) for line in text.splitlines()
            if line and not line.startswith("#") and len(line.split()) == 2}


def poll_metrics(port, done, seconds, every, give_up=lambda m: False):
    """Reads /metrics every `every` s until done(m); returns (m, seconds waited, whether done) once
    it is, or once `seconds` have passed or give_up(m) says it never will be."""
    t0 = time.monotonic()
    while True:
        m = metrics(port)
        if done(m):
            return m, time.monotonic() - t0, True
        if time.monotonic() - t0 > seconds or give_up(m):
            return m, time.monotonic() - t0, False
        time.sleep(every)


def abandon(a):
    socks = []
    body = lambda i: json.dumps({"prompt": [7 + i, 8, 9], "max_tokens": 400}).encode()
    for i in range(20):
        s = socket.create_connection(("127.0.0.1", a.port))
        b = body(i)
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                  b"\r\nContent-Length: " + str(len(b)).encode() + b"\r\n\r\n" + b)
        socks.append(s)
    # Polled, not slept on: a slow host may not have started one yet, a fast one may be done.
    m, _, _ = poll_metrics(a.port, lambda m: m["invar_requests_running"] >= 1, 5.0, 0.005)
    running = m["invar_requests_running"]
    for s in socks:
        s.close()
    m, freed, done = poll_metrics(a.port, lambda m: m["invar_requests_running"] == 0 and
                                  m["invar_requests_waiting"] == 0, 1.0, 0.02)
    if not done:
        fail(f"abandon: 1 s after 20 clients left, {m['invar_requests_running']:.0f} running "
             f"and {m['invar_requests_waiting']:.0f} waiting")
    t1 = time.monotonic()
    status, _, text = post(a.port, {"prompt": [1, 2, 3], "max_tokens": 1}, timeout=10)
    took = time.monotonic() - t1
    if status != 200 or took > 1.0:
        fail(f"abandon: a 1-token request after them: HTTP {status} in {took:.2f} s")
    if running < 1 or m["invar_requests_cancelled_total"] < 1:
        fail(f"abandon: {running:.0f} were running before the clients left, "
             f"{m['invar_requests_cancelled_total']:.0f} cancelled")
    print(f"abandon: 20 abandoned 400-token requests ({running:.0f} running) freed "
          f"{freed:.2f} s after their clients left, {m['invar_requests_cancelled_total']:.0f} "
          f"cancelled; a 1-token request served in {took:.2f} s")


def stream(a):
    """stream: true answers token by token: the first event arrives while its request still
    runs, the events put together carry the non-streamed answer's bits, and a client that leaves
    mid-stream has its request ended within a second."""
    body = {"prompt": [11, 12, 13, 14], "max_tokens": 400, "logprobs": 3, "temperature": 0.7,
            "seed": 21}
    c = http.client.HTTPConnection("127.0.0.1", a.port, timeout=60)
    c.request("POST", "/v1/completions", json.dumps(dict(body, stream=True)),
              {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200 or r.getheader("Content-Type") != "text/event-stream":
        fail(f"stream: HTTP {r.status}, {r.getheader('Content-Type')}: {r.read()[:200]}")
    first = r.readline()
    running = metrics(a.port)["invar_requests_running"]
    events = (first + r.read()).decode()
    c.close()
    if not first.startswith(b"data: {") or running < 1:
        fail(f"stream: the first event ({first[:60]!r}) came when {running:.0f} requests ran: "
             f"the answer was written after the request ended, not as it ran")
    chunks = [json.loads(e[6:], parse_float=str) for e in events.split("\n\n")
              if e.startswith("data: {")]
    if not events.endswith("data: [DONE]\n\n") or len(chunks) != 400:
        fail(f"stream: {len(chunks)} events, ending {events[-40:]!r}")
    finals = [i for i, ch in enumerate(chunks) if ch["choices"][0]["finish_reason"] is not None]
    if finals != [399] or chunks[399]["choices"][0]["finish_reason"] != "length":
        fail(f"stream: finish_reason set on events {finals[:8]}, expected the last one only")
    streamed = [t for ch in chunks for t in ch["choices"][0]["logprobs"]["token_logprobs"]]
    status, _, whole = post(a.port, body)
    if status != 200 or streamed != logprob_texts(whole)["token_logprobs"]:
        fail("stream: the streamed logprobs differ from the same request's non-streamed answer")
    before = metrics(a.port)["invar_requests_cancelled_total"]
    c = http.client.HTTPConnection("127.0.0.1", a.port, timeout=60)
    c.request("POST", "/v1/completions", json.dumps(dict(body, stream=True, max_tokens=500)),
              {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200 or not r.readline().startswith(b"data: {"):
        fail(f"stream: a 500-token stream: HTTP {r.status}")
    c.sock.close()
    c.close()
    m, freed, done = poll_metrics(a.port, lambda m: m["invar_requests_running"] == 0 and
                                  m["invar_requests_cancelled_total"] > before, 1.0, 0.02)
    if not done:
        fail(f"stream: 1 s after a client left mid-stream, {m['invar_requests_running']:.0f} "
             f"running, {m['invar_requests_cancelled_total'] - before:.0f} cancelled")
    print(f"stream: the first of 400 events came while the request ran; the events carry the "
          f"non-streamed bits; a client leaving mid-stream freed its request in {freed:.2f} s")


def busy(a):
    """Two long requests fill --max-queue 2 (running or waiting in the engine); six more sent
    while they run must all be refused with 429, and the two answered."""
    long_results, results = [], []

    def send_long(i):
        long_results.append(post(a.port, {"prompt": [1 + i, 2, 3], "max_tokens": 300}))

    def send(i):
        results.append(post(a.port, {"prompt": [10 + i, 2, 3], "max_tokens": 4}))
    first = [threading.Thread(target=send_long, args=(i,)) for i in range(2)]
    for t in first:
        t.start()
    # Polled, not slept on: a fast host serves a 300-token request in a fraction of a second.
    m, _, both_in = poll_metrics(a.port, lambda m: m["invar_requests_running"] +
                                 m["invar_requests_waiting"] == 2, 5.0, 0.005,
                                 give_up=lambda m: m["invar_requests_total"] >= 2)
    if not both_in:
        fail(f"busy: the two long requests are not both in the server: {m}")
    more = [threading.Thread(target=send, args=(i,)) for i in range(6)]
    for t in more:
        t.start()
    for t in more + first:
        t.join()
    if sorted(r[0] for r in results) != [429] * 6 or [r[0] for r in long_results] != [200, 200]:
        fail(f"busy: statuses {[r[0] for r in results]} beside {[r[0] for r in long_results]}: "
             f"expected six 429 while two requests filled --max-queue 2, then two 200")
    for r in results:
        if r[1].get("retry-after") != "1" or "error" not in json.loads(r[2]):
            fail(f"busy: a 429 without Retry-After: 1 or an error body: {r[1]} {r[2]}")
    print("busy: with --max-queue 2 filled, 6 requests refused with 429 and Retry-After; the 2 "
          "served")


def uploads(a):
    idle = rss_kb(a.pid)
    socks = []
    chunk = b"[" + b"1," * (1 << 19)  # 1 MiB of a prompt that never ends
    for _ in range(12):
        s = socket.create_connection(("127.0.0.1", a.port))
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                  b"\r\nContent-Length: 16000000\r\n\r\n{\"prompt\": ")
        for _ in range(3):
            s.sendall(chunk)
        socks.append(s)
    time.sleep(1.0)
    held = rss_kb(a.pid)
    t0 = time.monotonic()
    status, _, text = post(a.port, {"prompt": [1, 2, 3], "max_tokens": 2}, timeout=10)
    took = time.monotonic() - t0
    for s in socks:
        s.close()
    if status != 200:
        fail(f"uploads: a small request while uploads stall: HTTP {status}: {text}")
    if held > 2 * idle:
        fail(f"uploads: RSS {held} KB with 12 stalled 3 MiB uploads, idle {idle} KB: over 2x")
    print(f"uploads: RSS {held} KB under 12 stalled uploads (idle {idle} KB); a small request "
          f"served in {took:.2f} s")


def slow(a):
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    n = max(16, min(1000, soft - 64))
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", a.port))
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")  # and nothing more
        socks.append(s)
    time.sleep(0.5)
    t0 = time.monotonic()
    status, _, text = post(a.port, {"prompt": [1, 2, 3], "max_tokens": 2}, timeout=10)
    took = time.monotonic() - t0
    for s in socks:
        s.close()
    if status != 200 or took > 1.0:
        fail(f"slow: with {n} slow connections open a new client got HTTP {status} in {took:.2f} s")
    print(f"slow: {n} slow connections open, a new client served in {took:.2f} s")


def drain(a):
    result = {}

    def send():
        try:
            result["r"] = post(a.port, {"prompt": [4, 5, 6], "max_tokens": 400, "logprobs": 1})
        except Exception as e:  # noqa: BLE001 — reported below
            result["e"] = str(e)
    t = threading.Thread(target=send)
    t.start()
    # SIGTERM the moment the request runs: slept on instead, a fast host had answered it before
    # the signal and the check held whatever SIGTERM did.
    m, _, running = poll_metrics(a.port, lambda m: m["invar_requests_running"] == 1, 5.0, 0.005)
    if not running:
        fail(f"drain: the 400-token request never showed as running: {m}")
    os.kill(a.pid, signal.SIGTERM)
    time.sleep(0.2)
    try:
        socket.create_connection(("127.0.0.1", a.port), timeout=2).close()
        refused_new = False
    except OSError:
        refused_new = True
    t.join(60)
    if "r" not in result:
        fail(f"drain: the request in flight at SIGTERM got no answer: {result.get('e')}")
    status, _, text = result["r"]
    if status != 200 or json.loads(text)["usage"]["completion_tokens"] != 400:
        fail(f"drain: the request in flight at SIGTERM: HTTP {status}: {text[:200]}")
    if not refused_new:
        fail("drain: a new connection was accepted after SIGTERM")
    print("drain: the request in flight at SIGTERM got its 400 tokens; new connections refused")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("command", choices=["identity", "abandon", "stream", "busy", "uploads", "slow", "drain"])
    a = ap.parse_args()
    globals()[a.command](a)


if __name__ == "__main__":
    main()
