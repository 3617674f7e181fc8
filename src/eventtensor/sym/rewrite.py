"""Smart constructors: the simplifying rewrites behind the operators and helpers.

Sums are kept as linear forms (:func:`_lin`, :func:`_from_lin`) over canonically ordered
terms, products are distributed (:func:`_mul`), and division, modulo, min and max apply only
rewrites that hold for every value inside the symbols' declared ranges (:func:`_div`,
:func:`_mod`, :func:`_minmax`).

The node classes call these functions but cannot import this module, which imports them;
:func:`_bind` therefore rebinds their placeholder names in :mod:`.expr` and :mod:`.nodes`
when this module is loaded.
"""
from __future__ import annotations

import math
from collections.abc import Iterable

from . import expr, nodes
from .bounds import _INF, _cdiv_b, _fdiv_b, _mod_b, _point
from .expr import Const, Expr, _key
from .nodes import Add, CeilDiv, FloorDiv, Min, Mod, Mul


def _lin(e: Expr) -> tuple[dict[Expr, int], int]:
    """Linear form of ``e``: ({term: coefficient}, constant)."""
    if isinstance(e, Const):
        return {}, e.value
    if not isinstance(e, Add):
        return {e: 1}, 0
    terms: dict[Expr, int] = {}
    const = e.const
    for t, c in e.terms:
        sub, sc = _lin(t) if isinstance(t, (Const, Add)) else ({t: 1}, 0)
        const += c * sc
        for u, uc in sub.items():
            terms[u] = terms.get(u, 0) + c * uc
    return terms, const


def _from_lin(terms: dict[Expr, int], const: int) -> Expr:
    items = [(t, c) for t, c in terms.items() if c]
    if not items:
        return Const(const)
    if len(items) == 1 and items[0][1] == 1 and const == 0:
        return items[0][0]
    return Add(sorted(items, key=lambda tc: _key(tc[0])), const)


def _add(a: Expr, b: Expr) -> Expr:
    ta, ca = _lin(a)
    tb, cb = _lin(b)
    for t, c in tb.items():
        ta[t] = ta.get(t, 0) + c
    return _from_lin(ta, ca + cb)


def _scale(a: Expr, k: int) -> Expr:
    if k == 1:
        return a
    t, c = _lin(a)
    return _from_lin({x: v * k for x, v in t.items()}, c * k)


def _neg(a: Expr) -> Expr:
    return _scale(a, -1)


def _mul(a: Expr, b: Expr) -> Expr:
    """Product, fully distributed over sums; factors of each monomial sorted."""
    if isinstance(a, Const):
        return _scale(b, a.value)
    if isinstance(b, Const):
        return _scale(a, b.value)
    (ta, ca), (tb, cb) = _lin(a), _lin(b)
    res: dict[Expr, int] = {}
    for t1, c1 in list(ta.items()) + ([(Const(1), ca)] if ca else []):
        for t2, c2 in list(tb.items()) + ([(Const(1), cb)] if cb else []):
            fs = [f for t in (t1, t2) if not isinstance(t, Const)
                  for f in (t.factors if isinstance(t, Mul) else (t,))]
            m = Const(1) if not fs else fs[0] if len(fs) == 1 else Mul(*sorted(fs, key=_key))
            res[m] = res.get(m, 0) + c1 * c2
    const = res.pop(Const(1), 0)
    return _from_lin(res, const)


def _quot(t: Expr, d: Expr) -> Expr | None:
    """t / d when the term d divides the term t exactly, else None."""
    if t == d:
        return Const(1)
    if isinstance(d, (Add, Const)) or not isinstance(t, Mul):
        return None
    rest = list(t.factors)
    for f in (d.factors if isinstance(d, Mul) else (d,)):
        if f not in rest:
            return None
        rest.remove(f)
    return Const(1) if not rest else rest[0] if len(rest) == 1 else Mul(*rest)


def _split(n: Expr, d: Expr) -> tuple[Expr | None, Expr, int]:
    """n == d*q + r.  For a constant d = k > 0: r keeps the terms whose coefficient k does
    not divide, its constant lies in [0, k) and r, k are divided by their gcd g (returned);
    for a symbolic d, q collects the terms that d divides (None when there are none)."""
    terms, c0 = _lin(n)
    if isinstance(d, Const):
        k = d.value
        q0, r0 = divmod(c0, k)
        q = _from_lin({t: c // k for t, c in terms.items() if c % k == 0}, q0)
        r = {t: c for t, c in terms.items() if c % k}
        g = math.gcd(k, r0, *r.values())
        return q, _from_lin({t: c // g for t, c in r.items()}, r0 // g), g
    qs: Expr | None = None
    rest: dict[Expr, int] = {}
    for t, c in terms.items():
        x = _quot(t, d)
        if x is None:
            rest[t] = c
        else:
            qs = _add(qs if qs is not None else Const(0), _scale(x, c))
    return qs, _from_lin(rest, c0), 1


def _nonzero(d: Expr) -> bool:
    lo, hi = d._xb()
    return lo > 0 or hi < 0


def _pos_den(e: Expr, cls: type) -> int | None:
    """The divisor of ``e`` if ``e`` is a ``cls`` node with a positive constant divisor."""
    if type(e) is cls and isinstance(e.den, Const) and e.den.value > 0:  # type: ignore
        return e.den.value  # type: ignore[attr-defined]
    return None


def _div(n: Expr, d: Expr, ceil: bool) -> Expr:
    """Simplified ``n // d`` (or ``cdiv(n, d)`` when ``ceil``)."""
    cls, bfn = (CeilDiv, _cdiv_b) if ceil else (FloorDiv, _fdiv_b)
    if isinstance(d, Const):
        k = d.value
        if k == 0:
            raise ZeroDivisionError(f"division of {n} by zero")
        if isinstance(n, Const):
            return Const(-((-n.value) // k) if ceil else n.value // k)
        if k < 0:  # n // -k == (-n) // k;  cdiv(n, -k) == -(n // k)
            return _neg(_div(n, Const(-k), False)) if ceil else _div(_neg(n), Const(-k), False)
        if k == 1:
            return n
        q, r, g = _split(n, d)  # n // k == q + r // (k/g) as k*q is a multiple of k
        assert q is not None
        k //= g
        if k == 1:
            return _add(q, r)
        m = _pos_den(r, cls)
        if m is not None:  # (x // m) // k == x // (m*k), likewise cdiv, for m, k > 0
            return _add(q, _div(r.num, Const(m * k), ceil))  # type: ignore[attr-defined]
        v = _point(bfn(r._xb(), (k, k)))
        return _add(q, Const(v) if v is not None else cls(r, Const(k)))
    if _nonzero(d):
        if n == d:
            return Const(1)
        q, r, _ = _split(n, d)
        if q is not None:
            return _add(q, _div(r, d, ceil))
        v = _point(bfn(n._xb(), d._xb()))
        if v is not None:
            return Const(v)
    return cls(n, d)


def _mod(n: Expr, d: Expr) -> Expr:
    """Simplified ``n % d``."""
    if isinstance(d, Const):
        k = d.value
        if k == 0:
            raise ZeroDivisionError(f"modulo of {n} by zero")
        if isinstance(n, Const):
            return Const(n.value % k)
        if k < 0:  # n % -k == -((-n) % k)
            return _neg(_mod(_neg(n), Const(-k)))
        if k == 1:
            return Const(0)
        _, r, g = _split(n, d)  # (k*q + r) % k == r % k
        if g > 1:  # (g*x) % (g*k') == g*(x % k')
            return _scale(_mod(r, Const(k // g)), g)
        m = _pos_den(r, Mod)
        if m is not None and m % k == 0:  # (x % m) % k == x % k when k divides m
            return _mod(r.num, Const(k))  # type: ignore[attr-defined]
        lo, hi = r._xb()
        if lo != -_INF and hi != _INF and lo // k == hi // k:
            return _add(r, Const(-k * (lo // k)))
        return Mod(r, d)
    if _nonzero(d):
        if n == d:
            return Const(0)
        q, r, _ = _split(n, d)
        if q is not None:
            return _mod(r, d)
        (nl, nh), (dl, dh) = n._xb(), d._xb()
        if (dl > 0 and nl >= 0 and nh < dl) or (dh < 0 and nh <= 0 and nl > dh):
            return n
        v = _point(_mod_b((nl, nh), (dl, dh)))
        if v is not None:
            return Const(v)
    return Mod(n, d)


def _minmax(cls: type, items: Iterable[Expr]) -> Expr:
    """Flattened, deduplicated Min/Max without arguments that bounds prove redundant."""
    flat = [a for x in items for a in (x.args if type(x) is cls else (x,))]  # type: ignore
    consts = [x.value for x in flat if isinstance(x, Const)]
    args = list(dict.fromkeys(x for x in flat if not isinstance(x, Const)))
    args = sorted(args + ([Const(cls._pick(consts))] if consts else []), key=_key)
    kept = list(args)
    for x in args:
        for y in kept:
            if y is x:
                continue
            diff = _add(x, _neg(y)) if cls is Min else _add(y, _neg(x))
            if diff._xb()[0] >= 0:  # x never improves on y
                kept.remove(x)
                break
    if len(kept) == 1:
        return kept[0]
    node = cls(*kept)
    v = _point(node._xb())
    return Const(v) if v is not None else node


def _bind() -> None:
    """Replace the placeholder smart constructors in :mod:`.expr` and :mod:`.nodes`."""
    fns = {"_add": _add, "_neg": _neg, "_scale": _scale, "_mul": _mul, "_div": _div,
           "_mod": _mod, "_minmax": _minmax}
    for module in (expr, nodes):
        for name, fn in fns.items():
            setattr(module, name, fn)


_bind()
