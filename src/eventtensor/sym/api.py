"""Public helpers: min/max/ceiling division, simplify, evaluate, parse and binding checks.

Also holds :data:`C_PRELUDE`, the C helpers that :meth:`Expr.to_c` output relies on.
"""
from __future__ import annotations

import ast
from collections.abc import Callable, Iterable, Mapping

from .expr import Const, Expr, Sym, _is_int, as_expr
from .nodes import Max, Min
from .rewrite import _add, _div, _minmax, _mod, _mul, _neg

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
    symbols = list(symbols)
    for s in symbols:
        if s.name not in env:
            others = sorted(set(env) - {t.name for t in symbols})
            raise SymbolRangeError(
                f"symbol {s.name} has no value (the symbols: "
                f"{', '.join(t.name for t in symbols)}"
                + (f"; not symbols: {', '.join(others)})" if others else ")"))
        v = env[s.name]
        if not _is_int(v):
            raise SymbolRangeError(
                f"symbol {s.name} must be bound to an int, got {type(v).__name__} {v!r}")
        if (s.lo is not None and v < s.lo) or (s.hi is not None and v > s.hi):
            lo, hi = ("-inf" if s.lo is None else s.lo), ("inf" if s.hi is None else s.hi)
            raise SymbolRangeError(
                f"symbol {s.name} = {int(v)} is out of its declared range [{lo}, {hi}]")
