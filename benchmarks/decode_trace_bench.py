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
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from eventtensor.models import get_config  # noqa: E402
from eventtensor.models.decode import tiles_with  # noqa: E402


def split_config(base, text: str) -> tuple[object, dict]:
    """(tiles, Megakernel options) of a --tiles text: its ET_* items are device-library
    knobs, ctas_per_sm=N the CTAs per SM, fast_compile=LEVEL (`compiler.FAST_COMPILE`),
    policy=NAME the static schedule's policy (`schedule.static.POLICIES`), the rest fields
    of the tiles (`tiles_with`)."""
    knobs, kernel, rest = {}, {}, []
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, _, value = item.partition("=")
        if key.startswith("ET_"):
            knobs[key] = int(value)
        elif key == "ctas_per_sm":
            kernel[key] = int(value)
        elif key in ("fast_compile", "policy"):
            kernel[key] = value
        else:
            rest.append(item)
    return tiles_with(base, ",".join(rest)), {**kernel, **({"knobs": knobs} if knobs else {})}


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


def first_fetch(prof) -> int:
    """The earliest fetch stamp (ns) of a profiled launch's tasks (`Megakernel.profile`)."""
    return prof.tasks[prof.ran, 0].min() if prof.ran.size else 0


def profile_tasks(program, bound, prof) -> list[tuple[str, float, float]]:
    """(kind, body µs, notified µs from the first fetch) of every task a profiled launch of
    `program` at binding `bound` ran (`prof`: its `Megakernel.profile`): the body from its
    waits satisfied to the CTA barrier after it (a trace span runs on to the task's
    notifies, which static mode may hold back past the next tasks)."""
    t0 = first_fetch(prof)
    kinds = [program.grids[g].kind for g in bound.task_grid]
    return [(kinds[t], (prof.tasks[t, 3] - prof.tasks[t, 1]) / 1e3,
             (prof.tasks[t, 5] - t0) / 1e3) for t in prof.ran]


def element_done(tables, prof) -> tuple[np.ndarray, np.ndarray]:
    """Per event element of a profiled launch: when its last notify was issued (ns, 0 if
    none) and the task that issued it (-1 if none)."""
    notified = prof.tasks[:, 5].astype(np.float64)
    ne, nt = tables.notify_elem, np.repeat(np.arange(len(tables.notify_ptr) - 1),
                                           np.diff(tables.notify_ptr))
    done_at = np.zeros(tables.bound.num_elements)
    last_by = np.full(tables.bound.num_elements, -1)
    order = np.argsort(notified[nt], kind="stable")      # later notifies overwrite earlier
    done_at[ne[order]] = notified[nt[order]]
    last_by[ne[order]] = nt[order]
    return done_at, last_by


def stall_summary(tables, prof, kinds: list[str], done) -> dict:
    """Where the CTAs' time goes in a profiled launch (`Megakernel.profile`), in µs summed over
    the CTAs: task bodies (waits satisfied to the barrier after the body), waiting on events
    (from the end of the CTA's task before to when the last producer of a waited element
    notified), and the rest before a body starts (polls, the stage ring, barriers, dispatch).
    Event waits are also split by the kind of the producer that notified last, and the rest
    by the kind of the waiting task. `kinds[t]`: the kind of task t; `done`: element_done
    of the launch."""
    ran, tasks, sm = prof.ran, prof.tasks, prof.sm
    fetched, waited, barrier = (tasks[:, k].astype(np.float64) for k in (0, 1, 3))
    done_at, last_by = done
    out = {"body_us": 0.0, "event_us": 0.0, "other_us": 0.0,
           "event_by_producer": defaultdict(float), "other_by_task": defaultdict(float)}
    for s_ in np.unique(sm[ran]):
        mine = ran[sm[ran] == s_]
        mine = mine[np.argsort(fetched[mine], kind="stable")]
        prev = fetched[mine[0]]
        for t in mine:
            w = tables.wait_elem[tables.wait_ptr[t]:tables.wait_ptr[t + 1]]
            gap = max(0.0, waited[t] - prev)
            event = 0.0
            if w.size:
                x = w[np.argmax(done_at[w])]
                event = min(gap, max(0.0, done_at[x] - prev))
                if event > 0 and last_by[x] >= 0:
                    out["event_by_producer"][kinds[last_by[x]]] += event / 1e3
            out["event_us"] += event / 1e3
            out["other_us"] += (gap - event) / 1e3
            out["other_by_task"][kinds[t]] += (gap - event) / 1e3
            out["body_us"] += max(0.0, barrier[t] - waited[t]) / 1e3
            prev = max(prev, barrier[t])
    for key in ("event_by_producer", "other_by_task"):
        out[key] = dict(sorted(out[key].items(), key=lambda kv: -kv[1]))
    return out


def layer_stages(tasks: list[tuple[str, float, float, float, float, float]],
                 layer: int) -> list[dict]:
    """The task grids of decode layer `layer` (names `l<layer>_...`) in the order their first
    body starts, from (grid, body start µs, body end µs, setup µs, publish µs, ready µs) of
    each task: its tasks, first start, last end, the span between and the mean body, setup
    (from the waits satisfied to thread 0 entering the body with the tile views built),
    publish (from the barrier after the body to its notifies issued: the release fence,
    held-back notifies) and ready (from the later of the task's fetch and its last waited
    element's notify to its waits satisfied: polls, fences, data-dependent waits, triggers)."""
    fields = ("setup", "publish", "ready")
    rows: dict[str, dict] = {}
    for grid, start, end, *parts in tasks:
        if not grid.startswith(f"l{layer}_"):
            continue
        r = rows.setdefault(grid, {"grid": grid, "tasks": 0, "start_us": start,
                                   "end_us": end, "body_sum": 0.0,
                                   **{f"{f}_sum": 0.0 for f in fields}})
        r["tasks"] += 1
        r["start_us"], r["end_us"] = min(r["start_us"], start), max(r["end_us"], end)
        r["body_sum"] += end - start
        for f, v in zip(fields, parts):
            r[f"{f}_sum"] += v
    out = []
    for r in sorted(rows.values(), key=lambda r: r["start_us"]):
        n = r.pop("tasks")
        out.append({**{k: v for k, v in r.items() if not k.endswith("_sum")}, "tasks": n,
                    "span_us": r["end_us"] - r["start_us"], "body_us": r["body_sum"] / n,
                    **{f"{f}_us": r[f"{f}_sum"] / n for f in fields}})
    return out


def stage_rows(program, tables, prof,
               done_at) -> list[tuple[str, float, float, float, float, float]]:
    """(grid, body start, body end, setup, publish, ready) in µs (the first two from the
    first fetch) of every task a profiled launch of `tables` ran (as `profile_tasks`; see
    layer_stages); `done_at`: when each event element was last notified (element_done)."""
    t0 = first_fetch(prof)
    names = [program.grids[g].name for g in tables.bound.task_grid]
    tk = prof.tasks.astype(np.int64)
    rows = []
    for t in prof.ran:
        w = tables.wait_elem[tables.wait_ptr[t]:tables.wait_ptr[t + 1]]
        ready = max(float(tk[t, 0]), float(done_at[w].max()) if w.size else 0.0)
        rows.append((names[t], (tk[t, 1] - t0) / 1e3, (tk[t, 3] - t0) / 1e3,
                     max(0, int(prof.entered[t]) - int(tk[t, 1])) / 1e3,
                     max(0, int(tk[t, 5] - tk[t, 3])) / 1e3,
                     max(0.0, float(tk[t, 1]) - ready) / 1e3))
    return rows


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
        st = r["stalls"]
        total = st["body_us"] + st["event_us"] + st["other_us"] or 1.0
        lines += ["", "Where the CTAs' time goes (µs summed over the CTAs, `stall_summary`): "
                  f"bodies {st['body_us']:.0f} ({st['body_us'] / total:.0%}), waiting on "
                  f"events {st['event_us']:.0f} ({st['event_us'] / total:.0%}), the rest "
                  f"before a body (polls, stage ring, barriers, dispatch) {st['other_us']:.0f} "
                  f"({st['other_us'] / total:.0%}).", "",
                  "| waited on (last producer) | event µs | | waiting task | rest µs |",
                  "|---|---:|---|---|---:|"]
        ev, ot = list(st["event_by_producer"].items()), list(st["other_by_task"].items())
        for k in range(min(8, max(len(ev), len(ot)))):
            a = ev[k] if k < len(ev) else ("", None)
            b = ot[k] if k < len(ot) else ("", None)
            lines.append(f"| {a[0]} | {'' if a[1] is None else f'{a[1]:.0f}'} | | {b[0]} | "
                         f"{'' if b[1] is None else f'{b[1]:.0f}'} |")
        if r.get("layer"):
            lines += ["", f"Layer {r['layer_index']}'s task grids, by first body start (µs "
                      "from the step's first fetch; body, setup, publish and ready: means per "
                      "task, setup the part of the body before thread 0 enters it, publish "
                      "from the barrier after the body to the notifies issued, ready from the "
                      "later of the fetch and the last waited element's notify to the waits "
                      "satisfied):", "",
                      "| grid | tasks | start | end | span | body | setup | publish | ready |",
                      "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
            lines += [f"| {g['grid']} | {g['tasks']} | {g['start_us']:.1f} | {g['end_us']:.1f} "
                      f"| {g['span_us']:.1f} | {g['body_us']:.2f} | {g['setup_us']:.2f} | "
                      f"{g['publish_us']:.2f} | {g['ready_us']:.2f} |" for g in r["layer"]]
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
    ap = step_args(__doc__.split("\n\n")[0])
    ap.add_argument("--tiles", default="", help="field=value,... over gpu_tiles (ET_*=N: "
                    "device-library knobs, ctas_per_sm=N), as decode_tiles_bench takes them")
    args = ap.parse_args(argv)
    import torch
    from decode_bench import run_meta, time_ms

    from eventtensor.models.gpu_decode import GpuDecodeSession, gpu_tiles
    from eventtensor.models.weights import random_weights_on_gpu
    if not torch.cuda.is_available():
        raise SystemExit("decode_trace_bench needs a CUDA GPU")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cfg = get_config(args.model)
    batches = sorted({int(b) for b in args.batches.split(",")})
    print(f"[decode_trace] {args.model}: weights, compile", file=sys.stderr, flush=True)
    max_batch = max(args.max_batch, *batches)
    tiles, kernel_opts = split_config(gpu_tiles(cfg, max_batch), args.tiles)
    session = GpuDecodeSession(cfg, random_weights_on_gpu(cfg, seed=0), max_batch,
                               max(args.max_context, args.context), tiles, mode=args.mode,
                               **kernel_opts)
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
        stamps, program, bound = kernel.profile(prof), kernel.program, prof.tables.bound
        done = element_done(prof.tables, stamps)
        results.append({"batch": b, "step_ms": plain, "profiled_ms": profiled,
                        "makespan_us": trace.makespan_us, "busy": trace.busy_fraction(),
                        "ctas": trace.num_sms,
                        "kinds": kind_summary(profile_tasks(program, bound, stamps)),
                        "layer_index": cfg.num_layers // 2,
                        "layer": layer_stages(stage_rows(program, prof.tables, stamps,
                                                         done[0]), cfg.num_layers // 2),
                        "stalls": stall_summary(prof.tables, stamps, [
                            program.grids[g].kind for g in bound.task_grid], done)})
        print(f"[decode_trace] B={b}: {plain:.3f} ms ({profiled:.3f} ms profiled), "
              f"makespan {trace.makespan_us:.1f} us", file=sys.stderr, flush=True)
        traces.append((b, trace))
    # the numbers first, then the files (a Gantt chart of ~36k tasks takes half a minute)
    meta = run_meta("decode_trace_bench.py", argv, model=args.model, mode=args.mode,
                    context=args.context, tiles=args.tiles)
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
