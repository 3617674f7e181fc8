"""The pass pipeline: one named list of pure functions Program -> Program."""
from __future__ import annotations

import time
from collections.abc import Callable

from ..inspect import dump_program, log
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
LAST_DERIVING_PASS = "derive_wait_counts"  # the passes after it only check


def run_pipeline(p: Program, upto: str | None = None) -> Program:
    """Run the passes in order (stopping after `upto` if given) and return the result.
    See `eventtensor.inspect` for timing lines and IR dumps."""
    for index, (name, fn) in enumerate(PIPELINE):
        t0 = time.perf_counter()
        p = fn(p)
        log(f"pass {name} on {p.name}: {(time.perf_counter() - t0) * 1e3:.1f} ms")
        dump_program(p, name, index)
        if name == upto:
            break
    return p
