"""tests/bridge/overhead.py — the Python bridge's cost, as rows for results/bridge/overhead.csv.

    PYTHONPATH=python:tests/bridge INVAR_LIB=build/libinvar.so python3 tests/bridge/overhead.py [--runs N]
        [--device cuda [--op rmsnorm|logprobs]]

1. per-call overhead: the registered gemm callback called through ctypes as invar calls it, at
   M=2 N=8 K=16, with a function that returns a ready array (what is left is the bridge's);
2. `invar kernels --op gemm` wall time through the bridge with numpy's matmul against the
   built-in invariant set, medians of N whole runs each, and the same without the time spent
   inside the Python function (the kernel's own time, which no bridge can save).
With --device cuda, 2. only, on PyTorch's kernel for the op (tests/bridge/torch_kernels.py).
Prints CSV rows (date_utc, host, device, commit, measure, value, unit, how) on stdout."""
import argparse
import ctypes as C
import datetime
import os
import platform
import statistics
import subprocess
import sys
import time

import numpy as np

import invar_bridge as ib
from invar_bridge import _abi

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def per_call_us(calls):
    M, N, K = 2, 8, 16
    x = ib.f32_to_bf16(np.random.default_rng(1).uniform(-1, 1, (M, K)).astype(np.float32))
    w = ib.f32_to_bf16(np.random.default_rng(2).uniform(-1, 1, (N, K)).astype(np.float32))
    y = np.empty((M, N), dtype=np.uint16)
    ready = np.zeros((M, N), dtype=np.uint16)
    mem = ib._Host()
    cb = ib._gemm_adapter(mem, lambda a, b: ready, {})
    args = _abi.GemmArgs(y=y.ctypes.data, y_f32=False, x=x.ctypes.data, w=w.ctypes.data, M=M, N=N, K=K)
    failed = []
    call = _abi.Call(device=-1, fail=_abi.FailFn(lambda c, m: failed.append(m)))
    for _ in range(100):
        cb(C.byref(call), C.byref(args))
    start = time.perf_counter()
    for _ in range(calls):
        cb(C.byref(call), C.byref(args))
    elapsed = time.perf_counter() - start
    assert not failed, failed
    return elapsed / calls * 1e6


def wall(cmd, env):
    start = time.perf_counter()
    subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - start


def _commit():
    return subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip()


def _print_rows(common, rows):
    for r in rows:
        print(",".join(f'"{v}"' if "," in v or " " in v else v for v in common + r))


def cuda_rows(a):
    """`invar kernels --device cuda --op OP` through the bridge on PyTorch's kernel against the
    built-in invariant set, medians of interleaved whole runs, with and without the host's time
    inside the function."""
    op = a.op or "rmsnorm"
    fn = {"rmsnorm": "torch_kernels:rms_norm", "logprobs": "torch_kernels:log_softmax"}.get(op)
    if fn is None:
        print(f"overhead.py --device cuda: --op {op}: only rmsnorm and logprobs (torch's kernels that "
              "pass the checker whole, as the built-in set's run does)", file=sys.stderr)
        return 2
    import torch
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(ROOT, "tests", "bridge") + os.pathsep + env.get("PYTHONPATH", "")
    invar = os.path.join(os.path.dirname(os.environ["INVAR_LIB"]), "invar")
    builtin = [invar, "kernels", "--device", "cuda", "--set", "invariant", "--op", op, "--out", "/tmp/ovh-builtin"]
    timed = [sys.executable, os.path.join(ROOT, "tests", "bridge", "overhead_run.py"), op, "cuda", fn]
    b, t, inside = [], [], []
    for _ in range(a.runs):
        b.append(wall(builtin, env))
        start = time.perf_counter()
        out = subprocess.run(timed, env=env, capture_output=True, text=True, check=True).stdout.splitlines()[-1].split()
        t.append(time.perf_counter() - start)
        inside.append(float(out[1]))
    mb, mt, mi = statistics.median(b), statistics.median(t), statistics.median(inside)
    gpu = torch.cuda.get_device_name(0)
    common = [datetime.date.today().isoformat(), f"{platform.node()} ({gpu})", "cuda", _commit()]
    how = f"medians of {a.runs} interleaved whole runs, torch {torch.__version__}, Python {platform.python_version()}"
    _print_rows(common, [
        [f"invar kernels --op {op} wall (bridge with {fn.split(':')[1]} / built-in)", f"{mt / mb:.2f}", "ratio",
         f"{how}: {mt:.3f} s vs {mb:.3f} s"],
        [f"invar kernels --op {op} wall less the host's time inside the function (bridge / built-in)",
         f"{(mt - mi) / mb:.2f}", "ratio", f"{how}: {mt - mi:.3f} s ({mi:.3f} s inside) vs {mb:.3f} s"],
    ])
    return 0


def main(argv):
    p = argparse.ArgumentParser()
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--calls", type=int, default=20000)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                   help="cuda: the wall ratio of --op through PyTorch's kernel (tests/bridge/torch_kernels.py)")
    p.add_argument("--op", choices=["gemm", "rmsnorm", "logprobs"], default=None,
                   help="the op timed (default: gemm on the CPU, rmsnorm on CUDA)")
    a = p.parse_args(argv)
    if a.device == "cuda":
        return cuda_rows(a)
    env = dict(os.environ)
    invar = os.path.join(os.path.dirname(os.environ["INVAR_LIB"]), "invar")
    builtin = [invar, "kernels", "--device", "cpu", "--set", "invariant", "--op", "gemm", "--out", "/tmp/ovh-builtin"]
    timed = [sys.executable, os.path.join(ROOT, "tests", "bridge", "overhead_run.py")]
    b, t, inside = [], [], []
    for _ in range(a.runs):  # interleaved, so a drift of the machine's speed hits both
        b.append(wall(builtin, env))
        start = time.perf_counter()
        out = subprocess.run(timed, env=env, capture_output=True, text=True, check=True).stdout.splitlines()[-1].split()
        t.append(time.perf_counter() - start)
        inside.append(float(out[1]))
    us = per_call_us(a.calls)
    common = [datetime.date.today().isoformat(), f"{platform.node()} ({os.cpu_count()} cores; no GPU)", "cpu", _commit()]
    mb, mt, mi = statistics.median(b), statistics.median(t), statistics.median(inside)
    how = f"medians of {a.runs} interleaved whole runs, numpy {np.__version__}, Python {platform.python_version()}"
    rows = [
        ["per-call overhead (gemm adapter, a function returning a ready array)", f"{us:.1f}", "us",
         f"{a.calls} ctypes calls of the callback at M=2 N=8 K=16"],
        ["invar kernels --op gemm wall (bridge with numpy matmul / built-in)", f"{mt / mb:.2f}", "ratio",
         f"{how}: {mt:.3f} s vs {mb:.3f} s"],
        ["invar kernels --op gemm wall less the Python function's own time (bridge / built-in)",
         f"{(mt - mi) / mb:.2f}", "ratio", f"{how}: {mt - mi:.3f} s ({mi:.3f} s inside numpy's matmul) vs {mb:.3f} s"],
    ]
    _print_rows(common, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
