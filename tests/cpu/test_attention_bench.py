"""The attention tile benchmark's pure parts on the CPU: its configurations and its program,
run on the interpreter against numpy attention (one KV chunk, and several merged by their
log-sum-exp), and the markdown of a run."""
import numpy as np
import pytest
from bench_modules import load_bench

from eventtensor import lower
from eventtensor.backends.cpu import run
from eventtensor.dtypes import round_to_dtype
from eventtensor.schedule import prepare


@pytest.fixture(scope="module")
def bench():
    yield from load_bench("attention_bench")


def test_configs_parse_and_name_bad_items(bench):
    assert bench.parse_config("chunk=128, ET_ATTN_STREAM=16") == {
        "chunk": 128, "ctas": 1, "ET_ATTN_STREAM": 16}
    with pytest.raises(SystemExit, match="'ET_NOPE=1' is not one of"):
        bench.parse_config("ET_NOPE=1")
    with pytest.raises(SystemExit, match="'rows=4' is not one of chunk=N, ctas=N"):
        bench.parse_config("rows=4")
    with pytest.raises(SystemExit, match="chunk=48 must divide keys=64"):
        bench.attention_program(2, 4, 2, 16, 64, 48)


def reference(q, k, v, heads):
    """softmax(q K^T / sqrt(D)) V per token and query head, GQA: q [B, H*D], k, v
    [B, K, C, D] (every position visible)."""
    B, K, C, D = k.shape
    qh = q.reshape(B, K, heads // K, D)
    scores = np.einsum("bkgd,bkcd->bkgc", qh, k) / np.sqrt(D)
    p = np.exp(scores - scores.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return np.einsum("bkgc,bkcd->bkgd", p, v).reshape(B, heads * D)


@pytest.mark.parametrize("chunk", [32, 8])
def test_program_is_decode_attention(bench, chunk):
    """Each token attends over its cache below the last position and its new key and value
    there; several chunks, merged by `merged`, give the same output."""
    B, H, K, D, C = 3, 4, 2, 16, 32
    rng = np.random.default_rng(chunk)
    q = rng.standard_normal((B, H * D)).astype(np.float32)
    cache = {kv: round_to_dtype("bfloat16", rng.standard_normal((B, K, C, D))
                                .astype(np.float32)) for kv in "kv"}
    new = {kv: rng.standard_normal((B, K * D)).astype(np.float32) for kv in "kv"}
    inputs = {"q": q, "positions": np.full(B, C - 1, np.int32),
              **{f"{kv}_cache": cache[kv] for kv in "kv"}, **{f"{kv}_new": new[kv] for kv in "kv"}}
    tables = lower(prepare(bench.attention_program(B, H, K, D, C, chunk), "static"), {},
                   mode="static", num_sms=4)
    got = run(tables, inputs, seed=0).tensors
    full = {kv: cache[kv].copy() for kv in "kv"}
    for kv in "kv":
        full[kv][:, :, C - 1] = new[kv].reshape(B, K, D)
    want = reference(q, full["k"], full["v"], H)
    assert got["out"].ndim == (2 if chunk == C else 4)
    np.testing.assert_allclose(bench.merged(got["out"], got["lse"], H, D), want, rtol=1e-4,
                               atol=1e-5)


def test_markdown_marks_what_torch_has_not(bench):
    meta = {"model": "m", "batch": 2, "keys": 64, "heads": 4, "kv_heads": 2, "head_dim": 16,
            "date": "2026-12-06", "commit": "abc", "gpu": "GPU",
            "command": "python3 benchmarks/attention_bench.py", "copy_gb_s": 4000.0}
    rows = [{"config": "torch sdpa bf16", "ms": 0.02, "floor_ms": 0.01},
            {"config": "chunk=0", "chunk": 0, "ctas": 1, "ms": 0.04, "floor_ms": 0.01,
             "err": 1e-6, "tasks": 4, "body_us_median": 20.0, "setup_us_median": 2.0}]
    md = bench.markdown(meta, rows)
    assert "| `torch sdpa bf16` | — | 0.020 | 50% | — | — | — |" in md
    assert "| `chunk=0` | 4 | 0.040 | 25% | 20.00 | 2.00 | 1.0e-06 |" in md
    assert "2026-12-06, commit abc, GPU" in md and "4000 GB/s" in md


@pytest.mark.parametrize("chunk", [512, 128])
def test_kernel_compiles_for_sm90a(bench, chunk, tmp_path, monkeypatch):
    """The benchmark's kernel (Llama-3.2-1B heads, one KV chunk or four) compiles with NVRTC
    for sm_90a, its attention on the fast path's instance for 4 query heads a KV head."""
    pytest.importorskip("cuda.bindings.nvrtc", reason="cuda-bindings not installed")
    from eventtensor.backends.cuda.codegen import generate, kernel_name
    from eventtensor.backends.cuda.compiler import compile_source
    monkeypatch.setenv("EVENTTENSOR_CACHE", str(tmp_path / "cache"))
    p = prepare(bench.attention_program(64, 32, 8, 64, 512, chunk), "static")
    src = generate(p, "static", 1, {"ET_ATTN_STREAM": 16})
    assert "#define ET_ATTN_GROUPS 16" in src  # (1 << 4)
    assert compile_source(src, kernel_name(p, "static")).cubin[:4] == b"\x7fELF"


def test_body_and_setup_come_from_the_profile_stamps(bench):
    """Body: waits satisfied (column 1) to the barrier after the body (column 3); setup:
    to thread 0 entering the body (`entered`); tasks that did not run are left out."""
    from eventtensor.backends.cuda.runtime import Profile
    tasks = np.array([[0, 1000, 4000, 9000, 9500, 9900], [0, 2000, 2500, 7000, 7100, 7200],
                      [0, 0, 0, 0, 0, 0]], np.uint64)
    prof = Profile(tasks=tasks, sm=np.zeros(3), cta=np.zeros((1, 4)), ran=np.array([0, 1]),
                   entered=np.array([3000, 2250, 0], np.uint64))
    body, setup = bench.body_and_setup_us(prof)
    np.testing.assert_allclose(body, [8.0, 5.0])
    np.testing.assert_allclose(setup, [2.0, 0.25])
