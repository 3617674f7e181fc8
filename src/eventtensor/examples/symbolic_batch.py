"""Paper example 2: symbolic batch. Two dependent split-K GEMMs over a symbolic batch B,
Y2 = (X @ W1) @ W2, one program for every B in [1, 64]. Rows come in blocks of 4 (the last
one clipped at B); GEMM 2 splits K into chunks of 24 over GEMM 1's column tiles of 16, so its
tasks wait on the one or two producer tiles each chunk overlaps."""
from __future__ import annotations

import numpy as np

from .. import sym
from ..frontend import ProgramBuilder
from ..ir import Program
from .base import Example

K1, N1, N2 = 64, 48, 32      # X[B, K1] @ W1[K1, N1] @ W2[N1, N2]
BM, BK1, BN1, BK2, BN2 = 4, 16, 16, 24, 16


def build() -> Program:
    pb = ProgramBuilder("symbolic_batch")
    B = pb.symbol("B", 1, 64)
    mb = sym.cdiv(B, BM)                         # row blocks
    rows = "4*b:smin(4*b + 4, B)"
    pb.input("X", (B, K1))
    pb.input("W1", (K1, N1))
    pb.input("W2", (N1, N2))
    pb.temp("P1", (K1 // BK1, B, N1))           # split-K partials of GEMM 1
    pb.temp("Y1", (B, N1))
    pb.temp("P2", (N1 // BK2, B, N2))
    pb.output("Y2", (B, N2))
    pb.event("P1_ready", (mb, N1 // BN1))        # wait count 4 = K1 // BK1 (derived)
    pb.event("Y1_ready", (mb, N1 // BN1))        # wait count 1
    pb.event("P2_ready", (mb, N2 // BN2))        # wait count 2
    pb.grid("gemm1_partial", "gemm_partial", "bns", (mb, N1 // BN1, K1 // BK1),
            reads={"X": f"{rows}, 16*s:16*s + 16", "W1": "16*s:16*s + 16, 16*n:16*n + 16"},
            writes={"P1": f"s, {rows}, 16*n:16*n + 16"}, notify={"P1_ready": "bns->bn"},
            params={"x": "X", "w": "W1"})
    pb.grid("gemm1_reduce", "sum_partials", "bn", (mb, N1 // BN1),
            reads={"P1": f":, {rows}, 16*n:16*n + 16"}, writes={"Y1": f"{rows}, 16*n:16*n + 16"},
            wait={"P1_ready": "bn->bn"}, notify={"Y1_ready": "bn->bn"})
    pb.grid("gemm2_partial", "gemm_partial", "bns", (mb, N2 // BN2, N1 // BK2),
            reads={"Y1": f"{rows}, 24*s:24*s + 24", "W2": "24*s:24*s + 24, 16*n:16*n + 16"},
            writes={"P2": f"s, {rows}, 16*n:16*n + 16"},
            wait={"Y1_ready": "bns->b, (24*s)//16:cdiv(24*s + 24, 16)"},
            notify={"P2_ready": "bns->bn"}, params={"x": "Y1", "w": "W2"})
    pb.grid("gemm2_reduce", "sum_partials", "bn", (mb, N2 // BN2),
            reads={"P2": f":, {rows}, 16*n:16*n + 16"}, writes={"Y2": f"{rows}, 16*n:16*n + 16"},
            wait={"P2_ready": "bn->bn"})
    return pb.build()


def make_inputs(env, seed: int):
    rng = np.random.default_rng(seed)
    f = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    return {"X": f(env["B"], K1), "W1": f(K1, N1) / 8, "W2": f(N1, N2) / 8}


def reference(inputs, env):
    x, w1, w2 = (inputs[k].astype(np.float64) for k in ("X", "W1", "W2"))
    return {"Y2": (x @ w1) @ w2}


SYMBOLIC_BATCH = Example("symbolic_batch", "two split-K GEMMs over symbolic B, one program",
                         build, ({"B": 1}, {"B": 3}, {"B": 7}, {"B": 64}), make_inputs,
                         reference, ("Y2",), rtol=1e-4)
