#!/usr/bin/env python3
"""tests/servers/bad_server.py — a misbehaving OpenAI-compatible server for tests/test_serve.sh.

  bad_server.py --port-file FILE --mode mixed     /v1/models answers well (vocab_size 1000);
        /v1/completions request k (counted from 0) does, by k % 6: 0 a good answer (logprobs
        derived from the prompt alone, one top entry -Infinity as Python's json writes it),
        1 HTTP 500 with an OpenAI error body, 2 garbage that is not JSON, 3 JSON cut short,
        4 a reply slower than the test's --timeout, 5 the connection closed with no reply.
  bad_server.py --port-file FILE --mode garbage   every connection gets bytes that are not HTTP.

Listens on 127.0.0.1, port 0 (the kernel picks a free one), written to FILE once listening.
"""
import argparse
import hashlib
import http.server
import json
import os
import socketserver
import threading
import time

SLOW_SECONDS = 3


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


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    counter = 0
    lock = threading.Lock()

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
        if self.path.rstrip("/") == "/v1/models":
            self.send(200, {"object": "list", "data": [{"id": "bad", "vocab_size": 1000}]})
        else:
            self.send(404, {"error": {"message": "no such route", "type": "not_found_error"}})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
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


class Garbage(socketserver.BaseRequestHandler):
    def handle(self):
        self.request.recv(4096)
        self.request.sendall(b"\x00\x01 this is not HTTP \xff\r\n\r\n")


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        pass  # the client gave up on a slow reply: expected here, not worth a traceback


class GarbageServer(socketserver.ThreadingMixIn, socketserver.TCPServer):
    daemon_threads = True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--mode", choices=["mixed", "garbage"], default="mixed")
    a = ap.parse_args()
    srv = (Server if a.mode == "mixed" else GarbageServer)(
        ("127.0.0.1", 0), Handler if a.mode == "mixed" else Garbage)
    with open(a.port_file + ".tmp", "w") as f:
        f.write(f"{srv.server_address[1]}\n")
    os.rename(a.port_file + ".tmp", a.port_file)
    srv.serve_forever()


if __name__ == "__main__":
    main()
