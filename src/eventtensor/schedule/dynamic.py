"""Dynamic scheduling tables: ready list, per-task dependency counts, per-element push lists.

A task of a dynamic grid enters the device queue when its last dependency is released:
* an affine wait element releases it when complete, or, with early push, when every notifier
  of the element has been *dispatched* (popped) -- the task then still waits on completion
  before it runs; counters keep dispatches in the low 16 bits and completions above;
* a data-dependent wait counts as waiting on every element of its event (collapsed);
* a trigger edge releases the runtime range the map gives for the completed element.
Early push applies to elements whose notifies are all affine and whose count is static.
"""
from __future__ import annotations

import numpy as np

from ..errors import ProgramError
from ..lower import RUNTIME, Tables, _csr

DISPATCH_BITS = 16


def dynamic_tables(tables: Tables, early_push: bool) -> None:
    """Fill ready, pending, push lists, early flags and queue capacity (in place)."""
    b, p = tables.bound, tables.program
    dyn_task = tables.grid_mode[b.task_grid] == 1
    pending = np.zeros(b.num_tasks, np.int64)
    pushes: list[list[int]] = [[] for _ in range(b.num_elements)]
    for t in np.flatnonzero(dyn_task):  # elements with a static count of 0 start complete
        for x in tables.wait_elem[tables.wait_ptr[t]:tables.wait_ptr[t + 1]]:
            if tables.target[x] != 0:
                pushes[int(x)].append(int(t))
                pending[t] += 1
    for gi, eis in tables.dyn_edges.items():
        if tables.grid_mode[gi] != 1:
            continue
        for ei in eis:
            edge = p.edges[ei]
            if edge.kind != "wait":
                continue
            base = b.event_base[edge.event]
            n = int(np.prod(b.event_shapes[edge.event], dtype=np.int64))
            for t in b.grid_tasks(p.grids[gi].name):
                pending[t] += n
                for x in range(base, base + n):
                    pushes[x].append(t)
    for gi, eis in tables.trigger_edges.items():
        if tables.grid_mode[gi] == 1:
            for t in b.grid_tasks(p.grids[gi].name):
                pending[t] += len(eis)
    tables.pending = pending
    tables.push_ptr, tables.push_task = _csr([np.asarray(x, np.int64) for x in pushes])
    tables.ready = np.flatnonzero(dyn_task & (pending == 0)).astype(np.int64)
    tables.capacity = int(dyn_task.sum())
    early = np.zeros(b.num_elements, bool)
    if early_push:
        early[:] = tables.target != RUNTIME
        for e in p.edges:
            if e.kind == "notify" and e.map.is_data_dependent:
                base = b.event_base[e.event]
                early[base:base + int(np.prod(b.event_shapes[e.event], dtype=np.int64))] = False
        big = np.flatnonzero(early & (tables.target >= 1 << DISPATCH_BITS))
        if big.size:
            raise ProgramError(f"event element {b.element_name(int(big[0]))} waits for "
                               f"{int(tables.target[big[0]])} notifies; early push counts at "
                               f"most {(1 << DISPATCH_BITS) - 1}")
    tables.early = early
