"""Compound expression nodes: sums, products, floor/ceiling division, modulo, min and max.

The constructors build raw nodes; operators and the helpers in :mod:`.api` build simplified
ones through the smart constructors of :mod:`.rewrite`, which the ``_rebuild`` methods here
also use.  Those are bound into this module by :mod:`.rewrite` (see :mod:`.expr`).
"""
from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .bounds import XBounds, _cdiv_b, _fdiv_b, _mod_b, _xmul
from .expr import (  # the smart constructors are placeholders, rebound by .rewrite
    _ADD,
    _ATOM,
    _MUL,
    _NEG,
    Const,
    Expr,
    _add,
    _ctext,
    _div,
    _field,
    _is_int,
    _minmax,
    _mod,
    _mul,
    _neg,
    _paren,
    _scale,
    as_expr,
)


class Add(Expr):
    """Raw node ``sum(coeff * term) + const``; ``+``/``-`` build simplified sums."""

    __slots__ = ()

    def __init__(self, terms: Iterable[tuple[Expr | int, int]], const: int = 0) -> None:
        items = tuple((as_expr(t), c) for t, c in terms)
        if not all(_is_int(c) for _, c in items) or not _is_int(const):
            raise TypeError("Add coefficients and constant must be ints")
        self._init(tuple((t, int(c)) for t, c in items), int(const))

    terms: tuple[tuple[Expr, int], ...] = _field(0, "(term, coefficient) pairs.")
    const: int = _field(1, "Constant summand.")

    def children(self) -> tuple[Expr, ...]:
        return tuple(t for t, _ in self._args[0])

    def eval(self, env: Mapping[str, int]) -> int:
        s = self._args[1]
        for t, c in self._args[0]:
            s += c * t.eval(env)
        return s

    def _xbounds(self) -> XBounds:
        lo = hi = self._args[1]
        for t, c in self._args[0]:
            a, b = (_xmul(c, x) for x in t._xb())
            lo, hi = lo + min(a, b), hi + max(a, b)
        return (lo, hi)

    def _rebuild(self, kids: list[Expr]) -> Expr:
        out: Expr = Const(self._args[1])
        for k, (_, c) in zip(kids, self._args[0]):
            out = _add(out, _scale(k, c))
        return out

    def _fmt(self, mode: str) -> tuple[str, int]:
        terms, const = self._args
        if not terms:
            return Const(const)._fmt(mode)
        order = [tc for tc in terms if tc[1] >= 0] + [tc for tc in terms if tc[1] < 0]
        lead_const = const > 0 and order[0][1] < 0  # "3 - i" rather than "-i + 3"
        out = [_ctext(const, mode)] if lead_const else []
        prec = _ADD
        for t, c in order:
            tp, first = t._p(mode), not out
            # "-x//2" would mean (-x)//2 and "3*x//2" (3*x)//2: such terms need parentheses
            need = _MUL if abs(c) != 1 or (c < 0 and first) else _NEG
            body, prec = (tp[0], tp[1]) if tp[1] >= need else (f"({tp[0]})", _ATOM)
            if abs(c) != 1:
                body, prec = f"{_ctext(abs(c), mode)}*{body}", _MUL
            if first:
                out.append("-" + body if c < 0 else body)
                prec = min(prec, _NEG) if c < 0 else prec
            else:
                out.append((" - " if c < 0 else " + ") + body)
        if const and not lead_const:
            out.append((" - " if const < 0 else " + ") + _ctext(abs(const), mode))
        return "".join(out), (prec if len(out) == 1 else _ADD)


class Mul(Expr):
    """Raw product of factors; ``*`` builds simplified (distributed) products."""

    __slots__ = ()

    def __init__(self, *factors: Expr | int) -> None:
        if not factors:
            raise ValueError("Mul needs at least one factor")
        self._init(*(as_expr(f) for f in factors))

    factors: tuple[Expr, ...] = property(lambda self: self._args, doc="The factors.")

    def eval(self, env: Mapping[str, int]) -> int:
        p = 1
        for f in self._args:
            p *= f.eval(env)
        return p

    def _xbounds(self) -> XBounds:
        b: XBounds = (1, 1)
        for f in self._args:
            c = [_xmul(x, y) for x in b for y in f._xb()]
            b = (min(c), max(c))
        return b

    def _rebuild(self, kids: list[Expr]) -> Expr:
        out: Expr = Const(1)
        for k in kids:
            out = _mul(out, k)
        return out

    def _fmt(self, mode: str) -> tuple[str, int]:
        return "*".join(_paren(f._p(mode), _ATOM) for f in self._args), _MUL


class _Binary(Expr):
    __slots__ = ()
    _op = ""
    _fn: Callable[[int, int], int]
    _bfn: Callable[[XBounds, XBounds], XBounds]

    def __init__(self, num: Expr | int, den: Expr | int) -> None:
        self._init(as_expr(num), as_expr(den))

    num: Expr = _field(0, "Numerator.")
    den: Expr = _field(1, "Divisor.")

    def eval(self, env: Mapping[str, int]) -> int:
        return type(self)._fn(self._args[0].eval(env), self._args[1].eval(env))

    def _xbounds(self) -> XBounds:
        return type(self)._bfn(self._args[0]._xb(), self._args[1]._xb())

    def _rebuild(self, kids: list[Expr]) -> Expr:
        n, d = kids
        return _mod(n, d) if isinstance(self, Mod) else _div(n, d, isinstance(self, CeilDiv))

    def _plain_c(self) -> bool:
        """True when C's truncating ``/`` and ``%`` provably agree with floor semantics."""
        return self._args[0]._xb()[0] >= 0 and self._args[1]._xb()[0] >= 1

    def _fmt(self, mode: str) -> tuple[str, int]:
        n, d = (a._p(mode) for a in self._args)
        if mode != "c" or self._plain_c():
            op = self._op if mode != "c" else self._op[-1]
            return f"{_paren(n, _ATOM)}{op}{_paren(d, _ATOM)}", _NEG
        return f"et_{'floordiv' if self._op == '//' else 'mod'}({n[0]}, {d[0]})", _ATOM


class FloorDiv(_Binary):
    """Raw floor division ``num // den``."""

    __slots__ = ()
    _op, _fn, _bfn = "//", staticmethod(operator.floordiv), staticmethod(_fdiv_b)


class Mod(_Binary):
    """Raw modulo ``num % den`` (the result has the sign of ``den``)."""

    __slots__ = ()
    _op, _fn, _bfn = "%", staticmethod(operator.mod), staticmethod(_mod_b)


class CeilDiv(_Binary):
    """Raw ceiling division ``cdiv(num, den) == -((-num) // den)``."""

    __slots__ = ()
    _fn, _bfn = staticmethod(lambda a, b: -((-a) // b)), staticmethod(_cdiv_b)

    def _fmt(self, mode: str) -> tuple[str, int]:
        n, d = self._args
        if mode != "c":
            return f"cdiv({n._p(mode)[0]}, {d._p(mode)[0]})", _ATOM
        if self._plain_c():
            top = _add(n, _add(d, Const(-1)))
            return f"{_paren(top._p(mode), _ATOM)}/{_paren(d._p(mode), _ATOM)}", _NEG
        return f"(-et_floordiv({_neg(n)._p(mode)[0]}, {d._p(mode)[0]}))", _ATOM


class _MinMax(Expr):
    __slots__ = ()
    _names = ("", "")
    _pick: Callable[..., Any] = min

    def __init__(self, *args: Expr | int) -> None:
        if not args:
            raise ValueError(f"{type(self).__name__} needs at least one argument")
        self._init(*(as_expr(a) for a in args))

    args: tuple[Expr, ...] = property(lambda self: self._args, doc="The arguments.")

    def eval(self, env: Mapping[str, int]) -> int:
        return type(self)._pick(a.eval(env) for a in self._args)

    def _xbounds(self) -> XBounds:
        bs, pick = [a._xb() for a in self._args], type(self)._pick
        return (pick(b[0] for b in bs), pick(b[1] for b in bs))

    def _rebuild(self, kids: list[Expr]) -> Expr:
        return _minmax(type(self), kids)

    def _fmt(self, mode: str) -> tuple[str, int]:
        fn = self._names[mode == "c"]
        args = sorted(self._args, key=lambda a: a.is_const)  # constants last
        text = args[-1]._p(mode)[0]
        for a in reversed(args[:-1]):
            text = f"{fn}({a._p(mode)[0]}, {text})"
        return text, _ATOM


class Min(_MinMax):
    """Raw minimum of its arguments."""

    __slots__ = ()
    _names, _pick = ("smin", "et_min"), min


class Max(_MinMax):
    """Raw maximum of its arguments."""

    __slots__ = ()
    _names, _pick = ("smax", "et_max"), max
