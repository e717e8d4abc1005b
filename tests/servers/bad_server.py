#!/usr/bin/env python3
"""tests/servers/bad_server.py — a misbehaving OpenAI-compatible server for tests/test_serve.sh.

  bad_server.py --port-file FILE --mode mixed     /v1/models answers well (vocab_size 1000);
        /v1/completions request k (counted from 0) does, by k % 6: 0 a good answer (logprobs
        derived from the prompt alone, one top entry -Infinity as Python's json writes it),
        1 HTTP 500 with an OpenAI error body, 2 garbage that is not JSON, 3 JSON cut short,
        4 a reply slower than the test's --timeout, 5 the connection closed with no reply.
  bad_server.py --port-file FILE --mode garbage   every connection gets bytes that are not HTTP.
  bad_server.py --port-file FILE --mode MODE      every completion one way (tests/test_probe.sh):
        short     one token fewer than max_tokens asks (a server ignoring ignore_eos)
        canned    one answer whatever the prompt
        nan       every logprob NaN;  infinity: every logprob Infinity
        strings   logprobs as JSON strings ("-0.5");  hex: logprobs as hex floats
        trailing  a good answer followed by a second JSON object
        huge      an answer of 100 MB (valid JSON: a long text)
        never     reads the request and never answers
        escape    HTTP 400 whose error message holds terminal escapes
        serial    good answers, one request at a time (a lock), 200 ms each, no /metrics
        parallel  good answers, 300 ms each (1.5 s with --gauge), all at once (each waits up to
                  0.5 s for company first, so a batch sent at once is served together)
        lengthvary  good answers, one token fewer where another request is in flight with it
                    (each waits up to 1 s for company, so a batch sent at once is crowded whole)
        bigmodels   /v1/models answers 100 MB;  vocab-neg, vocab-huge: vocab_size -5, 2e9
  --gauge   also answer GET /metrics as vLLM does, vllm:num_requests_running = the completions
            being computed now, not those waiting (what probe samples to tell batching from one
            at a time; serial and parallel modes)

Listens on 127.0.0.1, port 0 (the kernel picks a free one), written to FILE once listening.
"""
import argparse
import contextlib
import hashlib
import http.server
import json
import os
import socketserver
import threading
import time

SLOW_SECONDS = 3
CROWD_WAIT, CROWD_HOLD = 1.0, 1.0  # lengthvary: how long a request waits for company, and stays
PARALLEL_WAIT = 0.5  # parallel: how long a request waits for company


def good_answer(body):
    prompt = body["prompt"]
    n = body.get("max_tokens", 16)
    k = body.get("logprobs") or 0
    seed = int.from_bytes(hashlib.sha256(json.dumps(prompt).encode()).digest()[:8], "little")
    tokens, lps, tops = [], [], []
    for s in range(n):
        tok = (seed + 7 * s) % 1000
        lp = -((seed >> (s % 32)) % 1000) / 997.0 - 0.01  # a double, more digits than float32
        tokens.append(f"token_id:{tok}")
        lps.append(lp)
        top = {f"token_id:{tok}": lp}
        for j in range(1, k):
            top[f"token_id:{(tok + j) % 1000}"] = lp - j if j < k - 1 else float("-inf")
        tops.append(top)
    return {"id": "cmpl-bad", "object": "text_completion", "model": "bad",
            "choices": [{"index": 0, "text": "", "finish_reason": "length",
                         "logprobs": {"tokens": tokens, "token_logprobs": lps,
                                      "top_logprobs": tops}}]}


@contextlib.contextmanager
def running():
    """A completion being computed: what vLLM's num_requests_running counts (not the waiting)."""
    with Handler.lock:
        Handler.answering += 1
    try:
        yield
    finally:
        with Handler.lock:
            Handler.answering -= 1


@contextlib.contextmanager
def company(wait):
    """A request in flight that first waits up to `wait` s for another; yields whether it found one."""
    with Handler.crowd:
        Handler.in_flight += 1
        Handler.crowd.notify_all()
        crowded = Handler.crowd.wait_for(lambda: Handler.in_flight > 1, timeout=wait)
    try:
        yield crowded
    finally:
        with Handler.crowd:
            Handler.in_flight -= 1


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    counter = 0
    lock = threading.Lock()
    crowd = threading.Condition()  # lengthvary's and parallel's requests in flight (in_flight)
    serial = threading.Lock()
    mode = "mixed"
    in_flight = 0
    gauge = False
    answering = 0

    def log_message(self, *args):
        pass

    def send(self, status, payload):
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/metrics" and Handler.gauge:
            with Handler.lock:
                running = Handler.answering
            text = ("# TYPE vllm:num_requests_running gauge\n"
                    f'vllm:num_requests_running{{model_name="bad"}} {float(running)}\n')
            data = text.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        if self.path.rstrip("/") == "/v1/models":
            vocab = {"vocab-neg": -5, "vocab-huge": 2e9}.get(Handler.mode, 1000)
            if Handler.mode == "bigmodels":
                pad = "x" * (100 << 20)
                self.send(200, ('{"object":"list","data":[{"id":"bad","vocab_size":1000,'
                                '"pad":"' + pad + '"}]}').encode())
                return
            self.send(200, {"object": "list", "data": [{"id": "bad", "vocab_size": vocab}]})
        else:
            self.send(404, {"error": {"message": "no such route", "type": "not_found_error"}})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if Handler.mode != "mixed":
            self.one_way(body)
            return
        with Handler.lock:
            k = Handler.counter
            Handler.counter += 1
        what = k % 6
        if what == 0:
            self.send(200, good_answer(body))
        elif what == 1:
            self.send(500, {"error": {"message": "the fixture fails this one on purpose",
                                      "type": "server_error"}})
        elif what == 2:
            self.send(200, b"<html>certainly not json</html>")
        elif what == 3:
            self.send(200, json.dumps(good_answer(body)).encode()[:40])
        elif what == 4:
            time.sleep(SLOW_SECONDS)
            self.send(200, good_answer(body))
        else:
            self.close_connection = True
            self.connection.shutdown(2)


    def one_way(self, body):
        mode = Handler.mode
        answer = good_answer(body)
        lp = answer["choices"][0]["logprobs"]
        if mode == "short":
            for key in ("tokens", "token_logprobs", "top_logprobs"):
                lp[key] = lp[key][:max(1, len(lp[key]) - 1)]
        elif mode == "canned":
            answer = good_answer({"prompt": [1, 2, 3], "max_tokens": body.get("max_tokens", 16),
                                  "logprobs": body.get("logprobs")})
        elif mode in ("nan", "infinity"):
            value = float("nan") if mode == "nan" else float("inf")
            lp["token_logprobs"] = [value] * len(lp["token_logprobs"])
            lp["top_logprobs"] = [{k: value for k in top} for top in lp["top_logprobs"]]
        elif mode == "strings":
            lp["token_logprobs"] = [repr(v) for v in lp["token_logprobs"]]
        elif mode == "hex":
            text = json.dumps(answer)
            for v in lp["token_logprobs"]:
                text = text.replace(repr(v), float(v).hex(), 1)
            self.send(200, text.encode())
            return
        elif mode == "trailing":
            self.send(200, (json.dumps(answer) + json.dumps(answer)).encode())
            return
        elif mode == "huge":
            answer["choices"][0]["text"] = "x" * (100 << 20)
        elif mode == "never":
            time.sleep(3600)
            return
        elif mode == "escape":
            self.send(400, {"error": {"message": "\x1b[2J\x1b[31mred alert\x1b[0m\x07",
                                      "type": "invalid_request_error"}})
            return
        elif mode == "serial":
            with Handler.serial:
                with running():
                    time.sleep(0.2)
        elif mode == "parallel":
            # A batch sent at once is served together, as by a batching server, even where a
            # loaded machine delays some handshakes: a request first waits for company (up to
            # PARALLEL_WAIT; alone it goes on). With the gauge, long enough for a sampler on a
            # loaded machine to see them running.
            with company(PARALLEL_WAIT), running():
                time.sleep(1.5 if Handler.gauge else 0.3)
        elif mode == "lengthvary":
            # Crowded: another request in flight while this one waits for company (up to
            # CROWD_WAIT) or lingers after (CROWD_HOLD), so that a batch sent at once sees itself
            # crowded whole even on a loaded machine, and the same batch again answers the same.
            with company(CROWD_WAIT) as crowded:
                time.sleep(CROWD_HOLD if crowded else 0)
            if crowded:
                for key in ("tokens", "token_logprobs", "top_logprobs"):
                    lp[key] = lp[key][:-1]
        self.send(200, answer)


class Garbage(socketserver.BaseRequestHandler):
    def handle(self):
        self.request.recv(4096)
        self.request.sendall(b"\x00\x01 this is not HTTP \xff\r\n\r\n")


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    # A batch's connections all at once: the default backlog of 5 drops a sixth's handshake on a
    # busy machine, and its request then comes a second late, alone.
    request_queue_size = 64

    def handle_error(self, request, client_address):
        pass  # the client gave up on a slow reply: expected here, not worth a traceback


class GarbageServer(socketserver.ThreadingMixIn, socketserver.TCPServer):
    daemon_threads = True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--mode", default="mixed",
                    choices=["mixed", "garbage", "short", "canned", "nan", "infinity", "strings",
                             "hex", "trailing", "huge", "never", "escape", "serial", "parallel",
                             "lengthvary", "bigmodels", "vocab-neg", "vocab-huge"])
    ap.add_argument("--gauge", action="store_true")
    a = ap.parse_args()
    Handler.mode = a.mode
    Handler.gauge = a.gauge
    srv = (Server if a.mode != "garbage" else GarbageServer)(
        ("127.0.0.1", 0), Handler if a.mode != "garbage" else Garbage)
    with open(a.port_file + ".tmp", "w") as f:
        f.write(f"{srv.server_address[1]}\n")
    os.rename(a.port_file + ".tmp", a.port_file)
    srv.serve_forever()


if __name__ == "__main__":
    main()
