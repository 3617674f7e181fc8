"""A measured profile of decode steps on the megakernel: per-task global-timer stamps of one
step, as a Perfetto (Chrome trace-event) JSON and a Gantt PNG per batch size, and a summary of
where the step's time goes (by task kind).

    PYTHONPATH=src python3 benchmarks/decode_trace_bench.py --model llama-3.2-1b \
        --batches 1,16 --context 512 --mode static --out DIR

Every request sits at position context - 1 of its own cache slot, over caches of random
values, in the kernel decode_bench.py times (B <= 64, 1024 positions: its compile is cached).
Each batch size runs a few plain steps first, then one profiled step; the step time with and
without profiling (CUDA events, median of --iters) is reported beside the trace, so the
stamps' own cost is visible. Writes decode_trace.json (the summaries), decode_trace.md and,
last, decode_trace_B<b>.json and .png under --out.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from eventtensor.models import get_config  # noqa: E402


def kind_summary(tasks: list[tuple[str, float, float]]) -> list[dict]:
    """Per task kind, from (kind, body µs, end µs from the first fetch) of each task: tasks,
    summed body time and its share of all body time, the latest end; by summed time."""
    rows: dict[str, dict] = defaultdict(lambda: {"tasks": 0, "body_us": 0.0, "last_end_us": 0.0})
    for kind, body, end in tasks:
        r = rows[kind]
        r["tasks"] += 1
        r["body_us"] += body
        r["last_end_us"] = max(r["last_end_us"], end)
    total = sum(r["body_us"] for r in rows.values()) or 1.0
    out = [{"kind": k, **r, "share": r["body_us"] / total} for k, r in rows.items()]
    return sorted(out, key=lambda r: -r["body_us"])


def profile_tasks(kernel, st) -> list[tuple[str, float, float]]:
    """(kind, body µs, notified µs from the first fetch) of every task a profiled launch ran:
    the body from its waits satisfied to the CTA barrier after it (a trace span runs on to
    the task's notifies, which static mode may hold back past the next tasks)."""
    b, prof = st.tables.bound, kernel.profile(st)
    t0 = prof.tasks[prof.ran, 0].min() if prof.ran.size else 0
    kinds = [kernel.program.grids[g].kind for g in b.task_grid]
    return [(kinds[t], (prof.tasks[t, 3] - prof.tasks[t, 1]) / 1e3,
             (prof.tasks[t, 5] - t0) / 1e3) for t in prof.ran]


def markdown(meta: dict, results: list[dict]) -> str:
    lines = [f"# Decode step profile: {meta['model']}, {meta['mode']} mode, context "
             f"{meta['context']}", "",
             f"{meta['date']}, commit {meta['commit']}, {meta['gpu']}. Command: "
             f"`{meta['command']}`", ""]
    for r in results:
        lines += [f"## B = {r['batch']}", "",
                  f"step {r['step_ms']:.3f} ms plain, {r['profiled_ms']:.3f} ms profiled; "
                  f"trace makespan {r['makespan_us']:.1f} µs over {r['ctas']} CTAs; body: "
                  "waits satisfied to the barrier after the body", "",
                  "| kind | tasks | body µs (sum) | share | last notify µs |",
                  "|---|---:|---:|---:|---:|"]
        lines += [f"| {k['kind']} | {k['tasks']} | {k['body_us']:.1f} | "
                  f"{100 * k['share']:.1f}% | {k['last_end_us']:.1f} |" for k in r["kinds"]]
        lines.append("")
    return "\n".join(lines)


def step_args(description: str) -> argparse.ArgumentParser:
    """The options of the decode-step benchmarks: model, batch sizes, context, mode, timed
    steps, the kernel's maxima and the output folder."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--model", default="llama-3.2-1b")
    ap.add_argument("--batches", default="1,16")
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--mode", default="static")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--max-batch", type=int, default=64,
                    help="the kernel's maximum batch (default 64, decode_bench's kernel)")
    ap.add_argument("--max-context", type=int, default=1024)
    ap.add_argument("--out", default="benchmarks/results")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = step_args(__doc__.split("\n\n")[0]).parse_args(argv)
    import torch
    from decode_bench import git_commit, time_ms

    from eventtensor.models.gpu_decode import GpuDecodeSession
    from eventtensor.models.weights import random_weights_on_gpu
    if not torch.cuda.is_available():
        raise SystemExit("decode_trace_bench needs a CUDA GPU")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cfg = get_config(args.model)
    batches = sorted({int(b) for b in args.batches.split(",")})
    print(f"[decode_trace] {args.model}: weights, compile", file=sys.stderr, flush=True)
    session = GpuDecodeSession(cfg, random_weights_on_gpu(cfg, seed=0),
                               max(args.max_batch, *batches),
                               max(args.max_context, args.context), mode=args.mode)
    session.fill_caches(seed=0)
    kernel, results, traces = session.kernel, [], []
    for b in batches:
        tokens = np.random.default_rng(b).integers(0, cfg.vocab_size, b)
        session.set_requests(tokens, np.full(b, args.context - 1), np.arange(b))
        st = session.launch(b)
        kernel.sync(st)
        plain = time_ms(lambda st=st: kernel.relaunch(st), args.iters, warmup=3)
        prof = kernel.launch({"B": b}, session.feed(b), profile=True)
        kernel.sync(prof)
        profiled = time_ms(lambda prof=prof: kernel.relaunch(prof), args.iters, warmup=3)
        trace = kernel.trace(prof, f"{args.model} decode step, B={b}, context {args.context}, "
                                   f"{args.mode}")
        results.append({"batch": b, "step_ms": plain, "profiled_ms": profiled,
                        "makespan_us": trace.makespan_us, "busy": trace.busy_fraction(),
                        "ctas": trace.num_sms, "kinds": kind_summary(profile_tasks(kernel, prof))})
        print(f"[decode_trace] B={b}: {plain:.3f} ms ({profiled:.3f} ms profiled), "
              f"makespan {trace.makespan_us:.1f} us", file=sys.stderr, flush=True)
        traces.append((b, trace))
    # the numbers first, then the files (a Gantt chart of ~36k tasks takes half a minute)
    meta = {"model": args.model, "mode": args.mode, "context": args.context,
            "date": time.strftime("%Y-%m-%d"), "commit": git_commit(),
            "gpu": torch.cuda.get_device_name(),
            "command": "python3 benchmarks/decode_trace_bench.py " + " ".join(
                argv if argv is not None else sys.argv[1:])}
    (out / "decode_trace.json").write_text(json.dumps({"meta": meta, "results": results},
                                                      indent=1))
    (out / "decode_trace.md").write_text(markdown(meta, results))
    print(markdown(meta, results), flush=True)
    for b, trace in traces:
        trace.save_json(out / f"decode_trace_B{b}.json")
        trace.save_png(out / f"decode_trace_B{b}.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
