"""tests/bridge/np_kernels.py — numpy kernels the Python bridge's test judges (tests/test_bridge.sh)."""
import numpy as np

import invar_bridge as ib


def matmul(x, w):
    """numpy's matmul (OpenBLAS or whatever numpy was built with), judged as it is."""
    return ib.bf16_to_f32(x) @ ib.bf16_to_f32(w).T


def _rms(xf, w, eps, sum_squares):
    inv_rms = np.float32(1) / np.sqrt(sum_squares / np.float32(xf.shape[1]) + np.float32(eps))
    normed = ib.bf16_to_f32(ib.f32_to_bf16(xf * inv_rms))
    return ib.bf16_to_f32(w) * normed


def rmsnorm(x, w, eps):
    """Each row's sum of squares in index order: the same whatever the batch."""
    xf = ib.bf16_to_f32(x)
    sums = np.array([[np.add.reduce(r * r, dtype=np.float32)] for r in xf], dtype=np.float32) \
        if len(xf) else np.zeros((0, 1), np.float32)
    return _rms(xf, w, eps, sums)


def rmsnorm_split_small(x, w, eps):
    """A small batch "helped" by splitting rows in two, halves kept in bf16: batch-variant."""
    xf = ib.bf16_to_f32(x)
    d = xf.shape[1] // 2
    if len(xf) < 8:
        lo = ib.bf16_to_f32(ib.f32_to_bf16((xf[:, :d] ** 2).sum(axis=1, keepdims=True, dtype=np.float32)))
        hi = ib.bf16_to_f32(ib.f32_to_bf16((xf[:, d:] ** 2).sum(axis=1, keepdims=True, dtype=np.float32)))
        return _rms(xf, w, eps, lo + hi)
    return rmsnorm(x, w, eps)


def broken(x, w):
    raise RuntimeError("no kernel for this shape")


def matmul_rows(x, w):
    """One product per row (a matrix-vector product each): the same call for a row whatever the
    batch, so invariant; an adapter that mislays a stride shows as inaccuracy here."""
    wf = ib.bf16_to_f32(w)
    out = np.empty((x.shape[0], w.shape[0]), dtype=np.float32)
    for i, row in enumerate(ib.bf16_to_f32(x)):
        out[i] = wf @ row
    return out
