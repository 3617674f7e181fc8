"""Runtime semantics of the CPU interpreter: deadlock reports, counters across launches,
runtime wait counts, guarded tasks, input checking."""
import numpy as np
import pytest

from eventtensor import ProgramBuilder, bind, build_tables, run_pipeline
from eventtensor.backends.cpu import run
from eventtensor.errors import DeadlockError, RuntimeCheckError
from eventtensor.examples import EXAMPLES
from eventtensor.lower import RUNTIME
from eventtensor.schedule import schedule


def tables_for(p, env, mode="static", sms=4):
    return schedule(build_tables(bind(run_pipeline(p), env)), mode, sms)


def runtime_count_program():
    """prod(i) writes row i and notifies E[i]; E[k]'s wait count comes from input `cnt`."""
    pb = ProgramBuilder("runtime_count")
    pb.input("A", (4, 3))
    pb.input("cnt", (4,), "int32")
    pb.temp("t", (4, 1))
    pb.output("o", (4, 1))
    pb.event("E", (4,), wait_count="k->cnt[k]")
    pb.grid("prod", "row_sum", "i", (4,), reads={"A": "i, :"}, writes={"t": "i, :"},
            notify={"E": "i->i"})
    pb.grid("cons", "row_sum", "i", (4,), reads={"t": "i, :"}, writes={"o": "i, :"},
            wait={"E": "i->i"})
    return pb.build()


@pytest.mark.parametrize("mode", ["static", "dynamic"])
def test_runtime_wait_count_from_tensor(mode):
    t = tables_for(runtime_count_program(), {}, mode)
    assert (t.target == RUNTIME).all()
    a = np.arange(12, dtype=np.float32).reshape(4, 3)
    res = run(t, {"A": a, "cnt": np.ones(4, np.int32)}, seed=1)
    np.testing.assert_array_equal(res.tensors["o"][:, 0], a.sum(1))
    assert res.final_counters.tolist() == [1, 1, 1, 1]


@pytest.mark.parametrize("mode", ["static", "dynamic"])
def test_unreachable_runtime_count_is_a_reported_deadlock(mode):
    t = tables_for(runtime_count_program(), {}, mode)
    with pytest.raises(DeadlockError) as info:
        run(t, {"A": np.ones((4, 3)), "cnt": np.array([1, 1, 2, 1], np.int32)}, seed=0)
    msg = str(info.value)
    assert "deadlock in program 'runtime_count'" in msg and "cons(2)" in msg
    if mode == "static":
        assert "waiting on E[2] (counter 1 of 2)" in msg
        assert info.value.blocked[0] == {"sm": info.value.blocked[0]["sm"], "task": "cons(2)",
                                         "event": "E[2]", "counter": 1, "wait_count": 2}
    else:
        assert "cons(2) never started (1 dependencies pending)" in msg


def test_out_of_order_static_queue_deadlocks_with_report():
    ex = EXAMPLES["splitk_rowsum"]
    t = tables_for(ex.build(), {"n": 1}, "static", sms=1)
    t.queue_task = t.queue_task[::-1].copy()  # consumer first: waits on a producer behind it
    with pytest.raises(DeadlockError, match=r"SM 0 runs final_sum\(0\) waiting on E\[0\] "
                                            r"\(counter 0 of 4\)"):
        run(t, ex.make_inputs({"n": 1}, 0))


@pytest.mark.parametrize("mode", ["static", "dynamic"])
def test_counters_valid_on_relaunch_without_host_reset(mode):
    ex = EXAMPLES["toy_moe"]
    env = {"T": 13}
    t = tables_for(ex.build(), env, mode)
    counters = np.zeros(t.bound.num_elements, np.int64)
    for launch in range(5):
        inputs = ex.make_inputs(env, launch)
        res = run(t, inputs, seed=launch, counters=counters)
        ex.check(res.tensors, inputs, env)
        assert not counters.any()  # re-initialised on the device by the last SM out
        base = t.bound.event_base["expert_ready"]
        np.testing.assert_array_equal(res.final_counters[base:base + 8],
                                      res.tensors["expert_counts"])


def test_dirty_counters_are_refused():
    ex = EXAMPLES["splitk_rowsum"]
    t = tables_for(ex.build(), {"n": 2})
    with pytest.raises(RuntimeCheckError, match="not all zero at launch"):
        run(t, ex.make_inputs({"n": 2}, 0), counters=np.array([0, 3], np.int64))


@pytest.mark.parametrize("mode", ["static", "dynamic"])
def test_guarded_moe_tiles_never_run(mode):
    ex = EXAMPLES["toy_moe"]
    env = {"T": 8}
    t = tables_for(ex.build(), env, mode, sms=3)
    res = run(t, ex.make_inputs(env, 0), seed=2)
    gemm = t.bound.grid_tasks("expert_gemm")
    active = int(res.tensors["exp_indptr"][-1])
    ran = sorted(r.task - gemm.start for r in res.records if r.task in gemm)
    assert ran == list(range(active)) and active < len(gemm)
    if mode == "static":
        assert sorted(x - gemm.start for x in res.skipped) == list(range(active, len(gemm)))


def test_many_tasks_on_four_sms():
    ex = EXAMPLES["symbolic_batch"]
    env = {"B": 64}
    for mode in ("static", "dynamic"):
        t = tables_for(ex.build(), env, mode, sms=4)
        assert t.bound.num_tasks > 300
        inputs = ex.make_inputs(env, 1)
        ex.check(run(t, inputs, seed=9).tensors, inputs, env)


def test_every_task_runs_once_after_its_waits():
    ex = EXAMPLES["symbolic_batch"]
    t = tables_for(ex.build(), {"B": 9}, "dynamic", sms=3)
    res = run(t, ex.make_inputs({"B": 9}, 0), seed=4)
    assert sorted(r.task for r in res.records) == list(range(t.bound.num_tasks))
    end = {r.task: r.end for r in res.records}
    start = {r.task: r.start for r in res.records}
    # every wait element's notifiers finished before the waiter started
    for task in range(t.bound.num_tasks):
        for x in t.wait_elem[t.wait_ptr[task]:t.wait_ptr[task + 1]]:
            notifiers = [s for s in range(t.bound.num_tasks)
                         if x in t.notify_elem[t.notify_ptr[s]:t.notify_ptr[s + 1]]]
            assert notifiers and all(end[s] < start[task] for s in notifiers)


@pytest.mark.parametrize("inputs, message", [
    ({}, "input tensor 'A' of program 'splitk_rowsum' was not given"),
    ({"A": np.zeros((3, 128))}, r"input tensor 'A' has shape \(3, 128\), expected \(64, 128\)"),
    ({"A": np.zeros((64, 128)), "B": np.zeros(1)}, "has no input tensor named B"),
])
def test_bad_inputs_are_named(inputs, message):
    t = tables_for(EXAMPLES["splitk_rowsum"].build(), {"n": 2})
    with pytest.raises(ValueError, match=message):
        run(t, inputs)


def test_overlapping_trigger_ranges_are_reported():
    pb = ProgramBuilder("overlap")
    pb.input("lo", (2,), "int32")
    pb.input("hi", (2,), "int32")
    pb.input("A", (4, 2))
    pb.output("o", (4, 1))
    pb.temp("t", (2, 1))
    pb.event("E", (2,))
    pb.grid("p", "row_sum", "k", (2,), reads={"A": "k, :"}, writes={"t": "k, :"},
            notify={"E": "k->k"})
    pb.grid("c", "row_sum", "i", (4,), reads={"A": "i, :"}, writes={"o": "i, :"})
    pb.trigger("E", "c", "k->lo[k]:hi[k]")
    t = tables_for(pb.build(), {})
    with pytest.raises(RuntimeCheckError, match=r"trigger ranges of E\[0\] and E\[1\] both "
                                                r"release task c\(1\)"):
        run(t, {"lo": np.array([0, 1], np.int32), "hi": np.array([2, 4], np.int32),
                "A": np.ones((4, 2))})


@pytest.mark.parametrize("mode", ["static", "dynamic"])
def test_nop_chain_orders_tasks_without_data(mode):
    pb = ProgramBuilder("nop_chain")
    n = pb.symbol("n", 1, 64)
    pb.event("E", (n + 1,))
    pb.grid("start", "nop", "i", (1,), notify={"E": "i->0"})
    pb.grid("link", "nop", "i", (n,), wait={"E": "i->i"}, notify={"E": "i->i + 1"})
    t = tables_for(pb.build(), {"n": 40}, mode, sms=3)
    res = run(t, {}, seed=3)
    start = {r.task: r.start for r in res.records}
    end = {r.task: r.end for r in res.records}
    link = list(t.bound.grid_tasks("link"))
    assert all(end[a] <= start[b] for a, b in zip([0] + link, link))
    # every element notified once; early-push elements count the dispatch in the low bits too
    np.testing.assert_array_equal(res.final_counters, np.where(t.early, 65537, 1))


def test_nop_refuses_data():
    pb = ProgramBuilder("bad_nop")
    pb.input("A", (2, 2))
    pb.output("o", (2, 1))
    pb.grid("g", "nop", "i", (2,), reads={"A": "i, :"}, writes={"o": "i, :"})
    with pytest.raises(ValueError, match="a nop task reads and writes nothing"):
        run(tables_for(pb.build(), {}), {"A": np.ones((2, 2))})
