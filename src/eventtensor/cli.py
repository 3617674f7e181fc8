"""Command line: `eventtensor demo | run | trace | generate | print`."""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from .examples import EXAMPLES


def _binding(text: str) -> dict[str, int]:
    """Symbol values "NAME=INT,..." (an argparse type)."""
    out = {}
    for part in text.split(","):
        name, eq, value = (p.strip() for p in part.partition("="))
        if not (name.isidentifier() and eq and value.lstrip("-").isdigit()):
            raise argparse.ArgumentTypeError(
                f"{part.strip()!r} is not NAME=INTEGER (e.g. B=7 or n=3,B=2)")
        out[name] = int(value)
    return out


def cmd_demo(args: argparse.Namespace) -> int:
    from .runner import check_example
    print("eventtensor demo: the examples on the CPU interpreter")
    print(f"(virtual SMs: {args.sms}; every run is checked against a plain numpy computation, "
          "every task must run once, after its waits, with every counter at its wait count)\n")
    t0 = time.perf_counter()
    total = 0
    for ex in EXAMPLES.values():
        print(f"== {ex.name}: {ex.summary}")
        for env in ex.bindings:
            for mode in ("static", "dynamic", "hybrid", "unfused"):
                rep = check_example(ex, env, mode, args.sms, args.interleavings)
                total += rep.interleavings
                print("   " + rep.line())
        print()
    print(f"all results match the numpy references: {total} interleavings checked in "
          f"{time.perf_counter() - t0:.1f} s")
    print(_gpu_line())
    return 0


def _gpu_line() -> str:
    try:
        import torch  # type: ignore
        if torch.cuda.is_available():
            return _gpu_demo(torch)
    except ImportError:
        pass
    return ("No GPU here: on an NVIDIA H100/H200 (sm_90a) each program becomes one persistent "
            "kernel launch with one CTA per SM (132 on an H200) running the same tables."
            + _compile_line())


def _compile_line() -> str:
    """Compile each example's static megakernel with NVRTC (needs no GPU) and report it."""
    try:
        from .backends.cuda.codegen import generate, kernel_name
        from .backends.cuda.compiler import compile_source
        from .passes import run_pipeline
    except ImportError:
        return ""
    parts = []
    for ex in EXAMPLES.values():
        try:
            p = run_pipeline(ex.build())
            c = compile_source(generate(p, "static"), kernel_name(p, "static"))
        except Exception as exc:  # NVRTC missing or unusable here: say so, do not fail
            return f"\n(NVRTC not usable here: {type(exc).__name__})"
        parts.append(f"{ex.name} {len(c.cubin) // 1024} KiB"
                     + (" (cached)" if c.cached else f" in {c.seconds:.2f} s"))
    return "\nCompiled for sm_90a with NVRTC: " + ", ".join(parts) + "."


def _gpu_demo(torch) -> str:
    """Run the examples the CUDA backend supports on the megakernel and check them."""
    from .backends.cuda.codegen import UnsupportedOnGpu
    from .backends.cuda.runtime import Megakernel, to_host
    name = torch.cuda.get_device_name(0)
    print(f"== on the GPU ({name}): one megakernel launch per run")
    for ex in EXAMPLES.values():
        for mode in ("static", "dynamic", "hybrid", "unfused"):
            try:
                mk = Megakernel(ex.build(), mode)
            except UnsupportedOnGpu as exc:
                print(f"   {ex.name:16s} {mode:8s} CPU only: {exc}")
                continue
            for env in ex.bindings:
                inputs = ex.make_inputs(env, 0)
                out = mk.run(env, mk.to_device(inputs))
                err = ex.check({k: to_host(out[k]) for k in ex.outputs}, inputs, env)
                print(f"   {ex.name:16s} {mode:8s} {env}  {mk.num_sms} CTAs  "
                      f"compiled in {mk.compiled.seconds:.2f} s  max err {err:.1e}")
    return f"GPU results match the numpy references ({name})."


def cmd_run(args: argparse.Namespace) -> int:
    from .runner import check_example
    ex = EXAMPLES[args.example]
    envs = [args.binding] if args.binding else list(ex.bindings)
    for env in envs:
        rep = check_example(ex, env, args.mode, args.sms, args.interleavings, args.seed)
        print(rep.line())
    return 0


def cmd_trace(args: argparse.Namespace) -> int:
    """Simulate an example in each mode; write Perfetto JSON and PNG Gantt charts."""
    from pathlib import Path

    from .runner import example_options
    from .schedule import lower
    from .schedule.simulate import simulate, to_trace
    from .trace import save_side_by_side
    ex = EXAMPLES[args.example]
    env = args.binding or dict(ex.bindings[-1])
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    inputs = ex.make_inputs(env, 0)
    traces = []
    for mode in args.modes.split(","):
        tables = lower(ex.build(), env, mode, args.sms, **example_options(ex, mode))
        res = simulate(tables, inputs)
        tr = to_trace(res, tables, f"{ex.name} {mode} {_fmt_env(env)}")
        stem = out / f"{ex.name}_{mode}"
        tr.save_json(f"{stem}.json")
        tr.save_png(f"{stem}.png")
        traces.append(tr)
        print(f"{mode:8s} predicted makespan {tr.makespan_us:8.2f} us, "
              f"busy {tr.busy_fraction():.0%}  -> {stem}.json, {stem}.png")
    if len(traces) > 1:
        both = out / f"{ex.name}_modes.png"
        save_side_by_side(traces, both)
        print(f"side by side: {both}")
    return 0


def _fmt_env(env: dict[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in env.items())


def cmd_generate(args: argparse.Namespace) -> int:
    """Greedy generation through the decode-step program (megakernel or interpreter)."""
    from .models.generate import generate, open_model, resolve_device
    model = open_model(args.model, seed=args.seed)
    prompts = list(args.prompt_ids or [])
    prompts += [model.encode(text) for text in args.prompt or []]
    if not prompts:
        raise ValueError("give --prompt-ids (comma-separated token ids) or --prompt (text)")
    device = resolve_device(args.device)
    where = "one megakernel launch per step on the GPU" if device == "gpu" else \
        "the decode program on the CPU interpreter"
    print(f"model {model.name}: {model.config.architecture}, {model.config.num_layers} "
          f"layers, {len(prompts)} request(s), batch {args.batch or len(prompts)}, "
          f"{args.max_new_tokens} new tokens each ({where}, {args.mode} schedule)", flush=True)
    t0 = time.perf_counter()
    outs = generate(model, prompts, args.max_new_tokens, batch=args.batch,
                    step_tokens=args.step_tokens, mode=args.mode, num_sms=args.sms,
                    device=device)
    for i, (prompt, new) in enumerate(zip(prompts, outs)):
        line = f"[{i}] {','.join(map(str, prompt))} -> {','.join(map(str, new))}"
        if model.tokenizer is not None:
            line += f"  {model.decode(new)!r}"
        print(line)
    print(f"generated {sum(map(len, outs))} tokens in {time.perf_counter() - t0:.1f} s")
    return 0


BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def cmd_bench(args: argparse.Namespace) -> int:
    """Run a benchmark script of the repository's benchmarks/ folder with the remaining
    arguments (`eventtensor bench decode --model llama-3.2-1b ...`)."""
    import runpy
    script = BENCHMARKS / f"{args.name}_bench.py"
    if not script.exists():
        raise ValueError(f"benchmark script {script} not found (the benchmarks live in the "
                         "source checkout's benchmarks/ folder)")
    sys.argv = [str(script), *args.rest]
    runpy.run_path(str(script), run_name="__main__")
    return 0


def cmd_print(args: argparse.Namespace) -> int:
    from .passes import run_pipeline
    from .printer import to_python
    p = EXAMPLES[args.example].build()
    print(to_python(run_pipeline(p) if args.lowered else p))
    return 0


def _positive(text: str) -> int:
    """An argument that must be a positive integer."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def _token_ids(text: str) -> list[int]:
    """A prompt as comma-separated non-negative token ids."""
    items = [item.strip() for item in text.split(",")]
    if not all(item.isdigit() for item in items):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a comma-separated list of token ids (e.g. 1,2,3)")
    return [int(item) for item in items]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="eventtensor", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("demo", help="run the paper's examples and check them")
    d.add_argument("--sms", type=_positive, default=132, help="virtual SMs (default 132)")
    d.add_argument("--interleavings", type=_positive, default=8)
    d.set_defaults(fn=cmd_demo)
    r = sub.add_parser("run", help="run one example")
    r.add_argument("example", choices=sorted(EXAMPLES))
    r.add_argument("--binding", type=_binding, help="symbol values, e.g. B=7 or n=3")
    r.add_argument("--mode", choices=("static", "dynamic", "hybrid", "unfused"),
                   default="static")
    r.add_argument("--sms", type=_positive, default=132)
    r.add_argument("--interleavings", type=_positive, default=8)
    r.add_argument("--seed", type=int, default=0)
    r.set_defaults(fn=cmd_run)
    tr = sub.add_parser("trace", help="simulate an example; write Perfetto JSON and PNG charts")
    tr.add_argument("example", choices=sorted(EXAMPLES))
    tr.add_argument("--binding", type=_binding,
                    help="symbol values, e.g. n=16 (default: the largest demo one)")
    tr.add_argument("--modes", default="static,dynamic,unfused")
    tr.add_argument("--sms", type=_positive, default=8)
    tr.add_argument("--out", default="traces")
    tr.set_defaults(fn=cmd_trace)
    g = sub.add_parser("generate", help="greedy generation with a model (folder or preset)")
    g.add_argument("--model", required=True,
                   help="Hugging Face checkpoint folder, or a named config (random weights)")
    g.add_argument("--prompt-ids", action="append", type=_token_ids,
                   help="one prompt as comma-separated ids")
    g.add_argument("--prompt", action="append", help="one text prompt (needs tokenizer.json)")
    g.add_argument("--max-new-tokens", type=_positive, default=16)
    g.add_argument("--batch", type=_positive, help="requests at once (default: all prompts)")
    g.add_argument("--step-tokens", type=_positive,
                   help="tokens a step takes: one per decoding request, the rest prompt "
                        "chunks (default: the batch, or the longest prompt up to 64)")
    g.add_argument("--mode", choices=("static", "dynamic", "unfused"), default="static")
    g.add_argument("--sms", type=_positive, default=8, help="virtual SMs of the interpreter")
    g.add_argument("--device", choices=("auto", "gpu", "cpu"), default="auto",
                   help="the megakernel on the GPU or the CPU interpreter (auto: the GPU "
                        "where there is one)")
    g.add_argument("--seed", type=int, default=0, help="seed of a named config's weights")
    g.set_defaults(fn=cmd_generate)
    be = sub.add_parser("bench", help="run a benchmark (decode: the decode step against "
                                      "PyTorch; decode_trace: its profile; decode_tiles: tile "
                                      "configurations; linear: weight streaming of the linear "
                                      "body; attention: the decode attention body alone; "
                                      "megakernel: runtime overheads)")
    be.add_argument("name", choices=("decode", "decode_trace", "decode_tiles", "linear",
                                     "attention", "megakernel", "schedule"))
    be.add_argument("rest", nargs=argparse.REMAINDER, help="the benchmark's own arguments")
    be.set_defaults(fn=cmd_bench)
    pr = sub.add_parser("print", help="print an example program as Python")
    pr.add_argument("example", choices=sorted(EXAMPLES))
    pr.add_argument("--lowered", action="store_true", help="after the pass pipeline")
    pr.set_defaults(fn=cmd_print)
    args = ap.parse_args(argv)
    try:
        return args.fn(args)
    except (ValueError, RuntimeError, AssertionError) as exc:
        print(f"eventtensor: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
