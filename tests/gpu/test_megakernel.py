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
from eventtensor.schedule.simulate import default_dynamic_grids

pytestmark = pytest.mark.gpu
MODES = ["static", "dynamic", "hybrid", "unfused"]
KNOB_MODES = ["static", "hybrid"]
KNOB_CASES = [
    {"ET_STAGE_BYTES": 32768},     # staging: input tiles copied into shared memory
    {"ET_STAGE_BYTES": 1024},      # some tiles fit the stage buffer, the rest go to L2
    {"ET_PREFETCH_BYTES": 4096},   # the tiles of the tasks ahead prefetched into L2
    {"ET_ACQUIRE_POLLS": 1},       # every poll an acquire load
    {"ET_DEFER_MAX": 1},           # every task publishes its notifies at once
    {"ET_DEFER_MAX": 3},           # runs of wait-free tasks cut every two tasks
]


def cpu_tensors(program, env, mode, inputs, seed=1):
    """The interpreter's result for `program` in `mode` on 8 SMs (hybrid: the same default
    dynamic grids as the megakernel)."""
    opts = {"dynamic_grids": default_dynamic_grids(program)} if mode == "hybrid" else {}
    return cpu_run(lower(program, env, mode, 8, **opts), inputs, seed=seed).tensors


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
    ("splitk_gemv_bf16", [{"B": 1}, {"B": 3}, {"B": 16}, {"B": 64}]),
])
def test_examples_match_reference_and_interpreter(name, bindings, mode):
    from eventtensor.backends.cuda.runtime import to_host
    ex = EXAMPLES[name]
    mk = megakernel(ex.build(), mode)
    tol = max(ex.rtol, 1e-4)  # bf16 outputs: fp32 and fp64 sums may round one ulp apart
    for env in bindings:
        inputs = ex.make_inputs(env, 7)
        out = mk.run(env, mk.to_device(inputs))
        got = {k: to_host(out[k]) for k in ex.outputs}
        ex.check(got, inputs, env)
        cpu = cpu_tensors(ex.build(), env, mode, inputs)
        for k in ex.outputs:
            np.testing.assert_allclose(got[k], cpu[k], rtol=tol, atol=tol)


@pytest.mark.parametrize("knobs", KNOB_CASES)
@pytest.mark.parametrize("mode", KNOB_MODES)
def test_examples_with_device_library_settings(knobs, mode):
    """Staged input tiles (all, some or none of them in shared memory) and either kind of
    poll give the reference results, launch after launch."""
    from eventtensor.backends.cuda.runtime import to_host
    for name, env in (("splitk_rowsum", {"n": 37}), ("symbolic_batch", {"B": 7}),
                      ("splitk_gemv_bf16", {"B": 16}), ("toy_moe", {"T": 13})):
        ex = EXAMPLES[name]
        mk = megakernel(ex.build(), mode, knobs=knobs)
        inputs = ex.make_inputs(env, 11)
        for _ in range(3):
            out = mk.run(env, mk.to_device(inputs))
            ex.check({k: to_host(out[k]) for k in ex.outputs}, inputs, env)


@pytest.mark.parametrize("mode, ctas", [("static", 2), ("dynamic", 2), ("hybrid", 2),
                                        ("static", 4)])
def test_several_ctas_per_sm(mode, ctas):
    """Several persistent CTAs per SM (each its own static queue, sharing the device queue)."""
    from eventtensor.backends.cuda.runtime import to_host
    for name, env in (("splitk_rowsum", {"n": 37}), ("symbolic_batch", {"B": 7}),
                      ("toy_moe", {"T": 13})):
        ex = EXAMPLES[name]
        mk = megakernel(ex.build(), mode, ctas_per_sm=ctas)
        assert mk.num_ctas == ctas * mk.num_sms
        inputs = ex.make_inputs(env, 5)
        for _ in range(2):
            out = mk.run(env, mk.to_device(inputs))
        ex.check({k: to_host(out[k]) for k in ex.outputs}, inputs, env)


@pytest.mark.parametrize("mode", MODES)
def test_bf16_store_rounds_to_nearest_even(mode):
    """y is the fp32 sum of the partials (in split order) rounded like `round_to_dtype`;
    row 0 of x picks W rows 0 and 64, set so that y[0, :3] are ties."""
    from eventtensor.backends.cuda.runtime import to_host
    from eventtensor.dtypes import round_to_dtype
    ex = EXAMPLES["splitk_gemv_bf16"]
    env = {"B": 3}
    inputs = ex.make_inputs(env, 3)
    inputs["x"][0] = 0.0
    inputs["x"][0, [0, 64]] = 1.0
    inputs["W"][0, :3] = 1.0
    inputs["W"][64, :3] = [2 ** -8, 3 * 2 ** -8, -2 ** -9]
    mk = megakernel(ex.build(), mode)
    out = mk.run(env, mk.to_device(inputs))
    assert out["y"].dtype == _torch().bfloat16
    y, p = to_host(out["y"]), to_host(out["partials"])
    acc = p[0]
    for s in range(1, len(p)):
        acc = acc + p[s]  # float32, in the order the body adds
    np.testing.assert_array_equal(y, round_to_dtype("bfloat16", acc))
    np.testing.assert_array_equal(y[0, :3], [1.0, 1 + 2 ** -6, 1.0])


@pytest.mark.parametrize("dtypes", [("bfloat16", "bfloat16", "bfloat16"),
                                    ("bfloat16", "float32", "bfloat16"),
                                    ("float32", "bfloat16", "float32")])
def test_bodies_on_mixed_dtype_tiles_match_interpreter(dtypes):
    """Integer inputs: every sum is exact in fp32, so GPU and CPU round the same values."""
    from eventtensor.backends.cuda.runtime import to_host
    sys.path.insert(0, str(Path(__file__).parents[1] / "cpu"))
    from test_cuda_codegen import mixed_dtype_program
    program = mixed_dtype_program(*dtypes)
    a = np.random.default_rng(0).integers(-40, 41, (32, 64)).astype(np.float32)
    mk = megakernel(program, "static")
    out = mk.run({}, mk.to_device({"A": a}))
    cpu = cpu_run(lower(program, {}, "static", 8), {"A": a}).tensors
    for k in ("P", "out"):
        np.testing.assert_array_equal(to_host(out[k]), cpu[k])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("experts", [4, 8, 16])
def test_moe_data_dependent_edges_on_gpu(mode, experts):
    """Router top-2, grouping by expert (data-dependent notify, runtime wait counts), expert
    GEMM tiles released by a data-dependent trigger range (guarded past the last tile, never
    pushed in dynamic mode), combine; skewed routing starves some experts (wait counts 0)."""
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
            got = out["out"].cpu().numpy()
            moe.MOE.check({"out": got}, inputs, env)
            counts = out["expert_counts"].cpu().numpy()
            assert counts.sum() == 2 * T
            if skew:
                assert counts[0] == counts[1] == T and (counts[2:] == 0).all()
            cpu = cpu_tensors(moe.build(experts), env, mode, inputs, seed=T)
            np.testing.assert_array_equal(counts, cpu["expert_counts"])
            np.testing.assert_allclose(got, cpu["out"], rtol=1e-4, atol=1e-4)


def _dynamic_edges():
    sys.path.insert(0, str(Path(__file__).parents[1] / "cpu"))
    from test_cuda_codegen import dynamic_edges_inputs, dynamic_edges_program
    return dynamic_edges_program(), dynamic_edges_inputs


@pytest.mark.parametrize("mode", MODES)
def test_trigger_ranges_and_input_wait_counts_on_gpu(mode):
    """An early-push trigger source releasing c tiles, tiles no range covers (dynamic mode
    must still terminate), a wait count read from an input (armed at launch; 0 completes at
    once), in every mode against the interpreter."""
    from eventtensor.backends.cuda.runtime import to_host
    program, make_inputs = _dynamic_edges()
    mk = megakernel(program, mode)
    covered = [0, 1, 2, 5, 6]
    for ids in ((0, 2, 0, 2, 2, 0), (2, 2, 2, 2, 2, 2)):
        inputs = make_inputs(ids)
        gpu = mk.to_device(inputs)
        for _ in range(3):  # later launches reuse the re-initialised device state
            st = mk.launch({}, gpu)
            mk.sync(st)
        cpu = cpu_tensors(program, {}, mode, inputs)
        out = {k: to_host(v) for k, v in st.arrays["tensors"].items()}
        np.testing.assert_array_equal(out["o"][covered], cpu["o"][covered])
        for k in ("t", "u"):
            np.testing.assert_array_equal(out[k], cpu[k])
        _assert_reinitialised(mk, st)


def test_dynamic_watchdog_reports_a_task_never_pushed():
    """F[0] waits for 4 notifies but gets 3: r(0) is never pushed, so the dynamic loop must
    not mistake the end of the other tasks for the end of the launch."""
    program, make_inputs = _dynamic_edges()
    mk = megakernel(program, "dynamic", watchdog_s=0.2)
    with pytest.raises(DeadlockError, match=r"waited more than 0.2 s for queue slot"):
        mk.sync(mk.launch({}, mk.to_device(make_inputs(cnt=(4, 0, 3)))))
    st = mk.launch({}, mk.to_device(make_inputs()))  # the kernel still works afterwards
    mk.sync(st)
    _assert_reinitialised(mk, st)


def _assert_reinitialised(mk, st):
    """The copy of the launch-parity state the next launch uses is back to its initial state
    (re-initialised on the device by the launch before, no host memset)."""
    a, nxt = st.arrays, mk.next_parity(st)
    assert not a["counter"][nxt].any().item()
    assert not a["released"][nxt].any().item()
    assert not a["head_tail"][nxt].any().item()
    assert not a["dyn_state"][nxt].any().item()
    assert (a["queue"][nxt] == -1).all().item()


def _assert_final_counters(mk, st, inputs):
    """Every event counter of the last launch ends where the interpreter's does on the same
    tables (armed runtime counts: their notifies, with the armed bit set)."""
    b = st.tables.bound
    got = st.arrays["counter"][1 - mk.next_parity(st)].cpu().numpy()[:b.num_elements]
    want = cpu_run(st.tables, inputs, seed=3).final_counters
    runtime = st.tables.target < 0
    if mk.mode in ("dynamic", "hybrid"):
        assert ((got[runtime] >> 62) & 1).all()
        got = np.where(runtime, got & 0xFFFFFFFF, got)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("name, env, mode", [("splitk_rowsum", {"n": 3}, "static"),
                                             ("splitk_rowsum", {"n": 3}, "dynamic"),
                                             ("toy_moe", {"T": 13}, "dynamic"),
                                             ("toy_moe", {"T": 13}, "hybrid")])
def test_ten_thousand_launches_without_host_reset(name, env, mode):
    ex = EXAMPLES[name]
    mk = megakernel(ex.build(), mode)
    inputs = ex.make_inputs(env, 0)
    gpu = to_gpu(inputs)
    st = None
    for i in range(10_000):
        st = mk.launch(env, gpu)
        if i % 2500 == 0:
            mk.sync(st)
            ex.check({k: st.arrays["tensors"][k].cpu().numpy() for k in ex.outputs}, inputs, env)
    mk.sync(st)
    ex.check({k: st.arrays["tensors"][k].cpu().numpy() for k in ex.outputs}, inputs, env)
    _assert_reinitialised(mk, st)  # by the launch before, on the device
    _assert_final_counters(mk, st, inputs)


@pytest.mark.parametrize("overlap", [True, False])
@pytest.mark.parametrize("mode", ["static", "dynamic", "hybrid"])
def test_back_to_back_launches(mode, overlap):
    """Launches with programmatic stream serialization (the default: a launch's CTAs start
    while the one before still runs, then wait for it) and without: back to back and
    replayed in a CUDA graph, the results, the re-initialised state copy and the final
    counters are those of single launches."""
    from eventtensor.backends.cuda.runtime import to_host
    torch = _torch()
    for name, env in (("splitk_rowsum", {"n": 37}), ("symbolic_batch", {"B": 7})):
        ex = EXAMPLES[name]
        mk = megakernel(ex.build(), mode, overlap_launches=overlap)
        inputs = ex.make_inputs(env, 2)
        st = mk.launch(env, mk.to_device(inputs))
        for _ in range(500):
            mk.relaunch(st)
        mk.sync(st)
        ex.check({k: to_host(st.arrays["tensors"][k]) for k in ex.outputs}, inputs, env)
        _assert_reinitialised(mk, st)
        _assert_final_counters(mk, st, inputs)
        graph, stream = torch.cuda.CUDAGraph(), torch.cuda.Stream()
        with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
            for _ in range(20):
                mk.relaunch(st)
        for _ in range(5):
            graph.replay()
        mk.sync(st)
        ex.check({k: to_host(st.arrays["tensors"][k]) for k in ex.outputs}, inputs, env)
        _assert_reinitialised(mk, st)


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


@pytest.mark.parametrize("policy", ["critical_path", "round_robin"])
def test_nop_tasks_run_on_thread_zero_alone(policy):
    from programs import nop_joins
    n = 700  # more tasks than SMs: nops, waiting and wait-free bodies share each queue
    program = nop_joins(n)
    rng = np.random.default_rng(4)
    inputs = {"A": rng.integers(-8, 9, (n + 1, 8)).astype(np.float32),
              "B": rng.integers(-8, 9, (n, 8)).astype(np.float32)}
    sums = inputs["A"].sum(axis=1)
    for mode in ("static", "unfused"):
        mk = megakernel(program, mode, policy=policy)
        for _ in range(3):
            out = mk.run({}, to_gpu(inputs))
        np.testing.assert_array_equal(out["out"].cpu().numpy()[:, 0], sums[:-1] + sums[1:])
        np.testing.assert_array_equal(out["b_sum"].cpu().numpy()[:, 0], inputs["B"].sum(axis=1))


def test_watchdog_on_a_nop_task():
    """A nop task (thread 0 alone) queued before its producers on the same SM waits forever:
    the watchdog still ends the launch with the error, and the kernel works afterwards."""
    from eventtensor.frontend import ProgramBuilder
    pb = ProgramBuilder("nop_deadlock")
    pb.input("A", (4, 8))
    pb.output("o", (4, 1))
    pb.event("E", (1,))
    pb.event("F", (1,))
    pb.grid("p", "row_sum", "i", (4,), reads={"A": "i, :"}, writes={"o": "i, :"},
            notify={"E": "i->0"})
    pb.grid("join", "nop", "i", (1,), wait={"E": "i->0"}, notify={"F": "i->0"})
    pb.grid("q", "nop", "i", (2,), wait={"F": "i->0"})
    mk = megakernel(pb.build(), "static", watchdog_s=0.2)
    t = mk.tables({})
    order = np.array([4, 0, 1, 2, 3, 5, 6])  # join(0) first, all on SM 0
    ptr = np.zeros(mk.num_sms + 1, np.int64)
    ptr[1:] = len(order)
    inputs = to_gpu({"A": np.ones((4, 8), np.float32)})
    t0 = time.perf_counter()
    with pytest.raises(DeadlockError, match=r"task join\(0\) on SM 0 waited more than 0.2 s "
                                            r"on E\[0\] \(counter 0 of 4\)"):
        mk.sync(mk.launch({}, inputs, tables=mk.tables({}, queues=(ptr, order))))
    assert time.perf_counter() - t0 < 5.0
    assert t.bound.task_name(4) == "join(0)"
    np.testing.assert_array_equal(mk.run({}, inputs)["o"].cpu().numpy(), np.full((4, 1), 8.0))


def test_profile_trace_has_every_task():
    ex = EXAMPLES["symbolic_batch"]
    env = {"B": 64}
    mk = megakernel(ex.build(), "static")
    st = mk.launch(env, to_gpu(ex.make_inputs(env, 0)), profile=True)
    mk.sync(st)
    tr = mk.trace(st, "symbolic_batch static B=64")
    assert len(tr.spans) == st.tables.bound.num_tasks
    assert all(s.fetch_us <= s.start_us <= s.end_us for s in tr.spans)
    entry, exit_ = tr.meta["cta_entry_us"], tr.meta["cta_exit_us"]
    assert len(entry) == len(exit_) == mk.num_ctas
    for s in tr.spans:  # each task ran between its CTA's kernel entry and exit
        assert entry[s.sm] <= s.fetch_us and s.end_us <= exit_[s.sm]
    prof = mk.profile(st)  # every task's phases in order, every CTA's too
    assert len(prof.ran) == st.tables.bound.num_tasks
    assert (np.diff(prof.tasks[prof.ran].astype(np.int64), axis=1) >= 0).all()
    assert (np.diff(prof.cta.astype(np.int64), axis=1) >= 0).all()
    t = prof.ran  # each body entered after the waits and before the body was done
    assert (prof.tasks[t, 1] <= prof.entered[t]).all()
    assert (prof.entered[t] <= prof.tasks[t, 2]).all()


@pytest.mark.parametrize("name, bindings", [
    ("splitk_rowsum", [{"n": 1}, {"n": 37}, {"n": 256}]),
    ("symbolic_batch", [{"B": 1}, {"B": 7}, {"B": 64}]),
    ("splitk_gemv_bf16", [{"B": 3}, {"B": 64}]),
])
def test_stage_kernels_match_reference_and_interpreter(name, bindings):
    """The stage-per-kernel baseline computes what the megakernel computes."""
    from eventtensor.backends.cuda.runtime import to_host
    from eventtensor.backends.cuda.stages import StageKernels
    ex = EXAMPLES[name]
    sk = StageKernels(ex.build())
    for env in bindings:
        inputs = ex.make_inputs(env, 3)
        out = sk.launch(env, sk.to_device(inputs))
        _torch().cuda.synchronize()
        got = {k: to_host(out[k]) for k in ex.outputs}
        ex.check(got, inputs, env)
        cpu = cpu_tensors(ex.build(), env, "static", inputs)
        tol = max(ex.rtol, 1e-4)
        for k in ex.outputs:
            np.testing.assert_allclose(got[k], cpu[k], rtol=tol, atol=tol)


def test_random_dag_stress():
    sys.path.insert(0, str(Path(__file__).parents[1] / "cpu"))
    from random_programs import generate, generate_wide, reference

    from eventtensor.backends.cuda.codegen import generate as generate_cuda
    from eventtensor.backends.cuda.codegen import kernel_name
    from eventtensor.backends.cuda.compiler import compile_many
    from eventtensor.schedule import prepare
    specs = [generate_wide(seed, 300, 900) if seed % 10 == 0 else generate(seed)
             for seed in range(110)]
    modes = [("static", "dynamic") + (("hybrid",) if seed % 3 == 0 else ())
             for seed in range(110)]
    prepared = [(prepare(spec.build(), m), m) for spec, ms in zip(specs, modes) for m in ms]
    compile_many([(generate_cuda(p, m), kernel_name(p, m)) for p, m in prepared])
    checked = 0
    for seed, spec in enumerate(specs):
        program = spec.build()
        n = spec.bindings[-1] if seed % 10 else spec.n_hi
        inputs = spec.inputs(n, spec.seed)
        ref = reference(spec, n, inputs["X"])
        for mode in modes[seed]:
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


def _linear_program(n: int, k: int, cols: int):
    """One grid of linear_partial tasks of `cols` weight rows each (two passes of the
    one-row path and more, k of 512 words: many steps), out[0, :B, :] = x @ W^T, B <= 64."""
    from eventtensor import ProgramBuilder
    pb = ProgramBuilder(f"linear_{n}x{k}_c{cols}")
    B = pb.symbol("B", 1, 64)
    pb.input("x", (B, k))
    pb.input("w", (n, k), "bfloat16")
    pb.output("out", (1, B, n))
    pb.grid("linear", "linear_partial", "mn", (1, n // cols),
            reads={"x": ":, :", "w": f"{cols}*n:{cols}*n + {cols}, :"},
            writes={"out": f"0, :, {cols}*n:{cols}*n + {cols}"}, params={"x": "x", "w": "w"})
    return pb.build()


@pytest.mark.parametrize("knobs", [
    {}, {"ET_LINEAR_ASYNC": 2}, {"ET_LINEAR_ASYNC": 3, "ET_WEIGHTS_EVICT_FIRST": 1},
    {"ET_LINEAR_MMA": 8}, {"ET_LINEAR_MMA": 8, "ET_LINEAR_MMA_LO": 0},
    {"ET_LINEAR_MMA": 8, "ET_LINEAR_CORE_ROWS": 4}])
def test_linear_weight_paths_match_numpy(knobs):
    """The linear body's paths (one-row words through the shared-memory rounds, tensor cores
    with x staged by chunks of k, two passes of columns, x rounded to bf16, CUDA-core blocks
    of 4 rows) against x @ W^T in float64
    at B = 1, 3, 16 and 64: within fp32 accumulation error of sum |x| |w| (with
    ET_LINEAR_MMA_LO 0, of x rounded to bf16)."""
    from eventtensor.backends.cuda.runtime import to_host
    from eventtensor.dtypes import round_to_dtype
    n, k = 600, 4096
    program = _linear_program(n, k, 300)
    rng = np.random.default_rng(7)
    w = round_to_dtype("bfloat16", rng.standard_normal((n, k)).astype(np.float32))
    mk = megakernel(program, "static", knobs=knobs)
    for b in (1, 3, 16, 64):
        x = rng.standard_normal((b, k)).astype(np.float32)
        out = to_host(mk.run({"B": b}, mk.to_device({"x": x, "w": w}))["out"])[0]
        rows_on_mma = knobs.get("ET_LINEAR_MMA", 0) and b >= knobs["ET_LINEAR_MMA"]
        xr = round_to_dtype("bfloat16", x) if rows_on_mma and knobs.get(
            "ET_LINEAR_MMA_LO", 1) == 0 else x
        want = xr.astype(np.float64) @ w.T.astype(np.float64)
        scale = np.abs(xr).astype(np.float64) @ np.abs(w).T.astype(np.float64)
        np.testing.assert_array_less(np.abs(out - want), 1e-5 * scale + 1e-30,
                                     err_msg=f"B={b} knobs={knobs}")
