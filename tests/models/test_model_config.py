"""ModelConfig: the named configs, HF config.json parsing and writing, and the errors that name
the config field at fault."""
import copy
import json

import pytest

from eventtensor.models import CONFIGS, ConfigError, ModelConfig, RopeScaling, get_config

# The published config.json files (fields the parser reads, plus some it ignores).
LLAMA_3_2_1B_JSON = {
    "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 128000, "eos_token_id": 128001, "head_dim": 64, "hidden_act": "silu",
    "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 8192,
    "max_position_embeddings": 131072, "mlp_bias": False, "model_type": "llama",
    "num_attention_heads": 32, "num_hidden_layers": 16, "num_key_value_heads": 8,
    "pretraining_tp": 1, "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
    "transformers_version": "4.45.0.dev0", "use_cache": True, "vocab_size": 128256,
}
QWEN3_8B_JSON = {
    "architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
    "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 12288,
    "max_position_embeddings": 40960, "max_window_layers": 36, "model_type": "qwen3",
    "num_attention_heads": 32, "num_hidden_layers": 36, "num_key_value_heads": 8,
    "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 1000000,
    "sliding_window": None, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "transformers_version": "4.51.0", "use_cache": True, "use_sliding_window": False,
    "vocab_size": 151936,
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_named_config_round_trips_through_hf_dict(name, tmp_path):
    cfg = CONFIGS[name]
    d = cfg.to_hf()
    assert ModelConfig.from_hf(d) == cfg
    assert ModelConfig.from_hf(json.loads(json.dumps(d))) == cfg
    (tmp_path / "config.json").write_text(json.dumps(d))
    assert ModelConfig.from_hf(tmp_path) == cfg                     # the folder
    assert ModelConfig.from_hf(tmp_path / "config.json") == cfg     # the file
    assert get_config(name) is cfg and hash(cfg) == hash(ModelConfig.from_hf(d))


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_named_config_through_transformers(name):
    transformers = pytest.importorskip("transformers")
    cfg = CONFIGS[name]
    cls = transformers.LlamaConfig if cfg.architecture == "llama" else transformers.Qwen3Config
    hf = cls(**cfg.to_hf())
    assert hf.head_dim == cfg.head_dim and hf.num_key_value_heads == cfg.num_kv_heads
    assert ModelConfig.from_hf(hf.to_dict()) == cfg                 # transformers' layout
    assert ModelConfig.from_hf(json.loads(hf.to_json_string())) == cfg


def test_published_config_files_parse_to_the_named_configs():
    assert ModelConfig.from_hf(LLAMA_3_2_1B_JSON) == CONFIGS["llama-3.2-1b"]
    assert ModelConfig.from_hf(QWEN3_8B_JSON) == CONFIGS["qwen3-8b"]


def test_published_shapes():
    c = CONFIGS["llama-3.2-1b"]
    assert (c.vocab_size, c.hidden_size, c.intermediate_size, c.num_layers, c.num_heads,
            c.num_kv_heads, c.head_dim, c.rope_theta) == (128256, 2048, 8192, 16, 32, 8, 64,
                                                          500000.0)
    assert c.rope_scaling == RopeScaling(32.0, 1.0, 4.0, 8192) and c.tie_word_embeddings
    q = CONFIGS["qwen3-8b"]
    assert (q.vocab_size, q.hidden_size, q.intermediate_size, q.num_layers, q.num_heads,
            q.num_kv_heads, q.head_dim, q.rope_theta, q.rms_norm_eps) == (
        151936, 4096, 12288, 36, 32, 8, 128, 1e6, 1e-6)
    assert q.qk_norm and not q.tie_word_embeddings and q.rope_scaling is None
    # the published parameter counts
    assert round(c.num_params() / 1e6) == 1236
    assert round(CONFIGS["llama-3.1-8b"].num_params() / 1e6) == 8030
    assert round(q.num_params() / 1e6) == 8191
    assert round(CONFIGS["qwen3-0.6b"].num_params() / 1e6) == 596
    assert c.weight_bytes("bfloat16") == 2 * c.num_params()
    assert c.weight_bytes("float32") == 4 * c.num_params() == 2 * c.weight_bytes()
    t = CONFIGS["tiny-qwen3"]
    assert t.q_size != t.hidden_size and t.qk_norm and not t.tie_word_embeddings


def test_param_shapes_in_hf_naming():
    q = CONFIGS["tiny-qwen3"].param_shapes()
    assert q["model.embed_tokens.weight"] == (256, 64)
    assert q["model.layers.1.self_attn.q_proj.weight"] == (128, 64)
    assert q["model.layers.1.self_attn.k_proj.weight"] == (64, 64)
    assert q["model.layers.1.self_attn.o_proj.weight"] == (64, 128)
    assert q["model.layers.0.self_attn.q_norm.weight"] == (32,)
    assert q["model.layers.0.mlp.down_proj.weight"] == (64, 128)
    assert q["lm_head.weight"] == (256, 64) and q["model.norm.weight"] == (64,)
    assert len(q) == 1 + 2 * 11 + 2
    ll = CONFIGS["tiny-llama"].param_shapes()
    assert "lm_head.weight" not in ll and not any("q_norm" in n for n in ll)
    assert len(ll) == 1 + 2 * 9 + 1


def test_model_config_validation():
    base = CONFIGS["tiny-llama"]
    with pytest.raises(ConfigError, match="attention_bias"):
        base.replace(attention_bias=True)
    with pytest.raises(ConfigError, match="qk_norm"):
        base.replace(qk_norm=True)
    with pytest.raises(ConfigError, match="num_kv_heads"):
        base.replace(num_kv_heads=3)
    with pytest.raises(ConfigError, match="head_dim"):
        base.replace(head_dim=15)
    with pytest.raises(ConfigError, match="architecture"):
        base.replace(architecture="mistral")
    with pytest.raises(ConfigError, match="dtype"):
        base.replace(dtype="float64")
    scaled = base.replace(rope_scaling={"rope_type": "llama3", "factor": 8.0,
                                        "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                        "original_max_position_embeddings": 64})
    assert scaled == base and isinstance(scaled.rope_scaling, RopeScaling)
    with pytest.raises(KeyError, match="tiny-llama"):
        get_config("no-such-model")


def _without(key):
    return lambda d: d.pop(key)


def _set(key, value):
    return lambda d: d.__setitem__(key, value)


def _rope(**changes):
    def change(d):
        d["rope_scaling"] = {**d["rope_scaling"], **changes}
    return change


def _drop_rope(key):
    return lambda d: d["rope_scaling"].pop(key)


# (base config, change to its HF dict, the field the error must name)
BAD = [
    ("tiny-llama", _set("architectures", ["MistralForCausalLM"]), "architectures"),
    ("tiny-llama", _set("architectures", ["LlamaForCausalLM", "Qwen3ForCausalLM"]),
     "architectures"),
    ("tiny-llama", _set("model_type", "qwen3"), "model_type"),
    ("tiny-llama", _set("attention_bias", True), "attention_bias"),
    ("tiny-llama", _set("mlp_bias", True), "mlp_bias"),
    ("tiny-llama", _set("hidden_act", "gelu"), "hidden_act"),
    ("tiny-llama", _set("pretraining_tp", 2), "pretraining_tp"),
    ("tiny-llama", _set("partial_rotary_factor", 0.5), "partial_rotary_factor"),
    ("tiny-llama", _set("quantization_config", {"quant_method": "fp8"}),
     "quantization_config"),
    ("tiny-llama", _set("rope_scaling", {"rope_type": "yarn", "factor": 4.0}), "rope_scaling"),
    ("tiny-llama", _set("rope_scaling", {"type": "linear", "factor": 2.0}), "rope_scaling"),
    ("tiny-llama", _drop_rope("factor"), "rope_scaling.factor"),
    ("tiny-llama", _drop_rope("original_max_position_embeddings"),
     "rope_scaling.original_max_position_embeddings"),
    ("tiny-llama", _rope(low_freq_factor=4.0), "rope_scaling.high_freq_factor"),
    ("tiny-llama", _rope(factor=0.0), "rope_scaling.factor"),
    ("tiny-llama", _set("rope_parameters", {"rope_type": "dynamic", "factor": 2.0,
                                            "rope_theta": 1e4}), "rope_parameters"),
    ("tiny-llama", _set("rope_parameters", {"rope_type": "llama3", "factor": 2.0,
                                            "rope_theta": 1e4}),
     "rope_parameters.low_freq_factor"),
    ("tiny-llama", _set("rope_theta", -1.0), "rope_theta"),
    ("tiny-llama", _set("head_dim", 15), "head_dim"),
    ("tiny-llama", _set("head_dim", 0), "head_dim"),
    ("tiny-llama", lambda d: (d.pop("head_dim"), d.update(num_attention_heads=6)),
     "head_dim"),
    ("tiny-llama", _set("num_key_value_heads", 3), "num_key_value_heads"),
    ("tiny-llama", _set("num_hidden_layers", 0), "num_hidden_layers"),
    ("tiny-llama", _set("intermediate_size", 12.5), "intermediate_size"),
    ("tiny-llama", _without("vocab_size"), "vocab_size"),
    ("tiny-llama", _without("hidden_size"), "hidden_size"),
    ("tiny-llama", _set("torch_dtype", "int8"), "torch_dtype"),
    ("tiny-qwen3", _set("use_sliding_window", True), "use_sliding_window"),
    ("tiny-qwen3", _set("layer_types", ["full_attention", "sliding_attention"]),
     "layer_types"),
    ("tiny-qwen3", lambda d: (d.pop("architectures"), d.update(model_type="gemma")),
     "architectures"),
]


@pytest.mark.parametrize("base, change, field", BAD,
                         ids=[f"{b}-{f}-{i}" for i, (b, _, f) in enumerate(BAD)])
def test_bad_field_is_named(base, change, field):
    d = copy.deepcopy(CONFIGS[base].to_hf())
    change(d)
    with pytest.raises(ConfigError) as err:
        ModelConfig.from_hf(d)
    assert err.value.field == field
    assert repr(field) in str(err.value)


def test_defaults_follow_transformers():
    d = CONFIGS["tiny-qwen3"].to_hf()
    for key in ("architectures", "head_dim", "num_key_value_heads", "torch_dtype",
                "rope_scaling", "use_sliding_window", "sliding_window"):
        d.pop(key)
    d["num_attention_heads"] = 2                         # head_dim = 64 / 2
    cfg = ModelConfig.from_hf(d)
    assert (cfg.architecture, cfg.head_dim, cfg.num_kv_heads, cfg.dtype) == (
        "qwen3", 32, 2, "float32")
