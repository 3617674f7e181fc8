"""Bind a program to concrete symbol values and lower it to plain integer tables.

The tables are what both backends execute: a task table (grid, coordinates), event elements
with their wait counts (-1: read at run time), per-task affine wait and notify lists in CSR form,
the data-dependent edges each grid evaluates at run time, and a schedule (see `schedule`:
per-SM queues for static grids; ready list, dependency counts and push lists for dynamic ones).
"""
from __future__ import annotations

import heapq
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from . import sym
from .errors import CycleError, ProgramError
from .ir import Edge, Program
from .maps import Index, IndexMap
from .sym import Expr
from .vec import compile_exprs

RUNTIME = -1  # wait count read from a tensor at run time
GUARDED = -1  # a static queue slot whose task lies outside the binding (bucketed tables)


@dataclass
class Bound:
    """A program with every symbol bound: concrete shapes, extents, task and element ids."""

    program: Program
    env: dict[str, int]
    tensor_shapes: dict[str, tuple[int, ...]]
    event_shapes: dict[str, tuple[int, ...]]
    grid_extents: dict[str, tuple[int, ...]]
    task_base: dict[str, int]
    event_base: dict[str, int]
    num_tasks: int
    num_elements: int
    task_grid: np.ndarray = field(repr=False)     # int32[T]: grid index
    task_coords: np.ndarray = field(repr=False)   # int64[T, max rank]: coordinates

    def coords(self, t: int) -> tuple[int, ...]:
        g = self.program.grids[self.task_grid[t]]
        return tuple(int(c) for c in self.task_coords[t, :len(g.axes)])

    def task_env(self, t: int) -> dict[str, int]:
        g = self.program.grids[self.task_grid[t]]
        return {**self.env, **dict(zip(g.axes, self.coords(t)))}

    def task_name(self, t: int) -> str:
        g = self.program.grids[self.task_grid[t]]
        return f"{g.name}({', '.join(map(str, self.coords(t)))})"

    def grid_env(self, name: str) -> dict[str, object]:
        """Symbols as ints and the grid's coordinates as arrays over its tasks."""
        g = self.program.grid(name)
        rows = self.grid_tasks(name)
        return {**self.env, **{a: self.task_coords[rows.start:rows.stop, i]
                               for i, a in enumerate(g.axes)}}

    def event_of(self, x: int) -> str:
        """Name of the event tensor holding element id `x`."""
        if not 0 <= x < self.num_elements:
            raise ValueError(f"element id {x} is out of range")
        return next(ev.name for ev in reversed(self.program.events)
                    if self.event_base[ev.name] <= x)

    def element_name(self, x: int) -> str:
        name = self.event_of(x)
        shape = self.event_shapes[name]
        idx = np.unravel_index(x - self.event_base[name], shape) if shape else ()
        return f"{name}[{', '.join(str(int(i)) for i in idx)}]"

    def grid_tasks(self, name: str) -> range:
        n = int(np.prod(self.grid_extents[name], dtype=np.int64))
        return range(self.task_base[name], self.task_base[name] + n)


def bind(program: Program, env: Mapping[str, int]) -> Bound:
    """Check `env` against the declared symbol ranges and enumerate tasks and elements."""
    sym.check_binding(program.symbols, env)
    env = {s.name: int(env[s.name]) for s in program.symbols}

    def ev(shape, what):
        out = tuple(int(sym.evaluate(d, env)) for d in shape)
        if any(d < 0 for d in out):
            raise ProgramError(f"{what} has negative size {out} at {env}")
        return out

    tshapes = {t.name: ev(t.shape, f"tensor '{t.name}'") for t in program.tensors}
    eshapes = {e.name: ev(e.shape, f"event '{e.name}'") for e in program.events}
    extents = {g.name: ev(g.extent, f"task grid '{g.name}'") for g in program.grids}
    task_base, ebase = {}, {}
    rank = max((len(g.axes) for g in program.grids), default=0)
    grid_ids, coords = [], []
    total = 0
    by_extent: dict[tuple[int, ...], np.ndarray] = {}  # (a model's layers share extents)
    for gi, g in enumerate(program.grids):
        task_base[g.name] = total
        c = by_extent.get(extents[g.name])
        if c is None:
            c = by_extent[extents[g.name]] = grid_coords(extents[g.name], rank)
        coords.append(c)
        grid_ids.append(np.full(len(c), gi, np.int32))
        total += len(c)
    n_el = 0
    for e in program.events:
        ebase[e.name] = n_el
        n_el += int(np.prod(eshapes[e.name], dtype=np.int64))
    return Bound(program, env, tshapes, eshapes, extents, task_base, ebase, total, n_el,
                 np.concatenate(grid_ids) if grid_ids else np.zeros(0, np.int32),
                 np.concatenate(coords).astype(np.int64) if coords else np.zeros((0, 0)))


def grid_coords(extent, rank: int) -> np.ndarray:
    """int64[tasks, rank]: coordinates of a grid's tasks in row-major order, padded with 0."""
    ext = tuple(int(e) for e in extent)
    c = np.indices(ext).reshape(len(ext), -1).T if ext else np.zeros((1, 0), np.int64)
    return np.pad(c, ((0, 0), (0, rank - c.shape[1]))).astype(np.int64)


def edge_elements(b: Bound, edge: Edge, t: int, tensors=None) -> np.ndarray:
    """Element ids (global) that task `t` notifies or waits on through `edge`."""
    local = edge.map.elements(b.task_env(t), b.event_shapes[edge.event], tensors,
                              what=f"{edge.kind} edge {edge.grid} -> {edge.event}, task "
                                   f"{b.task_name(t)}")
    return local + b.event_base[edge.event]


@dataclass
class Tables:
    """Lowered program for one binding: the integer tables both backends execute."""

    bound: Bound
    wait_ptr: np.ndarray           # CSR over tasks: distinct affine wait elements
    wait_elem: np.ndarray
    notify_ptr: np.ndarray         # CSR over tasks: affine notifies (repeats count twice)
    notify_elem: np.ndarray
    target: np.ndarray             # int64[E]: wait count, or RUNTIME
    dyn_edges: dict[int, list[int]]      # grid index -> data-dependent notify/wait edge ids
    trigger_edges: dict[int, list[int]]  # consumer grid index -> trigger edge ids
    notify_count: np.ndarray       # int64[E]: affine notifies each element receives
    skip_ptr: np.ndarray           # CSR over tasks: notifies a guarded task still makes
    skip_elem: np.ndarray
    # schedule (filled by `schedule.schedule`)
    mode: str = "unscheduled"
    num_sms: int = 132
    grid_mode: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int8))  # 0 static, 1 dyn
    queue_ptr: np.ndarray = field(default_factory=lambda: np.zeros(1, np.int64))  # per-SM CSR
    queue_task: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    ready: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    pending: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    push_ptr: np.ndarray = field(default_factory=lambda: np.zeros(1, np.int64))
    push_task: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    early: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))  # per element
    capacity: int = 0
    reason: str = ""               # why this schedule (see `schedule.lower`, mode "auto")

    @property
    def program(self) -> Program:
        return self.bound.program


def grid_elements(b: Bound, edge: Edge, memo: dict | None = None,
                  ) -> tuple[np.ndarray, np.ndarray]:
    """(task ids, global element ids) pairs of an affine edge over all tasks of its grid.
    `memo` (one per binding) shares the enumeration between edges of equal maps over grids
    of equal extents and events of equal shapes (a model's layers), which differ only in
    their first task and element."""
    rows = b.grid_tasks(edge.grid)
    shape = b.event_shapes[edge.event]
    key = (edge.map, b.grid_extents[edge.grid], shape)
    found = memo.get(key) if memo is not None else None
    if found is None:
        what = f"{edge.kind} edge {edge.grid} -> {edge.event}, task "
        counts, flat = edge.map.ragged_elements(
            b.grid_env(edge.grid), shape, len(rows),
            lambda i: what + b.task_name(rows.start + i))
        found = np.repeat(np.arange(len(rows)), counts), flat
        if memo is not None:
            memo[key] = found
    local_tasks, local_elems = found
    return local_tasks + rows.start, local_elems + b.event_base[edge.event]


def _pairs_csr(n: int, pairs: list[tuple[np.ndarray, np.ndarray]], unique: bool):
    tasks = np.concatenate([p[0] for p in pairs]) if pairs else np.zeros(0, np.int64)
    elems = np.concatenate([p[1] for p in pairs]) if pairs else np.zeros(0, np.int64)
    if unique and tasks.size:  # distinct (task, element) pairs, by task then element
        span = int(elems.max()) + 1
        key = np.sort(tasks.astype(np.int64) * span + elems, kind="stable")  # sorted runs
        key = key[np.concatenate([[True], key[1:] != key[:-1]])]
        tasks, elems = key // span, key % span
    else:
        order = np.argsort(tasks, kind="stable")
        tasks, elems = tasks[order], elems[order]
    ptr = np.zeros(n + 1, np.int64)
    ptr[1:] = np.cumsum(np.bincount(tasks, minlength=n))
    return ptr, elems.astype(np.int64)


def build_tables(b: Bound) -> Tables:
    """Enumerate affine edges (vectorised per edge) and wait counts (no schedule yet)."""
    p = b.program
    waits: list[tuple[np.ndarray, np.ndarray]] = []
    notifies: list[tuple[np.ndarray, np.ndarray]] = []
    skips: list[tuple[np.ndarray, np.ndarray]] = []
    dyn: dict[int, list[int]] = {}
    trig: dict[int, list[int]] = {}
    gidx = {g.name: i for i, g in enumerate(p.grids)}
    memo: dict = {}
    for ei, edge in enumerate(p.edges):
        gi = gidx[edge.grid]
        if edge.kind == "trigger":
            trig.setdefault(gi, []).append(ei)
            continue
        if edge.map.is_data_dependent:
            dyn.setdefault(gi, []).append(ei)
            continue
        pairs = grid_elements(b, edge, memo)
        (waits if edge.kind == "wait" else notifies).append(pairs)
        if edge.on_skip:
            skips.append(pairs)
    wait_ptr, wait_elem = _pairs_csr(b.num_tasks, waits, unique=True)
    notify_ptr, notify_elem = _pairs_csr(b.num_tasks, notifies, unique=False)
    skip_ptr, skip_elem = _pairs_csr(b.num_tasks, skips, unique=False)
    notify_count = np.bincount(notify_elem, minlength=b.num_elements).astype(np.int64)
    target = event_targets(b, notify_count)
    wait_elem = _runtime_counts_last(wait_ptr, wait_elem, target)
    return Tables(b, wait_ptr, wait_elem, notify_ptr, notify_elem, target,
                  dyn, trig, notify_count, skip_ptr, skip_elem)


def _runtime_counts_last(ptr: np.ndarray, elems: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Each task's waits with the elements whose count is read at run time last (otherwise
    in element order): a static schedule reads such a count when its wait starts, after the
    task's other waits, one of which orders the count's writer before it."""
    runtime = target[elems] == RUNTIME
    if not runtime.any():
        return elems
    tasks = np.repeat(np.arange(len(ptr) - 1), np.diff(ptr))
    return elems[np.lexsort((elems, runtime, tasks))]


def event_targets(b: Bound, notify_count: np.ndarray) -> np.ndarray:
    """Wait count of every element: the closed form where declared or derived, the number of
    affine notifies where the count is left to enumeration, RUNTIME where read from a tensor."""
    target = np.zeros(b.num_elements, dtype=np.int64)
    for e in b.program.events:
        base, shape = b.event_base[e.name], b.event_shapes[e.name]
        n = int(np.prod(shape, dtype=np.int64))
        if e.runtime_count is not None:
            target[base:base + n] = RUNTIME
        elif e.wait_count is None:
            target[base:base + n] = notify_count[base:base + n]
        else:
            expr = e.wait_count.dims[0].value  # type: ignore[union-attr]
            idx = np.indices(shape).reshape(len(shape), -1) if shape else []
            names = list(b.env) + list(e.axes)
            (val,) = compile_exprs([expr], names)(*b.env.values(), *idx)
            target[base:base + n] = np.broadcast_to(np.asarray(val, np.int64), (n,))
    return target


def grid_graph(p: Program) -> list[set[int]]:
    """Predecessor grids of each grid: P precedes C when P notifies an event C waits on
    (elements fixed to different constants, as in stage barriers, do not connect)."""
    gi = {g.name: i for i, g in enumerate(p.grids)}
    preds: list[set[int]] = [set() for _ in p.grids]
    notifies = [e for e in p.edges if e.kind == "notify"]
    for w in p.edges:
        if w.kind not in ("wait", "trigger"):
            continue
        for n in notifies:
            if n.event == w.event and n.grid != w.grid and \
                    (w.kind == "trigger" or _may_meet(n.map, w.map)):
                preds[gi[w.grid]].add(gi[n.grid])
    return preds


def _may_meet(a: IndexMap, b: IndexMap) -> bool:
    for da, db in zip(a.dims, b.dims):
        if isinstance(da, Index) and isinstance(db, Index) and isinstance(da.value, Expr) \
                and isinstance(db.value, Expr) and da.value.is_const and db.value.is_const \
                and da.value.value != db.value.value:
            return False
    return True


def task_predecessors(tables: Tables) -> list[set[int]]:
    """Tasks each task must follow: notifiers of its affine waits, and every notifier task of
    an event it reaches through a data-dependent wait or a trigger (collapsed conservatively)."""
    b, p = tables.bound, tables.program
    by_elem: dict[int, list[int]] = {}
    for t in range(b.num_tasks):
        for x in tables.notify_elem[tables.notify_ptr[t]:tables.notify_ptr[t + 1]]:
            by_elem.setdefault(int(x), []).append(t)
    notifier_grids: dict[str, set[str]] = {}
    for e in p.edges:
        if e.kind == "notify":
            notifier_grids.setdefault(e.event, set()).add(e.grid)
    preds: list[set[int]] = [set() for _ in range(b.num_tasks)]
    for t in range(b.num_tasks):
        for x in tables.wait_elem[tables.wait_ptr[t]:tables.wait_ptr[t + 1]]:
            preds[t].update(by_elem.get(int(x), ()))
    collapsed = [(p.edges[ei], gi) for d in (tables.dyn_edges, tables.trigger_edges)
                 for gi, eis in d.items() for ei in eis]
    for edge, gi in collapsed:
        if edge.kind == "notify":
            continue
        sources = [s for g in notifier_grids.get(edge.event, ()) for s in b.grid_tasks(g)]
        for t in b.grid_tasks(p.grids[gi].name):
            preds[t].update(s for s in sources if s != t)
    return preds


def check_acyclic(tables: Tables) -> None:
    """CycleError if tasks wait on each other in a cycle. Fast path: an acyclic grid graph
    without intra-grid waits has no task-level cycle; otherwise tasks are sorted one by one.
    A grid that waits on elements of an event it notifies only where the two maps are fixed
    to different constants (a stage barrier: wait on s - 1, notify s) waits on other grids."""
    edges = tables.program.edges
    self_wait = any(w.grid == n.grid and w.event == n.event and
                    (w.kind == "trigger" or _may_meet(n.map, w.map))
                    for w in edges if w.kind in ("wait", "trigger")
                    for n in edges if n.kind == "notify")
    if self_wait or grid_order(grid_graph(tables.program)) is None:
        topological_order(tables)


def grid_successors(preds: list[set[int]]) -> list[list[int]]:
    """The successors of each grid, from the predecessor sets `preds`."""
    succs: list[list[int]] = [[] for _ in preds]
    for c, ps in enumerate(preds):
        for p in ps:
            succs[p].append(c)
    return succs


def grid_order(preds: list[set[int]], prio=None) -> list[int] | None:
    """Topological order of the grids (predecessor sets `preds`), highest `prio` first among
    ready ones, then program order; None if the grid graph has a cycle."""
    prio = np.zeros(len(preds)) if prio is None else prio
    indeg = [len(p) for p in preds]
    succs = grid_successors(preds)
    heap = [(-prio[g], g) for g in range(len(preds)) if indeg[g] == 0]
    heapq.heapify(heap)
    out = []
    while heap:
        _, g = heapq.heappop(heap)
        out.append(g)
        for s in succs[g]:
            indeg[s] -= 1
            if indeg[s] == 0:
                heapq.heappush(heap, (-prio[s], s))
    return out if len(out) == len(preds) else None


def topological_order(tables: Tables) -> np.ndarray:
    """One global topological order of the tasks (smallest ready id first); CycleError naming
    the tasks of one cycle if there is none."""
    preds = task_predecessors(tables)
    n = len(preds)
    succs: list[list[int]] = [[] for _ in range(n)]
    indeg = np.zeros(n, dtype=np.int64)
    for t, ps in enumerate(preds):
        indeg[t] = len(ps)
        for s in ps:
            succs[s].append(t)
    heap = [t for t in range(n) if indeg[t] == 0]
    heapq.heapify(heap)
    order: list[int] = []
    while heap:
        t = heapq.heappop(heap)
        order.append(t)
        for s in succs[t]:
            indeg[s] -= 1
            if indeg[s] == 0:
                heapq.heappush(heap, s)
    if len(order) < n:
        raise CycleError(_cycle_message(tables.bound, preds, indeg))
    return np.asarray(order, dtype=np.int64)


def _cycle_message(b: Bound, preds: list[set[int]], indeg: np.ndarray) -> str:
    start = int(np.flatnonzero(indeg > 0)[0])
    path, seen, t = [], {}, start
    while t not in seen:
        seen[t] = len(path)
        path.append(t)
        t = next(s for s in preds[t] if indeg[s] > 0)
    cycle = path[seen[t]:] + [t]
    names = " <- ".join(b.task_name(x) for x in cycle)
    grids = sorted({b.program.grids[b.task_grid[x]].name for x in cycle})
    return (f"program '{b.program.name}' has a dependency cycle between task grids "
            f"{', '.join(grids)} at {b.env}: {names} (each waits on the next)")
