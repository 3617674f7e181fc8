"""Scheduling transformations: static, dynamic (with early push), hybrid, unfused.

`lower(program, env, mode=...)` runs the pass pipeline, binds the symbols and attaches a
schedule to the tables both backends execute:

* static  -- per-SM queues from one global topological order (`static.StaticTemplate`);
* dynamic -- one device queue fed by event completions, early push by default;
* hybrid  -- the grids in `dynamic_grids` dynamic, the rest static, in one kernel; an SM
  blocked on a static task serves the dynamic queue meanwhile (late push only);
* unfused -- the ablation baseline: static, with a barrier between grids (`unfused.unfuse`).
"""
from __future__ import annotations

import time
from collections.abc import Iterable, Mapping

import numpy as np

from ..errors import ProgramError
from ..inspect import dump_tables, log
from ..ir import Program
from ..lower import Tables, bind, build_tables
from ..passes import LAST_DERIVING_PASS, run_pipeline
from .dynamic import dynamic_tables
from .static import StaticTemplate, check_static
from .unfused import unfuse

MODES = ("static", "dynamic", "hybrid", "unfused")  # and "auto" in `lower`


def schedule(tables: Tables, mode: str = "static", num_sms: int = 132,
             policy: str = "critical_path", dynamic_grids: Iterable[str] = (),
             early_push: bool = True, template: StaticTemplate | None = None,
             queues: tuple[np.ndarray, np.ndarray] | None = None) -> Tables:
    """Attach a schedule to `tables` (in place; returned). `template` reuses a static
    template; `queues` gives ready-made per-SM queues (CSR), e.g. bucketed ones."""
    if mode not in MODES:
        raise ValueError(f"unknown scheduling mode '{mode}' (one of {', '.join(MODES)})")
    if num_sms < 1:
        raise ValueError(f"num_sms must be at least 1, got {num_sms}")
    p = tables.program
    names = {g.name for g in p.grids}
    dyn = set(names) if mode == "dynamic" else set(dynamic_grids)
    unknown = dyn - names
    if unknown:
        raise ProgramError(f"dynamic_grids names unknown task grid(s) {', '.join(sorted(unknown))}")
    if mode == "hybrid" and not dyn:
        raise ProgramError("hybrid mode needs at least one grid in dynamic_grids")
    tables.mode, tables.num_sms = mode, num_sms
    tables.grid_mode = np.array([1 if g.name in dyn else 0 for g in p.grids], np.int8)
    static = [g.name for g in p.grids if g.name not in dyn]
    if queues is None:
        tmpl = template or StaticTemplate(p, num_sms, policy, grids=static)
        queues = tmpl.instantiate(tables.bound.env)
    tables.queue_ptr, tables.queue_task = queues
    dynamic_tables(tables, early_push and mode == "dynamic")
    return tables


def prepare(program: Program, mode: str, validated: bool = True) -> Program:
    """The program a scheduling mode runs, after the pass pipeline. Unfused mode adds its
    stage barriers once the derived events exist, so the stages follow the data. Without
    `validated`, the pipeline's last pass, `validate`, is left to the caller (who may run
    it beside other work)."""
    if mode == "unfused":
        program = unfuse(run_pipeline(program))
    return run_pipeline(program, upto=None if validated else LAST_DERIVING_PASS)


def lower(program: Program, env: Mapping[str, int], mode: str = "static", num_sms: int = 132,
          check: bool = True, inputs: Mapping[str, np.ndarray] | None = None,
          **options) -> Tables:
    """Pass pipeline, binding and schedule in one call; `check` proves static queues
    deadlock free (`check_static`). `mode="auto"` simulates every mode (with `inputs` where
    maps read runtime tensors) and keeps the fastest; `tables.reason` says why."""
    reason = f"mode {mode} as requested"
    if mode == "auto":
        from .simulate import choose_mode
        choice = choose_mode(program, env, num_sms, inputs)
        mode, reason = choice.mode, choice.reason
        options = {**choice.options, **options}
    t0 = time.perf_counter()
    program = prepare(program, mode)
    tables = schedule(build_tables(bind(program, env)), mode, num_sms, **options)
    tables.reason = reason
    log(f"lowered {program.name} at {dict(env)}: {tables.bound.num_tasks} tasks, {mode} "
        f"schedule, {(time.perf_counter() - t0) * 1e3:.1f} ms")
    dump_tables(tables)
    if check and mode != "dynamic":
        check_static(tables)
    return tables


__all__ = ["MODES", "StaticTemplate", "check_static", "lower", "prepare", "schedule", "unfuse"]
