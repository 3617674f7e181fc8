"""Pass: derive event tensors and edges from producer and consumer tile regions.

For every task grid C reading a tensor that another grid P writes, with no declared event
connecting P to C, create (or reuse) an event over P's grid and the edges between them (one
wait per tensor C reads from P, as their regions may differ):

* each producer axis `a` must write an affine tile `s*a + o` of one tensor dimension (stride
  `s` a constant, offset `o` free of task coordinates);
* an axis whose tiles the consumer always reads in full (or that writes no dimension, as in an
  accumulation) is reduced: the event drops it and its wait count multiplies by its extent;
* every other axis stays an event dimension; the consumer waits on the producer tiles its read
  range overlaps: `(lo - o)//s : cdiv(hi - o, s)` (a single index when that is one tile).

Events are named `<producer>_ready` (nothing reduced) or `<producer>_ready_<kept axes>`, and are
shared by every consumer needing the same reduction. Data-dependent regions cannot be analysed:
the pass asks for an explicit edge, naming the grids and the tensor.
"""
from __future__ import annotations

import numpy as np

from .. import sym
from ..errors import ProgramError
from ..ir import Edge, EventDecl, Program, Region, TaskGrid
from ..maps import Full, Index, IndexMap, Span, dim_values
from ..sym import Expr
from ..vec import compile_exprs
from .validate import sample_bindings


def derive_events(p: Program) -> Program:
    """Add the events and edges that the regions imply (only if `p.derive_events`)."""
    if not p.derive_events:
        return p
    events = list(p.events)
    declared = list(p.edges)
    edges = list(p.edges)
    waits = set(edges)  # (one wait per tensor C reads from P, none twice)
    names = {e.name for e in events}
    bindings = sample_bindings(p)
    for c in p.grids:
        for r in c.reads:
            for prod in p.grids:
                w = next((x for x in prod.writes if x.tensor == r.tensor), None)
                if w is None or prod.name == c.name or _connected(p, declared, prod.name,
                                                                  c.name):
                    continue
                derived = _derive(p, prod, w, c, r, bindings)
                if derived is None:  # the regions never overlap
                    continue
                ev, notify, wait = derived
                if ev.name not in names:
                    names.add(ev.name)
                    events.append(ev)
                    edges.append(Edge(prod.name, ev.name, "notify", notify))
                edge = Edge(c.name, ev.name, "wait", wait)
                if edge not in waits:
                    waits.add(edge)
                    edges.append(edge)
    return p.replace(events=tuple(events), edges=tuple(edges))


def _connected(p: Program, edges: list[Edge], prod: str, cons: str) -> bool:
    notified = {e.event for e in edges if e.grid == prod and e.kind == "notify"}
    return any(e.grid == cons and e.kind in ("wait", "trigger") and e.event in notified
               for e in edges)


def _derive(p: Program, prod: TaskGrid, w: Region, cons: TaskGrid, r: Region,
            bindings: list[dict[str, int]]):
    where = (f"cannot derive the dependency of task grid '{cons.name}' on '{prod.name}' "
             f"through tensor '{r.tensor}'")
    if w.map.is_data_dependent or r.map.is_data_dependent:
        raise ProgramError(f"{where}: a region is data dependent; declare the event and "
                           "its edges explicitly")
    if _disjoint_constant_dims(w, r, prod.axes):
        return None
    zero = {a: 0 for a in prod.axes}
    kept: list[tuple[str, Expr]] = []      # axis, wait index dim
    kept_dims: list = []
    reduced: list[str] = []
    for a, n in zip(prod.axes, prod.extent):
        dims = [i for i, d in enumerate(w.map.dims) if _uses(d, a)]
        if not dims:
            reduced.append(a)
            continue
        if len(dims) > 1:
            raise ProgramError(f"{where}: producer axis '{a}' indexes several dimensions")
        i = dims[0]
        wd = w.map.dims[i]
        lo = wd.value if isinstance(wd, Index) else wd.start  # type: ignore[union-attr]
        s = sym.simplify(lo.subs({**zero, a: 1}) - lo.subs(zero))
        off = sym.simplify(lo - s * prod.coord_syms()[a])
        if not s.is_const or s.value <= 0 or set(off.free_symbols()) & set(prod.axes):
            raise ProgramError(f"{where}: producer axis '{a}' does not write an affine tile "
                               f"(start {lo}) of dimension {i}")
        rd = r.map.dims[i]
        if isinstance(rd, Full):
            reduced.append(a)
            continue
        c_lo = rd.value if isinstance(rd, Index) else rd.start  # type: ignore[union-attr]
        c_hi = c_lo + 1 if isinstance(rd, Index) else rd.stop  # type: ignore[union-attr]
        first = sym.simplify((c_lo - off) // s.value)
        last = sym.simplify(sym.cdiv(c_hi - off, s.value))
        if _ever(bindings, cons, lambda v: v[0] < 0, [first]):  # clamp to the producer tiles
            first = sym.simplify(sym.smax(first, 0))
        if _ever(bindings, cons, lambda v: v[0] > v[1], [last, n]):
            last = sym.simplify(sym.smin(last, n))
        if not _ever(bindings, cons, lambda v: v[0] < v[1], [first, last]):
            return None  # the consumer never reads what this producer writes
        if _ever(bindings, cons, lambda v: v[0] > v[1], [first, last]):
            last = sym.simplify(sym.smax(last, first))
        if first == sym.as_expr(0) and sym.simplify(last - n) == sym.as_expr(0):
            reduced.append(a)
            continue
        kept.append((a, n))
        kept_dims.append(Index(first) if sym.simplify(last - first) == sym.as_expr(1)
                         else Span(first, last))
    kept_axes = "".join(a for a, _ in kept)
    name = f"{prod.name}_ready" + (f"_{kept_axes}" if reduced and kept_axes else "")
    if reduced and not kept_axes:
        name = f"{prod.name}_done"
    ev = EventDecl(name, tuple(n for _, n in kept))
    notify = IndexMap(prod.axes, tuple(Index(prod.coord_syms()[a]) for a, _ in kept))
    return ev, notify, IndexMap(cons.axes, tuple(kept_dims))


def _ever(bindings: list[dict[str, int]], cons: TaskGrid, test, exprs: list[Expr]) -> bool:
    """Whether `test` holds for some task of `cons` at one of the `bindings`."""
    for env in bindings:
        ext = [int(d.eval(env)) for d in cons.extent]
        if not all(ext):
            continue
        idx = np.indices(ext).reshape(len(ext), -1)
        names = list(env) + list(cons.axes)
        vals = compile_exprs(exprs, names)(*env.values(), *idx)
        if np.any(test([np.asarray(v) for v in vals])):
            return True
    return False


def _disjoint_constant_dims(w: Region, r: Region, axes) -> bool:
    """True if, in some dimension that no producer axis indexes, the written and the read
    ranges are constants that do not overlap."""
    for wd, rd in zip(w.map.dims, r.map.dims):
        if isinstance(wd, Full) or isinstance(rd, Full) or any(_uses(wd, a) for a in axes):
            continue
        ends = [_range(wd), _range(rd)]
        if all(x.is_const for pair in ends for x in pair):
            (wl, wh), (rl, rh) = [(a.value, b.value) for a, b in ends]
            if wh <= rl or rh <= wl:
                return True
    return False


def _range(d) -> tuple[Expr, Expr]:
    if isinstance(d, Index):
        return d.value, sym.simplify(d.value + 1)
    return d.start, d.stop


def _uses(d, axis: str) -> bool:
    return any(axis in v.free_symbols() for v in dim_values(d))

