"""Pass: derive each event's wait count from its notify maps, in closed symbolic form.

Recognised per notify edge (producer axis a with extent N, event coordinate k):
  k = a            -> 1 notify per element (needs event extent N)
  k = a // c       -> smin(c, N - c*k)     (needs event extent cdiv(N, c))
  k = :            -> 1 per element (every task notifies every element)
  k in [floor(s*a/t), ceil(s*(a+1)/t))   partition overlap of mismatched tilings
                   -> smin(cdiv(t*k + t, s), N) - (t*k)//s   (needs extent cdiv(s*N, t))
  axis a unused    -> multiplies by N
Counts of several notify edges add up. A map outside these forms keeps `wait_count=None`: the
count is then enumerated per binding at lowering (and still checked by `validate`).
"""
from __future__ import annotations

from fractions import Fraction

from .. import sym
from ..errors import WaitCountError
from ..ir import Edge, EventDecl, Program, TaskGrid
from ..maps import Full, Index, IndexMap, Load, Span, dim_values
from ..sym import Expr

_PROBE = range(0, 257)


def derive_wait_counts(p: Program) -> Program:
    """Fill in `wait_count` of events that have none, where a closed form exists."""
    events = []
    for ev in p.events:
        if ev.wait_count is None:
            ev = EventDecl(ev.name, ev.shape, closed_form_count(p, ev))
        events.append(ev)
    return p.replace(events=tuple(events))


def closed_form_count(p: Program, ev: EventDecl) -> IndexMap | None:
    notifies = p.edges_of(event=ev.name, kind="notify")
    for e in notifies:
        if e.map.is_data_dependent:
            raise WaitCountError(
                f"event '{ev.name}' is notified through the data-dependent map '{e.map}' of "
                f"task grid '{e.grid}', so its wait count is only known at run time: declare "
                f"it, e.g. wait_count=\"{''.join(ev.axes)}->counts[{', '.join(ev.axes)}]\"")
    if not notifies:
        return None
    ks = [sym.Sym(k, 0, None) for k in ev.axes]
    total: Expr = sym.as_expr(0)
    for e in notifies:
        c = _edge_count(p.grid(e.grid), e, ev, ks)
        if c is None:
            return None
        total = total + c
    return IndexMap(ev.axes, (Index(sym.simplify(total)),))


def _edge_count(g: TaskGrid, e: Edge, ev: EventDecl, ks: list[sym.Sym]) -> Expr | None:
    extent = dict(zip(g.axes, g.extent))
    used: set[str] = set()
    count: Expr = sym.as_expr(1)
    for d, k, size in zip(e.map.dims, ks, ev.shape):
        if isinstance(d, Full):
            continue
        ax = _single_axis(d, g.axes)
        if ax is None or ax in used:
            return None
        used.add(ax)
        n = extent[ax]
        factor = _dim_factor(d, ax, n, k, size)
        if factor is None:
            return None
        count = count * factor
    for ax in g.axes:
        if ax not in used:
            count = count * extent[ax]
    return count


def _single_axis(d, axes) -> str | None:
    vals = dim_values(d)
    if any(isinstance(v, Load) for v in vals):
        return None
    free = set().union(*(v.free_symbols() for v in vals))
    return next(iter(free)) if len(free) == 1 and next(iter(free)) in axes else None


def _matches(fn, ref) -> bool:
    return all(fn(a) == ref(a) for a in _PROBE)


def _dim_factor(d, ax: str, n: Expr, k: sym.Sym, size: Expr) -> Expr | None:
    if isinstance(d, Index):
        v = d.value
        at = lambda a: v.eval({ax: a})  # noqa: E731
        if _matches(at, lambda a: a):
            return sym.as_expr(1) if size == n else None
        c = next((a for a in range(1, 257) if at(a) >= 1), None)
        if c is None or not _matches(at, lambda a: a // c) or size != sym.cdiv(n, c):
            return None
        return sym.smin(c, n - c * k)
    assert isinstance(d, Span)
    lo = lambda a: d.start.eval({ax: a})  # noqa: E731
    hi = lambda a: d.stop.eval({ax: a})  # noqa: E731
    big = 10 ** 9
    r = Fraction(lo(big), big).limit_denominator(1024)
    s, t = r.numerator, r.denominator
    if s <= 0 or not _matches(lo, lambda a: (s * a) // t) or \
            not _matches(hi, lambda a: -((-(s * a + s)) // t)):
        return None
    if size != sym.cdiv(s * n, t):
        return None
    return sym.smin(sym.cdiv(t * k + t, s), n) - (t * k) // s
