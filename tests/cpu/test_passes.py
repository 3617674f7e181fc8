"""Passes: closed-form wait counts (checked against enumeration) and event derivation from
tile regions (checked against the hand-written programs, before/expected style)."""
import numpy as np
import pytest

from eventtensor import ProgramBuilder, bind, build_tables, run_pipeline
from eventtensor.backends.cpu import run
from eventtensor.examples import EXAMPLES
from eventtensor.passes import PIPELINE
from eventtensor.passes.validate import sample_bindings
from eventtensor.schedule import schedule
from eventtensor.sym import cdiv


def producer_consumer(notify: str, event_extent, n_hi=9, prod_extent=None):
    """`prod` grid over n tasks notifying E through `notify`; one consumer per event element."""
    pb = ProgramBuilder("pc")
    n = pb.symbol("n", 1, n_hi)
    ext = prod_extent(n) if prod_extent else (n,)
    ev = event_extent(n)
    pb.input("A", (1, 1))
    pb.temp("t", (1, 1))
    pb.event("E", ev)
    pb.grid("prod", "row_sum", "ab"[:len(ext)], ext, notify={"E": notify})
    return pb.build()


@pytest.mark.parametrize("notify, event_extent, prod_extent, closed", [
    ("a->a", lambda n: (n,), None, "k->1"),
    ("a->(a//3)", lambda n: (cdiv(n, 3),), None, "k->(smin(n - 3*k, 3))"),
    ("ab->a", lambda n: (n,), lambda n: (n, 4), "k->4"),
    ("ab->b", lambda n: (4,), lambda n: (n, 4), "k->n"),
    ("ab->:", lambda n: (3,), lambda n: (n, 2), "k->(2*n)"),
    # partition overlap: producer tiles of 128 rows feeding consumer chunks of 96 rows
    ("a->((128*a)//96):(cdiv(128*a + 128, 96))", lambda n: (cdiv(128 * n, 96),), None, None),
    ("a->((96*a)//128):(cdiv(96*a + 96, 128))", lambda n: (cdiv(96 * n, 128),), None, None),
])
def test_closed_form_wait_counts_match_enumeration(notify, event_extent, prod_extent, closed):
    p0 = producer_consumer(notify, event_extent, prod_extent=prod_extent)
    p = run_pipeline(p0, upto="derive_wait_counts")
    wc = p.event("E").wait_count
    assert wc is not None, "expected a closed form"
    if closed is not None:
        assert str(wc) == closed
    for v in range(1, 10):
        t = build_tables(bind(p, {"n": v}))
        assert t.target.tolist() == t.notify_count.tolist(), f"n={v}"


def test_unrecognised_map_falls_back_to_enumeration():
    p = run_pipeline(producer_consumer("ab->(a + b)", lambda n: (n + 3,),
                                       prod_extent=lambda n: (n, 4)))
    assert p.event("E").wait_count is None
    t = build_tables(bind(p, {"n": 2}))
    assert t.target.tolist() == [1, 2, 2, 2, 1]


def splitk(derive: bool, with_edges: bool):
    pb = ProgramBuilder("splitk_derived", derive_events=derive)
    n = pb.symbol("n", 1, 16)
    pb.input("A", (32 * n, 128))
    pb.temp("partial", (32 * n, 4))
    pb.output("out", (32 * n, 1))
    if with_edges:
        pb.event("E", (n,))
    pb.grid("partial_sum", "row_sum", "ij", (n, 4),
            reads={"A": "32*i:32*i + 32, 32*j:32*j + 32"},
            writes={"partial": "32*i:32*i + 32, j"}, notify={"E": "ij->i"} if with_edges else None)
    pb.grid("final_sum", "row_sum", "i", (n,), reads={"partial": "32*i:32*i + 32, :"},
            writes={"out": "32*i:32*i + 32, 0"}, wait={"E": "i->i"} if with_edges else None)
    return pb.build()


def test_derive_events_before_expected():
    derived = run_pipeline(splitk(True, False), upto="derive_events")
    (ev,) = derived.events
    assert ev.name == "partial_sum_ready_i" and [str(s) for s in ev.shape] == ["n"]
    edges = {(e.grid, e.kind, str(e.map)) for e in derived.edges}
    assert edges == {("partial_sum", "notify", "ij->i"), ("final_sum", "wait", "i->i")}
    assert str(run_pipeline(derived).event(ev.name).wait_count) == "k->4"


def test_derive_events_symbolic_batch_mismatched_tiles():
    """Remove every edge of the symbolic-batch example; derivation must rebuild equivalent
    events: same reductions, and GEMM 2 chunks waiting on the 1-2 overlapping Y1 tiles."""
    hand = EXAMPLES["symbolic_batch"].build()
    bare = hand.replace(events=(), edges=(), derive_events=True)
    derived = run_pipeline(bare)
    shapes = {e.name: [str(s) for s in e.shape] for e in derived.events}
    counts = {e.name: str(e.wait_count) for e in derived.events}
    assert shapes == {"gemm1_partial_ready_bn": ["cdiv(B, 4)", "3"],
                      "gemm1_reduce_ready": ["cdiv(B, 4)", "3"],
                      "gemm2_partial_ready_bn": ["cdiv(B, 4)", "2"]}
    assert counts["gemm1_partial_ready_bn"] == "kl->4"
    assert counts["gemm2_partial_ready_bn"] == "kl->2"
    wait2 = next(e for e in derived.edges if e.grid == "gemm2_partial" and e.kind == "wait")
    for b in range(3):
        for s in range(2):
            tb = bind(derived, {"B": 9})
            t = tb.task_base["gemm2_partial"] + (b * 2 + 0) * 2 + s
            got = sorted(wait2.map.elements(tb.task_env(t), tb.event_shapes[wait2.event]))
            first, last = (24 * s) // 16, -(-(24 * s + 24) // 16)
            assert got == [b * 3 + c for c in range(first, last)]


@pytest.mark.parametrize("name", ["splitk_rowsum", "symbolic_batch"])
@pytest.mark.parametrize("mode", ["static", "dynamic"])
def test_derived_program_matches_reference(name, mode):
    ex = EXAMPLES[name]
    bare = ex.build().replace(events=(), edges=(), derive_events=True)
    p = run_pipeline(bare)
    for env in ex.bindings:
        tables = schedule(build_tables(bind(p, env)), mode, num_sms=5)
        inputs = ex.make_inputs(env, 3)
        for seed in range(4):
            ex.check(run(tables, inputs, seed=seed).tensors, inputs, env)


def test_derivation_refuses_data_dependent_regions():
    from eventtensor.errors import ProgramError
    bare = EXAMPLES["toy_moe"].build().replace(events=(), edges=(), derive_events=True)
    with pytest.raises(ProgramError, match=r"dependency of task grid '\w+' on '\w+' through "
                                           r"tensor '\w+': a region is data dependent"):
        run_pipeline(bare)


def test_pipeline_is_one_named_list():
    assert [name for name, _ in PIPELINE] == ["verify", "derive_events", "verify_derived",
                                              "derive_wait_counts", "validate"]


def test_sample_bindings_cover_corners():
    p = EXAMPLES["symbolic_batch"].build()
    assert [b["B"] for b in sample_bindings(p)] == [1, 64, 2, 32]
    assert np.all([1 <= b["B"] <= 64 for b in sample_bindings(p)])
