"""Size and cold compile time of a decode megakernel, without a GPU: the NVRTC compile from
an empty cache, the cubin's bytes and the machine instructions of each of its functions
(nvdisasm, where one is found), under device-library knob sets given side by side.

    PYTHONPATH=src python3 benchmarks/kernel_size_bench.py --model llama-3.2-1b \
        --knobs "" --knobs "ET_PREFETCH_NEXT=1,ET_WEIGHTS_EVICT_FIRST=0" \
        --tiles "fold_norm=1" --out DIR

Each --knobs is "ET_X=N,..." over the decode session's own (`gpu_decode.decode_knobs`), each
--tiles a configuration as decode_tiles_bench.py takes it: "field=value,..." over
`gpu_tiles`, ET_* items knobs; the kernel is the static one decode_bench.py times (B <= 64,
1024 positions). Small bodies of the decode step run on code fetched cold, so its size is
part of the step's critical path. Writes kernel_size.json and kernel_size.md.
"""
from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def parse_knobs(text: str) -> dict[str, int]:
    """`text` "ET_X=N,..." as a dict (empty text: no knobs)."""
    out = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key.startswith("ET_") or not value.isdigit():
            raise SystemExit(f"--knobs {text!r}: {item!r} is not ET_NAME=N")
        out[key] = int(value)
    return out


def instructions_by_function(sass: str) -> dict[str, int]:
    """Machine instructions per function of nvdisasm's output (its `/*0000*/` address lines
    under each function label), largest first."""
    counts: dict[str, int] = {}
    name = None
    for line in sass.splitlines():
        label = re.match(r"^\s*(\$?[A-Za-z_$][\w$]*):\s*$", line)
        if label and not label.group(1).startswith(".L"):
            name = label.group(1).split("$")[-1] or label.group(1)
            counts.setdefault(name, 0)
        elif name and re.match(r"^\s*/\*[0-9a-f]{4,}\*/", line):
            counts[name] += 1
    return dict(sorted(((n, c) for n, c in counts.items() if c), key=lambda kv: -kv[1]))


def nvdisasm() -> str | None:
    """An nvdisasm: on PATH, beside nvcc, or the one triton ships."""
    found = shutil.which("nvdisasm")
    if found:
        return found
    nvcc = shutil.which("nvcc")
    if nvcc and Path(nvcc).with_name("nvdisasm").exists():
        return str(Path(nvcc).with_name("nvdisasm"))
    try:
        import triton
        path = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "nvdisasm"
        return str(path) if path.exists() else None
    except ImportError:
        return None


def markdown(meta: dict, rows: list[dict]) -> str:
    """The table of a run: per knob set the compile time, cubin size, instructions and the
    largest functions."""
    lines = [f"# Decode megakernel size: {meta['model']}, static mode", "",
             f"{meta['date']}, commit {meta['commit']}, {meta['host']} ({meta['gpu']}). "
             f"Command: `{meta['command']}`", "",
             "| knobs or tiles (over the session's) | compile s | cubin KB | instructions | "
             "largest functions |", "|---|---:|---:|---:|---|"]
    for r in rows:
        top = ", ".join(f"{n} {c}" for n, c in list(r["functions"].items())[:4])
        lines.append(f"| `{r['knobs_text'] or 'none'}` | {r['compile_s']:.1f} | "
                     f"{r['cubin_bytes'] / 1024:.0f} | {r['instructions']} | {top} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="llama-3.2-1b")
    ap.add_argument("--knobs", action="append", default=[])
    ap.add_argument("--tiles", action="append", default=[])
    ap.add_argument("--out", default="benchmarks/results")
    args = ap.parse_args(argv)
    from decode_bench import run_meta, write_run
    from decode_trace_bench import split_config

    from eventtensor.backends.cuda.codegen import generate, kernel_name
    from eventtensor.backends.cuda.compiler import compile_source
    from eventtensor.models import get_config
    from eventtensor.models.decode import build_decode_program
    from eventtensor.models.gpu_decode import decode_knobs, gpu_tiles
    from eventtensor.schedule import prepare
    cfg = get_config(args.model)
    base = gpu_tiles(cfg, 64)
    configs = [(text, base, parse_knobs(text)) for text in args.knobs]
    for text in args.tiles:
        tiles, options = split_config(base, text)
        if set(options) - {"knobs"}:
            raise SystemExit(f"--tiles {text!r}: only tile fields and ET_* knobs")
        configs.append((text, tiles, options.get("knobs", {})))
    disasm, rows = nvdisasm(), []
    for text, tiles, knobs in configs or [("", base, {})]:
        program = prepare(build_decode_program(cfg, 64, 1024, tiles, weight_dtype="bfloat16",
                                               cache_dtype="bfloat16"), "static")
        source = generate(program, "static", knobs=decode_knobs(knobs))
        with tempfile.TemporaryDirectory() as cache:
            os.environ["EVENTTENSOR_CACHE"] = cache  # an empty cache: a cold compile
            compiled = compile_source(source, kernel_name(program, "static"))
            functions = {}
            if disasm:
                cubin = Path(cache) / "kernel.cubin"
                cubin.write_bytes(compiled.cubin)
                functions = instructions_by_function(subprocess.run(
                    [disasm, "-c", str(cubin)], capture_output=True, text=True,
                    check=True).stdout)
        rows.append({"knobs_text": text, "compile_s": compiled.seconds,
                     "cubin_bytes": len(compiled.cubin),
                     "instructions": sum(functions.values()), "functions": functions})
        print(f"[kernel_size] {text or 'none'}: {compiled.seconds:.1f} s, "
              f"{sum(functions.values())} instructions", file=sys.stderr, flush=True)
    meta = run_meta("kernel_size_bench.py", argv, model=args.model,
                    host=f"{platform.machine()}, {os.cpu_count()} CPUs")
    write_run(args.out, "kernel_size", meta, rows, markdown(meta, rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
