"""Weight streaming of the linear_partial tile bodies in the megakernel, without events:
one grid of independent tasks reads a bf16 weight matrix W [N, K] once (x [B, K] float32),
so the time is the tile body and the weight prefetch alone. Side by side in one process:
torch's bf16 GEMV on the same W, then each tile configuration, with the copy-bandwidth floor.

    PYTHONPATH=src python3 benchmarks/linear_bench.py --out DIR \
        --configs "rows=16,split=1,ring=196608" "rows=256,split=16,ring=0"

A configuration: `rows` weight rows a task (its output columns), `split` K split into that
many chunks (a task per chunk), `ring` the stage ring's bytes (knob ET_STAGE_BYTES; 0: L2
prefetch of the next task's tile), `ctas` CTAs per SM, `mma` the fewest rows of x that go to
tensor cores (knob ET_LINEAR_MMA; 0: none), and any device-library knob as ET_NAME=N (e.g.
x rounded to bf16 on tensor cores, ET_LINEAR_MMA_LO=0). Each configuration's output is
checked against torch's (fp32) before it is timed; a profiled launch gives the median task
body and where the CTAs' time goes. Writes linear_bench.json and linear_bench.md.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import tile_configs  # noqa: E402

from eventtensor import ProgramBuilder  # noqa: E402

KEYS = {"rows": 16, "split": 1, "ring": 0, "ctas": 1, "mma": 0}


def parse_config(text: str) -> dict[str, int]:
    """`text` "key=value,..." over KEYS (rows, split, ring, ctas, mma) and device-library
    knobs ET_NAME=N (codegen.KNOBS)."""
    return tile_configs.parse_config(text, KEYS)


def config_knobs(c: dict[str, int]) -> dict[str, int]:
    """The device-library knobs of configuration `c`: its ring and tensor-core threshold,
    and the knobs it names."""
    return {**({"ET_STAGE_BYTES": c["ring"]} if c["ring"] else {}),
            **({"ET_LINEAR_MMA": c["mma"]} if c["mma"] else {}),
            **tile_configs.named_knobs(c)}


def linear_program(n: int, k: int, batch: int, rows: int, split: int):
    """One grid of linear_partial tasks (1, n / rows, split): out[s, :, cols] = x[:, chunk s]
    @ W[cols, chunk s]^T, no events."""
    if n % rows or k % split:
        raise SystemExit(f"rows={rows} must divide N={n} and split={split} K={k}")
    c = k // split
    pb = ProgramBuilder(f"linear_r{rows}_s{split}")
    pb.input("x", (batch, k))
    pb.input("w", (n, k), "bfloat16")
    pb.output("out", (split, batch, n))
    pb.grid("linear", "linear_partial", "mns", (1, n // rows, split),
            reads={"x": f":, {c}*s:{c}*s + {c}", "w": f"{rows}*n:{rows}*n + {rows}, "
                   f"{c}*s:{c}*s + {c}"},
            writes={"out": f"s, :, {rows}*n:{rows}*n + {rows}"}, params={"x": "x", "w": "w"})
    return pb.build()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=65536)
    ap.add_argument("--k", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--configs", nargs="+", default=["rows=16,split=1,ring=196608"])
    ap.add_argument("--out", default="benchmarks/results")
    args = ap.parse_args(argv)
    import torch
    from decode_bench import measure_copy_gb_s, run_meta, time_ms, write_run

    from eventtensor.backends.cuda.runtime import Megakernel
    if not torch.cuda.is_available():
        raise SystemExit("linear_bench needs a CUDA GPU")
    configs = [(text, parse_config(text)) for text in args.configs]
    tile_configs.compile_static("linear_bench", [
        (linear_program(args.n, args.k, args.batch, c["rows"], c["split"]), c["ctas"],
         config_knobs(c)) for _, c in configs])
    gen = torch.Generator(device="cuda").manual_seed(0)
    w = torch.randn(args.n, args.k, generator=gen, device="cuda").to(torch.bfloat16)
    x = torch.randn(args.batch, args.k, generator=gen, device="cuda")
    copy_gb_s = measure_copy_gb_s()
    floor_ms = w.numel() * 2 / copy_gb_s / 1e6  # W read once at the copy's rate
    want = x @ w.float().T
    xb = x.to(torch.bfloat16)
    torch_ms = time_ms(lambda: torch.nn.functional.linear(xb, w), args.iters, warmup=3)
    rows = [{"config": "torch bf16 linear", "ms": torch_ms, "floor_ms": floor_ms}]
    print(f"[linear_bench] torch {torch_ms:.3f} ms, floor {floor_ms:.3f} ms", file=sys.stderr,
          flush=True)
    for text, c in configs:
        mk = Megakernel(linear_program(args.n, args.k, args.batch, c["rows"], c["split"]),
                        "static", ctas_per_sm=c["ctas"], knobs=config_knobs(c))
        st = mk.launch({}, {"x": x, "w": w})
        mk.sync(st)
        got = st.arrays["tensors"]["out"].sum(0)
        err = float((got - want).abs().max() / want.abs().max())
        ms = time_ms(lambda mk=mk, st=st: mk.relaunch(st), args.iters, warmup=3)
        prof_st = mk.launch({}, {"x": x, "w": w}, profile=True)
        mk.sync(prof_st)
        prof = mk.profile(prof_st)
        t = prof.tasks[prof.ran]
        body = (t[:, 3] - t[:, 1]) / 1e3    # waits satisfied .. barrier after the body
        wait = (t[:, 1] - t[:, 0]) / 1e3    # fetched .. waits satisfied (the ring's wait)
        row = {"config": text, **c, "ms": ms, "floor_ms": floor_ms, "err": err,
               "tasks": int(prof.ran.size), "body_us_median": statistics.median(body),
               "wait_us_median": statistics.median(wait),
               "tile_kb": c["rows"] * args.k // c["split"] * 2 / 1024}
        rows.append(row)
        print(f"[linear_bench] {text}: {ms:.3f} ms ({floor_ms / ms:.0%} of the floor), body "
              f"{row['body_us_median']:.2f} us, wait {row['wait_us_median']:.2f} us, "
              f"err {err:.1e}", file=sys.stderr, flush=True)
        del mk
    meta = run_meta("linear_bench.py", argv, copy_gb_s=copy_gb_s, n=args.n, k=args.k,
                    batch=args.batch)
    write_run(args.out, "linear_bench", meta, rows, markdown(meta, rows))
    return 0


def markdown(meta: dict, rows: list[dict]) -> str:
    """The table of a run: per configuration its time, share of the floor, median task body
    and wait, and the error against torch's fp32 product."""
    dash = "—"
    lines = [f"# Weight streaming of linear_partial: W [{meta['n']}, {meta['k']}] bf16, B = "
             f"{meta['batch']}", "", f"{meta['date']}, commit {meta['commit']}, {meta['gpu']}. "
             f"Command: `{meta['command']}`", "",
             f"Floor: {rows[0]['floor_ms']:.3f} ms (W read once at the measured copy "
             f"bandwidth, {meta['copy_gb_s']:.0f} GB/s read + write).", "",
             "| config | tile KB | tasks | ms | floor / ms | median body µs | median wait µs "
             "| max err / scale |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        ours = "tasks" in r
        cells = [f"{r['tile_kb']:.0f}", str(r["tasks"])] if ours else [dash, dash]
        cells += [f"{r['ms']:.3f}", f"{r['floor_ms'] / r['ms']:.0%}"]
        cells += [f"{r['body_us_median']:.2f}", f"{r['wait_us_median']:.2f}",
                  f"{r['err']:.1e}"] if ours else [dash, dash, dash]
        lines.append(f"| `{r['config']}` | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
