"""Error types. Every message names the task grid, event, tensor or symbol at fault."""
from __future__ import annotations

from .sym import SymbolRangeError


class ProgramError(ValueError):
    """A program is malformed: caught by `ir.verify` or a validation pass before anything runs."""


class MapError(ProgramError):
    """An index map is malformed or does not fit the grid, event or tensor it connects."""


class IndexOutOfRangeError(ProgramError):
    """An index map sends some task, for some binding of the symbols, outside a tensor or event."""


class UnnotifiedEventError(ProgramError):
    """An event (or one of its elements) is waited on but no task notifies it."""


class WaitCountError(ProgramError):
    """A wait count can never be reached, or is exceeded, by the notifies the program makes."""


class CycleError(ProgramError):
    """Tasks wait on each other in a cycle: the program can never finish."""


class UnwrittenReadError(ProgramError):
    """A task reads a region that no task writes and no input provides."""


class RuntimeCheckError(RuntimeError):
    """The interpreter caught a violation of the runtime contract while executing."""


class MissingDependencyError(RuntimeCheckError):
    """A task read data before its producer finished, or without an event ordering the two."""


class DeadlockError(RuntimeCheckError):
    """Tasks can never run: every virtual SM is blocked or idle with work left."""

    def __init__(self, message: str, blocked: list[dict]):
        super().__init__(message)
        self.blocked = blocked


class QueueOverflowError(RuntimeCheckError):
    """A dynamic task queue received more pushes than its capacity."""


__all__ = [
    "ProgramError", "MapError", "IndexOutOfRangeError", "UnnotifiedEventError", "WaitCountError",
    "CycleError", "UnwrittenReadError", "RuntimeCheckError", "MissingDependencyError",
    "DeadlockError", "QueueOverflowError", "SymbolRangeError",
]
