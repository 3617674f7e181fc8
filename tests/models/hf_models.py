"""Transformers models built from our configs and weights, for the model tests."""
from __future__ import annotations

import numpy as np

from eventtensor.models import ModelConfig


def hf_config(config: ModelConfig):
    """The transformers config of `config` (eager attention, so results do not depend on
    which fused kernels are installed)."""
    import transformers
    cls = transformers.LlamaConfig if config.architecture == "llama" else \
        transformers.Qwen3Config
    return cls(**config.to_hf(), attn_implementation="eager")


def hf_model(config: ModelConfig, weights: dict[str, np.ndarray] | None = None, seed: int = 0):
    """A float32 `LlamaForCausalLM` / `Qwen3ForCausalLM` in eval mode: transformers' own
    random initialisation (seeded) or, if given, exactly `weights`."""
    import torch
    import transformers
    torch.manual_seed(seed)
    cls = transformers.LlamaForCausalLM if config.architecture == "llama" else \
        transformers.Qwen3ForCausalLM
    model = cls(hf_config(config)).float().eval()
    if weights is not None:
        state = {n: torch.from_numpy(np.ascontiguousarray(w)) for n, w in weights.items()}
        result = model.load_state_dict(state, strict=False)
        allowed = {"lm_head.weight"} if config.tie_word_embeddings else set()
        assert set(result.missing_keys) <= allowed and not result.unexpected_keys, result
    return model


def hf_state(model) -> dict[str, np.ndarray]:
    """The model's state dict as float32 numpy arrays (bfloat16 widened exactly)."""
    return {n: t.detach().float().numpy() for n, t in model.state_dict().items()}


def hf_logits(model, tokens: list[int]) -> np.ndarray:
    """Logits [len(tokens), vocab] of one full forward pass over `tokens` (no cache)."""
    import torch
    with torch.no_grad():
        out = model(torch.tensor([tokens], dtype=torch.long), use_cache=False)
    return out.logits[0].double().numpy()
