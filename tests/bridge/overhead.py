"""tests/bridge/overhead.py — the Python bridge's cost, as rows for results/bridge/overhead.csv.

    PYTHONPATH=python:tests/bridge INVAR_LIB=build/libinvar.so python3 tests/bridge/overhead.py [--runs N]

1. per-call overhead: the registered gemm callback called through ctypes as invar calls it, at
   M=2 N=8 K=16, with a function that returns a ready array (what is left is the bridge's);
2. `invar kernels --op gemm` wall time through the bridge with numpy's matmul against the
   built-in invariant set, medians of N whole runs each, and the same without the time spent
   inside the Python function (the kernel's own time, which no bridge can save).
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


def main(argv):
    p = argparse.ArgumentParser()
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--calls", type=int, default=20000)
    a = p.parse_args(argv)
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
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    common = [datetime.date.today().isoformat(), f"{platform.node()} ({os.cpu_count()} cores; no GPU)", "cpu", commit]
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
    for r in rows:
        print(",".join(f'"{v}"' if "," in v or " " in v else v for v in common + r))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
