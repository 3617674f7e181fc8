"""Task kinds of a dense decoder's decode step (Llama 3, Qwen3): numpy reference bodies.

Every body computes in float64 and casts once to the dtype of its output tiles (fp32
accumulation semantics or better; bfloat16 inputs are float32 arrays of bf16 values, see
`dtypes`). Tensor roles are named by the grid's params (`params["x"]` is the tensor holding
the role "x"), so one kind serves every layer. A tile with a leading split axis where the
docstring says "partials" is summed over that axis first. Tiles keep the rank of their tensor
(an indexed dimension has size 1); bodies reshape them.

Shape legend: n rows (requests) of a tile, k a reduction chunk, c output columns, S split-K
partials, G query heads of one KV head, D head dim, T positions of a KV chunk, V vocab tile.
"""
from __future__ import annotations

import numpy as np

from .registry import TaskContext, task_kind

Out = dict[str, np.ndarray]


# ------------------------------------------------------------------------------ helpers

def _role(ctx: TaskContext, role: str) -> np.ndarray:
    """The input tile of role `role` as float64."""
    return np.asarray(ctx.inputs[str(ctx.params[role])], np.float64)


def _summed(a: np.ndarray, rank: int) -> np.ndarray:
    """`a` with a leading split axis summed away when it has rank `rank` + 1."""
    return a.sum(axis=0) if a.ndim == rank + 1 else a


def _partials(ctx: TaskContext, role: str) -> np.ndarray:
    """Rows [n, c] of role `role`: a [n, c] tile, or split-K partials [S, n, c] summed."""
    return _summed(_role(ctx, role), 2)


def _put(ctx: TaskContext, name: str, value: np.ndarray) -> np.ndarray:
    """`value` reshaped (never broadcast) to output tile `name` and cast to its dtype."""
    return ctx.out(name, np.reshape(value, ctx.out_shapes[name]))


def _single_out(ctx: TaskContext) -> str:
    if len(ctx.out_shapes) != 1:
        raise ValueError(f"task grid '{ctx.grid}': expected one output tile, got "
                         f"{sorted(ctx.out_shapes)}")
    return next(iter(ctx.out_shapes))


def _rms(x: np.ndarray, w: np.ndarray | None, eps: float) -> np.ndarray:
    """x / sqrt(mean(x^2, last axis) + eps) * w."""
    y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    return y if w is None else y * w


def _rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """Rotate-half RoPE of x [n, heads, D] with cos, sin [n, D]."""
    half = x.shape[-1] // 2
    rotated = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos[:, None, :] + rotated * sin[:, None, :]


def _size(shape) -> int:
    return int(np.prod(shape, dtype=np.int64))


# ------------------------------------------------------------------------------ kinds

@task_kind("embedding")
def embedding(ctx: TaskContext) -> Out:
    """Embedding gather: the region map selects table rows through the token ids tensor
    (`"tokens[b], :"`); the body copies those rows [n, E] to the output rows [n, E]."""
    (x,) = ctx.inputs.values()
    out = _single_out(ctx)
    return {out: _put(ctx, out, np.asarray(x, np.float64))}


def _norm_flops(reads, writes, params) -> int:
    return 4 * _size(reads[params["x"]])


@task_kind("rms_norm", _norm_flops)
def rms_norm(ctx: TaskContext) -> Out:
    """RMSNorm of rows x [n, E] (params x) with weight [E] (params w, eps):
    x / sqrt(mean(x^2) + eps) * w."""
    out = _single_out(ctx)
    y = _rms(_role(ctx, "x"), _role(ctx, "w").reshape(-1), float(ctx.params["eps"]))
    return {out: _put(ctx, out, y)}


def _times_w(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Rows x [n, k] times the weight tile w [c, k] (HF layout, [out, in]) transposed."""
    w = w.reshape(-1, w.shape[-1])
    return x.reshape(-1, w.shape[-1]) @ w.T


def _silu_mul(g: np.ndarray, u: np.ndarray) -> np.ndarray:
    """silu(g) * u, silu(g) = g * sigmoid(g) (exp overflowing to inf for large -g: -0)."""
    with np.errstate(over="ignore"):
        return g / (1.0 + np.exp(-g)) * u


def _linear_flops(reads, writes, params) -> int:
    rows, k = reads[params["x"]][-2:]
    return 2 * rows * k * reads[params["w"]][0]


@task_kind("linear_partial", _linear_flops)
def linear_partial(ctx: TaskContext) -> Out:
    """One split-K partial of x @ W^T with W in HF layout: rows x [n, k] (params x) times
    the weight tile [c, k] (params w, [out, in]) into [n, c] or a partial slot [1, n, c]."""
    out = _single_out(ctx)
    x, w = _role(ctx, "x"), _role(ctx, "w")
    return {out: _put(ctx, out, _times_w(x, w))}


def _norm_linear_flops(reads, writes, params) -> int:
    rows, k = reads[params["x"]][-2:]
    return 2 * rows * k * (reads[params["w"]][0] + 1)


@task_kind("norm_linear_partial", _norm_linear_flops)
def norm_linear_partial(ctx: TaskContext) -> Out:
    """linear_partial of RMSNorm'd rows whose norm was never stored: rows x [n, k] (params x,
    a K-slice of the residual stream) times 1 / sqrt(sum(ss) / cols + eps) of their row
    (ss [n, T], params ss: the sums of squares of the T column tiles of the residual add
    that wrote the rows, `residual_add_sumsq`; cols: the rows' full width) and the norm
    weight's slice [k] (params norm_w), then times the weight tile [c, k] (params w)."""
    out, p = _single_out(ctx), ctx.params
    x, w = _role(ctx, "x"), _role(ctx, "w")
    x = x.reshape(-1, w.shape[-1])
    ss = _role(ctx, "ss").reshape(len(x), -1).sum(axis=-1, keepdims=True)
    h = x / np.sqrt(ss / float(p["cols"]) + float(p["eps"])) * _role(ctx, "norm_w").reshape(-1)
    return {out: _put(ctx, out, _times_w(h, w))}


def _silu_linear_flops(reads, writes, params) -> int:
    parts, rows, k = (1, *reads[params["gate"]])[-3:]
    return 2 * rows * k * (reads[params["w"]][0] + 2 * parts + 3)


@task_kind("silu_linear_partial", _silu_linear_flops)
def silu_linear_partial(ctx: TaskContext) -> Out:
    """linear_partial of SiLU-and-multiplied rows that were never stored: silu(gate) * up of
    the gate and up partials [S, n, k] summed (params gate, up; `silu_mul`), times the
    weight tile [c, k] (params w)."""
    out = _single_out(ctx)
    act = _silu_mul(_partials(ctx, "gate"), _partials(ctx, "up"))
    return {out: _put(ctx, out, _times_w(act, _role(ctx, "w")))}


def _rope_flops(reads, writes, params) -> int:
    return 12 * sum(_size(writes[params[r]]) for r in ("q_out", "k_out"))


@task_kind("qk_norm_rope", _rope_flops)
def qk_norm_rope(ctx: TaskContext) -> Out:
    """The q, k and v heads of one KV head for n rows: q partials [S, n, G*D], k and v
    partials [S, n, D] (params q, k, v) summed; with params q_norm, k_norm (weights [D]) each
    head RMS-normed (eps); q and k rotated (rotate-half, like HF) by angles
    positions[n] * inv_freq[D/2] (params pos, inv_freq); written to q_out [n, G*D],
    k_out [n, D] and v_out [n, D]."""
    p, D = ctx.params, int(ctx.params["head_dim"])
    eps = float(p["eps"])
    q, k, v = (_partials(ctx, r) for r in ("q", "k", "v"))
    n = q.shape[0]
    q, k = q.reshape(n, -1, D), k.reshape(n, -1, D)
    if p.get("q_norm"):
        q = _rms(q, _role(ctx, "q_norm").reshape(-1), eps)
        k = _rms(k, _role(ctx, "k_norm").reshape(-1), eps)
    angles = _role(ctx, "pos").reshape(-1, 1) * _role(ctx, "inv_freq").reshape(1, -1)
    angles = np.concatenate([angles, angles], axis=-1)                        # [n, D]
    cos, sin = np.cos(angles), np.sin(angles)
    return {str(p["q_out"]): _put(ctx, str(p["q_out"]), _rope(q, cos, sin)),
            str(p["k_out"]): _put(ctx, str(p["k_out"]), _rope(k, cos, sin)),
            str(p["v_out"]): _put(ctx, str(p["v_out"]), v)}


@task_kind("kv_append")
def kv_append(ctx: TaskContext) -> Out:
    """KV-cache append: the new key and value row [1, D] of one request and KV head
    (params k, v) written to the cache tiles (params k_out, v_out) that the region maps
    select at the request's slot and position (`"l, slots[b], h, positions[b], :"`)."""
    p = ctx.params
    return {str(p["k_out"]): _put(ctx, str(p["k_out"]), _role(ctx, "k")),
            str(p["v_out"]): _put(ctx, str(p["v_out"]), _role(ctx, "v"))}


def _attention_flops(reads, writes, params) -> int:
    g_d = _size(reads[params["q"]])
    return 4 * g_d * (reads[params["k_cache"]][-2] + 1)


@task_kind("decode_attention", _attention_flops)
def decode_attention(ctx: TaskContext) -> Out:
    """Split-KV attention of one (token b, KV chunk c, KV head h) tile, task coordinate
    t = (b * chunks + c) * kv_heads + h (params chunks, kv_heads, chunk = T): the G query
    heads q [1, G*D] (params q) of the token at position p (params pos) attend, within the
    positions T*c .. T*c + T - 1, over the n new keys and values [n, D] of its request in
    this step (params k_new, v_new; the last one its own, at p, the first at p0 = p - n + 1)
    where they fall in the chunk, and over the cached keys and values [T, D] (params
    k_cache, v_cache) of the chunk's positions below p0; later positions are masked. Writes
    the normalised partial output [G, D] (params out) and its log-sum-exp [G] (params lse;
    -inf and a zero output for a chunk with no visible position), scale 1/sqrt(D)."""
    p = ctx.params
    T, kv_heads, chunks = int(p["chunk"]), int(p["kv_heads"]), int(p["chunks"])
    (t,) = ctx.coords.values()
    start = T * ((t // kv_heads) % chunks)
    pos = int(_role(ctx, "pos").reshape(-1)[0])
    kc, vc = _role(ctx, "k_cache"), _role(ctx, "v_cache")
    D = kc.shape[-1]
    q = _role(ctx, "q").reshape(-1, D)                                        # [G, D]
    k_new, v_new = _role(ctx, "k_new").reshape(-1, D), _role(ctx, "v_new").reshape(-1, D)
    p0 = pos - len(k_new) + 1
    past = int(np.clip(p0 - start, 0, kc.size // D))
    lo, hi = max(0, start - p0), max(0, min(len(k_new), start + T - p0))
    keys = np.concatenate([kc.reshape(-1, D)[:past], k_new[lo:hi]])
    values = np.concatenate([vc.reshape(-1, D)[:past], v_new[lo:hi]])
    if len(keys) == 0:
        o, lse = np.zeros_like(q), np.full(len(q), -np.inf)
    else:
        scores = q @ keys.T / np.sqrt(D)                                      # [G, n]
        m = scores.max(axis=-1, keepdims=True)
        e = np.exp(scores - m)
        total = e.sum(axis=-1, keepdims=True)
        o, lse = (e @ values) / total, (m + np.log(total))[:, 0]
    return {str(p["out"]): _put(ctx, str(p["out"]), o),
            str(p["lse"]): _put(ctx, str(p["lse"]), lse)}


def _merge_flops(reads, writes, params) -> int:
    return 3 * _size(reads[params["parts"]])


@task_kind("attn_merge", _merge_flops)
def attn_merge(ctx: TaskContext) -> Out:
    """Merge split-KV partials of G heads: outputs [1, G, m, D] and log-sum-exps [1, G, m]
    of m chunks (params parts, lse) weighted by exp(lse - max) into [1, G*D]; chunks with
    lse = -inf weigh nothing."""
    out = _single_out(ctx)
    parts, lse = _role(ctx, "parts"), _role(ctx, "lse")
    G, m, D = parts.shape[-3:]
    parts, lse = parts.reshape(G, m, D), lse.reshape(G, m)
    top = lse.max(axis=-1, keepdims=True)
    w = np.where(np.isfinite(lse), np.exp(lse - np.where(np.isfinite(top), top, 0)), 0.0)
    merged = (w[:, :, None] * parts).sum(axis=1) / w.sum(axis=1, keepdims=True)
    return {out: _put(ctx, out, merged)}


def _add_flops(reads, writes, params) -> int:
    return _size(reads[params["parts"]])


def _residual(ctx: TaskContext, out: str) -> np.ndarray:
    """Output tile `out` of a residual add: rows x (params x) plus the partials (params
    parts), as stored (its dtype)."""
    return _put(ctx, out, _role(ctx, "x") + _partials(ctx, "parts"))


@task_kind("residual_add", _add_flops)
def residual_add(ctx: TaskContext) -> Out:
    """Residual add: rows x [n, c] (params x) plus the partials [S, n, c] (params parts)."""
    out = _single_out(ctx)
    return {out: _residual(ctx, out)}


@task_kind("residual_add_sumsq", _add_flops)
def residual_add_sumsq(ctx: TaskContext) -> Out:
    """Residual add that also sums the squares of its rows: out = rows x [n, c] (params x)
    plus the partials [S, n, c] (params parts), and ss [n, 1] = the sum over c of out^2 as
    stored (the tile's share of the RMSNorm that `norm_linear_partial` applies); out and ss
    are the tiles of the tensors params out and ss."""
    p = ctx.params
    out, ss = str(p["out"]), str(p["ss"])
    summed = _residual(ctx, out)
    rows = np.asarray(summed, np.float64).reshape(ctx.out_shapes[ss][0], -1)
    return {out: summed, ss: _put(ctx, ss, (rows * rows).sum(axis=-1))}


def _add_norm_flops(reads, writes, params) -> int:
    return _size(reads[params["parts"]]) + 4 * _size(reads[params["x"]])


@task_kind("residual_rms_norm", _add_norm_flops)
def residual_rms_norm(ctx: TaskContext) -> Out:
    """Residual add and the RMSNorm after it: out = rows x [n, E] (params x) plus the
    partials [S, n, E] (params parts), and h = RMSNorm(out) with weight [E] (params w, eps);
    out and h are the tiles of the tensors params out and h."""
    p = ctx.params
    out, h = str(p["out"]), str(p["h"])
    summed = _residual(ctx, out)  # the norm reads the sum as stored
    y = _rms(np.asarray(summed, np.float64).reshape(ctx.out_shapes[h]),
             _role(ctx, "w").reshape(-1), float(p["eps"]))
    return {out: summed, h: _put(ctx, h, y)}


def _silu_flops(reads, writes, params) -> int:
    return 6 * _size(next(iter(writes.values())))


@task_kind("silu_mul", _silu_flops)
def silu_mul(ctx: TaskContext) -> Out:
    """SiLU-and-multiply: silu(gate) * up of the gate and up partials [S, n, c] (params
    gate, up), silu(x) = x * sigmoid(x)."""
    out = _single_out(ctx)
    return {out: _put(ctx, out, _silu_mul(_partials(ctx, "gate"), _partials(ctx, "up")))}


def _argmax_flops(reads, writes, params) -> int:
    return _size(reads[params["x"]])


@task_kind("argmax_partial", _argmax_flops)
def argmax_partial(ctx: TaskContext) -> Out:
    """Per-tile greedy pick: the max [n, 1] (params max) and the vocabulary index of its
    first occurrence [n, 1] (params arg) of logits [n, V] (params x), column tile number
    coords[params axis] of width params tile."""
    p = ctx.params
    x = _role(ctx, "x")
    base = int(ctx.coords[str(p["axis"])]) * int(p["tile"])
    arg = np.argmax(x, axis=-1)
    return {str(p["max"]): _put(ctx, str(p["max"]), x[np.arange(len(x)), arg]),
            str(p["arg"]): _put(ctx, str(p["arg"]), arg + base)}


@task_kind("argmax_reduce", _argmax_flops)
def argmax_reduce(ctx: TaskContext) -> Out:
    """Greedy token of each row: the index [n] of the largest tile max [n, tiles] (params
    x), taken from tile_arg [n, tiles] (params arg); ties go to the first tile, so to the
    lowest vocabulary index (as numpy's argmax)."""
    out = _single_out(ctx)
    best = np.argmax(_role(ctx, "x"), axis=-1)
    arg = np.asarray(ctx.inputs[str(ctx.params["arg"])])
    return {out: _put(ctx, out, arg[np.arange(len(arg)), best])}


@task_kind("decode_plan")
def decode_plan(ctx: TaskContext) -> Out:
    """Split-KV plan of the batch from positions [B] (params pos): row b holds the first and
    end linear task ids of request b's attention tiles, b*chunks*kv_heads and that plus
    kv_heads * n_b, and n_b = pos_b // chunk + 1, the KV chunks holding positions 0..pos_b
    (params chunk, chunks, kv_heads). Raises ValueError for a position outside
    [0, params context)."""
    out = _single_out(ctx)
    p = ctx.params
    T, chunks, kv_heads = int(p["chunk"]), int(p["chunks"]), int(p["kv_heads"])
    pos = np.asarray(ctx.inputs[str(p["pos"])], np.int64).reshape(-1)
    context = int(p["context"])
    bad = (pos < 0) | (pos >= min(context, T * chunks))
    if bad.any():
        raise ValueError(f"task grid '{ctx.grid}': position {int(pos[bad][0])} outside the "
                         f"KV cache [0, {context})")
    n = pos // T + 1
    first = np.arange(len(pos)) * chunks * kv_heads
    return {out: _put(ctx, out, np.stack([first, first + n * kv_heads, n], axis=1))}
