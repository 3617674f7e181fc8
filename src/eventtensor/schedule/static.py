"""Static scheduling: per-SM task queues from one global topological order.

A `StaticTemplate` is built once per program (and SM count); `instantiate(env)` makes the
queues for a binding with a handful of numpy operations, no per-task Python, and caches them.
The global order lists grids in a topological order of the grid graph, each grid's tasks in
row-major order, so every SM queue is a subsequence of one topological order (deadlock free).

Policies:
* "round_robin" (the paper's baseline): grids in program order, task k of the global order on
  SM k mod S;
* "critical_path": grids by longest remaining path (sum of per-task times along the grid
  graph, at a reference binding, by default every symbol at its maximum), and each task placed
  on the SM with the least accumulated work so far (cost, not task count); the placement is
  computed once at the reference binding and reused by every smaller binding. A sink grid
  (nothing waits on it, e.g. a KV-cache append) whose producers feed other grids too comes
  right after the last of those siblings rather than after every other grid: its tasks then
  fill the SMs that wait for the siblings' consumers instead of the step's tail;
* "critical_path_sinks_last": the same with sinks by their own remaining path (the shortest:
  after every other grid they do not precede).

`check_static(tables)` proves any given queues deadlock free, or says which order is wrong.
"""
from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping

import numpy as np

from ..errors import ProgramError
from ..ir import Program
from ..lower import (
    GUARDED,
    Tables,
    grid_coords,
    grid_graph,
    grid_order,
    grid_successors,
    task_predecessors,
)
from ..vec import compile_exprs
from .cost import CostModel, grid_costs

POLICIES = ("critical_path", "critical_path_sinks_last", "round_robin")


class StaticTemplate:
    """Binding-independent static schedule of the grids in `grids` (default: all)."""

    def __init__(self, program: Program, num_sms: int = 132, policy: str = "critical_path",
                 grids: Iterable[str] | None = None, reference: Mapping[str, int] | None = None,
                 cost_model: CostModel | None = None):
        if policy not in POLICIES:
            raise ValueError(f"unknown static policy '{policy}' (one of {', '.join(POLICIES)})")
        if num_sms < 1:
            raise ValueError(f"num_sms must be at least 1, got {num_sms}")
        self.program, self.num_sms, self.policy = program, num_sms, policy
        names = [g.name for g in program.grids]
        chosen = set(names if grids is None else grids)
        self.sym_names = [s.name for s in program.symbols]
        self.rank = max((len(g.axes) for g in program.grids), default=0)
        self._ext_pos = np.array([gi * self.rank + k for gi, g in enumerate(program.grids)
                                  for k in range(len(g.axes))], np.int64)
        self._extents = self._compile_extents()
        ref = dict(reference or {s.name: s.hi for s in program.symbols})
        ref_counts = self._grid_counts(ref)
        cm = cost_model or CostModel(num_sms=num_sms)
        costs = grid_costs(program, ref)
        task_us = np.array([cm.task_us(costs[n], num_sms) for n in names])
        preds = grid_graph(program)
        if policy == "round_robin":
            prio = np.zeros(len(names))
        else:
            prio = _longest_path(preds, task_us * np.ceil(ref_counts / num_sms))
            if policy == "critical_path":
                prio = _sinks_after_siblings(preds, prio)
        self.order = np.array([i for i in _topo(preds, prio) if names[i] in chosen], np.int64)
        self.reference = ref
        self.ref_ext = self._grid_extents(ref)
        self.layouts: list[tuple[np.ndarray, tuple]] = []  # (extents, entries) small first
        if policy != "round_robin":
            for r in ([ref] if reference else _buckets(program, ref)):
                costs = grid_costs(program, r)
                us = np.array([cm.task_us(costs[n], num_sms) for n in names])
                ext = self._grid_extents(r)
                self.layouts.append((ext, self._place(ext, us, preds, cm.hop_us)))
        self._cache: dict[tuple[int, ...], tuple[np.ndarray, np.ndarray]] = {}

    def _compile_extents(self):
        return compile_exprs([d for g in self.program.grids for d in g.extent], self.sym_names)

    def __getstate__(self) -> dict:
        """Pickled without the compiled extent function (rebuilt on load) and the
        per-binding queues."""
        return {k: v for k, v in self.__dict__.items() if k != "_extents"} | {"_cache": {}}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._extents = self._compile_extents()

    def _place(self, ext_all: np.ndarray, task_us: np.ndarray, preds: list[set[int]],
               hop_us: float) -> tuple:
        """List placement at one reference binding: tasks in global order, each on the SM
        that frees up first; a grid's tasks start no earlier than its predecessor grids end
        (plus a dependent hop). Returns the queues as entries (SM, grid, coordinates) sorted by
        SM, in order."""
        heap = [(0.0, s) for s in range(self.num_sms)]
        counts = ext_all.prod(axis=1)
        grid_end = np.zeros(len(counts))
        grids, coords, sms = [], [], []
        for g in self.order:
            ready = max((grid_end[p] + hop_us for p in preds[g]), default=0.0)
            out = np.empty(int(counts[g]), np.int64)
            end = ready
            for j in range(out.size):
                free, s = heapq.heappop(heap)
                finish = max(free, ready) + task_us[g]
                out[j] = s
                end = max(end, finish)
                heapq.heappush(heap, (finish, s))
            grid_end[g] = end
            coords.append(grid_coords(ext_all[g][:len(self.program.grids[g].axes)], self.rank))
            grids.append(np.full(out.size, g, np.int64))
            sms.append(out)
        sm = _cat(sms, 0)
        order = np.argsort(sm, kind="stable")
        return sm[order], _cat(grids, 0)[order], list(_cat(coords, (0, self.rank))[order].T.copy())

    def _grid_extents(self, env: Mapping[str, int]) -> np.ndarray:
        """int64[G, max rank]: each grid's extents, padded with 1."""
        out = np.ones((len(self.program.grids), self.rank), np.int64)
        if self._ext_pos.size:
            vals = self._extents(*(env[n] for n in self.sym_names))
            out.reshape(-1)[self._ext_pos] = np.asarray(vals, np.int64).reshape(-1)
        return out

    def _grid_counts(self, env: Mapping[str, int]) -> np.ndarray:
        return self._grid_extents(env).prod(axis=1)

    def instantiate(self, env: Mapping[str, int]) -> tuple[np.ndarray, np.ndarray]:
        """Per-SM queues for binding `env` as CSR (queue_ptr[S + 1], queue_task[...]), task
        ids as `lower.bind` numbers them; cached per binding."""
        key = tuple(int(env[n]) for n in self.sym_names)
        hit = self._cache.get(key)
        if hit is None:
            hit = self._round_robin(env) if self.policy == "round_robin" else self._filter(env)
            self._cache[key] = hit
        return hit

    def _round_robin(self, env: Mapping[str, int]) -> tuple[np.ndarray, np.ndarray]:
        counts = self._grid_counts(env)
        base = np.concatenate(([0], np.cumsum(counts)[:-1]))
        n = counts[self.order]
        total = int(n.sum())
        grid_of = np.repeat(self.order, n)
        j = np.arange(total) - np.repeat(np.cumsum(n) - n, n)
        sm = np.arange(total) % self.num_sms
        idx = np.argsort(sm, kind="stable")
        ptr = np.zeros(self.num_sms + 1, np.int64)
        ptr[1:] = np.cumsum(np.bincount(sm, minlength=self.num_sms))
        return ptr, (base[grid_of] + j)[idx]

    def _filter(self, env: Mapping[str, int]) -> tuple[np.ndarray, np.ndarray]:
        """The reference queues restricted to the tasks that exist at `env`, renumbered: a
        few array operations over the reference entries, no sorting."""
        ext = self._grid_extents(env)
        if np.any(ext > self.ref_ext):
            g = self.program.grids[int(np.flatnonzero((ext > self.ref_ext).any(1))[0])].name
            raise ValueError(f"binding {dict(env)} makes task grid '{g}' larger than at the "
                             f"template's reference binding {self.reference}")
        counts = ext.prod(axis=1)
        base = np.concatenate(([0], np.cumsum(counts)[:-1]))
        entry_sm, g, entry_coords = next((e for x, e in self.layouts if np.all(ext <= x)),
                                         self.layouts[-1][1])
        ids = base[g]
        local = np.zeros(g.size, np.int64)
        valid = np.ones(g.size, bool)
        for k, c in enumerate(entry_coords):  # row-major, Horner's rule per dimension
            e = ext[:, k][g]
            valid &= c < e
            local = local * e + c
        ids = ids + local
        ptr = np.zeros(self.num_sms + 1, np.int64)
        ptr[1:] = np.cumsum(np.bincount(entry_sm[valid], minlength=self.num_sms))
        return ptr, ids[valid]


def _buckets(p: Program, top: Mapping[str, int]) -> list[dict[str, int]]:
    """Reference bindings: powers of two up to the maximum for a program of one symbol (each
    binding reuses the smallest bucket that covers it), else just the maxima."""
    if len(p.symbols) != 1:
        return [dict(top)]
    s = p.symbols[0]
    lo, hi = s.lo or 0, top[s.name]
    vals = sorted({v for v in (1 << k for k in range(hi.bit_length() + 1)) if lo <= v < hi}
                  | {hi})
    return [{s.name: v} for v in vals]


def _cat(parts: list[np.ndarray], empty) -> np.ndarray:
    return np.concatenate(parts) if parts else np.zeros(empty, np.int64)


def _longest_path(preds: list[set[int]], weight: np.ndarray) -> np.ndarray:
    succs = grid_successors(preds)
    rank = np.zeros(len(preds))
    for g in reversed(_topo(preds)):
        rank[g] = weight[g] + max((rank[s] for s in succs[g]), default=0.0)
    return rank


def _sinks_after_siblings(preds: list[set[int]], prio: np.ndarray) -> np.ndarray:
    """`prio` with each sink grid (no successors) whose producers have other successors (its
    siblings) set just below the lowest of the siblings' priorities: in `grid_order` it
    then follows the last sibling, ahead of the grids that come after the siblings."""
    succs = grid_successors(preds)
    out = prio.copy()
    for g, ps in enumerate(preds):
        siblings = [prio[s] for p in ps for s in succs[p] if s != g]
        if not succs[g] and siblings:
            out[g] = np.nextafter(min(siblings), -np.inf)
    return out


def _topo(preds: list[set[int]], prio: np.ndarray | None = None) -> list[int]:
    """`grid_order`, or ProgramError if the grid graph has a cycle (intra-grid waits are
    allowed)."""
    order = grid_order(preds, prio)
    if order is None:
        raise ProgramError("the task grids depend on each other in a cycle; a static schedule "
                           "needs an acyclic grid graph")
    return order


def bucket_queues(tables: Tables, template: StaticTemplate, bucket: Mapping[str, int]):
    """Queues instantiated for a larger `bucket` binding, reused for the tables' binding:
    entries for tasks outside the actual grid extents become GUARDED slots (skipped at run
    time: no body, no notify). Returns CSR (queue_ptr, queue_task)."""
    b = tables.bound
    p = b.program
    bb_counts = template._grid_counts(bucket)
    bb_base = np.concatenate(([0], np.cumsum(bb_counts)[:-1]))
    ptr, tasks = template.instantiate(bucket)
    out = np.full(tasks.shape, GUARDED, np.int64)
    grid_of = np.searchsorted(bb_base, tasks, side="right") - 1
    for gi, g in enumerate(p.grids):
        sel = np.flatnonzero(grid_of == gi)
        if not sel.size:
            continue
        bucket_ext = tuple(int(d.eval(bucket)) for d in g.extent)
        actual_ext = b.grid_extents[g.name]
        if any(a > e for a, e in zip(actual_ext, bucket_ext)):
            raise ValueError(f"bucket {dict(bucket)} is smaller than binding {b.env} for task "
                             f"grid '{g.name}'")
        coords = np.unravel_index(tasks[sel] - bb_base[gi], bucket_ext)
        valid = np.all([c < a for c, a in zip(coords, actual_ext)], axis=0) \
            if coords else np.ones(sel.size, bool)
        local = np.ravel_multi_index([c[valid] for c in coords], actual_ext) if coords \
            else np.zeros(int(valid.sum()), np.int64)
        out[sel[valid]] = b.task_base[g.name] + local
    return ptr, out


def check_static(tables: Tables) -> None:
    """Prove the static queues deadlock free, or raise ProgramError saying why: every static
    task appears exactly once, every producer a static task waits on is scheduled, and the
    queues together with the task dependencies admit one global topological order."""
    b = tables.bound
    static = np.flatnonzero(tables.grid_mode[b.task_grid] == 0)
    entries = tables.queue_task[tables.queue_task >= 0]
    seen = np.bincount(entries, minlength=b.num_tasks)
    twice = np.flatnonzero(seen > 1)
    if twice.size:
        raise ProgramError(f"static queues hold task {b.task_name(int(twice[0]))} "
                           f"{int(seen[twice[0]])} times")
    missing = static[seen[static] == 0]
    if missing.size:
        raise ProgramError(f"static task {b.task_name(int(missing[0]))} is in no SM queue")
    preds = task_predecessors(tables)
    after: list[list[tuple[int, str]]] = [[] for _ in range(b.num_tasks)]
    for t in entries:
        for s in preds[int(t)]:
            after[s].append((int(t), "waits on"))
    for sm in range(tables.num_sms):
        q = [int(x) for x in tables.queue_task[tables.queue_ptr[sm]:tables.queue_ptr[sm + 1]]
             if x >= 0]
        for a, c in zip(q, q[1:]):
            after[a].append((c, f"follows on SM {sm} queue"))
    indeg = np.zeros(b.num_tasks, np.int64)
    for succ in after:
        for c, _ in succ:
            indeg[c] += 1
    ready = [t for t in range(b.num_tasks) if indeg[t] == 0]
    done = 0
    while ready:
        t = ready.pop()
        done += 1
        for c, _ in after[t]:
            indeg[c] -= 1
            if indeg[c] == 0:
                ready.append(c)
    if done < b.num_tasks:
        raise ProgramError("static queues can deadlock: " + _cycle(b, after, indeg))


def _cycle(b, after, indeg) -> str:
    before: dict[int, tuple[int, str]] = {}
    for t, succ in enumerate(after):
        for c, why in succ:
            if indeg[c] > 0 and indeg[t] > 0:
                before.setdefault(c, (t, why))
    t = next(iter(before))
    seen: list[int] = []
    while t not in seen:
        seen.append(t)
        t = before[t][0]
    cyc = seen[seen.index(t):]
    steps = [f"{b.task_name(c)} {before[c][1]} {b.task_name(before[c][0])}" for c in cyc]
    return "; ".join(steps)
