"""Print a program as Python source that rebuilds it through `ProgramBuilder`.

`to_python(p)` returns a module defining `build()`; `from_python(text)` runs it. The round trip
is exact: `from_python(to_python(p)) == p`, for programs as written and after the passes.
"""
from __future__ import annotations

from .ir import Program


def to_python(p: Program) -> str:
    lines = [
        f'"""Program {p.name!r}: {len(p.grids)} task grids, {len(p.events)} event tensors."""',
        "from eventtensor.frontend import ProgramBuilder",
        "from eventtensor.sym import cdiv, smax, smin  # noqa: F401",
        "",
        "",
        "def build():",
        f"    pb = ProgramBuilder({p.name!r}, derive_events={p.derive_events!r})",
    ]
    for s in p.symbols:
        lines.append(f"    {s.name} = pb.symbol({s.name!r}, {s.lo!r}, {s.hi!r})")
    for t in p.tensors:
        lines.append(f"    pb.{t.role}({t.name!r}, {_shape(t.shape)}, {t.dtype!r})")
    for e in p.events:
        wc = f", wait_count={str(e.wait_count)!r}" if e.wait_count is not None else ""
        lines.append(f"    pb.event({e.name!r}, {_shape(e.shape)}{wc})")
    for g in p.grids:
        axes = "".join(g.axes)
        lines.append(f"    pb.grid({g.name!r}, {g.kind!r}, {axes!r}, {_shape(g.extent)},")
        lines.append(f"            reads={_regions(g.reads)},")
        lines.append(f"            writes={_regions(g.writes)},")
        lines.append(f"            params={dict(g.params)!r})")
    for edge in p.edges:
        m = str(edge.map)
        if edge.kind == "trigger":
            lines.append(f"    pb.trigger({edge.event!r}, {edge.grid!r}, {m!r})")
        else:
            skip = ", on_skip=True" if edge.on_skip else ""
            lines.append(f"    pb.{edge.kind}({edge.grid!r}, {edge.event!r}, {m!r}{skip})")
    lines += ["    return pb.build()", ""]
    return "\n".join(lines)


def from_python(text: str) -> Program:
    """Execute printed source and return the program its `build()` makes."""
    scope: dict = {}
    exec(compile(text, "<eventtensor program>", "exec"), scope)
    return scope["build"]()


def _shape(dims) -> str:
    inner = ", ".join(d.to_py() for d in dims)
    return f"({inner},)" if len(dims) == 1 else f"({inner})"


def _regions(regions) -> str:
    return "{" + ", ".join(f"{r.tensor!r}: {str(r.map)!r}" for r in regions) + "}"
