#!/usr/bin/env python3
"""tests/servers/hf_server.py — a small OpenAI-compatible /v1/completions server over Hugging Face
transformers, for `invar probe` on a GPU host (tests/servers/run_hf_probe.sh starts it).

It serves a random-weight DeepSeek-V2-shaped model (MLA attention, MoE; hidden size 1024, large
enough for cuBLAS to pick other kernels as the batch grows) the way simple servers do: requests
that arrive within a short window are padded on the left into one batch and generated together,
so a request's logprobs are computed in batches of different sizes. That is the point: invar
probe must catch it as batch-variant.

  python3 tests/servers/hf_server.py --port-file FILE [--port 0] [--window-ms 20]
      [--max-batch 64] [--layers 4] [--vocab 8192] [--seed 0] [--device cuda]

API (what invar probe needs): POST /v1/completions with "prompt" a list of token ids,
"max_tokens", "logprobs" (top-k, <= 20), "temperature" (0: greedy; else Gumbel noise seeded by
the request's "seed" and the position only, so sampling itself is batch-independent), "seed";
"ignore_eos" is implied (there is no tokenizer, hence no EOS). Tokens are named "token_id:N".
GET /v1/models reports vocab_size. Logprobs are float32, written as Python's json writes the
widened double (exact). Every generation step recomputes the whole padded batch (no KV cache):
simple, and still batch-variant.
"""
import argparse
import http.server
import json
import os
import queue
import socketserver
import sys
import threading
import time

import torch


def build_model(a):
    torch.manual_seed(a.seed)
    import transformers
    shape = dict(vocab_size=a.vocab, hidden_size=1024, intermediate_size=2816,
                 moe_intermediate_size=512, num_hidden_layers=a.layers, num_attention_heads=16,
                 num_key_value_heads=16, n_routed_experts=8, num_experts_per_tok=2,
                 n_shared_experts=1, first_k_dense_replace=1, kv_lora_rank=256, q_lora_rank=None,
                 qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128,
                 max_position_embeddings=4096, rope_theta=10000.0, topk_method="greedy",
                 n_group=1, topk_group=1, routed_scaling_factor=1.0, norm_topk_prob=False,
                 scoring_func="softmax", tie_word_embeddings=False)
    cls = getattr(transformers, "DeepseekV2ForCausalLM", None)
    cfg_cls = getattr(transformers, "DeepseekV2Config", None)
    if cls is None or cfg_cls is None:
        sys.exit(f"hf_server: transformers {transformers.__version__} has no DeepseekV2 model "
                 "(added in 4.55); upgrade transformers")
    known = cfg_cls().to_dict()
    cfg = cfg_cls(**{k: v for k, v in shape.items() if k in known})
    model = cls(cfg).to(dtype=torch.bfloat16, device=a.device).eval()
    # Random init gives near-uniform logits; scale the head so top-k has structure.
    with torch.no_grad():
        model.lm_head.weight.mul_(8.0)
    return model, cfg


class Engine:
    """Gathers requests for window_ms, then runs them as one left-padded batch."""

    def __init__(self, model, a):
        self.model, self.a = model, a
        self.q = queue.Queue()
        self.batch_sizes = []
        threading.Thread(target=self.loop, daemon=True).start()

    def submit(self, req):
        done = threading.Event()
        box = {}
        self.q.put((req, box, done))
        done.wait()
        return box

    def loop(self):
        while True:
            items = [self.q.get()]
            deadline = time.monotonic() + self.a.window_ms / 1000.0
            while len(items) < self.a.max_batch:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                try:
                    items.append(self.q.get(timeout=left))
                except queue.Empty:
                    break
            self.batch_sizes.append(len(items))
            try:
                outs = self.generate([it[0] for it in items])
                for (_, box, done), out in zip(items, outs):
                    box["ok"] = out
                    done.set()
            except Exception as e:  # every waiter learns why
                for _, box, done in items:
                    box["error"] = f"{type(e).__name__}: {e}"
                    done.set()

    @torch.no_grad()
    def generate(self, reqs):
        dev = self.a.device
        seqs = [list(r["prompt"]) for r in reqs]
        steps = max(r["max_tokens"] for r in reqs)
        outs = [{"tokens": [], "lps": [], "tops": []} for _ in reqs]
        for s in range(steps):
            width = max(len(x) for x in seqs)
            ids = torch.zeros((len(seqs), width), dtype=torch.long, device=dev)
            mask = torch.zeros((len(seqs), width), dtype=torch.long, device=dev)
            for i, x in enumerate(seqs):  # left padding
                ids[i, width - len(x):] = torch.tensor(x, device=dev)
                mask[i, width - len(x):] = 1
            pos = (mask.cumsum(-1) - 1).clamp(min=0)
            logits = self.model(input_ids=ids, attention_mask=mask, position_ids=pos,
                                use_cache=False).logits[:, -1, :].float()
            logp = torch.log_softmax(logits, dim=-1)
            for i, r in enumerate(reqs):
                if s >= r["max_tokens"]:
                    continue
                if r["temperature"] > 0:
                    g = torch.Generator(device="cpu").manual_seed(
                        (r["seed"] * 1000003 + len(seqs[i])) & 0x7FFFFFFFFFFFFFFF)
                    u = torch.rand(logits.shape[-1], generator=g).clamp_(1e-20, 1.0)
                    noise = -torch.log(-torch.log(u)).to(dev)
                    tok = int(torch.argmax(logits[i] / r["temperature"] + noise))
                else:
                    tok = int(torch.argmax(logits[i]))
                k = r["logprobs"]
                top_v, top_i = torch.topk(logp[i], k) if k > 0 else (torch.empty(0), torch.empty(0))
                outs[i]["tokens"].append(tok)
                outs[i]["lps"].append(float(logp[i, tok]))
                outs[i]["tops"].append({f"token_id:{int(t)}": float(v)
                                        for t, v in zip(top_i.tolist(), top_v.tolist())})
                seqs[i].append(tok)
        return outs


def make_handler(engine, cfg, name):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def send(self, status, obj):
            data = json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def error(self, status, msg, param=None):
            self.send(status, {"error": {"message": msg, "type": "invalid_request_error",
                                         "param": param, "code": status}})

        def do_GET(self):
            path = self.path.rstrip("/")
            if path == "/v1/models":
                self.send(200, {"object": "list", "data": [{
                    "id": name, "object": "model", "owned_by": "hf_server",
                    "vocab_size": cfg.vocab_size, "max_model_len": 4096}]})
            elif path == "/health":
                self.send(200, {"status": "ok"})
            elif path == "/metrics":
                self.send(200, {"batch_sizes": engine.batch_sizes[-1000:]})
            else:
                self.error(404, f"no route {self.path}")

        def do_POST(self):
            if self.path.rstrip("/") != "/v1/completions":
                return self.error(404, f"no route {self.path}")
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                prompt = body["prompt"]
                if prompt and isinstance(prompt[0], list):
                    prompt = prompt[0]
                if not prompt or not all(isinstance(t, int) and 0 <= t < cfg.vocab_size
                                         for t in prompt):
                    return self.error(400, "prompt must be a non-empty list of token ids",
                                      "prompt")
                req = {"prompt": prompt, "max_tokens": int(body.get("max_tokens", 16)),
                       "logprobs": min(int(body.get("logprobs") or 0), 20),
                       "temperature": float(body.get("temperature", 1.0)),
                       "seed": int(body.get("seed") or 0)}
            except (ValueError, KeyError, TypeError) as e:
                return self.error(400, f"bad request: {e}")
            box = engine.submit(req)
            if "error" in box:
                return self.send(500, {"error": {"message": box["error"], "type": "server_error",
                                                 "param": None, "code": 500}})
            out = box["ok"]
            toks = [f"token_id:{t}" for t in out["tokens"]]
            self.send(200, {
                "id": "cmpl-hf", "object": "text_completion", "created": int(time.time()),
                "model": name,
                "choices": [{"index": 0, "text": "".join(" " + t for t in toks),
                             "finish_reason": "length",
                             "logprobs": {"tokens": toks, "token_logprobs": out["lps"],
                                          "top_logprobs": out["tops"]}}],
                "usage": {"prompt_tokens": len(prompt), "completion_tokens": len(toks),
                          "total_tokens": len(prompt) + len(toks)}})

    return Handler


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-file")
    ap.add_argument("--window-ms", type=float, default=20)
    ap.add_argument("--max-batch", type=int, default=64)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cuda")
    a = ap.parse_args()
    model, cfg = build_model(a)
    name = "hf-deepseek-v2-random"
    srv = Server(("127.0.0.1", a.port), make_handler(Engine(model, a), cfg, name))
    port = srv.server_address[1]
    print(f"hf_server: {name} (hidden 1024, {a.layers} layers, vocab {a.vocab}) on "
          f"{a.device} at http://127.0.0.1:{port}/v1", flush=True)
    if a.port_file:
        with open(a.port_file + ".tmp", "w") as f:
            f.write(f"{port}\n")
        os.rename(a.port_file + ".tmp", a.port_file)
    srv.serve_forever()


if __name__ == "__main__":
    main()
