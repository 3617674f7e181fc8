"""Decode-step latency of a Llama 3 / Qwen3 model on the GPU, PyTorch baselines and ours side
by side in one process, against the memory (or compute) floor.

    PYTHONPATH=src python3 benchmarks/decode_bench.py --model llama-3.2-1b \\
        --batches 1,2,4,8,16,32,64 --contexts 512,1024 --out DIR [--quick]

A decode step at context c: each of B requests has c - 1 cached tokens (a real prefill of
random tokens) and its new token at position c - 1 attends over c positions. Every path uses
the same seeded random bfloat16 weights (normal, 1/sqrt(fan-in); not zeros) and the same
random tokens:

  hf-eager       transformers `LlamaForCausalLM` / `Qwen3ForCausalLM` (sdpa attention) with a
                 DynamicCache prefilled to c - 1 tokens; each step appends one token and is
                 cropped back, untimed, so that every timed step runs at context c
  torch-eager    `TorchDecoder.step` (its KV cache copied from the transformers prefill)
  torch-graph    `TorchDecoder.graph_step`: one CUDA graph per (B, c)
  torch-compile  `TorchDecoder.compiled_step`: mode "max-autotune" (Inductor's CUDA graphs),
                 compiled once per (B, c) with dynamic=False; where that fails or Inductor
                 skips its CUDA graphs, "max-autotune-no-cudagraphs" in a CUDA graph of our own
                 (and only that mode for the rest of the run). A compilation took 50 s at
                 B = 1 and 110 s at B = 64 for llama-3.2-1b on an H200 (torch 2.11; later
                 contexts of a batch size reuse its matmul tuning), too long for every
                 (B, c): compiled for --compile-batches only (default: smallest, geometric
                 middle and largest; with --quick smallest and largest) and while the
                 --compile-budget (seconds spent compiling, 330; with --quick 90) lasts,
                 the rest marked skipped, so that a run of the default batches and contexts
                 takes about 7 minutes, 4 with --quick.
  ours:NAME      each entry of `bench_paths(config, weights, batch, context) -> {NAME: fn}` of
                 `eventtensor.models.gpu_decode`, when that module exists and provides it:
                 `weights` are HF name -> float32 numpy arrays (bfloat16 values), `fn()` runs
                 one decode step of `batch` requests at context `context` (an exception in
                 place of `fn` is recorded as that path's error); its optional `warmup_s`
                 attribute is reported as its warm-up time, `compile_s` (a compilation
                 shared by all batch sizes) beside it.

Time per step: CUDA events around each step after warm-up steps, median of --iters steps
(50; 10 with --quick). The floor of a (B, c): the bytes one step must read -- all weights
(the embedding gather excluded, the LM head included) and the KV cache once,
B * c * L * K * D * 2 (k and v) * 2 bytes -- over the device-to-device copy bandwidth
measured in the same run (bytes read plus written of a 2 GiB copy), or the step's flops over
the measured bf16 matmul rate where that is larger. Warm-up: time from building a path to
the end of its first step (compilation, graph capture, the transformers prefill excluded).
Writes decode_bench.json, decode_bench.md and decode_bench.png into --out. A failing path
records its error and the run goes on.
"""
from __future__ import annotations

import argparse
import dataclasses
import gc
import importlib
import inspect
import json
import math
import os
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import torch

from eventtensor.models import ModelConfig, get_config
from eventtensor.models.config import ARCHITECTURES
from eventtensor.models.torch_decode import COMPILE_MODES, TorchDecoder
from eventtensor.models.weights import random_weights_on_gpu

PYTORCH_PATHS = ("hf-eager", "torch-eager", "torch-graph", "torch-compile")
HOOK_MODULE = "eventtensor.models.gpu_decode"
HOOK_NAME = "bench_paths"
OURS_PREFIX = "ours:"
BF16_BYTES = 2
COPY_BYTES = 2 << 30
MATMUL_N = 8192
ERROR_CHARS = 1500


# ----- the floor -----
def weight_bytes_read(config: ModelConfig, itemsize: int = BF16_BYTES) -> int:
    """Bytes of weights one step reads: every parameter except the embedding table (its
    B-row gather is left out), plus the LM head, which is that table when tied."""
    shapes = config.param_shapes()
    embed = "model.embed_tokens.weight"
    count = sum(math.prod(s) for name, s in shapes.items() if name != embed)
    if config.tie_word_embeddings:
        count += math.prod(shapes[embed])
    return count * itemsize


def kv_bytes_read(config: ModelConfig, batch: int, context: int,
                  itemsize: int = BF16_BYTES) -> int:
    """Bytes of the KV cache one step reads once: B * c * L * K * D * 2 (k and v) * itemsize."""
    return (batch * context * config.num_layers * config.num_kv_heads * config.head_dim * 2
            * itemsize)


def step_flops(config: ModelConfig, batch: int, context: int) -> int:
    """Flops of one step: 2 per weight element read and request, plus q.k and p.v over the
    context (4 * B * L * H * D * c)."""
    return (2 * batch * weight_bytes_read(config, 1)
            + 4 * batch * config.num_layers * config.num_heads * config.head_dim * context)


@dataclass(frozen=True)
class Floor:
    """The least time of one step: bytes read over the copy bandwidth or flops over the
    matmul rate, whichever is longer."""

    bytes: int
    flops: int
    memory_ms: float
    compute_ms: float

    @property
    def ms(self) -> float:
        return max(self.memory_ms, self.compute_ms)

    @property
    def bound(self) -> str:
        return "memory" if self.memory_ms >= self.compute_ms else "compute"

    def as_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "ms": self.ms, "bound": self.bound}


def floor(config: ModelConfig, batch: int, context: int, copy_gb_s: float,
          matmul_tflops: float) -> Floor:
    """The floor of a step of `batch` requests at `context` given the measured copy
    bandwidth (GB/s, read plus written) and bf16 matmul rate (TFLOP/s)."""
    nbytes = weight_bytes_read(config) + kv_bytes_read(config, batch, context)
    flops = step_flops(config, batch, context)
    return Floor(nbytes, flops, nbytes / copy_gb_s / 1e6, flops / matmul_tflops / 1e9)


# ----- summaries and reports (no GPU needed) -----
def best_pytorch(ms: dict[str, float]) -> tuple[str, float] | None:
    """The fastest PyTorch path that has a time, as (name, ms), or None."""
    timed = [(ms[p], p) for p in PYTORCH_PATHS if ms.get(p) is not None]
    return (min(timed)[1], min(timed)[0]) if timed else None


def ours_summary(row: dict[str, Any], name: str) -> tuple[float | None, float | None]:
    """(share of the floor = floor / ms, speed-up = best PyTorch ms / ms) of ours path `name`
    in `row`; None where a time is missing."""
    ms = row["ms"].get(name)
    if ms is None:
        return None, None
    best = best_pytorch(row["ms"])
    return row["floor"]["ms"] / ms, None if best is None else best[1] / ms


def _cell(value: float | None, fmt: str, missing: str = "—") -> str:
    return missing if value is None else format(value, fmt)


def _path_cell(row: dict[str, Any], path: str) -> str:
    if path in row["errors"]:
        return "error"
    return _cell(row["ms"].get(path), ".3f", "skipped" if path in row["notes"] else "—")


def context_table(report: dict[str, Any], context: int) -> str:
    """The markdown table of one context: a row per batch size with each path's ms per step,
    the floor, the best PyTorch path with its share of the floor (floor / ms) and, for each
    ours path, its share of the floor and its speed-up over the best PyTorch path."""
    paths, ours = report["paths"], report["ours"]
    head = ["B", *paths, "floor", "best PyTorch / floor"]
    for name in ours:
        head += [f"{name} / floor", f"{name} speed-up"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---:|" * len(head)]
    for row in (r for r in report["rows"] if r["context"] == context):
        best = best_pytorch(row["ms"])
        cells = [str(row["batch"]), *(_path_cell(row, p) for p in paths),
                 f"{row['floor']['ms']:.3f}",
                 "—" if best is None else f"{best[0]} {row['floor']['ms'] / best[1]:.0%}"]
        for name in ours:
            share, speedup = ours_summary(row, name)
            cells += [_cell(share, ".0%"), _cell(speedup, ".2f") + ("×" if speedup else "")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def warmup_totals(report: dict[str, Any]) -> dict[str, tuple[float, float, int]]:
    """Per path: (sum, max, count) of its warm-up seconds over all (B, context)."""
    out = {}
    for path in report["paths"]:
        values = [r["warmup_s"][path] for r in report["rows"] if path in r["warmup_s"]]
        if values:
            out[path] = (sum(values), max(values), len(values))
    return out


def markdown_report(report: dict[str, Any]) -> str:
    """The whole report as markdown: setup, one table per context, warm-up times, errors
    and skips, and the output checks."""
    lines = [f"# Decode step, {report['model']}: ms per step (median of {report['iters']})",
             "",
             f"{report['date']}, commit `{report['commit']}`, {report['gpu']}, "
             f"torch {report['versions']['torch']}, "
             f"transformers {report['versions']['transformers']}",
             f"`{report['command']}`",
             "",
             f"Measured: copy {report['copy_gb_s']:.0f} GB/s (read + write), bf16 matmul "
             f"{report['matmul_tflops']:.0f} TFLOP/s. Floor: weights "
             f"{report['weight_bytes'] / 1e9:.3f} GB (embedding gather excluded, LM head "
             f"included) + KV cache read once, over the copy bandwidth (or flops over the "
             f"matmul rate where larger). Ours: {report['hook']}. torch-compile: "
             f"{report['compile']['summary']}."]
    for context in report["contexts"]:
        lines += ["", f"## Context {context}", "", context_table(report, context)]
    lines += ["", "## Warm-up (time to the first step)", "",
              "| path | total s | max s | (B, context) pairs |", "|---|---:|---:|---:|"]
    lines += [f"| {p} | {s:.2f} | {m:.2f} | {n} |"
              for p, (s, m, n) in warmup_totals(report).items()]
    compiles = {p: max(r["compile_s"][p] for r in report["rows"] if p in r["compile_s"])
                for p in report["ours"] if any(p in r["compile_s"] for r in report["rows"])}
    if compiles:
        lines += ["", "Compilation shared by all batch sizes, as the hook reports it: " +
                  ", ".join(f"{p} {s:.2f} s" for p, s in compiles.items()) + "."]
    problems = [(r, p, "error", e) for r in report["rows"] for p, e in r["errors"].items()]
    problems += [(r, p, "note", n) for r in report["rows"] for p, n in r["notes"].items()]
    if problems:
        lines += ["", "## Errors and notes", ""]
        lines += [f"- B {r['batch']}, context {r['context']}, {p} ({kind}): {text}"
                  for r, p, kind, text in problems]
    checks = [(r, p, c) for r in report["rows"] for p, c in r["checks"].items()]
    if checks:
        lines += ["", "## Output checks against torch-eager", "",
                  "max |logit difference| / max |logit| and greedy-token agreement", "",
                  "| B | context | path | rel. diff | argmax agree |", "|---:|---:|---|---:|---:|"]
        lines += [f"| {r['batch']} | {r['context']} | {p} | {c['rel_diff']:.2e} | "
                  f"{c['argmax_agree']:.0%} |" for r, p, c in checks]
    return "\n".join(lines) + "\n"


def plot(report: dict[str, Any], path: Path) -> None:
    """Latency against batch size, one panel per context, each path a line, the floor
    dashed; written as a PNG."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    contexts = report["contexts"]
    fig, axes = plt.subplots(1, len(contexts), figsize=(6 * len(contexts), 4.5), squeeze=False)
    for ax, context in zip(axes[0], contexts):
        ax.set_title(f"{report['model']}, context {context}")
        rows = [r for r in report["rows"] if r["context"] == context]
        if not rows:                        # a partial report: nothing to draw, no log scale
            ax.text(0.5, 0.5, "not measured", ha="center", va="center",
                    transform=ax.transAxes)
            ax.set_axis_off()
            continue
        for i, name in enumerate(report["paths"]):
            pts = [(r["batch"], r["ms"][name]) for r in rows if r["ms"].get(name) is not None]
            if pts:
                ax.plot(*zip(*pts), marker="o", color=f"C{i}", label=name)
        ax.plot([r["batch"] for r in rows], [r["floor"]["ms"] for r in rows], "k--",
                label="floor")
        ax.set_xscale("log", base=2)
        ax.set_xticks([r["batch"] for r in rows], [str(r["batch"]) for r in rows])
        ax.set_yscale("log")
        ax.set_xlabel("batch (requests)")
        ax.set_ylabel("ms per decode step")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_outputs(report: dict[str, Any], out: Path) -> list[Path]:
    """decode_bench.json, .md and .png in `out` (created if needed)."""
    out.mkdir(parents=True, exist_ok=True)
    files = [out / "decode_bench.json", out / "decode_bench.md", out / "decode_bench.png"]
    files[0].write_text(json.dumps(report, indent=1) + "\n")
    files[1].write_text(markdown_report(report))
    plot(report, files[2])
    return files


def spread(values: list[int], count: int) -> list[int]:
    """At most `count` of the sorted `values`: the smallest, the largest and, for 3, the one
    nearest their geometric mean."""
    picks = {values[0], values[-1]}
    if count >= 3:
        mean = math.sqrt(values[0] * values[-1])
        picks.add(min(values, key=lambda v: abs(math.log(v / mean))))
    return sorted(picks)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line; --quick lowers the defaults of --iters, --warmup, --compile-batches
    and --compile-budget."""
    def ints(text: str) -> list[int]:
        values = sorted({int(v) for v in text.split(",") if v.strip()})
        if not values or values[0] <= 0:
            raise argparse.ArgumentTypeError(f"need positive integers, got {text!r}")
        return values

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="llama-3.2-1b")
    ap.add_argument("--batches", type=ints, default=[1, 2, 4, 8, 16, 32, 64])
    ap.add_argument("--contexts", type=ints, default=[512, 1024])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--iters", type=int, help="timed steps per path (default 50; quick 10)")
    ap.add_argument("--warmup", type=int, help="untimed steps first (default 10; quick 3)")
    ap.add_argument("--compile-batches", type=ints,
                    help="batch sizes torch-compile runs for (default: smallest, geometric "
                         "middle, largest; quick: smallest and largest)")
    ap.add_argument("--compile-budget", type=float,
                    help="seconds of compilation after which torch-compile is skipped "
                         "(default 330; quick 90)")
    ap.add_argument("--compile-modes", default=",".join(COMPILE_MODES),
                    help="torch.compile modes to try in order, each next one where the one "
                         "before fails (default: %(default)s)")
    ap.add_argument("--paths", default=",".join(PYTORCH_PATHS) + ",ours",
                    help="comma-separated subset of " + ", ".join(PYTORCH_PATHS) + ", ours")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.contexts[0] < 2:
        ap.error("contexts must be at least 2 (one cached token and the new one)")
    args.iters = args.iters or (10 if args.quick else 50)
    args.warmup = args.warmup if args.warmup is not None else (3 if args.quick else 10)
    if args.compile_batches is None:
        args.compile_batches = spread(args.batches, 2 if args.quick else 3)
    if args.compile_budget is None:
        args.compile_budget = 90.0 if args.quick else 330.0
    args.paths = [p.strip() for p in args.paths.split(",") if p.strip()]
    args.compile_modes = [m.strip() for m in args.compile_modes.split(",") if m.strip()]
    if not args.compile_modes or set(args.compile_modes) - set(COMPILE_MODES):
        ap.error(f"--compile-modes must name some of {', '.join(COMPILE_MODES)}")
    unknown = set(args.paths) - {*PYTORCH_PATHS, "ours"}
    if unknown:
        ap.error(f"unknown paths {sorted(unknown)}")
    return args


# ----- measuring on the GPU -----
def time_ms(fn: Callable[[], Any], iters: int, warmup: int,
            reset: Callable[[], None] | None = None) -> float:
    """Median milliseconds of fn() over `iters` calls, each between two CUDA events, after
    `warmup` calls; reset() (untimed) after every call."""
    for _ in range(warmup):
        fn()
        if reset:
            reset()
    torch.cuda.synchronize()
    events = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        if reset:
            reset()
        events.append((start, end))
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in events)


def measure_copy_gb_s(nbytes: int = COPY_BYTES) -> float:
    """Device-to-device copy bandwidth of an `nbytes` buffer of random values, GB/s counting
    bytes read plus written."""
    src = torch.randn(nbytes // BF16_BYTES, dtype=torch.bfloat16, device="cuda")
    dst = torch.empty_like(src)
    ms = time_ms(lambda: dst.copy_(src), iters=20, warmup=3)
    return 2 * nbytes / ms / 1e6


def measure_matmul_tflops(n: int = MATMUL_N) -> float:
    """bf16 matmul rate of n x n x n products of random matrices, TFLOP/s."""
    a, b = (torch.randn(n, n, dtype=torch.bfloat16, device="cuda") for _ in range(2))
    out = torch.empty_like(a)
    ms = time_ms(lambda: torch.matmul(a, b, out=out), iters=10, warmup=3)
    return 2 * n**3 / ms / 1e9


def hf_model(config: ModelConfig, weights: dict[str, torch.Tensor], device: str = "cuda"):
    """The transformers model of `config` in bf16 on `device` (sdpa attention) holding
    exactly `weights`. Built with bf16 as the default dtype rather than cast afterwards, so
    that the RoPE inverse frequencies stay float32 (a cast would round them to bf16)."""
    import transformers
    cfg_class = transformers.LlamaConfig if config.architecture == "llama" else \
        transformers.Qwen3Config
    hf_config = cfg_class(**config.to_hf(), attn_implementation="sdpa")
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device(device):
            model = getattr(transformers, ARCHITECTURES[config.architecture])(hf_config)
    finally:
        torch.set_default_dtype(default)
    model = model.eval().requires_grad_(False)
    rounded = [n for n, b in model.named_buffers() if "inv_freq" in n and b.dtype != torch.float32]
    if rounded:
        raise RuntimeError(f"transformers keeps RoPE buffers {rounded} in reduced precision")
    result = model.load_state_dict(weights, strict=False)
    allowed = {"lm_head.weight"} if config.tie_word_embeddings else set()
    if not set(result.missing_keys) <= allowed or result.unexpected_keys:
        raise RuntimeError(f"transformers model does not take the weights: {result}")
    return model


class HFDecode:
    """A transformers decode step at a fixed context: `prompt` [B, c - 1] prefilled into a
    DynamicCache, then `step()` runs `tokens` [B] at position c - 1 (appending to the cache)
    and `reset()` crops the cache back to c - 1 tokens."""

    def __init__(self, model, prompt: torch.Tensor, tokens: torch.Tensor):
        from transformers import DynamicCache
        params = inspect.signature(model.forward).parameters
        self._kw = "cache" if "cache" in params else "past_key_values"
        self.model, self.tokens = model, tokens[:, None]
        self.cache = DynamicCache()
        model.model(input_ids=prompt, use_cache=True, **{self._kw: self.cache})

    def step(self) -> torch.Tensor:
        """Logits [B, V] of the new tokens."""
        out = self.model(input_ids=self.tokens, use_cache=True, **{self._kw: self.cache})
        return out.logits[:, -1]

    def reset(self) -> None:
        self.cache.crop(-1)

    def layer_kv(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Cached keys and values of `layer`, [B, K, S, D]."""
        layers = getattr(self.cache, "layers", None)
        if layers is not None:
            return layers[layer].keys, layers[layer].values
        return self.cache.key_cache[layer], self.cache.value_cache[layer]


def copy_cache(hf: HFDecode, decoder: TorchDecoder) -> None:
    """The keys and values of `hf`'s B requests into cache slots 0..B-1 of `decoder`."""
    for layer in range(decoder.config.num_layers):
        keys, values = hf.layer_kv(layer)
        batch, _, length, _ = keys.shape
        decoder.k_cache[layer][:batch, :, :length].copy_(keys)
        decoder.v_cache[layer][:batch, :, :length].copy_(values)


def compare(logits: torch.Tensor, reference: torch.Tensor) -> dict[str, float]:
    """max |difference| / max |reference| and the fraction of equal argmaxes."""
    logits, reference = logits.float(), reference.float()
    return {"rel_diff": float((logits - reference).abs().max() / reference.abs().max()),
            "argmax_agree": float((logits.argmax(-1) == reference.argmax(-1)).float().mean())}


def _cudagraph_skips() -> int:
    from torch._dynamo.utils import counters
    return counters["inductor"]["cudagraph_skips"]


def _returning(fn: Callable[[], Any]) -> Callable[[], Callable[[], Any]]:
    """A builder of a path that is ready as it is."""
    return lambda: fn


def _error(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}".strip()
    return text if len(text) <= ERROR_CHARS else text[:ERROR_CHARS] + " ..."


class Bench:
    """One benchmark run: the model, weights, decoder and transformers model, and the rows
    measured so far."""

    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.config = get_config(args.model)
        self.weights = random_weights_on_gpu(self.config, args.seed)
        self.decoder = TorchDecoder(self.config, self.weights, max(args.batches),
                                    max(args.contexts), device="cuda", dtype=torch.bfloat16)
        try:
            self.model, self.hf_error = hf_model(self.config, self.weights), None
        except Exception as e:
            self.model, self.hf_error = None, f"building the transformers model: {_error(e)}"
        self.hook, self.hook_status = self._load_hook() if "ours" in args.paths else \
            (None, "skipped (not in --paths)")
        self._numpy_weights: dict[str, np.ndarray] | None = None
        self.compile_modes = list(args.compile_modes)
        self.compile_spent = 0.0
        self.rows: list[dict[str, Any]] = []
        self.ours: list[str] = []

    @staticmethod
    def _load_hook():
        try:
            module = importlib.import_module(HOOK_MODULE)
        except ModuleNotFoundError as e:
            if e.name is not None and HOOK_MODULE.startswith(e.name):
                return None, f"skipped ({HOOK_MODULE} does not exist)"
            return None, f"skipped (importing {HOOK_MODULE} failed: {_error(e)})"
        except Exception as e:
            return None, f"skipped (importing {HOOK_MODULE} failed: {_error(e)})"
        hook = getattr(module, HOOK_NAME, None)
        if hook is None:
            return None, f"skipped ({HOOK_MODULE} has no {HOOK_NAME})"
        return hook, f"{HOOK_MODULE}.{HOOK_NAME}"

    def numpy_weights(self) -> dict[str, np.ndarray]:
        if self._numpy_weights is None:
            self._numpy_weights = {n: t.float().cpu().numpy() for n, t in self.weights.items()}
        return self._numpy_weights

    # ----- one (B, context) -----
    def run_config(self, batch: int, context: int, copy_gb_s: float, tflops: float) -> None:
        cfg, dec = self.config, self.decoder
        gen = torch.Generator("cuda").manual_seed(self.args.seed + 1009 * batch + context)
        prompt = torch.randint(cfg.vocab_size, (batch, context - 1), generator=gen,
                               device="cuda")
        tokens = torch.randint(cfg.vocab_size, (batch,), generator=gen, device="cuda")
        positions = torch.full((batch,), context - 1, dtype=torch.int64, device="cuda")
        row: dict[str, Any] = {
            "batch": batch, "context": context,
            "floor": floor(cfg, batch, context, copy_gb_s, tflops).as_dict(),
            "ms": {}, "warmup_s": {}, "compile_s": {}, "errors": {}, "notes": {},
            "checks": {}}
        self.rows.append(row)
        hf, hf_error = None, self.hf_error
        if hf_error is None:
            try:
                hf = HFDecode(self.model, prompt, tokens)
                copy_cache(hf, dec)
            except Exception as e:
                hf, hf_error = None, f"transformers prefill: {_error(e)}"
        if hf is None:  # the other paths run on a random past instead
            for cache in dec.k_cache + dec.v_cache:
                cache[:batch, :, :context - 1].normal_(generator=gen)
        reference = dec.step(tokens, positions, context)[0].clone()
        paths = self.args.paths

        if "hf-eager" in paths and hf is None:
            row["errors"]["hf-eager"] = hf_error
            self._progress(row, "hf-eager")
        elif "hf-eager" in paths:
            self._path(row, "hf-eager", _returning(hf.step), reference, reset=hf.reset)
        del hf  # frees its cache
        if "torch-eager" in paths:
            self._path(row, "torch-eager",
                       _returning(lambda: dec.step(tokens, positions, context)), reference)
        if "torch-graph" in paths:
            def graph():
                step = dec.graph_step(batch, context)
                return lambda: step(tokens, positions)
            self._path(row, "torch-graph", graph, reference)
        if "torch-compile" in paths:
            self._compiled(row, tokens, positions, reference)
        if self.hook is not None:
            self._ours(row)
        gc.collect()
        torch.cuda.empty_cache()

    def _path(self, row: dict[str, Any], name: str, build: Callable[[], Callable[[], Any]],
              reference: torch.Tensor | None, reset: Callable[[], None] | None = None,
              warmup_s: float | None = None, build_s: float = 0.0) -> None:
        """Build a path, time its first step (its warm-up) and then its steps; checks the
        logits of the first step against `reference` when given. Errors are recorded."""
        try:
            t0 = time.perf_counter()
            fn = build()
            out = fn()
            torch.cuda.synchronize()
            row["warmup_s"][name] = (time.perf_counter() - t0 + build_s if warmup_s is None
                                     else warmup_s)
            if reference is not None:
                row["checks"][name] = compare(out[0] if isinstance(out, tuple) else out,
                                              reference)
            del out
            if reset:
                reset()
            row["ms"][name] = time_ms(fn, self.args.iters, self.args.warmup, reset)
        except Exception as e:
            row["errors"][name] = _error(e)
        self._progress(row, name)

    def _compiled(self, row: dict[str, Any], tokens: torch.Tensor, positions: torch.Tensor,
                  reference: torch.Tensor) -> None:
        name, batch, context = "torch-compile", row["batch"], row["context"]
        if batch not in self.args.compile_batches:
            row["notes"][name] = "not compiled for this batch size (--compile-batches)"
        elif self.compile_spent >= self.args.compile_budget:
            row["notes"][name] = (f"skipped: the compile budget of "
                                  f"{self.args.compile_budget:.0f} s is spent")
        else:
            failures: list[str] = []

            def build():
                while True:
                    mode = self.compile_modes[0]
                    try:
                        skips = _cudagraph_skips()
                        step = self.decoder.compiled_step(batch, context, mode=mode)
                        step(tokens, positions)
                        if _cudagraph_skips() > skips:
                            raise RuntimeError("Inductor skipped its CUDA graphs")
                        row["compile_mode"] = mode
                        if failures:
                            row["notes"][name] = f"mode {mode} after: " + "; ".join(failures)
                        return lambda: step(tokens, positions)
                    except Exception as e:
                        failures.append(f"mode {mode} failed: {_error(e)}")
                        if len(self.compile_modes) == 1:
                            raise RuntimeError("; ".join(failures)) from e
                        self.compile_modes.pop(0)

            t0 = time.perf_counter()
            self._path(row, name, build, reference)
            self.compile_spent += time.perf_counter() - t0
            return
        self._progress(row, name)

    def _ours(self, row: dict[str, Any]) -> None:
        try:
            t0 = time.perf_counter()
            fns = self.hook(self.config, self.numpy_weights(), row["batch"], row["context"])
            build_s = time.perf_counter() - t0
        except Exception as e:
            row["errors"][OURS_PREFIX + HOOK_NAME] = _error(e)
            self._progress(row, OURS_PREFIX + HOOK_NAME)
            return
        for key, fn in fns.items():
            name = OURS_PREFIX + key
            if name not in self.ours:
                self.ours.append(name)
            if isinstance(fn, BaseException):
                row["errors"][name] = _error(fn)
                self._progress(row, name)
                continue
            if getattr(fn, "compile_s", None) is not None:
                row["compile_s"][name] = fn.compile_s
            self._path(row, name, _returning(fn), None,
                       warmup_s=getattr(fn, "warmup_s", None), build_s=build_s)

    def _progress(self, row: dict[str, Any], name: str) -> None:
        head = f"[B={row['batch']:3d} ctx={row['context']:5d}] {name:<20}"
        if name in row["errors"]:
            print(f"{head} ERROR {row['errors'][name]}", flush=True)
        elif name not in row["ms"]:
            print(f"{head} {row['notes'].get(name, 'skipped')}", flush=True)
        else:
            check = row["checks"].get(name)
            text = "" if check is None else \
                f"  vs eager: rel {check['rel_diff']:.1e}, argmax {check['argmax_agree']:.0%}"
            print(f"{head} {row['ms'][name]:8.3f} ms  (floor {row['floor']['ms']:.3f})  "
                  f"warm-up {row['warmup_s'][name]:7.2f} s{text}", flush=True)


def git_commit() -> str:
    """ET_COMMIT, else `git rev-parse --short HEAD` of this checkout, else "unknown"."""
    if os.environ.get("ET_COMMIT"):
        return os.environ["ET_COMMIT"]
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True, cwd=Path(__file__).parent).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def run_meta(script: str, argv: list[str] | None, **fields: Any) -> dict[str, Any]:
    """`fields` and what every benchmark run records: the date, the commit, the GPU ("no
    GPU" on a host without one) and the command (benchmarks/`script` and its arguments,
    quoted where they need it)."""
    args = argv if argv is not None else sys.argv[1:]
    return {**fields, "date": time.strftime("%Y-%m-%d"), "commit": git_commit(),
            "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU",
            "command": f"python3 benchmarks/{script} " + " ".join(map(shlex.quote, args))}


def write_run(out: str | Path, name: str, meta: dict[str, Any], rows: list[dict[str, Any]],
              text: str) -> None:
    """`name`.json (meta and rows) and `name`.md (`text`) in folder `out`; `text` printed."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    (out / f"{name}.md").write_text(text)
    print(text, flush=True)


def bench_report(args: argparse.Namespace, bench: Bench, copy_gb_s: float, tflops: float,
                 start: float) -> dict[str, Any]:
    """The run's report so far: its meta and the rows measured."""
    import transformers
    paths = [p for p in PYTORCH_PATHS if p in args.paths] + bench.ours
    return {
        "command": " ".join(shlex.quote(a) for a in [sys.executable, *sys.argv]),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "commit": git_commit(), "gpu": torch.cuda.get_device_name(),
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "cuda": torch.version.cuda},
        "model": args.model, "config": dataclasses.asdict(bench.config),
        "quick": args.quick, "iters": args.iters, "warmup_iters": args.warmup,
        "batches": args.batches, "contexts": args.contexts,
        "copy_gb_s": copy_gb_s, "matmul_tflops": tflops,
        "weight_bytes": weight_bytes_read(bench.config),
        "paths": paths, "ours": bench.ours, "hook": bench.hook_status,
        "compile": {"batches": args.compile_batches, "budget_s": args.compile_budget,
                    "spent_s": bench.compile_spent,
                    "summary": f"compiled for B in {args.compile_batches} within a budget of "
                               f"{args.compile_budget:.0f} s ({bench.compile_spent:.0f} s "
                               f"spent), mode {bench.compile_modes[0]} at the end"},
        "rows": bench.rows,
        "wall_s": time.perf_counter() - start,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("decode_bench needs a CUDA GPU")
    start = time.perf_counter()
    torch.set_grad_enabled(False)
    copy_gb_s, tflops = measure_copy_gb_s(), measure_matmul_tflops()
    print(f"{torch.cuda.get_device_name()}: copy {copy_gb_s:.0f} GB/s, bf16 matmul "
          f"{tflops:.0f} TFLOP/s", flush=True)
    bench = Bench(args)
    print(f"{args.model}: weights ready after {time.perf_counter() - start:.1f} s; ours: "
          f"{bench.hook_status}", flush=True)
    for batch in args.batches:
        for context in args.contexts:
            bench.run_config(batch, context, copy_gb_s, tflops)
            # after every configuration, so that a run cut short keeps what it measured
            write_outputs(bench_report(args, bench, copy_gb_s, tflops, start), args.out)
    report = bench_report(args, bench, copy_gb_s, tflops, start)
    files = write_outputs(report, args.out)
    print(markdown_report(report))
    print(f"wrote {', '.join(str(f) for f in files)} after {report['wall_s']:.0f} s")
    return report


if __name__ == "__main__":
    main()
