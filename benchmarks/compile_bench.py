"""Warm-up cost of a decode megakernel, without a GPU: building it once for every batch size
from an empty cache (cold) and again from the caches (warm), each in a fresh Python process,
by phase; and each batch size's first launch on the host (binding, tables, the schedule
from the static template, the launch arrays), which a session does once per new size.

    PYTHONPATH=src python3 benchmarks/compile_bench.py --model llama-3.2-1b --out DIR

The kernel is the static one decode_bench.py times (B <= 64, 1024 positions, the decode
session's knobs, 132 CTAs as on the H200). A decode session's `compile_s` is the build
below (program and kernel) plus CUDA's initialisation, which needs a GPU and is not timed
here. Writes compile_bench.json and compile_bench.md.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

T_START = time.perf_counter()
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

PHASES = ("imports", "program", "prepare", "validate", "generate", "template", "compile",
          "wait", "build")


def child(model: str, max_batch: int, max_context: int, num_ctas: int,
          batches: list[int], fast_compile: str | None) -> dict:
    """One build in this process (the cache is EVENTTENSOR_CACHE's): seconds per phase,
    then the host's first launch of each batch size."""
    t0 = time.perf_counter()
    from eventtensor.backends.cuda.build import build_kernel
    from eventtensor.backends.cuda.runtime import host_launch
    from eventtensor.lower import bind, build_tables
    from eventtensor.models import get_config
    from eventtensor.models.gpu_decode import decode_knobs, gpu_tiles, session_program
    from eventtensor.schedule import schedule
    seconds = {"imports": time.perf_counter() - t0}
    t0 = time.perf_counter()
    cfg = get_config(model)
    program = session_program(cfg, max_batch, max_context, gpu_tiles(cfg, max_batch),
                              max_batch)
    seconds["program"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    build = build_kernel(program, "static", num_ctas, knobs=decode_knobs(None),
                         fast_compile=fast_compile)
    seconds |= {k: v for k, v in build.seconds.items() if k != "total"}
    seconds["build"] = time.perf_counter() - t0
    built = time.perf_counter() - T_START
    first = {}
    for b in batches:
        t0 = time.perf_counter()
        t = schedule(build_tables(bind(build.program, {"B": b})), "static", num_ctas,
                     template=build.template)
        host_launch(t)
        first[b] = time.perf_counter() - t0
    return {"seconds": seconds, "startup_to_built": built,
            "cubin_cached": build.compiled.cached, "first_launch_s": first}


def run_child(args, cache: str, batches: list[int], fast_compile: str | None) -> dict:
    """`child` in a fresh interpreter with cache folder `cache`; adds its process's wall.
    NVRTC's own cache (CUDA 12.9+, kept by the driver where there is one) is off, so that a
    cold build compiles whatever this machine compiled before."""
    t0 = time.perf_counter()
    out = subprocess.run(
        [sys.executable, __file__, "--child", "--model", args.model,
         "--max-batch", str(args.max_batch), "--max-context", str(args.max_context),
         "--num-ctas", str(args.num_ctas), "--batches", ",".join(map(str, batches)),
         *(["--fast-compile", fast_compile] if fast_compile else [])],
        capture_output=True, text=True,
        env={**os.environ, "EVENTTENSOR_CACHE": cache, "CUDA_CACHE_DISABLE": "1"})
    if out.returncode:
        raise SystemExit(f"compile_bench child failed:\n{out.stderr}")
    res = json.loads(out.stdout.strip().splitlines()[-1])
    res["process_s"] = time.perf_counter() - t0
    return res


def markdown(meta: dict, runs: dict) -> str:
    """Cold and warm builds by phase, and the first launch per batch size."""
    lines = [f"# Decode megakernel warm-up: {meta['model']}, static mode, B <= "
             f"{meta['max_batch']}, {meta['max_context']} positions", "",
             f"{meta['date']}, commit {meta['commit']}, {meta['host']} ({meta['gpu']}), "
             f"{meta['toolchain']}. Command: `{meta['command']}`", "",
             "Seconds; `build` is the kernel's wall time (NVRTC overlaps validate and "
             "template; `wait` is the NVRTC time they did not hide), `to built` the process "
             "from its start (interpreter and imports included).", "",
             "| cache | " + " | ".join(PHASES) + " | to built |",
             "|---|" + "---:|" * (len(PHASES) + 1)]
    for name, r in runs.items():
        s = r["seconds"]
        lines.append(f"| {name} | " + " | ".join(f"{s[p]:.2f}" if p in s else "-"
                                                 for p in PHASES)
                     + f" | {r['startup_to_built']:.2f} |")
    first = runs["warm"]["first_launch_s"]
    lines += ["", "First launch of a batch size on the host (tables, schedule, launch "
              "arrays), seconds:", "",
              "| B | " + " | ".join(first) + " |", "|---|" + "---:|" * len(first),
              "| s | " + " | ".join(f"{v:.3f}" for v in first.values()) + " |"]
    return "\n".join(lines) + "\n"


def ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="llama-3.2-1b")
    ap.add_argument("--max-batch", type=int, default=64)
    ap.add_argument("--max-context", type=int, default=1024)
    ap.add_argument("--num-ctas", type=int, default=132)
    ap.add_argument("--batches", type=ints, default=[1, 2, 4, 8, 16, 32, 64])
    ap.add_argument("--out", default="benchmarks/results")
    ap.add_argument("--fast-compile", action="append", default=[],
                    help="also a cold build at this fast_compile (separate: functions "
                         "assembled one by one; min, mid or max: NVRTC --Ofast-compile; "
                         "repeat)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        level = args.fast_compile[0] if args.fast_compile else None
        print(json.dumps(child(args.model, args.max_batch, args.max_context, args.num_ctas,
                               args.batches, level)))
        return 0
    from decode_bench import run_meta, write_run

    from eventtensor.backends.cuda.compiler import toolchain
    runs = {}
    plan = [("cold", None, []), ("warm", None, args.batches)] + [
        (f"cold, fast_compile={level}", level, []) for level in args.fast_compile]
    with tempfile.TemporaryDirectory() as root:
        for name, level, batches in plan:
            print(f"[compile_bench] {name} build ...", file=sys.stderr, flush=True)
            cache = os.path.join(root, level or "default")  # a level's own empty cache
            runs[name] = run_child(args, cache, batches, level)
            print(f"[compile_bench] {name}: {runs[name]['seconds']}", file=sys.stderr,
                  flush=True)
    meta = run_meta("compile_bench.py", argv, model=args.model, max_batch=args.max_batch,
                    max_context=args.max_context,
                    host=f"{platform.machine()}, {os.cpu_count()} CPUs",
                    toolchain=toolchain())
    write_run(args.out, "compile_bench", meta, runs, markdown(meta, runs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
