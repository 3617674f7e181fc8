"""Task kinds of the paper's examples: split-K sums, split-K GEMM, and a toy MoE layer."""
from __future__ import annotations

import numpy as np

from .registry import TaskContext, task_kind


def _only(ctx: TaskContext, what: str) -> tuple[str, np.ndarray]:
    if len(ctx.inputs) != 1 or len(ctx.out_shapes) != 1:
        raise ValueError(f"task grid '{ctx.grid}': a {what} task reads one tensor and writes one")
    return next(iter(ctx.out_shapes)), next(iter(ctx.inputs.values()))


@task_kind("row_sum")
def row_sum(ctx: TaskContext) -> dict[str, np.ndarray]:
    """Sum the input tile over its last axis into a one-column output tile."""
    out, x = _only(ctx, "row_sum")
    return {out: ctx.out(out, x.astype(np.float64).sum(axis=-1, keepdims=True))}


@task_kind("sum_partials")
def sum_partials(ctx: TaskContext) -> dict[str, np.ndarray]:
    """Sum split-K partial tiles (split index first) into the output tile."""
    out, p = _only(ctx, "sum_partials")
    return {out: ctx.out(out, p.astype(np.float64).sum(axis=0))}


def _gemm_flops(reads, writes, params) -> int:
    rows, k = reads[params["x"]]
    return 2 * rows * k * reads[params["w"]][1]


@task_kind("gemm_partial", _gemm_flops)
def gemm_partial(ctx: TaskContext) -> dict[str, np.ndarray]:
    """One split-K partial product: X tile (rows, k-chunk) @ W tile (k-chunk, cols)."""
    x, w = ctx.inputs[ctx.params["x"]], ctx.inputs[ctx.params["w"]]
    out = next(iter(ctx.out_shapes))
    return {out: ctx.out(out, (x.astype(np.float64) @ w.astype(np.float64))[None])}


@task_kind("moe_router")
def moe_router(ctx: TaskContext) -> dict[str, np.ndarray]:
    """Router of one token: top-k experts by logit and their softmax-normalised weights."""
    k = int(ctx.params["top_k"])
    logits = (ctx.inputs["x"].astype(np.float64) @ ctx.inputs["w_router"].astype(np.float64))[0]
    ids = np.argsort(-logits, kind="stable")[:k]
    w = np.exp(logits[ids] - logits[ids].max())
    return {"topk_ids": ctx.out("topk_ids", ids[None]),
            "topk_w": ctx.out("topk_w", (w / w.sum())[None])}


@task_kind("moe_scan")
def moe_scan(ctx: TaskContext) -> dict[str, np.ndarray]:
    """Group (token, k) pairs by expert: per-expert counts and GEMM tile counts, the tile
    index pointer, each tile's expert and slot range, and each pair's slot in expert order."""
    ids = ctx.inputs["topk_ids"].astype(np.int64)
    n_exp, tm = int(ctx.params["experts"]), int(ctx.params["tile_m"])
    counts = np.bincount(ids.reshape(-1), minlength=n_exp)
    tiles = -(-counts // tm)
    indptr = np.concatenate([[0], np.cumsum(tiles)])
    offset = np.concatenate([[0], np.cumsum(counts)])
    order = np.argsort(ids.reshape(-1), kind="stable")  # token-major order within an expert
    slot = np.empty(ids.size, dtype=np.int64)
    slot[order] = np.arange(ids.size)
    max_tiles = ctx.out_shapes["tile_expert"][0]
    tile_expert = np.zeros(max_tiles, np.int64)
    tile_lo = np.zeros(max_tiles, np.int64)
    tile_hi = np.zeros(max_tiles, np.int64)
    for e in range(n_exp):
        for t in range(tiles[e]):
            i = indptr[e] + t
            tile_expert[i] = e
            tile_lo[i] = offset[e] + t * tm
            tile_hi[i] = min(offset[e] + (t + 1) * tm, offset[e + 1])
    return {"expert_counts": ctx.out("expert_counts", counts),
            "expert_tiles": ctx.out("expert_tiles", tiles),
            "exp_indptr": ctx.out("exp_indptr", indptr),
            "tile_expert": ctx.out("tile_expert", tile_expert),
            "tile_lo": ctx.out("tile_lo", tile_lo), "tile_hi": ctx.out("tile_hi", tile_hi),
            "slot": ctx.out("slot", slot.reshape(ids.shape))}


@task_kind("moe_gather")
def moe_gather(ctx: TaskContext) -> dict[str, np.ndarray]:
    """Copy one token's activation row to each of its top-k slots in expert order."""
    return {"xs": ctx.out("xs", ctx.inputs["x"])}


def _expert_flops(reads, writes, params) -> int:
    rows, d = reads["xs"]
    return 2 * rows * d * reads["w_experts"][2]


@task_kind("moe_expert_gemm", _expert_flops)
def moe_expert_gemm(ctx: TaskContext) -> dict[str, np.ndarray]:
    """One expert GEMM tile: SiLU(xs rows of the tile @ W[expert])."""
    h = ctx.inputs["xs"].astype(np.float64) @ ctx.inputs["w_experts"][0].astype(np.float64)
    return {"ys": ctx.out("ys", h / (1.0 + np.exp(-h)))}


@task_kind("moe_combine")
def moe_combine(ctx: TaskContext) -> dict[str, np.ndarray]:
    """Weighted sum of one token's expert outputs."""
    y = ctx.inputs["ys"].astype(np.float64)
    w = ctx.inputs["topk_w"].astype(np.float64)[0]
    return {"out": ctx.out("out", (w[:, None] * y).sum(axis=0)[None])}
