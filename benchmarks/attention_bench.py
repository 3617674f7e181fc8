"""Decode attention tile bodies in the megakernel, without events: one grid of independent
decode_attention tasks, (token b, KV chunk c, KV head h) for B tokens each at the last
position of a bf16 KV cache of `keys` positions, so the time is the tile body alone. Side by
side in one process: torch's scaled_dot_product_attention (bf16, GQA) over the same cache,
then each tile configuration, with the floor (the KV cache read once at the copy bandwidth).

    PYTHONPATH=src python3 benchmarks/attention_bench.py --out DIR --batch 64 --keys 512 \
        --configs "chunk=512" "chunk=128" "chunk=512,ET_ATTN_STREAM=16"

A configuration: `chunk` positions a tile (KV chunks of the cache; the default, 0, is one
chunk of all `keys`), `ctas` CTAs per SM, and any device-library knob as ET_NAME=N. Each
configuration's output, its chunks merged by their log-sum-exp, is checked against torch's
(fp32) before it is timed; a profiled launch gives the median task body. Writes
attention_bench.json and attention_bench.md.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
import tile_configs  # noqa: E402

from eventtensor import ProgramBuilder  # noqa: E402

KEYS = {"chunk": 0, "ctas": 1}


def parse_config(text: str) -> dict[str, int]:
    """`text` "key=value,..." over KEYS (chunk, ctas) and device-library knobs ET_NAME=N
    (codegen.KNOBS)."""
    return tile_configs.parse_config(text, KEYS)


def attention_program(batch: int, heads: int, kv_heads: int, head_dim: int, keys: int,
                      chunk: int):
    """One grid of decode_attention tasks t = (b*NC + c)*K + h over NC = keys / chunk KV
    chunks: token b (position keys - 1, its key and value the new ones k_new, v_new) of
    request b (cache rows [b, h]). One chunk: out [B, H*D] is the attention output; more:
    out [B, H, NC, D] and lse [B, H, NC] the chunks' partials."""
    if chunk < 1 or keys % chunk or heads % kv_heads:
        raise SystemExit(f"chunk={chunk} must divide keys={keys} and kv_heads={kv_heads} "
                         f"heads={heads}")
    K, D, G, NC = kv_heads, head_dim, heads // kv_heads, keys // chunk
    GD, NK = G * D, NC * K
    b, c, h = f"(t // {NK})", f"((t // {K}) % {NC})", f"(t % {K})"
    pb = ProgramBuilder(f"attention_c{chunk}")
    pb.input("q", (batch, heads * D))
    for kv in "kv":
        pb.input(f"{kv}_cache", (batch, K, keys, D), "bfloat16")
        pb.input(f"{kv}_new", (batch, K * D))
    pb.input("positions", (batch,), "int32")
    if NC == 1:
        pb.output("out", (batch, heads * D))
        out_region = f"{b}, {GD}*{h}:{GD}*{h} + {GD}"
    else:
        pb.output("out", (batch, heads, NC, D))
        out_region = f"{b}, {G}*{h}:{G}*{h} + {G}, {c}, :"
    pb.output("lse", (batch, heads, NC))
    cache = f"{b}, {h}, {chunk}*{c}:{chunk}*{c} + {chunk}, :"
    new = f"{b}:{b} + 1, {D}*{h}:{D}*{h} + {D}"
    pb.grid("attn", "decode_attention", "t", (batch * NK,),
            reads={"q": f"{b}, {GD}*{h}:{GD}*{h} + {GD}", "k_cache": cache, "v_cache": cache,
                   "k_new": new, "v_new": new, "positions": b},
            writes={"out": out_region, "lse": f"{b}, {G}*{h}:{G}*{h} + {G}, {c}"},
            params={"q": "q", "k_cache": "k_cache", "v_cache": "v_cache", "k_new": "k_new",
                    "v_new": "v_new", "pos": "positions", "out": "out", "lse": "lse",
                    "chunk": chunk, "chunks": NC, "kv_heads": K})
    return pb.build()


def merged(out: np.ndarray, lse: np.ndarray, heads: int, head_dim: int) -> np.ndarray:
    """The attention output [B, H*D] of a run's out and lse: out itself for one chunk, else
    the chunks' partials weighted by exp(lse - logsumexp over the chunks)."""
    if out.ndim == 2:
        return out
    w = np.exp(lse - lse.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    return (out * w[..., None]).sum(-2).reshape(out.shape[0], heads * head_dim)


def body_and_setup_us(prof) -> tuple[np.ndarray, np.ndarray]:
    """Per task that ran in a profiled launch (`Profile`), in µs: its body (waits satisfied
    to the barrier after the body) and of it the setup (to thread 0 entering the body)."""
    t = prof.tasks[prof.ran].astype(np.int64)
    entered = prof.entered[prof.ran].astype(np.int64)
    return (t[:, 3] - t[:, 1]) / 1e3, (entered - t[:, 1]) / 1e3


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="llama-3.2-1b", help="its heads, KV heads, head dim")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--keys", type=int, default=512)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--configs", nargs="+", default=["chunk=0"])
    ap.add_argument("--out", default="benchmarks/results")
    args = ap.parse_args(argv)
    import torch
    from decode_bench import measure_copy_gb_s, run_meta, time_ms, write_run

    from eventtensor.backends.cuda.runtime import Megakernel
    from eventtensor.models import get_config
    if not torch.cuda.is_available():
        raise SystemExit("attention_bench needs a CUDA GPU")
    cfg = get_config(args.model)
    H, K, D = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    configs = [(text, parse_config(text)) for text in args.configs]

    def program(c):
        return attention_program(args.batch, H, K, D, args.keys, c["chunk"] or args.keys)

    knobs = tile_configs.named_knobs
    tile_configs.compile_static("attention_bench",
                                [(program(c), c["ctas"], knobs(c)) for _, c in configs])
    gen = torch.Generator(device="cuda").manual_seed(0)
    B, C = args.batch, args.keys
    inputs = {"q": torch.randn(B, H * D, generator=gen, device="cuda"),
              "positions": torch.full((B,), C - 1, dtype=torch.int32, device="cuda")}
    for kv in "kv":
        inputs[f"{kv}_cache"] = torch.randn(B, K, C, D, generator=gen,
                                            device="cuda").to(torch.bfloat16)
        inputs[f"{kv}_new"] = torch.randn(B, K * D, generator=gen, device="cuda")
    # torch's reference: the cache with the new rows at the last position, bf16 values
    full = {}
    for kv in "kv":
        full[kv] = inputs[f"{kv}_cache"].float().clone()
        full[kv][:, :, C - 1] = inputs[f"{kv}_new"].view(B, K, D)
    q4 = inputs["q"].view(B, H, 1, D)
    want = torch.nn.functional.scaled_dot_product_attention(
        q4, full["k"], full["v"], enable_gqa=True).reshape(B, H * D)
    ref = want.cpu().numpy()
    copy_gb_s = measure_copy_gb_s()
    floor_ms = 2 * B * K * C * D * 2 / copy_gb_s / 1e6  # K and V read once, bf16
    qb, kb, vb = q4.to(torch.bfloat16), full["k"].to(torch.bfloat16), full["v"].to(torch.bfloat16)
    torch_ms = time_ms(lambda: torch.nn.functional.scaled_dot_product_attention(
        qb, kb, vb, enable_gqa=True), args.iters, warmup=3)
    rows = [{"config": "torch sdpa bf16", "ms": torch_ms, "floor_ms": floor_ms}]
    print(f"[attention_bench] torch {torch_ms:.3f} ms, floor {floor_ms:.3f} ms",
          file=sys.stderr, flush=True)
    for text, c in configs:
        mk = Megakernel(program(c), "static", ctas_per_sm=c["ctas"], knobs=knobs(c))
        st = mk.launch({}, inputs)
        mk.sync(st)
        got = merged(*(st.arrays["tensors"][n].float().cpu().numpy() for n in ("out", "lse")),
                     H, D)
        err = float(np.abs(got - ref).max() / np.abs(ref).max())
        ms = time_ms(lambda mk=mk, st=st: mk.relaunch(st), args.iters, warmup=3)
        prof_st = mk.launch({}, inputs, profile=True)
        mk.sync(prof_st)
        prof = mk.profile(prof_st)
        body, setup = body_and_setup_us(prof)
        row = {"config": text, **c, "ms": ms, "floor_ms": floor_ms, "err": err,
               "tasks": int(prof.ran.size), "body_us_median": statistics.median(body),
               "setup_us_median": statistics.median(setup)}
        rows.append(row)
        print(f"[attention_bench] {text}: {ms:.3f} ms ({floor_ms / ms:.0%} of the floor), "
              f"body {row['body_us_median']:.2f} us (setup {row['setup_us_median']:.2f}), "
              f"err {err:.1e}", file=sys.stderr, flush=True)
        del mk
    meta = run_meta("attention_bench.py", argv, copy_gb_s=copy_gb_s, model=args.model,
                    batch=B, keys=C, heads=H, kv_heads=K, head_dim=D)
    write_run(args.out, "attention_bench", meta, rows, markdown(meta, rows))
    return 0


def markdown(meta: dict, rows: list[dict]) -> str:
    """The table of a run: per configuration its time, share of the floor, tasks, median
    task body and setup, and the error against torch's fp32 attention."""
    dash = "—"
    lines = [f"# Decode attention tiles: {meta['model']}, B = {meta['batch']}, {meta['keys']} "
             f"positions (H {meta['heads']}, K {meta['kv_heads']}, D {meta['head_dim']}, bf16 "
             "cache)", "", f"{meta['date']}, commit {meta['commit']}, {meta['gpu']}. Command: "
             f"`{meta['command']}`", "",
             f"Floor: {rows[0]['floor_ms']:.3f} ms (keys and values read once at the measured "
             f"copy bandwidth, {meta['copy_gb_s']:.0f} GB/s read + write).", "",
             "| config | tasks | ms | floor / ms | median body µs | median setup µs "
             "| max err / scale |", "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        ours = "tasks" in r
        cells = [str(r["tasks"]) if ours else dash, f"{r['ms']:.3f}",
                 f"{r['floor_ms'] / r['ms']:.0%}"]
        cells += [f"{r['body_us_median']:.2f}", f"{r['setup_us_median']:.2f}",
                  f"{r['err']:.1e}"] if ours else [dash, dash, dash]
        lines.append(f"| `{r['config']}` | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
