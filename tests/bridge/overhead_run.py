"""tests/bridge/overhead_run.py — one `invar kernels --op OP` through the bridge, timed whole (the
interpreter's start and imports included) and inside the function; prints "WALL_S INSIDE_S"
(tests/bridge/overhead.py runs it).

    python3 tests/bridge/overhead_run.py [OP DEVICE MODULE:FUNCTION]   default: gemm cpu np_kernels:matmul

On CUDA the time inside is the host's time in the call (the function's launches; its kernels run
on the stream after it returns), so it understates the kernel's own time."""
import importlib
import sys
import time

START = time.perf_counter()

import invar_bridge as ib  # noqa: E402

op, device, spec = sys.argv[1:4] if len(sys.argv) == 4 else ("gemm", "cpu", "np_kernels:matmul")
module, name = spec.split(":")
fn = getattr(importlib.import_module(module), name)
inside = [0.0]


def timed(*args):
    t = time.perf_counter()
    y = fn(*args)
    inside[0] += time.perf_counter() - t
    return y


rc, rows = ib.check(op, timed, device=device, out="/tmp/ovh-bridge")
assert rows, "no rows"
print(f"{time.perf_counter() - START:.4f} {inside[0]:.4f}")
