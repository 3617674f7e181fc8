"""Shapes and hyperparameters of a dense decoder-only LLM (Llama and Qwen3 families).

`ModelConfig` is the one description the weight loader, the numpy reference and the
megakernel builder share. `ModelConfig.from_hf` reads a Hugging Face `config.json` and rejects,
naming the field at fault, anything the model code does not implement (biases, other
activations, other RoPE variants, sliding windows, quantization). `to_hf` writes a dict that
transformers' `LlamaConfig` / `Qwen3Config` accept.

Shape legend (weights in HF layout, `[out_features, in_features]`):
  V vocab_size, E hidden_size, F intermediate_size, L num_layers,
  H num_heads, K num_kv_heads, D head_dim (H*D need not equal E)
"""
from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..dtypes import ELEMENT_BYTES

ARCHITECTURES = {"llama": "LlamaForCausalLM", "qwen3": "Qwen3ForCausalLM"}
DTYPE_BYTES = {n: ELEMENT_BYTES[n] for n in ("float32", "bfloat16", "float16")}  # model dtypes


class ConfigError(ValueError):
    """A model configuration is malformed or uses a feature the model code does not
    implement; the message names the config field at fault."""

    def __init__(self, field: str, message: str):
        super().__init__(f"config field {field!r}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True)
class RopeScaling:
    """Llama-3 RoPE scaling (HF `rope_type: "llama3"`): inverse frequencies whose wavelength
    exceeds `original_max_position_embeddings / low_freq_factor` are divided by `factor`,
    those shorter than `original_max_position_embeddings / high_freq_factor` are kept, and the
    band between is interpolated smoothly."""

    factor: float
    low_freq_factor: float
    high_freq_factor: float
    original_max_position_embeddings: int

    def __post_init__(self) -> None:
        if not self.factor > 0:
            raise ConfigError("rope_scaling.factor", f"must be positive, got {self.factor}")
        if not 0 < self.low_freq_factor < self.high_freq_factor:
            raise ConfigError("rope_scaling.high_freq_factor",
                              f"need 0 < low_freq_factor < high_freq_factor, got "
                              f"{self.low_freq_factor} and {self.high_freq_factor}")
        if self.original_max_position_embeddings <= 0:
            raise ConfigError("rope_scaling.original_max_position_embeddings",
                              f"must be positive, got {self.original_max_position_embeddings}")

    def to_hf(self) -> dict[str, Any]:
        """The HF `rope_scaling` dict."""
        return {"rope_type": "llama3", "factor": float(self.factor),
                "low_freq_factor": float(self.low_freq_factor),
                "high_freq_factor": float(self.high_freq_factor),
                "original_max_position_embeddings": int(self.original_max_position_embeddings)}


@dataclass(frozen=True)
class ModelConfig:
    """A dense decoder-only transformer: pre-norm blocks of GQA self-attention (RoPE,
    rotate-half) and a SiLU-gated MLP, RMSNorm everywhere, no biases. `qk_norm` adds per-head
    RMSNorms on q and k before RoPE (Qwen3). `rope_scaling` may be given as the HF dict.
    `dtype` is the storage dtype of the checkpoint ("bfloat16", "float16" or "float32")."""

    architecture: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_scaling: RopeScaling | None = None
    tie_word_embeddings: bool = False
    max_position_embeddings: int = 2048
    qk_norm: bool = False
    attention_bias: bool = False
    dtype: str = "bfloat16"

    def __post_init__(self) -> None:
        if isinstance(self.rope_scaling, dict):
            object.__setattr__(self, "rope_scaling", _rope_scaling(self.rope_scaling,
                                                                   "rope_scaling"))
        if self.architecture not in ARCHITECTURES:
            raise ConfigError("architecture", f"unsupported {self.architecture!r}; supported: "
                              f"{', '.join(ARCHITECTURES)}")
        for name in ("vocab_size", "hidden_size", "intermediate_size", "num_layers",
                     "num_heads", "num_kv_heads", "head_dim", "max_position_embeddings"):
            value = getattr(self, name)
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value <= 0:
                raise ConfigError(name, f"must be a positive integer, got {value!r}")
        if self.num_heads % self.num_kv_heads:
            raise ConfigError("num_kv_heads", f"{self.num_kv_heads} does not divide "
                              f"num_heads {self.num_heads}")
        if self.head_dim % 2:
            raise ConfigError("head_dim", f"must be even for rotate-half RoPE, got "
                              f"{self.head_dim}")
        if not (self.rms_norm_eps > 0 and self.rope_theta > 0):
            raise ConfigError("rms_norm_eps" if not self.rms_norm_eps > 0 else "rope_theta",
                              "must be positive")
        if self.attention_bias:
            raise ConfigError("attention_bias", "biased q/k/v/o projections are not supported")
        if self.qk_norm != (self.architecture == "qwen3"):
            raise ConfigError("qk_norm", f"is {self.qk_norm} but architecture "
                              f"{self.architecture!r} implies {not self.qk_norm}")
        if self.dtype not in DTYPE_BYTES:
            raise ConfigError("dtype", f"unsupported {self.dtype!r}; supported: "
                              f"{', '.join(DTYPE_BYTES)}")

    # ----- derived sizes -----
    @property
    def q_size(self) -> int:
        """H*D: width of the q projection."""
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        """K*D: width of the k (and of the v) projection."""
        return self.num_kv_heads * self.head_dim

    @property
    def group_size(self) -> int:
        """H/K: query heads sharing one KV head."""
        return self.num_heads // self.num_kv_heads

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        """Every parameter in HF naming with its shape, in checkpoint order.

        Per layer i, with the legend of the module docstring:
          model.layers.{i}.input_layernorm.weight           [E]
          model.layers.{i}.self_attn.{q,k,v,o}_proj.weight  [H*D, E] [K*D, E] [K*D, E] [E, H*D]
          model.layers.{i}.self_attn.{q,k}_norm.weight      [D]      (qk_norm only)
          model.layers.{i}.post_attention_layernorm.weight  [E]
          model.layers.{i}.mlp.{gate,up,down}_proj.weight   [F, E] [F, E] [E, F]
        plus model.embed_tokens.weight [V, E], model.norm.weight [E] and, unless the
        embeddings are tied, lm_head.weight [V, E]."""
        E, F, V, D = self.hidden_size, self.intermediate_size, self.vocab_size, self.head_dim
        shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (V, E)}
        for i in range(self.num_layers):
            p = f"model.layers.{i}."
            shapes[p + "input_layernorm.weight"] = (E,)
            shapes[p + "self_attn.q_proj.weight"] = (self.q_size, E)
            shapes[p + "self_attn.k_proj.weight"] = (self.kv_size, E)
            shapes[p + "self_attn.v_proj.weight"] = (self.kv_size, E)
            shapes[p + "self_attn.o_proj.weight"] = (E, self.q_size)
            if self.qk_norm:
                shapes[p + "self_attn.q_norm.weight"] = (D,)
                shapes[p + "self_attn.k_norm.weight"] = (D,)
            shapes[p + "post_attention_layernorm.weight"] = (E,)
            shapes[p + "mlp.gate_proj.weight"] = (F, E)
            shapes[p + "mlp.up_proj.weight"] = (F, E)
            shapes[p + "mlp.down_proj.weight"] = (E, F)
        shapes["model.norm.weight"] = (E,)
        if not self.tie_word_embeddings:
            shapes["lm_head.weight"] = (V, E)
        return shapes

    def num_params(self) -> int:
        """Number of stored parameters (a tied LM head counted once)."""
        return sum(math.prod(s) for s in self.param_shapes().values())

    def weight_bytes(self, dtype: str | None = None) -> int:
        """Bytes of all parameters stored in `dtype` (default: the config's dtype)."""
        name = self.dtype if dtype is None else dtype
        if name not in DTYPE_BYTES:
            raise ValueError(f"unknown dtype {name!r}; known: {', '.join(DTYPE_BYTES)}")
        return self.num_params() * DTYPE_BYTES[name]

    def kv_cache_bytes(self, tokens: int, dtype: str | None = None) -> int:
        """Bytes of the K and V caches of all layers for `tokens` cached positions."""
        name = self.dtype if dtype is None else dtype
        return 2 * self.num_layers * tokens * self.kv_size * DTYPE_BYTES[name]

    # ----- Hugging Face config.json -----
    @classmethod
    def from_hf(cls, source: dict[str, Any] | str | Path) -> ModelConfig:
        """Parse a HF `config.json` (a dict, the file, or the folder holding it) of a
        `LlamaForCausalLM` or `Qwen3ForCausalLM`. Both the published layout (`rope_theta`,
        `rope_scaling`) and transformers 5's `rope_parameters` are read. Raises `ConfigError`
        naming the field for unsupported or inconsistent values."""
        if isinstance(source, dict):
            return _parse_hf(source)
        path = Path(source)
        with open(path / "config.json" if path.is_dir() else path) as f:
            return _parse_hf(json.load(f))

    def to_hf(self) -> dict[str, Any]:
        """A `config.json` dict for this model, accepted by `LlamaConfig(**d)` /
        `Qwen3Config(**d)` and by `from_hf` (which gives back an equal config)."""
        d: dict[str, Any] = {
            "architectures": [ARCHITECTURES[self.architecture]],
            "model_type": self.architecture,
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads,
            "num_key_value_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
            "hidden_act": "silu",
            "max_position_embeddings": self.max_position_embeddings,
            "rms_norm_eps": self.rms_norm_eps,
            "rope_theta": self.rope_theta,
            "rope_scaling": None if self.rope_scaling is None else self.rope_scaling.to_hf(),
            "tie_word_embeddings": self.tie_word_embeddings,
            "attention_bias": False,
            "attention_dropout": 0.0,
            "torch_dtype": self.dtype,
        }
        if self.architecture == "llama":
            d["mlp_bias"] = False
        else:
            d["use_sliding_window"] = False
            d["sliding_window"] = None
        return d

    def replace(self, **changes: Any) -> ModelConfig:
        """A copy with `changes` applied (validated again)."""
        return dataclasses.replace(self, **changes)


def _rope_scaling(d: dict[str, Any], field: str) -> RopeScaling | None:
    """A `RopeScaling` from a HF rope dict (`rope_type` or legacy `type`), or None for the
    default (unscaled) RoPE."""
    kind = d.get("rope_type", d.get("type", "default"))
    if kind in (None, "default"):
        return None
    if kind != "llama3":
        raise ConfigError(field, f"RoPE type {kind!r} is not supported (only 'llama3' "
                          "scaling or none)")
    values = {}
    for key in ("factor", "low_freq_factor", "high_freq_factor",
                "original_max_position_embeddings"):
        if d.get(key) is None:
            raise ConfigError(f"{field}.{key}", "missing for 'llama3' RoPE scaling")
        values[key] = d[key]
    try:
        return RopeScaling(factor=float(values["factor"]),
                           low_freq_factor=float(values["low_freq_factor"]),
                           high_freq_factor=float(values["high_freq_factor"]),
                           original_max_position_embeddings=int(
                               values["original_max_position_embeddings"]))
    except ConfigError as e:  # name the field as the caller spelled it
        raise ConfigError(field + e.field.removeprefix("rope_scaling"), e.message) from None


def _parse_hf(d: dict[str, Any]) -> ModelConfig:
    by_class = {v: k for k, v in ARCHITECTURES.items()}
    archs = d.get("architectures")
    if archs:
        if len(archs) != 1 or archs[0] not in by_class:
            raise ConfigError("architectures", f"unsupported {archs}; supported: "
                              f"{', '.join(by_class)}")
        arch = by_class[archs[0]]
        if d.get("model_type", arch) != arch:
            raise ConfigError("model_type", f"{d['model_type']!r} does not match "
                              f"architectures {archs}")
    else:
        arch = str(d.get("model_type"))
        if arch not in ARCHITECTURES:
            raise ConfigError("architectures", f"missing, and model_type {arch!r} is not one "
                              f"of {', '.join(ARCHITECTURES)}")

    def need(key: str) -> Any:
        if d.get(key) is None:
            raise ConfigError(key, "missing")
        return d[key]

    for key, allowed in (("hidden_act", ("silu",)), ("attention_bias", (False,)),
                         ("mlp_bias", (False,)), ("use_sliding_window", (False,)),
                         ("quantization_config", ())):
        if key in d and d[key] is not None and d[key] not in allowed:
            raise ConfigError(key, f"unsupported value {d[key]!r}" +
                              (f"; supported: {allowed}" if allowed else ""))
    layer_types = d.get("layer_types")
    if layer_types and any(t != "full_attention" for t in layer_types):
        raise ConfigError("layer_types", "only 'full_attention' layers are supported, got "
                          f"{sorted(set(layer_types))}")
    if d.get("partial_rotary_factor", 1.0) != 1.0:
        raise ConfigError("partial_rotary_factor", "partial RoPE is not supported")
    if d.get("pretraining_tp", 1) != 1:
        raise ConfigError("pretraining_tp", "must be 1")

    hidden, heads = need("hidden_size"), need("num_attention_heads")
    head_dim = d.get("head_dim")
    if head_dim is None:
        if not isinstance(hidden, int) or not isinstance(heads, int) or heads <= 0 \
                or hidden % heads:
            raise ConfigError("head_dim", f"missing, and hidden_size {hidden} is not a "
                              f"multiple of num_attention_heads {heads}")
        head_dim = hidden // heads
    elif not isinstance(head_dim, int) or isinstance(head_dim, bool) or head_dim <= 0 \
            or head_dim % 2:
        raise ConfigError("head_dim", f"must be a positive even integer, got {head_dim!r}")
    kv_heads = heads if d.get("num_key_value_heads") is None else d["num_key_value_heads"]
    if isinstance(kv_heads, int) and isinstance(heads, int) and (kv_heads <= 0
                                                                  or heads % kv_heads):
        raise ConfigError("num_key_value_heads", f"{kv_heads} does not divide "
                          f"num_attention_heads {heads}")

    params = d.get("rope_parameters")
    if params is not None:
        rope_theta = params.get("rope_theta", d.get("rope_theta", 10000.0))
        scaling = _rope_scaling(params, "rope_parameters")
    else:
        rope_theta = d.get("rope_theta", 10000.0)
        raw = d.get("rope_scaling")
        scaling = None if raw is None else _rope_scaling(raw, "rope_scaling")
    if rope_theta is None or not float(rope_theta) > 0:
        raise ConfigError("rope_theta", f"must be positive, got {rope_theta!r}")

    dtype = str(d.get("torch_dtype") or d.get("dtype") or "float32").removeprefix("torch.")
    if dtype not in DTYPE_BYTES:
        raise ConfigError("torch_dtype", f"unsupported {dtype!r}; supported: "
                          f"{', '.join(DTYPE_BYTES)}")
    fields = {"vocab_size": need("vocab_size"), "hidden_size": hidden,
              "intermediate_size": need("intermediate_size"),
              "num_layers": need("num_hidden_layers"), "num_heads": heads,
              "num_kv_heads": kv_heads, "head_dim": head_dim}
    hf_names = {"num_layers": "num_hidden_layers", "num_heads": "num_attention_heads",
                "num_kv_heads": "num_key_value_heads"}
    for key, value in fields.items():
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ConfigError(hf_names.get(key, key), f"must be a positive integer, got "
                              f"{value!r}")
    max_pos = d.get("max_position_embeddings") or (2048 if arch == "llama" else 32768)
    return ModelConfig(architecture=arch, **fields,
                       rms_norm_eps=float(d.get("rms_norm_eps", 1e-6)),
                       rope_theta=float(rope_theta), rope_scaling=scaling,
                       tie_word_embeddings=bool(d.get("tie_word_embeddings", False)),
                       max_position_embeddings=int(max_pos), qk_norm=arch == "qwen3",
                       dtype=dtype)


def _llama3(factor: float, original: int = 8192) -> RopeScaling:
    return RopeScaling(factor=factor, low_freq_factor=1.0, high_freq_factor=4.0,
                       original_max_position_embeddings=original)


# Named configurations: the published shapes of the real models (from their config.json),
# and tiny ones for CPU tests.
CONFIGS: dict[str, ModelConfig] = {
    # Llama-3.2-1B: V 128256, E 2048, F 8192, L 16, H 32, K 8, D 64, tied.
    "llama-3.2-1b": ModelConfig(
        "llama", vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_layers=16,
        num_heads=32, num_kv_heads=8, head_dim=64, rms_norm_eps=1e-5, rope_theta=500000.0,
        rope_scaling=_llama3(32.0), tie_word_embeddings=True, max_position_embeddings=131072),
    # Llama-3.1-8B: V 128256, E 4096, F 14336, L 32, H 32, K 8, D 128, untied.
    "llama-3.1-8b": ModelConfig(
        "llama", vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_layers=32,
        num_heads=32, num_kv_heads=8, head_dim=128, rms_norm_eps=1e-5, rope_theta=500000.0,
        rope_scaling=_llama3(8.0), tie_word_embeddings=False, max_position_embeddings=131072),
    # Qwen3-8B: V 151936, E 4096, F 12288, L 36, H 32, K 8, D 128, untied.
    "qwen3-8b": ModelConfig(
        "qwen3", vocab_size=151936, hidden_size=4096, intermediate_size=12288, num_layers=36,
        num_heads=32, num_kv_heads=8, head_dim=128, rms_norm_eps=1e-6, rope_theta=1000000.0,
        tie_word_embeddings=False, max_position_embeddings=40960, qk_norm=True),
    # Qwen3-0.6B: V 151936, E 1024, F 3072, L 28, H 16, K 8, D 128 (H*D = 2048 != E), tied.
    "qwen3-0.6b": ModelConfig(
        "qwen3", vocab_size=151936, hidden_size=1024, intermediate_size=3072, num_layers=28,
        num_heads=16, num_kv_heads=8, head_dim=128, rms_norm_eps=1e-6, rope_theta=1000000.0,
        tie_word_embeddings=True, max_position_embeddings=40960, qk_norm=True),
    # tiny-llama: V 256, E 64, F 128, L 2, H 4, K 2, D 16, tied. With theta 10^4 and an
    # original context of 64 its 8 RoPE frequencies fall in all three llama3 bands (kept,
    # smoothed, divided by the factor).
    "tiny-llama": ModelConfig(
        "llama", vocab_size=256, hidden_size=64, intermediate_size=128, num_layers=2,
        num_heads=4, num_kv_heads=2, head_dim=16, rms_norm_eps=1e-5, rope_theta=10000.0,
        rope_scaling=_llama3(8.0, original=64), tie_word_embeddings=True,
        max_position_embeddings=512, dtype="float32"),
    # tiny-qwen3: V 256, E 64, F 128, L 2, H 4, K 2, D 32 (H*D = 128 != E), untied, qk_norm.
    "tiny-qwen3": ModelConfig(
        "qwen3", vocab_size=256, hidden_size=64, intermediate_size=128, num_layers=2,
        num_heads=4, num_kv_heads=2, head_dim=32, rms_norm_eps=1e-6, rope_theta=1000000.0,
        tie_word_embeddings=False, max_position_embeddings=512, qk_norm=True,
        dtype="float32"),
}


def get_config(name: str) -> ModelConfig:
    """The named configuration of `CONFIGS`; KeyError listing the names otherwise."""
    try:
        return CONFIGS[name]
    except KeyError:
        raise KeyError(f"unknown model config {name!r}; known: {', '.join(CONFIGS)}") from None
