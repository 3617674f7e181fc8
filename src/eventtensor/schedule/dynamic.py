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
from ..lower import RUNTIME, Tables

DISPATCH_BITS = 16


def dynamic_tables(tables: Tables, early_push: bool) -> None:
    """Fill ready, pending, push lists, early flags and queue capacity (in place)."""
    b, p = tables.bound, tables.program
    dyn_task = tables.grid_mode[b.task_grid] == 1
    # (consumer, element) pairs, vectorised: affine waits of dynamic tasks on elements that do
    # not start complete (static count 0), then collapsed data-dependent waits (whole event)
    owner = np.repeat(np.arange(b.num_tasks), np.diff(tables.wait_ptr))
    keep = dyn_task[owner] & (tables.target[tables.wait_elem] != 0)
    tasks, elems = [owner[keep]], [tables.wait_elem[keep]]
    pending = np.bincount(owner[keep], minlength=b.num_tasks).astype(np.int64)
    for gi, eis in tables.dyn_edges.items():
        if tables.grid_mode[gi] != 1:
            continue
        rows = b.grid_tasks(p.grids[gi].name)
        for ei in eis:
            edge = p.edges[ei]
            if edge.kind != "wait":
                continue
            base = b.event_base[edge.event]
            n = int(np.prod(b.event_shapes[edge.event], dtype=np.int64))
            pending[rows.start:rows.stop] += n
            tasks.append(np.repeat(np.arange(rows.start, rows.stop), n))
            elems.append(np.tile(np.arange(base, base + n), len(rows)))
    for gi, eis in tables.trigger_edges.items():
        if tables.grid_mode[gi] == 1:
            rows = b.grid_tasks(p.grids[gi].name)
            pending[rows.start:rows.stop] += len(eis)
    t_all, x_all = np.concatenate(tasks), np.concatenate(elems)
    order = np.lexsort((t_all, x_all))  # by element, then consumer
    tables.pending = pending
    tables.push_ptr = np.zeros(b.num_elements + 1, np.int64)
    tables.push_ptr[1:] = np.cumsum(np.bincount(x_all, minlength=b.num_elements))
    tables.push_task = t_all[order].astype(np.int64)
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
