"""Paper example 1: split-K row sum. A is (32n x 128); partial_sum tasks on grid (n, 4) each
sum a 32x32 block; event E has shape (n,) and wait count 4; final_sum(i) waits on E[i]."""
from __future__ import annotations

import numpy as np

from ..frontend import ProgramBuilder
from ..ir import Program
from .base import Example


def build() -> Program:
    pb = ProgramBuilder("splitk_rowsum")
    n = pb.symbol("n", 1, 256)
    pb.input("A", (32 * n, 128))                 # A[32n, 128]
    pb.temp("partial", (32 * n, 4))              # partial[32n, 4]: one column per K split
    pb.output("out", (32 * n, 1))                # out[32n, 1]
    pb.event("E", (n,))                          # E[n], wait count 4 (derived)
    pb.grid("partial_sum", "row_sum", "ij", (n, 4),
            reads={"A": "32*i:32*i + 32, 32*j:32*j + 32"},
            writes={"partial": "32*i:32*i + 32, j"}, notify={"E": "ij->i"})
    pb.grid("final_sum", "row_sum", "i", (n,),
            reads={"partial": "32*i:32*i + 32, :"}, writes={"out": "32*i:32*i + 32, 0"},
            wait={"E": "i->i"})
    return pb.build()


def make_inputs(env, seed: int):
    rng = np.random.default_rng(seed)
    return {"A": rng.integers(-8, 9, size=(32 * env["n"], 128)).astype(np.float32)}


def reference(inputs, env):
    return {"out": inputs["A"].astype(np.float64).sum(axis=1, keepdims=True)}


SPLITK_ROWSUM = Example("splitk_rowsum", "split-K row sum: (n,4) partial sums -> E[n] -> final",
                        build, ({"n": 1}, {"n": 2}, {"n": 5}), make_inputs, reference, ("out",))
