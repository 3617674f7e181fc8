"""Scheduling transformations: static templates and their checker, bucketed tables with
guarded tasks, dynamic queue capacity, hybrid and unfused modes, simulator and auto choice."""
import numpy as np
import pytest

from eventtensor import ProgramBuilder, bind, build_tables, run_pipeline
from eventtensor.backends.cpu import run
from eventtensor.errors import ProgramError, QueueOverflowError
from eventtensor.examples import EXAMPLES
from eventtensor.schedule import (
    StaticTemplate,
    check_static,
    lower,
    prepare,
    schedule,
    unfuse,
)
from eventtensor.schedule.simulate import choose_mode, simulate
from eventtensor.schedule.static import bucket_queues
from eventtensor.schedule.unfused import BARRIER


def tables_of(name, env, mode="static", sms=8, **opts):
    return lower(EXAMPLES[name].build(), env, mode, sms, **opts)


@pytest.mark.parametrize("policy", ["critical_path", "round_robin"])
@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_template_queues_cover_every_task_and_pass_the_checker(name, policy):
    p = run_pipeline(EXAMPLES[name].build())
    tmpl = StaticTemplate(p, num_sms=7, policy=policy)
    for env in EXAMPLES[name].bindings:
        t = schedule(build_tables(bind(p, env)), "static", 7, template=tmpl)
        assert sorted(t.queue_task.tolist()) == list(range(t.bound.num_tasks))
        check_static(t)
        assert tmpl.instantiate(env)[1] is t.queue_task  # cached per binding


def test_round_robin_deals_the_global_order():
    p = run_pipeline(EXAMPLES["splitk_rowsum"].build())
    ptr, tasks = StaticTemplate(p, 3, "round_robin").instantiate({"n": 2})
    queues = [tasks[ptr[s]:ptr[s + 1]].tolist() for s in range(3)]
    # global order: partial_sum 0..7, then final_sum 8, 9; SM k takes positions k, k+3, ...
    assert queues == [[0, 3, 6, 9], [1, 4, 7], [2, 5, 8]]


def test_checker_rejects_out_of_order_queue_naming_tasks():
    t = tables_of("splitk_rowsum", {"n": 1}, sms=1)
    t.queue_task = t.queue_task[::-1].copy()
    with pytest.raises(ProgramError, match=r"static queues can deadlock: .*final_sum\(0\) waits "
                                           r"on partial_sum\(0, \d\).*follows on SM 0 queue"):
        check_static(t)


def test_checker_rejects_cross_sm_cycle():
    t = tables_of("splitk_rowsum", {"n": 2}, sms=2)
    # SM 0: final_sum(0) then partial_sum(1, *); SM 1: final_sum(1) then partial_sum(0, *)
    b = t.bound
    fs = list(b.grid_tasks("final_sum"))
    ps = list(b.grid_tasks("partial_sum"))
    t.queue_ptr = np.array([0, 5, 10])
    t.queue_task = np.array([fs[0]] + ps[4:8] + [fs[1]] + ps[0:4])
    with pytest.raises(ProgramError, match="static queues can deadlock"):
        check_static(t)
    with pytest.raises(Exception, match="deadlock"):
        run(t, EXAMPLES["splitk_rowsum"].make_inputs({"n": 2}, 0))


@pytest.mark.parametrize("broken, message", [
    (lambda q: np.concatenate([q, q[:1]]), "hold task .* 2 times"),
    (lambda q: q[1:], "is in no SM queue"),
])
def test_checker_rejects_missing_or_duplicate_tasks(broken, message):
    t = tables_of("splitk_rowsum", {"n": 2}, sms=1)
    t.queue_task = broken(t.queue_task)
    t.queue_ptr = np.array([0, len(t.queue_task)])
    with pytest.raises(ProgramError, match=message):
        check_static(t)


def imbalanced_program():
    """Two independent grids: 2 heavy tasks and 4 light ones, then a join."""
    pb = ProgramBuilder("imbalanced")
    pb.input("H", (2, 1 << 20))
    pb.input("L", (4, 4))
    pb.temp("h", (2, 1))
    pb.temp("l", (4, 1))
    pb.output("o", (1, 1))
    pb.event("Eh")
    pb.event("El")
    pb.grid("light", "row_sum", "i", (4,), reads={"L": "i, :"}, writes={"l": "i, :"},
            notify={"El": "i->"})
    pb.grid("heavy", "row_sum", "i", (2,), reads={"H": "i, :"}, writes={"h": "i, :"},
            notify={"Eh": "i->"})
    pb.grid("join", "row_sum", "i", (1,), reads={"h": ":, :"}, writes={"o": ":, :"},
            wait={"Eh": "i->", "El": "i->"})
    return pb.build()


def test_critical_path_policy_balances_by_cost():
    p = imbalanced_program()
    times = {}
    for policy in ("round_robin", "critical_path"):
        t = lower(p, {}, "static", 3, policy=policy)
        times[policy] = simulate(t).makespan
    ptr, q = t.queue_ptr, t.queue_task  # critical path: heavy tasks alone, light ones together
    per_sm = [set(q[ptr[s]:ptr[s + 1]].tolist()) for s in range(3)]
    heavy, light = set(t.bound.grid_tasks("heavy")), set(t.bound.grid_tasks("light"))
    assert sorted(len(s & heavy) for s in per_sm) == [0, 1, 1]
    assert max(len(s & light) for s in per_sm) == 4
    assert times["critical_path"] < times["round_robin"]


def sink_program():
    """src feeds `work` (then `after`, `out`) and `sink`, which nothing waits on."""
    pb = ProgramBuilder("sink", derive_events=True)
    pb.input("X", (8, 64))
    for name, shape in (("a", (8, 1)), ("w", (8, 1)), ("n", (8, 1))):
        pb.temp(name, shape)
    pb.output("s", (8, 1))
    pb.output("o", (8, 1))
    pb.grid("src", "row_sum", "i", (8,), reads={"X": "i, :"}, writes={"a": "i, :"})
    pb.grid("sink", "row_sum", "i", (8,), reads={"a": "i, :"}, writes={"s": "i, :"})
    pb.grid("work", "row_sum", "i", (8,), reads={"a": "i, :"}, writes={"w": "i, :"})
    pb.grid("after", "row_sum", "i", (8,), reads={"w": "i, :"}, writes={"n": "i, :"})
    pb.grid("out", "row_sum", "i", (8,), reads={"n": "i, :"}, writes={"o": "i, :"})
    return pb.build()


def test_sink_grid_follows_its_siblings_not_the_whole_program():
    """A sink grid comes right after the other consumers of its producers in the critical-path
    order (it fills the SMs that wait on them), not by its own remaining path, as with
    "critical_path_sinks_last" (tied with `out`'s here: program order);
    round robin keeps program order.
    The queues stay deadlock free and compute the same outputs."""
    p = prepare(sink_program(), "static")
    names = [g.name for g in p.grids]
    order = [names[g] for g in StaticTemplate(p, 3).order]
    assert order == ["src", "work", "sink", "after", "out"]
    assert [names[g] for g in StaticTemplate(p, 3, "critical_path_sinks_last").order] == [
        "src", "work", "after", "sink", "out"]
    assert [names[g] for g in StaticTemplate(p, 3, "round_robin").order] == names
    t = lower(p, {}, "static", 3)
    check_static(t)
    x = np.random.default_rng(0).standard_normal((8, 64)).astype(np.float32)
    res = run(t, {"X": x})
    np.testing.assert_allclose(res.tensors["s"][:, 0], x.sum(1), rtol=1e-5)
    np.testing.assert_allclose(res.tensors["o"][:, 0], x.sum(1), rtol=1e-5)


def test_bucketed_tables_guard_invalid_tasks():
    """Queues built for B=64 run B=37: slots of tasks outside B=37 are guarded -- they
    neither run nor notify, and every wait count (computed for B=37) is met exactly."""
    ex = EXAMPLES["symbolic_batch"]
    p = run_pipeline(ex.build())
    tmpl = StaticTemplate(p, 8)
    for B in (37, 1, 64):
        t = build_tables(bind(p, {"B": B}))
        queues = bucket_queues(t, tmpl, {"B": 64})
        schedule(t, "static", 8, queues=queues)
        guarded = int((t.queue_task < 0).sum())
        assert guarded == 336 - t.bound.num_tasks
        check_static(t)
        inputs = ex.make_inputs({"B": B}, B)
        res = run(t, inputs, seed=B)
        ex.check(res.tensors, inputs, {"B": B})
        assert len(res.records) == t.bound.num_tasks
        assert len([s for s in res.skipped if s < 0]) == guarded
        np.testing.assert_array_equal(res.final_counters, t.target)


def test_bucket_must_not_be_smaller():
    p = run_pipeline(EXAMPLES["symbolic_batch"].build())
    t = build_tables(bind(p, {"B": 9}))
    with pytest.raises(ValueError, match="bucket .* is smaller than binding"):
        bucket_queues(t, StaticTemplate(p, 4), {"B": 4})


def test_dynamic_queue_capacity_is_checked():
    t = tables_of("splitk_rowsum", {"n": 3}, "dynamic", sms=2)
    assert t.capacity == t.bound.num_tasks == 15
    t.capacity = 10
    with pytest.raises(QueueOverflowError, match=r"task queue of program 'splitk_rowsum' is "
                                                 r"full \(capacity 10\)"):
        run(t, EXAMPLES["splitk_rowsum"].make_inputs({"n": 3}, 0))


def test_early_push_on_few_sms_with_thousands_of_tasks():
    ex = EXAMPLES["splitk_rowsum"]
    env = {"n": 256}
    t = tables_of("splitk_rowsum", env, "dynamic", sms=4)
    assert t.bound.num_tasks == 1280 and t.early.all()
    inputs = ex.make_inputs(env, 0)
    res = run(t, inputs, seed=5)
    ex.check(res.tensors, inputs, env)
    # dispatches (low 16 bits) and completions (high bits) both reached the wait count
    np.testing.assert_array_equal(res.final_counters, t.target * 65536 + t.target)


def heavy_producers():
    """8 producers streaming 256 KiB each; 2 consumers, each needing 4 of them."""
    pb = ProgramBuilder("heavy_producers")
    pb.input("A", (8, 65536))
    pb.temp("s", (8, 1))
    pb.output("o", (2, 1))
    pb.event("E", (2,))
    pb.grid("produce", "row_sum", "i", (8,), reads={"A": "i, :"}, writes={"s": "i, :"},
            notify={"E": "i->(i//4)"})
    pb.grid("consume", "sum_partials", "i", (2,), reads={"s": "4*i:4*i + 4, :"},
            writes={"o": "i, :"}, wait={"E": "i->i"})
    return pb.build()


def test_early_push_releases_consumers_before_producers_finish():
    p = heavy_producers()
    a = np.arange(8 * 65536, dtype=np.float32).reshape(8, 65536) % 7
    early = lower(p, {}, "dynamic", 12)
    res = run(early, {"A": a}, policy="timed")
    np.testing.assert_array_equal(res.tensors["o"][:, 0], a.reshape(2, -1).sum(1))
    fetch = {r.task: r.fetch for r in res.records}
    end = {r.task: r.end for r in res.records}
    b = early.bound
    assert max(fetch[x] for x in b.grid_tasks("consume")) < \
        min(end[x] for x in b.grid_tasks("produce"))
    late = run(lower(p, {}, "dynamic", 12, early_push=False), {"A": a}, policy="timed")
    late_end = {r.task: r.end for r in late.records}
    for k, c in enumerate(b.grid_tasks("consume")):  # popped only after its producers ended
        fetched = next(r.fetch for r in late.records if r.task == c)
        assert fetched >= max(late_end[x] for x in range(4 * k, 4 * k + 4))
    assert res.makespan <= late.makespan


def test_hybrid_runs_static_and_dynamic_grids_in_one_kernel():
    ex = EXAMPLES["toy_moe"]
    env = {"T": 29}
    dyn = ["expert_gemm", "combine"]
    t = tables_of("toy_moe", env, "hybrid", sms=3, dynamic_grids=dyn)
    static_tasks = set(t.queue_task.tolist())
    for g in dyn:
        assert not static_tasks & set(t.bound.grid_tasks(g))
    assert set(t.bound.grid_tasks("router")) <= static_tasks
    for seed in range(6):
        inputs = ex.make_inputs(env, seed)
        ex.check(run(t, inputs, seed=seed).tensors, inputs, env)


def test_hybrid_needs_valid_dynamic_grids():
    with pytest.raises(ProgramError, match="unknown task grid"):
        tables_of("toy_moe", {"T": 8}, "hybrid", dynamic_grids=["nope"])
    with pytest.raises(ProgramError, match="at least one grid"):
        tables_of("toy_moe", {"T": 8}, "hybrid")


def test_unfused_adds_a_barrier_between_stages():
    p = unfuse(EXAMPLES["symbolic_batch"].build())
    barrier = p.event(BARRIER)
    assert [str(d) for d in barrier.shape] == ["4"]
    t = lower(EXAMPLES["symbolic_batch"].build(), {"B": 9}, "unfused", 4)
    base = t.bound.event_base[BARRIER]
    counts = [len(t.bound.grid_tasks(g.name)) for g in t.program.grids]
    assert t.target[base:base + 4].tolist() == counts
    res = run(t, EXAMPLES["symbolic_batch"].make_inputs({"B": 9}, 0), seed=1)
    starts = {r.task: r.start for r in res.records}
    ends = {r.task: r.end for r in res.records}
    grids = [list(t.bound.grid_tasks(g.name)) for g in t.program.grids]
    for before, after in zip(grids, grids[1:]):
        assert max(ends[x] for x in before) <= min(starts[x] for x in after)


def test_unfused_moe_counts_guarded_tiles_at_the_barrier():
    ex = EXAMPLES["toy_moe"]
    env = {"T": 8}
    t = tables_of("toy_moe", env, "unfused", sms=4)
    inputs = ex.make_inputs(env, 1)
    res = run(t, inputs, seed=2)
    ex.check(res.tensors, inputs, env)
    assert res.skipped  # guarded expert tiles still arrived at the stage barrier


def test_simulated_makespan_grows_with_fewer_sms():
    p = EXAMPLES["symbolic_batch"].build()
    spans = [simulate(lower(p, {"B": 64}, "static", s)).makespan for s in (132, 16, 2)]
    assert spans[0] < spans[1] < spans[2]


def test_auto_picks_lowest_prediction_and_says_why():
    ex = EXAMPLES["toy_moe"]
    env = {"T": 32}
    choice = choose_mode(ex.build(), env, 8, ex.make_inputs(env, 0))
    assert set(choice.predicted_us) == {"static", "dynamic", "unfused", "hybrid"}
    assert choice.mode == min(choice.predicted_us, key=choice.predicted_us.get)
    assert choice.reason.startswith(f"{choice.mode} has the lowest predicted makespan")
    t = lower(ex.build(), env, "auto", 8, inputs=ex.make_inputs(env, 0))
    assert t.mode == choice.mode and "lowest predicted makespan" in t.reason


def test_simulation_without_inputs_refuses_data_dependent_programs():
    t = tables_of("toy_moe", {"T": 8}, "static")
    with pytest.raises(ValueError, match="data-dependent edges: simulate it with inputs"):
        simulate(t)


def test_decode_shaped_template_for_every_batch():
    """One template serves every batch size: queues cover each task once and are provably
    deadlock free; derived events give closed-form wait counts."""
    from eventtensor.examples.decode_shaped import build as build_decode
    p = run_pipeline(build_decode(layers=2, max_batch=40))
    assert all(e.wait_count is not None for e in p.events)
    tmpl = StaticTemplate(p, 132)
    assert len(tmpl.layouts) == 7  # buckets 1, 2, 4, 8, 16, 32, 40
    for B in (1, 3, 16, 17, 40):
        t = schedule(build_tables(bind(p, {"B": B})), "static", 132, template=tmpl)
        assert sorted(t.queue_task.tolist()) == list(range(t.bound.num_tasks))
        check_static(t)
        assert simulate(t).makespan > 0


def test_template_refuses_bindings_beyond_its_reference():
    p = run_pipeline(EXAMPLES["symbolic_batch"].build())
    tmpl = StaticTemplate(p, 8, reference={"B": 16})
    with pytest.raises(ValueError, match="larger than at the template's reference binding"):
        tmpl.instantiate({"B": 17})


def test_trace_command_writes_json_and_png(tmp_path):
    import json

    from eventtensor.cli import main
    from eventtensor.trace import Trace
    assert main(["trace", "splitk_rowsum", "--binding", "n=4", "--out", str(tmp_path)]) == 0
    for mode in ("static", "dynamic", "unfused"):
        data = json.loads((tmp_path / f"splitk_rowsum_{mode}.json").read_text())
        tr = Trace.from_chrome(data)
        assert len(tr.spans) == 20 and tr.source == "simulated"
        assert (tmp_path / f"splitk_rowsum_{mode}.png").stat().st_size > 5000
    assert (tmp_path / "splitk_rowsum_modes.png").exists()
