"""The expression base class, the leaf nodes and coercion of ints to expressions.

:class:`Expr` holds what every node shares: immutability, structural ``==``/``hash``, the
arithmetic operators, bounds, substitution and the Python/C printers.  :class:`Const` and
:class:`Sym` are the leaves; the compound nodes live in :mod:`.nodes`.  :func:`as_expr` wraps
ints as constants.

Operators and node rebuilding call the smart constructors of :mod:`.rewrite`, which itself
builds these nodes.  To keep imports acyclic they are reached through the module-level names
below, placeholders that :mod:`.rewrite` rebinds here and in :mod:`.nodes` on import (importing
the package always imports it).
"""
from __future__ import annotations

import keyword
import numbers
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .bounds import _INF, XBounds

_ATOM, _MUL, _NEG, _ADD = 4, 3, 2, 1  # printing precedence: atom, product, unary/div, sum
_I32 = 2**31 - 1
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_C_KEYWORDS = frozenset("""auto break case char const continue default do double else enum
    extern float for goto if inline int long register restrict return short signed sizeof static
    struct switch typedef union unsigned void volatile while""".split())
_RESERVED = frozenset(keyword.kwlist) | {"smin", "smax", "cdiv"} | frozenset(_C_KEYWORDS)


def _is_int(x: object) -> bool:
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def _unbound(*args: Any) -> Any:
    raise RuntimeError("eventtensor.sym.rewrite is not imported")


# Smart constructors of .rewrite (placeholders until it binds them; see the module docstring).
_add: Callable[[Expr, Expr], Expr] = _unbound
_neg: Callable[[Expr], Expr] = _unbound
_scale: Callable[[Expr, int], Expr] = _unbound
_mul: Callable[[Expr, Expr], Expr] = _unbound
_div: Callable[[Expr, Expr, bool], Expr] = _unbound
_mod: Callable[[Expr, Expr], Expr] = _unbound
_minmax: Callable[[type, Iterable[Expr]], Expr] = _unbound


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



# -- coercion -------------------------------------------------------------------------------
def _coerce(x: Any) -> Expr | None:
    if isinstance(x, Expr):
        return x
    return Const(int(x)) if _is_int(x) else None


def as_expr(x: int | Expr) -> Expr:
    """Wrap an int as :class:`Const`; return expressions unchanged."""
    e = _coerce(x)
    if e is None:
        raise TypeError(f"expected an int or Expr, got {type(x).__name__} {x!r}")
    return e
