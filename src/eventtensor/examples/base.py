"""What an example bundles: a program builder, inputs, a plain numpy reference, bindings."""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from ..ir import Program

Arrays = dict[str, np.ndarray]


@dataclass(frozen=True)
class Example:
    name: str
    summary: str
    build: Callable[[], Program]
    bindings: tuple[Mapping[str, int], ...]          # symbol values the demo and tests run
    make_inputs: Callable[[Mapping[str, int], int], Arrays]   # (binding, seed) -> inputs
    reference: Callable[[Arrays, Mapping[str, int]], Arrays]  # plain numpy outputs
    outputs: tuple[str, ...]
    rtol: float = 0.0     # 0: compared exactly

    def check(self, tensors: Mapping[str, np.ndarray], inputs: Arrays,
              env: Mapping[str, int]) -> float:
        """Compare the run's outputs with the reference; return the max error relative to the
        largest reference value, and
        raise AssertionError (naming the tensor) beyond `rtol`."""
        ref = self.reference(inputs, env)
        worst = 0.0
        for name in self.outputs:
            got, want = np.asarray(tensors[name], np.float64), np.asarray(ref[name], np.float64)
            if got.shape != want.shape:
                raise AssertionError(f"{self.name}: output '{name}' has shape {got.shape}, "
                                     f"reference {want.shape}")
            scale = max(float(np.max(np.abs(want), initial=0.0)), 1e-12)
            err = float(np.max(np.abs(got - want), initial=0.0)) / scale
            if not np.isfinite(got).all() or err > self.rtol:
                raise AssertionError(f"{self.name}: output '{name}' differs from the numpy "
                                     f"reference at {dict(env)} (max rel. error {err:.3g})")
            worst = max(worst, err)
        return worst
