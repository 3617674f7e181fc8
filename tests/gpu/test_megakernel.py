"""The megakernel on the GPU: the paper's examples in every supported mode and several
bindings against numpy and the CPU interpreter, random-DAG stress, 10,000 launches without a
host reset, the watchdog, and profiling."""
import random
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from eventtensor.backends.cpu import run as cpu_run
from eventtensor.errors import DeadlockError
from eventtensor.examples import EXAMPLES
from eventtensor.schedule import lower

pytestmark = pytest.mark.gpu
MODES = ["static", "dynamic", "unfused"]


def _torch():
    import torch
    return torch


def megakernel(program, mode, **kw):
    from eventtensor.backends.cuda.runtime import Megakernel
    return Megakernel(program, mode, **kw)


def to_gpu(arrays):
    torch = _torch()
    return {k: torch.as_tensor(np.ascontiguousarray(v, np.float32), device="cuda")
            for k, v in arrays.items()}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name, bindings", [
    ("splitk_rowsum", [{"n": 1}, {"n": 2}, {"n": 5}, {"n": 37}, {"n": 256}]),
    ("symbolic_batch", [{"B": 1}, {"B": 3}, {"B": 7}, {"B": 64}]),
])
def test_examples_match_reference_and_interpreter(name, bindings, mode):
    ex = EXAMPLES[name]
    mk = megakernel(ex.build(), mode)
    for env in bindings:
        inputs = ex.make_inputs(env, 7)
        out = mk.run(env, to_gpu(inputs))
        got = {k: out[k].cpu().numpy() for k in ex.outputs}
        ex.check(got, inputs, env)
        cpu = cpu_run(lower(ex.build(), env, mode, 8), inputs, seed=1).tensors
        for k in ex.outputs:
            np.testing.assert_allclose(got[k], cpu[k], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("mode", ["static", "unfused"])
@pytest.mark.parametrize("experts", [4, 8, 16])
def test_moe_data_dependent_edges_on_gpu(mode, experts):
    """Router top-2, grouping by expert (data-dependent notify, runtime wait counts), expert
    GEMM tiles released by a data-dependent trigger range (guarded past the last tile),
    combine; skewed routing starves some experts."""
    from eventtensor.examples import moe
    mk = megakernel(moe.build(experts), mode)
    torch = _torch()
    for T in (8, 13, 64):
        for skew in (False, True):
            env = {"T": T}
            inputs = moe.make_inputs(env, T, experts=experts, skew=skew)
            gpu = {k: torch.as_tensor(v, device="cuda") for k, v in inputs.items()}
            for _ in range(2):  # the second launch reuses the re-initialised counters
                out = mk.run(env, gpu)
            moe.MOE.check({"out": out["out"].cpu().numpy()}, inputs, env)
            counts = out["expert_counts"].cpu().numpy()
            assert counts.sum() == 2 * T
            if skew:
                assert counts[0] == counts[1] == T and (counts[2:] == 0).all()


@pytest.mark.parametrize("mode", ["static", "dynamic"])
def test_ten_thousand_launches_without_host_reset(mode):
    ex = EXAMPLES["splitk_rowsum"]
    env = {"n": 3}
    mk = megakernel(ex.build(), mode)
    inputs = ex.make_inputs(env, 0)
    gpu = to_gpu(inputs)
    want = ex.reference(inputs, env)["out"]
    st = None
    for i in range(10_000):
        st = mk.launch(env, gpu)
        if i % 2500 == 0:
            mk.sync(st)
            np.testing.assert_array_equal(st.arrays["tensors"]["out"].cpu().numpy(), want)
    mk.sync(st)
    np.testing.assert_array_equal(st.arrays["tensors"]["out"].cpu().numpy(), want)
    assert not st.arrays["counter"].any().item()          # re-initialised by the last CTA
    assert not st.arrays["head_tail_done"].any().item()
    assert (st.arrays["pending"] == st.arrays["pending0"]).all().item()


def test_watchdog_turns_a_deadlock_into_an_error():
    ex = EXAMPLES["splitk_rowsum"]
    env = {"n": 1}
    mk = megakernel(ex.build(), "static", watchdog_s=0.2)
    t = mk.tables(env)
    order = t.queue_task[np.argsort(-t.queue_task)]  # final_sum(0) first, on SM 0
    ptr = np.zeros(mk.num_sms + 1, np.int64)
    ptr[1:] = len(order)
    t2 = mk.tables(env, queues=(ptr, order))
    t0 = time.perf_counter()
    with pytest.raises(DeadlockError, match=r"task final_sum\(0\) on SM 0 waited more than "
                                            r"0.2 s on E\[0\] \(counter 0 of 4\)"):
        mk.sync(mk.launch(env, to_gpu(ex.make_inputs(env, 0)), tables=t2))
    assert time.perf_counter() - t0 < 5.0
    out = mk.run(env, to_gpu(ex.make_inputs(env, 1)))  # the kernel still works afterwards
    assert out["out"].shape == (32, 1)


def test_profile_trace_has_every_task():
    ex = EXAMPLES["symbolic_batch"]
    env = {"B": 64}
    mk = megakernel(ex.build(), "static")
    st = mk.launch(env, to_gpu(ex.make_inputs(env, 0)), profile=True)
    mk.sync(st)
    tr = mk.trace(st, "symbolic_batch static B=64")
    assert len(tr.spans) == st.tables.bound.num_tasks
    assert all(s.fetch_us <= s.start_us <= s.end_us for s in tr.spans)


def test_random_dag_stress():
    sys.path.insert(0, str(Path(__file__).parents[1] / "cpu"))
    from random_programs import generate, generate_wide, reference
    checked = 0
    for seed in range(110):
        spec = generate_wide(seed, 300, 900) if seed % 10 == 0 else generate(seed)
        program = spec.build()
        n = spec.bindings[-1] if seed % 10 else spec.n_hi
        inputs = spec.inputs(n, spec.seed)
        ref = reference(spec, n, inputs["X"])
        for mode in ("static", "dynamic"):
            mk = megakernel(program, mode, policy=random.Random(seed).choice(
                ["critical_path", "round_robin"]) if mode == "static" else "critical_path")
            out = mk.run({"n": n}, to_gpu(inputs))
            for name, want in ref.items():
                np.testing.assert_array_equal(out[name].cpu().numpy(), want,
                                              err_msg=f"seed {seed} {mode} n={n} {name}")
            checked += 1
    assert checked >= 200


def test_bad_tensors_are_named():
    ex = EXAMPLES["splitk_rowsum"]
    mk = megakernel(ex.build(), "static")
    torch = _torch()
    good = to_gpu(ex.make_inputs({"n": 2}, 0))
    with pytest.raises(ValueError, match="has no tensor named B"):
        mk.run({"n": 2}, {**good, "B": good["A"]})
    with pytest.raises(ValueError, match="tensor 'A' must be a torch tensor on the GPU"):
        mk.run({"n": 2}, {"A": np.zeros((64, 128), np.float32)})
    with pytest.raises(ValueError, match=r"tensor 'A' must be a contiguous CUDA torch.float32 "
                                         r"tensor of shape \(64, 128\)"):
        mk.run({"n": 2}, {"A": torch.zeros(64, 128, device="cuda", dtype=torch.float64)})
    with pytest.raises(ValueError, match="input tensor 'A' was not given"):
        mk.run({"n": 2}, {})
