"""One small launch per mode, for compute-sanitizer (memcheck, racecheck) on the GPU."""
import numpy as np
import torch

from eventtensor.backends.cuda.runtime import Megakernel
from eventtensor.examples import EXAMPLES

for name, env in (("splitk_rowsum", {"n": 2}), ("symbolic_batch", {"B": 5}),
                  ("toy_moe", {"T": 13})):
    ex = EXAMPLES[name]
    for mode in ("static", "dynamic", "hybrid"):
        mk = Megakernel(ex.build(), mode, num_sms=8)
        inputs = ex.make_inputs(env, 0)
        gpu = {k: torch.as_tensor(np.ascontiguousarray(v), device="cuda")
               for k, v in inputs.items()}
        for _ in range(2):
            out = mk.run(env, gpu)
        ex.check({k: out[k].cpu().numpy() for k in ex.outputs}, inputs, env)
        print(name, mode, "ok")
