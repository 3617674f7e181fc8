"""Index maps: from task (or event) coordinates to sets of indices of an event or data tensor.

One map language serves notify and wait edges, tile regions, data-dependent trigger ranges and
runtime wait counts. Text forms (the left side names the coordinates, one letter each):

    "ij->i"                      einsum style: task (i, j) -> element i
    "ij->(i//2)"                 coarser event, floor division
    "i->(32*i):(32*i + 32), :"   a span and a whole dimension (region style, comma separated)
    "t->topk[t, :]"              data dependent: indices read from runtime tensor `topk`
    "e->exp_indptr[e]:exp_indptr[e + 1]"   data-dependent range (trigger ranges)
    "i->"                        a scalar (0-d) event

Without "->" the coordinates are supplied by the caller (a region of a task grid).
Dimensions are `Index` (one index, or a vector read from a tensor), `Span` (half-open range) or
`Full` (the whole dimension). `Load` reads an integer tensor at run time.
"""
from __future__ import annotations

import ast
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from . import sym
from .errors import IndexOutOfRangeError, MapError
from .sym import Expr


@dataclass(frozen=True)
class Full:
    """The whole extent of a dimension (`:`)."""

    def __str__(self) -> str:
        return ":"


FULL = Full()


@dataclass(frozen=True)
class Load:
    """Integer value(s) of runtime tensor `tensor` at `index`; a `FULL` entry yields a vector."""

    tensor: str
    index: tuple[Expr | Full, ...]

    def __str__(self) -> str:
        return f"{self.tensor}[{', '.join(str(i) for i in self.index)}]"

    @property
    def is_vector(self) -> bool:
        return any(isinstance(i, Full) for i in self.index)

    def values(self, env: Mapping[str, int], tensors: Mapping[str, np.ndarray]) -> np.ndarray:
        """The loaded integers, as a 1-D int64 array (length 1 for a scalar load)."""
        arr = tensors[self.tensor]
        key = tuple(slice(None) if isinstance(i, Full) else i.eval(env) for i in self.index)
        for axis, k in enumerate(key):
            if isinstance(k, int) and not 0 <= k < arr.shape[axis]:
                raise IndexOutOfRangeError(
                    f"load {self} reads index {k} of dimension {axis} of tensor "
                    f"'{self.tensor}' (size {arr.shape[axis]}) at {dict(env)}")
        return np.asarray(arr[key], dtype=np.int64).reshape(-1)


Value = Expr | Load


@dataclass(frozen=True)
class Index:
    """One index (an expression or a scalar load) or several (a vector load)."""

    value: Value

    def __str__(self) -> str:
        return _value_text(self.value, wrap=True)


@dataclass(frozen=True)
class Span:
    """Half-open range [start, stop)."""

    start: Value
    stop: Value

    def __str__(self) -> str:
        return f"{_value_text(self.start, True)}:{_value_text(self.stop, True)}"


Dim = Index | Span | Full


def _value_text(v: Value, wrap: bool) -> str:
    text = str(v)
    if isinstance(v, Load) or not wrap:
        return text
    if v.is_const or isinstance(v, sym.Sym):
        return text
    return f"({text})"


def _value_eval(v: Value, env: Mapping[str, int], tensors: Mapping[str, np.ndarray]) -> int:
    if isinstance(v, Load):
        vals = v.values(env, tensors)
        return int(vals[0])
    return v.eval(env)


def dim_values(d: Dim) -> list[Value]:
    """The expressions or loads a dimension is made of: its index, or its two ends."""
    if isinstance(d, Index):
        return [d.value]
    return [d.start, d.stop] if isinstance(d, Span) else []


def _value_symbols(v: Value) -> set[str]:
    if isinstance(v, Load):
        out: set[str] = set()
        for i in v.index:
            if isinstance(i, Expr):
                out |= set(i.free_symbols())
        return out
    return set(v.free_symbols())


@dataclass(frozen=True)
class IndexMap:
    """A map from coordinates `axes` to a set of indices, one `Dim` per target dimension."""

    axes: tuple[str, ...]
    dims: tuple[Dim, ...]

    def __str__(self) -> str:
        if all(isinstance(d, Index) and isinstance(d.value, sym.Sym) and d.value.name in self.axes
               for d in self.dims):
            rhs = "".join(str(d) for d in self.dims)
        else:
            rhs = ", ".join(str(d) for d in self.dims)
        return f"{''.join(self.axes)}->{rhs}"

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def tensors_read(self) -> frozenset[str]:
        """Runtime tensors this map reads (empty for an affine map)."""
        return frozenset(v.tensor for d in self.dims for v in dim_values(d)
                         if isinstance(v, Load))

    @property
    def is_data_dependent(self) -> bool:
        return bool(self.tensors_read)

    @property
    def free_symbols(self) -> frozenset[str]:
        return frozenset(s for d in self.dims for v in dim_values(d) for s in _value_symbols(v))

    def dim_indices(self, env: Mapping[str, int], shape: Sequence[int],
                    tensors: Mapping[str, np.ndarray] | None = None,
                    what: str = "") -> list[slice | np.ndarray]:
        """Concrete index set per dimension: a slice for spans and full dims, an int array
        otherwise. Raises IndexOutOfRangeError (naming `what`) outside [0, shape)."""
        tensors = tensors or {}
        out: list[slice | np.ndarray] = []
        for axis, (d, size) in enumerate(zip(self.dims, shape)):
            if isinstance(d, Full):
                out.append(slice(0, size))
            elif isinstance(d, Span):
                lo, hi = _value_eval(d.start, env, tensors), _value_eval(d.stop, env, tensors)
                if (lo < 0 or hi > size or lo > hi) and lo != hi:
                    raise IndexOutOfRangeError(
                        f"{what}: map '{self}' gives range {lo}:{hi} in dimension {axis} "
                        f"of size {size} at {_fmt_env(env)}")
                out.append(slice(lo, hi) if lo != hi else slice(0, 0))
            else:
                if isinstance(d.value, Load):
                    idx = d.value.values(env, tensors)
                else:
                    idx = np.array([d.value.eval(env)], dtype=np.int64)
                bad = idx[(idx < 0) | (idx >= size)]
                if bad.size:
                    raise IndexOutOfRangeError(
                        f"{what}: map '{self}' gives index {int(bad[0])} in dimension {axis} "
                        f"of size {size} at {_fmt_env(env)}")
                out.append(idx)
        return out

    def key(self, env: Mapping[str, int], shape: Sequence[int],
            tensors: Mapping[str, np.ndarray] | None = None, what: str = ""):
        """A numpy index selecting the region: basic slicing when every dimension is a range,
        an outer-product (`np.ix_`) index when some are index vectors."""
        dims = self.dim_indices(env, shape, tensors, what)
        if all(isinstance(d, slice) for d in dims):
            return tuple(dims)
        return np.ix_(*[np.arange(d.start, d.stop) if isinstance(d, slice) else d for d in dims])

    def boxes(self, env: Mapping[str, object], shape: Sequence[int], n: int,
              name_task) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Per-dimension [lo, hi) arrays of the boxes `n` tasks of an affine map select:
        `env` binds the symbols to ints and the coordinates to int arrays of length n.
        `name_task(i)` names task i in range errors."""
        from .vec import compile_exprs
        los, his = [], []
        for d, size in zip(self.dims, shape):
            if isinstance(d, Full):
                los.append(np.zeros(n, np.int64))
                his.append(np.full(n, size, np.int64))
                continue
            ends = dim_values(d)
            names = sorted(env)
            vals = compile_exprs(ends, names)(*(env[k] for k in names))
            lo = np.broadcast_to(np.asarray(vals[0], np.int64), (n,))
            hi = lo + 1 if isinstance(d, Index) else np.broadcast_to(
                np.asarray(vals[1], np.int64), (n,))
            los.append(lo)
            his.append(hi)
        for axis, (lo, hi, size) in enumerate(zip(los, his, shape)):
            bad = np.flatnonzero(((lo < 0) | (hi > size) | (lo > hi)) & (lo != hi))
            if bad.size:
                i = int(bad[0])
                got = f"index {lo[i]}" if isinstance(self.dims[axis], Index) else \
                    f"range {lo[i]}:{hi[i]}"
                binding = {k: v for k, v in env.items() if isinstance(v, int)}
                raise IndexOutOfRangeError(f"{name_task(i)}: map '{self}' gives {got} in "
                                           f"dimension {axis} of size {size} at {binding}")
        return los, his

    def ragged_elements(self, env: Mapping[str, object], shape: Sequence[int], n: int,
                        name_task) -> tuple[np.ndarray, np.ndarray]:
        """Vectorised `elements` over the `boxes`: (count per task, flat element ids task
        after task)."""
        los, his = self.boxes(env, shape, n, name_task)
        if not self.dims:
            return np.ones(n, np.int64), np.zeros(n, np.int64)
        sizes = [hi - lo for lo, hi in zip(los, his)]
        counts = np.prod(sizes, axis=0).astype(np.int64)
        total = int(counts.sum())
        owner = np.repeat(np.arange(n), counts)
        k = np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)
        flat = np.zeros(total, np.int64)
        stride = 1
        for lo, size_d, ext in reversed(list(zip(los, sizes, shape))):
            c = size_d[owner]
            digit = k % np.maximum(c, 1)
            k = k // np.maximum(c, 1)
            flat += (lo[owner] + digit) * stride
            stride *= ext
        return counts, flat

    def elements(self, env: Mapping[str, int], shape: Sequence[int],
                 tensors: Mapping[str, np.ndarray] | None = None, what: str = "") -> np.ndarray:
        """Flat (row-major) element ids of the index set, in order, duplicates kept."""
        per_dim = self.dim_indices(env, shape, tensors, what)
        if not per_dim:
            return np.zeros(1, dtype=np.int64)
        arrays = [np.arange(p.start, p.stop) if isinstance(p, slice) else p for p in per_dim]
        grids = np.meshgrid(*arrays, indexing="ij")
        return np.ravel_multi_index([g.reshape(-1) for g in grids], tuple(shape)).astype(np.int64) \
            if all(a.size for a in arrays) else np.zeros(0, dtype=np.int64)


def format_key(key) -> str:
    """Readable text of a numpy index made by `IndexMap.key`: `0:32, 5` or `3,7, 0:16`."""
    parts = []
    for k in key:
        if isinstance(k, slice):
            parts.append(f"{k.start}:{k.stop}")
            continue
        flat = np.asarray(k).reshape(-1)
        if flat.size and np.array_equal(flat, np.arange(flat[0], flat[0] + flat.size)):
            parts.append(f"{flat[0]}:{flat[0] + flat.size}")
        else:
            parts.append(",".join(map(str, flat[:4])) + ("..." if flat.size > 4 else ""))
    return ", ".join(parts)


def _fmt_env(env: Mapping[str, int]) -> str:
    return "(" + ", ".join(f"{k}={v}" for k, v in env.items()) + ")"


# ----------------------------------------------------------------------------------- parsing

_COMPACT = re.compile(r"^(?:\s*(?:[A-Za-z]|\((?:[^()]|\([^()]*\))*\)))*\s*$")
_TOKEN = re.compile(r"[A-Za-z]|\((?:[^()]|\([^()]*\))*\)")


def parse_map(text: str, axes: Sequence[str] | None = None,
              names: Mapping[str, Expr | int] | None = None,
              axis_syms: Mapping[str, sym.Sym] | None = None, where: str = "") -> IndexMap:
    """Parse map text. `axes` gives the coordinates when the text has no "->" (and must match
    when it has one); `names` resolves program symbols; `axis_syms` gives coordinate symbols
    with their ranges (default: Sym(axis, 0, None)). `where` prefixes error messages."""
    prefix = f"{where}: " if where else ""
    if "->" in text:
        lhs, rhs = text.split("->", 1)
        lhs_axes = tuple(lhs.strip())
        if not all(a.isalpha() for a in lhs_axes) or len(set(lhs_axes)) != len(lhs_axes):
            raise MapError(f"{prefix}map '{text}': the left side must be distinct single letters")
        if axes is not None and tuple(axes) != lhs_axes:
            raise MapError(f"{prefix}map '{text}' has {len(lhs_axes)} input axes "
                           f"({''.join(lhs_axes) or 'none'}) but expected {len(axes)} "
                           f"({''.join(axes) or 'none'})")
        axes = lhs_axes
    else:
        if axes is None:
            raise MapError(f"{prefix}map '{text}' needs a left side ('ij->...')")
        rhs = text
    axes = tuple(axes)
    coord = {a: (axis_syms or {}).get(a, sym.Sym(a, 0, None)) for a in axes}
    scope: dict[str, Expr | int] = dict(names or {})
    scope.update(coord)
    rhs = rhs.strip()
    if not rhs:
        return IndexMap(axes, ())
    if _COMPACT.match(rhs) and not _is_single_name(rhs, scope):
        tokens = _TOKEN.findall(rhs)
        if all(t.startswith("(") or t in axes for t in tokens):
            rhs = ", ".join(tokens)
    try:
        tree = ast.parse(f"_[{rhs},]", mode="eval").body
    except SyntaxError as exc:
        raise MapError(f"{prefix}map '{text}' is not valid: {exc.msg}") from None
    assert isinstance(tree, ast.Subscript)
    elts = tree.slice.elts if isinstance(tree.slice, ast.Tuple) else [tree.slice]
    dims = tuple(_dim(e, scope, text, prefix) for e in elts)
    return IndexMap(axes, dims)


def _is_single_name(rhs: str, scope: Mapping[str, object]) -> bool:
    return rhs in scope and len(rhs) != 1


def _dim(node: ast.AST, scope: Mapping[str, Expr | int], text: str, prefix: str) -> Dim:
    if isinstance(node, ast.Slice):
        if node.step is not None:
            raise MapError(f"{prefix}map '{text}': steps are not supported")
        if node.lower is None and node.upper is None:
            return FULL
        if node.lower is None or node.upper is None:
            raise MapError(f"{prefix}map '{text}': a range needs both ends (write ':' for all)")
        return Span(_value(node.lower, scope, text, prefix),
                    _value(node.upper, scope, text, prefix))
    v = _value(node, scope, text, prefix, allow_vector=True)
    return Index(v)


def _value(node: ast.AST, scope: Mapping[str, Expr | int], text: str, prefix: str,
           allow_vector: bool = False) -> Value:
    if isinstance(node, ast.Subscript):
        if not isinstance(node.value, ast.Name):
            raise MapError(f"{prefix}map '{text}': only 'tensor[...]' loads are supported")
        sl = node.slice
        parts = sl.elts if isinstance(sl, ast.Tuple) else [sl]
        idx: list[Expr | Full] = []
        for p in parts:
            if isinstance(p, ast.Slice):
                if p.lower is not None or p.upper is not None or p.step is not None:
                    raise MapError(f"{prefix}map '{text}': a load takes indices or ':' only")
                idx.append(FULL)
            else:
                idx.append(_expr(p, scope, text, prefix))
        load = Load(node.value.id, tuple(idx))
        if load.is_vector and not allow_vector:
            raise MapError(f"{prefix}map '{text}': '{load}' gives several values where one "
                           "is needed")
        return load
    return _expr(node, scope, text, prefix)


def _expr(node: ast.AST, scope: Mapping[str, Expr | int], text: str, prefix: str) -> Expr:
    try:
        return sym.as_expr(sym.parse(ast.unparse(node), scope))
    except ValueError as exc:
        raise MapError(f"{prefix}map '{text}': {exc}") from None

