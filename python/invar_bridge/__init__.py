"""invar_bridge — judge kernels written in Python (numpy, PyTorch, Triton) with invar's kernel
checker and engine, through libinvar.so and the plugin ABI (kernels/invar_plugin.h).

Standard library only (ctypes); it uses the numpy or torch the caller already has. A Python
function becomes one op of a plugin table registered in this process:

    import invar_bridge as ib
    rc, rows = ib.check("gemm", my_matmul, device="cpu")     # invar kernels --op gemm
    rc = ib.run("cases/ci.ini", {"gemm": my_matmul})         # the engine on it

Buffers reach the function without a copy: on the CPU as numpy arrays over invar's memory, on
CUDA as torch tensors over the device pointers (__cuda_array_interface__), the function running
on invar's stream (torch.cuda.ExternalStream). bf16 arrives as uint16 numpy arrays holding the
top half of an IEEE float (bf16_to_f32 / f32_to_bf16 convert, rounding to nearest even) and as
torch.bfloat16 tensors. The function returns its output (or fills the `out` it is given); invar
copies it, rounding fp32 to bf16 where the op's output is bf16. An exception is an ERROR row for
that op and shape, with the exception's last line; the check goes on.

Op signatures (rows are tokens; strides are invar's, already applied to the views):
    gemm(x [M, K], w [N, K]) -> y [M, N]            y = x · wᵀ, fp32 accumulate
    rmsnorm(x [M, D], w [D], eps) -> out [M, D]     Hugging Face's RMSNorm
"""
import ctypes as C
import csv
import importlib
import os
import tempfile

from . import _abi

__all__ = ["check", "run", "bf16_to_f32", "f32_to_bf16", "library", "load_function", "OPS"]

OPS = ("gemm", "rmsnorm")  # the ops the bridge adapts today

_here = os.path.dirname(os.path.abspath(__file__))
_lib = None
_keep = []  # tables and callbacks must outlive every call invar makes through them


def library(path=None):
    """libinvar.so: `path`, else $INVAR_LIB, else the build/ of the checkout this module is in."""
    global _lib
    if _lib is None:
        path = path or os.environ.get("INVAR_LIB") or os.path.join(_here, "..", "..", "build", "libinvar.so")
        if not os.path.exists(path):
            raise FileNotFoundError(f"{path}: no libinvar.so (make builds it; or set INVAR_LIB)")
        _lib = C.CDLL(os.path.abspath(path))
        _lib.invar_cli.argtypes = [C.c_int, C.POINTER(C.c_char_p)]
        _lib.invar_cli.restype = C.c_int
        _lib.invar_plugin_register.argtypes = [C.c_char_p, C.POINTER(_abi.Plugin), C.c_char_p, C.c_int]
        _lib.invar_plugin_register.restype = C.c_bool
    return _lib


def load_function(spec):
    """'package.module:function' -> the function."""
    module, sep, name = spec.partition(":")
    if not sep or not module or not name:
        raise ValueError(f"--fn {spec}: expected MODULE:FUNCTION")
    obj = importlib.import_module(module)
    for part in name.split("."):
        obj = getattr(obj, part)
    if not callable(obj):
        raise ValueError(f"--fn {spec}: not callable")
    return obj


# --- bf16 on numpy ---------------------------------------------------------------------------

def bf16_to_f32(a):
    import numpy as np
    return (np.asarray(a, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16(a):
    """Round to nearest even, a NaN kept quiet (kernels/bf16.h's float_to_bf16)."""
    import numpy as np
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    quiet = ((u >> 16) | 0x40).astype(np.uint16)
    return np.where(nan, quiet, rounded)


# --- views over invar's memory ---------------------------------------------------------------

class _Host:
    """numpy arrays over host pointers."""

    def __init__(self):
        import numpy as np
        self.np = np

    def view(self, ptr, shape, ld, dtype):
        np = self.np
        dt = np.dtype(np.uint16 if dtype == "bf16" else np.float32)
        rows, cols = shape if len(shape) == 2 else (1, shape[0])
        span = (rows - 1) * ld + cols if rows else 0
        base = np.ctypeslib.as_array(C.cast(ptr, C.POINTER(C.c_uint8)), shape=(span * dt.itemsize,)).view(dt)
        return np.lib.stride_tricks.as_strided(base, shape=shape,
                                               strides=(ld * dt.itemsize, dt.itemsize)[-len(shape):])

    def store(self, out, result, out_dtype):
        np = self.np
        r = np.asarray(result)
        if r.shape != out.shape:
            raise ValueError(f"returned shape {r.shape}, expected {out.shape}")
        if out_dtype == "bf16":
            r = r if r.dtype == np.uint16 else f32_to_bf16(r.astype(np.float32))
        else:
            r = bf16_to_f32(r) if r.dtype == np.uint16 else r.astype(np.float32)
        out[...] = r

    def run(self, call, fn):
        return fn()


class _Cuda:
    """torch tensors over device pointers, the function on invar's stream."""

    def __init__(self):
        import torch
        self.torch = torch

    def view(self, ptr, shape, ld, dtype):
        torch = self.torch
        typestr = {"bf16": "<i2", "f32": "<f4"}[dtype]
        item = 2 if dtype == "bf16" else 4
        strides = (ld * item, item)[-len(shape):]

        class _Iface:
            __cuda_array_interface__ = {"shape": tuple(shape), "typestr": typestr, "data": (ptr, False),
                                        "strides": strides, "version": 3, "stream": None}
        t = torch.as_tensor(_Iface(), device="cuda")
        return t.view(torch.bfloat16) if dtype == "bf16" else t

    def store(self, out, result, out_dtype):
        if tuple(result.shape) != tuple(out.shape):
            raise ValueError(f"returned shape {tuple(result.shape)}, expected {tuple(out.shape)}")
        out.copy_(result.to(out.dtype))  # fp32 to bf16: torch rounds to nearest even

    def run(self, call, fn):
        torch = self.torch
        stream = torch.cuda.ExternalStream(call.contents.stream, device=call.contents.device)
        with torch.cuda.device(call.contents.device), torch.cuda.stream(stream):
            return fn()


# --- the ops' adapters: invar's arguments to the function's ----------------------------------

def _failing(fn):
    """The callback around an adapter: an exception becomes invar_plugin_call.fail."""
    def callback(call, *args):
        try:
            fn(call, *args)
        except BaseException as e:  # noqa: BLE001 — every failure is the op's ERROR row
            lines = [l for l in f"{type(e).__name__}: {e}".splitlines() if l.strip()]
            call.contents.fail(call, (lines[-1] if lines else type(e).__name__).encode()[:400])
    return callback


def _gemm_adapter(mem, fn):
    def gemm(call, a):
        a = a.contents
        for b in range(max(a.batch, 1)):
            x = mem.view(a.x + b * a.stride_x * 2, (a.M, a.K), a.ldx or a.K, "bf16")
            w = mem.view(a.w + b * a.stride_w * 2, (a.N, a.K), a.ldw or a.K, "bf16")
            out_t = "f32" if a.y_f32 else "bf16"
            y = mem.view(a.y + b * a.stride_y * (4 if a.y_f32 else 2), (a.M, a.N), a.ldy or a.N, out_t)
            mem.run(call, lambda: mem.store(y, fn(x, w), out_t))
    return _abi.GemmFn(_failing(gemm))


def _rmsnorm_adapter(mem, fn):
    def rmsnorm(call, out, ld_out, x, ld_x, w, M, D, eps):
        xv = mem.view(x, (M, D), ld_x or D, "bf16")
        wv = mem.view(w, (D,), D, "bf16")
        ov = mem.view(out, (M, D), ld_out or D, "bf16")
        mem.run(call, lambda: mem.store(ov, fn(xv, wv, eps), "bf16"))
    return _abi.RmsnormFn(_failing(rmsnorm))


_ADAPTERS = {"gemm": _gemm_adapter, "rmsnorm": _rmsnorm_adapter}
_tables = 0


def _register(fns, device, claims, name):
    """A plugin table of these functions, registered as plugin:NAME; returns the set's name."""
    global _tables
    unknown = set(fns) - set(_ADAPTERS)
    if unknown:
        raise ValueError(f"ops {sorted(unknown)}: the bridge adapts {sorted(_ADAPTERS)}")
    mem = _Cuda() if device == "cuda" else _Host()
    table = _abi.Plugin()
    table.abi_version = _abi.ABI_VERSION
    _tables += 1
    name = f"python:{name}#{_tables}"
    table.name = name.encode()
    table.device = device.encode()
    claimed = fns if claims else ()
    table.invariant_claims = sum(_abi.op_bit(op) for op in claimed)
    callbacks = []
    for op, fn in fns.items():
        cb = _ADAPTERS[op](mem, fn)
        setattr(table, op, cb)
        callbacks.append(cb)
    err = C.create_string_buffer(1024)
    if not library().invar_plugin_register(name.encode(), C.byref(table), err, len(err)):
        raise ValueError(err.value.decode())
    _keep.append((table, callbacks))
    return name


def _cli(*args):
    argv = [b"invar"] + [str(a).encode() for a in args]
    arr = (C.c_char_p * (len(argv) + 1))(*argv, None)
    return library().invar_cli(len(argv), arr)


def _rows(out):
    path = os.path.join(out, "kernels.csv")
    if not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def check(op, fn, device="cpu", claims_invariant=True, quick=False, out=None, args=()):
    """`invar kernels --op OP` on a Python function: returns (exit code, kernels.csv's rows).
    claims_invariant: the function claims batch invariance (a variance FAILs); False: it is a
    non-invariant kernel and must be caught varying."""
    out = out or tempfile.mkdtemp(prefix="invar-bridge-")
    name = _register({op: fn}, device, claims_invariant, getattr(fn, "__qualname__", op))
    rc = _cli("kernels", "--plugin", name, "--device", device, "--op", op, "--out", out,
              *(["--quick"] if quick else []), *args)
    return rc, _rows(out)


def run(case, fns, device="cpu", claims_invariant=True, out=None, args=()):
    """`invar run --case CASE` with the engine's ops `fns` ({op: function}) taken from Python,
    the others the invariant set's; returns the exit code (reports under out)."""
    out = out or tempfile.mkdtemp(prefix="invar-bridge-run-")
    name = _register(dict(fns), device, claims_invariant, "+".join(sorted(fns)))
    return _cli("run", "--case", case, "--kernel-set", "plugin:" + name, "--out", out, *args)
