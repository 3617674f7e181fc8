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
                             "ctas": 2, "busy": 0.4, "kinds": rows}])
    assert "| linear_partial | 2 | 4.0 | 80.0% | 4.0 |" in md and "## B = 1" in md


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
                                             "norm_rows=8,ctas_per_sm=2")
    assert tiles_of == DecodeTiles(norm_rows=8)
    assert kernel == {"ctas_per_sm": 2, "knobs": {"ET_WEIGHTS_EVICT_FIRST": 1}}
