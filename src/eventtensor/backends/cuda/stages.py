"""The stage-per-kernel baseline: the megakernel's tile bodies, one kernel launch per task grid.

`StageKernels(program)` compiles one kernel (`ET_STAGE_KERNEL` in runtime.cuh) whose CTA
(x, y, z) runs the task at those coordinates of the grid it is launched for; `launch` runs the
grids in a topological order of the grid graph (`stage_order`), one launch each on one stream,
so kernel boundaries order the stages where the megakernel waits on events. The argument slots
travel by value. This is how the same tiles run without a megakernel: the baseline the
megakernel's fine-grained synchronisation is measured against.
"""
from __future__ import annotations

import ctypes
from collections.abc import Mapping
from typing import Any

from ...ir import Program
from ...lower import bind
from ...schedule import prepare
from ...schedule.unfused import stage_order
from .codegen import MAX_SLOTS, STAGES, generate, kernel_name
from .compiler import compile_source
from .runtime import THREADS, _check, bind_tensors, load_kernel, symbol_slots, to_device

MAX_GRID_YZ = 65535  # CUDA's limit on gridDim.y and gridDim.z


class _Slots(ctypes.Structure):
    _fields_ = [("v", ctypes.c_int64 * MAX_SLOTS)]


class StageKernels:
    """One program's task grids as kernels, launchable for any binding."""

    def __init__(self, program: Program):
        import torch
        self.torch = torch
        self.program = prepare(program, "static")
        self.source = generate(self.program, STAGES)
        self.name = kernel_name(self.program, STAGES)
        self.compiled = compile_source(self.source, self.name)
        self.stages = [self.program.grids.index(g) for g in stage_order(self.program)]
        self._func = None
        self._owned: dict[tuple[int, ...], dict] = {}
        self._launches: list[tuple] = []  # per stage: grid dims, kernel parameters
        self._slots: _Slots | None = None  # the argument slots those parameters point to
        self._keep: dict = {}  # the tensor table, for programs with one (symbol_slots)

    def _function(self):
        if self._func is None:
            self._func = load_kernel(self.compiled.cubin, self.name)
        return self._func

    def to_device(self, arrays: Mapping[str, Any]) -> dict:
        """Numpy arrays as CUDA tensors of the program's dtypes (see `runtime.to_device`)."""
        return to_device(self.program, arrays)

    def launch(self, env: Mapping[str, int], tensors: Mapping[str, Any], stream=None) -> dict:
        """Run every stage for binding `env` on `stream`; `tensors` as for
        `Megakernel.launch`. Returns every tensor by name (outputs and temps allocated once
        per binding)."""
        b = bind(self.program, env)
        owned = self._owned.setdefault(tuple(b.env[s.name] for s in self.program.symbols), {})
        tens = bind_tensors(self.program, b.tensor_shapes, tensors, owned)
        slots = _Slots()
        slots.v[:] = symbol_slots(self.program, b.env, tens, self._keep)
        self._launches = []
        for gi in self.stages:
            grid = self.program.grids[gi]
            dims = list(b.grid_extents[grid.name]) + [1] * (3 - len(grid.axes))
            if 0 in dims:
                continue
            if dims[1] > MAX_GRID_YZ or dims[2] > MAX_GRID_YZ:
                raise ValueError(f"task grid '{grid.name}' at {b.env} has extents {tuple(dims)}; "
                                 f"a stage kernel takes at most {MAX_GRID_YZ} along axes 2 and 3")
            g = ctypes.c_int(gi)
            params = (ctypes.c_void_p * 2)(ctypes.addressof(slots), ctypes.addressof(g))
            self._launches.append((dims, params, g))
        self._slots = slots
        self.relaunch(stream)
        return tens

    def relaunch(self, stream=None) -> None:
        """The last `launch`'s stages again (capturable in a CUDA graph)."""
        from cuda.bindings import driver
        s = stream if stream is not None else self.torch.cuda.current_stream()
        for dims, params, _ in self._launches:
            _check(driver.cuLaunchKernel(self._function(), *dims, THREADS, 1, 1, 0, s.cuda_stream,
                                         ctypes.addressof(params), 0), "cuLaunchKernel")
