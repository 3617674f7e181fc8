"""Generate the megakernel's CUDA source for a program and a scheduling mode.

Only glue is generated: the symbol prelude; one `case` per task grid in the dispatch switch
(coordinates from the task record, tile views from the region maps through `sym`'s C printer,
index tensors read where a region is data dependent, the kind's body call); the
data-dependent waits, triggers and notifies of each grid; the runtime wait counts; in dynamic
and hybrid modes (the device queue's counter protocol), the arming of runtime wait counts and
the trigger ranges released on completion (see `dynamic.cuh`); the kernel entry running the
mode's loops. Everything else is the
hand-written device library in `include/eventtensor/`. Binding-dependent tables are kernel
data, so one kernel serves every binding of the symbols.
"""
from __future__ import annotations

import re
from collections.abc import Mapping

from ... import sym
from ...dtypes import ELEMENT_BYTES
from ...errors import ProgramError
from ...ir import Edge, EventDecl, Program, Region, TaskGrid, TensorDecl
from ...maps import Full, Index, IndexMap, Load, Span

SYM_BASE = 48    # first launch-argument slot of the symbol values (see runtime.cuh)
MAX_SLOTS = 128  # ET_SLOTS in runtime.cuh
GPU_MODES = ("static", "dynamic", "hybrid", "unfused")
# device-library settings a kernel may override (runtime.cuh documents each)
KNOBS = ("ET_SPIN_NS", "ET_SLEEP_NS", "ET_ACQUIRE_POLLS", "ET_POLL_BATCH", "ET_STAGE_BYTES",
         "ET_DEFER_MAX", "ET_WEIGHTS_EVICT_FIRST", "ET_PREFETCH_BYTES", "ET_PREFETCH_NEXT",
         "ET_PREFETCH_OWN", "ET_PREFETCH_BULK", "ET_LINEAR_MMA", "ET_LINEAR_MMA_LO",
         "ET_LINEAR_MMA_SPREAD", "ET_LINEAR_CORE_ROWS", "ET_LINEAR_ASYNC", "ET_LINEAR_EARLY",
         "ET_LINEAR_MMA_RING", "ET_ATTN_STREAM", "ET_LINEAR_EARLY_ROUNDS",
         "ET_LINEAR_MMA_KSPLIT")
# task kinds with an early part, run before their waits where ET_LINEAR_EARLY is set
# (llm_dense.cuh et_early_<kind>, the body's arguments)
EARLY_KINDS = ("linear_partial",)
ASYNC_ROUND_BYTES = 65536  # llm_dense.cuh ET_ASYNC_ROUND_BYTES: a round of ET_LINEAR_ASYNC
MMA_RING_BLOCK_BYTES = 16384  # llm_dense.cuh ET_MMA_RING_BLOCK_BYTES: one block, a CTA
MMA_RING_BLOCKS = tuple(range(2, 9))  # llm_dense.cuh ET_LINEAR_MMA_RING: blocks of the ring
POLL_BATCHES = (8, 16, 32)  # runtime.cuh ET_POLL_BATCH: a task's wait polls in flight
ATTN_STREAM_WORDS = (0, 16, 32)  # llm_attention.cuh ET_ATTN_STREAM: words a thread, 16 bytes
ATTN_STREAM_WORD_BYTES = 16 * 256  # a word of ET_ATTN_STREAM over the 256 threads of a CTA
STAGE_TILES = 4  # runtime.cuh ET_STAGE_TILES
STAGES = "stages"  # the stage-per-kernel baseline (runtime.cuh ET_STAGE_KERNEL), not a megakernel


SMEM_PER_SM = 228 * 1024   # shared memory of an H100 / H200 SM
SMEM_PER_CTA_RESERVED = 1024  # of it, reserved by the system per resident CTA
STATIC_SMEM_BOUND = 28 * 1024  # a megakernel's static shared memory, at most (runtime checks)


def dynamic_smem_bytes(knobs: Mapping[str, int] | None, linear_ring: bool = True) -> int:
    """The dynamic shared memory a CTA of a kernel with these knobs takes: the stage ring
    (ET_STAGE_BYTES), or the largest of the one-row linear's rounds of weight words
    (ET_LINEAR_ASYNC, unless `linear_ring` is false: a launch may leave it out, and the
    one-row linear then loads its words into registers), the tensor-core linear's ring of
    weight blocks (ET_LINEAR_MMA_RING) and the attention's ring of KV words (ET_ATTN_STREAM),
    which share it (a CTA runs one body at a time)."""
    knobs = knobs or {}
    return int(knobs.get("ET_STAGE_BYTES", 0)) or max(
        int(knobs.get("ET_LINEAR_ASYNC", 0)) * ASYNC_ROUND_BYTES * linear_ring,
        int(knobs.get("ET_LINEAR_MMA_RING", 0)) * MMA_RING_BLOCK_BYTES,
        int(knobs.get("ET_ATTN_STREAM", 0)) * ATTN_STREAM_WORD_BYTES)


def stage_bytes(ctas_per_sm: int) -> int:
    """The most bytes of stage ring a CTA may take (the knob ET_STAGE_BYTES, dynamic shared
    memory, stage.cuh), a multiple of 1 KB: the CTAs of an SM, each with its static shared
    memory (at most STATIC_SMEM_BOUND) and the system's reserve, fit the SM's shared memory.
    `Megakernel` checks the compiled kernel's own static size before its first launch."""
    room = SMEM_PER_SM // ctas_per_sm - SMEM_PER_CTA_RESERVED - STATIC_SMEM_BOUND
    return max(0, room // 1024 * 1024)


# kind -> (tile arguments as (role, tensor or param naming it), integer parameters)
BODIES: dict[str, tuple[list[tuple[str, str]], list[str]]] = {
    "nop": ([], []),
    "row_sum": ([("reads", "#0"), ("writes", "#0")], []),
    "sum_partials": ([("reads", "#0"), ("writes", "#0")], []),
    "gemm_partial": ([("reads", "@x"), ("reads", "@w"), ("writes", "#0")], []),
    "moe_router": ([("reads", "x"), ("reads", "w_router"), ("writes", "topk_ids"),
                    ("writes", "topk_w")], ["top_k"]),
    "moe_scan": ([("reads", "topk_ids"), ("writes", "expert_counts"), ("writes", "expert_tiles"),
                  ("writes", "exp_indptr"), ("writes", "tile_expert"), ("writes", "tile_lo"),
                  ("writes", "tile_hi"), ("writes", "slot")], ["experts", "tile_m"]),
    "moe_gather": ([("reads", "x"), ("writes", "xs")], []),
    "moe_expert_gemm": ([("reads", "xs"), ("reads", "w_experts"), ("writes", "ys")], []),
    "moe_combine": ([("reads", "ys"), ("reads", "topk_w"), ("writes", "out")], []),
    # the decode step (llm_dense.cuh, llm_attention.cuh); `?`: a tile that may be absent
    "embedding": ([("reads", "#0"), ("writes", "#0")], []),
    "rms_norm": ([("reads", "@x"), ("reads", "@w"), ("writes", "#0")], ["eps:f"]),
    "linear_partial": ([("reads", "@x"), ("reads", "@w"), ("writes", "#0")], []),
    "norm_linear_partial": ([("reads", "@x"), ("reads", "@ss"), ("reads", "@norm_w"),
                             ("reads", "@w"), ("writes", "#0")], ["eps:f", "cols"]),
    "residual_add": ([("reads", "@x"), ("reads", "@parts"), ("writes", "#0")], []),
    "residual_add_sumsq": ([("reads", "@x"), ("reads", "@parts"), ("writes", "@out"),
                            ("writes", "@ss")], []),
    "residual_rms_norm": ([("reads", "@x"), ("reads", "@parts"), ("reads", "@w"),
                           ("writes", "@out"), ("writes", "@h")], ["eps:f"]),
    "silu_mul": ([("reads", "@gate"), ("reads", "@up"), ("writes", "#0")], []),
    "silu_linear_partial": ([("reads", "@gate"), ("reads", "@up"), ("reads", "@w"),
                             ("writes", "#0")], []),
    "argmax_partial": ([("reads", "@x"), ("writes", "@max"), ("writes", "@arg")],
                       ["tile", "@axis"]),
    "argmax_reduce": ([("reads", "@x"), ("reads", "@arg"), ("writes", "#0")], []),
    "decode_plan": ([("reads", "@pos"), ("writes", "#0")],
                    ["chunk", "chunks", "kv_heads", "context"]),
    "qk_norm_rope": ([("reads", "@q"), ("reads", "@k"), ("reads", "@v"), ("reads", "@pos"),
                      ("reads", "@inv_freq"), ("reads", "?@q_norm"), ("reads", "?@k_norm"),
                      ("writes", "@q_out"), ("writes", "@k_out"), ("writes", "@v_out")],
                     ["head_dim", "eps:f"]),
    "kv_append": ([("reads", "@k"), ("reads", "@v"), ("writes", "@k_out"),
                   ("writes", "@v_out")], []),
    "decode_attention": ([("reads", "@q"), ("reads", "@k_cache"), ("reads", "@v_cache"),
                          ("reads", "@k_new"), ("reads", "@v_new"), ("reads", "@pos"),
                          ("writes", "@out"), ("writes", "@lse")],
                         ["chunk", "chunks", "kv_heads", "c0"]),
    "attn_merge": ([("reads", "@parts"), ("reads", "@lse"), ("writes", "#0")], []),
}
# dtype -> (element type, tile type) of bodies.cuh
CTYPE = {"float32": ("float", "EtTile"), "bfloat16": ("et_bf16", "EtBTile"),
         "int32": ("int", "EtITile")}


class UnsupportedOnGpu(ProgramError):
    """The program uses something the CUDA backend does not run."""


def uses_tensor_table(p: Program) -> bool:
    """Whether the tensor pointers of `p` travel in their own table (runtime.cuh
    ET_NUM_TENSORS) because the launch-argument slots after the symbols cannot hold them."""
    return SYM_BASE + len(p.symbols) + len(p.tensors) > MAX_SLOTS


def kernel_name(p: Program, mode: str, ctas_per_sm: int = 1) -> str:
    return f"et_{p.name}_{mode}" + (f"_x{ctas_per_sm}" if ctas_per_sm > 1 else "")


class _Gen:
    def __init__(self, p: Program):
        self.p = p
        self.tindex = {t.name: i for i, t in enumerate(p.tensors)}
        self.ren = {s.name: sym.Sym(f"s_{s.name}", s.lo, s.hi) for s in p.symbols}
        self.local: list[str] | None = None  # tensors of the case being generated, see tref

    def tref(self, name: str) -> str:
        """C expression of the pointer slot of tensor `name`. Inside a case of `_grid_switch`,
        `ET_GT(j)`: the case's j-th tensor in order of first reference, so that grids whose
        cases differ only in the tensors they touch generate the same text (one case)."""
        if self.local is None:
            return f"ET_TENSOR({self.tindex[name]})"
        if name not in self.local:
            self.local.append(name)
        return f"ET_GT({self.local.index(name)})"

    def c(self, e, ren=None) -> str:
        return sym.as_expr(e).subs(ren or self.ren).to_c()

    def sym_lines(self) -> list[str]:
        return [f"    const long long s_{s.name} = ET_SYM({i});" for i, s in
                enumerate(self.p.symbols)]

    def load(self, ld: Load, ren) -> str:
        """C expression of a scalar load from an int32 tensor."""
        t = _int32_index_tensor(self.p, ld)
        flat = "0"
        for i, d in zip(ld.index, t.shape):
            flat = f"({flat}) * ({self.c(d)}) + ({self.c(i, ren)})"
        return f"((const int*){self.tref(ld.tensor)})[{flat}]"

    def value(self, v, ren) -> str:
        return self.load(v, ren) if isinstance(v, Load) else self.c(v, ren)

    def vector(self, ld: Load, ren) -> tuple[str, str]:
        """(pointer to the first index, count) of a vector load along its one ':' dimension,
        which must be the last (contiguous) one."""
        t = self.p.tensor(ld.tensor)
        if sum(isinstance(i, Full) for i in ld.index) != 1 or not isinstance(ld.index[-1], Full):
            raise UnsupportedOnGpu(f"index load {ld} must select the last dimension of "
                                   f"'{ld.tensor}' with ':'")
        flat = "0"
        for i, d in zip(ld.index, t.shape):
            flat = f"({flat}) * ({self.c(d)}) + ({'0' if isinstance(i, Full) else self.c(i, ren)})"
        return (f"((const int*){self.tref(ld.tensor)} + ({flat}))",
                self.c(t.shape[-1]))

    def size(self, dims) -> str:
        """C expression of the product of `dims`."""
        prod = "1"
        for d in dims:
            prod = f"({prod}) * ({self.c(d)})"
        return prod

    def event_base(self, name: str) -> str:
        """First element id of event `name` (events are numbered in program order)."""
        return " + ".join(self.size(e.shape) for e in
                          self.p.events[:[e.name for e in self.p.events].index(name)]) or "0"

    def task_base(self, name: str) -> str:
        """First task id of grid `name` (grids are numbered in program order)."""
        return " + ".join(self.size(g.extent) for g in
                          self.p.grids[:[g.name for g in self.p.grids].index(name)]) or "0"

    def event_ren(self, ev: EventDecl) -> dict:
        """Renaming of the symbols and of the axes of `ev` to element coordinates e0, e1, ..."""
        return {**self.ren, **{a: sym.Sym(f"e{k}", 0, None) for k, a in enumerate(ev.axes)}}

    def element_of(self, ev: EventDecl, indent: str) -> tuple[str, list[str]]:
        """(C condition that element `x` belongs to `ev`, lines computing its coordinates
        e0, e1, ... inside that condition)."""
        base = self.event_base(ev.name)
        lines = [f"{indent}int r = x - (int)({base});"]  # (32-bit: element ids are ints)
        for k in reversed(range(len(ev.shape))):
            lines.append(f"{indent}const int e{k} = r % (int)({self.c(ev.shape[k])}); "
                         f"r /= (int)({self.c(ev.shape[k])});")
        return f"x >= {base} && x < {base} + {self.size(ev.shape)}", lines

    def all_elements(self, ev: EventDecl, body: list[str], indent: str) -> list[str]:
        """Loops over every element `x` of `ev` (coordinates e0, e1, ...) around `body`."""
        return self.element_loops(IndexMap(ev.axes, tuple(Full() for _ in ev.shape)), ev,
                                  self.ren, body, indent)

    def element_loops(self, m: IndexMap, ev: EventDecl, ren, body: list[str],
                      indent: str) -> list[str]:
        """Nested loops over the event elements map `m` selects; `body` sees `x`."""
        out, idx = [], []
        for k, (d, size) in enumerate(zip(m.dims, ev.shape)):
            v = f"e{k}"
            if isinstance(d, Full):
                out.append(f"{indent}for (long long {v} = 0; {v} < {self.c(size)}; ++{v}) {{")
            elif isinstance(d, Span):
                out.append(f"{indent}for (long long {v} = {self.value(d.start, ren)}; "
                           f"{v} < {self.value(d.stop, ren)}; ++{v}) {{")
            elif isinstance(d.value, Load) and d.value.is_vector:
                ptr, n = self.vector(d.value, ren)
                out.append(f"{indent}for (long long j{k} = 0; j{k} < {n}; ++j{k}) {{ "
                           f"const long long {v} = {ptr}[j{k}];")
            else:
                out.append(f"{indent}{{ const long long {v} = {self.value(d.value, ren)};")
            idx.append((v, size))
            indent += "    "
        flat = "0"
        for v, size in idx:
            flat = f"({flat}) * ({self.c(size)}) + {v}"
        out.append(f"{indent}const int x = (int)({self.event_base(ev.name)} + {flat});")
        out += [indent + b for b in body]
        for _ in idx:
            indent = indent[:-4]
            out.append(f"{indent}}}")
        return out


ATTN_SCORE_FLOATS = 4096  # llm_common.cuh ET_LLM_SMEM_BYTES / 4: the fast path's scores


def attention_group(G: int) -> int:
    """GP, the query heads a KV head the attention fast path's instance for G takes (2, 4
    or 8): a tile of T keys takes that path where T * GP <= ATTN_SCORE_FLOATS."""
    return 2 if G <= 2 else 4 if G <= 4 else 8


def _attention_groups(p: Program) -> list[str]:
    """The defines of llm_attention.cuh's ET_ATTN_GROUPS and ET_ATTN_WORDS naming only the
    fast-path instances that the decode_attention grids of `p` use: GP 2, 4 or 8 of G query
    heads per KV head, and W words of 16 bytes per cache row; none without such grids (the
    header's defaults then compile the common ones)."""
    groups = words = 0
    for grid in p.grids:
        if grid.kind != "decode_attention":
            continue
        q, cache = (p.tensor(str(grid.param_dict[n])) for n in ("q", "k_cache"))
        D = cache.shape[-1].value
        G = q.shape[-1].value // D // int(grid.param_dict["kv_heads"])
        groups |= 1 << attention_group(G)
        W, rest = divmod(D * ELEMENT_BYTES[cache.dtype], 16)
        if not rest and 4 <= W <= 32:
            words |= 1 << W
    return ([f"#define ET_ATTN_GROUPS {groups}"] if groups else []) + \
           ([f"#define ET_ATTN_WORDS {words}ull"] if words else [])


def generate(p: Program, mode: str, ctas_per_sm: int = 1,
             knobs: Mapping[str, int] | None = None) -> str:
    """CUDA source of the megakernel for program `p` (after the pass pipeline), its registers
    bounded so that `ctas_per_sm` CTAs of 256 threads fit one SM, `knobs` (see KNOBS) set;
    for mode `STAGES`, of the stage kernel running one task grid per launch
    (`_check_stages`)."""
    knobs = dict(knobs or {})
    for name, value in knobs.items():
        if name not in KNOBS or not isinstance(value, int) or value < 0:
            raise ValueError(f"knob {name}={value!r}: the device library's knobs are "
                             f"{', '.join(KNOBS)}, each a non-negative int")
    staging = knobs.get("ET_STAGE_BYTES", 0)
    if staging % 16 or staging > stage_bytes(ctas_per_sm):
        raise ValueError(f"knob ET_STAGE_BYTES={staging}: the stage ring takes a multiple of "
                         f"16 bytes, at most {stage_bytes(ctas_per_sm)} with {ctas_per_sm} "
                         "CTA(s) per SM")
    for other in ("ET_PREFETCH_BYTES", "ET_WEIGHTS_EVICT_FIRST"):
        if staging and knobs.get(other, 0):
            raise ValueError(f"knobs ET_STAGE_BYTES={staging} and {other}={knobs[other]}: "
                             "with the stage ring, weights reach their tasks through it; set "
                             "one of them")
    rounds = knobs.get("ET_LINEAR_ASYNC", 0)
    if rounds not in (0, 2, 3) or rounds * ASYNC_ROUND_BYTES > stage_bytes(ctas_per_sm):
        raise ValueError(f"knob ET_LINEAR_ASYNC={rounds}: the one-row linear keeps 2 or 3 "
                         f"rounds of {ASYNC_ROUND_BYTES} bytes in shared memory (0: none), "
                         f"at most {stage_bytes(ctas_per_sm)} bytes with {ctas_per_sm} CTA(s) "
                         "per SM")
    stream = knobs.get("ET_ATTN_STREAM", 0)
    room = stage_bytes(ctas_per_sm)
    if stream not in ATTN_STREAM_WORDS or stream * ATTN_STREAM_WORD_BYTES > room:
        raise ValueError(f"knob ET_ATTN_STREAM={stream}: the attention's KV ring takes "
                         f"{' or '.join(map(str, ATTN_STREAM_WORDS[1:]))} words of 16 bytes "
                         f"a thread (0: none), at most {stage_bytes(ctas_per_sm)} bytes a CTA "
                         f"with {ctas_per_sm} CTA(s) per SM")
    blocks = knobs.get("ET_LINEAR_MMA_RING", 0)
    if blocks not in (0, *MMA_RING_BLOCKS) or blocks * MMA_RING_BLOCK_BYTES > room:
        raise ValueError(f"knob ET_LINEAR_MMA_RING={blocks}: the tensor-core linear's ring "
                         f"takes {MMA_RING_BLOCKS[0]} to {MMA_RING_BLOCKS[-1]} blocks of "
                         f"{MMA_RING_BLOCK_BYTES} bytes (0: none), "
                         f"at most {room} bytes a CTA with {ctas_per_sm} CTA(s) per SM")
    ksplit = knobs.get("ET_LINEAR_MMA_KSPLIT", 1)
    if ksplit not in (1, 2) or (ksplit == 2 and not blocks):
        raise ValueError(f"knob ET_LINEAR_MMA_KSPLIT={ksplit}: the tensor-core linear's warps "
                         "split k in 1 (off) or 2 groups, with the ring of weight blocks "
                         "(ET_LINEAR_MMA_RING)")
    early = knobs.get("ET_LINEAR_EARLY", 0)
    if early not in (0, 1, 2, 3) or (early & 1 and not rounds) or (early & 2 and not blocks):
        raise ValueError(f"knob ET_LINEAR_EARLY={early}: the early weight copies go to the "
                         "ring of ET_LINEAR_ASYNC (bit 1) and of ET_LINEAR_MMA_RING (bit 2); "
                         "set the bits of the rings the kernel has")
    early_rounds = knobs.get("ET_LINEAR_EARLY_ROUNDS")
    if early_rounds is not None and not (early & 1 and 1 <= early_rounds <= rounds):
        raise ValueError(f"knob ET_LINEAR_EARLY_ROUNDS={early_rounds}: the one-row linear's "
                         f"rounds issued early, 1 to ET_LINEAR_ASYNC={rounds}, with bit 1 of "
                         "ET_LINEAR_EARLY set")
    for other, value in (("ET_LINEAR_ASYNC", rounds), ("ET_LINEAR_MMA_RING", blocks),
                         ("ET_ATTN_STREAM", stream)):
        if value and staging:
            raise ValueError(f"knobs ET_STAGE_BYTES={staging} and {other}={value} both take "
                             "the dynamic shared memory; set one of them")
    if knobs.get("ET_DEFER_MAX", 1) < 1:
        raise ValueError("knob ET_DEFER_MAX=0: a CTA holds back the notifies of at most "
                         "ET_DEFER_MAX - 1 tasks; it takes 1 (none) or more")
    if knobs.get("ET_POLL_BATCH", 8) not in POLL_BATCHES:
        raise ValueError(f"knob ET_POLL_BATCH={knobs['ET_POLL_BATCH']}: a task's table waits "
                         f"are polled {', '.join(map(str, POLL_BATCHES))} at a time")
    if mode not in GPU_MODES + (STAGES,):
        raise UnsupportedOnGpu(f"scheduling mode '{mode}' is not supported by the CUDA backend "
                               f"(supported: {', '.join(GPU_MODES)})")
    if mode == STAGES:
        _check_stages(p)
    dynamic = mode in ("dynamic", "hybrid")  # the device queue's counter protocol
    if dynamic:
        _check_triggers(p)
    else:
        _check_runtime_counts(p)
    if SYM_BASE + len(p.symbols) > MAX_SLOTS:
        raise UnsupportedOnGpu(f"program '{p.name}' has {len(p.symbols)} symbols; the launch "
                               f"arguments hold {MAX_SLOTS - SYM_BASE}")
    g = _Gen(p)
    out = [f"// eventtensor megakernel: program '{p.name}', {mode} schedule",
           f"// {len(p.grids)} task grids, {len(p.events)} event tensors, "
           f"{len(p.tensors)} tensors",
           sym.C_PRELUDE,
           *(["#define ET_ARMED_COUNTS 1"] if dynamic else []),
           *(["#define ET_HYBRID 1"] if mode == "hybrid" else []),
           *([f"#define ET_NUM_TENSORS {len(p.tensors)}"] if uses_tensor_table(p) else []),
           *(f"#define {name} {value}" for name, value in sorted(knobs.items())),
           *_attention_groups(p),
           *(["#define ET_LINEAR_FOLDS 1"]
             if any(grid.kind == "norm_linear_partial" for grid in p.grids) else []),
           '#include "eventtensor/runtime.cuh"',
           '#include "eventtensor/dynamic.cuh"',
           '#include "eventtensor/bodies.cuh"',
           '#include "eventtensor/stage.cuh"',
           '#include "eventtensor/ring.cuh"',
           '#include "eventtensor/llm_common.cuh"',
           '#include "eventtensor/llm_dense.cuh"',
           '#include "eventtensor/llm_attention.cuh"', "",
           "#define ET_TENSOR(i) (et_tensor_table()[i])" if uses_tensor_table(p) else
           f"#define ET_TENSOR(i) (A[{SYM_BASE + len(p.symbols)} + (i)])", ""]
    out += _dispatch(g)
    if knobs.get("ET_LINEAR_EARLY", 0) and mode in ("static", "unfused"):
        out += _early(g)
    out += _stage(g) + _extra_waits(g) + _extra_notifies(g, dynamic) + _runtime_counts(g)
    out += _arm_written(g, dynamic) + _arm_inputs(g, dynamic)
    out += _release_triggers(g, dynamic, mode == "hybrid")
    if mode == STAGES:
        out += ["", f"ET_STAGE_KERNEL({kernel_name(p, mode)})", ""]
    else:
        run = "et_run_static" if mode == "unfused" else f"et_run_{mode}"
        out += ["", f"ET_KERNEL({kernel_name(p, mode, ctas_per_sm)}, {run}, {ctas_per_sm})", ""]
    return "\n".join(out)


def _check_stages(p: Program) -> None:
    """A stage kernel runs every task of its grid: no trigger edge may guard one, and every
    grid fits a CUDA launch grid (its axes as blockIdx x, y, z)."""
    for grid in p.grids:
        if p.edges_of(grid=grid.name, kind="trigger"):
            raise UnsupportedOnGpu(f"task grid '{grid.name}' has a trigger edge; the stage-per-"
                                   "kernel baseline runs every task of a grid")
        if len(grid.axes) > 3:
            raise UnsupportedOnGpu(f"task grid '{grid.name}' has {len(grid.axes)} axes; a "
                                   "stage kernel maps at most 3 to blockIdx")


def _coords(grid: TaskGrid, g: _Gen) -> tuple[list[str], dict]:
    if len(grid.axes) > 3:
        raise UnsupportedOnGpu(f"task grid '{grid.name}' has {len(grid.axes)} axes; the CUDA "
                               "task record holds 3 coordinates")
    ren = {**g.ren, **{a: sym.Sym(f"c_{a}", 0, None) for a in grid.axes}}
    lines = ["        const int c[3] = {task.b.y, task.b.z, task.b.w};"]
    lines += [f"        const long long c_{a} = c[{k}];" for k, a in enumerate(grid.axes)]
    return lines, ren


def _grid_switch(g: _Gen, header: str, case, switch_note: str = "",
                 tail: tuple[str, ...] = ()) -> list[str]:
    """A device function `header` that switches on the task's grid. `case(grid, ren)` returns
    (comment, lines) for one grid's case, or None to leave the grid out. Grids whose lines
    are the same but for the tensors they touch (the layers of a model) share one case: its
    tensors come from a constant table by grid, `<function>_tensors[grid][j]`, so that the
    kernel's code grows with the distinct grids, not with the layers."""
    families: dict[str, list[tuple[int, str, str, list[str]]]] = {}
    for gi, grid in enumerate(g.p.grids):
        coords, ren = _coords(grid, g)
        g.local = []
        try:
            body = case(grid, ren)
        finally:
            local, g.local = g.local, None
        if body is not None:
            comment, lines = body
            code = "\n".join([*coords, *lines])
            key = "\n".join(x for x in code.split("\n") if not x.lstrip().startswith("//"))
            families.setdefault(key, []).append((gi, grid.name, comment, code, local))
    fn = header.split("(")[0].split()[-1]
    table = f"{fn}_tensors"
    shared = {m[0]: m[4] for f in families.values() if len(f) > 1 for m in f}
    width = max(map(len, shared.values()), default=0)
    out = []
    if width:
        out += [f"// the tensors of the grids that share a case of {fn}",
                f"__constant__ short {table}[{len(g.p.grids)}][{width}] = {{",
                *(f"    {{{', '.join(str(g.tindex[n]) for n in shared.get(gi, []))}}},  "
                  f"// {grid.name}" for gi, grid in enumerate(g.p.grids)), "};"]
    out += [header, *g.sym_lines(), f"    switch (task.a.x) {{{switch_note}"]
    for members in families.values():
        gi, name, comment, code, local = members[0]
        if len(members) == 1:
            for j, name_j in enumerate(local):
                code = code.replace(f"ET_GT({j})", f"ET_TENSOR({g.tindex[name_j]})")
            out.append(f"    case {gi}: {{  // {comment}")
        else:
            code = re.sub(r"ET_GT\((\d+)\)", rf"ET_TENSOR({table}[task.a.x][\1])", code)
            labels = [f"case {m[0]}:" for m in members]
            out += ["    " + " ".join(labels[k:k + 10]) for k in range(0, len(labels), 10)]
            out[-1] += (f" {{  // {comment}; also {', '.join(m[1] for m in members[1:])} "
                        f"(tensors by grid; the comments name {name}'s)")
        out += [code, "        break;", "    }"]
    return out + ["    }", *tail, "}", ""]


def _body_call(g: _Gen, grid: TaskGrid, ren, fn: str, staged: dict[int, int],
               before: tuple[str, ...] = ()) -> list[str]:
    """Lines building the tile views of a task of `grid` (a region in `staged`, by id: its
    stage ring slot's view) and calling `fn` with them and the kind's parameters, `before`
    the call."""
    if grid.kind not in BODIES:
        raise UnsupportedOnGpu(f"task grid '{grid.name}' uses task kind '{grid.kind}', "
                               "which has no CUDA body yet")
    regions = {("reads", r.tensor): r for r in grid.reads}
    regions.update({("writes", r.tensor): r for r in grid.writes})
    lines, args = [], []
    spec, params = BODIES[grid.kind]
    for k, (role, which) in enumerate(spec):
        optional = which.startswith("?")
        tensor = _tensor_of(grid, role, which.lstrip("?"))
        if optional and not tensor:
            lines.append(f"        const EtTile t{k} = {{}};  // no {which[2:]}")
            args.append(f"t{k}")
            continue
        if (role, tensor) not in regions:
            raise UnsupportedOnGpu(f"task grid '{grid.name}' ({grid.kind}) must {role[:-1]} "
                                   f"tensor '{tensor}'")
        region = regions[(role, tensor)]
        lines += _tile(f"t{k}", region, g, ren, role, staged.get(id(region)))
        args.append(f"t{k}")
    args += [_param(grid, name) for name in params]
    return [*lines, *before, f"        {fn}({', '.join(args)});"]


def _dispatch(g: _Gen) -> list[str]:
    def case(grid: TaskGrid, ren) -> tuple[str, list[str]]:
        staged = {id(r): j for j, r in enumerate(_staged_regions(g, grid))}
        return f"task grid {grid.name}, kind {grid.kind}", _body_call(
            g, grid, ren, f"et_body_{grid.kind}", staged, ("        et_stamp_setup(A, task);",))

    return _grid_switch(g, "__device__ __forceinline__ void et_run_task(const long long* A, "
                           "const EtTask& task, void* const* staged) {",
                        case, "  // task grid")


def _has_early_part(grid: TaskGrid) -> bool:
    """Whether a task of `grid` has an early part (EARLY_KINDS): its tile views are known
    before its waits (no region reads a device tensor)."""
    return grid.kind in EARLY_KINDS and not any(
        r.map.is_data_dependent for r in (*grid.reads, *grid.writes))


def _early(g: _Gen) -> list[str]:
    """`et_early_task`, each grid's early part before its waits (runtime.cuh, knob
    ET_LINEAR_EARLY), and the predicate `et_has_early`."""
    def case(grid: TaskGrid, ren):
        if not _has_early_part(grid):
            return None
        return f"task grid {grid.name}, kind {grid.kind}", _body_call(
            g, grid, ren, f"et_early_{grid.kind}", {})

    early = [gi for gi, grid in enumerate(g.p.grids) if _has_early_part(grid)]
    return _grid_switch(g, "__device__ void et_early_task(const long long* A, "
                           "const EtTask& task) {", case) + \
        _grid_predicate(g, "et_has_early", early)


def _param(grid: TaskGrid, spec: str) -> str:
    """C literal of a body parameter: `name` an int param, `name:f` a float one, `@name`
    the task's coordinate along the axis that param `name` names, `c0` along the first."""
    if spec == "c0":
        return f"(int)c_{grid.axes[0]}"
    if spec.startswith("@"):
        return f"(int)c_{grid.param_dict[spec[1:]]}"
    name, _, kind = spec.partition(":")
    if name not in grid.param_dict:
        raise UnsupportedOnGpu(f"task grid '{grid.name}' ({grid.kind}) needs param '{name}'")
    value = grid.param_dict[name]
    return f"{float(value)!r}f" if kind == "f" else str(int(value))  # type: ignore[arg-type]


def _tensor_of(grid: TaskGrid, role: str, which: str) -> str:
    """The tensor a body argument names: `#0` the grid's one tensor of `role`, `@name` the
    tensor that param `name` names ('' if the grid has no such param), else `which`."""
    if which.startswith("#"):
        names = [r.tensor for r in (grid.reads if role == "reads" else grid.writes)]
        if len(names) != 1:
            raise UnsupportedOnGpu(f"task grid '{grid.name}': a {grid.kind} task {role} exactly "
                                   "one tensor")
        return names[0]
    if which.startswith("@"):
        return str(grid.param_dict.get(which[1:]) or "")
    return which


def _tile(name: str, r: Region, g: _Gen, ren, role: str, slot: int | None = None) -> list[str]:
    """Lines building tile view `name` of region `r`; with `slot`, the view of its copy in
    the stage ring where the ring put one there (bodies.cuh `et_staged`)."""
    t = g.p.tensor(r.tensor)
    if t.dtype not in CTYPE:
        raise UnsupportedOnGpu(f"tensor '{t.name}' has dtype {t.dtype}; the CUDA bodies take "
                               f"{', '.join(CTYPE)}")
    ctype, tile_t = CTYPE[t.dtype]
    shape = [g.c(d) for d in t.shape]
    dims: list[tuple[str, str, str]] = []  # (start, extent, index pointer) per dimension
    for d, size in zip(r.map.dims, shape):
        if isinstance(d, Full):
            dims.append(("0", size, "nullptr"))
        elif isinstance(d, Span):
            a, b = g.value(d.start, ren), g.value(d.stop, ren)
            dims.append((a, f"({b}) - ({a})", "nullptr"))
        elif isinstance(d.value, Load) and d.value.is_vector:
            ptr, cnt = g.vector(d.value, ren)
            dims.append(("0", cnt, ptr))
        else:
            dims.append((g.value(d.value, ren), "1", "nullptr"))
    if len(shape) > 4:
        raise UnsupportedOnGpu(f"tensor '{t.name}' has rank {len(shape)}; a CUDA tile has "
                               "at most 4 dimensions")
    lo, n, idx = ([x[k] for x in dims] for k in range(3))
    rank = len(shape)
    view = (f"et_tile(({ctype}*){g.tref(r.tensor)}, {rank}, {name}_shape, {name}_lo, "
            f"{name}_n, {name}_idx)")
    if slot is not None:
        view = f"et_staged({view}, staged, {slot})"
    return [f"        // {role} {r.tensor}[{', '.join(str(d) for d in r.map.dims)}]" +
            (f" (staged: slot {slot})" if slot is not None else ""),
            f"        const long long {name}_shape[{rank}] = {{{', '.join(shape)}}};",
            f"        const long long {name}_lo[{rank}] = {{{', '.join(lo)}}};",
            f"        const long long {name}_n[{rank}] = {{{', '.join(n)}}};",
            f"        const int* const {name}_idx[{rank}] = {{{', '.join(idx)}}};",
            f"        const {tile_t} {name} = {view};"]


def _staged_regions(g: _Gen, grid: TaskGrid) -> list[Region]:
    """The input tiles of `grid` that are staged before its tasks wait (weight prefetch):
    affine regions of input tensors, which no task writes, the first STAGE_TILES of them."""
    if grid.kind == "nop":  # (thread 0 alone runs it: nothing reads staged tiles)
        return []
    return [r for r in grid.reads if g.p.tensor(r.tensor).role == "input"
            and not r.map.is_data_dependent and g.p.tensor(r.tensor).dtype in CTYPE][:STAGE_TILES]


def _stage(g: _Gen) -> list[str]:
    """Each grid's input tiles handed to a stager (runtime.cuh et_stage, stage.cuh)."""
    def case(grid: TaskGrid, ren):
        regions = _staged_regions(g, grid)
        if not regions:
            return None
        lines = []
        for j, r in enumerate(regions):
            lines += _tile(f"p{j}", r, g, ren, "stage")
            lines.append(f"        s.tile({j}, p{j});")
        return f"task grid {grid.name}", lines

    staging = [gi for gi, grid in enumerate(g.p.grids) if _staged_regions(g, grid)]
    return _grid_switch(g, "template <class S>\n__device__ void et_stage(const long long* A, "
                           "const EtTask& task, S& s) {", case) + \
        _grid_predicate(g, "et_has_stage", staging)


def _grid_predicate(g: _Gen, name: str, grids: list[int], note: str = "") -> list[str]:
    """Device function `name(g)`: whether grid g is one of `grids`; a chain of comparisons
    for a few, else a constant table."""
    head = f"__device__ __forceinline__ bool {name}(int g) {{{note}"
    if len(grids) <= 8:
        return [head, f"    return {' || '.join(f'g == {gi}' for gi in grids) or 'false'};",
                "}", ""]
    flags = ", ".join("1" if gi in grids else "0" for gi in range(len(g.p.grids)))
    return [f"__constant__ unsigned char {name}_grids[{len(g.p.grids)}] = {{{flags}}};",
            head, f"    return {name}_grids[g];", "}", ""]


def _dd_edges(g: _Gen, grid: TaskGrid, kind: str) -> list[Edge]:
    return [e for e in g.p.edges_of(grid=grid.name, kind=kind)  # type: ignore[arg-type]
            if kind == "trigger" or e.map.is_data_dependent]


def _trigger_search(g: _Gen, grid: TaskGrid, ev: EventDecl, span: Span,
                    indent: str) -> list[str]:
    """Lines setting `found` to the element of `ev` whose trigger range (`span`, in the
    element's coordinates) holds task c of 1-D `grid`, -1 if none. The ranges are disjoint
    (the interpreter rejects overlaps), so the search stops at the first hit; it starts at
    the element a proportional guess names (c * elements / tasks: the one, where each element
    releases an equal share of the grid in order, as the decode step's plan rows do) and
    goes on round the others, so that the common case reads one range instead of all."""
    c, n = f"c_{grid.axes[0]}", g.size(ev.shape)
    out = [f"{indent}int found = -1;",
           f"{indent}const long long n_el = {n}, n_tasks = {g.size(grid.extent)};",
           f"{indent}long long e = n_tasks > 0 && {c} < n_tasks ? {c} * n_el / n_tasks : 0;",
           f"{indent}for (long long i = 0; i < n_el; ++i, e = e + 1 == n_el ? 0 : e + 1) {{",
           f"{indent}    long long r = e;"]
    for k in reversed(range(len(ev.shape))):
        size = g.c(ev.shape[k])
        out.append(f"{indent}    const long long e{k} = r % ({size}); r /= ({size});")
    out += [f"{indent}    const long long lo = {g.value(span.start, g.event_ren(ev))}, "
            f"hi = {g.value(span.stop, g.event_ren(ev))};",
            f"{indent}    if ({c} >= lo && {c} < hi) {{",
            f"{indent}        found = (int)({g.event_base(ev.name)} + e);",
            f"{indent}        break;", f"{indent}    }}", f"{indent}}}"]
    return out


def _extra_waits(g: _Gen) -> list[str]:
    def case(grid: TaskGrid, ren):
        waits, trig = _dd_edges(g, grid, "wait"), _dd_edges(g, grid, "trigger")
        if not waits and not trig:
            return None
        lines = []
        for e in waits:
            lines.append(f"        // wait {e.event}[{e.map}]")
            lines += g.element_loops(e.map, g.p.event(e.event), ren,
                                     ["if (!et_wait_elem(A, task.id, x)) return 0;"], "        ")
        for e in trig:
            ev = g.p.event(e.event)
            span = e.map.dims[0]
            assert isinstance(span, Span)
            lines += [f"        {{  // trigger {e.event} -> {e.map}: find the element",
                      *_trigger_search(g, grid, ev, span, "            "),
                      "            if (found < 0) return 2;  // guarded",
                      "            if (!et_wait_elem(A, task.id, found)) return 0;", "        }"]
        return f"task grid {grid.name}", lines

    waiting = [gi for gi, grid in enumerate(g.p.grids)
               if _dd_edges(g, grid, "wait") or _dd_edges(g, grid, "trigger")]
    nops = [gi for gi, grid in enumerate(g.p.grids) if grid.kind == "nop"]
    return _grid_switch(
        g, "__device__ int et_extra_waits(const long long* A, const EtTask& task) {", case,
        tail=("    return 1;",)) + _grid_predicate(g, "et_has_extra_waits", waiting) + \
        _grid_predicate(g, "et_sync_only", nops, "  // grids of kind nop")


def _extra_notifies(g: _Gen, dynamic: bool) -> list[str]:
    """Data-dependent notifies; in dynamic mode each one may complete its element (such
    elements are never early-push ones)."""
    notify = "et_notify_counted(A, x, 0);" if dynamic else "et_notify_elem(A, x);"

    def case(grid: TaskGrid, ren):
        notes = _dd_edges(g, grid, "notify")
        if not notes:
            return None
        lines = []
        for e in notes:
            lines.append(f"        // notify {e.event}[{e.map}]")
            lines += g.element_loops(e.map, g.p.event(e.event), ren, [notify], "        ")
        return f"task grid {grid.name}", lines

    return _grid_switch(
        g, "__device__ void et_extra_notifies(const long long* A, const EtTask& task) {", case)


COUNT_FLAT_BITS = 40  # a runtime count's place: tensor << COUNT_FLAT_BITS | offset


def _runtime_counts(g: _Gen) -> list[str]:
    """et_runtime_count: a count read at run time is at the place its element's ET_TARGET
    entry holds, -1 - (tensor << COUNT_FLAT_BITS | offset) (runtime.py `_device_targets`),
    so one load serves every event; the events are named in comments."""
    events = [f"//   {ev.name}: {ev.wait_count}" for ev, ld in _count_events(g)
              if _int32_index_tensor(g.p, ld)]
    return [*(["// wait counts read at run time:"] + events if events else []),
            "__device__ long long et_runtime_count(const long long* A, int x) {",
            f"    const long long at = -1 - ET_TARGET[x];  // tensor << {COUNT_FLAT_BITS} | "
            "offset",
            f"    return ((const int*)ET_TENSOR((int)(at >> {COUNT_FLAT_BITS})))"
            f"[at & ((1ll << {COUNT_FLAT_BITS}) - 1)];",
            "}", ""]


def _int32_index_tensor(p: Program, ld: Load) -> TensorDecl:
    """The tensor a data-dependent map loads from, which the device reads as int32."""
    t = p.tensor(ld.tensor)
    if t.dtype != "int32":
        raise UnsupportedOnGpu(f"map load {ld} reads tensor '{t.name}' of dtype {t.dtype}; "
                               "on the GPU, index and count tensors must be int32")
    return t


def _check_runtime_counts(p: Program) -> None:
    """A static schedule reads a wait count that a task writes (event `runtime_count`) when
    the wait starts, after the waiting task's other waits (lower.py orders them so): one of
    them must be on an event that the count's writer notifies, so that the count is written
    and visible by then."""
    for ev in p.events:
        ld = ev.runtime_count
        if ld is None:
            continue
        writers = {g.name for g in p.grids if any(r.tensor == ld.tensor for r in g.writes)}
        notified = {e.event for e in p.edges if e.kind == "notify" and e.grid in writers}
        for w in p.edges:
            if w.kind != "wait" or w.event != ev.name or not writers:
                continue
            own = {e.event for e in p.edges if e.grid == w.grid and e.kind == "wait"}
            if not own & notified:
                raise UnsupportedOnGpu(
                    f"task grid '{w.grid}' waits on event '{ev.name}', whose wait count is "
                    f"read from tensor '{ld.tensor}' (written by {', '.join(sorted(writers))}), "
                    f"but waits on no event those grids notify: a static schedule could read "
                    f"the count before it is written; add such a wait")


def _check_triggers(p: Program) -> None:
    """Dynamic mode counts the tasks of a trigger grid that no range covers once the trigger
    edge's last source element completes: one trigger edge per grid."""
    for grid in p.grids:
        trig = p.edges_of(grid=grid.name, kind="trigger")
        if len(trig) > 1:
            raise UnsupportedOnGpu(f"task grid '{grid.name}' has {len(trig)} trigger edges (from "
                                   f"{', '.join(e.event for e in trig)}); dynamic mode on the GPU "
                                   "releases a grid through one trigger edge")


def _count_events(g: _Gen) -> list[tuple[EventDecl, Load]]:
    return [(ev, ev.runtime_count) for ev in g.p.events if ev.runtime_count is not None]


def _arm_written(g: _Gen, dynamic: bool) -> list[str]:
    """Dynamic mode: after a task's body, arm each runtime-count element whose count lies in
    the region of the count tensor that the task wrote (cpu.py `_arm`)."""
    def case(grid: TaskGrid, ren):
        lines = []
        for ev, ld in _count_events(g):
            for r in grid.writes:
                if r.tensor != ld.tensor:
                    continue
                eren = g.event_ren(ev)
                cond = _written(g, grid, r, ld, ren, eren)
                arm = f"et_arm(A, x, {g.load(ld, eren)});"
                lines.append(f"        // arm {ev.name}: wait count {ld}, written as "
                             f"{r.tensor}[{', '.join(str(d) for d in r.map.dims)}]")
                lines += g.all_elements(ev, [f"if ({cond}) {arm}" if cond else arm], "        ")
        return (f"task grid {grid.name}", lines) if lines else None

    return _grid_switch(
        g, "__device__ void et_arm_written(const long long* A, const EtTask& task) {",
        case if dynamic else lambda grid, ren: None)


def _written(g: _Gen, grid: TaskGrid, r: Region, ld: Load, ren, eren) -> str:
    """C condition (empty: always) that the count `ld` loads lies in region `r` of the task."""
    conds = []
    for i, d in zip(ld.index, r.map.dims):
        k = g.c(i, eren)
        if isinstance(d, Span):
            conds.append(f"{k} >= {g.value(d.start, ren)} && {k} < {g.value(d.stop, ren)}")
        elif isinstance(d, Index):
            if isinstance(d.value, Load) and d.value.is_vector:
                raise UnsupportedOnGpu(f"task grid '{grid.name}' writes count tensor "
                                       f"'{r.tensor}' through index vector {d.value}; dynamic "
                                       "mode arms counts written at indices and ranges only")
            conds.append(f"{k} == {g.value(d.value, ren)}")
    return " && ".join(f"({c})" for c in conds)


def _arm_inputs(g: _Gen, dynamic: bool) -> list[str]:
    """Dynamic mode, at launch: arm each runtime-count element whose count is an input."""
    inputs = [(ev, ld) for ev, ld in _count_events(g)
              if dynamic and g.p.tensor(ld.tensor).role == "input"]
    lines = []
    for ev, ld in inputs:
        lines.append(f"    // arm {ev.name}: wait count {ld} (input)")
        lines += g.all_elements(ev, [f"et_arm(A, x, {g.load(ld, g.event_ren(ev))});"], "    ")
    return ["__device__ void et_arm_inputs(const long long* A) {",
            *(g.sym_lines() + lines if lines else []), "}", ""]


def _release_triggers(g: _Gen, dynamic: bool, hybrid: bool) -> list[str]:
    """Dynamic and hybrid modes, element `x` completed: the range of each trigger edge from
    its event into a grid that runs from the device queue (all grids in dynamic mode; in
    hybrid mode those of the launch's dynamic-grid mask) (trigger edge j in program order is
    ET_TRIGGER_STATE(j), see runtime.py)."""
    trig = [e for e in g.p.edges if e.kind == "trigger"] if dynamic else []
    lines = []
    for j, e in enumerate(trig):
        ev, grid = g.p.event(e.event), g.p.grid(e.grid)
        gi = [gr.name for gr in g.p.grids].index(grid.name)
        if hybrid and gi >= 63:
            raise UnsupportedOnGpu(f"task grid '{grid.name}' (grid {gi}) is the target of a "
                                   "trigger edge; in hybrid mode the dynamic-grid mask holds "
                                   "grids 0..62")
        span, eren = e.map.dims[0], g.event_ren(ev)
        assert isinstance(span, Span)
        cond, coords = g.element_of(ev, "        ")
        dyn = f"ET_GRID_DYNAMIC({gi}) && " if hybrid else ""
        lines += [f"    if ({dyn}{cond}) {{  // trigger {e.event} -> "
                  f"{e.grid}: {e.map}", *coords,
                  f"        et_release_range(A, {j}, {g.task_base(grid.name)}, "
                  f"{g.size(grid.extent)}, {g.value(span.start, eren)}, "
                  f"{g.value(span.stop, eren)}, {g.size(ev.shape)});", "    }"]
    return ["__device__ void et_release_triggers(const long long* A, int x) {",
            *(g.sym_lines() + lines if lines else []), "}", ""]
