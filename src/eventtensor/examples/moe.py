"""Paper example 3: a toy MoE layer with all three kinds of data-dependent edge.

router(t) -> scan -> gather(t) -> expert_gemm(i) -> combine(t), T tokens (symbolic), top-2:
* data-dependent update: gather(t) notifies expert_ready[topk_ids[t, :]];
* data-dependent wait count: expert_ready[e] needs expert_counts[e] notifies, a count the scan
  task writes on the device (gemm_done[e] likewise needs expert_tiles[e]);
* data-dependent trigger: completing expert_ready[e] releases GEMM tiles
  exp_indptr[e] .. exp_indptr[e + 1]; tiles past exp_indptr[E] are guarded and never run.
"""
from __future__ import annotations

import numpy as np

from .. import sym
from ..frontend import ProgramBuilder
from ..ir import Program
from .base import Example

D, F, TOP_K, TILE_M = 16, 8, 2, 4


def build(experts: int = 8) -> Program:
    pb = ProgramBuilder(f"toy_moe_e{experts}")
    T = pb.symbol("T", 8, 64)
    max_tiles = sym.cdiv(TOP_K * T, TILE_M) + experts
    pb.input("x", (T, D))
    pb.input("w_router", (D, experts))
    pb.input("w_experts", (experts, D, F))
    pb.temp("topk_ids", (T, TOP_K), "int32")
    pb.temp("topk_w", (T, TOP_K))
    pb.temp("expert_counts", (experts,), "int32")      # tokens routed to each expert
    pb.temp("expert_tiles", (experts,), "int32")       # GEMM tiles of each expert
    pb.temp("exp_indptr", (experts + 1,), "int32")     # first tile of each expert
    pb.temp("tile_expert", (max_tiles,), "int32")
    pb.temp("tile_lo", (max_tiles,), "int32")          # slot range of each tile
    pb.temp("tile_hi", (max_tiles,), "int32")
    pb.temp("slot", (T, TOP_K), "int32")               # row of (token, k) in expert order
    pb.temp("xs", (TOP_K * T, D))
    pb.temp("ys", (TOP_K * T, F))
    pb.output("out", (T, F))
    pb.event("routed")
    pb.event("scanned")
    pb.event("expert_ready", (experts,), wait_count="k->expert_counts[k]")
    pb.event("gemm_done", (experts,), wait_count="k->expert_tiles[k]")
    pb.grid("router", "moe_router", "t", (T,), reads={"x": "t, :", "w_router": ":, :"},
            writes={"topk_ids": "t, :", "topk_w": "t, :"}, notify={"routed": "t->"},
            params={"top_k": TOP_K})
    scan_out = ("expert_counts", "expert_tiles", "exp_indptr", "tile_expert", "tile_lo",
                "tile_hi")
    pb.grid("scan", "moe_scan", "s", (1,), reads={"topk_ids": ":, :"},
            writes={**{k: ":" for k in scan_out}, "slot": ":, :"},
            wait={"routed": "s->"}, notify={"scanned": "s->"},
            params={"experts": experts, "tile_m": TILE_M})
    pb.grid("gather", "moe_gather", "t", (T,), reads={"x": "t, :"},
            writes={"xs": "slot[t, :], :"}, wait={"scanned": "t->"},
            notify={"expert_ready": "t->topk_ids[t, :]"})
    pb.grid("expert_gemm", "moe_expert_gemm", "i", (max_tiles,),
            reads={"xs": "tile_lo[i]:tile_hi[i], :", "w_experts": "tile_expert[i], :, :"},
            writes={"ys": "tile_lo[i]:tile_hi[i], :"}, wait={"scanned": "i->"},
            notify={"gemm_done": "i->tile_expert[i]"})
    pb.trigger("expert_ready", "expert_gemm", "k->exp_indptr[k]:exp_indptr[k + 1]")
    pb.grid("combine", "moe_combine", "t", (T,), reads={"ys": "slot[t, :], :", "topk_w": "t, :"},
            writes={"out": "t, :"}, wait={"scanned": "t->", "gemm_done": "t->topk_ids[t, :]"})
    return pb.build()


def make_inputs(env, seed: int, experts: int = 8, skew: bool = False):
    """Random tokens; with `skew`, every token routes to experts 0 and 1 (the rest get none)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((env["T"], D)).astype(np.float32)
    w_router = rng.standard_normal((D, experts)).astype(np.float32)
    if skew:
        x[:, 0] = 4.0
        w_router[0, :] = 0.0
        w_router[0, 0], w_router[0, 1] = 50.0, 25.0
    w_experts = (rng.standard_normal((experts, D, F)) / 4).astype(np.float32)
    return {"x": x, "w_router": w_router, "w_experts": w_experts}


def reference(inputs, env):
    x = inputs["x"].astype(np.float64)
    logits = x @ inputs["w_router"].astype(np.float64)
    out = np.zeros((x.shape[0], F))
    for t in range(x.shape[0]):
        ids = np.argsort(-logits[t], kind="stable")[:TOP_K]
        w = np.exp(logits[t, ids] - logits[t, ids].max())
        w /= w.sum()
        for k, e in enumerate(ids):
            h = x[t] @ inputs["w_experts"][e].astype(np.float64)
            out[t] += w[k] * h / (1.0 + np.exp(-h))
    return {"out": out}


MOE = Example("toy_moe", "router top-2 -> group by expert -> expert GEMM tiles -> combine",
              build, ({"T": 8}, {"T": 13}, {"T": 64}), make_inputs, reference, ("out",),
              rtol=1e-5)
