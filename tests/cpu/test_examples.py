"""The paper's three examples on the CPU interpreter, in every mode, over many interleavings,
against plain numpy; broken variants (one edge removed, a back edge added) must be caught."""
import numpy as np
import pytest

from eventtensor import bind, build_tables, run_pipeline
from eventtensor.backends.cpu import run
from eventtensor.errors import CycleError, MissingDependencyError
from eventtensor.examples import EXAMPLES, moe
from eventtensor.runner import check_example
from eventtensor.schedule import prepare, schedule
from eventtensor.schedule.simulate import default_dynamic_grids

MODES = ["static", "dynamic", "hybrid", "unfused"]


def scheduled(p, env, mode, num_sms):
    """Tables of program `p` in `mode` (hybrid: data-dependent grids, or the last, dynamic)."""
    p = prepare(p, mode)
    opts = {"dynamic_grids": default_dynamic_grids(p)} if mode == "hybrid" else {}
    return schedule(build_tables(bind(p, env)), mode, num_sms, **opts)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("sms", [132, 4, 1])
@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_example_every_binding(name, sms, mode):
    ex = EXAMPLES[name]
    for env in ex.bindings:
        rep = check_example(ex, env, mode, num_sms=sms, interleavings=12, seed=len(env))
        assert rep.max_error <= ex.rtol


def test_symbolic_batch_one_program_for_every_batch():
    """One pipeline run; bindings B = 1, 3, 7, 64 instantiate tables from the same program."""
    ex = EXAMPLES["symbolic_batch"]
    p = run_pipeline(ex.build())
    for B in (1, 3, 7, 64):
        env = {"B": B}
        tables = schedule(build_tables(bind(p, env)), "static", 132)
        inputs = ex.make_inputs(env, B)
        out = run(tables, inputs, seed=B).tensors["Y2"]
        assert out.shape == (B, 32)
        ex.check({"Y2": out}, inputs, env)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("experts", [4, 8, 16])
@pytest.mark.parametrize("tokens", [8, 13, 64])
@pytest.mark.parametrize("skew", [False, True])
def test_moe_routing(mode, experts, tokens, skew):
    ex = moe.MOE
    env = {"T": tokens}
    inputs = moe.make_inputs(env, seed=tokens, experts=experts, skew=skew)
    tables = scheduled(moe.build(experts), env, mode, 6)
    for seed in range(6):
        res = run(tables, inputs, seed=seed)
        ex.check(res.tensors, inputs, env)
        counts = res.tensors["expert_counts"]
        assert counts.sum() == 2 * tokens
        if skew:
            assert counts[0] == counts[1] == tokens and (counts[2:] == 0).all()
        tiles = int(res.tensors["exp_indptr"][-1])
        ran = {r.task for r in res.records}
        gemm = tables.bound.grid_tasks("expert_gemm")
        assert sorted(t - gemm.start for t in ran if t in gemm) == list(range(tiles))


def _without_edge(p, index):
    return p.replace(edges=p.edges[:index] + p.edges[index + 1:])


def _wait_edges(p):
    return [i for i, e in enumerate(p.edges) if e.kind in ("wait", "trigger")]


@pytest.mark.parametrize("mode", ["static", "dynamic", "hybrid"])  # unfused: barriers order all
@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_removed_edge_is_caught_naming_both_tasks(name, mode):
    ex = EXAMPLES[name]
    full = ex.build()
    env = ex.bindings[-1]
    inputs = ex.make_inputs(env, 0)
    edges = _wait_edges(full)
    assert edges
    for i in edges:
        tables = scheduled(_without_edge(full, i), env, mode, 8)
        for seed in range(3):
            with pytest.raises(MissingDependencyError,
                               match=r"task \w+\([\d, ]*\) reads .* (before its producer "
                                     r"\w+\([\d, ]*\) wrote it|written by task \w+\([\d, ]*\))"):
                run(tables, inputs, seed=seed)


def test_missing_dependency_message_names_reader_and_producer():
    ex = EXAMPLES["splitk_rowsum"]
    full = ex.build()
    i = next(i for i, e in enumerate(full.edges) if e.kind == "wait")
    tables = schedule(build_tables(bind(run_pipeline(_without_edge(full, i)), {"n": 2})),
                      "dynamic", num_sms=4)
    with pytest.raises(MissingDependencyError) as info:
        run(tables, ex.make_inputs({"n": 2}, 0), seed=0)
    msg = str(info.value)
    assert "final_sum(" in msg and "partial_sum(" in msg and "partial[" in msg


@pytest.mark.parametrize("name, grid, event, text", [
    ("splitk_rowsum", "partial_sum", "E", "ij->i"),
    ("symbolic_batch", "gemm1_partial", "P2_ready", "bns->b, 0"),
    ("toy_moe", "router", "scanned", "t->"),
])
def test_cyclic_variant_rejected_by_validation(name, grid, event, text):
    from eventtensor.ir import Edge
    from eventtensor.maps import parse_map
    p = EXAMPLES[name].build()
    g = p.grid(grid)
    back = Edge(grid, event, "wait", parse_map(text, g.axes, axis_syms=g.coord_syms()))
    with pytest.raises(CycleError, match=rf"dependency cycle between task grids .*{grid}"):
        run_pipeline(p.replace(edges=p.edges + (back,)))


def test_interleavings_differ_but_results_agree():
    ex = EXAMPLES["symbolic_batch"]
    env = {"B": 7}
    tables = schedule(build_tables(bind(run_pipeline(ex.build()), env)), "static", 4)
    inputs = ex.make_inputs(env, 0)
    runs = [run(tables, inputs, seed=s) for s in range(5)]
    orders = {tuple(r.task for r in res.records) for res in runs}
    assert len(orders) > 1
    for res in runs[1:]:
        assert np.array_equal(res.tensors["Y2"], runs[0].tensors["Y2"])
