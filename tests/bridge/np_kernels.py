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


# --- logprobs: log_softmax over a row of logits ----------------------------------------------

def log_softmax(logits):
    """x - (max + log sum e^(x - max)) in fp32, numpy's reductions along each row."""
    x = np.asarray(logits, dtype=np.float32)
    m = x.max(axis=1, keepdims=True)
    return x - (m + np.log(np.exp(x - m).sum(axis=1, keepdims=True, dtype=np.float32)))


def log_softmax_split_small(logits):
    """A small batch "helped" by a running sum of each row (cumsum adds left to right, where sum
    adds pairwise, and halves at n/2 are pairwise's own first split in numpy 2): another order
    of the same fp32 sum, about as accurate, but batch-variant."""
    x = np.asarray(logits, dtype=np.float32)
    if len(x) >= 8:
        return log_softmax(x)
    m = x.max(axis=1, keepdims=True)
    e = np.exp(x - m)
    total = np.cumsum(e, axis=1, dtype=np.float32)[:, -1:]
    return x - (m + np.log(total))


# --- mha_prefill: attention called as torch's scaled_dot_product_attention -------------------

def _attend(q, k, v, mask, scale):
    """softmax(scale q kᵀ, masked) v and its natural log-sum-exp, fp32, over the given keys."""
    s = np.matmul(q, np.swapaxes(k, -1, -2)) * np.float32(scale)
    s = np.where(mask, s, np.float32(-np.inf))
    m = s.max(axis=-1, keepdims=True)
    p = np.exp(s - m)
    total = p.sum(axis=-1, keepdims=True, dtype=np.float32)
    return np.matmul(p / total, v), (m + np.log(total))[..., 0]


def sdpa_rows(q, k, v, attn_mask, scale):
    """One sequence at a time over its own keys only (the mask's first row of padding left
    out): the same arithmetic for a sequence whatever the batch, so invariant."""
    qf, kf, vf = (ib.bf16_to_f32(t) for t in (q, k, v))
    out = np.zeros(qf.shape[:3] + (vf.shape[3],), dtype=np.float32)
    lse = np.zeros(qf.shape[:3], dtype=np.float32)
    for b in range(qf.shape[0]):
        keys = int(attn_mask[b, 0].any(axis=0).nonzero()[0].max()) + 1
        queries = int(attn_mask[b, 0].sum(axis=1).argmax()) + 1  # the last real query sees most
        mask = attn_mask[b, :, :queries, :keys]
        out[b, :, :queries], lse[b, :, :queries] = _attend(qf[b, :, :queries], kf[b, :, :keys],
                                                           vf[b, :, :keys], mask, scale)
    return out, lse


def sdpa(q, k, v, attn_mask, scale):
    """The whole padded batch at once, as numpy's matmul and sums do it: judged as it is."""
    qf, kf, vf = (ib.bf16_to_f32(t) for t in (q, k, v))
    return _attend(qf, kf, vf, attn_mask, scale)[0]


def sdpa_log2(q, k, v, attn_mask, scale):
    """sdpa_rows with a base-2 log-sum-exp, as Triton's flash kernels keep it."""
    out, lse = sdpa_rows(q, k, v, attn_mask, scale)
    return out, (lse.astype(np.float64) / np.log(2.0)).astype(np.float32)


sdpa_log2.invar_lse_base = 2


def matmul_split_small(x, w):
    """numpy's matmul, but a call of fewer than 4 rows "helped" by summing K in two halves, each
    rounded to bf16: batch-variant (a decode step alone has 1 row, in a batch several)."""
    xf, wf = ib.bf16_to_f32(x), ib.bf16_to_f32(w)
    if len(xf) >= 4:
        return xf @ wf.T
    h = xf.shape[1] // 2
    lo = ib.bf16_to_f32(ib.f32_to_bf16(xf[:, :h] @ wf[:, :h].T))
    hi = ib.bf16_to_f32(ib.f32_to_bf16(xf[:, h:] @ wf[:, h:].T))
    return lo + hi
