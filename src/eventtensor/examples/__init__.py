"""Ready-made programs with numpy references: the paper's three worked examples and a
bfloat16 split-K GEMV."""
from __future__ import annotations

from .base import Example
from .moe import MOE
from .splitk import SPLITK_ROWSUM
from .splitk_gemv_bf16 import SPLITK_GEMV_BF16
from .symbolic_batch import SYMBOLIC_BATCH

EXAMPLES: dict[str, Example] = {e.name: e for e in (SPLITK_ROWSUM, SYMBOLIC_BATCH, MOE,
                                                   SPLITK_GEMV_BF16)}

__all__ = ["EXAMPLES", "Example"]
