"""The pure parts of benchmarks/decode_trace_bench.py: the per-kind summary of a trace and its
markdown."""
import runpy
from pathlib import Path

import numpy as np

BENCH = runpy.run_path(str(Path(__file__).resolve().parents[2] / "benchmarks" /
                           "decode_trace_bench.py"), run_name="decode_trace_bench")


def test_kind_summary_sums_body_time_per_kind():
    rows = BENCH["kind_summary"]([("linear_partial", 3.0, 4.0), ("linear_partial", 1.0, 1.5),
                                  ("rms_norm", 1.0, 6.0)])
    assert [r["kind"] for r in rows] == ["linear_partial", "rms_norm"]
    assert rows[0]["tasks"] == 2 and rows[0]["body_us"] == 4.0 and rows[0]["share"] == 0.8
    assert rows[1]["last_end_us"] == 6.0
    md = BENCH["markdown"]({"model": "m", "mode": "static", "context": 8, "date": "d",
                            "commit": "c", "gpu": "g", "command": "x"},
                           [{"batch": 1, "step_ms": 0.5, "profiled_ms": 0.6, "makespan_us": 6,
                             "ctas": 2, "busy": 0.4, "kinds": rows,
                             "stalls": {"body_us": 6.0, "event_us": 3.0, "other_us": 1.0,
                                        "event_by_producer": {"rms_norm": 3.0},
                                        "other_by_task": {"linear_partial": 1.0}}}])
    assert "| linear_partial | 2 | 4.0 | 80.0% | 4.0 |" in md and "## B = 1" in md
    assert "bodies 6 (60%), waiting on events 3 (30%)" in md
    assert "| rms_norm | 3 | | linear_partial | 1 |" in md


def test_layer_stages_order_one_layers_grids_by_first_start():
    rows = BENCH["layer_stages"]([("l1_q_proj", 10.0, 14.0, 1.0, 2.0, 4.0),
                                  ("l1_norm", 2.0, 8.0, 3.0, 1.0, 0.0),
                                  ("l1_q_proj", 12.0, 20.0, 0.0, 1.0, 1.0),
                                  ("l10_q_proj", 0.0, 1.0, 0.0, 0.0, 0.0),
                                  ("l2_norm", 1.0, 2.0, 0.0, 0.0, 0.0)], 1)
    assert [r["grid"] for r in rows] == ["l1_norm", "l1_q_proj"]
    q = rows[1]
    assert (q["tasks"], q["start_us"], q["end_us"], q["span_us"]) == (2, 10.0, 20.0, 10.0)
    assert q["body_us"] == 6.0 and q["setup_us"] == 0.5 and q["publish_us"] == 1.5
    assert q["ready_us"] == 2.5
    md = BENCH["markdown"]({"model": "m", "mode": "static", "context": 8, "date": "d",
                            "commit": "c", "gpu": "g", "command": "x"},
                           [{"batch": 1, "step_ms": 0.5, "profiled_ms": 0.6, "makespan_us": 6,
                             "ctas": 2, "busy": 0.4, "kinds": [], "layer_index": 1,
                             "layer": rows,
                             "stalls": {"body_us": 6.0, "event_us": 3.0, "other_us": 1.0,
                                        "event_by_producer": {}, "other_by_task": {}}}])
    assert "| l1_q_proj | 2 | 10.0 | 20.0 | 10.0 | 6.00 | 0.50 | 1.50 | 2.50 |" in md


def test_stall_summary_splits_a_cta_time_into_bodies_event_waits_and_the_rest():
    """Split-K row sum, n = 1 on 2 CTAs: CTA 0 runs partial (0, 0), then the final sum, whose
    last producer (on CTA 1) notifies 20 µs after CTA 0 finished its partial; the final sum's
    waits end 2 µs later. CTA 1 starts its first partial 1 µs after its fetch."""
    from types import SimpleNamespace

    from eventtensor.examples import EXAMPLES
    from eventtensor.schedule import lower
    tables = lower(EXAMPLES["splitk_rowsum"].build(), {"n": 1}, mode="static", num_sms=2)
    b = tables.bound
    ids = {b.task_name(t): t for t in range(b.num_tasks)}
    us = 1000  # the stamps are ns
    stamps = {  # task: (SM, fetched, waited, barrier, notified) in µs
        "partial_sum(0, 0)": (0, 0, 1, 10, 11),
        "final_sum(0)": (0, 10, 32, 40, 41),
        "partial_sum(0, 1)": (1, 0, 1, 5, 6),
        "partial_sum(0, 2)": (1, 5, 5, 12, 13),
        "partial_sum(0, 3)": (1, 12, 12, 29, 30)}
    tasks = np.zeros((b.num_tasks, 6), np.int64)
    sm = np.zeros(b.num_tasks, np.int64)
    for name, (s, f, w, bar, n) in stamps.items():
        t = ids[name]
        sm[t], tasks[t] = s, [f * us, w * us, bar * us, bar * us, n * us, n * us]
    prof = SimpleNamespace(tasks=tasks, sm=sm, ran=np.arange(b.num_tasks),
                           entered=tasks[:, 1])
    done = BENCH["element_done"](tables, prof)
    got = BENCH["stall_summary"](tables, prof, [b.program.grids[g].kind
                                                for g in b.task_grid], done)
    assert got["body_us"] == 9 + 8 + 4 + 7 + 17
    assert got["event_us"] == 20 and got["event_by_producer"] == {"row_sum": 20}
    assert got["other_us"] == 1 + 2 + 1  # the first waits of each CTA, the final's 2 µs
    assert got["other_by_task"] == {"row_sum": 4}
    # ready: from the later of the fetch and the last producer's notify (30 µs for the final
    # sum) to the waits satisfied
    ready = {b.task_name(t): r[5] for t, r in zip(prof.ran, BENCH["stage_rows"](
        b.program, tables, prof, done[0]))}
    assert ready == {"partial_sum(0, 0)": 1, "final_sum(0)": 2, "partial_sum(0, 1)": 1,
                     "partial_sum(0, 2)": 0, "partial_sum(0, 3)": 0}


def test_tiles_bench_markdown_row():
    tiles = runpy.run_path(str(Path(__file__).resolve().parents[2] / "benchmarks" /
                               "decode_tiles_bench.py"), run_name="decode_tiles_bench")
    kinds = BENCH["kind_summary"]([("linear_partial", 30.0, 4.0), ("rms_norm", 10.0, 6.0)])
    md = tiles["markdown"]({"model": "m", "mode": "static", "context": 8, "date": "d",
                            "commit": "c", "gpu": "g", "command": "x"},
                           [{"tiles_text": "", "batch": 1, "step_ms": 0.5, "floor_ms": 0.25,
                             "kinds": kinds, "logit_err": 0.0, "same_picks": 1.0},
                            {"tiles_text": "norm_rows=8", "batch": 16, "step_ms": 1.0,
                             "floor_ms": 0.3, "kinds": kinds, "logit_err": 0.0123,
                             "same_picks": 0.75}])
    assert ("| `defaults` | 1 | 0.500 | 0.250 | 50% | linear_partial 30, rms_norm 10 "
            "| 0.0e+00 | 100% |") in md
    assert "| `norm_rows=8` | 16 | 1.000 | 0.300 | 30% |" in md and "| 1.2e-02 | 75% |" in md


def test_tiles_bench_compares_each_configuration_with_the_first():
    import torch
    tiles = runpy.run_path(str(Path(__file__).resolve().parents[2] / "benchmarks" /
                               "decode_tiles_bench.py"), run_name="decode_tiles_bench")
    ref = (torch.tensor([[1.0, -4.0], [2.0, 0.5]]), np.array([0, 0]))
    got = tiles["agreement"](torch.tensor([[1.0, -3.0], [2.0, 0.5]]), np.array([0, 1]), ref)
    assert got == {"logit_err": 0.25, "same_picks": 0.5}
    from eventtensor.models.decode import DecodeTiles
    tiles_of, kernel = tiles["split_config"](DecodeTiles(), "ET_WEIGHTS_EVICT_FIRST=1, "
                                             "norm_rows=8,ctas_per_sm=2,"
                                             "policy=critical_path_sinks_last")
    assert tiles_of == DecodeTiles(norm_rows=8)
    assert kernel == {"ctas_per_sm": 2, "policy": "critical_path_sinks_last",
                      "knobs": {"ET_WEIGHTS_EVICT_FIRST": 1}}
