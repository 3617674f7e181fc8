"""Cost-model simulator and `mode="auto"`.

`simulate` runs scheduled tables on the interpreter under the timed policy: each virtual SM
acts at the earliest time it can, tasks last their cost-model time with the memory bandwidth
shared by the SMs running at that moment, a wait resumes one dependent hop after the event
completes, and fetches, queue pops and pushes cost their overheads. It executes exactly the
runtime the GPU will, so the predicted makespan includes every wait the schedule causes.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ..backends.cpu import RunResult, run
from ..ir import Program
from ..lower import Tables
from ..trace import TaskSpan, Trace
from .cost import CostModel


def simulate(tables: Tables, inputs: Mapping[str, np.ndarray] | None = None,
             cost_model: CostModel | None = None) -> RunResult:
    """Timed run; times in microseconds. Inputs are needed when maps read runtime tensors
    (then the bodies run too, so data-dependent routing is simulated as it happens)."""
    return run(tables, inputs, policy="timed", execute=inputs is not None,
               cost_model=cost_model or CostModel(num_sms=tables.num_sms))


def data_dependent_grids(p: Program) -> list[str]:
    """Grids touching a data-dependent edge: the dynamic part of the default hybrid."""
    return sorted({e.grid for e in p.edges if e.kind == "trigger" or e.map.is_data_dependent})


def default_dynamic_grids(p: Program) -> list[str]:
    """The dynamic grids of a hybrid schedule when none are named: the data-dependent ones,
    or, in a program without any, its last grid."""
    return data_dependent_grids(p) or [p.grids[-1].name]


@dataclass
class Choice:
    """Outcome of `choose_mode`: the mode, its options, every prediction and the reason."""

    mode: str
    options: dict
    predicted_us: dict[str, float]
    reason: str


def choose_mode(program: Program, env: Mapping[str, int], num_sms: int = 132,
                inputs: Mapping[str, np.ndarray] | None = None,
                cost_model: CostModel | None = None) -> Choice:
    """Predict static, dynamic, unfused (and hybrid where some grids are data dependent) and
    pick the lowest predicted makespan."""
    from . import lower
    candidates: dict[str, tuple[str, dict]] = {
        "static": ("static", {}), "dynamic": ("dynamic", {}), "unfused": ("unfused", {})}
    dd = data_dependent_grids(program)
    if dd and len(dd) < len(program.grids):
        candidates["hybrid"] = ("hybrid", {"dynamic_grids": dd})
    predicted = {}
    for name, (mode, opts) in candidates.items():
        t = lower(program, env, mode, num_sms, check=False, **opts)
        predicted[name] = simulate(t, inputs, cost_model).makespan
    best = min(predicted, key=lambda k: predicted[k])
    others = ", ".join(f"{k} {v:.2f} us" for k, v in sorted(predicted.items(), key=lambda kv: kv[1])
                       if k != best)
    reason = (f"{best} has the lowest predicted makespan ({predicted[best]:.2f} us; {others}) "
              f"for {program.name} at {dict(env)} on {num_sms} SMs")
    return Choice(candidates[best][0], candidates[best][1], predicted, reason)


def to_trace(result: RunResult, tables: Tables, title: str, source: str = "simulated") -> Trace:
    """The run's task records as a `Trace` (times as recorded: µs for simulated runs)."""
    b, p = tables.bound, tables.program
    spans = []
    for r in result.records:
        g = p.grids[b.task_grid[r.task]]
        spans.append(TaskSpan(r.sm, b.task_name(r.task), g.kind, g.name, float(r.start),
                              float(r.end), float(r.fetch),
                              tuple(b.element_name(x) for x in r.waits)))
    return Trace(title, source, tables.num_sms, spans,
                 {"mode": tables.mode, "binding": dict(b.env), "program": p.name})
