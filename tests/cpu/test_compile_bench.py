"""benchmarks/compile_bench.py on a tiny model: a cold build in a fresh process runs every
phase, a warm one in another process takes everything from the caches."""
import json
import runpy
from pathlib import Path

import pytest

pytest.importorskip("cuda.bindings.nvrtc", reason="cuda-bindings not installed")
BENCH = runpy.run_path(str(Path(__file__).resolve().parents[2] / "benchmarks" /
                           "compile_bench.py"), run_name="compile_bench")


def test_cold_then_warm_build_of_a_tiny_decode_kernel(tmp_path):
    BENCH["main"](["--model", "tiny-llama", "--max-batch", "4", "--max-context", "64",
                   "--num-ctas", "8", "--batches", "1,4", "--fast-compile", "max",
                   "--fast-compile", "separate", "--out", str(tmp_path)])
    report = json.loads((tmp_path / "compile_bench.json").read_text())
    runs = report["rows"]
    cold, warm = runs["cold"], runs["warm"]
    fast, separate = runs["cold, fast_compile=max"], runs["cold, fast_compile=separate"]
    assert {"prepare", "validate", "generate", "template", "compile"} <= set(cold["seconds"])
    assert not cold["cubin_cached"] and warm["cubin_cached"]
    for own in (fast, separate):  # each its own empty cache
        assert not own["cubin_cached"] and "generate" in own["seconds"]
    assert not {"prepare", "validate", "generate", "template", "compile"} & set(
        warm["seconds"])
    assert warm["seconds"]["build"] < cold["seconds"]["build"]
    assert set(warm["first_launch_s"]) == {"1", "4"}
    md = (tmp_path / "compile_bench.md").read_text()
    for row in ("| cold |", "| warm |", "| cold, fast_compile=max |",
                "| cold, fast_compile=separate |", "| B | 1 | 4 |"):
        assert row in md
    assert report["meta"]["toolchain"].startswith("NVRTC 1")
    assert f"{report['meta']['toolchain']}. Command:" in md
