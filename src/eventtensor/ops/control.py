"""Control task kinds: tasks that only synchronise."""
from __future__ import annotations

import numpy as np

from .registry import TaskContext, task_kind


@task_kind("nop")
def nop(ctx: TaskContext) -> dict[str, np.ndarray]:
    """No work: a task that only waits and notifies (latency and dispatch measurements)."""
    if ctx.inputs or ctx.out_shapes:
        raise ValueError(f"task grid '{ctx.grid}': a nop task reads and writes nothing")
    return {}
