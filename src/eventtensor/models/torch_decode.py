"""A plain PyTorch decode step of Llama 3 / Qwen3 (no transformers): the baseline that the
megakernel decode is measured against, in bfloat16 on CUDA or float32 on the CPU.

`TorchDecoder` holds the weights as torch tensors in HF layout (`[out, in]`, applied with
`F.linear`; q/k/v and gate/up concatenated along the output features) and a static KV cache
in the compute dtype, keys stored after RoPE: `k_cache[l]`, `v_cache[l]` of shape
[max_batch, K, max_context, D] for layer l (one allocation per layer, so that every layer's
attention sees the same tensor layout and Inductor tunes its matmuls once, not per layer).
One `step` runs one new token of each of B requests, request b in cache slot b at its own
position: it appends k and v at positions[b] and attends over cache positions
0 .. positions[b] of slot b (a mask over the static context bound hides the rest), following
`reference.py` step for step. Matrix products run in the compute dtype; RMSNorm,
RoPE and softmax in float32; the residual stream stays in the compute dtype.

A step has static shapes for a given (B, context) and never waits for the host (no `.item()`,
no data-dependent shapes), so `graph_step` captures it as a CUDA graph and `compiled_step`
compiles it whole with torch.compile.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from .config import ModelConfig
from .reference import rope_cos_sin, rope_inv_freq
from .weights import check_weights

StepFn = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]
COMPILE_MODES = ("max-autotune", "max-autotune-no-cudagraphs")


@dataclass(frozen=True)
class LayerWeights:
    """One decoder layer's weights: matrices in the compute dtype ([out, in]; qkv is q, k, v
    stacked, gate_up is gate, up stacked), norm weights in float32 (q_norm, k_norm None
    without qk_norm)."""

    input_norm: torch.Tensor
    qkv: torch.Tensor
    o: torch.Tensor
    q_norm: torch.Tensor | None
    k_norm: torch.Tensor | None
    post_norm: torch.Tensor
    gate_up: torch.Tensor
    down: torch.Tensor

    def tensors(self) -> list[torch.Tensor]:
        """Every tensor of the layer."""
        return [t for t in vars(self).values() if t is not None]


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x / sqrt(mean(x^2 over the last axis) + eps) * weight, computed in float32, returned
    in x's dtype."""
    xf = x.float()
    return (xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps) * weight).to(x.dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate-half RoPE of x [B, heads, D] with cos, sin [B, 1, D] (HF's convention)."""
    half = x.shape[-1] // 2
    return x * cos + torch.cat([-x[..., half:], x[..., :half]], dim=-1) * sin


class StaticStep:
    """`fn` of one batch size on static input buffers `tokens`, `positions` [batch] (int64).

    Calling it with tokens and positions [batch] copies them into the buffers and runs `fn`
    on them; with `capture` the first call captures `fn` as a CUDA graph (after two warm-up
    runs on a side stream) and every call replays it. A decode step is idempotent (it writes
    the same k, v at the same positions), so the warm-up runs change nothing the first replay
    would not. Returns `fn`'s (logits, next_tokens): with `capture` (or when `fn` replays
    graphs itself) these are static tensors, overwritten by the next call."""

    def __init__(self, fn: StepFn, batch: int, device: torch.device, capture: bool):
        self.batch = batch
        self.tokens = torch.zeros(batch, dtype=torch.int64, device=device)
        self.positions = torch.zeros(batch, dtype=torch.int64, device=device)
        self.graph: torch.cuda.CUDAGraph | None = None
        self._fn = fn
        self._capture = capture
        self._out: tuple[torch.Tensor, torch.Tensor] | None = None

    def __call__(self, tokens: torch.Tensor,
                 positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.tokens.copy_(tokens)
        self.positions.copy_(positions)
        if not self._capture:
            return self._fn(self.tokens, self.positions)
        if self.graph is None:
            self.graph, self._out = self._record()
        self.graph.replay()
        assert self._out is not None
        return self._out

    def _record(self) -> tuple[torch.cuda.CUDAGraph, tuple[torch.Tensor, torch.Tensor]]:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                self._fn(self.tokens, self.positions)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = self._fn(self.tokens, self.positions)
        return graph, out


class TorchDecoder:
    """The decode step of `config` with `weights` (HF names; numpy arrays or tensors, as
    `random_weights` / `load_checkpoint` give them), for up to `max_batch` requests of up to
    `max_context` positions each, computing in `dtype` on `device`. The KV cache starts as
    zeros; `k_cache[l][b, :, p]` holds request b's key at position p in layer l."""

    def __init__(self, config: ModelConfig, weights: Mapping[str, np.ndarray | torch.Tensor],
                 max_batch: int, max_context: int, device: str | torch.device = "cpu",
                 dtype: torch.dtype = torch.float32):
        check_weights(config, {n: np.broadcast_to(np.float32(0), tuple(w.shape))
                               for n, w in weights.items()})  # names and shapes only
        if max_batch <= 0 or not 0 < max_context <= config.max_position_embeddings:
            raise ValueError(f"need max_batch > 0 and 0 < max_context <= "
                             f"{config.max_position_embeddings}, got {max_batch}, {max_context}")
        self.config, self.max_batch, self.max_context = config, max_batch, max_context
        self.device, self.dtype = torch.device(device), dtype

        def matrix(*names: str) -> torch.Tensor:
            return torch.cat([self._tensor(weights[n], dtype) for n in names])

        def norm(name: str) -> torch.Tensor:
            return self._tensor(weights[name], torch.float32)

        self.embed = matrix("model.embed_tokens.weight")
        self.lm_head = self.embed if config.tie_word_embeddings else matrix("lm_head.weight")
        self.final_norm = norm("model.norm.weight")
        self.layers = []
        for i in range(config.num_layers):
            p = f"model.layers.{i}."
            a = p + "self_attn."
            self.layers.append(LayerWeights(
                input_norm=norm(p + "input_layernorm.weight"),
                qkv=matrix(a + "q_proj.weight", a + "k_proj.weight", a + "v_proj.weight"),
                o=matrix(a + "o_proj.weight"),
                q_norm=norm(a + "q_norm.weight") if config.qk_norm else None,
                k_norm=norm(a + "k_norm.weight") if config.qk_norm else None,
                post_norm=norm(p + "post_attention_layernorm.weight"),
                gate_up=matrix(p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"),
                down=matrix(p + "mlp.down_proj.weight")))
        cos, sin = rope_cos_sin(rope_inv_freq(config), np.arange(max_context))
        self.cos = self._tensor(cos, torch.float32)                # [max_context, D]
        self.sin = self._tensor(sin, torch.float32)
        shape = (max_batch, config.num_kv_heads, max_context, config.head_dim)
        self.k_cache, self.v_cache = ([torch.zeros(shape, dtype=dtype, device=self.device)
                                       for _ in range(config.num_layers)] for _ in range(2))
        self._slots = torch.arange(max_batch, device=self.device)
        self._cache_positions = torch.arange(max_context, device=self.device)

    def _tensor(self, array: np.ndarray | torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        return torch.as_tensor(array).to(device=self.device, dtype=dtype).contiguous()

    def tensors(self) -> list[torch.Tensor]:
        """Every tensor a step reads or writes besides its inputs: weights, RoPE tables, the
        KV cache."""
        out = [self.embed, self.lm_head, self.final_norm, self.cos, self.sin, self._slots,
               self._cache_positions, *self.k_cache, *self.v_cache]
        return out + [t for layer in self.layers for t in layer.tensors()]

    # ----- one step -----
    def step(self, tokens: torch.Tensor, positions: torch.Tensor,
             context: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """One decode step of B = len(tokens) requests in cache slots 0..B-1: token b (int64)
        at position positions[b] (int64), which must lie in [0, context) (not checked on the
        device). Attends over the first `context` cache positions (default max_context),
        masked beyond positions[b]. Returns logits [B, V] (float32) and their argmax [B]
        (int64, first index on ties)."""
        context = self.max_context if context is None else context
        batch = tokens.shape[0]
        if tokens.shape != (batch,) or positions.shape != (batch,):
            raise ValueError(f"tokens and positions must both be [B], got {tuple(tokens.shape)}"
                             f" and {tuple(positions.shape)}")
        if not 0 < batch <= self.max_batch or not 0 < context <= self.max_context:
            raise ValueError(f"need 0 < B <= {self.max_batch} and 0 < context <= "
                             f"{self.max_context}, got B {batch}, context {context}")
        cfg = self.config
        cos, sin = self.cos[positions][:, None], self.sin[positions][:, None]  # [B, 1, D]
        visible = self._cache_positions[:context] <= positions[:, None]       # [B, context]
        x = F.embedding(tokens, self.embed)
        for i, w in enumerate(self.layers):
            h = rms_norm(x, w.input_norm, cfg.rms_norm_eps)
            x = x + self._attention(i, w, h, positions, cos, sin, visible)
            h = rms_norm(x, w.post_norm, cfg.rms_norm_eps)
            gate, up = F.linear(h, w.gate_up).chunk(2, dim=-1)
            x = x + F.linear(F.silu(gate) * up, w.down)
        logits = F.linear(rms_norm(x, self.final_norm, cfg.rms_norm_eps), self.lm_head).float()
        return logits, logits.argmax(dim=-1)

    def _attention(self, layer: int, w: LayerWeights, h: torch.Tensor, positions: torch.Tensor,
                   cos: torch.Tensor, sin: torch.Tensor, visible: torch.Tensor) -> torch.Tensor:
        """Self-attention of `layer` on the normed rows h [B, E]: appends k, v to the cache
        and returns the output projection [B, E]."""
        cfg = self.config
        batch, context = visible.shape
        H, K, D = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        q, k, v = F.linear(h, w.qkv).split([cfg.q_size, cfg.kv_size, cfg.kv_size], dim=-1)
        q, k = q.float().view(batch, H, D), k.float().view(batch, K, D)
        if cfg.qk_norm:
            q = rms_norm(q, w.q_norm, cfg.rms_norm_eps)
            k = rms_norm(k, w.k_norm, cfg.rms_norm_eps)
        q = (apply_rope(q, cos, sin) * D ** -0.5).to(self.dtype)
        slots = self._slots[:batch]
        self.k_cache[layer][slots, :, positions] = apply_rope(k, cos, sin).to(self.dtype)
        self.v_cache[layer][slots, :, positions] = v.view(batch, K, D)
        keys = self.k_cache[layer][:batch, :, :context]                  # [B, K, context, D]
        values = self.v_cache[layer][:batch, :, :context]
        scores = torch.matmul(q.view(batch, K, H // K, D), keys.transpose(-1, -2)).float()
        scores = scores.masked_fill(~visible[:, None, None, :], float("-inf"))
        attn = torch.matmul(torch.softmax(scores, dim=-1).to(self.dtype), values)
        return F.linear(attn.reshape(batch, H * D), w.o)

    # ----- captured and compiled steps -----
    def graph_step(self, batch: int, context: int | None = None) -> StaticStep:
        """`step` of `batch` requests over `context` positions (default max_context) on
        static input buffers, captured as a CUDA graph on its first call and replayed after
        (see `StaticStep`). Off CUDA it runs `step` eagerly on the buffers."""
        self._check_static(batch, context)
        return StaticStep(lambda t, p: self.step(t, p, context), batch, self.device,
                          capture=self.device.type == "cuda")

    def compiled_step(self, batch: int, context: int | None = None, *,
                      mode: str | None = "max-autotune", backend: str = "inductor",
                      ) -> StaticStep:
        """`step` of `batch` requests over `context` positions compiled whole
        (`fullgraph=True`, `dynamic=False`: one compilation per (batch, context)), on static
        input buffers. The weights, the KV cache and the buffers are marked static, so with
        mode "max-autotune" Inductor's CUDA graphs replay without copying them and may write
        the cache in place; each call marks a new CUDA-graph step. With
        "max-autotune-no-cudagraphs" on CUDA the compiled step is captured in a CUDA graph of
        our own (as `graph_step`). `mode` must be None for backends other than "inductor".
        Raises dynamo's recompile limit to 64 so that every (batch, context) compiles."""
        self._check_static(batch, context)
        if backend == "inductor" and mode not in COMPILE_MODES:
            raise ValueError(f"mode must be one of {COMPILE_MODES}, got {mode!r}")
        dynamo_config = torch._dynamo.config
        dynamo_config.recompile_limit = max(dynamo_config.recompile_limit, 64)
        compiled = torch.compile(self.step, mode=mode, backend=backend, fullgraph=True,
                                 dynamic=False)
        inductor_graphs = backend == "inductor" and mode == "max-autotune"

        def run(tokens: torch.Tensor, positions: torch.Tensor):
            if inductor_graphs:
                torch.compiler.cudagraph_mark_step_begin()
            return compiled(tokens, positions, context)

        step = StaticStep(run, batch, self.device,
                          capture=self.device.type == "cuda" and not inductor_graphs)
        for t in self.tensors() + [step.tokens, step.positions]:
            torch._dynamo.mark_static_address(t)
        return step

    def _check_static(self, batch: int, context: int | None) -> None:
        if not 0 < batch <= self.max_batch:
            raise ValueError(f"batch must lie in [1, {self.max_batch}], got {batch}")
        if context is not None and not 0 < context <= self.max_context:
            raise ValueError(f"context must lie in [1, {self.max_context}], got {context}")
