"""Launch a compiled megakernel from Python (torch tensors, cuda-python driver API).

`Megakernel(program, mode)` runs the pass pipeline, generates and compiles the kernel once;
`launch(env, tensors)` instantiates the tables for the binding (cached), passes symbol values
and tensor pointers in one argument array, checks co-residency (one CTA per SM) and launches
on the given stream. Per-binding device state (event counters, dependency counts, queue,
dynamic-mode retire and trigger counts) is allocated once and re-initialised by the kernel
itself: no host memset between launches.
A wait that exceeds the watchdog bound makes the kernel exit with an error record; `sync()`
turns it into `DeadlockError` naming the task, the event element and the counter.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...dtypes import round_to_dtype
from ...errors import DeadlockError
from ...ir import Program, TensorDecl
from ...lower import Tables, bind, build_tables
from ...schedule import schedule
from ...trace import TaskSpan, Trace
from ...vec import compile_exprs
from .build import build_kernel
from .codegen import (
    COUNT_FLAT_BITS,
    CTYPE,
    MAX_SLOTS,
    SYM_BASE,
    UnsupportedOnGpu,
    dynamic_smem_bytes,
    uses_tensor_table,
)

THREADS = 256  # threads per CTA (runtime.cuh ET_THREADS)


def torch_dtype(t: TensorDecl):
    """The torch dtype of tensor `t` on the device (float32, bfloat16 or int32)."""
    import torch
    if t.dtype not in CTYPE:
        raise ValueError(f"tensor '{t.name}' has dtype {t.dtype}; the CUDA backend holds "
                         f"{', '.join(CTYPE)}")
    return getattr(torch, t.dtype)


def to_host(x) -> np.ndarray:
    """Device tensor `x` as a numpy array in the CPU representation of `eventtensor.dtypes`
    (bfloat16 values exactly, as float32)."""
    import torch
    return (x.float() if x.dtype == torch.bfloat16 else x).cpu().numpy()


def _check(res, what: str):
    from cuda.bindings import driver
    err = res[0] if isinstance(res, tuple) else res
    if err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"CUDA driver call {what} failed: {err}")
    return res[1] if isinstance(res, tuple) and len(res) == 2 else res


def load_kernel(cubin: bytes, name: str):
    """The CUfunction `name` of `cubin`, loaded into the current device's primary context."""
    import torch
    from cuda.bindings import driver
    torch.cuda.init()
    torch.empty(1, device="cuda")  # primary context current on this thread
    _check(driver.cuInit(0), "cuInit")
    module = _check(driver.cuModuleLoadData(cubin), "cuModuleLoadData")
    return _check(driver.cuModuleGetFunction(module, name.encode()), "cuModuleGetFunction")


def bind_tensors(p: Program, shapes: Mapping[str, tuple[int, ...]], tensors: Mapping[str, Any],
                 owned: dict) -> dict:
    """Every tensor of `p` by name: those given in `tensors` (checked: contiguous CUDA tensors
    of the bound `shapes` and the dtypes of `torch_dtype`), the missing outputs and temps
    from `owned`, allocated there on first use (reused by later launches)."""
    import torch
    unknown = set(tensors) - {t.name for t in p.tensors}
    if unknown:
        raise ValueError(f"program '{p.name}' has no tensor named {', '.join(sorted(unknown))}")
    tens = {}
    for tdecl in p.tensors:
        shape, dtype = shapes[tdecl.name], torch_dtype(tdecl)
        x = tensors.get(tdecl.name)
        if x is None:
            if tdecl.role == "input":
                raise ValueError(f"input tensor '{tdecl.name}' was not given")
            x = owned.get(tdecl.name)
            if x is None:
                x = owned[tdecl.name] = torch.empty(shape, dtype=dtype, device="cuda")
        if not isinstance(x, torch.Tensor):
            raise ValueError(f"tensor '{tdecl.name}' must be a torch tensor on the GPU, "
                             f"got {type(x).__name__}")
        if tuple(x.shape) != shape or x.dtype != dtype or not x.is_cuda or not x.is_contiguous():
            raise ValueError(f"tensor '{tdecl.name}' must be a contiguous CUDA {dtype} tensor "
                             f"of shape {shape}, got {tuple(x.shape)} {x.dtype} on {x.device}")
        tens[tdecl.name] = x
    return tens


def to_device(p: Program, arrays: Mapping[str, np.ndarray]) -> dict:
    """Numpy arrays as contiguous CUDA tensors of the dtypes of the tensors of `p` of the same
    names; bfloat16 values rounded as `dtypes.round_to_dtype` rounds them."""
    import torch
    out = {}
    for name, a in arrays.items():
        t = p.tensor(name)
        host = torch.as_tensor(np.ascontiguousarray(round_to_dtype(t.dtype, a)))
        out[name] = host.to(device="cuda", dtype=torch_dtype(t)).contiguous()
    return out


TENSOR_TABLE_SLOT = 38  # runtime.cuh ET_TENSOR_TABLE


def symbol_slots(p: Program, env: Mapping[str, int], tens: Mapping[str, Any],
                 keep: dict) -> list[int]:
    """The MAX_SLOTS launch-argument slots (runtime.cuh), symbol values and tensor pointers
    filled in (from SYM_BASE), the runtime's own slots 0. Where the pointers do not fit
    (`uses_tensor_table`) they go to a device table instead (slot TENSOR_TABLE_SLOT), kept
    in `keep` and rebuilt only when a pointer changes."""
    import torch
    slots = [0] * MAX_SLOTS
    for i, s in enumerate(p.symbols):
        slots[SYM_BASE + i] = int(env[s.name])
    ptrs = [tens[t.name].data_ptr() for t in p.tensors]
    if not uses_tensor_table(p):
        slots[SYM_BASE + len(p.symbols):SYM_BASE + len(p.symbols) + len(ptrs)] = ptrs
        return slots
    if keep.get("tensor_ptrs") != ptrs:
        keep["tensor_table"] = torch.tensor(ptrs, dtype=torch.int64, device="cuda")
        keep["tensor_ptrs"] = ptrs
    slots[TENSOR_TABLE_SLOT] = keep["tensor_table"].data_ptr()
    return slots


# Profiling buffer (runtime.cuh ET_PROF_TASK, ET_PROF_CTA): words per task, then per CTA.
PROF_TASK, PROF_CTA = 8, 4
TASK_PHASES = ("fetched", "waited", "body", "barrier", "fence", "notified")
CTA_PHASES = ("entry", "args", "reset", "exit")


@dataclass
class Profile:
    """A profiled launch's global-timer stamps (ns). `tasks[t]`: one column per TASK_PHASES
    (fetched, waits satisfied, body done by thread 0, barrier after the body passed, release
    fence done, notifies issued); `sm[t]`: the CTA that ran it; `cta[c]`: one column per
    CTA_PHASES (kernel entry, launch arguments loaded, next launch's state reset, exit);
    `ran`: the tasks that ran (guarded ones did not); `entered[t]`: when thread 0 had built
    the task's tile views and entered its body (0 for a task without a body)."""
    tasks: np.ndarray
    sm: np.ndarray
    cta: np.ndarray
    ran: np.ndarray
    entered: np.ndarray


@dataclass
class _State:
    tables: Tables
    arrays: dict            # name -> torch tensor on the device (tables and runtime state)
    args: object = None     # torch int64 tensor of launch-argument slots
    key: tuple = ()
    keep: dict = field(default_factory=dict)  # the tensor table, if any (symbol_slots)
    n_dynamic: int = 0
    dynamic_mask: int = 0   # bit g: grid g runs from the device queue (ET_GRID_DYNAMIC)
    # per CTA its stream bounds (ET_SM_ARGS), then per CTA its first chunk (`_first_chunks`)
    sm_args: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    owned: dict = field(default_factory=dict)  # outputs and temps this runtime allocated
    smem: int = 0  # dynamic shared memory of each CTA of its launches


EARLY_BIT, PUSH_BIT, ELEM_LIMIT = 1 << 30, 1 << 29, 1 << 29
# (slot of copy 0, slot of copy 1, state array) of the launch-parity state (runtime.cuh)
PARITY_SLOTS = ((9, 43, "counter"), (13, 44, "released"), (17, 45, "queue"),
                (18, 46, "head_tail"), (30, 47, "dyn_state"))
EARLY_WATCH_BIT = -(1 << 31)  # bit 31 of the int32 notify record (see dynamic.cuh)


def _wait_records(t: Tables) -> np.ndarray:
    """Per wait entry {element | early << 30, wait count (-1: read at run time)}."""
    x = t.wait_elem
    if t.bound.num_elements >= ELEM_LIMIT or (t.target >= 2 ** 31).any():
        raise ValueError(f"program '{t.program.name}' has too many event elements or too "
                         "large a wait count for the CUDA task tables")
    rec = np.stack([x | np.where(t.early[x], EARLY_BIT, 0), t.target[x]], axis=1)
    return rec if rec.size else np.zeros((1, 2), np.int64)


def _device_targets(t: Tables) -> np.ndarray:
    """The device's wait count per element (ET_TARGET): `t.target`, with each count read at
    run time (negative there) replaced by -1 - (tensor << COUNT_FLAT_BITS | offset), the place
    of the int32 it is read from: the count tensor's index among the program's tensors and
    the flat offset of the event's count load at the element's coordinates."""
    b, p = t.bound, t.program
    out = t.target.copy()
    tindex = {td.name: i for i, td in enumerate(p.tensors)}
    for ev in p.events:
        ld = ev.runtime_count
        if ld is None:
            continue
        shape, tshape = b.event_shapes[ev.name], b.tensor_shapes[ld.tensor]
        coords = np.indices(shape).reshape(len(shape), -1)
        index = compile_exprs(ld.index, [*b.env, *ev.axes])(*b.env.values(), *coords)
        index = [np.broadcast_to(np.asarray(i, np.int64), coords.shape[1:]) for i in index]
        for axis, (i, size) in enumerate(zip(index, tshape)):
            bad = np.flatnonzero((i < 0) | (i >= size))
            if bad.size:
                x = b.event_base[ev.name] + int(bad[0])
                raise ValueError(f"wait count of {b.element_name(x)} is read from {ld}, whose "
                                 f"index {int(i[bad[0]])} is outside dimension {axis} of "
                                 f"tensor '{ld.tensor}' (size {size}) at {b.env}")
        offset = np.ravel_multi_index(index, tshape) if tshape else np.zeros_like(coords[0])
        if np.prod(tshape, dtype=np.int64) >= 1 << COUNT_FLAT_BITS:
            raise ValueError(f"tensor '{ld.tensor}' of event '{ev.name}''s wait counts is too "
                             f"large for the CUDA count table")
        base = b.event_base[ev.name]
        out[base:base + offset.size] = -1 - ((tindex[ld.tensor] << COUNT_FLAT_BITS) | offset)
    return out


def _notify_records(t: Tables) -> np.ndarray:
    """Per notify entry: element | early << 30 | (its completion releases consumers or
    trigger ranges) << 29. An early-push element releasing trigger ranges has bit 31 in place
    of the early bit: its notifier must see the completing notify (dynamic.cuh)."""
    x = t.notify_elem
    early, trig = t.early[x], _trigger_sources(t)[x]
    watch = (np.diff(t.push_ptr)[x] > 0) | trig
    rec = x | np.where(early & ~trig, EARLY_BIT, 0) | np.where(watch, PUSH_BIT, 0) \
        | np.where(early & trig, EARLY_WATCH_BIT, 0)
    return rec if rec.size else np.zeros(1, np.int64)


def _trigger_sources(t: Tables) -> np.ndarray:
    """bool per element: completing it releases a trigger range of a dynamic grid. Each such
    element must complete during the launch, since the device counts the tasks no range
    covers once the edge's last source element completes (see dynamic.cuh)."""
    b, p = t.bound, t.program
    src = np.zeros(b.num_elements, bool)
    for gi, eis in t.trigger_edges.items():
        for e in (p.edges[ei] for ei in eis if t.grid_mode[gi] == 1):
            base = b.event_base[e.event]
            n = int(np.prod(b.event_shapes[e.event], dtype=np.int64))
            zero = np.flatnonzero(t.target[base:base + n] == 0)
            if n == 0 or zero.size:
                what = (f"event '{e.event}' has no elements" if n == 0 else
                        f"{b.element_name(base + int(zero[0]))} has wait count 0 (complete "
                        "from the start, it releases no range)")
                raise UnsupportedOnGpu(f"trigger edge {e.event} -> {e.grid} at {b.env}: {what}; "
                                       "dynamic mode on the GPU needs every source element of "
                                       "a trigger edge to complete during the launch")
            src[base:base + n] = True
    return src


def _task_records(t: Tables) -> np.ndarray:
    """Per task {grid, wait_lo, wait_hi, notify_lo, notify_hi, coord 0, 1, 2} (EtTask)."""
    b = t.bound
    rec = np.zeros((b.num_tasks, 8), np.int64)
    rec[:, 0] = b.task_grid
    rec[:, 1], rec[:, 2] = t.wait_ptr[:-1], t.wait_ptr[1:]
    rec[:, 3], rec[:, 4] = t.notify_ptr[:-1], t.notify_ptr[1:]
    rank = b.task_coords.shape[1] if b.task_coords.ndim == 2 else 0
    rec[:, 5:5 + rank] = b.task_coords[:, :3]
    return rec


def _ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Concatenation of the index ranges [starts[i], starts[i] + counts[i])."""
    total = int(counts.sum())
    if not total:
        return np.zeros(0, np.int64)
    ends = np.cumsum(counts)
    return np.arange(total) - np.repeat(ends - counts, counts) + np.repeat(starts, counts)


def _static_streams(t: Tables, rec: np.ndarray, waits: np.ndarray,
                    notifies: np.ndarray) -> dict[str, np.ndarray]:
    """The static queues in stream order (see ET_STREAM_REC in runtime.cuh): guarded slots
    dropped; per position the task id and its record, whose wait and notify ranges index
    stream-ordered copies of the wait and notify records; per SM its ranges of positions,
    waits and notifies (`stream_bounds`, passed with the launch arguments)."""
    sms = len(t.queue_ptr) - 1
    sm_of = np.repeat(np.arange(sms), np.diff(t.queue_ptr))
    keep = t.queue_task >= 0
    ids, sm_of = t.queue_task[keep], sm_of[keep]
    qptr = np.zeros(sms + 1, np.int64)
    qptr[1:] = np.cumsum(np.bincount(sm_of, minlength=sms))
    srec = rec[ids].copy()
    nw, nn = srec[:, 2] - srec[:, 1], srec[:, 4] - srec[:, 3]
    sw = _ranges(srec[:, 1], nw)
    sn = _ranges(srec[:, 3], nn)
    srec[:, 1] = np.cumsum(nw) - nw
    srec[:, 2] = srec[:, 1] + nw
    srec[:, 3] = np.cumsum(nn) - nn
    srec[:, 4] = srec[:, 3] + nn
    pad = (lambda a, shape: a if len(a) else np.zeros(shape, np.int64))  # noqa: E731
    wpos, npos = np.concatenate([[0], np.cumsum(nw)]), np.concatenate([[0], np.cumsum(nn)])
    bounds = np.stack([qptr[:-1], qptr[1:], wpos[qptr[:-1]], wpos[qptr[1:]], npos[qptr[:-1]],
                       npos[qptr[1:]]], axis=1)
    streams = {"stream_task": ids, "stream_rec": srec, "stream_wait": waits[sw],
               "stream_notify": notifies[sn]}
    return {**{k: pad(v, (1, *v.shape[1:])) for k, v in streams.items()},
            "stream_bounds": bounds, "slabs": _first_chunks(streams, bounds)}


# The static loop's chunk (runtime.cuh EtChunk): capacities and the layout of its image, the
# slab each CTA receives with its launch arguments, in int32 words: records, waits,
# notifies, task ids.
CHUNK, CHUNK_WAITS, CHUNK_NOTIFIES = 32, 256, 256
SLAB_WORDS = (8 * CHUNK + 2 * CHUNK_WAITS + CHUNK_NOTIFIES + CHUNK) // 2  # int64 words


def _first_chunks(streams: dict[str, np.ndarray], bounds: np.ndarray) -> np.ndarray:
    """int64[CTAs, SLAB_WORDS]: each CTA's first chunk as the static loop would stage it (its
    first CHUNK tasks and records, and as many of its next waits and notifies as fit)."""
    slabs = np.zeros((len(bounds), 2 * SLAB_WORDS), np.int32)
    parts = ((streams["stream_rec"], 8 * CHUNK, 8, 0, 1),
             (streams["stream_wait"], 2 * CHUNK_WAITS, 2, 2, 3),
             (streams["stream_notify"], CHUNK_NOTIFIES, 1, 4, 5),
             (streams["stream_task"], CHUNK, 1, 0, 1))
    for c, row in enumerate(bounds):
        at = 0
        for src, cap, width, lo, hi in parts:
            n = min(cap // width, int(row[hi] - row[lo]))
            slabs[c, at:at + n * width] = src[row[lo]:row[lo] + n].ravel()
            at += cap
    return slabs.view(np.int64)


@dataclass
class HostLaunch:
    """What scheduled tables decide of a launch (the host's work on a binding's first
    launch): `arrays`, copied to the device as they are (task, wait and notify records, the
    static queues' streams, the wait counts, dynamic-mode tables), the tasks of dynamic
    grids, and the per-SM launch arguments (stream bounds, first chunk slabs)."""
    arrays: dict[str, np.ndarray]
    n_dynamic: int
    sm_args: np.ndarray


def host_launch(t: Tables) -> HostLaunch:
    """The launch that scheduled tables `t` decide (`HostLaunch`)."""
    def i32(a):
        return np.ascontiguousarray(a, np.int32)
    b = t.bound
    rec = _task_records(t)
    waits, notifies = _wait_records(t), _notify_records(t)
    streams = _static_streams(t, rec, waits, notifies)
    bounds, slabs = streams.pop("stream_bounds"), streams.pop("slabs")
    arrays = {name: i32(a) for name, a in streams.items()} | {
        "task_rec": i32(rec if b.num_tasks else np.zeros((1, 8))),
        "wait_ptr": i32(t.wait_ptr), "wait_elem": i32(waits),
        "notify_ptr": i32(t.notify_ptr), "notify_elem": i32(notifies),
        "target": _device_targets(t),
        "shift": i32(np.where(t.early, 16, 0)),
        "ready": i32(t.ready), "pending0": i32(t.pending),
        "push_ptr": i32(t.push_ptr), "push_task": i32(t.push_task),
        "skip_ptr": i32(t.skip_ptr), "skip_elem": i32(t.skip_elem if t.skip_elem.size
                                                       else np.zeros(1))}
    n_dyn = int((t.grid_mode[b.task_grid] == 1).sum()) if b.num_tasks else 0
    return HostLaunch(arrays, n_dyn,
                      np.concatenate([bounds.ravel(), slabs.ravel()]).astype(np.int64))


class Megakernel:
    """One program compiled for one scheduling mode, launchable for any binding."""

    def __init__(self, program: Program, mode: str = "static", num_sms: int | None = None,
                 policy: str = "critical_path", watchdog_s: float = 1.0,
                 early_push: bool = True, dynamic_grids: Sequence[str] | None = None,
                 ctas_per_sm: int = 1, knobs: Mapping[str, int] | None = None,
                 overlap_launches: bool = True, fast_compile: str | None = None, say=None,
                 linear_ring: Callable[[Mapping[str, int]], bool] | None = None):
        """`num_sms`: the SMs to use (default: all); `ctas_per_sm` persistent CTAs run on each
        (each its own static queue: more CTAs hide more memory latency, with fewer registers
        each); `dynamic_grids` (hybrid mode): the grids run from the device queue, by default
        the data-dependent ones (`default_dynamic_grids`); `knobs`: device-library settings
        (`codegen.KNOBS`, e.g. ET_SPIN_NS); `overlap_launches`: launch with programmatic
        stream serialization, so that a launch's CTAs start while the kernel before it on the
        stream still runs and load their arguments meanwhile (runtime.cuh
        et_wait_previous_launch); `fast_compile`: faster compiles, other code
        (`compiler.compile_source`); `say` hears of the build's long phases (`build_kernel`);
        `linear_ring`: whether the launches of a binding get the one-row linear's ring of
        weight rounds (knob ET_LINEAR_ASYNC) in their dynamic shared memory, which the SM
        takes from its L1 (the other bodies' cache) whether they use it or not (None: all
        launches)."""
        import torch
        self.torch = torch
        self.mode, self.policy, self.early_push = mode, policy, early_push
        if ctas_per_sm < 1:
            raise ValueError(f"ctas_per_sm must be at least 1, got {ctas_per_sm}")
        self.ctas_per_sm = ctas_per_sm
        self.overlap_launches = overlap_launches
        self.knobs = dict(knobs or {})
        self.dynamic_smem = dynamic_smem_bytes(knobs)  # rings: stage, linear rounds, KV words
        self.linear_ring = linear_ring
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        self.num_sms = num_sms or props.multi_processor_count
        self.num_ctas = self.num_sms * ctas_per_sm  # the workers the schedules deal tasks to
        self.watchdog_ns = int(watchdog_s * 1e9)
        self.build = build_kernel(program, mode, self.num_ctas, ctas_per_sm=ctas_per_sm,
                                  policy=policy, dynamic_grids=dynamic_grids, knobs=knobs,
                                  fast_compile=fast_compile, say=say)
        self.program, self.source, self.name = (self.build.program, self.build.source,
                                                self.build.name)
        self.compiled, self.template = self.build.compiled, self.build.template
        self.dynamic_grids = self.build.dynamic_grids
        self._func = None
        self._smem_limit = self.dynamic_smem  # the function's dynamic shared memory limit now
        self._config = None  # launch configuration of overlapped launches
        self._states: dict[tuple[int, ...], _State] = {}

    # ------------------------------------------------------------------ set-up
    def _function(self):
        if self._func is None:
            from cuda.bindings import driver
            func = load_kernel(self.compiled.cubin, self.name)
            if self.dynamic_smem:
                self._allow_dynamic_smem(func)
            blocks = _check(driver.cuOccupancyMaxActiveBlocksPerMultiprocessor(
                func, THREADS, self.dynamic_smem), "cuOccupancyMaxActiveBlocksPerMultiprocessor")
            if blocks < self.ctas_per_sm:
                raise RuntimeError(f"kernel {self.name} keeps {blocks} CTA(s) of {THREADS} "
                                   f"threads resident per SM, not {self.ctas_per_sm}; a "
                                   "persistent launch could hang")
            self._func = func
        return self._func

    def _allow_dynamic_smem(self, func) -> None:
        """Let the kernel take its stage ring (knob ET_STAGE_BYTES), its one-row linear's
        rounds (ET_LINEAR_ASYNC) or its attention's KV ring (ET_ATTN_STREAM) as dynamic shared
        memory beside its static shared memory, or say why it cannot."""
        from cuda.bindings import driver
        attr, dev_attr = driver.CUfunction_attribute, driver.CUdevice_attribute
        static = _check(driver.cuFuncGetAttribute(attr.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES,
                                                  func), "cuFuncGetAttribute")
        dev = _check(driver.cuDeviceGet(self.torch.cuda.current_device()), "cuDeviceGet")
        most = _check(driver.cuDeviceGetAttribute(
            dev_attr.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev),
            "cuDeviceGetAttribute")
        if static + self.dynamic_smem > most:
            knob = max(("ET_STAGE_BYTES", "ET_LINEAR_ASYNC", "ET_ATTN_STREAM"),
                       key=lambda k: dynamic_smem_bytes({k: self.knobs.get(k, 0)}))
            raise ValueError(f"knob {knob}={self.knobs[knob]}: kernel {self.name} has "
                             f"{static} bytes of static shared memory, and a CTA may take "
                             f"{most} in all: {self.dynamic_smem} bytes of dynamic shared "
                             f"memory do not fit beside it (at most "
                             f"{(most - static) // 1024 * 1024})")
        _check(driver.cuFuncSetAttribute(
            func, attr.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, self.dynamic_smem),
            "cuFuncSetAttribute")

    def _num_triggers(self) -> int:
        """Trigger edges of the program; edge j in program order is ET_TRIGGER_STATE(j)."""
        return len(self.program.edges_of(kind="trigger"))

    def tables(self, env: Mapping[str, int], queues=None) -> Tables:
        t = build_tables(bind(self.program, env))
        return schedule(t, self.mode, self.num_ctas, self.policy, early_push=self.early_push,
                        template=self.template, queues=queues,
                        dynamic_grids=self.dynamic_grids)

    def _state(self, env: Mapping[str, int], tables: Tables | None = None) -> _State:
        key = tuple(int(env[s.name]) for s in self.program.symbols)
        st = self._states.get(key) if tables is None else None
        if st is not None:
            return st
        t = tables or self.tables(env)
        torch, dev = self.torch, "cuda"
        host = host_launch(t)
        b, n_dyn = t.bound, host.n_dynamic
        arrays = {name: torch.as_tensor(a, device=dev) for name, a in host.arrays.items()}
        arrays |= {
            # launch-parity state (two copies, see ET_NEXT_COUNTER in runtime.cuh)
            "counter": torch.zeros(2, max(b.num_elements, 1), dtype=torch.int64, device=dev),
            "released": torch.zeros(2, max(b.num_tasks, 1), dtype=torch.int32, device=dev),
            "queue": torch.full((2, max(n_dyn, 1)), -1, dtype=torch.int32, device=dev),
            "head_tail": torch.zeros(2, 2, dtype=torch.int32, device=dev),
            "err": torch.zeros(8, dtype=torch.int64, device=dev),
            "abort": torch.zeros(1, dtype=torch.int32, device=dev),
            # dynamic mode: retired tasks, then per trigger edge (program order) its state
            "dyn_state": torch.zeros(2, 1 + self._num_triggers(), dtype=torch.int64,
                                     device=dev),
        }
        mask = int(sum(1 << int(gi) for gi in np.flatnonzero(t.grid_mode) if gi < 63))
        ring = self.linear_ring is None or self.linear_ring(env)
        st = _State(t, arrays, n_dynamic=n_dyn, dynamic_mask=mask, sm_args=host.sm_args,
                    smem=dynamic_smem_bytes(self.knobs, linear_ring=ring))
        if tables is None:
            self._states[key] = st
        return st

    # ------------------------------------------------------------------ launch
    def launch(self, env: Mapping[str, int], tensors: Mapping[str, Any], stream=None,
               profile: bool = False, tables: Tables | None = None) -> _State:
        """Launch for binding `env`; `tensors` maps every input name to a contiguous CUDA
        tensor of its shape and dtype (`torch_dtype`, see `to_device`); outputs and temps
        are allocated when missing (returned in `state.arrays['tensors']`)."""
        self._function()
        torch = self.torch
        st = self._state(env, tables)
        b = st.tables.bound
        tens = bind_tensors(self.program, b.tensor_shapes, tensors, st.owned)
        st.arrays["tensors"] = tens
        prof = torch.zeros(PROF_TASK * b.num_tasks + PROF_CTA * self.num_ctas,
                           dtype=torch.int64, device="cuda") if profile else None
        st.arrays["prof"] = prof
        a = st.arrays
        slots = symbol_slots(self.program, b.env, tens, st.keep)
        for i, name in enumerate([None, "stream_task", "task_rec", None,
                                  "wait_ptr", "wait_elem", "notify_ptr", "notify_elem",
                                  "target", None, "shift", "ready"]):
            slots[i] = a[name].data_ptr() if name else 0
        for i, j, name in PARITY_SLOTS:  # copy 0 and copy 1 of the launch-parity state
            slots[i], slots[j] = a[name][0].data_ptr(), a[name][1].data_ptr()
        for i, name in zip(range(40, 43), ["stream_rec", "stream_wait", "stream_notify"]):
            slots[i] = a[name].data_ptr()
        slots[3] = st.dynamic_mask
        slots[12] = len(st.tables.ready)
        for i, name in zip(range(14, 17), ["pending0", "push_ptr", "push_task"]):
            slots[i] = a[name].data_ptr()
        slots[20] = st.n_dynamic
        slots[21], slots[22] = a["err"].data_ptr(), a["abort"].data_ptr()
        slots[24], slots[25] = b.num_elements, self.watchdog_ns
        slots[26] = prof.data_ptr() if prof is not None else 0
        slots[27] = b.num_tasks
        slots[28], slots[29] = a["skip_ptr"].data_ptr(), a["skip_elem"].data_ptr()
        slots[31] = self._num_triggers()
        if st.key != tuple(slots):  # upload only when a pointer or value changed (the per-CTA
            # part, stream bounds and slabs, is fixed for the state)
            host = np.concatenate([np.asarray(slots, np.int64), st.sm_args,
                                   np.zeros(self.num_ctas, np.int64)])
            args = torch.as_tensor(host).to("cuda")
            if st.args is not None:  # the CTAs' epochs carry over (they pick the state copy)
                args[-self.num_ctas:] = st.args[-self.num_ctas:]
            st.args, st.key = args, tuple(slots)
        self.relaunch(st, stream)
        return st

    def relaunch(self, st: _State, stream=None) -> None:
        """Launch again with the same binding, tensors and arguments (no host work beyond
        the launch itself; capturable in a CUDA graph)."""
        import ctypes

        from cuda.bindings import driver
        s = stream if stream is not None else self.torch.cuda.current_stream()
        params = ((st.args.data_ptr(),), (ctypes.c_void_p,))
        self._limit_smem(st.smem)
        if not self.overlap_launches:
            _check(driver.cuLaunchKernel(self._function(), self.num_ctas, 1, 1, THREADS, 1, 1,
                                         st.smem, s.cuda_stream, params, 0),
                   "cuLaunchKernel")
            return
        config = self._overlap_config()
        config.hStream = driver.CUstream(s.cuda_stream)
        config.sharedMemBytes = st.smem
        _check(driver.cuLaunchKernelEx(config, self._function(), params, 0), "cuLaunchKernelEx")

    def _limit_smem(self, smem: int) -> None:
        """The function's dynamic shared memory limit set to a launch's own (the SM may size
        its shared memory, and so its L1, by the limit rather than by the launch)."""
        if smem != self._smem_limit:
            from cuda.bindings import driver
            _check(driver.cuFuncSetAttribute(
                self._function(), driver.CUfunction_attribute.
                CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem), "cuFuncSetAttribute")
            self._smem_limit = smem

    def _overlap_config(self):
        """The launch configuration with programmatic stream serialization (built once; a
        launch sets only its stream and dynamic shared memory)."""
        if self._config is None:
            from cuda.bindings import driver
            config = driver.CUlaunchConfig()
            config.gridDimX, config.gridDimY, config.gridDimZ = self.num_ctas, 1, 1
            config.blockDimX, config.blockDimY, config.blockDimZ = THREADS, 1, 1
            overlap = driver.CUlaunchAttribute()
            ids = driver.CUlaunchAttributeID
            overlap.id = ids.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
            overlap.value.programmaticStreamSerializationAllowed = 1
            config.attrs, config.numAttrs = [overlap], 1
            self._config = config
        return self._config

    def sync(self, st: _State) -> None:
        """Wait for the launch; raise DeadlockError if the watchdog fired."""
        self.torch.cuda.synchronize()
        err = st.arrays["err"].cpu().numpy()
        if err[0] == 0:
            return
        b = st.tables.bound
        task, elem, counter, count, sm, kind = (int(v) for v in err[1:7])
        for name in ("err", "abort", "counter", "released", "head_tail", "dyn_state"):
            st.arrays[name].zero_()
        st.arrays["queue"].fill_(-1)
        st.args[-self.num_ctas:] = 0  # every CTA back to epoch 0
        if kind == 2:
            msg = (f"watchdog: SM {sm} waited more than {self.watchdog_ns / 1e9:.3g} s for queue "
                   f"slot {elem} of program '{self.program.name}' at {b.env}")
            raise DeadlockError(msg, [{"sm": sm, "task": None, "event": None}])
        if kind == 3:
            msg = (f"watchdog: task {b.task_name(task)} on SM {sm} waited more than "
                   f"{self.watchdog_ns / 1e9:.3g} s for its input tiles in stage ring slot "
                   f"{elem} of program '{self.program.name}' at {b.env}")
            raise DeadlockError(msg, [{"sm": sm, "task": b.task_name(task), "event": None}])
        rec = {"sm": sm, "task": b.task_name(task), "event": b.element_name(elem),
               "counter": counter, "wait_count": count}
        raise DeadlockError(
            f"watchdog: task {rec['task']} on SM {sm} waited more than "
            f"{self.watchdog_ns / 1e9:.3g} s on {rec['event']} (counter {counter} of {count}) "
            f"in program '{self.program.name}' ({self.mode} schedule) at {b.env}", [rec])

    def next_parity(self, st: _State) -> int:
        """The copy of the launch-parity state the next launch of `st` uses (the other one
        holds the last launch's final values)."""
        return int(st.args[-self.num_ctas].item()) & 1

    def to_device(self, arrays: Mapping[str, np.ndarray]) -> dict:
        return to_device(self.program, arrays)

    def run(self, env: Mapping[str, int], tensors: Mapping[str, Any], **kw) -> dict:
        """Launch, wait and return every tensor (inputs, temps, outputs) by name."""
        st = self.launch(env, tensors, **kw)
        self.sync(st)
        return st.arrays["tensors"]

    def profile(self, st: _State) -> Profile:
        """The timestamps of a profiled launch (`launch(..., profile=True)`), in ns."""
        b = st.tables.bound
        raw = st.arrays["prof"].cpu().numpy()
        tasks = raw[:PROF_TASK * b.num_tasks].reshape(-1, PROF_TASK)
        return Profile(tasks[:, :6], tasks[:, 6], raw[PROF_TASK * b.num_tasks:].reshape(
            -1, PROF_CTA), np.flatnonzero(tasks[:, 5] > 0), tasks[:, 7])

    def trace(self, st: _State, title: str) -> Trace:
        """The per-task timestamps of a profiled launch as a measured `Trace` (µs): a span
        from the waits satisfied to the CTA barrier after the body, its notifies issued at
        `notify_us`; its meta holds each CTA's kernel entry and exit (`cta_entry_us`,
        `cta_exit_us`, the same origin: the earliest fetch)."""
        b, p, prof = st.tables.bound, self.program, self.profile(st)
        t0 = prof.tasks[prof.ran, 0].min() if prof.ran.size else 0
        spans = []
        for t in prof.ran:
            g = p.grids[b.task_grid[t]]
            f, s, e, n = (int(prof.tasks[t, k]) for k in (0, 1, 3, 5))
            spans.append(TaskSpan(int(prof.sm[t]), b.task_name(int(t)), g.kind, g.name,
                                  (s - t0) / 1e3, (e - t0) / 1e3, (f - t0) / 1e3,
                                  notify_us=(n - t0) / 1e3))
        us = (lambda v: [round((int(x) - int(t0)) / 1e3, 4) for x in v])  # noqa: E731
        return Trace(title, "measured", self.num_ctas, spans,
                     {"mode": self.mode, "binding": dict(b.env), "program": p.name,
                      "cta_entry_us": us(prof.cta[:, 0]), "cta_exit_us": us(prof.cta[:, 3])})
