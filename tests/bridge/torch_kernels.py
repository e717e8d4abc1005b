"""tests/bridge/torch_kernels.py — PyTorch's own kernels as bridge functions (CUDA tensors in, as the
bridge hands them over), for the bridge's cost on a GPU (tests/bridge/overhead.py --device cuda)
and as examples of the command line:
    python3 -m invar_bridge kernels --op rmsnorm --fn torch_kernels:rms_norm --device cuda"""
import torch
import torch.nn.functional as F


def rms_norm(x, w, eps):
    """F.rms_norm over the last dimension."""
    return F.rms_norm(x, (x.shape[-1],), w, eps)


def log_softmax(logits):
    """torch.log_softmax over the vocabulary; the bridge takes the token and the top-k."""
    return torch.log_softmax(logits, dim=-1)
