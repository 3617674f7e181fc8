"""Everything a megakernel needs before it meets the GPU: the prepared program, the generated
source, its cubin and the static template, with the time each phase took.

A cold build overlaps NVRTC (which runs without the interpreter lock) with the host work
that the source does not depend on: the validation pass and the static template. A warm
build reads the prepared program, source and template from one `build_cache` entry and the
cubin from the compiler's cache.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from ...ir import Program
from ...passes.validate import validate
from ...schedule import StaticTemplate, prepare
from ...schedule.simulate import default_dynamic_grids
from . import build_cache
from .codegen import generate, kernel_name
from .compiler import Compiled, compile_source


@dataclass
class KernelBuild:
    """A megakernel's host-side products. `seconds`: wall time per phase (`prepare`,
    `validate`, `generate`, `template`, `compile`: NVRTC, `wait`: the part of NVRTC that
    no host work hid; phases served from the caches are absent) and `total`."""
    program: Program                   # prepared for `mode`
    mode: str
    source: str
    name: str                          # kernel entry point
    compiled: Compiled
    template: StaticTemplate | None    # static schedule of the static grids (not dynamic mode)
    dynamic_grids: tuple[str, ...]     # hybrid mode: the grids run from the device queue
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def cached(self) -> bool:
        """Whether every product came from the caches."""
        return self.compiled.cached and "generate" not in self.seconds


def build_kernel(program: Program, mode: str, num_ctas: int, *, ctas_per_sm: int = 1,
                 policy: str = "critical_path", dynamic_grids: Sequence[str] | None = None,
                 knobs: Mapping[str, int] | None = None, fast_compile: str | None = None,
                 say: Callable[[str], None] | None = None) -> KernelBuild:
    """Build `program`'s megakernel for scheduling `mode` with `num_ctas` persistent CTAs
    (`ctas_per_sm` on each SM), static `policy`, hybrid mode's `dynamic_grids` (default:
    the data-dependent ones), device-library `knobs` and `fast_compile`
    (`compiler.compile_source`); `say` hears of the long phases."""
    t_start = time.perf_counter()
    seconds: dict[str, float] = {}

    def timed(phase: str, fn):
        t0 = time.perf_counter()
        out = fn()
        seconds[phase] = time.perf_counter() - t0
        return out

    pkey = build_cache.program_key(program, mode)
    options = repr((num_ctas, ctas_per_sm, policy, None if dynamic_grids is None else
                    tuple(dynamic_grids), sorted((knobs or {}).items())))
    gkey = build_cache.entry_key(pkey, options)
    gname = f"{program.name}-{mode}"
    hit = build_cache.load("generated", gname, gkey, tuple)
    if hit is not None:
        prepared, source, template = hit
        unvalidated = False
    else:
        prepared = build_cache.load("prepared", gname, pkey, Program)
        unvalidated = prepared is None
        if unvalidated:
            prepared = timed("prepare", lambda: prepare(program, mode, validated=False))
        source = timed("generate", lambda: generate(prepared, mode, ctas_per_sm, knobs))
        template = None
    dyn = tuple(dynamic_grids if dynamic_grids is not None else
                default_dynamic_grids(prepared)) if mode == "hybrid" else ()
    name = kernel_name(prepared, mode, ctas_per_sm)
    pool = ThreadPoolExecutor(1, thread_name_prefix="nvrtc")
    try:
        compiling = pool.submit(compile_source, source, name, fast_compile=fast_compile)
        if say and not compiling.done():
            say(f"compiling kernel {name} (NVRTC, sm_90a)")
        if unvalidated:
            timed("validate", lambda: validate(prepared))
            build_cache.store("prepared", gname, pkey, prepared)
        if hit is None:
            static = [g.name for g in prepared.grids if g.name not in dyn]
            template = timed("template", lambda: StaticTemplate(
                prepared, num_ctas, policy, grids=static)) if mode != "dynamic" else None
            build_cache.store("generated", gname, gkey, (prepared, source, template))
        compiled = timed("wait", compiling.result)
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    if not compiled.cached:
        seconds["compile"] = compiled.seconds
    seconds["total"] = time.perf_counter() - t_start
    return KernelBuild(prepared, mode, source, name, compiled, template, dyn, seconds)
