"""The linear streaming benchmark's pure parts on the CPU: its configurations and its
program, run on the interpreter against numpy, and the markdown of a run."""
import numpy as np
import pytest
from bench_modules import load_bench

from eventtensor import lower
from eventtensor.backends.cpu import run
from eventtensor.dtypes import round_to_dtype
from eventtensor.schedule import prepare


@pytest.fixture(scope="module")
def bench():
    yield from load_bench("linear_bench")


def test_configs_parse_and_name_bad_items(bench):
    assert bench.parse_config("rows=32, ring=196608") == {"rows": 32, "split": 1,
                                                          "ring": 196608, "ctas": 1, "mma": 0}
    assert bench.config_knobs(bench.parse_config("mma=8,ring=4096")) == {
        "ET_STAGE_BYTES": 4096, "ET_LINEAR_MMA": 8}
    assert bench.config_knobs(bench.parse_config("rows=32")) == {}
    assert bench.config_knobs(bench.parse_config("mma=8,ET_LINEAR_MMA_LO=0")) == {
        "ET_LINEAR_MMA": 8, "ET_LINEAR_MMA_LO": 0}
    with pytest.raises(SystemExit, match="'ET_NOPE=1' is not one of"):
        bench.parse_config("ET_NOPE=1")
    with pytest.raises(SystemExit, match="'cols=4' is not one of rows=N, split=N"):
        bench.parse_config("cols=4")
    with pytest.raises(SystemExit, match="rows=24 must divide N=256"):
        bench.linear_program(256, 64, 1, 24, 1)


@pytest.mark.parametrize("rows, split", [(16, 1), (64, 4)])
def test_program_is_x_times_w_transposed(bench, rows, split):
    """Summed over its split, the program's output is x @ W^T (bf16 W)."""
    rng = np.random.default_rng(rows)
    x = rng.standard_normal((2, 64)).astype(np.float32)
    w = round_to_dtype("bfloat16", rng.standard_normal((256, 64)).astype(np.float32))
    tables = lower(prepare(bench.linear_program(256, 64, 2, rows, split), "static"), {},
                   mode="static", num_sms=4)
    out = run(tables, {"x": x, "w": w}, seed=0).tensors["out"]
    assert out.shape == (split, 2, 256)
    np.testing.assert_allclose(out.sum(0), x @ w.T, rtol=1e-5, atol=1e-5)


def test_markdown_marks_what_torch_has_not(bench):
    meta = {"n": 4, "k": 8, "batch": 1, "date": "2026-12-04", "commit": "abc", "gpu": "GPU",
            "command": "python3 benchmarks/linear_bench.py", "copy_gb_s": 4000.0}
    rows = [{"config": "torch bf16 linear", "ms": 0.07, "floor_ms": 0.063},
            {"config": "rows=16", "ms": 0.126, "floor_ms": 0.063, "tile_kb": 64, "tasks": 8,
             "body_us_median": 2.0, "wait_us_median": 1.0, "err": 2e-7}]
    text = bench.markdown(meta, rows)
    assert "| `torch bf16 linear` | — | — | 0.070 | 90% | — | — | — |" in text
    assert "| `rows=16` | 64 | 8 | 0.126 | 50% | 2.00 | 1.00 | 2.0e-07 |" in text
