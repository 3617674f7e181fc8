"""The paper's three worked examples as ready-made programs with numpy references."""
from __future__ import annotations

from .base import Example
from .moe import MOE
from .splitk import SPLITK_ROWSUM
from .symbolic_batch import SYMBOLIC_BATCH

EXAMPLES: dict[str, Example] = {e.name: e for e in (SPLITK_ROWSUM, SYMBOLIC_BATCH, MOE)}

__all__ = ["EXAMPLES", "Example"]
