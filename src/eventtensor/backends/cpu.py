"""CPU interpreter: the executable specification of the megakernel runtime.

It executes lowered `Tables` on N virtual SMs, one atomic action per step, the acting SM chosen
by a seeded random generator, so every run is one interleaving the GPU could produce:

  fetch   static: next task of the SM's own queue; dynamic: pop the shared FIFO queue
  wait    one event element per step, satisfied once armed and counter >= wait count
  resolve evaluate the task's data-dependent waits and trigger (reading index tensors)
  run     read tiles, run the kind's numpy reference, write tiles, notify, complete events

Event semantics are the GPU's: counters count up; an element completes when its counter
reaches its wait count; a runtime wait count arms the element when its count tensor is written
(a count of zero completes it then); in dynamic mode completing an element pushes the consumers
whose last dependency it was, and a trigger edge releases its data-dependent task range. After
the last task the counters are checked and re-initialised on the device (no host memset).

Checks, raised as errors naming tasks, tensors and events:
* MissingDependencyError: a task reads (or overwrites) data that is unwritten (buffers are
  poisoned) or was written by a task that no event orders before it (happens-before tracking);
* DeadlockError: no SM can act while work is left; lists blocked tasks and their events;
* RuntimeCheckError: a task ran twice or before its waits, or a counter ended off its count.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from ..errors import DeadlockError, MissingDependencyError, QueueOverflowError, RuntimeCheckError
from ..ir import Edge, Region
from ..lower import RUNTIME, Tables, edge_elements
from ..maps import Full, Index, IndexMap, Load, Span, format_key
from ..ops import KINDS, TaskContext

INT_POISON = -0x5EADBEEF
_DTYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": np.float32,
           "int32": np.int32, "int64": np.int64}


@dataclass
class TaskRecord:
    sm: int
    task: int
    fetch: int   # step the SM took the task
    start: int   # step the body ran (after every wait)
    end: int


@dataclass
class RunResult:
    """Tensors after the run, what ran where and when (in interpreter steps)."""

    tensors: dict[str, np.ndarray]
    records: list[TaskRecord]
    skipped: list[int]          # guarded tasks: trigger grid tasks outside every range
    steps: int
    seed: int
    final_counters: np.ndarray = field(repr=False)


class _SM:
    def __init__(self, sid: int, queue: np.ndarray | None):
        self.id, self.queue, self.pos = sid, queue, 0
        self.task = -1
        self.waits: list[int] = []
        self.resolved = False
        self.fetch_step = 0
        self.hb = 0


class Interpreter:
    """One launch of a lowered program over numpy tensors."""

    def __init__(self, tables: Tables, inputs: Mapping[str, np.ndarray], seed: int = 0,
                 counters: np.ndarray | None = None):
        self.t, self.b, self.p = tables, tables.bound, tables.program
        self.rng = np.random.default_rng(seed)
        self.seed = seed
        self.data, self.writer = self._allocate(inputs)
        n_el, n_t = self.b.num_elements, self.b.num_tasks
        self.counter = np.zeros(n_el, np.int64) if counters is None else counters
        if self.counter.shape != (n_el,) or self.counter.any():
            raise RuntimeCheckError(f"event counters of program '{self.p.name}' are not all "
                                    "zero at launch: the previous launch did not re-initialise "
                                    "them")
        self.target = tables.target.copy()
        self.armed = self.target != RUNTIME
        self.done = np.zeros(n_el, bool)
        self.done_step = np.full(n_el, -1, np.int64)
        self.elem_hb = [0] * n_el
        self.ran = np.zeros(n_t, np.int64)
        self.task_waits: list[list[int]] = [[] for _ in range(n_t)]
        self.pending = tables.pending.copy() if tables.mode == "dynamic" else None
        self.queue: list[int] = []
        self.queue_head = 0
        self.pushed = np.zeros(n_t, bool)
        self.triggered_by: dict[int, int] = {}
        self.records: list[TaskRecord] = []
        self.skipped: list[int] = []
        self.step = 0
        self.grid_index = {g.name: i for i, g in enumerate(self.p.grids)}
        self.count_events = [(ev, ev.runtime_count) for ev in self.p.events
                             if ev.runtime_count is not None]

    # ------------------------------------------------------------------ set-up
    def _allocate(self, inputs: Mapping[str, np.ndarray]):
        data, writer = {}, {}
        unknown = set(inputs) - {t.name for t in self.p.tensors if t.role == "input"}
        if unknown:
            raise ValueError(f"program '{self.p.name}' has no input tensor named "
                             f"{', '.join(sorted(unknown))}")
        for t in self.p.tensors:
            shape, dt = self.b.tensor_shapes[t.name], _DTYPES[t.dtype]
            if t.role == "input":
                if t.name not in inputs:
                    raise ValueError(f"input tensor '{t.name}' of program '{self.p.name}' "
                                     "was not given")
                arr = np.asarray(inputs[t.name])
                if arr.shape != shape:
                    raise ValueError(f"input tensor '{t.name}' has shape {arr.shape}, "
                                     f"expected {shape} at {self.b.env}")
                data[t.name] = arr.astype(dt, copy=True)
                writer[t.name] = np.full(shape, -2, np.int64)
            else:
                fill = np.nan if np.issubdtype(dt, np.floating) else INT_POISON
                data[t.name] = np.full(shape, fill, dt)
                writer[t.name] = np.full(shape, -1, np.int64)
        return data, writer

    # ------------------------------------------------------------------ run
    def run(self) -> RunResult:
        t = self.t
        sms = [_SM(s, t.sm_queues[s] if t.mode == "static" else None) for s in range(t.num_sms)]
        for x in np.flatnonzero(self.armed & (self.target == 0)):
            self._complete(int(x), 0)
        self._arm({t.name for t in self.p.tensors if t.role == "input"}, 0)
        if t.mode == "dynamic":
            for task in t.ready:
                self._push(int(task))
        while True:
            actors = [sm for sm in sms if self._can_act(sm)]
            if not actors:
                break
            self.step += 1
            self._act(actors[int(self.rng.integers(len(actors)))])
        self._finish(sms)
        return RunResult(self.data, self.records, self.skipped, self.step, self.seed,
                         self.final_counters)

    def _can_act(self, sm: _SM) -> bool:
        if sm.task < 0:
            if self.t.mode == "static":
                return sm.pos < len(sm.queue)  # type: ignore[arg-type]
            return self.queue_head < len(self.queue)
        return not sm.waits or bool(self.done[sm.waits[0]])

    def _act(self, sm: _SM) -> None:
        if sm.task < 0:
            if self.t.mode == "static":
                task = int(sm.queue[sm.pos])  # type: ignore[index]
                sm.pos += 1
            else:
                task = self.queue[self.queue_head]
                self.queue_head += 1
            lo, hi = self.t.wait_ptr[task], self.t.wait_ptr[task + 1]
            sm.task, sm.waits, sm.resolved = task, [int(x) for x in self.t.wait_elem[lo:hi]], False
            sm.fetch_step, sm.hb = self.step, 1 << task
            return
        if sm.waits:
            x = sm.waits.pop(0)
            self.task_waits[sm.task].append(x)
            sm.hb |= self.elem_hb[x]
            return
        if not sm.resolved:
            sm.resolved = True
            if not self._resolve(sm):
                self.skipped.append(sm.task)
                sm.task = -1
            return
        self._run_task(sm)
        sm.task = -1

    def _resolve(self, sm: _SM) -> bool:
        """Data-dependent waits and the trigger of `sm.task`; False if the task is guarded."""
        gi = int(self.b.task_grid[sm.task])
        for ei in self.t.dyn_edges.get(gi, []):
            edge = self.p.edges[ei]
            if edge.kind == "wait":
                sm.waits.extend(int(x) for x in self._dd_elements(sm, edge))
        for ei in self.t.trigger_edges.get(gi, []):
            e = self._trigger_source(sm, self.p.edges[ei])
            if e is None:
                return False
            sm.waits.append(e)
        return True

    def _trigger_source(self, sm: _SM, edge: Edge) -> int | None:
        """The event element whose trigger range holds `sm.task`, or None (guarded task)."""
        local = sm.task - self.b.task_base[edge.grid]
        base = self.b.event_base[edge.event]
        shape = self.b.event_shapes[edge.event]
        found = None
        for flat in range(int(np.prod(shape, dtype=np.int64))):
            lo, hi = self._trigger_range(edge, flat, sm.hb, self.b.task_name(sm.task))
            if lo <= local < hi:
                if found is not None:
                    raise RuntimeCheckError(
                        f"trigger ranges of {self.b.element_name(found)} and "
                        f"{self.b.element_name(base + flat)} both release task "
                        f"{self.b.task_name(sm.task)}")
                found = base + flat
        return found

    def _trigger_range(self, edge: Edge, flat: int, hb: int, who: str) -> tuple[int, int]:
        shape = self.b.event_shapes[edge.event]
        idx = np.unravel_index(flat, shape) if shape else ()
        env = {**self.b.env, **{a: int(i) for a, i in zip(self.p.event(edge.event).axes, idx)}}
        self._check_map_reads(edge.map, env, hb, who)
        n = int(np.prod(self.b.grid_extents[edge.grid], dtype=np.int64))
        (rng,) = edge.map.dim_indices(env, (n,), self.data,
                                      what=f"trigger edge {edge.event} -> {edge.grid}")
        return rng.start, rng.stop  # type: ignore[union-attr]

    def _dd_elements(self, sm: _SM, edge: Edge) -> np.ndarray:
        env = self.b.task_env(sm.task)
        self._check_map_reads(edge.map, env, sm.hb, self.b.task_name(sm.task))
        return edge_elements(self.b, edge, sm.task, self.data)

    def _check_map_reads(self, m: IndexMap, env, hb: int, who: str) -> None:
        """A map reading index tensors is a read: check those elements like a tile read."""
        for d in m.dims:
            vals = [d.value] if isinstance(d, Index) else \
                [d.start, d.stop] if isinstance(d, Span) else []
            for v in vals:
                if isinstance(v, Load):
                    key = tuple(slice(None) if isinstance(i, Full) else i.eval(env)
                                for i in v.index)
                    self._check_read(v.tensor, key, hb, who, f"index map '{m}'")

    # ------------------------------------------------------------------ one task
    def _run_task(self, sm: _SM) -> None:
        task, b = sm.task, self.b
        if self.ran[task]:
            raise RuntimeCheckError(f"task {b.task_name(task)} ran twice")
        g = self.p.grids[b.task_grid[task]]
        env = b.task_env(task)
        who = b.task_name(task)
        inputs = {}
        for r in g.reads:
            self._check_map_reads(r.map, env, sm.hb, who)
            key = self._key(r, env, who, "reads")
            self._check_read(r.tensor, key, sm.hb, who, "its region")
            inputs[r.tensor] = self.data[r.tensor][key].copy()
        wkeys = {}
        for r in g.writes:
            self._check_map_reads(r.map, env, sm.hb, who)
            wkeys[r.tensor] = self._key(r, env, who, "writes")
        ctx = TaskContext(g.name, dict(zip(g.axes, b.task_coords[task])), b.env, g.param_dict,
                          inputs, {k: self.data[k][v].shape for k, v in wkeys.items()},
                          {k: self.data[k].dtype for k in wkeys})
        outs = KINDS[g.kind].reference(ctx)
        if set(outs) != set(wkeys):
            raise RuntimeCheckError(f"task {who} (kind {g.kind}) returned tiles "
                                    f"{sorted(outs)} but writes {sorted(wkeys)}")
        start = self.step
        for name, key in wkeys.items():
            val = np.asarray(outs[name])
            if val.shape != ctx.out_shapes[name]:
                raise RuntimeCheckError(f"task {who} (kind {g.kind}) returned a tile of shape "
                                        f"{val.shape} for '{name}', expected "
                                        f"{ctx.out_shapes[name]}")
            prev = self.writer[name][key]
            for w in np.unique(prev[prev >= 0]):
                if w != task and not (sm.hb >> int(w)) & 1:
                    raise MissingDependencyError(
                        f"task {who} overwrites {name}[{format_key(key)}] written by task "
                        f"{b.task_name(int(w))} without an event ordering the two")
            self.data[name][key] = val
            self.writer[name][key] = task
        self.ran[task] += 1
        self.records.append(TaskRecord(sm.id, task, sm.fetch_step, start, self.step))
        lo, hi = self.t.notify_ptr[task], self.t.notify_ptr[task + 1]
        elems = [int(x) for x in self.t.notify_elem[lo:hi]]
        for ei in self.t.dyn_edges.get(int(b.task_grid[task]), []):
            edge = self.p.edges[ei]
            if edge.kind == "notify":
                elems.extend(int(x) for x in self._dd_elements(sm, edge))
        self._arm(set(wkeys), sm.hb)
        for x in elems:
            self.counter[x] += 1
            self.elem_hb[x] |= sm.hb
            if self.armed[x] and not self.done[x] and self.counter[x] >= self.target[x]:
                self._complete(x, sm.hb)

    def _key(self, r: Region, env, who: str, role: str):
        return r.map.key(env, self.b.tensor_shapes[r.tensor], self.data,
                         what=f"region of '{r.tensor}' {role} by task {who}")

    def _check_read(self, name: str, key, hb: int, who: str, what: str) -> None:
        w = self.writer[name][key]
        if (w == -1).any():
            producer = self._producer_of(name, key, w)
            raise MissingDependencyError(
                f"task {who} reads {name}[{format_key(key)}] ({what}) before "
                f"{producer} wrote it: a dependency is missing")
        for wt in np.unique(w[w >= 0]):
            if not (hb >> int(wt)) & 1:
                raise MissingDependencyError(
                    f"task {who} reads {name}[{format_key(key)}] ({what}) written by task "
                    f"{self.b.task_name(int(wt))}, but no event orders that task before it: "
                    "a dependency is missing")

    def _producer_of(self, name: str, key, w: np.ndarray) -> str:
        """Name the task that should have written the first unwritten element of the read."""
        full = np.zeros(self.b.tensor_shapes[name], bool)
        sub = full[key]
        sub[w == -1] = True
        full[key] = sub
        grids = [g for g in self.p.grids if any(r.tensor == name for r in g.writes)]
        for g in grids:
            r = next(r for r in g.writes if r.tensor == name)
            for t in self.b.grid_tasks(g.name):
                if self.ran[t]:
                    continue
                try:
                    k = self._key(r, self.b.task_env(t), self.b.task_name(t), "writes")
                except Exception:  # its region depends on data not yet written
                    return f"a task of grid '{g.name}'"
                if full[k].any():
                    return f"its producer {self.b.task_name(t)}"
        return "any task" if not grids else f"a task of grid '{grids[0].name}'"

    # ------------------------------------------------------------------ events and queue
    def _arm(self, written: set[str], hb: int) -> None:
        """Arm elements whose runtime wait count was just written (count read on device)."""
        for ev, load in self.count_events:
            if load.tensor not in written:
                continue
            base, shape = self.b.event_base[ev.name], self.b.event_shapes[ev.name]
            for flat in range(int(np.prod(shape, dtype=np.int64))):
                x = base + flat
                if self.armed[x]:
                    continue
                idx = np.unravel_index(flat, shape) if shape else ()
                env = {**self.b.env, **{a: int(i) for a, i in zip(ev.axes, idx)}}
                key = tuple(i.eval(env) for i in load.index)
                if self.writer[load.tensor][key] == -1:
                    continue
                self.target[x] = int(self.data[load.tensor][key])
                if self.target[x] < 0:
                    raise RuntimeCheckError(f"wait count of {self.b.element_name(x)} read from "
                                            f"{load} is negative ({self.target[x]})")
                self.armed[x] = True
                self.elem_hb[x] |= hb
                if self.counter[x] >= self.target[x]:
                    self._complete(x, hb)

    def _complete(self, x: int, hb: int) -> None:
        self.done[x] = True
        self.done_step[x] = self.step
        if self.t.mode != "dynamic":
            return
        for c in self.t.push_task[self.t.push_ptr[x]:self.t.push_ptr[x + 1]]:
            self._release(int(c))
        ev_name = self._event_of(x)
        for edge in self.p.edges_of(event=ev_name, kind="trigger"):
            lo, hi = self._trigger_range(edge, x - self.b.event_base[ev_name], hb,
                                         f"the notifier completing {self.b.element_name(x)}")
            base = self.b.task_base[edge.grid]
            for local in range(lo, hi):
                self.triggered_by[base + local] = x
                self._release(base + local)

    def _release(self, task: int) -> None:
        self.pending[task] -= 1  # type: ignore[index]
        if self.pending[task] == 0:  # type: ignore[index]
            self._push(task)

    def _push(self, task: int) -> None:
        if self.pushed[task]:
            raise QueueOverflowError(f"task {self.b.task_name(task)} was pushed twice")
        if len(self.queue) >= self.b.num_tasks:
            raise QueueOverflowError(f"the task queue (capacity {self.b.num_tasks}) is full")
        self.pushed[task] = True
        self.queue.append(task)

    def _event_of(self, x: int) -> str:
        name = self.p.events[0].name
        for ev in self.p.events:
            if self.b.event_base[ev.name] <= x:
                name = ev.name
        return name

    # ------------------------------------------------------------------ end of launch
    def _finish(self, sms: list[_SM]) -> None:
        blocked = [sm for sm in sms if sm.task >= 0]
        not_run = [t for t in range(self.b.num_tasks) if not self.ran[t]
                   and t not in self.skipped and not self._inactive(t)]
        if blocked or not_run:
            raise self._deadlock(blocked, not_run)
        self._check_invariants()
        self.final_counters = self.counter.copy()
        self.counter[:] = 0  # the last SM out re-initialises the counters on the device

    def _inactive(self, t: int) -> bool:
        """A trigger-grid task that no trigger range covers (it must not run)."""
        gi = int(self.b.task_grid[t])
        for ei in self.t.trigger_edges.get(gi, []):
            edge = self.p.edges[ei]
            n = int(np.prod(self.b.event_shapes[edge.event], dtype=np.int64))
            local = t - self.b.task_base[edge.grid]
            ranges = (self._trigger_range(edge, f, -1, "the final check") for f in range(n))
            if not any(lo <= local < hi for lo, hi in ranges):
                return True
        return False

    def _deadlock(self, blocked: list[_SM], not_run: list[int]) -> DeadlockError:
        info, lines = [], []
        for sm in blocked:
            x = sm.waits[0] if sm.waits else -1
            rec = {"sm": sm.id, "task": self.b.task_name(sm.task),
                   "event": self.b.element_name(x) if x >= 0 else None,
                   "counter": int(self.counter[x]) if x >= 0 else None,
                   "wait_count": int(self.target[x]) if x >= 0 and self.armed[x] else None}
            info.append(rec)
            cnt = (f"counter {rec['counter']} of {rec['wait_count']}" if rec["wait_count"]
                   is not None else f"counter {rec['counter']}, wait count not yet set")
            lines.append(f"SM {sm.id} runs {rec['task']} waiting on {rec['event']} ({cnt})")
        busy = {sm.task for sm in blocked}
        for t in not_run:
            if t in busy:
                continue
            info.append({"sm": None, "task": self.b.task_name(t), "event": None})
            lines.append(f"{self.b.task_name(t)} never started" + (
                f" ({self.pending[t]} dependencies pending)" if self.pending is not None else ""))
        shown = "\n  ".join(lines[:12]) + ("\n  ..." if len(lines) > 12 else "")
        return DeadlockError(f"deadlock in program '{self.p.name}' ({self.t.mode} schedule, "
                             f"{self.t.num_sms} SMs, seed {self.seed}, at {self.b.env}): no "
                             f"virtual SM can make progress.\n  {shown}", info)

    def _check_invariants(self) -> None:
        start = {r.task: r.start for r in self.records}
        for r in self.records:
            for x in self.task_waits[r.task]:
                if not self.done[x] or self.done_step[x] > r.start:
                    raise RuntimeCheckError(f"task {self.b.task_name(r.task)} started before "
                                            f"{self.b.element_name(x)} completed")
        for t in self.skipped:
            if t in start:
                raise RuntimeCheckError(f"guarded task {self.b.task_name(t)} ran")
        if not self.armed.all():
            x = int(np.flatnonzero(~self.armed)[0])
            raise RuntimeCheckError(f"wait count of {self.b.element_name(x)} was never set: "
                                    "its count tensor was not written")
        bad = np.flatnonzero(self.counter != self.target)
        if bad.size:
            x = int(bad[0])
            raise RuntimeCheckError(f"counter of {self.b.element_name(x)} ended at "
                                    f"{self.counter[x]}, expected its wait count "
                                    f"{self.target[x]}")



def run(tables: Tables, inputs: Mapping[str, np.ndarray], seed: int = 0,
        counters: np.ndarray | None = None) -> RunResult:
    """Run one launch on the interpreter; see the module docstring for the checks. Pass the
    same `counters` array (int64, one per event element, zero) to successive launches to model
    counters that live on the device: each launch must leave them re-initialised."""
    return Interpreter(tables, inputs, seed, counters).run()
