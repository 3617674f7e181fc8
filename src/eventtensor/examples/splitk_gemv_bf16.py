"""bfloat16 split-K GEMV: y[B, N] = x[B, K] @ W[K, N] over a symbolic batch B in [1, 64].

x, W and y are bfloat16; the split-K partials are float32. partial(b, n, s) multiplies the
rows of block b (16 rows, the last block clipped at B) by K chunk s of column tile n into
partials[s, rows, tile]; reduce(b, n) waits on P_ready[b, n], which exactly the S partial
tasks of its (row block, column tile) notify (wait count S, derived), and rounds their fp32
sum to bfloat16.
"""
from __future__ import annotations

import numpy as np

from .. import sym
from ..dtypes import round_to_dtype
from ..frontend import ProgramBuilder
from ..ir import Program
from .base import Example

K, N, S = 256, 256, 4      # x[B, K] @ W[K, N], K split into S chunks
BM, BN, BK = 16, 64, K // S


def build() -> Program:
    pb = ProgramBuilder("splitk_gemv_bf16")
    B = pb.symbol("B", 1, 64)
    mb = sym.cdiv(B, BM)                         # row blocks
    rows = f"{BM}*b:smin({BM}*b + {BM}, B)"
    cols = f"{BN}*n:{BN}*n + {BN}"
    chunk = f"{BK}*s:{BK}*s + {BK}"
    pb.input("x", (B, K), "bfloat16")
    pb.input("W", (K, N), "bfloat16")
    pb.temp("partials", (S, B, N))               # float32 split-K partials
    pb.output("y", (B, N), "bfloat16")
    pb.event("P_ready", (mb, N // BN))           # wait count S (derived)
    pb.grid("partial", "gemm_partial", "bns", (mb, N // BN, S),
            reads={"x": f"{rows}, {chunk}", "W": f"{chunk}, {cols}"},
            writes={"partials": f"s, {rows}, {cols}"}, notify={"P_ready": "bns->bn"},
            params={"x": "x", "w": "W"})
    pb.grid("reduce", "sum_partials", "bn", (mb, N // BN),
            reads={"partials": f":, {rows}, {cols}"}, writes={"y": f"{rows}, {cols}"},
            wait={"P_ready": "bn->bn"})
    return pb.build()


def make_inputs(env, seed: int):
    """Random bfloat16 values (held as float32, see `eventtensor.dtypes`)."""
    rng = np.random.default_rng(seed)
    return {"x": round_to_dtype("bfloat16", rng.standard_normal((env["B"], K))),
            "W": round_to_dtype("bfloat16", rng.standard_normal((K, N)) / 16)}


def reference(inputs, env):
    x, w = (round_to_dtype("bfloat16", inputs[k]).astype(np.float64) for k in ("x", "W"))
    return {"y": x @ w}


# Tolerance (relative to the largest |y|): rounding the exact product of the bf16 inputs once
# to bf16 is off by at most half an ulp, 2^-8 of the value (3.9e-3); fp32 accumulation over
# K = 256 adds about 1e-5. The GPU (fp32 sums) and the interpreter (fp64 sums) may round to
# neighbouring bf16 values, one ulp (at most 2^-7 = 7.8e-3 of the value) apart; 1e-2 covers
# both comparisons.
SPLITK_GEMV_BF16 = Example(
    "splitk_gemv_bf16", "bf16 split-K GEMV: (b,n,s) fp32 partials -> P_ready[b,n] -> bf16 sum",
    build, ({"B": 1}, {"B": 3}, {"B": 16}, {"B": 64}), make_inputs, reference, ("y",),
    rtol=1e-2)
