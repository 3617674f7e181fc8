"""eventtensor: compile programs of tile tasks connected by event tensors into one
persistent megakernel (CUDA) or run them on a CPU interpreter with virtual SMs."""
from __future__ import annotations

from .errors import (
                     CycleError,
                     DeadlockError,
                     IndexOutOfRangeError,
                     MapError,
                     MissingDependencyError,
                     ProgramError,
                     SymbolRangeError,
                     UnnotifiedEventError,
                     UnwrittenReadError,
                     WaitCountError,
)
from .frontend import ProgramBuilder
from .ir import Program, verify
from .lower import bind, build_tables
from .passes import PIPELINE, run_pipeline
from .schedule import lower, schedule

__version__ = "0.1.0"

__all__ = [
    "ProgramBuilder", "Program", "verify", "PIPELINE", "run_pipeline", "bind", "build_tables",
    "schedule", "lower", "ProgramError", "MapError", "IndexOutOfRangeError",
    "UnnotifiedEventError", "WaitCountError", "CycleError", "UnwrittenReadError",
    "MissingDependencyError", "DeadlockError", "SymbolRangeError", "__version__",
]
