"""python/invar_bridge/_select.py — what ops.h's logprobs op adds to a log_softmax: the sampled
token and the top-k, in numpy, as kernels/ops.h defines them:
  token: temperature 0: the argmax of the logits, the lower id on ties; otherwise the argmax of
         logits / temperature + invar_gumbel_noise(seed, position, id) (common/hash.h);
  token logprob: the function's log-probability of that token;
  top-k: ids in descending log-probability, the lower id first on ties, with their values.
The token is chosen from the logits, as ops.h says, so only the log-probabilities are the
function's; the top-k is chosen from the function's log-probabilities."""
import numpy as np

_U64 = np.uint64


def _mix64(z):
    """common/hash.h's invar_mix64 (splitmix64's finalizer), element-wise, wrapping as C does."""
    with np.errstate(over="ignore"):
        z = z + _U64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> _U64(30))) * _U64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> _U64(27))) * _U64(0x94D049BB133111EB)
    return z ^ (z >> _U64(31))


def _logf(x):
    """logf of float32 values: the float64 log rounded to float32 (glibc's logf is computed in
    double and rounded once, so the two agree)."""
    return np.log(x.astype(np.float64)).astype(np.float32)


def gumbel_noise(seed, position, V):
    """invar_gumbel_noise(seed, position, id) for id in [0, V), float32."""
    ids = np.arange(V, dtype=_U64)
    inner = _mix64((_U64(int(position) & 0xFFFFFFFF) << _U64(32)) | ids)
    h = _mix64(_U64(int(seed)) ^ inner)
    u = ((h >> _U64(40)).astype(np.float32) + np.float32(0.5)) * np.float32(1.0 / 16777216.0)
    return -_logf(-_logf(u))


def top_k(lp, k):
    """Each row's k largest values' ids, in descending value, the lower id first on ties."""
    R, V = lp.shape
    ids = np.empty((R, k), dtype=np.int32)
    if k == 0:
        return ids
    for r in range(R):
        row = lp[r]
        if k >= V:
            order = np.argsort(-row, kind="stable")
        else:
            kth = -np.partition(-row, k - 1)[k - 1]  # the k-th largest value
            candidates = np.flatnonzero(row >= kth)  # every tie of it, in id order
            order = candidates[np.argsort(-row[candidates], kind="stable")]
        ids[r] = order[:k]
    return ids


def select(logits, lp, temperature, seed, position, k):
    """(token [R], token_logprob [R], topk_ids [R, k], topk_logprobs [R, k]) of a call."""
    R, V = logits.shape
    lp = np.asarray(lp, dtype=np.float32)
    token = np.empty(R, dtype=np.int32)
    for r in range(R):
        t = float(temperature[r])
        if t == 0.0:
            token[r] = int(np.argmax(logits[r]))
        else:
            keys = logits[r].astype(np.float64) / t + gumbel_noise(seed[r], position[r], V)
            token[r] = int(np.argmax(keys))
    rows = np.arange(R)
    ids = top_k(lp, k)
    return token, lp[rows, token], ids, lp[rows[:, None], ids]
