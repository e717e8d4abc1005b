"""tests/bridge/overhead_run.py — one `invar kernels --op gemm` through the bridge on numpy's matmul,
timed whole (the interpreter's start and imports included) and inside the function; prints
"WALL_S INSIDE_S" (tests/bridge/overhead.py runs it)."""
import time

START = time.perf_counter()

import invar_bridge as ib  # noqa: E402
import np_kernels  # noqa: E402

inside = [0.0]


def timed_matmul(x, w):
    t = time.perf_counter()
    y = np_kernels.matmul(x, w)
    inside[0] += time.perf_counter() - t
    return y


rc, rows = ib.check("gemm", timed_matmul, out="/tmp/ovh-bridge")
assert rows, "no rows"
print(f"{time.perf_counter() - START:.4f} {inside[0]:.4f}")
