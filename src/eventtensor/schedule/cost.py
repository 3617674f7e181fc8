"""Cost model: what one task moves and computes, and how long that takes on an H200.

Bytes of a task = the elements of every tile it reads and writes times their size; flops come
from the task kind. Time = max(bytes / bandwidth share, flops / per-SM compute). Constants are
measured on our H200 (see the design notes); the runtime overheads not yet measured on the
megakernel itself (dispatch, queue pop and push) are estimates, named as such.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ..ir import Program, Region, TaskGrid
from ..maps import Full, Index, Load, Span
from ..ops import KINDS

ITEMSIZE = {"float32": 4, "float16": 2, "bfloat16": 2, "int32": 4, "int64": 8}


@dataclass(frozen=True)
class Cost:
    """Estimated work of one task."""

    bytes: int
    flops: int


@dataclass(frozen=True)
class CostModel:
    """H200 constants. Measured: bandwidth (device-to-device copy), dependent hop (acquire spin
    plus release add between CTAs), 132-CTA barrier, dynamic queue pop amortised over many pops,
    the per-task floor (profiled megakernel: the smallest tiles take about 1.8 us, see
    benchmarks/results/megakernel_bench.md).
    Estimated: one SM's own bandwidth ceiling, static dispatch, push and pop latency."""

    num_sms: int = 132
    bandwidth: float = 4.27e12          # bytes/s, all SMs together (measured)
    sm_bandwidth: float = 1.0e11        # bytes/s one SM can pull alone (estimate)
    flops: float = 7.9e14               # bf16 dense flop/s, whole GPU
    hop_us: float = 0.82                # notify -> waiter wakes (measured)
    barrier_us: float = 0.89            # full 132-CTA barrier (measured)
    static_dispatch_us: float = 0.05    # read the next queue entry and decode it (estimate)
    pop_us: float = 0.5                 # dynamic queue pop: atomic ticket + record load (estimate)
    push_us: float = 0.3                # one batch push: ticket for n slots (estimate)
    queue_per_task_us: float = 0.0027   # each queued task, amortised (measured)
    task_floor_us: float = 1.8          # smallest tiles on our megakernel (measured profile)

    def task_us(self, cost: Cost, active_sms: int) -> float:
        """Duration of one task while `active_sms` SMs share the memory system: its bytes
        and flops at the SM's share, but never below the measured per-task floor."""
        share = min(self.sm_bandwidth, self.bandwidth / max(active_sms, 1))
        return max(self.task_floor_us,
                   max(cost.bytes / share, cost.flops / (self.flops / self.num_sms)) * 1e6)


def region_shape(p: Program, g: TaskGrid, r: Region, env: Mapping[str, int],
                 tensor_shape: tuple[int, ...]) -> tuple[int, ...]:
    """Tile shape of region `r` for the first task of `g` (coordinates 0). Data-dependent
    sizes are estimated: a vector load counts its length, a range read from tensors counts the
    grid parameter `span_hint` (default 1)."""
    coords = {**env, **{a: 0 for a in g.axes}}
    out = []
    for d, size in zip(r.map.dims, tensor_shape):
        if isinstance(d, Full):
            out.append(size)
        elif isinstance(d, Span):
            if isinstance(d.start, Load) or isinstance(d.stop, Load):
                out.append(int(g.param_dict.get("span_hint", 1)))  # type: ignore[arg-type]
            else:
                out.append(max(d.stop.eval(coords) - d.start.eval(coords), 0))
        elif isinstance(d, Index) and isinstance(d.value, Load) and d.value.is_vector:
            t = p.tensor(d.value.tensor)
            axis = next(i for i, x in enumerate(d.value.index) if isinstance(x, Full))
            out.append(int(t.shape[axis].eval(env)))
        else:
            out.append(1)
    return tuple(out)


def grid_costs(p: Program, env: Mapping[str, int]) -> dict[str, Cost]:
    """Per-task cost estimate of every grid at binding `env`."""
    shapes = {t.name: tuple(int(d.eval(env)) for d in t.shape) for t in p.tensors}
    out = {}
    for g in p.grids:
        reads = {r.tensor: region_shape(p, g, r, env, shapes[r.tensor]) for r in g.reads}
        writes = {r.tensor: region_shape(p, g, r, env, shapes[r.tensor]) for r in g.writes}
        nbytes = sum(int(np.prod(s)) * ITEMSIZE[p.tensor(t).dtype]
                     for part in (reads, writes) for t, s in part.items())
        out[g.name] = Cost(nbytes, int(KINDS[g.kind].flops(reads, writes, g.param_dict)))
    return out
