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
    logprobs(logits [R, V] fp32) -> [R, V]          log_softmax; token and top-k: _select.py
    mha_prefill(q, k, v, attn_mask, scale) -> out or (out, lse)
                                                    as scaled_dot_product_attention over a
                                                    padded batch of sequences: _sdpa.py
"""
import ctypes as C
import csv
import importlib
import os
import tempfile

from . import _abi

__all__ = ["check", "run", "bf16_to_f32", "f32_to_bf16", "library", "load_function", "OPS"]

OPS = ("gemm", "rmsnorm", "logprobs", "mha_prefill")  # the ops the bridge adapts
# Kernel-checker sections that check another op's function: gemm_f32 is the gemm function through
# its fp32 store (the lm_head's logits; TP-size invariance's slice partials), a path of its own.
CHECK_OPS = {"gemm_f32": "gemm"}

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
    return np.left_shift(np.asarray(a, dtype=np.uint16), 16, dtype=np.uint32).view(np.float32)


def f32_to_bf16(a):
    """Round to nearest even, a NaN kept quiet (kernels/bf16.h's float_to_bf16). In place on one
    uint32 temporary: the bridge converts every bf16 output a function returns in fp32."""
    import numpy as np
    f = np.ascontiguousarray(a, dtype=np.float32)
    u = f.view(np.uint32)
    r = (u >> 16) & 1
    r += u
    r += 0x7FFF  # a NaN may wrap here: it is replaced below
    r >>= 16
    out = r.astype(np.uint16)
    nan = np.isnan(f)
    if nan.any():
        out[nan] = ((u[nan] >> 16) | 0x40).astype(np.uint16)
    return out


# --- views over invar's memory ---------------------------------------------------------------

_ITEM = {"bf16": (2, "<u2"), "f32": (4, "<f4"), "i32": (4, "<i4"), "u64": (8, "<u8")}


class _NoContext:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


_NO_CONTEXT = _NoContext()


class _ArrayInterface:
    """An object numpy (or torch) reads as an array over a raw pointer."""
    __slots__ = ("__array_interface__", "__cuda_array_interface__")


class _Views:
    """Arrays over invar's pointers, made once per (pointer, shape, strides, dtype): the checker
    calls an op many times on the same buffers, and a view costs more than the call's arithmetic
    at small shapes. A view owns nothing, so one kept past its buffer is never read again unless
    invar passes that pointer with that shape again, when it is the buffer's view."""

    def __init__(self, make):
        self.make = make
        self.cache = {}

    def view(self, ptr, shape, strides, dtype):
        key = (ptr, shape, strides, dtype)
        v = self.cache.get(key)
        if v is None:
            if len(self.cache) >= 4096:
                self.cache.clear()
            v = self.cache[key] = self.make(ptr or 0, shape, strides, dtype)
        return v


class _Host:
    """numpy arrays over host pointers."""
    device = "cpu"

    def __init__(self):
        import numpy as np
        self.np = np
        self.views = _Views(self._make)

    def _make(self, ptr, shape, strides, dtype):
        item, typestr = _ITEM[dtype]
        holder = _ArrayInterface()
        holder.__array_interface__ = {"data": (ptr, False), "shape": shape, "typestr": typestr,
                                      "strides": tuple(s * item for s in strides), "version": 3}
        return self.np.asarray(holder)

    def view(self, ptr, shape, ld, dtype):
        """A [rows, cols] matrix of row stride ld, or a vector."""
        strides = (ld, 1) if len(shape) == 2 else (1,)
        return self.views.view(ptr, shape, strides, dtype)

    def strided(self, ptr, shape, strides, dtype):
        return self.views.view(ptr, shape, strides, dtype)

    def store(self, out, result, out_dtype):
        np = self.np
        if type(result) is not np.ndarray:
            result = np.asarray(result)
        if result.shape != out.shape:
            raise ValueError(f"returned shape {result.shape}, expected {out.shape}")
        if out_dtype == "bf16":
            out[...] = result if result.dtype == np.uint16 else f32_to_bf16(result)
        elif result.dtype == np.uint16:
            out[...] = bf16_to_f32(result)
        else:
            out[...] = result

    def to_host(self, a):
        return a

    def from_host(self, a):
        return a

    def on_stream(self, call):
        return _NO_CONTEXT

    def run(self, call, fn, *args):
        return fn(*args)


class _Cuda:
    """torch tensors over device pointers, the function on invar's stream."""
    device = "cuda"

    def __init__(self):
        import numpy as np
        import torch
        self.np = np
        self.torch = torch
        self.views = _Views(self._make)
        self.streams = {}

    def _make(self, ptr, shape, strides, dtype):
        torch = self.torch
        item, typestr = _ITEM[dtype]
        typestr = "<i2" if dtype == "bf16" else typestr  # torch reads no <u2
        holder = _ArrayInterface()
        holder.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "data": (ptr, False),
                                           "strides": tuple(s * item for s in strides), "version": 3,
                                           "stream": None}
        t = torch.as_tensor(holder, device="cuda")
        return t.view(torch.bfloat16) if dtype == "bf16" else t

    def view(self, ptr, shape, ld, dtype):
        strides = (ld, 1) if len(shape) == 2 else (1,)
        return self.views.view(ptr, shape, strides, dtype)

    def strided(self, ptr, shape, strides, dtype):
        return self.views.view(ptr, shape, strides, dtype)

    def store(self, out, result, out_dtype):
        if tuple(result.shape) != tuple(out.shape):
            raise ValueError(f"returned shape {tuple(result.shape)}, expected {tuple(out.shape)}")
        out.copy_(result.to(out.dtype))  # fp32 to bf16: torch rounds to nearest even

    def to_host(self, t):
        t = t.float() if t.dtype == self.torch.bfloat16 else t
        return t.cpu().numpy()

    def from_host(self, a):
        return self.torch.as_tensor(a, device="cuda")

    def on_stream(self, call):
        """The call's device and stream current for everything the adapter does in torch (the
        gathers and copies too): work on another stream would race with invar's."""
        torch = self.torch
        c = call.contents
        stream = self.streams.get((c.stream, c.device))
        if stream is None:
            stream = self.streams[(c.stream, c.device)] = torch.cuda.ExternalStream(c.stream, device=c.device)
        return _CudaContext(torch.cuda.device(c.device), torch.cuda.stream(stream))

    def run(self, call, fn, *args):
        return fn(*args)


class _CudaContext:
    def __init__(self, *contexts):
        self.contexts = contexts

    def __enter__(self):
        for c in self.contexts:
            c.__enter__()

    def __exit__(self, *exc):
        for c in reversed(self.contexts):
            c.__exit__(*exc)
        return False


# --- the ops' adapters: invar's arguments to the function's ----------------------------------

def _failing(mem, fn):
    """The callback around an adapter: the whole adapter on the call's stream; an exception
    becomes invar_plugin_call.fail."""
    def callback(call, *args):
        try:
            with mem.on_stream(call):
                fn(call, *args)
        except BaseException as e:  # noqa: BLE001 — every failure is the op's ERROR row
            lines = [l for l in f"{type(e).__name__}: {e}".splitlines() if l.strip()]
            call.contents.fail(call, (lines[-1] if lines else type(e).__name__).encode()[:400])
    return callback


def _gemm_adapter(mem, fn, options):
    def gemm(call, a):
        a = a.contents
        out_t, out_item = ("f32", 4) if a.y_f32 else ("bf16", 2)
        M, N, K = a.M, a.N, a.K
        ldx, ldw, ldy = a.ldx or K, a.ldw or K, a.ldy or N
        for b in range(max(a.batch, 1)):
            x = mem.view(a.x + b * a.stride_x * 2, (M, K), ldx, "bf16")
            w = mem.view(a.w + b * a.stride_w * 2, (N, K), ldw, "bf16")
            y = mem.view(a.y + b * a.stride_y * out_item, (M, N), ldy, out_t)
            mem.store(y, mem.run(call, fn, x, w), out_t)
    return _abi.GemmFn(_failing(mem, gemm))


def _rmsnorm_adapter(mem, fn, options):
    def rmsnorm(call, out, ld_out, x, ld_x, w, M, D, eps):
        xv = mem.view(x, (M, D), ld_x or D, "bf16")
        wv = mem.view(w, (D,), D, "bf16")
        ov = mem.view(out, (M, D), ld_out or D, "bf16")
        mem.store(ov, mem.run(call, fn, xv, wv, eps), "bf16")
    return _abi.RmsnormFn(_failing(mem, rmsnorm))


def _logprobs_adapter(mem, fn, options):
    """fn(logits [R, V] fp32) -> log_softmax [R, V]; the sampled token and the top-k are taken
    from them here as ops.h defines them (_select.py), on the host."""
    from . import _select

    def logprobs(call, a):
        a = a.contents
        R, V, k = a.R, a.V, a.k
        if R == 0:
            return
        logits = mem.view(a.logits, (R, V), V, "f32")
        lp = mem.run(call, fn, logits)
        if tuple(lp.shape) != (R, V):
            raise ValueError(f"returned shape {tuple(lp.shape)}, expected {(R, V)}")
        lp_host = mem.to_host(lp)
        logits_host = mem.to_host(logits)
        temperature = mem.to_host(mem.view(a.temperature, (R,), 1, "f32"))
        seed = mem.to_host(mem.view(a.noise_seed, (R,), 1, "u64"))
        position = mem.to_host(mem.view(a.position, (R,), 1, "i32"))
        token, token_lp, ids, top = _select.select(logits_host, lp_host, temperature, seed, position, k)
        mem.store(mem.view(a.token, (R,), 1, "i32"), mem.from_host(token), "i32")
        mem.store(mem.view(a.token_logprob, (R,), 1, "f32"), mem.from_host(token_lp), "f32")
        if k:
            mem.store(mem.view(a.topk_ids, (R, k), k, "i32"), mem.from_host(ids), "i32")
            mem.store(mem.view(a.topk_logprobs, (R, k), k, "f32"), mem.from_host(top), "f32")
    return _abi.LogprobsFn(_failing(mem, logprobs))


def _mha_prefill_adapter(mem, fn, options):
    """fn(q [B, H, L, E], k [B, H, S, E], v [B, H, S, v], attn_mask [B, 1, L, S], scale) as
    torch's scaled_dot_product_attention (attn_mask True: attend) -> out [B, H, L, v], or
    (out, lse [B, H, L]); the call's tokens grouped into sequences (_sdpa.py)."""
    from . import _sdpa
    lse_base = options.get("lse_base")

    def mha_prefill(call, a):
        _sdpa.run(mem, call, fn, a.contents, lse_base)
    return _abi.MhaPrefillFn(_failing(mem, mha_prefill))


_ADAPTERS = {"gemm": _gemm_adapter, "rmsnorm": _rmsnorm_adapter, "logprobs": _logprobs_adapter,
             "mha_prefill": _mha_prefill_adapter}
_tables = 0


def _function_name(fn):
    """module:qualname, as --fn names it."""
    return f"{getattr(fn, '__module__', None) or '?'}:{getattr(fn, '__qualname__', None) or type(fn).__name__}"


def _register(fns, device, claims, options=None):
    """A plugin table of these functions, registered as plugin:NAME; returns the set's name,
    which says where each op comes from (python:OP=MODULE:FUNCTION,...#N), so the reports of a
    run on it name the function behind each op."""
    global _tables
    unknown = set(fns) - set(_ADAPTERS)
    if unknown:
        raise ValueError(f"ops {sorted(unknown)}: the bridge adapts {sorted(_ADAPTERS)}")
    mem = _Cuda() if device == "cuda" else _Host()
    table = _abi.Plugin()
    table.abi_version = _abi.ABI_VERSION
    _tables += 1
    sources = ",".join(f"{op}={_function_name(fn)}" for op, fn in sorted(fns.items()))
    name = f"python:{sources}"[:240] + f"#{_tables}"
    table.name = name.encode()
    table.device = device.encode()
    claimed = fns if claims else ()
    table.invariant_claims = sum(_abi.op_bit(op) for op in claimed)
    callbacks = []
    for op, fn in fns.items():
        cb = _ADAPTERS[op](mem, fn, dict(options or {}))
        setattr(table, op, cb)
        callbacks.append(cb)
    err = C.create_string_buffer(1024)
    if not library().invar_plugin_register(name.encode(), C.byref(table), err, len(err)):
        raise ValueError(err.value.decode())
    _keep.append((table, callbacks, mem))
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


def check(op, fn, device="cpu", claims_invariant=True, quick=False, out=None, args=(), lse_base=None):
    """`invar kernels --op OP` on a Python function: returns (exit code, kernels.csv's rows). OP may
    be a checker section of another op's function (CHECK_OPS: gemm_f32 checks a gemm function).
    claims_invariant: the function claims batch invariance (a variance FAILs); False: it is a
    non-invariant kernel and must be caught varying. lse_base (mha_prefill): 2 when the function
    returns a base-2 log-sum-exp (Triton's flash kernels keep one); None: e, or the function's
    `invar_lse_base` attribute."""
    out = out or tempfile.mkdtemp(prefix="invar-bridge-")
    name = _register({CHECK_OPS.get(op, op): fn}, device, claims_invariant, {"lse_base": lse_base or getattr(fn, "invar_lse_base", None)})
    rc = _cli("kernels", "--plugin", name, "--device", device, "--op", op, "--out", out,
              *(["--quick"] if quick else []), *args)
    return rc, _rows(out)


def run(case, fns, device="cpu", claims_invariant=True, out=None, args=(), lse_base=None):
    """`invar run --case CASE` with the engine's ops `fns` ({op: function}) taken from Python,
    the others the invariant set's; returns the exit code (reports under out, whose kernel_set
    column names each op's function)."""
    out = out or tempfile.mkdtemp(prefix="invar-bridge-run-")
    fns = dict(fns)
    base = lse_base or getattr(fns.get("mha_prefill"), "invar_lse_base", None)
    name = _register(fns, device, claims_invariant, {"lse_base": base})
    return _cli("run", "--case", case, "--kernel-set", "plugin:" + name, "--out", out, *args)
