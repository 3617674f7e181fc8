"""Interval arithmetic on conservative (lo, hi) bounds of integer expressions.

Bounds are pairs of ints, with ``-inf``/``+inf`` (:data:`_INF`) marking unbounded sides.
The helpers give the bounds of products, floor/ceiling division and modulo from the bounds
of their operands; the expression nodes and the simplifier build on them.
"""
from __future__ import annotations

import math

_INF = math.inf

XBounds = tuple  # (lo, hi): ints, with -inf/+inf marking unbounded sides


def _xmul(a: float, b: float) -> float:
    return 0 if a == 0 or b == 0 else a * b


def _union(parts: list[XBounds]) -> XBounds:
    if not parts:
        return (-_INF, _INF)
    return (min(p[0] for p in parts), max(p[1] for p in parts))


def _fdiv_pos(nl: float, nh: float, dl: float, dh: float) -> XBounds:
    """Bounds of n // d for n in [nl, nh], d in [dl, dh] with dl >= 1."""
    lo = -_INF if nl == -_INF else nl // dl if nl < 0 else 0 if dh == _INF else nl // dh
    hi = _INF if nh == _INF else nh // dl if nh >= 0 else -1 if dh == _INF else nh // dh
    return (lo, hi)


def _fdiv_b(nb: XBounds, db: XBounds) -> XBounds:
    (nl, nh), (dl, dh) = nb, db
    parts = []
    if dh >= 1:
        parts.append(_fdiv_pos(nl, nh, max(dl, 1), dh))
    if dl <= -1:  # n // d == (-n) // (-d)
        parts.append(_fdiv_pos(-nh, -nl, -min(dh, -1), -dl))
    return _union(parts)


def _cdiv_b(nb: XBounds, db: XBounds) -> XBounds:
    lo, hi = _fdiv_b((-nb[1], -nb[0]), db)
    return (-hi, -lo)


def _mod_b(nb: XBounds, db: XBounds) -> XBounds:
    (nl, nh), (dl, dh) = nb, db
    parts: list[XBounds] = []
    if dh >= 1:  # result in [0, d - 1], and equal to n when 0 <= n < d
        if nl >= 0 and nh < max(dl, 1):
            parts.append((nl, nh))
        else:
            parts.append((0, min(dh - 1, nh) if nl >= 0 else dh - 1))
    if dl <= -1:  # result in [d + 1, 0], and equal to n when d < n <= 0
        if nh <= 0 and nl > min(dh, -1):
            parts.append((nl, nh))
        else:
            parts.append((max(dl + 1, nl) if nh <= 0 else dl + 1, 0))
    return _union(parts)


def _point(b: XBounds) -> int | None:
    return b[0] if b[0] == b[1] and b[0] not in (_INF, -_INF) else None
