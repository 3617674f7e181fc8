"""The decode step on the GPU: the decode program (`decode.py`) as one megakernel launch per
step, for every batch size from one compiled kernel.

`GpuDecodeSession` holds the weights (bfloat16) and the KV caches on the device and runs
steps; it has the request bookkeeping of the interpreter's `DecodeSession`, so
`decode.greedy_generate` drives either. Each layer's cache is one buffer passed as both the
cache input and the cache output of the program: the step appends the new rows in place
(the attention tasks never read the row being appended, see `decode.py`).
"""
from __future__ import annotations

import sys
import time
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import numpy as np

from ..backends.cuda.codegen import ATTN_SCORE_FLOATS, attention_group
from ..ir import Program
from ..schedule.cost import CostModel
from .config import ModelConfig
from .decode import (
    DecodeTiles,
    RequestSlots,
    StepResult,
    build_decode_program,
    cache_name,
    tensor_name,
)
from .reference import rope_inv_freq
from .weights import check_weights

PER_TOKEN = ("tokens", "positions", "slots", "starts")  # inputs of one entry per token


# The split-K choice (`split_by_waves`): a GPU's multiprocessors (132 on the H100 and H200)
# run a phase's tasks in waves, one task each. A one-row task of the decode step streams its
# weights at about 26 GB/s (a 64 KB round of loads every 2.5 µs: Llama-3.2-1B's 256 KB q
# tasks take 10.4 µs with the GPU at 1.2 TB/s) and costs about 4 µs more whatever its size
# (waits, x staging, the reduction, the notifies: its 64 KB k and v tasks take 5-6 µs), about
# 96 KB of streaming (benchmarks/results/splits/decode_trace_d75f873_h100.md). (A bare loop
# of the same 64 KB rounds streams 98 GB/s on one SM of an H100, 73 GB/s each on 32 and 23 on
# all 132: benchmarks/results/stream/sm_stream_904f468_h100.md.)
NUM_SMS = CostModel.num_sms
TASK_OVERHEAD_BYTES = 96 << 10


def split_by_waves(k: int, tiles: int, bytes_per_k: int, fallback: int | None,
                   min_slice: int = 256) -> int | None:
    """The split of a linear's K of `k` (`tiles` column tiles in its phase, `bytes_per_k`
    weight bytes a tile per unit of k) whose phase costs least in the wave model: waves of
    NUM_SMS tasks, each costing its weight bytes plus TASK_OVERHEAD_BYTES; a power of two up
    to 16 dividing k with K-slices of at least `min_slice`, ties to the smaller; `fallback`
    where none is."""
    def cost(s: int) -> int:
        return -(-tiles * s // NUM_SMS) * (bytes_per_k * k // s + TASK_OVERHEAD_BYTES)
    splits = [s for s in (1, 2, 4, 8, 16) if k % s == 0 and k // s >= min_slice]
    return min(splits, key=lambda s: (cost(s), s)) if splits else fallback


def gpu_tiles(config: ModelConfig, max_tokens: int) -> DecodeTiles:
    """Tiles for the H200: one row tile for up to 64 tokens (each weight tile is read once
    per step); 256-column FFN tiles, 128-column output and vocabulary tiles, and norms and
    residual adds over tiles of 8 rows by 256 columns (benchmarks/results/history/
    decode_tiles_6dcf913.md: these norm, residual and gate/up tiles took Llama-3.2-1B from
    3.43 to 2.88 ms at B = 1 and 10.68 to 7.31 ms at B = 16).
    Split-K: 4 over the hidden size for k and v; q's split as many times more as makes its
    tasks of at most 256 KB of weights (a KV head's q columns are G times its k columns);
    gate and up, down and o by `split_by_waves` (Llama-3.2-1B: 2, 8 over the FFN, 8; Qwen3-8B:
    4, 4, 4). Fewer, longer split-K tasks leave fewer partials to the RoPE, SiLU and residual
    tasks that sum them and fewer tasks to dispatch: on an H100, Llama-3.2-1B, context 512,
    from 2.104 / 2.890 / 5.699 ms at B = 1 / 16 / 64 with splits 16 / 4 / 32 (q, k, v /
    gate, up / down) to 1.901 / 2.661 / 5.302 with the down split 8 alone, and with
    ET_DEFER_MAX = 1 (below) to 1.757 / 2.324 / 4.851 ms with 4 / 2 / 8; 8 / 2 / 8: 1.748 /
    2.391 / 4.882, 2 / 2 / 8: 1.836 / 2.370 / 5.025; down splits of 4 or 16 are slower
    (benchmarks/results/splits/); q split 8 with k and v 2: 1.727 / 2.418 / 5.100, q 16:
    1.736 / 2.464 / 4.966 against 1.742 / 2.347 / 4.866 (q's partials cost more than its
    shorter tasks gain from B = 16). Qwen3-8B (splits/decode_tiles_qwen3_9f7b279_h100.md):
    8.175 / 11.056 / 22.898 ms with Llama's splits (1 MB q tasks, 192 gate and up tasks of
    1 MB: two waves); q 8, k and v 2, gate and up, down and o 4: 7.412 / 10.851 / 21.699;
    these tiles (q 16) 7.464 / 10.770 / 21.247 against Llama's splits' 8.177 / 11.103 /
    23.020 in one run (splits/decode_tiles_qwen3_deb025d_h100.md).
    KV chunks: 128 positions where a step has fewer than 16 tokens, so that a few requests'
    attention spreads over more tasks; else as many as the fast path's score buffer holds
    (1024 for up to 4 query heads a KV head), so that a request's attention is one task a KV
    head and needs no merge up to that context. Llama-3.2-1B, context 512, kernel for 64
    tokens, on an H100: 5.88 to 4.64 ms at B = 16, 16.53 to 12.43 ms at B = 64, 2.21 to
    2.31 ms at B = 1 (benchmarks/results/decode_tiles_h100.md); chunks of 256 or 128 in that
    kernel are still slower at every B (2.176 / 3.496 / 9.054 and 2.156 / 3.838 / 11.972 ms
    against 2.103 / 2.891 / 5.701, benchmarks/results/splits/decode_tiles_233086c_h100.md).
    RoPE tiles of 4 rows: the projections' row tile holds every token of a step, and RoPE
    over 64 rows was one task a KV head of 67 µs in every layer at B = 64
    (benchmarks/results/history/decode_trace_6bfeb4b.md). Norms of 2 rows (residual adds
    kept at 8, `residual_rows`) take B = 16 from 3.13 to 2.94 ms but B = 64 from 6.84 to
    7.11 ms on an H200 (benchmarks/results/norms/decode_norm_rows_1623f78.md): 8 rows stay."""
    E, F, Q = config.hidden_size, config.intermediate_size, config.q_size
    K = config.num_kv_heads
    ffn, n_tile = (256 if F % 256 == 0 else 128), 128
    k_split = 4 if E % 4 == 0 else 1
    q_cols = Q // K  # a q tile: one KV head's query heads
    q_split = k_split
    while q_cols * (E // q_split) * 2 > 256 << 10 and E % (2 * q_split) == 0:
        q_split *= 2
    mlp_split = split_by_waves(E, 2 * -(-F // ffn), 2 * ffn, 2 if E % 2 == 0 else 1)
    down_split = split_by_waves(F, -(-E // n_tile), 2 * n_tile, 8 if F % 8 == 0 else None)
    o_split = split_by_waves(Q, -(-E // n_tile), 2 * n_tile, K)
    group = attention_group(config.num_heads // K)
    kv_chunk = 128 if max_tokens < 16 else min(1024, ATTN_SCORE_FLOATS // group)
    return DecodeTiles(rows=min(max_tokens, 64), k_split=k_split, q_split=q_split,
                       o_split=o_split, n_tile=n_tile, ffn_tile=ffn, vocab_tile=128,
                       kv_chunk=kv_chunk, mlp_split=mlp_split, norm_rows=8, rope_rows=4,
                       residual_tile=256, down_split=down_split)


# The device-library knobs of the decode kernel: no L2 prefetch of the next task's tiles (the
# prefetches in flight delay the release fence of every small task on the step's critical
# path), weights loaded evict-first (the kernel's code, activations and KV rows stay in L2):
# Llama-3.2-1B, context 512: 2.865 to 2.246 ms at B = 1, 8.165 to 8.143 ms at B = 16
# (benchmarks/results/prefetch/decode_prefetch.md); and linears of 8 rows or more on tensor
# cores: 22.92 to 19.03 ms at B = 64, B = 1 and 16 unchanged (2.03, 7.25 ms;
# benchmarks/results/decode_tiles.md). Those linears' CUDA-core path is then compiled for
# blocks of up to 8 rows only (it takes more only where the tensor cores cannot: k not a
# multiple of 32, unaligned x): Llama-3.2-1B's kernel has 33.6k instructions instead of
# 36.0k and compiles in 12.1-13.1 s instead of 14.7 s on a 2-CPU host
# (benchmarks/results/history/kernel_size_af40a0f.md).
# The attention's KV words stream through 16 words a thread of shared memory (ET_ATTN_STREAM):
# on an H100, 2.612 / 4.290 / 8.877 to 2.476 / 4.210 / 8.080 ms at B = 1 / 16 / 64, the
# attention bodies summed over the CTAs 263 to 163 ms at B = 64; 32 words: 2.605 / 4.497 /
# 8.497 ms (benchmarks/results/attention/decode_attn_stream.md). The tensor-core linears'
# weight words go through a ring of 4 blocks of the same dynamic shared memory
# (ET_LINEAR_MMA_RING), 3 blocks in flight whatever x's staging waits for: on an H200,
# 3.435 / 7.039 to 3.138 / 6.800 ms at B = 16 / 64 (B = 1, whose linears are on CUDA cores,
# 1.93 / 1.89 ms); the ring's first blocks issued before the task's waits (ET_LINEAR_EARLY)
# gained nothing (3.209 / 6.780 ms; benchmarks/results/mma_ring/decode_tiles_73b62b0.md).
# A block's MMAs in the spread order (ET_LINEAR_MMA_SPREAD: every accumulator's hi MMA, then
# the lo ones): on an H100, 2.106 / 2.959 / 6.481 to 2.106 / 2.911 / 6.208 ms at B = 1 / 16 /
# 64, the same logits; a ring of 8 blocks instead of 4 was slower (2.161 / 3.113 / 6.784 ms,
# with the spread order 6.487 ms at B = 64), and so were 2 or 3 rounds of the one-row
# linear's weights in shared memory (ET_LINEAR_ASYNC: 2.080 / 3.016 / 6.563 and 2.314 /
# 3.213 / 6.742 ms; benchmarks/results/mma_ring/decode_tiles_ab00c3d_h100.md).
# Every task publishes its notifies as soon as its writes are fenced (ET_DEFER_MAX = 1, no
# notifies held back over the wait-free tasks after it, as the q projection's were over the
# k projection's and the gate's over the up's, 7.6 and 12.3 µs at B = 1): on an H100, 2.103 /
# 2.891 / 5.701 to 2.055 / 2.812 / 5.660 ms at B = 1 / 16 / 64, and with the down split 8
# of gpu_tiles 1.901 / 2.661 / 5.302 to 1.873 / 2.620 / 5.199 (2 tasks held: 1.907 / 2.602 /
# 5.243; benchmarks/results/splits/decode_tiles_233086c_h100.md and
# decode_tiles_down_233086c_h100.md).
# One-row linears (B = 1) stream their weights through 2 rounds of 64 KB in shared memory
# (ET_LINEAR_ASYNC; each step refills the slot it read, so both are in flight), both issued
# before the task's waits (ET_LINEAR_EARLY bit 1), in the launches whose steps have one-row
# linears only (`GpuDecodeSession._one_row_linears`: the ring's shared memory comes out of the
# SM's L1). On an H100, 1.595 / 2.338 / 4.854 ms at B = 1 / 16 / 64, against 1.666 with one
# round early and 1.743 with none (benchmarks/results/splits/
# decode_tiles_early_rounds_5ffd0c5_h100.md); 3 rounds 1.745 ms at B = 1
# (splits/decode_tiles_rounds_07d94a7_h100.md). The early copies speed the projections but
# slow the small tasks between them (profile splits/decode_trace_rounds_07d94a7_h100.md: the
# MLP's norm 5.2 µs instead of 3.5). The tensor-core linears' first blocks sent early too
# (bit 2) slowed B = 16 and 64 (splits/decode_tiles_async_2c082ff_h100.md), and early parts
# run in launches without the ring cost their tile views before every linear task's waits
# (splits/decode_tiles_async_f76fe2f_h100.md).
DECODE_KNOBS = {"ET_PREFETCH_NEXT": 0, "ET_WEIGHTS_EVICT_FIRST": 1, "ET_LINEAR_MMA": 8,
                "ET_LINEAR_CORE_ROWS": 8, "ET_ATTN_STREAM": 16, "ET_LINEAR_MMA_RING": 4,
                "ET_LINEAR_MMA_SPREAD": 1, "ET_DEFER_MAX": 1, "ET_LINEAR_ASYNC": 2,
                "ET_LINEAR_EARLY": 1}


def decode_knobs(knobs: Mapping[str, int] | None) -> dict[str, int]:
    """DECODE_KNOBS overridden by `knobs`; with the stage ring (ET_STAGE_BYTES), whose copies
    carry their own L2 hint and take the dynamic shared memory, without the evict-first
    weight loads, the attention's KV stream and the linears' rings (and their early
    copies)."""
    merged = dict(DECODE_KNOBS)
    if (knobs or {}).get("ET_STAGE_BYTES"):
        for knob in ("ET_WEIGHTS_EVICT_FIRST", "ET_ATTN_STREAM", "ET_LINEAR_MMA_RING",
                     "ET_LINEAR_ASYNC", "ET_LINEAR_EARLY"):
            merged.pop(knob, None)
    return {**merged, **(knobs or {})}


def decode_program_cached(config: ModelConfig, max_batch: int, max_context: int,
                          tiles: DecodeTiles, **options) -> Program:
    """`build_decode_program` with these arguments, from the disk cache (`build_cache`)
    when this exact package built it before: a warm start loads it rather than builds it."""
    from ..backends.cuda import build_cache
    key = build_cache.entry_key(repr((config, max_batch, max_context, tiles,
                                      sorted(options.items()))))
    name = f"{config.architecture}-l{config.num_layers}"
    program = build_cache.load("decode-program", name, key, Program)
    if program is None:
        program = build_decode_program(config, max_batch, max_context, tiles, **options)
        build_cache.store("decode-program", name, key, program)
    return program


def session_program(config: ModelConfig, max_batch: int, max_context: int,
                    tiles: DecodeTiles, max_tokens: int,
                    cache_dtype: str = "bfloat16") -> Program:
    """The decode program a `GpuDecodeSession` of these arguments runs (bf16 weights),
    from the disk cache where it was built before."""
    return decode_program_cached(config, max_batch, max_context, tiles,
                                 max_tokens=max_tokens, weight_dtype="bfloat16",
                                 cache_dtype=cache_dtype)


def precompile(config: ModelConfig, max_batch: int, max_context: int,
               builds: Sequence[tuple[DecodeTiles, str, Mapping[str, Any]]],
               cache_dtype: str = "bfloat16") -> int:
    """The kernels `GpuDecodeSession`s of these `builds` (tiles, scheduling mode, Megakernel
    options: knobs, ctas_per_sm, fast_compile) would compile, compiled in parallel (NVRTC,
    a thread per CPU) into the disk cache, so that the sessions then find them there (their
    `compile_s` then no longer counts the compile). Returns how many distinct kernels."""
    from ..backends.cuda.build_cache import prepare_cached
    from ..backends.cuda.codegen import generate, kernel_name
    from ..backends.cuda.compiler import ARCH, compile_many
    kernels: dict[tuple[str, str | None], str] = {}
    for tiles, mode, options in builds:
        program = prepare_cached(session_program(config, max_batch, max_context, tiles,
                                                 max_batch, cache_dtype), mode)
        ctas = options.get("ctas_per_sm", 1)
        source = generate(program, mode, ctas, decode_knobs(options.get("knobs")))
        kernels[source, options.get("fast_compile")] = kernel_name(program, mode, ctas)
    compile_many([(src, name, ARCH, fast) for (src, fast), name in kernels.items()])
    return len(kernels)


def _say(progress: bool, message: str) -> None:
    if progress:
        print(f"[eventtensor] {message}", file=sys.stderr, flush=True)


class GpuDecodeSession(RequestSlots):
    """Decode state on the GPU for one program: weights, per-layer KV caches
    [max_batch, K, C, D] in `cache_dtype`, and the requests (`RequestSlots`). `step` runs one
    launch of the megakernel (scheduling `mode`) for any number of tokens up to `max_tokens`
    (default max_batch; decode tokens and prompt chunks, see `admit`).
    `weights`: HF name -> array or tensor of the config's shapes (values rounded to bf16).
    `kernel`: options of `Megakernel` (num_sms, watchdog_s, ...; its `knobs` over
    DECODE_KNOBS, see `decode_knobs`). `compile_s` (building the program and its kernel,
    for every batch size; `kernel.build.seconds` per phase) and `load_s` record the
    warm-up."""

    def __init__(self, config: ModelConfig, weights: Mapping[str, Any], max_batch: int,
                 max_context: int, tiles: DecodeTiles | None = None, *, mode: str = "static",
                 cache_dtype: str = "bfloat16", max_tokens: int | None = None,
                 progress: bool = True, **kernel):
        import torch

        from ..backends.cuda.runtime import Megakernel
        if not torch.cuda.is_available():
            raise RuntimeError("the GPU decode session needs a CUDA GPU, and torch sees none "
                               "(generate with device='cpu' runs the interpreter)")
        check_weights(config, {n: np.broadcast_to(np.float32(0), tuple(w.shape))
                               for n, w in weights.items()})  # names and shapes
        super().__init__(config.vocab_size, max_batch, max_context, max_tokens)
        self.config, self.mode, self.torch = config, mode, torch
        self.tiles = tiles or gpu_tiles(config, self.max_tokens)
        start = time.perf_counter()
        self.program = session_program(config, max_batch, max_context, self.tiles,
                                       self.max_tokens, cache_dtype)
        _say(progress, f"building the {mode} decode megakernel ({config.architecture}, "
                       f"{config.num_layers} layers, {len(self.program.grids)} task grids, "
                       f"{max_batch} requests, B <= {self.max_tokens} tokens a step)")
        kernel["knobs"] = decode_knobs(kernel.get("knobs"))
        kernel.setdefault("linear_ring", self._one_row_linears)
        self.kernel = Megakernel(self.program, mode, say=lambda m: _say(progress, m), **kernel)
        self.compile_s = time.perf_counter() - start
        phases = ", ".join(f"{k} {v:.2f}" for k, v in self.kernel.build.seconds.items()
                           if k != "total")
        _say(progress, f"built in {self.compile_s:.1f} s "
                       f"({'all from the cache' if self.kernel.build.cached else phases})")
        start = time.perf_counter()
        self.tensors = self._device_tensors(weights, cache_dtype, progress)
        self.load_s = time.perf_counter() - start
        self._launched: dict[int, Any] = {}  # batch size -> its launch state (relaunched)

    def _one_row_linears(self, env: Mapping[str, int]) -> bool:
        """Whether a step of env["B"] tokens has linear tasks of one row (a row tile of one
        token): only their launches take the one-row linear's ring (ET_LINEAR_ASYNC) out of
        L1 (`Megakernel`'s `linear_ring`)."""
        return (env["B"] - 1) % self.tiles.rows == 0

    def _device_tensors(self, weights: Mapping[str, Any], cache_dtype: str,
                        progress: bool) -> dict[str, Any]:
        torch, cfg = self.torch, self.config
        shapes = cfg.param_shapes()
        out: dict[str, Any] = {}
        for k, name in enumerate(shapes):
            w = weights[name]
            w = w if isinstance(w, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(w))
            out[tensor_name(name)] = w.to(device="cuda", dtype=torch.bfloat16).contiguous()
            if (k + 1) % 50 == 0 or k + 1 == len(shapes):
                _say(progress, f"weights on the GPU: {k + 1}/{len(shapes)} tensors")
        out["rope_inv_freq"] = torch.tensor(rope_inv_freq(cfg), dtype=torch.float32,
                                            device="cuda")
        dtype = torch.bfloat16 if cache_dtype == "bfloat16" else torch.float32
        shape = (self.max_batch, cfg.num_kv_heads, self.max_context, cfg.head_dim)
        for layer in range(cfg.num_layers):
            for kv in "kv":
                cache = torch.zeros(shape, dtype=dtype, device="cuda")
                out[cache_name(kv, layer)] = out[cache_name(kv, layer, out=True)] = cache
        # tokens, positions, slots and starts: rows of one buffer, written by one copy a step
        self._requests = torch.zeros(len(PER_TOKEN), self.max_tokens, dtype=torch.int32,
                                     device="cuda")
        for row, name in enumerate(PER_TOKEN):
            out[name] = self._requests[row]
        return out

    def fill_caches(self, seed: int) -> None:
        """Every KV cache row set to seeded standard-normal values (benchmarks: attention
        reads real numbers at any position)."""
        gen = self.torch.Generator(device="cuda").manual_seed(seed)
        for layer in range(self.config.num_layers):
            for kv in "kv":
                t = self.tensors[cache_name(kv, layer)]
                t.copy_(self.torch.randn(t.shape, generator=gen, device="cuda"))

    def feed(self, batch: int) -> dict[str, Any]:
        """The launch's tensors for `batch` tokens: the per-token inputs are the first
        `batch` entries of fixed buffers (their pointers, so the launch arguments, do not
        change from step to step)."""
        return {n: t[:batch] if n in PER_TOKEN else t for n, t in self.tensors.items()}

    def set_requests(self, tokens, positions, slots, starts=None) -> None:
        """The first len(tokens) entries of the per-token buffers (one host-to-device copy):
        each token's id, position, cache slot and the row of its request's first token in
        the step (default: its own row, one token per request)."""
        starts = np.arange(len(tokens)) if starts is None else starts
        values = np.stack([np.asarray(v, np.int32) for v in (tokens, positions, slots, starts)])
        self._requests[:, :values.shape[1]].copy_(self.torch.from_numpy(values))

    def launch(self, batch: int, stream=None):
        """Launch one step for the first `batch` tokens of the per-token buffers;
        returns the launch state (for `kernel.sync`). A batch size's first launch binds the
        tensors and uploads the launch arguments; later ones relaunch them as they are (the
        pointers never change)."""
        st = self._launched.get(batch)
        if st is None:
            st = self._launched[batch] = self.kernel.launch({"B": batch}, self.feed(batch),
                                                            stream=stream)
        else:
            self.kernel.relaunch(st, stream)
        return st

    def step(self, request_ids: Sequence[Hashable], tokens: Sequence[int] | np.ndarray,
             mode: str | None = None) -> StepResult:
        """Run the step's tokens (see `admit`), append each token's k and v at its position
        and advance its request. The logits are the launch's CUDA tensor, overwritten by the
        next step of the same number of tokens."""
        if mode not in (None, self.mode):
            raise ValueError(f"this session's megakernel is compiled for mode '{self.mode}'")
        toks, slots, pos, starts = self.admit(request_ids, tokens)
        self.set_requests(toks, pos, slots, starts)
        st = self.launch(len(toks))
        self.kernel.sync(st)
        self.advance(request_ids)
        result = st.arrays["tensors"]
        return StepResult(result["next_tokens"].cpu().numpy().astype(np.int64),
                          result["logits"], None)


BENCH_MODES = ("static", "dynamic", "unfused")
_bench_sessions: dict[tuple, GpuDecodeSession] = {}


def bench_paths(config: ModelConfig, weights: Mapping[str, Any], batch: int, context: int,
                modes: Sequence[str] = BENCH_MODES, max_batch: int = 64,
                max_context: int = 1024) -> dict[str, Any]:
    """Our decode step for `benchmarks/decode_bench.py`: per scheduling mode, a callable
    launching one step (no host sync) of `batch` requests, each at position context - 1 of
    its own cache slot, so that attention reads `context` positions of caches filled with
    random values. One session (compiled kernel) per mode serves every batch and context
    up to its maximum; each callable's `compile_s` is its session's compile time (once for
    all batch sizes) and `warmup_s` the first launch for this batch size (building its
    tables). A mode that fails is returned as its exception."""
    paths: dict[str, Any] = {}
    for mode in modes:  # (one at a time: each session's compile_s is its own build's)
        key = (config, mode, max_batch, max(max_context, context))
        try:
            session = _bench_sessions.get(key)
            if session is None:
                session = GpuDecodeSession(config, weights, max_batch, int(key[3]), mode=mode)
                session.fill_caches(seed=0)
                _bench_sessions[key] = session
            tokens = np.random.default_rng(batch).integers(0, config.vocab_size, batch)
            session.set_requests(tokens, np.full(batch, context - 1), np.arange(batch))
            start = time.perf_counter()
            st = session.launch(batch)
            session.kernel.sync(st)
            kernel = session.kernel

            def step(st=st, kernel=kernel) -> None:
                kernel.relaunch(st)
            step.warmup_s = time.perf_counter() - start  # type: ignore[attr-defined]
            step.compile_s = session.compile_s  # type: ignore[attr-defined]
            paths[f"eventtensor {mode}"] = step
        except Exception as exc:  # recorded by the benchmark as this path's failure
            paths[f"eventtensor {mode}"] = exc
    return paths
