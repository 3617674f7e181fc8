"""Unfused mode (the ablation baseline): the same tasks with a stage-wide barrier between
task grids. Grids run as stages in a topological order of the grid graph; every task of stage
s notifies `stage_barrier[s]` (guarded tasks too) and every task of stage s + 1 waits on it
(wait count: the stage's task count, enumerated per binding). The fine-grained edges stay,
always already satisfied."""
from __future__ import annotations

from .. import sym
from ..ir import Edge, EventDecl, Program, TaskGrid
from ..lower import grid_graph
from ..maps import Index, IndexMap
from .static import _topo

BARRIER = "stage_barrier"


def stage_order(p: Program) -> list[TaskGrid]:
    """The task grids as stages: a topological order of the grid graph."""
    return [p.grids[i] for i in _topo(grid_graph(p))]


def unfuse(p: Program) -> Program:
    """`p` with one barrier event between consecutive stages (grids in topological order)."""
    order = stage_order(p)
    edges = list(p.edges)
    for s, g in enumerate(order):
        edges.append(Edge(g.name, BARRIER, "notify", IndexMap(g.axes, (Index(sym.as_expr(s)),)),
                          on_skip=True))
        if s:
            edges.append(Edge(g.name, BARRIER, "wait",
                              IndexMap(g.axes, (Index(sym.as_expr(s - 1)),))))
    ev = EventDecl(BARRIER, (sym.as_expr(len(order)),))
    return p.replace(events=p.events + (ev,), edges=tuple(edges), name=f"{p.name}_unfused")
