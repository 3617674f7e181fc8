"""Model-side groundwork for LLM decode: configs of dense decoder-only models (Llama, Qwen3),
Hugging Face checkpoint loading and writing, and the numpy reference of a model step."""
from __future__ import annotations

from .config import CONFIGS, ConfigError, ModelConfig, RopeScaling, get_config
from .reference import ReferenceModel
from .safetensors_io import SafetensorsError
from .weights import (
    Checkpoint,
    CheckpointError,
    check_weights,
    load_checkpoint,
    random_weights,
    save_checkpoint,
)

__all__ = [
    "CONFIGS", "ConfigError", "ModelConfig", "RopeScaling", "get_config", "ReferenceModel",
    "SafetensorsError", "Checkpoint", "CheckpointError", "check_weights", "load_checkpoint",
    "random_weights", "save_checkpoint",
]
