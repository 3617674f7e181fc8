"""Checkpoint loading against folders transformers writes (single file, sharded, float32 and
bfloat16), the errors naming the tensor and file at fault, and the writer's round trip."""
import json

import numpy as np
import pytest

from eventtensor.dtypes import round_to_dtype
from eventtensor.models import (
    CONFIGS,
    CheckpointError,
    SafetensorsError,
    check_weights,
    load_checkpoint,
    random_weights,
    save_checkpoint,
)

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
safetensors_numpy = pytest.importorskip("safetensors.numpy")

from hf_models import hf_model, hf_state  # noqa: E402

TINY = ["tiny-llama", "tiny-qwen3"]


def _exactly_equal(got: dict, want: dict) -> None:
    assert list(got) == list(want)
    for name, w in want.items():
        assert got[name].dtype == np.float32 and got[name].shape == w.shape, name
        np.testing.assert_array_equal(got[name].view(np.uint32), w.view(np.uint32), name)


@pytest.mark.parametrize("name", TINY)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("sharded", [False, True])
def test_load_what_transformers_saves(name, dtype, sharded, tmp_path, capsys):
    cfg = CONFIGS[name]
    model = hf_model(cfg, seed=3).to(getattr(torch, dtype))
    model.save_pretrained(tmp_path, max_shard_size="40KB" if sharded else "1GB")
    shards = sorted(p.name for p in tmp_path.glob("*.safetensors"))
    assert (len(shards) > 1) == sharded
    config, weights = load_checkpoint(tmp_path)
    assert config == cfg.replace(dtype=dtype)
    state = hf_state(model)
    want = {n: state[n] for n in cfg.param_shapes()}
    _exactly_equal(weights, want)
    lines = [ln for ln in capsys.readouterr().err.splitlines() if "loaded" in ln]
    assert len(lines) == len(shards) and f"{len(want)}/{len(want)} tensors" in lines[-1]


@pytest.fixture
def folder(tmp_path):
    """A float32 tiny-llama checkpoint written by transformers, and its weights."""
    cfg = CONFIGS["tiny-llama"]
    hf_model(cfg, seed=4).save_pretrained(tmp_path)
    return tmp_path, load_checkpoint(tmp_path, progress=False).weights


def _rewrite(folder, tensors, file="model.safetensors"):
    safetensors_numpy.save_file(tensors, str(folder / file), metadata={"format": "pt"})


def _raises(folder, *fragments):
    with pytest.raises((CheckpointError, SafetensorsError)) as err:
        load_checkpoint(folder, progress=False)
    for fragment in fragments:
        assert fragment in str(err.value)


def test_missing_tensor_is_named(folder):
    path, weights = folder
    del weights["model.layers.1.mlp.up_proj.weight"]
    _rewrite(path, weights)
    _raises(path, "missing", "model.layers.1.mlp.up_proj.weight")


def test_wrong_shape_names_tensor_and_file(folder):
    path, weights = folder
    weights["model.layers.0.self_attn.k_proj.weight"] = np.zeros((16, 64), np.float32)
    _rewrite(path, weights)
    _raises(path, "model.layers.0.self_attn.k_proj.weight", "model.safetensors", "(16, 64)",
            "(32, 64)")


def test_unexpected_tensor_is_named_and_known_extras_ignored(folder):
    path, weights = folder
    extra = dict(weights, **{"model.layers.0.self_attn.rotary_emb.inv_freq":
                             np.ones(8, np.float32)})
    _rewrite(path, extra)
    _exactly_equal(load_checkpoint(path, progress=False).weights, weights)
    extra["model.layers.0.self_attn.q_proj.bias"] = np.zeros(64, np.float32)
    _rewrite(path, extra)
    _raises(path, "unexpected", "model.layers.0.self_attn.q_proj.bias", "model.safetensors")


def test_unsupported_dtype_is_named(folder):
    path, weights = folder
    weights["model.norm.weight"] = weights["model.norm.weight"].astype(np.float64)
    _rewrite(path, weights)
    _raises(path, "model.norm.weight", "F64")


def test_tied_checkpoint_with_its_lm_head(folder):
    path, weights = folder
    same = dict(weights, **{"lm_head.weight": weights["model.embed_tokens.weight"]})
    _rewrite(path, same)
    _exactly_equal(load_checkpoint(path, progress=False).weights, weights)
    same["lm_head.weight"] = same["lm_head.weight"] + 1
    _rewrite(path, same)
    _raises(path, "lm_head.weight", "tie_word_embeddings")


def test_shard_errors_name_the_shard(tmp_path):
    cfg = CONFIGS["tiny-qwen3"]
    weights = random_weights(cfg, seed=5)
    files = save_checkpoint(tmp_path, cfg, weights, shard_bytes=64 << 10)
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())["weight_map"]
    name = "model.layers.1.mlp.gate_proj.weight"
    shard = index[name]
    assert shard != files[1].name                       # not the first shard
    kept = {n: w for n, w in weights.items() if index[n] == shard}
    _rewrite(tmp_path, dict(kept, **{name: np.zeros((1, 1), np.float32)}), shard)
    _raises(tmp_path, name, shard, "(1, 1)")
    _rewrite(tmp_path, {n: w for n, w in kept.items() if n != name}, shard)
    _raises(tmp_path, name, shard, "does not hold it")
    (tmp_path / shard).unlink()
    _raises(tmp_path, shard, "missing")


def test_folder_errors(tmp_path):
    _raises(tmp_path, "config.json")
    (tmp_path / "config.json").write_text(json.dumps(CONFIGS["tiny-llama"].to_hf()))
    (tmp_path / "pytorch_model.bin").write_bytes(b"")
    _raises(tmp_path, "pytorch_model.bin", "only safetensors")
    (tmp_path / "model.safetensors").write_bytes(b"\xff" * 16)
    _raises(tmp_path, "model.safetensors", "header")


@pytest.mark.parametrize("name", TINY)
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("shard_bytes", [None, 48 << 10])
def test_save_checkpoint_round_trip(name, dtype, shard_bytes, tmp_path):
    cfg = CONFIGS[name]
    weights = random_weights(cfg, seed=6, dtype=dtype)
    files = save_checkpoint(tmp_path, cfg, weights, dtype=dtype, shard_bytes=shard_bytes)
    assert all(f.exists() for f in files) and (len(files) > 2) == (shard_bytes is not None)
    config, loaded = load_checkpoint(tmp_path, progress=False)
    assert config == cfg.replace(dtype=dtype)
    _exactly_equal(loaded, weights)
    # transformers reads the folder we wrote, to the same values
    import transformers
    cls = getattr(transformers, "LlamaForCausalLM" if cfg.architecture == "llama"
                  else "Qwen3ForCausalLM")
    model = cls.from_pretrained(tmp_path)
    state = hf_state(model)
    _exactly_equal({n: state[n] for n in weights}, weights)


def test_save_rounds_to_the_stored_dtype(tmp_path):
    cfg = CONFIGS["tiny-llama"]
    weights = random_weights(cfg, seed=7, dtype="float32")
    save_checkpoint(tmp_path, cfg, weights, dtype="bfloat16")
    loaded = load_checkpoint(tmp_path, progress=False).weights
    _exactly_equal(loaded, {n: round_to_dtype("bfloat16", w) for n, w in weights.items()})
    with pytest.raises(FileExistsError):
        save_checkpoint(tmp_path, cfg, weights)
    save_checkpoint(tmp_path, cfg, weights, dtype="float16", overwrite=True)
    loaded = load_checkpoint(tmp_path, progress=False).weights
    _exactly_equal(loaded, {n: w.astype(np.float16).astype(np.float32)
                            for n, w in weights.items()})
    fp32 = save_checkpoint(tmp_path, cfg, weights, dtype="float32", overwrite=True)
    raw = safetensors_numpy.load_file(str(fp32[1]))         # the safetensors package agrees
    _exactly_equal({n: raw[n] for n in weights}, weights)


def test_random_weights():
    cfg = CONFIGS["tiny-qwen3"]
    a, b = random_weights(cfg, seed=1), random_weights(cfg, seed=1)
    _exactly_equal(a, b)
    assert not np.array_equal(a["lm_head.weight"], random_weights(cfg, 2)["lm_head.weight"])
    assert {n: w.shape for n, w in a.items()} == cfg.param_shapes()
    for name, w in a.items():
        np.testing.assert_array_equal(w, round_to_dtype("bfloat16", w))   # bf16 values
        if w.ndim == 1:
            assert abs(w.mean() - 1) < 0.1 and w.std() < 0.2, name
        else:
            assert abs(w.std() * np.sqrt(w.shape[1]) - 1) < 0.1, name
    check_weights(cfg, a)
    with pytest.raises(CheckpointError, match="model.norm.weight"):
        check_weights(cfg, {n: w for n, w in a.items() if n != "model.norm.weight"})


def test_loading_and_the_reference_need_no_torch(tmp_path):
    import subprocess
    import sys
    cfg = CONFIGS["tiny-qwen3"]
    save_checkpoint(tmp_path, cfg, random_weights(cfg, seed=8), shard_bytes=64 << 10)
    code = ("import sys; sys.modules['torch'] = None; sys.modules['safetensors'] = None\n"
            "from eventtensor.models import ReferenceModel, load_checkpoint\n"
            f"cfg, w = load_checkpoint({str(tmp_path)!r}, progress=False)\n"
            "print(ReferenceModel(cfg, w).greedy_generate([[1, 2, 3]], 4))\n"
            "assert 'torch' not in {m.split('.')[0] for m in sys.modules if sys.modules[m]}\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("[[")
