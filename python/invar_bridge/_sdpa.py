"""python/invar_bridge/_sdpa.py — ops.h's mha_prefill through a function called as torch's
scaled_dot_product_attention:

    fn(q [B, H, L, E], k [B, H, S, E], v [B, H, S, Dv], attn_mask [B, 1, L, S], scale)
        -> out [B, H, L, Dv]   or   (out, lse [B, H, L])

The call's T query tokens are grouped into sequences: a run of consecutive tokens with the same
key_begin whose key_end grows by one each (the causal chunk at a sequence's end, as the checker
and the engine lay them out; any other token starts a sequence of its own). Sequence b is row b
of the batch, its queries from row 0, its keys from column 0, both padded to the call's longest
(a padded batch, as an engine would hand a batched kernel); attn_mask is True where a query may
attend (the causal limit, aligned to the end; padded keys never). E = nope + R: a key is
kv[j, h, :nope] followed by k_pe[j]; a value kv[j, h, nope:].

The log-sum-exp, the op's second output:
- returned by the function: natural log, or base 2 when the caller says so (lse_base=2; Triton's
  flash kernels keep log2), converted here by ln 2;
- not returned: computed here in float64, sequence by sequence over that sequence's own keys
  (the same arithmetic whatever the batch), so only `out` is the function's.
A token with no key (key_begin == key_end) gets out = 0 and lse = -inf, as ops.h defines it,
whatever the function returned there."""
import math

import numpy as np


def sequences(begin, end):
    """Runs of tokens: [(first token, tokens, first key, keys)]."""
    runs = []
    T = len(begin)
    t = 0
    while t < T:
        n = 1
        while t + n < T and begin[t + n] == begin[t] and end[t + n] == end[t + n - 1] + 1:
            n += 1
        runs.append((t, n, int(begin[t]), int(end[t + n - 1]) - int(begin[t])))
        t += n
    return runs


def layout(begin, end):
    """The padded batch's index arrays: (runs, token -> (b, i), q_index [B, L], k_index [B, S],
    mask [B, 1, L, S])."""
    runs = sequences(begin, end)
    B = len(runs)
    L = max(n for _, n, _, _ in runs)
    S = max(max(keys, 1) for _, _, _, keys in runs)
    q_index = np.zeros((B, L), dtype=np.int64)
    k_index = np.zeros((B, S), dtype=np.int64)
    mask = np.zeros((B, 1, L, S), dtype=bool)
    tok_b = np.empty(len(begin), dtype=np.int64)
    tok_i = np.empty(len(begin), dtype=np.int64)
    cols = np.arange(S)
    for b, (t0, n, k0, keys) in enumerate(runs):
        q_index[b, :n] = np.arange(t0, t0 + n)
        q_index[b, n:] = t0
        k_index[b, :keys] = np.arange(k0, k0 + keys)
        limit = np.asarray(end[t0:t0 + n], dtype=np.int64) - k0  # keys each query attends
        mask[b, 0, :n, :] = cols[None, :] < limit[:, None]
        mask[b, 0, n:, 0] = True  # padded queries: one key, so no row is all masked
        tok_b[t0:t0 + n] = b
        tok_i[t0:t0 + n] = np.arange(n)
    return runs, tok_b, tok_i, q_index, k_index, mask


def _lse_float64(q, k, runs, scale):
    """[T, H] fp32: log sum_j e^(scale q·k_j) over each token's keys, in float64, a sequence at
    a time. q [T, H, E] and k [keys, H, E] as float64 numpy arrays."""
    T, H = q.shape[0], q.shape[1]
    lse = np.full((T, H), -np.inf, dtype=np.float64)
    for t0, n, k0, keys in runs:
        if keys == 0:
            continue
        s = np.einsum("thd,jhd->thj", q[t0:t0 + n], k[k0:k0 + keys]) * scale
        limit = np.arange(keys - n + 1, keys + 1)
        s = np.where(np.arange(keys)[None, None, :] < limit[:, None, None], s, -np.inf)
        m = s.max(axis=2, keepdims=True)
        lse[t0:t0 + n] = (m + np.log(np.exp(s - m).sum(axis=2, keepdims=True)))[:, :, 0]
    return lse.astype(np.float32)


def run(mem, call, fn, a, lse_base):
    T, H, nope, R, Dv = a.T, a.H, a.nope, a.R, a.v
    if T == 0:
        return
    E = nope + R
    begin = np.array(mem.to_host(mem.view(a.key_begin, (T,), 1, "i32")), dtype=np.int64)
    end = np.array(mem.to_host(mem.view(a.key_end, (T,), 1, "i32")), dtype=np.int64)
    keys = int(end.max()) if T else 0
    empty = begin >= end
    lse_out = mem.view(a.lse, (T, H), H, "f32")
    out = mem.strided(a.out, (T, H, Dv), (a.ld_out, Dv, 1), "bf16")
    if empty.all():  # no key anywhere: nothing for the function to do
        mem.store(out, mem.from_host(np.zeros((T, H, Dv), dtype=np.uint16)), "bf16")
        mem.store(lse_out, mem.from_host(np.full((T, H), -np.inf, dtype=np.float32)), "f32")
        return
    runs, tok_b, tok_i, q_index, k_index, mask = layout(begin, end)
    q = mem.strided(a.q, (T, H, E), (a.ld_q, E, 1), "bf16")
    rows = keys
    kv = mem.strided(a.kv, (rows, H, nope + Dv), (a.ld_kv, nope + Dv, 1), "bf16")
    k_pe = mem.strided(a.k_pe, (rows, R), (a.ld_k_pe, 1), "bf16")

    xp = _Backend(mem)
    k_full = xp.cat(kv[:, :, :nope], xp.expand(k_pe, (rows, H, R)))  # [keys, H, E]
    v_full = kv[:, :, nope:]
    qi, ki = xp.index(q_index), xp.index(k_index)
    qb = xp.permute(q[qi])         # [B, L, H, E] -> [B, H, L, E]
    kb = xp.permute(k_full[ki])
    vb = xp.permute(v_full[ki])
    result = mem.run(call, fn, qb, kb, vb, xp.mask(mask), float(a.scale))
    out_b, lse_b = result if isinstance(result, tuple) else (result, None)
    B, L = q_index.shape
    if tuple(out_b.shape) != (B, H, L, Dv):
        raise ValueError(f"returned out of shape {tuple(out_b.shape)}, expected {(B, H, L, Dv)}")
    tb, ti = xp.index(tok_b), xp.index(tok_i)
    o = out_b[tb, :, ti, :]        # [T, H, Dv]
    if lse_b is None:
        lse = _lse_float64(xp.float64(q), xp.float64(k_full), runs, float(a.scale))
    else:
        if tuple(lse_b.shape) != (B, H, L):
            raise ValueError(f"returned lse of shape {tuple(lse_b.shape)}, expected {(B, H, L)}")
        lse = np.array(mem.to_host(lse_b[tb, :, ti]), dtype=np.float32)
        if lse_base == 2:
            lse = (lse.astype(np.float64) * math.log(2.0)).astype(np.float32)
        elif lse_base not in (None, math.e, "e"):
            raise ValueError(f"lse_base {lse_base}: e or 2")
    if empty.any():
        o = xp.zero_rows(o, empty)
        lse[empty] = -np.inf
    mem.store(out, o, "bf16")
    mem.store(lse_out, mem.from_host(lse), "f32")


class _Backend:
    """The few array operations the layout needs, on numpy (host) or torch (CUDA) arrays."""

    def __init__(self, mem):
        self.mem = mem
        self.torch = getattr(mem, "torch", None)

    def index(self, a):
        return a if self.torch is None else self.torch.as_tensor(a, device="cuda")

    def mask(self, m):
        return m if self.torch is None else self.torch.as_tensor(m, device="cuda")

    def cat(self, a, b):
        return np.concatenate([a, b], axis=2) if self.torch is None else self.torch.cat([a, b], dim=2)

    def expand(self, a, shape):
        """[rows, R] to [rows, H, R], every head the same row."""
        return np.broadcast_to(a[:, None, :], shape) if self.torch is None else a.unsqueeze(1).expand(*shape)

    def permute(self, a):
        return np.ascontiguousarray(a.transpose(0, 2, 1, 3)) if self.torch is None \
            else a.permute(0, 2, 1, 3).contiguous()

    def float64(self, a):
        if self.torch is None:
            return (np.asarray(a, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32).astype(np.float64)
        return a.double().cpu().numpy()

    def zero_rows(self, o, rows):
        if self.torch is None:
            o = np.array(o)
            o[rows] = 0
            return o
        o = o.clone()
        o[self.torch.as_tensor(rows, device="cuda")] = 0
        return o
