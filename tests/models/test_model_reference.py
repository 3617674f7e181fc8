"""The numpy reference model against transformers (same weights, float32 model): prefill and
decode logits, greedy tokens, Llama-3 RoPE scaling; ragged batches equal to each request run
alone; the step's contract."""
import numpy as np
import pytest

from eventtensor.dtypes import round_to_dtype
from eventtensor.models import CONFIGS, ReferenceModel, random_weights
from eventtensor.models.reference import rope_inv_freq

pytest.importorskip("torch")
pytest.importorskip("transformers")

from hf_models import hf_logits, hf_model  # noqa: E402

TINY = ["tiny-llama", "tiny-qwen3"]
DECODE_STEPS = 16


@pytest.fixture(scope="module", params=TINY)
def pair(request):
    """(config, weights, transformers model with those weights)."""
    cfg = CONFIGS[request.param]
    weights = random_weights(cfg, seed=11)
    return cfg, weights, hf_model(cfg, weights)


def _close(got: np.ndarray, want: np.ndarray) -> None:
    """Within 1e-4 of the logit scale."""
    scale = max(1.0, float(np.abs(want).max()))
    err = float(np.abs(got - want).max())
    assert err <= 1e-4 * scale, f"max error {err:.3g} at logit scale {scale:.3g}"


def test_rope_frequencies_match_transformers(pair):
    cfg, _, model = pair
    ours = rope_inv_freq(cfg)
    np.testing.assert_allclose(ours, model.model.rotary_emb.inv_freq.double().numpy(),
                               rtol=1e-6)
    plain = rope_inv_freq(cfg.replace(rope_scaling=None))
    sc = cfg.rope_scaling
    if sc is None:
        np.testing.assert_array_equal(ours, plain)
        return
    # tiny-llama's frequencies cover every band of the llama3 scaling
    kept = ours == plain
    divided = np.isclose(ours, plain / sc.factor, rtol=1e-12)
    between = ~kept & ~divided
    assert kept.any() and divided.any() and between.any()
    assert np.all((ours[between] < plain[between]) & (ours[between] > plain[between] / sc.factor))


def test_prefill_and_decode_match_transformers(pair):
    cfg, weights, model = pair
    prompt = [int(t) for t in np.random.default_rng(0).integers(0, cfg.vocab_size, 7)]
    ref = ReferenceModel(cfg, weights)
    logits = [ref.step(prompt, ["r"] * len(prompt))]
    generated = [int(np.argmax(logits[0][-1]))]
    for _ in range(DECODE_STEPS):
        logits.append(ref.step([generated[-1]], ["r"]))
        generated.append(int(np.argmax(logits[-1][-1])))
    assert ref.past_length("r") == len(prompt) + DECODE_STEPS
    # transformers on the whole sequence at once: row t holds the logits after token t
    sequence = prompt + generated[:-1]
    want = hf_logits(model, sequence)
    got = np.concatenate(logits)
    assert got.shape == want.shape == (len(sequence), cfg.vocab_size)
    _close(got, want)
    # greedy decoding agrees token for token: transformers' argmax after every prefix is the
    # token we chose
    assert [int(t) for t in np.argmax(want[len(prompt) - 1:], axis=-1)] == generated
    assert ReferenceModel(cfg, weights).greedy_generate([prompt], DECODE_STEPS + 1) == \
        [generated]


def test_ragged_batch_equals_each_request_alone(pair):
    cfg, weights, model = pair
    rng = np.random.default_rng(1)
    prompts = {r: [int(t) for t in rng.integers(0, cfg.vocab_size, n)]
               for r, n in (("a", 5), ("b", 1), ("c", 9))}
    # later steps: a different number of new tokens per request (c sits out step 3)
    chunks = [prompts,
              {"a": [3, 4, 5], "b": [6], "c": [7, 8]},
              {"a": [9], "b": [10, 11, 12, 13]}]
    batched = ReferenceModel(cfg, weights)
    got: dict[str, list[np.ndarray]] = {r: [] for r in prompts}
    for i, step in enumerate(chunks):
        order = [(r, j) for r, toks in step.items() for j in range(len(toks))]
        if i == 1:  # interleave the requests' tokens: their order within a request counts
            order = sorted(order, key=lambda rj: rj[1])
        logits = batched.step([step[r][j] for r, j in order], [r for r, _ in order])
        for r in step:
            got[r].append(logits[[k for k, (q, _) in enumerate(order) if q == r]])
    for r in prompts:
        alone = ReferenceModel(cfg, weights)
        for step, rows in zip([c for c in chunks if r in c], got[r]):
            np.testing.assert_allclose(rows, alone.step(step[r], [r] * len(step[r])),
                                       rtol=1e-10, atol=1e-12)
        sequence = [t for c in chunks if r in c for t in c[r]]
        assert batched.past_length(r) == len(sequence)
        whole = ReferenceModel(cfg, weights).step(sequence, [0] * len(sequence))
        np.testing.assert_allclose(np.concatenate(got[r]), whole, rtol=1e-10, atol=1e-12)
        _close(whole, hf_logits(model, sequence))
    keys, values = batched.cache("c", 1)
    assert keys.shape == values.shape == (11, cfg.num_kv_heads, cfg.head_dim)


def test_greedy_generate_batched_equals_alone(pair):
    cfg, weights, _ = pair
    ref = ReferenceModel(cfg, weights)
    prompts = [[1, 2, 3], [200], [5, 6, 7, 8, 9, 10]]
    batched = ref.greedy_generate(prompts, 5)
    assert batched == [ref.greedy_generate([p], 5)[0] for p in prompts]
    assert all(len(seq) == 5 for seq in batched) and not ref._kv
    assert ref.greedy_generate(prompts, 0) == [[], [], []]


def test_float32_compute_is_close(pair):
    cfg, weights, _ = pair
    tokens = [4, 8, 15, 16, 23, 42]
    want = ReferenceModel(cfg, weights).step(tokens, [0] * 6)
    got = ReferenceModel(cfg, weights, compute_dtype=np.float32).step(tokens, [0] * 6)
    assert got.dtype == np.float32
    _close(got, want)


def test_bfloat16_cache_rounds_what_later_steps_read(pair):
    """With cache_dtype bfloat16 the cached keys and values are the bf16 roundings of the
    float64 ones; a step's own new keys are not rounded (its logits equal the float64
    model's), later steps read the rounded cache (their logits differ, but only slightly)."""
    cfg, weights, _ = pair
    exact, rounded = ReferenceModel(cfg, weights), ReferenceModel(cfg, weights,
                                                                  cache_dtype="bfloat16")
    np.testing.assert_array_equal(rounded.step([4, 8], ["r"] * 2), exact.step([4, 8], ["r"] * 2))
    for layer in range(cfg.num_layers):
        for got, want in zip(rounded.cache("r", layer), exact.cache("r", layer)):
            np.testing.assert_array_equal(got, round_to_dtype("bfloat16", want))
    a, b = rounded.step([15], ["r"]), exact.step([15], ["r"])
    assert 0 < np.abs(a - b).max() <= 0.02 * np.abs(b).max()


def test_step_contract():
    cfg = CONFIGS["tiny-llama"]
    ref = ReferenceModel(cfg, random_weights(cfg, seed=2))
    with pytest.raises(ValueError, match="vocabulary"):
        ref.step([cfg.vocab_size], ["x"])
    with pytest.raises(ValueError, match="request ids"):
        ref.step([1, 2], ["x"])
    ref.step([1] * 10, ["x"] * 10)
    with pytest.raises(ValueError, match="max_position_embeddings"):
        ref.step([1] * (cfg.max_position_embeddings - 9), ["x"] * (cfg.max_position_embeddings
                                                                     - 9))
    assert ref.past_length("x") == 10 and ref.past_length("y") == 0   # nothing changed
    ref.release("x")
    assert ref.past_length("x") == 0
    with pytest.raises(ValueError, match="at least one token"):
        ref.greedy_generate([[1], []], 2)
