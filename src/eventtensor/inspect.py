"""Make every stage inspectable with environment variables.

EVENTTENSOR_DUMP=<folder>  writes, per program, the IR after each pass (as Python that rebuilds
                           it), the lowered tables of each binding (.npz) and, from the CUDA
                           compiler, the .cu source, PTX and cubin.
EVENTTENSOR_DEBUG=<level>  1: one line per pass and per lowering on stderr, with its time.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np


def debug_level() -> int:
    try:
        return int(os.environ.get("EVENTTENSOR_DEBUG", "0"))
    except ValueError:
        return 0


def log(message: str, level: int = 1) -> None:
    """Print `message` to stderr when the debug level is at least `level`."""
    if debug_level() >= level:
        print(f"[eventtensor] {message}", file=sys.stderr, flush=True)


def dump_dir(program: str) -> Path | None:
    """The folder for `program`'s dumps, or None when dumping is off."""
    root = os.environ.get("EVENTTENSOR_DUMP")
    if not root:
        return None
    d = Path(root) / program
    d.mkdir(parents=True, exist_ok=True)
    return d


def dump_program(program, stage: str, index: int) -> None:
    """Write the program after pass number `index` (`stage`) as rebuilding Python."""
    d = dump_dir(program.name)
    if d is not None:
        from .printer import to_python
        (d / f"{index:02d}_{stage}.py").write_text(to_python(program))


def dump_tables(tables) -> None:
    """Write the lowered integer tables of one binding as a .npz archive."""
    d = dump_dir(tables.program.name)
    if d is None:
        return
    b = tables.bound
    tag = "_".join(f"{k}{v}" for k, v in b.env.items()) or "fixed"
    np.savez(d / f"tables_{tables.mode}_{tag}.npz", task_grid=b.task_grid,
             task_coords=b.task_coords, wait_ptr=tables.wait_ptr, wait_elem=tables.wait_elem,
             notify_ptr=tables.notify_ptr, notify_elem=tables.notify_elem, target=tables.target,
             queue_ptr=tables.queue_ptr, queue_task=tables.queue_task, ready=tables.ready,
             pending=tables.pending, push_ptr=tables.push_ptr, push_task=tables.push_task,
             early=tables.early)
