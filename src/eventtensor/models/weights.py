"""Model weights: loading Hugging Face checkpoint folders, random weights, writing folders.

A checkpoint folder holds `config.json` and either one `model.safetensors` or shards
`model-0000i-of-0000n.safetensors` listed in `model.safetensors.index.json`. Weights are held
as a dict from HF parameter name to a float32 numpy array (bfloat16 and float16 values widened
exactly), with the names and shapes of `ModelConfig.param_shapes()`. Torch is not needed.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import NamedTuple

import numpy as np

from ..dtypes import round_to_dtype
from .config import ModelConfig
from .safetensors_io import STORED, TensorInfo, read_header, read_tensor, write_file

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
# Buffers some exporters store next to the parameters; they are recomputed, not loaded.
IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)


class CheckpointError(ValueError):
    """A checkpoint folder or weight dict does not match its config; the message names the
    tensor and (for folders) the file at fault."""


class Checkpoint(NamedTuple):
    """A loaded checkpoint: its config and its weights (name -> float32 array)."""

    config: ModelConfig
    weights: dict[str, np.ndarray]


def _progress(enabled: bool, message: str) -> None:
    if enabled:
        print(f"[eventtensor] {message}", file=sys.stderr, flush=True)


def _shard_files(folder: Path) -> tuple[list[str], dict[str, str]]:
    """The safetensors files of `folder` and the index's name -> file map (empty for a single
    file)."""
    single, index = folder / SINGLE_FILE, folder / INDEX_FILE
    if single.exists() and index.exists():
        raise CheckpointError(f"{folder}: both {SINGLE_FILE} and {INDEX_FILE} are present; "
                              "keep one")
    if single.exists():
        return [SINGLE_FILE], {}
    if index.exists():
        with open(index) as f:
            weight_map = json.load(f).get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise CheckpointError(f"{INDEX_FILE}: no 'weight_map'")
        files = sorted(set(weight_map.values()))
        for name in files:
            if not (folder / name).exists():
                listed = next(t for t, f in weight_map.items() if f == name)
                raise CheckpointError(f"{INDEX_FILE} lists {name} (for tensor {listed!r} and "
                                      f"others) but the file is missing from {folder}")
        return files, weight_map
    found = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
    raise CheckpointError(f"{folder}: no {SINGLE_FILE} or {INDEX_FILE} (found: {found}); "
                          "only safetensors checkpoints are supported")


def _check_names(config: ModelConfig, found: dict[str, tuple[int, ...]],
                 where: dict[str, str]) -> None:
    """Raise CheckpointError unless `found` (name -> shape) has exactly the config's
    parameters (ignoring known extras) with the expected shapes; `where` names each tensor's
    file."""
    expected = config.param_shapes()
    extras = [n for n in found if n.endswith(IGNORED_SUFFIXES)]
    if config.tie_word_embeddings:
        extras.append("lm_head.weight")
    missing = [n for n in expected if n not in found]
    unexpected = [n for n in found if n not in expected and n not in extras]
    if missing or unexpected:
        parts = []
        if missing:
            parts.append(f"missing tensors {missing}")
        if unexpected:
            parts.append("unexpected tensors " +
                         ", ".join(f"{n!r} (in {where.get(n, '?')})" for n in unexpected))
        raise CheckpointError(f"weights do not match the {config.architecture} config: "
                              + "; ".join(parts))
    for name, shape in expected.items():
        if tuple(found[name]) != shape:
            raise CheckpointError(f"tensor {name!r} in {where.get(name, 'the weights')} has "
                                  f"shape {tuple(found[name])}, the config expects {shape}")


def check_weights(config: ModelConfig, weights: dict[str, np.ndarray]) -> None:
    """Raise CheckpointError unless `weights` holds exactly the config's parameters (names and
    shapes; a tied model may also hold an `lm_head.weight` equal to the embeddings)."""
    _check_names(config, {n: np.shape(w) for n, w in weights.items()}, {})
    _check_tied(config, weights, "the weights")


def _check_tied(config: ModelConfig, weights: dict[str, np.ndarray], where: str) -> None:
    head = weights.get("lm_head.weight")
    if config.tie_word_embeddings and head is not None and not np.array_equal(
            head, weights["model.embed_tokens.weight"]):
        raise CheckpointError(f"tensor 'lm_head.weight' in {where} differs from "
                              "'model.embed_tokens.weight' but tie_word_embeddings is true")


def load_checkpoint(folder: str | Path, *, progress: bool = True) -> Checkpoint:
    """Load HF checkpoint folder `folder`: the config from `config.json`, then every tensor
    after checking all headers first (names, shapes, dtypes F32/F16/BF16). Returns the config
    and name -> float32 array with exactly the stored values; tied checkpoints carry no
    `lm_head.weight` in the result. One progress line per shard goes to stderr unless
    `progress` is False."""
    folder = Path(folder)
    if not (folder / "config.json").exists():
        raise CheckpointError(f"{folder}: no config.json")
    config = ModelConfig.from_hf(folder / "config.json")
    files, weight_map = _shard_files(folder)
    headers: dict[str, dict[str, TensorInfo]] = {}
    where: dict[str, str] = {}
    for file in files:
        headers[file] = read_header(folder / file)
        for name in headers[file]:
            if name in where:
                raise CheckpointError(f"tensor {name!r} is stored twice: in {where[name]} and "
                                      f"in {file}")
            where[name] = file
    for name, file in weight_map.items():
        if where.get(name, file) != file:
            raise CheckpointError(f"{INDEX_FILE} puts tensor {name!r} in {file} but it is in "
                                  f"{where[name]}")
        if name not in where:
            raise CheckpointError(f"{INDEX_FILE} puts tensor {name!r} in {file} but {file} "
                                  "does not hold it")
    _check_names(config, {n: headers[f][n].shape for n, f in where.items()}, where)
    wanted = set(config.param_shapes()) | {"lm_head.weight"}
    for name, file in where.items():
        tag = headers[file][name].dtype
        if name in wanted and tag not in STORED:
            raise CheckpointError(f"tensor {name!r} in {file} has dtype {tag}; supported: "
                                  f"{', '.join(STORED)}")
    weights: dict[str, np.ndarray] = {}
    total = sum(1 for n in where if n in wanted)
    for i, file in enumerate(files):
        nbytes = 0
        for name, info in headers[file].items():
            if name in wanted:
                weights[name] = read_tensor(folder / file, info)
                nbytes += info.end - info.begin
        _progress(progress, f"loaded {file} ({i + 1}/{len(files)}): "
                            f"{len(weights)}/{total} tensors, {nbytes / 2**20:.1f} MiB")
    _check_tied(config, weights, where.get("lm_head.weight", ""))
    return Checkpoint(config, {n: weights[n] for n in config.param_shapes()})


def random_weights(config: ModelConfig, seed: int = 0,
                   dtype: str = "bfloat16") -> dict[str, np.ndarray]:
    """Random weights of the config's shapes as float32 arrays holding `dtype` values
    (rounded to nearest even). Matrices are normal with standard deviation 1/sqrt(in
    features), so every projection keeps activations O(1) at any size; RMSNorm weights are
    1 + 0.1 * normal. Deterministic in `seed`."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in config.param_shapes().items():
        x = rng.standard_normal(shape, dtype=np.float32)
        x = 1.0 + 0.1 * x if len(shape) == 1 else x * np.float32(shape[1] ** -0.5)
        out[name] = round_to_dtype(dtype, x).astype(np.float32)
    return out


def random_weights_on_gpu(config: ModelConfig, seed: int = 0) -> dict:
    """Random bfloat16 weights on the GPU (torch tensors), distributed as `random_weights`
    (not the same values): matrices normal / sqrt(in features), norm weights
    1 + 0.1 * normal. Deterministic in `seed`; fast at any model size."""
    import torch
    gen = torch.Generator("cuda").manual_seed(seed)
    out = {}
    for name, shape in config.param_shapes().items():
        x = torch.randn(shape, generator=gen, device="cuda")
        out[name] = (1 + 0.1 * x if len(shape) == 1 else x * shape[1] ** -0.5).bfloat16()
    return out


def save_checkpoint(folder: str | Path, config: ModelConfig, weights: dict[str, np.ndarray],
                    *, dtype: str | None = None, shard_bytes: int | None = None,
                    overwrite: bool = False) -> list[Path]:
    """Write a HF checkpoint folder: `config.json` (with `torch_dtype` = `dtype`, default the
    config's) and the weights in `dtype` (values rounded to nearest even), as one
    `model.safetensors` or, when they exceed `shard_bytes`, as shards of at most that many
    bytes each (a larger tensor gets a shard of its own) with `model.safetensors.index.json`.
    Refuses a folder already holding a checkpoint unless `overwrite`. Returns the files."""
    folder = Path(folder)
    dtype = config.dtype if dtype is None else dtype
    if dtype not in ("float32", "bfloat16", "float16"):
        raise ValueError(f"dtype {dtype!r}: supported are float32, bfloat16, float16")
    check_weights(config, weights)
    folder.mkdir(parents=True, exist_ok=True)
    old = [p for p in folder.iterdir()
           if p.name in ("config.json", INDEX_FILE) or p.name.endswith(".safetensors")]
    if old and not overwrite:
        raise FileExistsError(f"{folder} already holds {sorted(p.name for p in old)}; pass "
                              "overwrite=True to replace them")
    for p in old:
        p.unlink()
    config = config.replace(dtype=dtype)
    itemsize = 4 if dtype == "float32" else 2
    shards: list[list[str]] = [[]]
    used = 0
    for name in config.param_shapes():
        size = weights[name].size * itemsize
        if shard_bytes is not None and shards[-1] and used + size > shard_bytes:
            shards.append([])
            used = 0
        shards[-1].append(name)
        used += size
    written = [folder / "config.json"]
    with open(written[0], "w") as f:
        json.dump(config.to_hf(), f, indent=2)
    if len(shards) == 1:
        written.append(folder / SINGLE_FILE)
        write_file(written[-1], {n: weights[n] for n in shards[0]}, dtype)
        return written
    weight_map, total = {}, 0
    for i, names in enumerate(shards):
        file = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        written.append(folder / file)
        total += write_file(written[-1], {n: weights[n] for n in names}, dtype)
        weight_map.update({n: file for n in names})
    written.append(folder / INDEX_FILE)
    with open(written[-1], "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    return written
