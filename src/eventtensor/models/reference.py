"""The numpy reference of a model step: the executable specification a megakernel's decode
(and prefill) is checked against.

One `ReferenceModel.step` runs T new tokens of R requests through the model. Requests are
ragged: each brings its own number of new tokens and has its own cached past; attention is
causal within a request and never crosses requests. Per layer (legend of `config.py`, T rows):

  h = rms_norm(x, input_layernorm)                      [T, E]
  q, k, v = h @ Wq.T, h @ Wk.T, h @ Wv.T                [T, H, D] [T, K, D] [T, K, D]
  q, k = rms_norm(q, q_norm), rms_norm(k, k_norm)       per head, Qwen3 only
  q, k = rope(q, pos), rope(k, pos)                     rotate-half, HF's convention
  k, v appended to the request's cache; query head j reads KV head j // (H/K)
  a = softmax(q . K^T / sqrt(D), causal) . V            [T, H, D]
  x = x + a.reshape(T, H*D) @ Wo.T
  h = rms_norm(x, post_attention_layernorm)
  x = x + (silu(h @ Wgate.T) * (h @ Wup.T)) @ Wdown.T   [T, F] -> [T, E]

then logits = rms_norm(x, model.norm) @ W.T with W the LM head or, when tied, the embeddings.
All arithmetic is in the compute dtype (float64 by default, float32 at least); RMSNorm is
x / sqrt(mean(x^2) + eps) * w.
"""
from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np

from ..dtypes import round_to_dtype
from .config import ModelConfig
from .weights import check_weights


def rope_inv_freq(config: ModelConfig) -> np.ndarray:
    """The D/2 RoPE inverse frequencies theta^(-2i/D) (float64), with Llama-3 scaling when the
    config has it: wavelengths 2*pi/f longer than original/low_freq_factor are slowed by
    `factor`, those shorter than original/high_freq_factor kept, and those between blended
    with weight s = (original/wavelength - low) / (high - low) on the unscaled frequency."""
    D = config.head_dim
    inv_freq = 1.0 / config.rope_theta ** (np.arange(0, D, 2, dtype=np.float64) / D)
    sc = config.rope_scaling
    if sc is None:
        return inv_freq
    wavelength = 2 * np.pi / inv_freq
    old = sc.original_max_position_embeddings
    s = (old / wavelength - sc.low_freq_factor) / (sc.high_freq_factor - sc.low_freq_factor)
    blended = (1 - s) * inv_freq / sc.factor + s * inv_freq
    return np.where(wavelength > old / sc.low_freq_factor, inv_freq / sc.factor,
                    np.where(wavelength < old / sc.high_freq_factor, inv_freq, blended))


def rope_cos_sin(inv_freq: np.ndarray, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of the rotation angles, [T, D]: angle[t, i] = positions[t] * inv_freq[i],
    repeated for both halves of the head (HF's rotate-half layout)."""
    angles = np.asarray(positions, np.float64)[:, None] * inv_freq[None, :]
    angles = np.concatenate([angles, angles], axis=-1)
    return np.cos(angles), np.sin(angles)


def apply_rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """Rotate x [T, heads, D]: x * cos + rotate_half(x) * sin, where rotate_half(x) =
    concat(-x[..., D/2:], x[..., :D/2]) and cos, sin are [T, D]."""
    half = x.shape[-1] // 2
    rotated = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos[:, None, :] + rotated * sin[:, None, :]


def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """x / sqrt(mean(x^2 over the last axis) + eps) * weight, computed in float32 or
    wider (the wider of x's dtype and float32)."""
    xf = x.astype(np.promote_types(x.dtype, np.float32))
    return xf / np.sqrt(np.mean(xf * xf, axis=-1, keepdims=True) + eps) * weight


def silu(x: np.ndarray) -> np.ndarray:
    """x * sigmoid(x)."""
    with np.errstate(over="ignore"):
        return x / (1 + np.exp(-x))


def causal_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Attention of one request's n new queries q [n, H, D] over its S cached keys and values
    k, v [S, K, D] (the last n of them belong to the queries themselves): query i sits at
    position S - n + i and sees keys 0 .. S - n + i. Query head j uses KV head j // (H/K).
    Returns [n, H, D]."""
    n, H, D = q.shape
    S, K, _ = k.shape
    qg = q.reshape(n, K, H // K, D)
    scores = np.einsum("nkgd,skd->kgns", qg, k) / np.sqrt(D)
    visible = np.arange(S)[None, :] <= (S - n + np.arange(n))[:, None]      # [n, S]
    scores = np.where(visible, scores, -np.inf)
    p = np.exp(scores - scores.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    return np.einsum("kgns,skd->nkgd", p, v).reshape(n, H, D)


class ReferenceModel:
    """The model of `config` with `weights` (HF names, as `load_checkpoint` or
    `random_weights` give them) and a KV cache per request id. Weights are converted once to
    `compute_dtype` (float64 doubles the memory of float32 weights). With `cache_dtype`
    (e.g. "bfloat16") the cached keys and values are rounded to that dtype, as a cache of
    that dtype holds them; a step's own new keys and values enter its attention unrounded."""

    def __init__(self, config: ModelConfig, weights: dict[str, np.ndarray],
                 compute_dtype: type[np.floating] = np.float64, cache_dtype: str | None = None):
        check_weights(config, weights)
        self.config = config
        self.dtype = np.dtype(compute_dtype)
        if self.dtype not in (np.float32, np.float64):
            raise ValueError(f"compute_dtype must be float32 or float64, got {self.dtype}")
        self.w = {n: np.asarray(a, dtype=self.dtype) for n, a in weights.items()
                  if n in config.param_shapes()}
        self.lm_head = self.w["model.embed_tokens.weight" if config.tie_word_embeddings
                              else "lm_head.weight"]
        self.inv_freq = rope_inv_freq(config)
        self.cache_dtype = cache_dtype
        # request id -> per layer (keys [S, K, D], values [S, K, D]) after RoPE
        self._kv: dict[Hashable, list[tuple[np.ndarray, np.ndarray]]] = {}

    # ----- the KV cache -----
    def past_length(self, request_id: Hashable) -> int:
        """Tokens cached for `request_id` (0 for an unknown id)."""
        layers = self._kv.get(request_id)
        return 0 if layers is None else len(layers[0][0])

    def cache(self, request_id: Hashable, layer: int) -> tuple[np.ndarray, np.ndarray]:
        """The cached keys (after RoPE) and values of `request_id` in `layer`, [S, K, D]."""
        return self._kv[request_id][layer]

    def release(self, request_id: Hashable) -> None:
        """Forget the cache of `request_id` (a later step starts it again at position 0)."""
        self._kv.pop(request_id, None)

    # ----- one step -----
    def step(self, tokens: Sequence[int] | np.ndarray,
             request_ids: Sequence[Hashable]) -> np.ndarray:
        """Run the T new `tokens`, token t belonging to request `request_ids[t]`. A request's
        tokens follow its cached past in the order given (they need not be adjacent), so
        token t sits at position past_length(r) + (number of earlier tokens of r in this
        step). Appends every new token's k and v to its request's cache and returns the
        logits of every new token, [T, vocab_size] in the compute dtype. Raises ValueError
        (changing nothing) for token ids or positions out of range."""
        cfg = self.config
        tokens = np.asarray(tokens, dtype=np.int64).reshape(-1)
        if len(request_ids) != len(tokens):
            raise ValueError(f"{len(tokens)} tokens but {len(request_ids)} request ids")
        bad = (tokens < 0) | (tokens >= cfg.vocab_size)
        if bad.any():
            raise ValueError(f"token id {tokens[bad][0]} outside the vocabulary "
                             f"[0, {cfg.vocab_size})")
        groups: dict[Hashable, list[int]] = {}
        for t, rid in enumerate(request_ids):
            groups.setdefault(rid, []).append(t)
        positions = np.empty(len(tokens), dtype=np.int64)
        for rid, idx in groups.items():
            positions[idx] = self.past_length(rid) + np.arange(len(idx))
            if positions[idx[-1]] >= cfg.max_position_embeddings:
                raise ValueError(f"request {rid!r} reaches position {positions[idx[-1]]}, "
                                 f"beyond max_position_embeddings {cfg.max_position_embeddings}")
        for rid in groups:
            if rid not in self._kv:
                empty = np.zeros((0, cfg.num_kv_heads, cfg.head_dim), self.dtype)
                self._kv[rid] = [(empty, empty)] * cfg.num_layers
        cos, sin = (a.astype(self.dtype) for a in rope_cos_sin(self.inv_freq, positions))
        x = self.w["model.embed_tokens.weight"][tokens]                          # [T, E]
        for layer in range(cfg.num_layers):
            p = f"model.layers.{layer}."
            h = rms_norm(x, self.w[p + "input_layernorm.weight"], cfg.rms_norm_eps)
            x = x + self._attention(layer, h, cos, sin, groups)
            h = rms_norm(x, self.w[p + "post_attention_layernorm.weight"], cfg.rms_norm_eps)
            x = x + self._mlp(layer, h)
        x = rms_norm(x, self.w["model.norm.weight"], cfg.rms_norm_eps)
        return x @ self.lm_head.T

    def _attention(self, layer: int, h: np.ndarray, cos: np.ndarray, sin: np.ndarray,
                   groups: dict[Hashable, list[int]]) -> np.ndarray:
        """Self-attention of layer `layer` on the normed rows h [T, E]: [T, E]."""
        cfg, w, p = self.config, self.w, f"model.layers.{layer}.self_attn."
        T, D = len(h), cfg.head_dim
        q = (h @ w[p + "q_proj.weight"].T).reshape(T, cfg.num_heads, D)
        k = (h @ w[p + "k_proj.weight"].T).reshape(T, cfg.num_kv_heads, D)
        v = (h @ w[p + "v_proj.weight"].T).reshape(T, cfg.num_kv_heads, D)
        if cfg.qk_norm:
            q = rms_norm(q, w[p + "q_norm.weight"], cfg.rms_norm_eps)
            k = rms_norm(k, w[p + "k_norm.weight"], cfg.rms_norm_eps)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        out = np.empty_like(q)
        for rid, idx in groups.items():
            past_k, past_v = self._kv[rid][layer]
            keys = np.concatenate([past_k, k[idx]])
            values = np.concatenate([past_v, v[idx]])
            out[idx] = causal_attention(q[idx], keys, values)
            if self.cache_dtype is not None:  # the new rows as the cache holds them
                keys = np.concatenate([past_k, self._cached(k[idx])])
                values = np.concatenate([past_v, self._cached(v[idx])])
            self._kv[rid][layer] = (keys, values)
        return out.reshape(T, cfg.q_size) @ w[p + "o_proj.weight"].T

    def _cached(self, a: np.ndarray) -> np.ndarray:
        """`a` rounded to `cache_dtype`, in the compute dtype."""
        return round_to_dtype(self.cache_dtype, a).astype(self.dtype)

    def _mlp(self, layer: int, h: np.ndarray) -> np.ndarray:
        """SiLU-gated MLP of layer `layer` on the normed rows h [T, E]: [T, E]."""
        p = f"model.layers.{layer}.mlp."
        gate = h @ self.w[p + "gate_proj.weight"].T
        up = h @ self.w[p + "up_proj.weight"].T
        return (silu(gate) * up) @ self.w[p + "down_proj.weight"].T

    # ----- generation -----
    def greedy_generate(self, prompts: list[list[int]], max_new_tokens: int) -> list[list[int]]:
        """Greedy decoding of every prompt, all requests batched in each step: one ragged
        prefill of the prompts, then one token per request per step. Returns the
        `max_new_tokens` new token ids of each prompt (argmax, first index on ties). Uses
        fresh request ids and releases them afterwards; other requests' caches are kept."""
        if any(len(p) == 0 for p in prompts):
            raise ValueError("every prompt needs at least one token")
        out: list[list[int]] = [[] for _ in prompts]
        if max_new_tokens <= 0 or not prompts:
            return out
        ids = [object() for _ in prompts]
        try:
            tokens = [t for prompt in prompts for t in prompt]
            owners = [rid for rid, prompt in zip(ids, prompts) for _ in prompt]
            logits = self.step(tokens, owners)
            last = np.cumsum([len(p) for p in prompts]) - 1
            nxt = [int(i) for i in np.argmax(logits[last], axis=-1)]
            for _ in range(max_new_tokens - 1):
                for seq, t in zip(out, nxt):
                    seq.append(t)
                nxt = [int(i) for i in np.argmax(self.step(nxt, ids), axis=-1)]
            for seq, t in zip(out, nxt):
                seq.append(t)
        finally:
            for rid in ids:
                self.release(rid)
        return out
