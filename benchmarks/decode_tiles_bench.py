"""Decode step time of the megakernel under several tile configurations, side by side in one
process, with each configuration's summed task-body time per kind (from one profiled step).

    PYTHONPATH=src python3 benchmarks/decode_tiles_bench.py --model llama-3.2-1b \
        --batches 1,16 --context 512 --tiles "" --tiles "norm_rows=8,residual_tile=256" \
        --out DIR

Each --tiles is "field=value,..." over the H200 defaults (`gpu_tiles`; "" is the defaults
themselves); its items ET_*=N set device-library knobs (over the decode session's own,
`gpu_decode.DECODE_KNOBS`), ctas_per_sm=N the CTAs per SM, fast_compile=LEVEL the
compile's trade (`compiler.FAST_COMPILE`: separate, min, mid, max) and policy=NAME the
static schedule's policy.
Every configuration gets its own compiled kernel over the same random weights and caches
(the position-context - 1 layout of decode_bench.py), the step time is the median of --iters
CUDA-event-timed launches, and the memory floor (weights plus KV bytes over the measured copy
bandwidth) stands beside it; each step's logits and picks are compared with the first
configuration's. Writes decode_tiles.json and decode_tiles.md.
"""
from __future__ import annotations

import sys
from dataclasses import asdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from decode_trace_bench import (  # noqa: E402
    kind_summary,
    profile_tasks,
    split_config,
    step_args,
)

from eventtensor.models import get_config  # noqa: E402


def markdown(meta: dict, rows: list[dict]) -> str:
    """One row per (configuration, batch): step time, its share of the floor, and the
    three kinds with the most summed body time."""
    lines = [f"# Decode tile configurations: {meta['model']}, {meta['mode']} mode, context "
             f"{meta['context']}", "",
             f"{meta['date']}, commit {meta['commit']}, {meta['gpu']}. Command: "
             f"`{meta['command']}`", "",
             "The last two columns compare the step's logits and picks with those of the "
             "first configuration at the same B (same weights, caches and tokens).", "",
             "| tiles | B | step ms | floor ms | floor / step | top body sums (µs) "
             "| logit diff / scale | same picks |",
             "|---|---:|---:|---:|---:|---|---:|---:|"]
    for r in rows:
        top = ", ".join(f"{k['kind']} {k['body_us']:.0f}" for k in r["kinds"][:3])
        lines.append(f"| `{r['tiles_text'] or 'defaults'}` | {r['batch']} | {r['step_ms']:.3f} "
                     f"| {r['floor_ms']:.3f} | {r['floor_ms'] / r['step_ms']:.0%} | {top} "
                     f"| {r['logit_err']:.1e} | {r['same_picks']:.0%} |")
    return "\n".join(lines) + "\n"


def measure(session, batch: int, context: int, iters: int, time_ms):
    """(median step ms, per-kind body summary of one profiled step, the first step's logits
    and picks) of `batch` requests at position context - 1 of their own cache slots."""
    kernel = session.kernel
    tokens = np.random.default_rng(batch).integers(0, session.config.vocab_size, batch)
    session.set_requests(tokens, np.full(batch, context - 1), np.arange(batch))
    st = session.launch(batch)
    kernel.sync(st)
    out = st.arrays["tensors"]
    logits, picks = out["logits"].float().clone(), out["next_tokens"].cpu().numpy().copy()
    step = time_ms(lambda: kernel.relaunch(st), iters, warmup=3)
    prof = kernel.launch({"B": batch}, session.feed(batch), profile=True)
    kernel.sync(prof)
    kinds = kind_summary(profile_tasks(kernel.program, prof.tables.bound, kernel.profile(prof)))
    return step, kinds, logits, picks


def agreement(logits, picks, first) -> dict:
    """How a configuration's step output compares with the first configuration's at the same
    batch (same weights, caches and tokens): the largest logit difference over the first's
    largest logit magnitude, and the share of equal picks."""
    ref_logits, ref_picks = first
    scale = float(ref_logits.abs().max())
    return {"logit_err": float((logits - ref_logits).abs().max()) / scale,
            "same_picks": float(np.mean(picks == ref_picks))}


def main(argv: list[str] | None = None) -> int:
    ap = step_args(__doc__.split("\n\n")[0])
    ap.add_argument("--tiles", action="append", help="field=value,... over gpu_tiles (repeat)")
    args = ap.parse_args(argv)
    import torch
    from decode_bench import floor, measure_copy_gb_s, run_meta, time_ms, write_run

    from eventtensor.models.gpu_decode import GpuDecodeSession, gpu_tiles, precompile
    from eventtensor.models.weights import random_weights_on_gpu
    if not torch.cuda.is_available():
        raise SystemExit("decode_tiles_bench needs a CUDA GPU")
    cfg = get_config(args.model)
    batches = sorted({int(b) for b in args.batches.split(",")})
    max_batch, max_context = max(args.max_batch, *batches), max(args.max_context, args.context)
    base = gpu_tiles(cfg, max_batch)
    configs = [(text, *split_config(base, text)) for text in (args.tiles or [""])]
    count = precompile(cfg, max_batch, max_context,
                       [(tiles, args.mode, kernel) for _, tiles, kernel in configs])
    print(f"[decode_tiles] {count} kernels compiled", file=sys.stderr, flush=True)
    weights = random_weights_on_gpu(cfg, seed=0)
    copy_gb_s = measure_copy_gb_s()
    rows, first = [], {}
    meta = run_meta("decode_tiles_bench.py", argv, model=args.model, mode=args.mode,
                    context=args.context, copy_gb_s=copy_gb_s)
    for text, tiles, kernel in configs:
        print(f"[decode_tiles] {args.model} tiles {text or 'defaults'}", file=sys.stderr,
              flush=True)
        session = GpuDecodeSession(cfg, weights, max_batch, max_context, tiles, mode=args.mode,
                                   **kernel)
        session.fill_caches(seed=0)
        for b in batches:
            step, kinds, logits, picks = measure(session, b, args.context, args.iters, time_ms)
            first.setdefault(b, (logits, picks))
            fl = floor(cfg, b, args.context, copy_gb_s, float("inf"))
            rows.append({"tiles_text": text, "tiles": asdict(tiles), "batch": b,
                         "step_ms": step, "floor_ms": fl.memory_ms,
                         "compile_s": session.compile_s, "kinds": kinds,
                         **agreement(logits, picks, first[b])})
            print(f"[decode_tiles]   B={b}: {step:.3f} ms (floor {fl.memory_ms:.3f} ms)",
                  file=sys.stderr, flush=True)
        del session
        torch.cuda.empty_cache()
        # after every configuration, so that a run cut short keeps the ones it measured
        write_run(args.out, "decode_tiles", meta, rows, markdown(meta, rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
