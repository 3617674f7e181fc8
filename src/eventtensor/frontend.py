"""Python API for writing programs: symbols, tensors, event tensors, task grids and edges.

    pb = ProgramBuilder("splitk_rowsum")
    n = pb.symbol("n", 1, 4096)
    pb.input("A", (32 * n, 128))
    pb.temp("partial", (32 * n, 4))
    pb.output("out", (32 * n, 1))
    pb.event("E", (n,))
    pb.grid("partial_sum", "row_sum", "ij", (n, 4),
            reads={"A": "32*i:32*i + 32, 32*j:32*j + 32"},
            writes={"partial": "32*i:32*i + 32, j"}, notify={"E": "ij->i"})
    pb.grid("final_sum", "row_sum", "i", (n,), reads={"partial": "32*i:32*i + 32, :"},
            writes={"out": "32*i:32*i + 32, 0"}, wait={"E": "i->i"})
    program = pb.build()

Map and region texts follow `maps.parse_map`; shapes and extents take ints or `sym` expressions.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

from . import sym
from .errors import ProgramError
from .ir import (
    Edge,
    EdgeKind,
    EventDecl,
    Program,
    Region,
    Role,
    TaskGrid,
    TensorDecl,
    coord_syms,
    event_axes,
    verify,
)
from .maps import IndexMap, parse_map
from .sym import Expr


class ProgramBuilder:
    """Collects declarations in order; `build()` returns a verified `Program`."""

    def __init__(self, name: str, derive_events: bool = False):
        self.name = name
        self.derive_events = derive_events
        self._symbols: dict[str, sym.Sym] = {}
        self._tensors: list[TensorDecl] = []
        self._events: list[EventDecl] = []
        self._grids: list[TaskGrid] = []
        self._edges: list[Edge] = []

    # ------------------------------------------------------------------ declarations
    def symbol(self, name: str, lo: int, hi: int) -> sym.Sym:
        """A symbolic integer (batch size, token blocks, ...) with inclusive range [lo, hi]."""
        if name in self._symbols:
            raise ProgramError(f"symbol '{name}' is declared twice")
        s = sym.Sym(name, lo, hi)
        self._symbols[name] = s
        return s

    def input(self, name: str, shape: Sequence[Expr | int], dtype: str = "float32") -> str:
        return self._tensor(name, shape, dtype, "input")

    def output(self, name: str, shape: Sequence[Expr | int], dtype: str = "float32") -> str:
        return self._tensor(name, shape, dtype, "output")

    def temp(self, name: str, shape: Sequence[Expr | int], dtype: str = "float32") -> str:
        return self._tensor(name, shape, dtype, "temp")

    def _tensor(self, name: str, shape, dtype: str, role: Role) -> str:
        self._tensors.append(TensorDecl(name, _shape(shape), dtype, role))
        return name

    def event(self, name: str, shape: Sequence[Expr | int] = (),
              wait_count: str | Expr | int | None = None) -> str:
        """An event tensor. `wait_count`: None (derived from the notify maps), a number or
        expression, or a map text over the event axes (k, l, ...) such as
        "k->expert_counts[k]" (read at run time) or "k->smin(4, n - 4*k)"."""
        shp = _shape(shape)
        axes = event_axes(len(shp))
        wc: IndexMap | None = None
        if wait_count is not None:
            text = wait_count if isinstance(wait_count, str) else str(sym.as_expr(wait_count))
            if "->" not in text:
                text = f"{''.join(axes)}->{text}"
            wc = parse_map(text, axes, self._symbols, where=f"wait count of event '{name}'")
        self._events.append(EventDecl(name, shp, wc))
        return name

    def grid(self, name: str, kind: str, axes: str | Sequence[str],
             extent: Sequence[Expr | int], *, reads: Mapping[str, str] | None = None,
             writes: Mapping[str, str] | None = None, notify: Mapping[str, str] | None = None,
             wait: Mapping[str, str] | None = None, params: Mapping[str, object] | None = None,
             ) -> str:
        """A task grid of kind `kind` over `axes` (one letter each) with `extent`.
        reads/writes: tensor -> region text; notify/wait: event -> map text."""
        ax = tuple(axes)
        ext = _shape(extent)
        if len(ax) != len(ext):
            raise ProgramError(f"task grid '{name}' has {len(ax)} axes but {len(ext)} extents")
        csyms = coord_syms(ax, ext)
        where = f"task grid '{name}'"

        def region(tensor: str, text: str) -> Region:
            return Region(tensor, parse_map(text, ax, self._symbols, csyms,
                                            where=f"{where}, region of '{tensor}'"))

        self._grids.append(TaskGrid(
            name, kind, ax, ext,
            tuple(region(t, r) for t, r in (reads or {}).items()),
            tuple(region(t, r) for t, r in (writes or {}).items()),
            tuple(sorted((params or {}).items()))))
        for kind_, edges in (("notify", notify), ("wait", wait)):
            for ev, text in (edges or {}).items():
                self._edge(name, ev, kind_, text, ax, csyms)  # type: ignore[arg-type]
        return name

    def trigger(self, event: str, grid: str, text: str) -> None:
        """Data-dependent trigger: completing `event` element e releases the tasks of 1-D
        `grid` in the range the map gives, e.g. "k->exp_indptr[k]:exp_indptr[k + 1]"."""
        ev = self._find(self._events, event, "event")
        self._edge(grid, event, "trigger", text, ev.axes, {})

    def notify(self, grid: str, event: str, text: str, on_skip: bool = False) -> None:
        """Each task of `grid` notifies the elements of `event` the map selects; with
        `on_skip`, also when the task is guarded and skipped (barrier-style arrival)."""
        g = self._find(self._grids, grid, "task grid")
        self._edge(grid, event, "notify", text, g.axes, g.coord_syms(), on_skip)

    def wait(self, grid: str, event: str, text: str) -> None:
        g = self._find(self._grids, grid, "task grid")
        self._edge(grid, event, "wait", text, g.axes, g.coord_syms())

    def _edge(self, grid: str, event: str, kind: EdgeKind, text: str, axes, csyms,
              on_skip: bool = False) -> None:
        m = parse_map(text, axes, self._symbols, csyms, where=f"{kind} edge {grid} -> {event}")
        self._edges.append(Edge(grid, event, kind, m, on_skip))

    @staticmethod
    def _find(items, name: str, what: str):
        for it in items:
            if it.name == name:
                return it
        raise ProgramError(f"no {what} named '{name}' has been declared yet")

    def build(self) -> Program:
        return verify(Program(self.name, tuple(self._symbols.values()), tuple(self._tensors),
                              tuple(self._events), tuple(self._grids), tuple(self._edges),
                              self.derive_events))


def _shape(shape: Sequence[Expr | int]) -> tuple[Expr, ...]:
    return tuple(sym.as_expr(s) for s in shape)
