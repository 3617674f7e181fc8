"""Configurations of the tile benchmarks (linear_bench, attention_bench): text
"key=value,..." over a benchmark's own keys and the device-library knobs, and the static
kernels of their programs compiled in one batch."""
from __future__ import annotations

import sys


def parse_config(text: str, keys: dict[str, int]) -> dict[str, int]:
    """`keys` (a benchmark's keys and their defaults) updated by `text` "key=value,..." over
    them and the device-library knobs ET_NAME=N (codegen.KNOBS)."""
    from eventtensor.backends.cuda.codegen import KNOBS
    out = dict(keys)
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, _, value = item.partition("=")
        if (key not in keys and key not in KNOBS) or not value.isdigit():
            raise SystemExit(f"config {text!r}: {item!r} is not one of "
                             f"{', '.join(f'{k}=N' for k in keys)} or a knob ET_NAME=N")
        out[key] = int(value)
    return out


def named_knobs(config: dict[str, int]) -> dict[str, int]:
    """The device-library knobs a configuration names (ET_NAME=N)."""
    return {k: v for k, v in config.items() if k.startswith("ET_")}


def compile_static(bench: str, kernels: list[tuple[object, int, dict[str, int]]]) -> None:
    """The static-mode kernels of (program, CTAs per SM, knobs) into the compile cache, in
    parallel, with a progress line naming benchmark `bench`."""
    from eventtensor.backends.cuda.codegen import generate, kernel_name
    from eventtensor.backends.cuda.compiler import compile_many
    from eventtensor.schedule import prepare
    jobs = {}
    for program, ctas, knobs in kernels:
        p = prepare(program, "static")
        jobs[generate(p, "static", ctas, knobs)] = kernel_name(p, "static", ctas)
    print(f"[{bench}] compiling {len(jobs)} kernels", file=sys.stderr, flush=True)
    compile_many(list(jobs.items()))
