"""Symbolic integer expressions for shapes, grid extents, index maps and wait counts.

Expressions are immutable, hashable trees compared structurally.  Operators
(``+ - * // %``, unary ``-``) and the helpers :func:`smin`, :func:`smax` and
:func:`cdiv` build simplified trees.  Integer semantics follow Python: ``//``
and ``%`` round toward negative infinity.  Simplification only applies rewrites
that hold for every value inside the symbols' declared ranges.

``str(e)`` and :meth:`Expr.to_py` give Python source using ``smin``, ``smax``
and ``cdiv``; :meth:`Expr.to_c` gives a C expression over ``long long`` that
relies on :data:`C_PRELUDE` wherever C's truncating division could differ.

Modules: :mod:`.bounds` (interval arithmetic), :mod:`.expr` (base class, leaves, printing),
:mod:`.nodes` (compound nodes), :mod:`.rewrite` (simplifying constructors) and :mod:`.api`
(public helpers, parsing, binding checks, :data:`C_PRELUDE`).
"""
from __future__ import annotations

from . import rewrite  # noqa: F401  (binds the smart constructors into .expr and .nodes)
from .api import (
    C_PRELUDE,
    SymbolRangeError,
    cdiv,
    check_binding,
    evaluate,
    parse,
    simplify,
    smax,
    smin,
)
from .expr import Const, Expr, Sym, as_expr
from .nodes import Add, CeilDiv, FloorDiv, Max, Min, Mod, Mul

__all__ = [
    "Expr", "Const", "Sym", "Add", "Mul", "FloorDiv", "Mod", "CeilDiv", "Min", "Max",
    "as_expr", "smin", "smax", "cdiv", "simplify", "evaluate", "parse",
    "SymbolRangeError", "check_binding", "C_PRELUDE",
]
