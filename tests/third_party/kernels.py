"""tests/third_party/kernels.py — the third-party kernels tests/gpu_third_party.sh judges, each as an
ops.h op through a stated adapter, and the ones it does not judge, with the reason.

A kernel is KERNELS' entry: (name, source, op, adapter, claims, load). load() returns the
function in the bridge's calling convention (python/invar_bridge: gemm fn(x [M, K], w [N, K]),
rmsnorm fn(x, w, eps), logprobs fn(logits [R, V]) -> log_softmax, mha_prefill fn(q, k, v,
attn_mask, scale) as scaled_dot_product_attention), or raises Missing with what to put where.
Third-party source is never in this repository: it is read from THIRD_PARTY_DIR (default
third_party/ at the checkout's root, listed in .gitignore)."""
import importlib.util
import os
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

TML_REPO = "https://github.com/thinking-machines-lab/batch_invariant_ops"
VLLM_REPO = "https://github.com/vllm-project/vllm"


class Missing(Exception):
    """The kernel's source is not where it is looked for."""


def third_party_dir():
    return os.environ.get("THIRD_PARTY_DIR") or os.path.join(ROOT, "third_party")


def digest(source):
    """sha256 (12 hex digits) of a third-party source file, or '' when absent or not third-party."""
    import hashlib
    rel = {"thinking-machines batch_invariant_ops": "batch_invariant_ops/batch_invariant_ops.py",
           "vllm batch_invariant.py": "vllm/batch_invariant.py"}.get(source)
    path = rel and os.path.join(third_party_dir(), rel)
    if not path or not os.path.isfile(path):
        return ""
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()[:12]


def _load_file(name, path, what):
    if not os.path.isfile(path):
        raise Missing(f"{what}: put it at {path}")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def tml():
    """Thinking Machines' batch_invariant_ops/batch_invariant_ops.py (torch and triton only)."""
    path = os.path.join(third_party_dir(), "batch_invariant_ops", "batch_invariant_ops.py")
    return _load_file("third_party_tml_batch_invariant_ops", path,
                      f"{TML_REPO}: batch_invariant_ops/batch_invariant_ops.py")


def vllm():
    """vLLM's vllm/model_executor/layers/batch_invariant.py, with the few vllm modules it imports
    at load time stood in for (the Triton kernels themselves need only torch and triton)."""
    path = os.path.join(third_party_dir(), "vllm", "batch_invariant.py")
    if not os.path.isfile(path):
        raise Missing(f"{VLLM_REPO}: vllm/model_executor/layers/batch_invariant.py: put it at {path}")
    import torch
    import triton
    import triton.language as tl

    def stub(name, **attrs):
        m = sys.modules.get(name) or types.ModuleType(name)
        for k, v in attrs.items():
            setattr(m, k, v)
        sys.modules[name] = m
        return m

    class _Platform:
        dispatch_key = "CUDA"

        @staticmethod
        def is_cuda():
            return True

        @staticmethod
        def is_xpu():
            return False

        @staticmethod
        def is_device_capability_family(family):
            return torch.cuda.get_device_capability()[0] * 10 == family

    def num_compute_units(device=0):
        return torch.cuda.get_device_properties(device).multi_processor_count

    def shared_memory_bytes(device=0):
        return torch.cuda.get_device_properties(device).shared_memory_per_block_optin

    def torch_at_least(version):
        from packaging.version import Version
        return Version(torch.__version__.split("+")[0]) >= Version(version)

    stub("vllm")
    stub("vllm.envs")
    stub("vllm.platforms", current_platform=_Platform())
    stub("vllm.triton_utils", tl=tl, triton=triton)
    stub("vllm.utils")
    stub("vllm.utils.mem_utils", get_max_shared_memory_bytes=shared_memory_bytes)
    stub("vllm.utils.platform_utils", num_compute_units=num_compute_units)
    stub("vllm.utils.torch_utils", is_torch_equal_or_newer=torch_at_least)
    stub("vllm.logger", init_logger=lambda name: __import__("logging").getLogger(name))

    class AttentionBackendEnum:  # named in a signature of the file's engine setup only
        pass

    for name in ("vllm.v1", "vllm.v1.attention", "vllm.v1.attention.backends"):
        stub(name)
    stub("vllm.v1.attention.backends.registry", AttentionBackendEnum=AttentionBackendEnum)
    return _load_file("third_party_vllm_batch_invariant", path, VLLM_REPO)


# --- adapters --------------------------------------------------------------------------------

def _torch():
    import torch
    import torch.nn.functional as F
    return torch, F


def torch_mm():
    torch, _ = _torch()
    return lambda x, w: torch.mm(x, w.t())


def torch_linear():
    _, F = _torch()
    return lambda x, w: F.linear(x, w)


def torch_bmm():
    torch, _ = _torch()
    return lambda x, w: torch.bmm(x.unsqueeze(0), w.t().unsqueeze(0))[0]


def torch_rms_norm():
    _, F = _torch()
    return lambda x, w, eps: F.rms_norm(x, (x.shape[-1],), w, eps)


def torch_log_softmax():
    torch, _ = _torch()
    return lambda logits: torch.log_softmax(logits, dim=-1)


def sdpa(backend_name):
    """F.scaled_dot_product_attention with one backend allowed. The flash backend takes no
    boolean mask and equal q/k/v head dims, so for it the padded batch is re-laid: each
    sequence's keys moved to the end (causal_lower_right then bounds every query as the mask
    did), the padding in front of them given a score of -30000 * scale through one extra
    q/k column (e^score is 0 in fp32), and q, k, v zero-padded to a head dim of E + 8."""
    torch, F = _torch()
    from torch.nn.attention import SDPBackend, sdpa_kernel
    backend = getattr(SDPBackend, backend_name)

    def plain(q, k, v, attn_mask, scale):
        with sdpa_kernel([backend]):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, scale=scale)

    def flash(q, k, v, attn_mask, scale):
        from torch.nn.attention.bias import causal_lower_right
        B, H, L, E = q.shape
        S, Dv = k.shape[2], v.shape[3]
        mask = attn_mask[:, 0]
        keys = mask.any(dim=1).sum(dim=1)                       # [B]
        i = torch.arange(L, device=q.device)[None, :, None]
        j = torch.arange(S, device=q.device)[None, None, :]
        expected = j < (keys[:, None, None] - L + 1 + i)
        if not torch.equal(expected, mask):
            raise ValueError("flash adapter: a sequence is not a causal chunk of the batch's query count")
        Ep = E + 8
        shift = (S - keys)[:, None]                             # keys move right by this
        src = torch.arange(S, device=q.device)[None, :] - shift  # [B, S] source key, < 0: padding
        valid = src >= 0
        gather = src.clamp(min=0)[:, None, :, None]
        qp = torch.zeros(B, H, L, Ep, dtype=q.dtype, device=q.device)
        qp[..., :E] = q
        qp[..., E] = 1
        kp = torch.zeros(B, H, S, Ep, dtype=k.dtype, device=k.device)
        kp[..., :E] = torch.gather(k, 2, gather.expand(B, H, S, E))
        kp[..., E] = torch.where(valid[:, None, :], 0.0, -30000.0).to(k.dtype)
        vp = torch.zeros(B, H, S, Ep, dtype=v.dtype, device=v.device)
        vp[..., :Dv] = torch.gather(v, 2, gather.expand(B, H, S, Dv)) * valid[:, None, :, None]
        with sdpa_kernel([backend]):
            out = F.scaled_dot_product_attention(qp, kp, vp, attn_mask=causal_lower_right(L, S), scale=scale)
        return out[..., :Dv]

    return flash if backend_name == "FLASH_ATTENTION" else plain


def tml_matmul():
    m = tml()
    return lambda x, w: m.matmul_persistent(x, w.t())


def tml_log_softmax():
    m = tml()
    return lambda logits: m.log_softmax(logits, dim=-1)


def vllm_matmul():
    m = vllm()
    return lambda x, w: m.matmul_persistent(x, w.t())


def vllm_bmm():
    m = vllm()
    return lambda x, w: m.bmm_batch_invariant(x.unsqueeze(0), w.t().unsqueeze(0))[0]


def vllm_rms_norm():
    m = vllm()
    return lambda x, w, eps: m.rms_norm_batch_invariant(x, w, eps)


def vllm_log_softmax():
    m = vllm()
    return lambda logits: m.log_softmax(logits, dim=-1)


# --- numpy stand-ins: the table's CPU self-test (THIRD_PARTY_FAKE=numpy) -----------------------

def numpy_kernel(name):
    sys.path.insert(0, os.path.join(ROOT, "tests", "bridge"))
    import np_kernels
    return getattr(np_kernels, name)


GEMM = "gemm: fn(x, w) = {}"
SDPA_ADAPTER = ("mha_prefill: {} over the padded batch (python/invar_bridge/_sdpa.py); lse computed "
                "by the bridge in float64, only out is the kernel's")

# (name, source, op, adapter, claims invariance, load)
KERNELS = [
    ("torch.mm", "pytorch", "gemm", GEMM.format("torch.mm(x, w.t())"), False, torch_mm),
    ("F.linear", "pytorch", "gemm", GEMM.format("F.linear(x, w)"), False, torch_linear),
    ("torch.bmm", "pytorch", "gemm", GEMM.format("torch.bmm(x[None], w.t()[None])[0]"), False, torch_bmm),
    ("F.rms_norm", "pytorch", "rmsnorm", "rmsnorm: F.rms_norm(x, (D,), w, eps)", False, torch_rms_norm),
    ("torch.log_softmax", "pytorch", "logprobs",
     "logprobs: torch.log_softmax(logits, -1); token and top-k by the bridge", False, torch_log_softmax),
    ("F.sdpa[flash]", "pytorch", "mha_prefill",
     SDPA_ADAPTER.format("SDPBackend.FLASH_ATTENTION, keys right-aligned, padding scored out, "
                         "causal_lower_right, head dim 200"), False, lambda: sdpa("FLASH_ATTENTION")),
    ("F.sdpa[efficient]", "pytorch", "mha_prefill",
     SDPA_ADAPTER.format("SDPBackend.EFFICIENT_ATTENTION with the boolean mask"), False,
     lambda: sdpa("EFFICIENT_ATTENTION")),
    ("F.sdpa[math]", "pytorch", "mha_prefill", SDPA_ADAPTER.format("SDPBackend.MATH with the boolean mask"),
     False, lambda: sdpa("MATH")),
    ("F.sdpa[cudnn]", "pytorch", "mha_prefill",
     SDPA_ADAPTER.format("SDPBackend.CUDNN_ATTENTION with the boolean mask"), False,
     lambda: sdpa("CUDNN_ATTENTION")),
    ("tml.matmul_persistent", "thinking-machines batch_invariant_ops", "gemm",
     GEMM.format("matmul_persistent(x, w.t())"), True, tml_matmul),
    ("tml.log_softmax", "thinking-machines batch_invariant_ops", "logprobs",
     "logprobs: log_softmax(logits, -1); token and top-k by the bridge", True, tml_log_softmax),
    ("vllm.matmul_persistent", "vllm batch_invariant.py", "gemm", GEMM.format("matmul_persistent(x, w.t())"),
     True, vllm_matmul),
    ("vllm.bmm_batch_invariant", "vllm batch_invariant.py", "gemm",
     GEMM.format("bmm_batch_invariant(x[None], w.t()[None])[0]"), True, vllm_bmm),
    ("vllm.rms_norm", "vllm batch_invariant.py", "rmsnorm", "rmsnorm: rms_norm_batch_invariant(x, w, eps)", True,
     vllm_rms_norm),
    ("vllm.log_softmax", "vllm batch_invariant.py", "logprobs",
     "logprobs: log_softmax(logits, -1); token and top-k by the bridge", True, vllm_log_softmax),
]

NO_OP = "no ops.h op: the checker has no float64 oracle, probes or controls for it"
NOT_JUDGED = [
    ("torch.softmax", "pytorch", NO_OP),
    ("torch.logsumexp", "pytorch", NO_OP),
    ("torch.topk", "pytorch", NO_OP + " (logprobs' top-k is the bridge's, from the log-probabilities)"),
    ("torch.mean(dim=-1)", "pytorch", NO_OP),
    ("tml.mean_dim", "thinking-machines batch_invariant_ops", NO_OP),
    ("vllm.mean_dim", "vllm batch_invariant.py", NO_OP),
]

# The CPU self-test's table: numpy functions under the same driver.
FAKE_KERNELS = [
    ("numpy.matmul", "numpy", "gemm", GEMM.format("x @ w.T in fp32"), False, lambda: numpy_kernel("matmul")),
    ("numpy.log_softmax", "numpy", "logprobs", "logprobs: np_kernels.log_softmax", True,
     lambda: numpy_kernel("log_softmax")),
    ("numpy.sdpa", "numpy", "mha_prefill", SDPA_ADAPTER.format("np_kernels.sdpa"), False,
     lambda: numpy_kernel("sdpa")),
    ("numpy.broken", "numpy", "gemm", GEMM.format("raises"), False, lambda: numpy_kernel("broken")),
    ("tml.matmul_persistent", "thinking-machines batch_invariant_ops", "gemm",
     GEMM.format("matmul_persistent(x, w.t())"), True, tml_matmul),
]

# The engine end to end: (name, gemm kernel, claims invariance)
ENGINE = [("torch.mm", torch_mm, False), ("tml.matmul_persistent", tml_matmul, True),
          ("vllm.matmul_persistent", vllm_matmul, True)]
FAKE_ENGINE = [("numpy.matmul_split_small", lambda: numpy_kernel("matmul_split_small"), False)]
