"""The decode benchmark's pure parts on the CPU: floor arithmetic, summaries, the report files,
the command line, and the transformers decode step with its cache copied into TorchDecoder."""
from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from eventtensor.models import get_config, random_weights

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from hf_models import hf_model  # noqa: E402

from eventtensor.models.torch_decode import TorchDecoder  # noqa: E402

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "decode_bench.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("decode_bench", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module              # dataclasses look their module up there
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


def test_weight_bytes_count_the_lm_head_not_the_gather(bench):
    tied, untied = get_config("llama-3.2-1b"), get_config("qwen3-8b")
    assert bench.weight_bytes_read(tied) == 2 * tied.num_params()     # the table is the head
    V, E = untied.vocab_size, untied.hidden_size
    assert bench.weight_bytes_read(untied) == 2 * (untied.num_params() - V * E)
    assert bench.weight_bytes_read(untied, itemsize=1) == untied.num_params() - V * E


def test_kv_bytes_and_flops(bench):
    cfg = get_config("llama-3.2-1b")
    assert bench.kv_bytes_read(cfg, 64, 1024) == 64 * 1024 * 16 * 8 * 64 * 2 * 2
    assert bench.kv_bytes_read(cfg, 1, 1) == cfg.kv_cache_bytes(1)
    weights = cfg.num_params()
    assert bench.step_flops(cfg, 2, 100) == 2 * 2 * weights + 4 * 2 * 16 * 32 * 64 * 100


def test_floor_takes_the_slower_bound(bench):
    cfg = get_config("llama-3.2-1b")
    f = bench.floor(cfg, 64, 1024, copy_gb_s=4000.0, matmul_tflops=800.0)
    nbytes = bench.weight_bytes_read(cfg) + bench.kv_bytes_read(cfg, 64, 1024)
    assert f.bytes == nbytes and math.isclose(f.memory_ms, nbytes / 4e12 * 1e3)
    assert math.isclose(f.compute_ms, bench.step_flops(cfg, 64, 1024) / 800e12 * 1e3)
    assert f.bound == "memory" and f.ms == f.memory_ms
    slow = bench.floor(cfg, 64, 1024, copy_gb_s=4000.0, matmul_tflops=1.0)
    assert slow.bound == "compute" and slow.ms == slow.compute_ms
    assert f.as_dict()["ms"] == f.ms and f.as_dict()["bound"] == "memory"


def make_report(bench) -> dict:
    cfg = get_config("llama-3.2-1b")

    def row(batch, context, ms, errors=None, notes=None):
        return {"batch": batch, "context": context,
                "floor": bench.floor(cfg, batch, context, 4000.0, 800.0).as_dict(),
                "ms": ms, "warmup_s": {p: 1.5 for p in ms},
                "compile_s": {"ours:mk": 30.0} if "ours:mk" in ms else {},
                "errors": errors or {},
                "notes": notes or {},
                "checks": {"torch-graph": {"rel_diff": 1e-3, "argmax_agree": 1.0}}}

    rows = [row(1, 512, {"hf-eager": 20.0, "torch-eager": 10.0, "torch-graph": 2.0,
                         "torch-compile": 1.6, "ours:mk": 0.8}),
            row(8, 512, {"hf-eager": 21.0, "torch-eager": 10.5, "torch-graph": 2.5},
                errors={"torch-compile": "RuntimeError: boom"}, notes={}),
            row(1, 1024, {"hf-eager": 20.0, "torch-eager": 10.0, "torch-graph": 2.2,
                          "ours:mk": 1.0},
                notes={"torch-compile": "skipped: the compile budget of 100 s is spent"})]
    return {"command": "python decode_bench.py --quick", "date": "2026-12-04T00:00:00+00:00",
            "commit": "abc1234", "gpu": "NVIDIA H200",
            "versions": {"torch": "2.11", "transformers": "5.17", "cuda": "13.0"},
            "model": "llama-3.2-1b", "iters": 10, "contexts": [512, 1024],
            "copy_gb_s": 4000.0, "matmul_tflops": 800.0,
            "weight_bytes": bench.weight_bytes_read(cfg),
            "paths": [*bench.PYTORCH_PATHS, "ours:mk"], "ours": ["ours:mk"],
            "hook": "eventtensor.models.gpu_decode.bench_paths",
            "compile": {"summary": "compiled for B in [1, 8]"}, "rows": rows}


def test_best_pytorch_and_ours_summary(bench):
    report = make_report(bench)
    first, second = report["rows"][:2]
    assert bench.best_pytorch(first["ms"]) == ("torch-compile", 1.6)
    assert bench.best_pytorch(second["ms"]) == ("torch-graph", 2.5)
    assert bench.best_pytorch({"ours:mk": 1.0}) is None
    share, speedup = bench.ours_summary(first, "ours:mk")
    assert math.isclose(share, first["floor"]["ms"] / 0.8) and math.isclose(speedup, 2.0)
    assert bench.ours_summary(second, "ours:mk") == (None, None)


def test_markdown_tables(bench):
    report = make_report(bench)
    text = bench.markdown_report(report)
    table = bench.context_table(report, 512).splitlines()
    assert table[0].startswith("| B | hf-eager | torch-eager | torch-graph | torch-compile | "
                               "ours:mk | floor | best PyTorch / floor | ours:mk / floor |")
    first = [c.strip() for c in table[2].strip("|").split("|")]
    floor_ms = report["rows"][0]["floor"]["ms"]
    assert first[:6] == ["1", "20.000", "10.000", "2.000", "1.600", "0.800"]
    assert first[6] == f"{floor_ms:.3f}"
    assert first[7] == f"torch-compile {floor_ms / 1.6:.0%}"
    assert first[8:] == [f"{floor_ms / 0.8:.0%}", "2.00×"]
    second = [c.strip() for c in table[3].strip("|").split("|")]
    assert second[4] == "error" and second[5] == "—" and second[-2:] == ["—", "—"]
    assert len(table) == 4                                   # header, rule, two batch sizes
    long_context = bench.context_table(report, 1024).splitlines()[2]
    assert "| skipped |" in long_context
    assert "## Context 512" in text and "## Context 1024" in text
    assert "RuntimeError: boom" in text and "compile budget" in text
    assert "| hf-eager | 4.50 | 1.50 | 3 |" in text
    assert "as the hook reports it: ours:mk 30.00 s." in text
    assert "| 1 | 512 | torch-graph | 1.00e-03 | 100% |" in text


def test_write_outputs(bench, tmp_path):
    report = make_report(bench)
    files = bench.write_outputs(report, tmp_path / "out")
    assert [f.name for f in files] == ["decode_bench.json", "decode_bench.md",
                                       "decode_bench.png"]
    assert json.loads(files[0].read_text()) == report
    assert files[1].read_text() == bench.markdown_report(report)
    assert files[2].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_of_a_partial_report(bench, tmp_path):
    """A run cut short after its first context still gets its picture (the second panel says
    it was not measured instead of failing on a log scale with no data)."""
    report = make_report(bench)
    report["rows"] = [r for r in report["rows"] if r["context"] == 512]
    path = tmp_path / "partial.png"
    bench.plot(report, path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_spread(bench):
    assert bench.spread([1, 2, 4, 8, 16, 32, 64], 3) == [1, 8, 64]
    assert bench.spread([1, 2, 4, 8, 16, 32, 64], 2) == [1, 64]
    assert bench.spread([4], 3) == [4] and bench.spread([2, 3], 3) == [2, 3]


def test_command_line(bench):
    quick = bench.parse_args(["--out", "x", "--quick", "--batches", "4,1,16"])
    assert quick.batches == [1, 4, 16] and quick.contexts == [512, 1024]
    assert quick.iters == 10 and quick.warmup == 3 and quick.compile_batches == [1, 16]
    full = bench.parse_args(["--out", "x", "--paths", "torch-eager,ours"])
    assert full.iters == 50 and full.compile_batches == [1, 8, 64]
    assert full.paths == ["torch-eager", "ours"] and full.compile_budget == 330.0
    assert full.compile_modes == ["max-autotune", "max-autotune-no-cudagraphs"]
    fallback = bench.parse_args(["--out", "x", "--compile-modes", "max-autotune-no-cudagraphs"])
    assert fallback.compile_modes == ["max-autotune-no-cudagraphs"]
    with pytest.raises(SystemExit):
        bench.parse_args(["--out", "x", "--compile-modes", "default"])
    with pytest.raises(SystemExit):
        bench.parse_args(["--out", "x", "--paths", "nope"])
    with pytest.raises(SystemExit):
        bench.parse_args(["--out", "x", "--contexts", "1"])


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen3"])
def test_hf_decode_step_and_cache_copy(bench, name):
    """The transformers step at a fixed context (prefill, step, crop back), and TorchDecoder
    continuing from the copied cache, agree (float32, CPU)."""
    cfg = get_config(name)
    weights = random_weights(cfg, seed=5, dtype="float32")
    model = hf_model(cfg, weights)
    gen = torch.Generator().manual_seed(0)
    prompt = torch.randint(cfg.vocab_size, (3, 6), generator=gen)
    tokens = torch.randint(cfg.vocab_size, (3,), generator=gen)
    with torch.no_grad():
        hf = bench.HFDecode(model, prompt, tokens)
        first = hf.step()
        hf.reset()
        again = hf.step()
        hf.reset()
    assert hf.layer_kv(0)[0].shape == (3, cfg.num_kv_heads, 6, cfg.head_dim)
    torch.testing.assert_close(again, first, rtol=0, atol=0)
    dec = TorchDecoder(cfg, weights, max_batch=4, max_context=16)
    bench.copy_cache(hf, dec)
    logits, greedy = dec.step(tokens, torch.full((3,), 6), context=7)
    check = bench.compare(logits, first)
    assert check["rel_diff"] < 1e-5 and check["argmax_agree"] == 1.0
    np.testing.assert_array_equal(greedy.numpy(), first.argmax(-1).numpy())


def test_bf16_transformers_model_agrees_at_long_context(bench):
    """bf16 transformers model (as the benchmark builds it) against TorchDecoder in bf16 after
    a 500-token prefill: RoPE at far positions needs float32 inverse frequencies."""
    cfg = get_config("tiny-llama")
    weights = {n: torch.from_numpy(w).bfloat16()
               for n, w in random_weights(cfg, seed=2).items()}
    model = bench.hf_model(cfg, weights, device="cpu")
    assert all(b.dtype == torch.float32 for n, b in model.named_buffers() if "inv_freq" in n)
    assert next(model.parameters()).dtype == torch.bfloat16
    gen = torch.Generator().manual_seed(1)
    prompt = torch.randint(cfg.vocab_size, (2, 500), generator=gen)
    tokens = torch.randint(cfg.vocab_size, (2,), generator=gen)
    with torch.no_grad():
        hf = bench.HFDecode(model, prompt, tokens)
        expected = hf.step()
    dec = TorchDecoder(cfg, weights, 2, 512, dtype=torch.bfloat16)
    bench.copy_cache(hf, dec)
    logits, _ = dec.step(tokens, torch.full((2,), 500), context=501)
    # 0.0085 here; 0.023 with the inverse frequencies rounded to bf16
    assert bench.compare(logits, expected)["rel_diff"] < 0.015
