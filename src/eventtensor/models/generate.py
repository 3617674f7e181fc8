"""Greedy generation from a model given by name or folder, through the decode program.

`open_model(spec)` takes a named config of `config.CONFIGS` (random weights with its real
shapes, seeded) or a Hugging Face checkpoint folder (`config.json`, safetensors, and, if the
folder has one, `tokenizer.json` read with the `tokenizers` library). `generate` runs the
decode step program of `models.decode` as one megakernel launch per step on the GPU
(`gpu_decode`) or on the CPU interpreter: prompts are fed one token a step, requests join
and leave between steps, the program is built (and compiled) once.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .config import CONFIGS, ModelConfig, get_config
from .decode import DecodeSession, DecodeTiles, greedy_generate
from .weights import load_checkpoint, random_weights


@dataclass
class OpenModel:
    """A model ready to generate: its config, weights (HF names) and tokenizer (None when
    the model has none: prompts are then token ids)."""

    name: str
    config: ModelConfig
    weights: dict[str, np.ndarray]
    tokenizer: Any = None

    def encode(self, text: str) -> list[int]:
        if self.tokenizer is None:
            raise ValueError(f"model {self.name!r} has no tokenizer.json: give prompts as "
                             "token ids")
        return list(self.tokenizer.encode(text).ids)

    def decode(self, ids: Sequence[int]) -> str:
        if self.tokenizer is None:
            raise ValueError(f"model {self.name!r} has no tokenizer.json")
        return self.tokenizer.decode(list(ids))


def open_model(spec: str, *, seed: int = 0, progress: bool = True) -> OpenModel:
    """The model `spec` names: a checkpoint folder (with config.json) or a named config
    (random bfloat16 weights, `seed`). ValueError names what is missing otherwise."""
    folder = Path(spec)
    if folder.is_dir():
        ckpt = load_checkpoint(folder, progress=progress)
        tokenizer = None
        if (folder / "tokenizer.json").exists():
            from tokenizers import Tokenizer
            tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        return OpenModel(str(folder), ckpt.config, ckpt.weights, tokenizer)
    if spec in CONFIGS:
        config = get_config(spec)
        return OpenModel(spec, config, random_weights(config, seed))
    raise ValueError(f"model {spec!r} is neither a checkpoint folder nor a named config "
                     f"(named: {', '.join(CONFIGS)})")


def resolve_device(device: str) -> str:
    """`device` ("gpu", "cpu" or "auto": the GPU where torch sees one) as "gpu" or "cpu"."""
    if device not in ("auto", "gpu", "cpu"):
        raise ValueError(f"device {device!r}: choose auto, gpu or cpu")
    if device != "auto":
        return device
    try:
        import torch
        return "gpu" if torch.cuda.is_available() else "cpu"
    except ImportError:
        return "cpu"


def generate(model: OpenModel, prompts: Sequence[Sequence[int]], max_new_tokens: int, *,
             batch: int | None = None, step_tokens: int | None = None, mode: str = "static",
             num_sms: int = 8, tiles: DecodeTiles | None = None,
             device: str = "cpu") -> list[list[int]]:
    """The `max_new_tokens` greedy tokens of every prompt (token ids). At most `batch`
    requests (default: all prompts) run at once; the others join as slots free up. A step
    takes up to `step_tokens` tokens (default: the batch, or the longest prompt up to 64 if
    that is more): one per decoding request, the rest prompt chunks. The KV cache holds
    every prompt with its new tokens. `device` "gpu": the megakernel on all SMs (`num_sms`
    is the interpreter's); "cpu": the interpreter on `num_sms` virtual SMs."""
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("give at least one prompt, each with at least one token")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be at least 1, got {max_new_tokens}")
    batch = min(batch or len(prompts), len(prompts))
    if step_tokens is not None and step_tokens < batch:
        raise ValueError(f"step_tokens {step_tokens} must be at least the batch ({batch}): "
                         "every decoding request brings a token to each step")
    step_tokens = step_tokens or max(batch, min(64, max(len(p) for p in prompts)))
    context = max(len(p) for p in prompts) + max_new_tokens
    if context > model.config.max_position_embeddings:
        raise ValueError(f"prompt plus new tokens need {context} positions; the model has "
                         f"{model.config.max_position_embeddings}")
    if resolve_device(device) == "gpu":
        from .gpu_decode import GpuDecodeSession
        session: DecodeSession | GpuDecodeSession = GpuDecodeSession(
            model.config, model.weights, batch, context, tiles, mode=mode,
            max_tokens=step_tokens)
    else:
        session = DecodeSession(model.config, model.weights, batch, context, tiles, mode=mode,
                                max_tokens=step_tokens, num_sms=num_sms)
    return greedy_generate(session, [list(p) for p in prompts], max_new_tokens)
