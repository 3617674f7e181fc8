"""Run an example on the CPU interpreter over many interleavings and check it."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from .backends.cpu import run
from .examples import Example
from .schedule import lower
from .schedule.simulate import default_dynamic_grids


@dataclass
class ExampleReport:
    example: str
    binding: dict[str, int]
    mode: str
    num_sms: int
    tasks: int
    guarded: int
    events: int
    elements: int
    interleavings: int
    max_error: float

    def line(self) -> str:
        env = ", ".join(f"{k}={v}" for k, v in self.binding.items())
        guarded = f" ({self.guarded} guarded)" if self.guarded else ""
        return (f"{self.example:16s} {env:6s} {self.mode:7s} {self.num_sms:3d} SMs  "
                f"{self.tasks:4d} tasks{guarded:14s} {self.events} events/{self.elements:3d} "
                f"counters  {self.interleavings:3d} interleavings  max err {self.max_error:.1e}")


def example_options(ex: Example, mode: str) -> dict:
    """Scheduling options of `mode` for an example: hybrid makes its data-dependent grids
    dynamic (or, with none, its last grid)."""
    if mode != "hybrid":
        return {}
    return {"dynamic_grids": default_dynamic_grids(ex.build())}


def check_example(ex: Example, env: Mapping[str, int], mode: str = "static",
                  num_sms: int = 132, interleavings: int = 8, seed: int = 0,
                  inputs: dict[str, np.ndarray] | None = None) -> ExampleReport:
    """Lower `ex` for `env`, run it `interleavings` times with different seeds, check every
    run against the numpy reference and that all runs agree bit for bit."""
    tables = lower(ex.build(), env, mode, num_sms, **example_options(ex, mode))
    inputs = inputs if inputs is not None else ex.make_inputs(env, seed)
    first = None
    worst = 0.0
    guarded = 0
    for i in range(interleavings):
        res = run(tables, inputs, seed=seed * 1000 + i)
        worst = max(worst, ex.check(res.tensors, inputs, env))
        guarded = tables.bound.num_tasks - len(res.records)
        outs = {k: res.tensors[k] for k in ex.outputs}
        if first is None:
            first = outs
        else:
            for k in ex.outputs:
                if not np.array_equal(first[k], outs[k]):
                    raise AssertionError(f"{ex.name}: output '{k}' differs between "
                                         f"interleavings (seed {res.seed})")
    b = tables.bound
    return ExampleReport(ex.name, dict(b.env), mode, num_sms, b.num_tasks, guarded,
                         len(tables.program.events), b.num_elements, interleavings, worst)
