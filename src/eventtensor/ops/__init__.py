"""Task kinds: one module per family, registered in `registry.KINDS` on import."""
from . import control, examples, llm  # noqa: F401  (registers the kinds)
from .registry import KINDS, TaskContext, TaskKind, task_kind

__all__ = ["KINDS", "TaskContext", "TaskKind", "task_kind"]
