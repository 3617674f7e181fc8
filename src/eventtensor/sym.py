"""Symbolic integer expressions for shapes, grid extents, index maps and wait counts.

Expressions are immutable, hashable trees compared structurally.  Operators
(``+ - * // %``, unary ``-``) and the helpers :func:`smin`, :func:`smax` and
:func:`cdiv` build simplified trees.  Integer semantics follow Python: ``//``
and ``%`` round toward negative infinity.  Simplification only applies rewrites
that hold for every value inside the symbols' declared ranges.

``str(e)`` and :meth:`Expr.to_py` give Python source using ``smin``, ``smax``
and ``cdiv``; :meth:`Expr.to_c` gives a C expression over ``long long`` that
relies on :data:`C_PRELUDE` wherever C's truncating division could differ.
"""
from __future__ import annotations

import ast
import keyword
import math
import numbers
import operator
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = [
    "Expr", "Const", "Sym", "Add", "Mul", "FloorDiv", "Mod", "CeilDiv", "Min", "Max",
    "as_expr", "smin", "smax", "cdiv", "simplify", "evaluate", "parse",
    "SymbolRangeError", "check_binding", "C_PRELUDE",
]

C_PRELUDE = r"""#ifndef EVENTTENSOR_SYM_PRELUDE
#define EVENTTENSOR_SYM_PRELUDE
#ifdef __CUDACC__
#define ET_SYM_INLINE static inline __host__ __device__
#else
#define ET_SYM_INLINE static inline
#endif
/* Floor division and modulo with Python semantics (round toward -infinity). */
ET_SYM_INLINE long long et_floordiv(long long a, long long b) {
    return (a % b != 0 && ((a < 0) != (b < 0))) ? a / b - 1 : a / b;
}
ET_SYM_INLINE long long et_mod(long long a, long long b) {
    return (a % b != 0 && ((a % b < 0) != (b < 0))) ? a % b + b : a % b;
}
ET_SYM_INLINE long long et_min(long long a, long long b) { return a < b ? a : b; }
ET_SYM_INLINE long long et_max(long long a, long long b) { return a > b ? a : b; }
#endif
"""

_INF = math.inf
_ATOM, _MUL, _NEG, _ADD = 4, 3, 2, 1  # printing precedence: atom, product, unary/div, sum
_I32 = 2**31 - 1
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_C_KEYWORDS = frozenset("""auto break case char const continue default do double else enum
    extern float for goto if inline int long register restrict return short signed sizeof static
    struct switch typedef union unsigned void volatile while""".split())
_RESERVED = frozenset(keyword.kwlist) | {"smin", "smax", "cdiv"} | frozenset(_C_KEYWORDS)

XBounds = tuple  # (lo, hi): ints, with -inf/+inf marking unbounded sides


def _is_int(x: object) -> bool:
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


# -- interval arithmetic --------------------------------------------------------------------
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


def _field(index: int, doc: str) -> Any:
    """Read-only property returning ``self._args[index]``."""
    return property(lambda self: self._args[index], doc=doc)


def _binop(fn: Callable[[Expr, Expr], Expr], swap: bool = False) -> Callable[[Expr, Any], Any]:
    def op(self: Expr, other: Any) -> Any:
        o = _coerce(other)
        if o is None:
            return NotImplemented
        return fn(o, self) if swap else fn(self, o)
    return op


# -- expression nodes -----------------------------------------------------------------------
class Expr:
    """Abstract immutable integer expression; ``==`` and ``hash`` are structural."""

    __slots__ = ("_args", "_hash", "_py", "_k", "_xbc", "_fs")
    _args: tuple

    def _init(self, *args: Any) -> None:
        for name, v in (("_args", args), ("_hash", hash((type(self).__name__, args))),
                        ("_py", None), ("_k", None), ("_xbc", None), ("_fs", None)):
            object.__setattr__(self, name, v)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __reduce__(self) -> tuple:
        return (type(self), self._args)

    def __eq__(self, other: object) -> bool:
        return self is other or (type(other) is type(self) and hash(other) == self._hash
                                 and other._args == self._args)  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return self._hash

    # Operators return simplified results when their operands are simplified.
    __add__ = _binop(lambda a, b: _add(a, b))
    __radd__ = _binop(lambda a, b: _add(a, b), swap=True)
    __sub__ = _binop(lambda a, b: _add(a, _neg(b)))
    __rsub__ = _binop(lambda a, b: _add(a, _neg(b)), swap=True)
    __mul__ = _binop(lambda a, b: _mul(a, b))
    __rmul__ = _binop(lambda a, b: _mul(a, b), swap=True)
    __floordiv__ = _binop(lambda a, b: _div(a, b, False))
    __rfloordiv__ = _binop(lambda a, b: _div(a, b, False), swap=True)
    __mod__ = _binop(lambda a, b: _mod(a, b))
    __rmod__ = _binop(lambda a, b: _mod(a, b), swap=True)

    def __neg__(self) -> Expr:
        return _neg(self)

    def __pos__(self) -> Expr:
        return self

    @property
    def is_const(self) -> bool:
        """True only for :class:`Const` nodes."""
        return False

    @property
    def value(self) -> int:
        """The integer value; TypeError unless the expression is a constant."""
        raise TypeError(f"expression {self} is not a constant")

    def children(self) -> tuple[Expr, ...]:
        """Direct sub-expressions."""
        return self._args if not isinstance(self, (Const, Sym)) else ()

    def eval(self, env: Mapping[str, int]) -> int:
        """Value under ``env`` (Python floor semantics); KeyError names a missing symbol."""
        raise NotImplementedError

    def _xbounds(self) -> XBounds:
        raise NotImplementedError

    def _xb(self) -> XBounds:
        if self._xbc is None:
            object.__setattr__(self, "_xbc", self._xbounds())
        return self._xbc

    def bounds(self) -> tuple[int | None, int | None]:
        """Conservative inclusive interval of the value; None marks an unbounded side."""
        lo, hi = self._xb()
        return (None if lo == -_INF else lo, None if hi == _INF else hi)

    def free_symbols(self) -> frozenset[str]:
        """Names of the symbols occurring in the expression."""
        if self._fs is None:
            object.__setattr__(self, "_fs", frozenset().union(
                *(k.free_symbols() for k in self.children())))
        return self._fs

    def _rebuild(self, kids: list[Expr]) -> Expr:
        """Simplified node of this kind over new children."""
        return self

    def subs(self, mapping: Mapping[str, Expr | int]) -> Expr:
        """Replace symbols by name; the result is simplified."""
        return self._subs({k: as_expr(v) for k, v in mapping.items()})

    def _subs(self, m: Mapping[str, Expr]) -> Expr:
        return self._rebuild([k._subs(m) for k in self.children()])

    def _simp(self) -> Expr:
        return self._rebuild([k._simp() for k in self.children()])

    def _fmt(self, mode: str) -> tuple[str, int]:
        """(text, precedence) in mode "py", "c" or "k" (py with symbol ranges, for sorting)."""
        raise NotImplementedError

    def _p(self, mode: str) -> tuple[str, int]:
        if mode == "c":
            return self._fmt(mode)
        slot = "_py" if mode == "py" else "_k"
        if getattr(self, slot) is None:
            object.__setattr__(self, slot, self._fmt(mode))
        return getattr(self, slot)

    def to_py(self) -> str:
        """Python source; needs ``smin``, ``smax``, ``cdiv`` and the symbols in scope."""
        return self._p("py")[0]

    __str__ = __repr__ = to_py

    def to_c(self) -> str:
        """C expression over ``long long`` values; needs :data:`C_PRELUDE`."""
        return self._fmt("c")[0]


def _key(e: Expr) -> tuple[str, str]:
    """Deterministic order: printed form, then printed form with symbol ranges."""
    return (e._p("py")[0], e._p("k")[0])


def _paren(tp: tuple[str, int], need: int) -> str:
    return tp[0] if tp[1] >= need else f"({tp[0]})"


def _ctext(v: int, mode: str) -> str:
    return f"{v}LL" if mode == "c" and not -_I32 <= v <= _I32 else str(v)


class Const(Expr):
    """Integer constant."""

    __slots__ = ()

    def __init__(self, value: int) -> None:
        if not _is_int(value):
            raise TypeError(f"Const needs an int, got {type(value).__name__} {value!r}")
        self._init(int(value))

    @property
    def is_const(self) -> bool:
        return True

    value: int = _field(0, "The constant's value.")  # type: ignore[assignment]

    def eval(self, env: Mapping[str, int]) -> int:
        return self._args[0]

    def _xbounds(self) -> XBounds:
        return (self._args[0], self._args[0])

    def _fmt(self, mode: str) -> tuple[str, int]:
        return _ctext(self._args[0], mode), (_ATOM if self._args[0] >= 0 else _NEG)


class Sym(Expr):
    """Named integer symbol with declared inclusive range [lo, hi] (None = unbounded)."""

    __slots__ = ()

    def __init__(self, name: str, lo: int | None = 0, hi: int | None = None) -> None:
        if not isinstance(name, str) or not _IDENT.match(name) or name in _RESERVED:
            raise ValueError(f"invalid symbol name {name!r}: need a C/Python identifier "
                             "that is no keyword and not smin/smax/cdiv")
        if any(b is not None and not _is_int(b) for b in (lo, hi)):
            raise TypeError(f"range of symbol {name} must use ints or None, got [{lo}, {hi}]")
        lo, hi = (None if lo is None else int(lo)), (None if hi is None else int(hi))
        if lo is not None and hi is not None and lo > hi:
            raise ValueError(f"symbol {name} has an empty range [{lo}, {hi}]")
        self._init(name, lo, hi)

    name: str = _field(0, "Symbol name.")
    lo: int | None = _field(1, "Declared lower bound (None = unbounded).")
    hi: int | None = _field(2, "Declared upper bound (None = unbounded).")

    def eval(self, env: Mapping[str, int]) -> int:
        try:
            return env[self._args[0]]
        except KeyError:
            raise KeyError(f"symbol {self._args[0]!r} has no value") from None

    def _xbounds(self) -> XBounds:
        _, lo, hi = self._args
        return (-_INF if lo is None else lo, _INF if hi is None else hi)

    def free_symbols(self) -> frozenset[str]:
        return frozenset((self._args[0],))

    def _subs(self, m: Mapping[str, Expr]) -> Expr:
        return m.get(self._args[0], self)

    def _fmt(self, mode: str) -> tuple[str, int]:
        name, lo, hi = self._args
        return (f"{name}[{lo}:{hi}]" if mode == "k" else name), _ATOM


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


# -- smart constructors ---------------------------------------------------------------------
def _coerce(x: Any) -> Expr | None:
    if isinstance(x, Expr):
        return x
    return Const(int(x)) if _is_int(x) else None


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


# -- public helpers -------------------------------------------------------------------------
def as_expr(x: int | Expr) -> Expr:
    """Wrap an int as :class:`Const`; return expressions unchanged."""
    e = _coerce(x)
    if e is None:
        raise TypeError(f"expected an int or Expr, got {type(x).__name__} {x!r}")
    return e


def smin(a: int | Expr, b: int | Expr) -> int | Expr:
    """Minimum; a plain int when both arguments are ints."""
    if _is_int(a) and _is_int(b):
        return min(int(a), int(b))  # type: ignore[arg-type]
    return _minmax(Min, (as_expr(a), as_expr(b)))


def smax(a: int | Expr, b: int | Expr) -> int | Expr:
    """Maximum; a plain int when both arguments are ints."""
    if _is_int(a) and _is_int(b):
        return max(int(a), int(b))  # type: ignore[arg-type]
    return _minmax(Max, (as_expr(a), as_expr(b)))


def cdiv(a: int | Expr, b: int | Expr) -> int | Expr:
    """Ceiling division ``-((-a) // b)``; a plain int when both arguments are ints."""
    if _is_int(a) and _is_int(b):
        return -((-int(a)) // int(b))  # type: ignore[arg-type]
    return _div(as_expr(a), as_expr(b), True)


def simplify(e: int | Expr) -> Expr:
    """Canonical simplified form: idempotent, value-preserving within declared ranges."""
    return as_expr(e)._simp()


def evaluate(x: int | Expr, env: Mapping[str, int]) -> int:
    """Value of an int or expression under ``env``."""
    return int(x) if _is_int(x) else as_expr(x).eval(env)  # type: ignore[arg-type]


_OPSYM = {ast.Div: "/", ast.Pow: "**", ast.MatMult: "@", ast.LShift: "<<", ast.RShift: ">>",
          ast.BitOr: "|", ast.BitXor: "^", ast.BitAnd: "&", ast.Invert: "~", ast.Not: "not"}
_BINOPS: dict[type, Callable[[Expr, Expr], Expr]] = {
    ast.Add: _add, ast.Sub: lambda a, b: _add(a, _neg(b)), ast.Mult: _mul,
    ast.FloorDiv: lambda a, b: _div(a, b, False), ast.Mod: _mod}
_CALLS: dict[str, type] = {"min": Min, "max": Max, "smin": Min, "smax": Max}


def parse(text: str, names: Mapping[str, Expr | int]) -> Expr:
    """Parse an integer expression without eval; ValueError names the bad piece and text.

    Allowed: ints, names from ``names``, ``+ - * // %``, unary ``-``/``+``, parentheses and
    calls of ``min``/``max``/``smin``/``smax`` (2+ arguments) and ``cdiv`` (2 arguments).
    """
    if not isinstance(text, str):
        raise TypeError(f"parse needs a str, got {type(text).__name__}")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise ValueError(f"cannot parse {text!r}: {exc.msg}") from None

    def walk(node: ast.AST) -> Expr:
        if isinstance(node, ast.Constant):
            if _is_int(node.value):
                return Const(node.value)
            raise ValueError(f"constant {node.value!r} is not an integer in {text!r}")
        if isinstance(node, ast.Name):
            if node.id not in names:
                raise ValueError(f"unknown name {node.id!r} in {text!r}")
            return as_expr(names[node.id])
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            v = walk(node.operand)
            return _neg(v) if isinstance(node.op, ast.USub) else v
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            return _BINOPS[type(node.op)](walk(node.left), walk(node.right))
        if isinstance(node, (ast.BinOp, ast.UnaryOp)):
            op = type(node.op)
            raise ValueError(f"operator {_OPSYM.get(op, op.__name__)!r} is not allowed in {text!r}")
        if isinstance(node, ast.Call):
            fn = node.func.id if isinstance(node.func, ast.Name) else ast.unparse(node.func)
            if fn not in _CALLS and fn != "cdiv":
                raise ValueError(f"call of {fn!r} is not allowed in {text!r}")
            if node.keywords:
                raise ValueError(f"keyword arguments to {fn} are not allowed in {text!r}")
            args = [walk(a) for a in node.args]
            if fn == "cdiv" and len(args) == 2:
                return _div(args[0], args[1], True)
            if fn != "cdiv" and len(args) >= 2:
                return _minmax(_CALLS[fn], args)
            raise ValueError(f"wrong number of arguments to {fn} in {text!r}")
        raise ValueError(f"unsupported syntax {ast.unparse(node)!r} in {text!r}")

    try:
        return walk(tree.body)
    except ZeroDivisionError:
        raise ValueError(f"division by zero in {text!r}") from None


class SymbolRangeError(ValueError):
    """A binding is missing, not an int, or outside its symbol's declared range."""


def check_binding(symbols: Iterable[Sym], env: Mapping[str, int]) -> None:
    """Raise :class:`SymbolRangeError` for the first symbol whose binding is invalid."""
    for s in symbols:
        if s.name not in env:
            raise SymbolRangeError(f"symbol {s.name} has no value")
        v = env[s.name]
        if not _is_int(v):
            raise SymbolRangeError(
                f"symbol {s.name} must be bound to an int, got {type(v).__name__} {v!r}")
        if (s.lo is not None and v < s.lo) or (s.hi is not None and v > s.hi):
            lo, hi = ("-inf" if s.lo is None else s.lo), ("inf" if s.hi is None else s.hi)
            raise SymbolRangeError(
                f"symbol {s.name} = {int(v)} is out of its declared range [{lo}, {hi}]")
