"""A decode-shaped program for scheduling studies: the tile structure of a dense decoder's
decode step (Qwen3-8B sizes by default) over a symbolic batch B, with every event derived
from the tile regions.

Per layer (rows in blocks of 16 requests, columns in tiles of 128, bf16):
  qkv    (mb, 48)   X[rows, :]    @ Wqkv[:, tile]  -> QKV, laid out per KV head: q(4 heads) k v
  attn   (B, 8)     QKV[b, head group] and KV[b, h] (context C x 256)  -> ATT[b, 512 h ...]
  o      (mb, 32)   ATT[rows, :]  @ Wo[:, tile]    -> H
  gateup (mb, 96)   H[rows, :]    @ Wgu[:, 256-wide tile] -> A[rows, 128-wide tile]
  down   (mb, 32)   A[rows, :]    @ Wd[:, tile]    -> X of the next layer
The task bodies are stand-ins with the right tile shapes (split-K GEMM partials and row sums),
so the program is for cost-model simulation and schedule instantiation, not for numerics.
"""
from __future__ import annotations

from .. import sym
from ..frontend import ProgramBuilder
from ..ir import Program

BM, TN = 16, 128


def build(layers: int = 36, hidden: int = 4096, heads: int = 32, kv_heads: int = 8,
          head_dim: int = 128, ffn: int = 12288, context: int = 1024,
          max_batch: int = 64) -> Program:
    pb = ProgramBuilder(f"decode_shaped_l{layers}", derive_events=True)
    B = pb.symbol("B", 1, max_batch)
    mb = sym.cdiv(B, BM)
    rows = "16*m:smin(16*m + 16, B)"
    group = (heads // kv_heads + 2) * head_dim          # q heads of one KV head, then k, v
    qkv_cols = kv_heads * group
    att_cols = heads * head_dim
    q_per_kv = heads // kv_heads * head_dim
    tile = "128*n:128*n + 128"
    pb.input("X0", (B, hidden), "bfloat16")
    for layer in range(layers):
        x, nxt = (f"X{layer}", f"X{layer + 1}")
        pb.input(f"Wqkv{layer}", (hidden, qkv_cols), "bfloat16")
        pb.input(f"KV{layer}", (B, kv_heads, context, 2 * head_dim), "bfloat16")
        pb.input(f"Wo{layer}", (att_cols, hidden), "bfloat16")
        pb.input(f"Wgu{layer}", (hidden, 2 * ffn), "bfloat16")
        pb.input(f"Wd{layer}", (ffn, hidden), "bfloat16")
        for t, cols in ((f"QKV{layer}", qkv_cols), (f"ATT{layer}", att_cols),
                        (f"H{layer}", hidden), (f"A{layer}", ffn)):
            pb.temp(t, (B, cols), "bfloat16")
        (pb.output if layer == layers - 1 else pb.temp)(nxt, (B, hidden), "bfloat16")
        gemm = {"kind": "gemm_partial"}
        pb.grid(f"qkv{layer}", gemm["kind"], "mn", (mb, qkv_cols // TN),
                reads={x: f"{rows}, :", f"Wqkv{layer}": f":, {tile}"},
                writes={f"QKV{layer}": f"{rows}, {tile}"},
                params={"x": x, "w": f"Wqkv{layer}"})
        pb.grid(f"attn{layer}", "row_sum", "bh", (B, kv_heads),
                reads={f"QKV{layer}": f"b, {group}*h:{group}*h + {group}",
                       f"KV{layer}": "b, h, :, :"},
                writes={f"ATT{layer}": f"b, {q_per_kv}*h:{q_per_kv}*h + {q_per_kv}"})
        pb.grid(f"o{layer}", gemm["kind"], "mn", (mb, hidden // TN),
                reads={f"ATT{layer}": f"{rows}, :", f"Wo{layer}": f":, {tile}"},
                writes={f"H{layer}": f"{rows}, {tile}"}, params={"x": f"ATT{layer}",
                                                                  "w": f"Wo{layer}"})
        pb.grid(f"gateup{layer}", gemm["kind"], "mn", (mb, ffn // TN),
                reads={f"H{layer}": f"{rows}, :", f"Wgu{layer}": ":, 256*n:256*n + 256"},
                writes={f"A{layer}": f"{rows}, {tile}"}, params={"x": f"H{layer}",
                                                                  "w": f"Wgu{layer}"})
        pb.grid(f"down{layer}", gemm["kind"], "mn", (mb, hidden // TN),
                reads={f"A{layer}": f"{rows}, :", f"Wd{layer}": f":, {tile}"},
                writes={nxt: f"{rows}, {tile}"}, params={"x": f"A{layer}", "w": f"Wd{layer}"})
    return pb.build()
