"""Vectorised evaluation of symbolic expressions over numpy arrays (or plain ints).

`compile_exprs(exprs, names)` turns expressions into one Python function of the named values
(ints or integer arrays) returning a tuple, with Python floor semantics; used where a program
must be instantiated for a new binding quickly (schedule templates, table enumeration).
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import numpy as np

from .sym import Expr


def _cdiv(a, b):
    return -((-a) // b)


_NAMESPACE = {"smin": np.minimum, "smax": np.maximum, "cdiv": _cdiv}


def compile_exprs(exprs: Sequence[Expr], names: Sequence[str]) -> Callable[..., tuple]:
    """A function f(*values) -> tuple of the expressions evaluated at `names` = values."""
    return _compile(tuple(exprs), tuple(names))


@functools.lru_cache(maxsize=4096)
def _compile(exprs: tuple[Expr, ...], names: tuple[str, ...]) -> Callable[..., tuple]:
    body = ", ".join(f"({e.to_py()})" for e in exprs)
    src = f"def _f({', '.join(names)}):\n    return ({body}{',' if len(exprs) == 1 else ''})\n"
    scope = dict(_NAMESPACE)
    exec(compile(src, "<eventtensor.vec>", "exec"), scope)
    return scope["_f"]
