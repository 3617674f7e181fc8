"""One small launch per mode, for compute-sanitizer (memcheck, racecheck) on the GPU."""
import sys
from pathlib import Path

import numpy as np
import torch

from eventtensor.backends.cuda.runtime import Megakernel
from eventtensor.examples import EXAMPLES

sys.path.insert(0, str(Path(__file__).parents[1] / "tests" / "gpu"))
from programs import nop_joins  # noqa: E402

for name, env in (("splitk_rowsum", {"n": 2}), ("symbolic_batch", {"B": 5}),
                  ("toy_moe", {"T": 13})):
    ex = EXAMPLES[name]
    for mode, knobs in (("static", {}), ("static", {"ET_STAGE_BYTES": 32768}),
                        ("dynamic", {}), ("hybrid", {})):
        mk = Megakernel(ex.build(), mode, num_sms=8, knobs=knobs)
        inputs = ex.make_inputs(env, 0)
        gpu = {k: torch.as_tensor(np.ascontiguousarray(v), device="cuda")
               for k, v in inputs.items()}
        for _ in range(2):
            out = mk.run(env, gpu)
        ex.check({k: out[k].cpu().numpy() for k in ex.outputs}, inputs, env)
        print(name, mode, knobs, "ok")

# nop tasks: thread 0 alone waits and notifies them while the other threads run ahead
n = 40
rng = np.random.default_rng(0)
inputs = {"A": rng.integers(-8, 9, (n + 1, 8)).astype(np.float32),
          "B": rng.integers(-8, 9, (n, 8)).astype(np.float32)}
mk = Megakernel(nop_joins(n), "static", num_sms=8)
out = mk.run({}, {k: torch.as_tensor(v, device="cuda") for k, v in inputs.items()})
sums = inputs["A"].sum(axis=1)
assert (out["out"].cpu().numpy()[:, 0] == sums[:-1] + sums[1:]).all()
print("nop_joins static ok")
