"""Scheduling benchmark (host only, no GPU needed).

1. Predicted makespan per scheduling mode (cost-model simulator, 132 SMs, H200 constants) for
   the paper's examples and a decode-shaped program, with the mode `auto` would pick.
2. Host time to instantiate static per-SM tables of the 36-layer decode-shaped program for a
   new batch size (uncached, median of repeats) and for a cached one, plus one-off costs.

    PYTHONPATH=src python3 benchmarks/schedule_bench.py [--out benchmarks/results]
Writes schedule_bench.json and schedule_bench.md under --out.
"""
from __future__ import annotations

import argparse
import json
import platform
import subprocess
import time
from datetime import date
from pathlib import Path

import numpy as np

from eventtensor.examples import EXAMPLES
from eventtensor.examples.decode_shaped import build as build_decode
from eventtensor.passes import run_pipeline
from eventtensor.runner import example_options
from eventtensor.schedule import StaticTemplate, lower
from eventtensor.schedule.cost import CostModel
from eventtensor.schedule.simulate import choose_mode, simulate

MODES = ("static", "dynamic", "hybrid", "unfused")


def predicted(program_fn, env, inputs, sms, hybrid_opts) -> dict[str, float]:
    out = {}
    for mode in MODES:
        opts = hybrid_opts if mode == "hybrid" else {}
        if mode == "hybrid" and not opts:
            continue
        out[mode] = simulate(lower(program_fn(), env, mode, sms, check=False, **opts),
                             inputs).makespan
    out["static_round_robin"] = simulate(lower(program_fn(), env, "static", sms, check=False,
                                               policy="round_robin"), inputs).makespan
    return out


def bench_examples(sms: int) -> list[dict]:
    rows = []
    for ex in EXAMPLES.values():
        env = dict(ex.bindings[-1])
        inputs = ex.make_inputs(env, 0)
        pred = predicted(ex.build, env, inputs, sms, example_options(ex, "hybrid"))
        choice = choose_mode(ex.build(), env, sms, inputs)
        rows.append({"program": ex.name, "binding": env, "predicted_us": pred,
                     "auto": choice.mode, "auto_reason": choice.reason})
        print(f"{ex.name:16s} {env}  " + "  ".join(f"{k} {v:.2f}" for k, v in pred.items())
              + f"  auto -> {choice.mode}")
    return rows


def bench_decode_sim(layers: int, batches: list[int], sms: int) -> list[dict]:
    rows = []
    cm = CostModel(num_sms=sms)
    for B in batches:
        env = {"B": B}
        pred = predicted(lambda: build_decode(layers), env, None, sms, {})
        floor = decode_floor_us(layers, B, cm)
        rows.append({"program": f"decode_shaped_l{layers}", "binding": env,
                     "predicted_us": pred, "bandwidth_floor_us": floor})
        print(f"decode l={layers} B={B:3d} floor {floor:8.1f} us  " +
              "  ".join(f"{k} {v:.1f}" for k, v in pred.items()))
    return rows


def decode_floor_us(layers: int, B: int, cm: CostModel) -> float:
    """Weights and KV cache read once at the measured copy bandwidth."""
    hidden, qkv, ffn, ctx, kv_heads = 4096, 6144, 12288, 1024, 8
    weights = layers * hidden * (qkv + hidden + 2 * ffn) * 2 + layers * ffn * hidden * 2
    kv = layers * B * kv_heads * ctx * 256 * 2
    return (weights + kv) / cm.bandwidth * 1e6


def bench_instantiate(layers: int, sms: int, repeats: int) -> dict:
    t0 = time.perf_counter()
    program = run_pipeline(build_decode(layers))
    t1 = time.perf_counter()
    template = StaticTemplate(program, sms)
    t2 = time.perf_counter()
    per_batch = {}
    for B in (1, 8, 16, 32, 63, 64):
        times = []
        for _ in range(repeats):
            template._cache.clear()
            s = time.perf_counter()
            _, tasks = template.instantiate({"B": B})
            times.append(time.perf_counter() - s)
        per_batch[B] = {"tasks": int(tasks.size), "median_ms": float(np.median(times) * 1e3)}
        print(f"instantiate l={layers} B={B:3d}: {tasks.size:6d} tasks, "
              f"{per_batch[B]['median_ms']:.3f} ms (median of {repeats}, uncached)")
    s = time.perf_counter()
    for _ in range(1000):
        template.instantiate({"B": 64})
    cached_us = (time.perf_counter() - s) * 1e3
    print(f"cached lookup: {cached_us:.2f} us; pipeline {t1 - t0:.2f} s, template "
          f"{t2 - t1:.3f} s (once per program)")
    return {"layers": layers, "pipeline_s": t1 - t0, "template_s": t2 - t1,
            "per_batch": per_batch, "cached_lookup_us": cached_us}


def markdown(res: dict) -> str:
    lines = [f"# Scheduling benchmark ({res['date']}, commit {res['commit']})", "",
             f"Command: `{res['command']}`  ", f"Host: {res['host']}; {res['sms']} virtual SMs, "
             "cost model with the measured H200 constants (predictions, not GPU timings).", "",
             "## Predicted makespan per mode (us)", "",
             "| program | binding | floor | static | static (round robin) | dynamic | hybrid | "
             "unfused | auto |", "|---|---|---|---|---|---|---|---|---|"]
    for r in res["examples"] + res["decode"]:
        p = r["predicted_us"]
        cell = (lambda k, p=p: f"{p[k]:.2f}" if k in p else "-")  # noqa: E731
        floor = f"{r['bandwidth_floor_us']:.1f}" if "bandwidth_floor_us" in r else "-"
        lines.append(f"| {r['program']} | {r['binding']} | {floor} | {cell('static')} | "
                     f"{cell('static_round_robin')} | {cell('dynamic')} | {cell('hybrid')} | "
                     f"{cell('unfused')} | {r.get('auto', '-')} |")
    ins = res["instantiate"]
    lines += ["", "Floor: weights and KV cache read once at 4.27 TB/s. The decode-shaped "
              "program re-reads each weight tile once per 16-request row block (its stand-in "
              "GEMM tiles), so at B = 64 it moves about 3x the floor's bytes; the comparison "
              "between modes is the point here, not the absolute time.",
              "", f"## Static table instantiation, {ins['layers']}-layer decode-shaped program",
              "", "| B | tasks | uncached (ms, median) |", "|---|---|---|"]
    for B, v in ins["per_batch"].items():
        lines.append(f"| {B} | {v['tasks']} | {v['median_ms']:.3f} |")
    lines += ["", f"Cached lookup: {ins['cached_lookup_us']:.2f} us. One-off per program: pass "
              f"pipeline {ins['pipeline_s']:.2f} s, template {ins['template_s']:.3f} s.", ""]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default="benchmarks/results")
    ap.add_argument("--sms", type=int, default=132)
    ap.add_argument("--sim-layers", type=int, default=8)
    ap.add_argument("--layers", type=int, default=36)
    ap.add_argument("--repeats", type=int, default=25)
    args = ap.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    res = {"date": str(date.today()), "commit": commit, "sms": args.sms,
           "host": f"{platform.processor() or platform.machine()}, Python "
                   f"{platform.python_version()}",
           "command": "PYTHONPATH=src python3 benchmarks/schedule_bench.py",
           "examples": bench_examples(args.sms),
           "decode": bench_decode_sim(args.sim_layers, [1, 16, 64], args.sms),
           "instantiate": bench_instantiate(args.layers, args.sms, args.repeats)}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "schedule_bench.json").write_text(json.dumps(res, indent=1, default=str))
    (out / "schedule_bench.md").write_text(markdown(res))
    print(f"wrote {out / 'schedule_bench.json'} and {out / 'schedule_bench.md'}")


if __name__ == "__main__":
    main()
