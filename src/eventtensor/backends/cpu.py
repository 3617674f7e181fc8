"""CPU interpreter: the executable specification of the megakernel runtime.

It executes scheduled `Tables` on N virtual SMs, one atomic action at a time:

  fetch   next entry of the SM's static queue (guarded slots are skipped), or pop the device
          queue (dynamic grids); with early push, popping a task counts a dispatch on every
          element it will notify and pushes consumers whose producers are all dispatched
  pass    one wait: the element is armed and its completion count reached the wait count
  nest    hybrid only: an SM blocked on a static task pops and runs a ready dynamic task
  resolve evaluate the task's data-dependent waits and its trigger (guarded if none covers it)
  begin   read tiles (checked), run the kind's numpy reference
  finish  write tiles (checked), notify, complete elements, push released consumers

A `policy` picks the acting SM: "random" (seeded; every run is an interleaving the GPU could
produce) or "timed" (earliest action first under a `CostModel`: the cost-model simulator,
which also gives task times in microseconds). Counters: completions count in units of 2^16 on
early-push elements (dispatches below), 1 elsewhere; a runtime wait count arms its element when
the count tensor is written (zero completes it at once). After the last task every counter is
checked and re-initialised on the device (no host memset between launches).

Raised: MissingDependencyError (see `datacheck`), DeadlockError (no SM can act while work is
left: blocked tasks and the events they wait on), QueueOverflowError, RuntimeCheckError (a task
ran twice or before its waits, or a counter ended off its count).
"""
from __future__ import annotations

import heapq
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from ..errors import DeadlockError, QueueOverflowError, RuntimeCheckError
from ..ir import Edge
from ..lower import RUNTIME, Tables, edge_elements
from ..maps import Full, IndexMap, Load, dim_values
from ..ops import KINDS, TaskContext
from ..schedule.cost import Cost, CostModel, grid_costs
from ..schedule.dynamic import DISPATCH_BITS
from .datacheck import DataState

UNIT_EARLY = 1 << DISPATCH_BITS


@dataclass
class TaskRecord:
    sm: int
    task: int
    fetch: float   # when the SM took the task (step, or µs under the timed policy)
    start: float   # body start, after every wait
    end: float
    waits: tuple[int, ...] = ()


@dataclass
class RunResult:
    """Tensors after the run; what ran where and when; guarded tasks; counters at the end."""

    tensors: dict[str, np.ndarray]
    records: list[TaskRecord]
    skipped: list[int]
    steps: int
    seed: int
    makespan: float
    final_counters: np.ndarray = field(repr=False)


class _Frame:
    __slots__ = ("task", "waits", "resolved", "hb", "fetch", "start", "end", "running",
                 "passed", "inputs", "wkeys")

    def __init__(self, task: int, waits: list[int], t: float):
        self.task, self.waits, self.resolved, self.hb = task, waits, False, 1 << task
        self.fetch, self.start, self.end, self.running = t, t, t, False
        self.passed: list[int] = []
        self.inputs: dict = {}
        self.wkeys: dict = {}


class _SM:
    def __init__(self, sid: int, lo: int, hi: int):
        self.id, self.pos, self.end = sid, lo, hi
        self.stack: list[_Frame] = []
        self.clock = 0.0


class Interpreter:
    """One launch of scheduled tables. `inputs` may be None only when `execute` is False and
    the program reads no runtime tensor in its maps (pure timing simulation)."""

    def __init__(self, tables: Tables, inputs: Mapping[str, np.ndarray] | None, seed: int = 0,
                 counters: np.ndarray | None = None, policy: str = "random",
                 cost_model: CostModel | None = None, execute: bool = True):
        if tables.mode == "unscheduled":
            raise ValueError("tables have no schedule: call schedule.schedule() first")
        if policy not in ("random", "timed"):
            raise ValueError(f"unknown policy '{policy}' (random or timed)")
        self.t, self.b, self.p = tables, tables.bound, tables.program
        self.rng, self.seed, self.policy, self.execute = np.random.default_rng(seed), seed, \
            policy, execute
        if not execute and any(e.map.is_data_dependent for e in self.p.edges):
            raise ValueError(f"program '{self.p.name}' has data-dependent edges: simulate it "
                             "with inputs (execute=True)")
        self.data = DataState(self.b, inputs or {}) if execute else None
        self.cm = cost_model or CostModel(num_sms=tables.num_sms)
        costs = grid_costs(self.p, self.b.env) if policy == "timed" else {}
        self.cost: list[Cost] = [costs.get(g.name, Cost(0, 0)) for g in self.p.grids]
        n_el, n_t = self.b.num_elements, self.b.num_tasks
        self.counter = np.zeros(n_el, np.int64) if counters is None else counters
        if self.counter.shape != (n_el,) or self.counter.any():
            raise RuntimeCheckError(f"event counters of program '{self.p.name}' are not all "
                                    "zero at launch: the previous launch did not re-initialise "
                                    "them")
        self.unit = np.where(tables.early, UNIT_EARLY, 1).astype(np.int64)
        self.target = tables.target.copy()
        self.armed = self.target != RUNTIME
        self.done = np.zeros(n_el, bool)
        self.done_t = np.zeros(n_el)
        self.elem_hb = [0] * n_el
        self.ran = np.zeros(n_t, np.int64)
        self.pending = tables.pending.copy()
        self.queue: list[int] = []
        self.push_t: list[float] = []
        self.qhead = 0
        self.pushed = np.zeros(n_t, bool)
        self.records: list[TaskRecord] = []
        self.skipped: list[int] = []
        self.step = 0
        self.now = 0.0
        self.active = 0
        self.wake_all = False  # an event completed or the queue changed: every SM re-checks
        self.count_events = [(ev, ev.runtime_count) for ev in self.p.events
                             if ev.runtime_count is not None]
        self.hybrid = bool(tables.grid_mode.any()) and not bool(tables.grid_mode.all())

    # ------------------------------------------------------------------ main loop
    def run(self) -> RunResult:
        qp = self.t.queue_ptr
        sms = [_SM(s, int(qp[s]), int(qp[s + 1])) for s in range(self.t.num_sms)]
        for x in np.flatnonzero(self.armed & (self.target == 0)):
            self.done[x] = True  # complete from the start: counted by no dependency count
        self._arm({t.name for t in self.p.tensors if t.role == "input"}, 0, 0.0)
        for task in self.t.ready:
            self._push(int(task), 0.0)
        nxt: dict[int, tuple[str, float]] = {}
        heap: list[tuple[float, int, int]] = []
        version = [0] * len(sms)
        dirty = set(range(len(sms)))
        while True:
            for s in dirty:
                a = self._next(sms[s])
                version[s] += 1
                if a is None:
                    nxt.pop(s, None)
                else:
                    nxt[s] = a
                    if self.policy == "timed":
                        heapq.heappush(heap, (a[1], s, version[s]))
            if not nxt:
                break
            if self.policy == "timed":
                while True:
                    t, s, v = heapq.heappop(heap)
                    if v == version[s] and s in nxt:
                        break
            else:
                keys = sorted(nxt)
                s = keys[int(self.rng.integers(len(keys)))]
            self.step += 1
            kind, when = nxt[s]
            self.wake_all = False
            self._act(sms[s], kind, when)
            dirty = set(range(len(sms))) if self.wake_all else {s}
        self._finish(sms)
        makespan = max((r.end for r in self.records), default=0.0)
        return RunResult(self.data.data if self.data else {}, self.records, self.skipped,
                         self.step, self.seed, makespan, self.final_counters)

    def _next(self, sm: _SM) -> tuple[str, float] | None:
        """The action SM `sm` can take now and when, or None if it is blocked or idle."""
        if sm.stack:
            f = sm.stack[-1]
            if f.running:
                return ("finish", f.end)
            if f.waits:
                x = f.waits[0]
                if self.done[x]:
                    return ("pass", max(sm.clock, self.done_t[x] + self.cm.hop_us))
                if self.hybrid and len(sm.stack) == 1 and self.qhead < len(self.queue):
                    return ("nest", max(sm.clock, self.push_t[self.qhead]))
                return None
            return ("begin" if f.resolved else "resolve", sm.clock)
        if self.qhead < len(self.queue) and (self.hybrid or sm.pos >= sm.end):
            return ("pop", max(sm.clock, self.push_t[self.qhead]))
        if sm.pos < sm.end:
            return ("fetch", sm.clock)
        return None

    def _act(self, sm: _SM, kind: str, when: float) -> None:
        """Perform one action (setting `wake_all` when other SMs' next actions may change)."""
        sm.clock = self.now = when
        if kind == "fetch":
            task = int(self.t.queue_task[sm.pos])
            sm.pos += 1
            sm.clock += self.cm.static_dispatch_us
            if task < 0:
                self.skipped.append(task)
            else:
                self._start(sm, task)
        elif kind in ("pop", "nest"):
            task = self.queue[self.qhead]
            self.qhead += 1
            sm.clock += self.cm.pop_us
            self.wake_all = True
            self._start(sm, task)
        elif kind == "pass":
            f = sm.stack[-1]
            x = f.waits.pop(0)
            f.passed.append(x)
            f.hb |= self.elem_hb[x]
        elif kind == "resolve":
            f = sm.stack[-1]
            f.resolved = True
            if not self._resolve(f):
                self.skipped.append(f.task)
                sm.stack.pop()
                self._notify(sm, f, self.t.skip_elem[self.t.skip_ptr[f.task]:
                                                     self.t.skip_ptr[f.task + 1]])
        elif kind == "begin":
            self._begin(sm, sm.stack[-1])
        else:
            self._finish_task(sm, sm.stack[-1])

    def _start(self, sm: _SM, task: int) -> None:
        lo, hi = self.t.wait_ptr[task], self.t.wait_ptr[task + 1]
        sm.stack.append(_Frame(task, [int(x) for x in self.t.wait_elem[lo:hi]], sm.clock))
        if not self.t.early.any() or self.t.grid_mode[self.b.task_grid[task]] != 1:
            return
        for x in self.t.notify_elem[self.t.notify_ptr[task]:self.t.notify_ptr[task + 1]]:
            x = int(x)
            if self.t.early[x]:
                self.counter[x] += 1
                if self.counter[x] % UNIT_EARLY == self.target[x]:
                    self._release_consumers(x, None)  # overlaps the task's compute

    # ------------------------------------------------------------------ one task
    def _resolve(self, f: _Frame) -> bool:
        """Data-dependent waits and the trigger of `f.task`; False if the task is guarded."""
        gi = int(self.b.task_grid[f.task])
        for ei in self.t.dyn_edges.get(gi, []):
            edge = self.p.edges[ei]
            if edge.kind == "wait":
                f.waits.extend(int(x) for x in self._dd_elements(f, edge))
        for ei in self.t.trigger_edges.get(gi, []):
            e = self._trigger_source(f, self.p.edges[ei])
            if e is None:
                return False
            f.waits.append(e)
        return True

    def _trigger_source(self, f: _Frame, edge: Edge) -> int | None:
        """The event element whose trigger range holds `f.task`, or None (guarded task)."""
        local = f.task - self.b.task_base[edge.grid]
        base = self.b.event_base[edge.event]
        found = None
        for flat in range(int(np.prod(self.b.event_shapes[edge.event], dtype=np.int64))):
            lo, hi = self._trigger_range(edge, flat, f.hb, self.b.task_name(f.task))
            if lo <= local < hi:
                if found is not None:
                    raise RuntimeCheckError(
                        f"trigger ranges of {self.b.element_name(found)} and "
                        f"{self.b.element_name(base + flat)} both release task "
                        f"{self.b.task_name(f.task)}")
                found = base + flat
        return found

    def _trigger_range(self, edge: Edge, flat: int, hb: int, who: str) -> tuple[int, int]:
        shape = self.b.event_shapes[edge.event]
        idx = np.unravel_index(flat, shape) if shape else ()
        env = {**self.b.env, **{a: int(i) for a, i in zip(self.p.event(edge.event).axes, idx)}}
        self._check_map_reads(edge.map, env, hb, who)
        n = int(np.prod(self.b.grid_extents[edge.grid], dtype=np.int64))
        (rng,) = edge.map.dim_indices(env, (n,), self._tensors(),
                                      what=f"trigger edge {edge.event} -> {edge.grid}")
        return rng.start, rng.stop  # type: ignore[union-attr]

    def _tensors(self) -> dict[str, np.ndarray]:
        return self.data.data if self.data else {}

    def _dd_elements(self, f: _Frame, edge: Edge) -> np.ndarray:
        self._check_map_reads(edge.map, self.b.task_env(f.task), f.hb, self.b.task_name(f.task))
        return edge_elements(self.b, edge, f.task, self._tensors())

    def _check_map_reads(self, m: IndexMap, env, hb: int, who: str) -> None:
        """A map reading index tensors is a read: check those elements like a tile read."""
        if self.data is None or hb < 0:
            return
        for d in m.dims:
            for v in dim_values(d):
                if isinstance(v, Load):
                    key = tuple(slice(None) if isinstance(i, Full) else i.eval(env)
                                for i in v.index)
                    self.data.check_read(v.tensor, key, hb, who, f"index map '{m}'", self.ran)

    def _begin(self, sm: _SM, f: _Frame) -> None:
        task, b = f.task, self.b
        if self.ran[task]:
            raise RuntimeCheckError(f"task {b.task_name(task)} ran twice")
        gi = int(b.task_grid[task])
        g = self.p.grids[gi]
        f.start, f.running = sm.clock, True
        self.active += 1
        f.end = sm.clock + (self.cm.task_us(self.cost[gi], self.active)
                            if self.policy == "timed" else 0.0)
        if self.data is None:
            return
        env, who = b.task_env(task), b.task_name(task)
        for r in g.reads:
            self._check_map_reads(r.map, env, f.hb, who)
            key = self._key(r, env, who, "reads")
            self.data.check_read(r.tensor, key, f.hb, who, "its region", self.ran)
            f.inputs[r.tensor] = self.data.data[r.tensor][key].copy()
        for r in g.writes:
            self._check_map_reads(r.map, env, f.hb, who)
            f.wkeys[r.tensor] = self._key(r, env, who, "writes")

    def _key(self, r, env, who: str, role: str):
        return r.map.key(env, self.b.tensor_shapes[r.tensor], self._tensors(),
                         what=f"region of '{r.tensor}' {role} by task {who}")

    def _finish_task(self, sm: _SM, f: _Frame) -> None:
        task, b = f.task, self.b
        sm.stack.pop()
        self.active -= 1
        g = self.p.grids[b.task_grid[task]]
        if self.data is not None:
            self._write_outputs(f, g)
        self.ran[task] += 1
        self.records.append(TaskRecord(sm.id, task, f.fetch, f.start, f.end, tuple(f.passed)))
        elems = [int(x) for x in self.t.notify_elem[self.t.notify_ptr[task]:
                                                    self.t.notify_ptr[task + 1]]]
        for ei in self.t.dyn_edges.get(int(b.task_grid[task]), []):
            edge = self.p.edges[ei]
            if edge.kind == "notify":
                elems.extend(int(x) for x in self._dd_elements(f, edge))
        if self.data:
            self._arm(set(f.wkeys), f.hb, sm.clock)
        self._notify(sm, f, elems)

    def _notify(self, sm: _SM, f: _Frame, elems) -> None:
        for x in elems:
            x = int(x)
            self.counter[x] += self.unit[x]
            self.elem_hb[x] |= f.hb
            if self.armed[x] and not self.done[x] and \
                    self.counter[x] // self.unit[x] >= self.target[x]:
                self._complete(x, sm.clock, f.hb, sm)

    def _write_outputs(self, f: _Frame, g) -> None:
        who = self.b.task_name(f.task)
        ctx = TaskContext(g.name, dict(zip(g.axes, self.b.coords(f.task))), self.b.env,
                          g.param_dict, f.inputs,
                          {k: self.data.data[k][v].shape for k, v in f.wkeys.items()},
                          {k: self.data.data[k].dtype for k in f.wkeys})
        outs = KINDS[g.kind].reference(ctx)
        if set(outs) != set(f.wkeys):
            raise RuntimeCheckError(f"task {who} (kind {g.kind}) returned tiles "
                                    f"{sorted(outs)} but writes {sorted(f.wkeys)}")
        for name, key in f.wkeys.items():
            val = np.asarray(outs[name])
            if val.shape != ctx.out_shapes[name]:
                raise RuntimeCheckError(f"task {who} (kind {g.kind}) returned a tile of shape "
                                        f"{val.shape} for '{name}', expected "
                                        f"{ctx.out_shapes[name]}")
            self.data.write(name, key, val, f.task, f.hb, who)

    # ------------------------------------------------------------------ events and queue
    def _arm(self, written: set[str], hb: int, now: float) -> None:
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
                if self.data.writer[load.tensor][key] == -1:
                    continue
                self.target[x] = int(self.data.data[load.tensor][key])
                if self.target[x] < 0:
                    raise RuntimeCheckError(f"wait count of {self.b.element_name(x)} read from "
                                            f"{load} is negative ({self.target[x]})")
                self.armed[x] = True
                self.elem_hb[x] |= hb
                if self.counter[x] // self.unit[x] >= self.target[x]:
                    self._complete(x, now, hb)

    def _complete(self, x: int, now: float, hb: int = -1, sm: _SM | None = None) -> None:
        self.done[x] = True
        self.done_t[x] = now
        self.wake_all = True
        if not self.t.early[x] or self.target[x] == 0:  # early ones release at dispatch
            self._release_consumers(x, sm)
        ev_name = self.b.event_of(x)
        for edge in self.p.edges_of(event=ev_name, kind="trigger"):
            if self.t.grid_mode[self.b.task_grid[self.b.task_base[edge.grid]]] != 1:
                continue
            lo, hi = self._trigger_range(edge, x - self.b.event_base[ev_name], hb,
                                         f"the notifier completing {self.b.element_name(x)}")
            base = self.b.task_base[edge.grid]
            self._charge_pushes(sm, sum(self._release(base + local) for local in range(lo, hi)))

    def _release_consumers(self, x: int, sm: _SM | None) -> None:
        consumers = self.t.push_task[self.t.push_ptr[x]:self.t.push_ptr[x + 1]]
        self._charge_pushes(sm, sum(self._release(int(c)) for c in consumers))
        self.wake_all = True

    def _charge_pushes(self, sm: _SM | None, n: int) -> None:
        """One batch push: a ticket for n slots, records written by the CTA's threads."""
        if sm is not None and n:
            sm.clock += self.cm.push_us + n * self.cm.queue_per_task_us

    def _release(self, task: int) -> bool:
        """One dependency of `task` released; pushes it (returns True) when it was the last.
        The task becomes visible in the queue one push latency from now."""
        self.pending[task] -= 1
        if self.pending[task] == 0:
            self._push(task, self.now + self.cm.push_us)
            return True
        return False

    def _push(self, task: int, now: float) -> None:
        if self.pushed[task]:
            raise QueueOverflowError(f"task {self.b.task_name(task)} was pushed twice")
        if len(self.queue) >= self.t.capacity:
            raise QueueOverflowError(f"the task queue of program '{self.p.name}' is full "
                                     f"(capacity {self.t.capacity}) when pushing "
                                     f"{self.b.task_name(task)}")
        self.pushed[task] = True
        self.queue.append(task)
        self.push_t.append(now)

    # ------------------------------------------------------------------ end of launch
    def _finish(self, sms: list[_SM]) -> None:
        blocked = [sm for sm in sms if sm.stack]
        skipped = set(self.skipped)
        not_run = [t for t in range(self.b.num_tasks) if not self.ran[t]
                   and t not in skipped and not self._inactive(t)]
        if blocked or not_run:
            raise self._deadlock(blocked, not_run)
        self._check_invariants()
        self.final_counters = self.counter.copy()
        self.counter[:] = 0  # the last SM out re-initialises the counters on the device

    def _inactive(self, t: int) -> bool:
        """A trigger-grid task that no trigger range covers (it must not run)."""
        gi = int(self.b.task_grid[t])
        local_of = t - self.b.task_base[self.p.grids[gi].name]
        for ei in self.t.trigger_edges.get(gi, []):
            edge = self.p.edges[ei]
            n = int(np.prod(self.b.event_shapes[edge.event], dtype=np.int64))
            ranges = (self._trigger_range(edge, f, -1, "the final check") for f in range(n))
            if not any(lo <= local_of < hi for lo, hi in ranges):
                return True
        return False

    def _deadlock(self, blocked: list[_SM], not_run: list[int]) -> DeadlockError:
        info, lines = [], []
        for sm in blocked:
            f = sm.stack[-1]
            x = f.waits[0] if f.waits else -1
            rec = {"sm": sm.id, "task": self.b.task_name(f.task),
                   "event": self.b.element_name(x) if x >= 0 else None,
                   "counter": int(self.counter[x] // self.unit[x]) if x >= 0 else None,
                   "wait_count": int(self.target[x]) if x >= 0 and self.armed[x] else None}
            info.append(rec)
            cnt = (f"counter {rec['counter']} of {rec['wait_count']}" if rec["wait_count"]
                   is not None else f"counter {rec['counter']}, wait count not yet set")
            lines.append(f"SM {sm.id} runs {rec['task']} waiting on {rec['event']} ({cnt})")
        busy = {f.task for sm in blocked for f in sm.stack}
        for t in not_run:
            if t in busy:
                continue
            info.append({"sm": None, "task": self.b.task_name(t), "event": None})
            dyn = self.t.grid_mode[self.b.task_grid[t]] == 1
            lines.append(f"{self.b.task_name(t)} never started" +
                         (f" ({self.pending[t]} dependencies pending)" if dyn else ""))
        shown = "\n  ".join(lines[:12]) + ("\n  ..." if len(lines) > 12 else "")
        return DeadlockError(f"deadlock in program '{self.p.name}' ({self.t.mode} schedule, "
                             f"{self.t.num_sms} SMs, seed {self.seed}, at {self.b.env}): no "
                             f"virtual SM can make progress.\n  {shown}", info)

    def _check_invariants(self) -> None:
        for r in self.records:
            for x in r.waits:
                if not self.done[x] or self.done_t[x] > r.start:
                    raise RuntimeCheckError(f"task {self.b.task_name(r.task)} started before "
                                            f"{self.b.element_name(x)} completed")
        ran_skipped = [t for t in self.skipped if t >= 0 and self.ran[t]]
        if ran_skipped:
            raise RuntimeCheckError(f"guarded task {self.b.task_name(ran_skipped[0])} ran")
        if not self.armed.all():
            x = int(np.flatnonzero(~self.armed)[0])
            raise RuntimeCheckError(f"wait count of {self.b.element_name(x)} was never set: "
                                    "its count tensor was not written")
        expect = self.target * self.unit + np.where(self.t.early, self.target, 0)
        bad = np.flatnonzero(self.counter != expect)
        if bad.size:
            x = int(bad[0])
            raise RuntimeCheckError(f"counter of {self.b.element_name(x)} ended at "
                                    f"{self.counter[x]}, expected {expect[x]} (wait count "
                                    f"{self.target[x]})")


def run(tables: Tables, inputs: Mapping[str, np.ndarray] | None, seed: int = 0,
        counters: np.ndarray | None = None, **options) -> RunResult:
    """Run one launch on the interpreter; see the module docstring. Pass the same `counters`
    array (int64, one per event element, zero) to successive launches to model counters that
    live on the device: each launch must leave them re-initialised. `options`: policy,
    cost_model, execute (see `Interpreter`)."""
    return Interpreter(tables, inputs, seed, counters, **options).run()
