"""The pass pipeline: one named list of pure functions Program -> Program."""
from __future__ import annotations

from collections.abc import Callable

from ..ir import Program, verify
from .derive_events import derive_events
from .validate import validate
from .wait_counts import derive_wait_counts

Pass = Callable[[Program], Program]

PIPELINE: list[tuple[str, Pass]] = [
    ("verify", verify),
    ("derive_events", derive_events),
    ("verify_derived", verify),
    ("derive_wait_counts", derive_wait_counts),
    ("validate", validate),
]


def run_pipeline(p: Program, upto: str | None = None) -> Program:
    """Run the passes in order (stopping after `upto` if given) and return the result."""
    for name, fn in PIPELINE:
        p = fn(p)
        if name == upto:
            break
    return p
