"""Tensor state of an interpreter run, with the data-race checks.

Tensors are held as `dtypes.numpy_dtype` arrays; inputs and every tile written are rounded
to the tensor's dtype (`dtypes.round_to_dtype`: bfloat16 to nearest, ties to even). Buffers
that tasks write start poisoned (NaN, or INT_POISON for integers) and every element
remembers the task that last wrote it. A read of an unwritten element, or of an element written
by a task that no chain of events orders before the reader (happens-before sets as bitsets over
task ids), raises MissingDependencyError naming the reader, the region and the producer.
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ..dtypes import numpy_dtype, round_to_dtype
from ..errors import MissingDependencyError
from ..lower import Bound
from ..maps import format_key

INT_POISON = -0x5EADBEEF
INPUT = -2       # writer id of input elements
UNWRITTEN = -1


class DataState:
    """Tensors of one launch and who wrote each element."""

    def __init__(self, b: Bound, inputs: Mapping[str, np.ndarray]):
        self.b, self.p = b, b.program
        self.data: dict[str, np.ndarray] = {}
        self.writer: dict[str, np.ndarray] = {}
        names = {t.name for t in self.p.tensors if t.role == "input"}
        unknown = set(inputs) - names
        if unknown:
            raise ValueError(f"program '{self.p.name}' has no input tensor named "
                             f"{', '.join(sorted(unknown))}")
        for t in self.p.tensors:
            shape, dt = b.tensor_shapes[t.name], numpy_dtype(t.dtype)
            if t.role == "input":
                if t.name not in inputs:
                    raise ValueError(f"input tensor '{t.name}' of program '{self.p.name}' "
                                     "was not given")
                arr = np.asarray(inputs[t.name])
                if arr.shape != shape:
                    raise ValueError(f"input tensor '{t.name}' has shape {arr.shape}, "
                                     f"expected {shape} at {b.env}")
                self.data[t.name] = round_to_dtype(t.dtype, arr)
                self.writer[t.name] = np.full(shape, INPUT, np.int64)
            else:
                fill = np.nan if np.issubdtype(dt, np.floating) else INT_POISON
                self.data[t.name] = np.full(shape, fill, dt)
                self.writer[t.name] = np.full(shape, UNWRITTEN, np.int64)

    def check_read(self, name: str, key, hb: int, who: str, what: str,
                   ran: np.ndarray) -> None:
        """Raise unless every element was written by a task in the reader's `hb` set."""
        w = self.writer[name][key]
        if (w == UNWRITTEN).any():
            producer = self._producer_of(name, key, w, ran)
            raise MissingDependencyError(
                f"task {who} reads {name}[{format_key(key)}] ({what}) before {producer} wrote "
                "it: a dependency is missing")
        for wt in np.unique(w[w >= 0]):
            if not (hb >> int(wt)) & 1:
                raise MissingDependencyError(
                    f"task {who} reads {name}[{format_key(key)}] ({what}) written by task "
                    f"{self.b.task_name(int(wt))}, but no event orders that task before it: "
                    "a dependency is missing")

    def write(self, name: str, key, value: np.ndarray, task: int, hb: int, who: str) -> None:
        prev = self.writer[name][key]
        for w in np.unique(prev[prev >= 0]):
            if w != task and not (hb >> int(w)) & 1:
                raise MissingDependencyError(
                    f"task {who} overwrites {name}[{format_key(key)}] written by task "
                    f"{self.b.task_name(int(w))} without an event ordering the two")
        self.data[name][key] = round_to_dtype(self.p.tensor(name).dtype, value)
        self.writer[name][key] = task

    def _producer_of(self, name: str, key, w: np.ndarray, ran: np.ndarray) -> str:
        """The not-yet-run task whose write region covers an unwritten element read."""
        full = np.zeros(self.b.tensor_shapes[name], bool)
        sub = full[key]
        sub[w == UNWRITTEN] = True
        full[key] = sub
        grids = [g for g in self.p.grids if any(r.tensor == name for r in g.writes)]
        for g in grids:
            r = next(r for r in g.writes if r.tensor == name)
            for t in self.b.grid_tasks(g.name):
                if ran[t]:
                    continue
                try:
                    k = r.map.key(self.b.task_env(t), self.b.tensor_shapes[name], self.data)
                except (IndexError, ValueError):  # its region depends on data not yet written
                    return f"a task of grid '{g.name}'"
                if full[k].any():
                    return f"its producer {self.b.task_name(t)}"
        return "any task" if not grids else f"a task of grid '{grids[0].name}'"
