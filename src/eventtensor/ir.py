"""The Event Tensor IR: data tensors, event tensors, task grids, edges and programs.

All nodes are small frozen dataclasses; a `Program` is a value. `verify()` checks structure
(names, arities, symbols, dtypes) and raises a `ProgramError` naming the part at fault. Semantic
checks that need concrete bindings (index ranges, wait counts, cycles) live in `passes`.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

from . import sym
from .errors import MapError, ProgramError
from .maps import Index, IndexMap, Load, Span
from .sym import Expr

Role = Literal["input", "output", "temp"]
EdgeKind = Literal["notify", "wait", "trigger"]
DTYPES = ("float32", "float16", "bfloat16", "int32", "int64")
INT_DTYPES = ("int32", "int64")


@dataclass(frozen=True)
class TensorDecl:
    """A data tensor with a symbolic shape. Inputs are provided by the caller; outputs and
    temps are written by tasks."""

    name: str
    shape: tuple[Expr, ...]
    dtype: str
    role: Role = "temp"


@dataclass(frozen=True)
class EventDecl:
    """An event tensor: a tensor of counters with a symbolic shape. `wait_count` maps event
    coordinates to the number of notifies each element needs: an expression (closed form) or a
    load from a runtime tensor (data-dependent count). None: derived by the passes."""

    name: str
    shape: tuple[Expr, ...]
    wait_count: IndexMap | None = None

    @property
    def axes(self) -> tuple[str, ...]:
        return event_axes(len(self.shape))

    @property
    def runtime_count(self) -> Load | None:
        """The load giving the wait count at run time, if the count is data dependent."""
        if self.wait_count is not None and isinstance(self.wait_count.dims[0], Index):
            v = self.wait_count.dims[0].value
            return v if isinstance(v, Load) else None
        return None


@dataclass(frozen=True)
class Region:
    """The tile of tensor `tensor` that one task reads or writes, as a map from the task's
    coordinates to tensor indices."""

    tensor: str
    map: IndexMap


@dataclass(frozen=True)
class TaskGrid:
    """A grid of tile tasks (a device function). Every task runs the body of task kind `kind`
    on its regions; `params` are the kind's compile-time parameters."""

    name: str
    kind: str
    axes: tuple[str, ...]
    extent: tuple[Expr, ...]
    reads: tuple[Region, ...] = ()
    writes: tuple[Region, ...] = ()
    params: tuple[tuple[str, object], ...] = ()

    @property
    def param_dict(self) -> dict[str, object]:
        return dict(self.params)

    def coord_syms(self) -> dict[str, sym.Sym]:
        """Coordinate symbols with the ranges their extents allow."""
        return coord_syms(self.axes, self.extent)


@dataclass(frozen=True)
class Edge:
    """`notify`: each task of `grid` adds one to every element of `event` its map selects.
    `wait`: each task of `grid` waits until every selected element reached its wait count.
    `trigger`: completing event element e releases the tasks (by linear id) of `grid` in the
    range the map gives for e; those tasks wait on e.
    `on_skip` (notify only): a task that is guarded (skipped) still makes this notify, as a
    stage barrier needs."""

    grid: str
    event: str
    kind: EdgeKind
    map: IndexMap
    on_skip: bool = False


@dataclass(frozen=True)
class Program:
    """A whole megakernel program: everything one launch runs."""

    name: str
    symbols: tuple[sym.Sym, ...]
    tensors: tuple[TensorDecl, ...]
    events: tuple[EventDecl, ...]
    grids: tuple[TaskGrid, ...]
    edges: tuple[Edge, ...]
    derive_events: bool = False
    _index: dict = field(default=None, compare=False, repr=False, hash=False)  # type: ignore

    def __post_init__(self) -> None:
        object.__setattr__(self, "_index", {
            "tensor": {t.name: t for t in self.tensors},
            "event": {e.name: e for e in self.events},
            "grid": {g.name: g for g in self.grids},
            "symbol": {s.name: s for s in self.symbols},
        })

    def tensor(self, name: str) -> TensorDecl:
        return self._lookup("tensor", name)

    def event(self, name: str) -> EventDecl:
        return self._lookup("event", name)

    def grid(self, name: str) -> TaskGrid:
        return self._lookup("grid", name)

    def has(self, kind: str, name: str) -> bool:
        return name in self._index[kind]

    def _lookup(self, kind: str, name: str):
        try:
            return self._index[kind][name]
        except KeyError:
            raise ProgramError(f"program '{self.name}' has no {kind} named '{name}'") from None

    def edges_of(self, grid: str | None = None, event: str | None = None,
                 kind: EdgeKind | None = None) -> list[Edge]:
        return [e for e in self.edges if (grid is None or e.grid == grid)
                and (event is None or e.event == event) and (kind is None or e.kind == kind)]

    def replace(self, **changes) -> Program:
        return replace(self, **changes)


def event_axes(rank: int) -> tuple[str, ...]:
    """Conventional coordinate names of an event of the given rank (k, l, m, ...)."""
    letters = "klmnopqrs"
    if rank > len(letters):
        raise ProgramError(f"events of rank {rank} are not supported (max {len(letters)})")
    return tuple(letters[:rank])


def coord_syms(axes: tuple[str, ...], extent: tuple[Expr, ...]) -> dict[str, sym.Sym]:
    out = {}
    for a, n in zip(axes, extent):
        hi = n.bounds()[1]
        out[a] = sym.Sym(a, 0, None if hi is None else max(hi - 1, 0))
    return out


# ------------------------------------------------------------------------------- verify

def verify(p: Program) -> Program:
    """Structural checks; returns `p` unchanged or raises a ProgramError naming the culprit."""
    for kind, items in (("tensor", p.tensors), ("event", p.events), ("task grid", p.grids),
                        ("symbol", p.symbols)):
        seen: set[str] = set()
        for it in items:
            if not it.name.isidentifier():
                raise ProgramError(f"{kind} name '{it.name}' is not an identifier")
            if it.name in seen:
                raise ProgramError(f"{kind} '{it.name}' is declared twice")
            seen.add(it.name)
    declared = set(p._index["symbol"])
    for t in p.tensors:
        if t.dtype not in DTYPES:
            raise ProgramError(f"tensor '{t.name}' has unsupported dtype '{t.dtype}' "
                               f"(one of {', '.join(DTYPES)})")
        _check_symbols(t.shape, declared, f"shape of tensor '{t.name}'")
    for e in p.events:
        _check_symbols(e.shape, declared, f"shape of event '{e.name}'")
        if e.wait_count is not None:
            _check_map(p, e.wait_count, e.axes, 1, f"wait count of event '{e.name}'", declared)
    from .ops import registry  # local: ops imports ir
    for g in p.grids:
        if g.kind not in registry.KINDS:
            raise ProgramError(f"task grid '{g.name}' uses unknown task kind '{g.kind}' "
                               f"(known: {', '.join(sorted(registry.KINDS))})")
        if len(g.axes) != len(g.extent):
            raise ProgramError(f"task grid '{g.name}' has {len(g.axes)} axes but "
                               f"{len(g.extent)} extents")
        _check_symbols(g.extent, declared, f"extent of task grid '{g.name}'")
        for role, regions in (("reads", g.reads), ("writes", g.writes)):
            names = [r.tensor for r in regions]
            if len(set(names)) != len(names):
                raise ProgramError(f"task grid '{g.name}' {role} a tensor twice")
            for r in regions:
                t = p.tensor(r.tensor)
                _check_map(p, r.map, g.axes, len(t.shape),
                           f"region of tensor '{r.tensor}' {role} by task grid '{g.name}'",
                           declared)
                if role == "writes" and t.role == "input":
                    raise ProgramError(f"task grid '{g.name}' writes input tensor '{t.name}'")
    for edge in p.edges:
        g, ev = p.grid(edge.grid), p.event(edge.event)
        what = f"{edge.kind} edge {edge.grid} -> {edge.event}"
        if edge.kind == "trigger":
            if len(g.axes) != 1:
                raise MapError(f"{what}: a trigger range releases tasks of a 1-D grid, but "
                               f"task grid '{g.name}' has {len(g.axes)} axes")
            _check_map(p, edge.map, ev.axes, 1, what, declared)
            if not isinstance(edge.map.dims[0], Span):
                raise MapError(f"{what}: map '{edge.map}' must give a range 'lo:hi' of tasks")
        else:
            _check_map(p, edge.map, g.axes, len(ev.shape), what, declared)
        if edge.on_skip and (edge.kind != "notify" or edge.map.is_data_dependent):
            raise MapError(f"{what}: only affine notify edges can be made by skipped tasks")
    return p


def _check_symbols(exprs, declared: set[str], what: str) -> None:
    for e in exprs:
        missing = set(e.free_symbols()) - declared
        if missing:
            raise ProgramError(f"{what} uses undeclared symbol(s) {', '.join(sorted(missing))}")


def _check_map(p: Program, m: IndexMap, axes: tuple[str, ...], rank: int, what: str,
               declared: set[str]) -> None:
    if tuple(m.axes) != tuple(axes):
        raise MapError(f"{what}: map '{m}' has {len(m.axes)} input axes "
                       f"({''.join(m.axes) or 'none'}) but expected {len(axes)} "
                       f"({''.join(axes) or 'none'})")
    if m.rank != rank:
        raise MapError(f"{what}: map '{m}' gives {m.rank} indices but the target has rank {rank}")
    missing = set(m.free_symbols) - declared - set(axes)
    if missing:
        raise MapError(f"{what}: map '{m}' uses unknown name(s) {', '.join(sorted(missing))}")
    for t in m.tensors_read:
        if not p.has("tensor", t):
            raise MapError(f"{what}: map '{m}' reads unknown tensor '{t}'")
        if p.tensor(t).dtype not in INT_DTYPES:
            raise MapError(f"{what}: map '{m}' reads tensor '{t}' of dtype "
                           f"{p.tensor(t).dtype}; index tensors must be int32 or int64")
