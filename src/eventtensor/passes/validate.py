"""Pass: semantic validation over sampled bindings of the symbols.

Checks, each raising an error that names the grid, event, tensor or task at fault:
* every waited event has a notifier (UnnotifiedEventError);
* every affine map stays inside its event or tensor (IndexOutOfRangeError);
* every static wait count equals the notifies the element receives (WaitCountError);
* the task graph has no cycle (CycleError);
* every region read is written by some task or provided as input (UnwrittenReadError).
Bindings: each symbol's low end, high end, low+1 and midpoint, combined (corners first), at
most `MAX_BINDINGS`; data-dependent maps are checked at run time by the interpreter.
"""
from __future__ import annotations

import functools
import itertools

import numpy as np

from ..errors import UnnotifiedEventError, UnwrittenReadError, WaitCountError
from ..ir import Program
from ..lower import RUNTIME, bind, build_tables, check_acyclic
from ..maps import format_key

MAX_BINDINGS = 16


def sample_bindings(p: Program) -> list[dict[str, int]]:
    """Representative bindings: corners of the declared ranges first, then interior points."""
    choices = []
    for s in p.symbols:
        lo = s.lo if s.lo is not None else 0
        hi = s.hi if s.hi is not None else lo + 7
        choices.append(sorted({lo, hi, min(lo + 1, hi), (lo + hi) // 2},
                              key=lambda v: (v not in (lo, hi), v)))
    out = []
    for combo in itertools.product(*choices):
        out.append({s.name: v for s, v in zip(p.symbols, combo)})
    ends = [(min(c), max(c)) for c in choices]
    corners = [b for b in out if all(v in e for v, e in zip(b.values(), ends))]
    rest = [b for b in out if b not in corners]
    return (corners + rest)[:MAX_BINDINGS]


def validate(p: Program) -> Program:
    """Raise on the first violation found; returns `p` unchanged."""
    waited = {e.event for e in p.edges if e.kind in ("wait", "trigger")}
    notified = {e.event for e in p.edges if e.kind == "notify"}
    for ev in p.events:
        if ev.name in waited and ev.name not in notified:
            waiters = sorted({e.grid for e in p.edges if e.event == ev.name})
            raise UnnotifiedEventError(f"event '{ev.name}' is waited on by task grid(s) "
                                       f"{', '.join(waiters)} but no task grid notifies it")
    _check_writers(p)
    for env in sample_bindings(p):
        _check_binding(p, env)
    return p


def _check_writers(p: Program) -> None:
    writers = {r.tensor for g in p.grids for r in g.writes}
    for g in p.grids:
        reads = [r.tensor for r in g.reads] + [t for r in g.reads for t in r.map.tensors_read]
        for t in reads:
            if p.tensor(t).role != "input" and t not in writers:
                raise UnwrittenReadError(f"task grid '{g.name}' reads tensor '{t}' but no task "
                                         "writes it and it is not an input")
    for e in p.edges:
        for t in e.map.tensors_read:
            if p.tensor(t).role != "input" and t not in writers:
                raise UnwrittenReadError(f"{e.kind} edge {e.grid} -> {e.event} reads tensor "
                                         f"'{t}' but no task writes it and it is not an input")


def _check_binding(p: Program, env: dict[str, int]) -> None:
    b = bind(p, env)
    tables = build_tables(b)  # enumerates every affine map: raises IndexOutOfRangeError
    dd_notified = {e.event for e in p.edges if e.kind == "notify" and e.map.is_data_dependent}
    for ev in p.events:
        base = b.event_base[ev.name]
        n = int(np.prod(b.event_shapes[ev.name], dtype=np.int64))
        if ev.name in dd_notified or n == 0:
            continue
        tgt = tables.target[base:base + n]
        got = tables.notify_count[base:base + n]
        bad = np.flatnonzero((tgt != got) & (tgt != RUNTIME))
        if bad.size:
            x = int(bad[0])
            need, have = int(tgt[x]), int(got[x])
            name = b.element_name(base + x)
            if have == 0 and _is_waited(tables, base + x):
                raise UnnotifiedEventError(f"event element {name} waits for {need} notifies but "
                                           f"no task notifies it (at {env})")
            verb = "can never be reached" if need > have else "is exceeded"
            raise WaitCountError(f"wait count of event element {name} {verb}: it waits for "
                                 f"{need} notifies but receives {have} (at {env})")
    check_acyclic(tables)
    _check_coverage(b)


def _is_waited(tables, x: int) -> bool:
    return bool(np.any(tables.wait_elem == x))


def _check_coverage(b) -> None:
    """Every element a task reads is written by some task (or is an input). Per tensor, the
    boxes' bounds cut each axis into intervals (coordinate compression); write boxes mark the
    cells they cover, and a read box is covered iff the volume of the covered cells inside it,
    from prefix sums of cell volumes, equals its own (no per-element work)."""
    p = b.program
    writes: dict[str, list[tuple[list[np.ndarray], list[np.ndarray]]]] = {}
    opaque: set[str] = set()
    for g in p.grids:
        for r in g.writes:
            if r.map.is_data_dependent:
                opaque.add(r.tensor)
            else:
                writes.setdefault(r.tensor, []).append(_region(b, g, r, "writes"))
    reads = [(g, r, *_region(b, g, r, "reads")) for g in p.grids for r in g.reads
             if p.tensor(r.tensor).role != "input" and r.tensor not in opaque
             and not r.map.is_data_dependent]
    covered = {t: _covered_volume(b.tensor_shapes[t], writes.get(t, []),
                                  [(lo, hi) for _, r, lo, hi in reads if r.tensor == t])
               for t in {r.tensor for _, r, _, _ in reads}}
    for g, r, los, his in reads:
        volume = np.prod([h - lo for lo, h in zip(los, his)], axis=0) if los else 1
        missing = np.flatnonzero(covered[r.tensor](los, his) != volume)
        if missing.size:
            t = b.task_base[g.name] + int(missing[0])
            key = r.map.key(b.task_env(t), b.tensor_shapes[r.tensor])
            raise UnwrittenReadError(
                f"task {b.task_name(t)} of task grid '{g.name}' reads "
                f"{r.tensor}[{format_key(key)}], part of which no task writes and no "
                f"input provides (at {b.env})")


def _covered_volume(shape, writes, reads):
    """f(los, his): for each box [los, his) of `reads` (rows of arrays per axis), the number
    of its elements inside some box of `writes`, over a tensor of `shape`."""
    boxes = writes + reads
    cuts = [np.unique(np.concatenate([[0, n]] + [x[d] for lo, hi in boxes for x in (lo, hi)]))
            for d, n in enumerate(shape)]
    def cells(los, his):
        return ([np.searchsorted(c, lo) for c, lo in zip(cuts, los)],
                [np.searchsorted(c, hi) for c, hi in zip(cuts, his)])
    diff = np.zeros(tuple(len(c) for c in cuts), np.int64)
    flip = -1 if len(shape) % 2 else 1  # difference arrays sign by hi corners
    for los, his in writes:
        for idx, sign in _corners(*cells(los, his)):
            np.add.at(diff, idx, sign * flip)
    for axis in range(diff.ndim):
        np.cumsum(diff, axis=axis, out=diff)
    mask = diff[tuple(slice(0, -1) for _ in shape)] > 0
    widths = [np.diff(c) for c in cuts]
    weight = mask * functools.reduce(np.multiply, np.ix_(*widths), np.int64(1))
    sums = _prefix_sums(weight)
    return lambda los, his: _box_sums(sums, *cells(los, his))


def _region(b, g, r, role: str):
    rows = b.grid_tasks(g.name)
    return r.map.boxes(b.grid_env(g.name), b.tensor_shapes[r.tensor], len(rows),
                       lambda i: f"region of '{r.tensor}' {role} by task "
                                 f"{b.task_name(rows.start + i)}")


def _corners(los: list[np.ndarray], his: list[np.ndarray]):
    """(index, sign) of the 2^D corners of boxes [los, his); sign = (-1)^(number of low
    corners), as box sums over prefix sums need."""
    for corner in range(1 << len(los)):
        idx = tuple(his[d] if corner >> d & 1 else los[d] for d in range(len(los)))
        yield idx, (-1 if (len(los) - bin(corner).count("1")) % 2 else 1)


def _prefix_sums(mask: np.ndarray) -> np.ndarray:
    """S with S[i0, i1, ...] = the sum of mask[:i0, :i1, ...]."""
    s = np.zeros(tuple(d + 1 for d in mask.shape), np.int64)
    s[tuple(slice(1, None) for _ in mask.shape)] = mask
    for axis in range(mask.ndim):
        np.cumsum(s, axis=axis, out=s)
    return s


def _box_sums(s: np.ndarray, los: list[np.ndarray], his: list[np.ndarray]) -> np.ndarray:
    """Set elements in each box [los, his), from the prefix sums `s`."""
    if not los:
        return np.asarray(s.reshape(-1)[-1])
    total = np.zeros(len(los[0]), np.int64)
    for idx, sign in _corners(los, his):
        total += sign * s[idx]
    return total
