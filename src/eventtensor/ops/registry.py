"""The closed vocabulary of task kinds, keyed by name.

A task kind is a rule table entry: its numpy reference body (the CPU interpreter runs it; the
CUDA backend must match it) and its flop count per task (bytes moved follow from the tiles it
reads and writes), which the schedulers' cost model uses.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np


@dataclass
class TaskContext:
    """What one task's body sees: its coordinates, the symbol binding, the kind's parameters,
    the tiles of the tensors it reads (`inputs`) and the shapes of the tiles it must return."""

    grid: str
    coords: dict[str, int]
    env: Mapping[str, int]
    params: Mapping[str, object]
    inputs: dict[str, np.ndarray]
    out_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    out_dtypes: dict[str, np.dtype] = field(default_factory=dict)

    def out(self, name: str, value: np.ndarray) -> np.ndarray:
        """`value` broadcast and cast to the shape and dtype of output tile `name`."""
        return np.broadcast_to(np.asarray(value), self.out_shapes[name]).astype(
            self.out_dtypes[name])


Body = Callable[[TaskContext], dict[str, np.ndarray]]
Shapes = Mapping[str, tuple[int, ...]]
Flops = Callable[[Shapes, Shapes, Mapping[str, object]], int]  # (reads, writes, params)


def no_flops(reads: Shapes, writes: Shapes, params: Mapping[str, object]) -> int:
    return 0


@dataclass(frozen=True)
class TaskKind:
    name: str
    doc: str
    reference: Body
    flops: Flops = no_flops


KINDS: dict[str, TaskKind] = {}


def task_kind(name: str, flops: Flops = no_flops) -> Callable[[Body], Body]:
    """Register `fn` as the reference body of task kind `name` (its docstring is the doc);
    `flops` counts one task's floating-point operations from its tile shapes."""

    def wrap(fn: Body) -> Body:
        if name in KINDS:
            raise ValueError(f"task kind '{name}' is registered twice")
        KINDS[name] = TaskKind(name, (fn.__doc__ or "").strip().splitlines()[0], fn, flops)
        return fn

    return wrap

