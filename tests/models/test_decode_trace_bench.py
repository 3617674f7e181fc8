"""The pure parts of benchmarks/decode_trace_bench.py: the per-kind summary of a trace and its
markdown."""
import runpy
from pathlib import Path

from eventtensor.trace import TaskSpan, Trace

BENCH = runpy.run_path(str(Path(__file__).resolve().parents[2] / "benchmarks" /
                           "decode_trace_bench.py"), run_name="decode_trace_bench")


def test_kind_summary_sums_body_time_per_kind():
    spans = [TaskSpan(0, "a(0)", "linear_partial", "a", 2.0, 5.0, 1.0),
             TaskSpan(1, "a(1)", "linear_partial", "a", 1.5, 2.5, 1.0),
             TaskSpan(0, "n(0)", "rms_norm", "n", 6.0, 7.0, 5.5)]
    rows = BENCH["kind_summary"](Trace("t", "measured", 2, spans))
    assert [r["kind"] for r in rows] == ["linear_partial", "rms_norm"]
    assert rows[0]["tasks"] == 2 and rows[0]["body_us"] == 4.0 and rows[0]["share"] == 0.8
    assert rows[1]["last_end_us"] == 6.0                   # from the first fetch at 1.0
    md = BENCH["markdown"]({"model": "m", "mode": "static", "context": 8, "date": "d",
                            "commit": "c", "gpu": "g", "command": "x"},
                           [{"batch": 1, "step_ms": 0.5, "profiled_ms": 0.6, "makespan_us": 6,
                             "ctas": 2, "busy": 0.4, "kinds": rows}])
    assert "| linear_partial | 2 | 4.0 | 80.0% | 4.0 |" in md and "## B = 1" in md
