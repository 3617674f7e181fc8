"""Generate the megakernel's CUDA source for a program and a scheduling mode.

Only glue is generated: the symbol prelude, one `case` per task grid in the dispatch switch
(coordinates from the task table, tile views from the region maps through `sym`'s C printer,
the kind's body call) and the kernel entry choosing the static or dynamic loop. Everything
else is the hand-written device library in `include/eventtensor/`. The binding-dependent
tables are kernel data, so one kernel serves every binding of the symbols.
"""
from __future__ import annotations

from ... import sym
from ...errors import ProgramError
from ...ir import Program, Region, TaskGrid
from ...maps import Full, Index, Span

SYM_BASE = 32  # first launch-argument slot of the symbol values (see runtime.cuh)
MAX_SLOTS = 64  # ET_SLOTS in runtime.cuh
GPU_MODES = ("static", "dynamic", "unfused")


class UnsupportedOnGpu(ProgramError):
    """The program uses something the CUDA backend does not run."""


def _body_args(g: TaskGrid) -> list[tuple[str, str]]:
    """(role, tensor) of each tile argument of the kind's body, in call order."""
    reads = [r.tensor for r in g.reads]
    writes = [r.tensor for r in g.writes]
    if g.kind in ("row_sum", "sum_partials"):
        if len(reads) != 1 or len(writes) != 1:
            raise UnsupportedOnGpu(f"task grid '{g.name}': a {g.kind} task reads one tensor "
                                   "and writes one")
        return [("reads", reads[0]), ("writes", writes[0])]
    if g.kind == "gemm_partial":
        prm = g.param_dict
        return [("reads", str(prm["x"])), ("reads", str(prm["w"])), ("writes", writes[0])]
    raise UnsupportedOnGpu(f"task grid '{g.name}' uses task kind '{g.kind}', which has no CUDA "
                           "body yet")


def kernel_name(p: Program, mode: str) -> str:
    return f"et_{p.name}_{mode}"


def generate(p: Program, mode: str) -> str:
    """CUDA source of the megakernel for program `p` (after the pass pipeline)."""
    if mode not in GPU_MODES:
        raise UnsupportedOnGpu(f"scheduling mode '{mode}' is not supported by the CUDA backend "
                               f"(supported: {', '.join(GPU_MODES)})")
    for e in p.edges:
        if e.kind == "trigger" or e.map.is_data_dependent:
            raise UnsupportedOnGpu(f"{e.kind} edge {e.grid} -> {e.event} is data dependent; "
                                   "the CUDA backend does not run data-dependent edges yet")
    if SYM_BASE + len(p.symbols) + len(p.tensors) > MAX_SLOTS:
        raise UnsupportedOnGpu(f"program '{p.name}' has {len(p.symbols)} symbols and "
                               f"{len(p.tensors)} tensors; the launch arguments hold "
                               f"{MAX_SLOTS - SYM_BASE} of them")
    tindex = {t.name: i for i, t in enumerate(p.tensors)}
    ren = {s.name: sym.Sym(f"s_{s.name}", s.lo, s.hi) for s in p.symbols}
    out = [f"// eventtensor megakernel: program '{p.name}', {mode} schedule",
           f"// {len(p.grids)} task grids, {len(p.events)} event tensors, "
           f"{len(p.tensors)} tensors",
           sym.C_PRELUDE,
           '#include "eventtensor/runtime.cuh"',
           '#include "eventtensor/bodies.cuh"', "",
           f"#define ET_TENSOR(i) (A[{SYM_BASE + len(p.symbols)} + (i)])", "",
           "__device__ void et_run_task(const long long* A, const EtTask& task) {",
           "    const int c[3] = {task.b.y, task.b.z, task.b.w};  // coordinates"]
    out += [f"    const long long s_{s.name} = ET_SYM({i});  // symbol {s.name}"
            for i, s in enumerate(p.symbols)]
    out.append("    switch (task.a.x) {  // task grid")
    for gi, g in enumerate(p.grids):
        if len(g.axes) > 3:
            raise UnsupportedOnGpu(f"task grid '{g.name}' has {len(g.axes)} axes; the CUDA "
                                   "task record holds 3 coordinates")
        for t in {r.tensor for r in g.reads + g.writes}:
            if p.tensor(t).dtype != "float32":
                raise UnsupportedOnGpu(f"task grid '{g.name}' touches tensor '{t}' of dtype "
                                       f"{p.tensor(t).dtype}; the CUDA bodies take float32")
        out.append(f"    case {gi}: {{  // task grid {g.name}, kind {g.kind}")
        cren = {**ren, **{a: sym.Sym(f"c_{a}", 0, None) for a in g.axes}}
        out += [f"        const long long c_{a} = c[{k}];" for k, a in enumerate(g.axes)]
        regions = {("reads", r.tensor): r for r in g.reads}
        regions.update({("writes", r.tensor): r for r in g.writes})
        names = []
        for k, (role, t) in enumerate(_body_args(g)):
            names.append(f"t{k}")
            out += _tile(f"t{k}", regions[(role, t)], p, tindex[t], cren, role)
        out.append(f"        et_body_{g.kind}({', '.join(names)});")
        out.append("        break;")
        out.append("    }")
    out += ["    }", "}", "",
            f'extern "C" __global__ void __launch_bounds__(256) {kernel_name(p, mode)}'
            "(const long long* __restrict__ args) {",
            "    __shared__ long long A[ET_SLOTS];",
            "    for (int i = threadIdx.x; i < ET_SLOTS; i += blockDim.x) A[i] = args[i];",
            "    __syncthreads();",
            "    et_dynamic_loop(A);" if mode == "dynamic" else "    et_static_loop(A);",
            "    et_finish(A);", "}", ""]
    return "\n".join(out)


def _c(e, ren) -> str:
    return sym.as_expr(e).subs(ren).to_c()


def _tile(name: str, r: Region, p: Program, ti: int, ren, role: str) -> list[str]:
    t = p.tensor(r.tensor)
    shape = [_c(d, ren) for d in t.shape]
    lo, n = [], []
    for d, size in zip(r.map.dims, shape):
        if isinstance(d, Full):
            lo.append("0")
            n.append(size)
        elif isinstance(d, Index):
            lo.append(_c(d.value, ren))
            n.append("1")
        else:
            assert isinstance(d, Span)
            a, b = _c(d.start, ren), _c(d.stop, ren)
            lo.append(a)
            n.append(f"({b}) - ({a})")
    rank = len(shape)
    return [f"        // {role} {r.tensor}[{', '.join(str(d) for d in r.map.dims)}]",
            f"        const long long {name}_shape[{rank}] = {{{', '.join(shape)}}};",
            f"        const long long {name}_lo[{rank}] = {{{', '.join(lo)}}};",
            f"        const long long {name}_n[{rank}] = {{{', '.join(n)}}};",
            f"        const EtTile {name} = et_tile((float*)ET_TENSOR({ti}), {rank}, "
            f"{name}_shape, {name}_lo, {name}_n);"]
