"""The plain PyTorch decode step (float32 on the CPU) against the numpy reference model."""
from __future__ import annotations

import numpy as np
import pytest

from eventtensor.models import ReferenceModel, get_config, random_weights

torch = pytest.importorskip("torch")

from eventtensor.models.torch_decode import TorchDecoder  # noqa: E402

MODELS = ["tiny-llama", "tiny-qwen3"]
# Active slots per step: slot 0 runs alone first, then slot 1 joins, then slot 2, so the
# requests sit at ragged positions (and B changes between steps).
SCHEDULE = [1, 1, 1, 2, 2, 3, 3, 3]


def setup(name: str, max_batch: int = 4, max_context: int = 32):
    config = get_config(name)
    weights = random_weights(config, seed=3, dtype="float32")
    return config, ReferenceModel(config, weights), TorchDecoder(config, weights, max_batch,
                                                                  max_context)


def assert_close(logits: torch.Tensor, expected: np.ndarray) -> None:
    scale = np.abs(expected).max()
    np.testing.assert_allclose(logits.numpy(), expected, rtol=0, atol=1e-4 * scale)


def run_schedule(ref: ReferenceModel, step, schedule: list[int]) -> list[list[int]]:
    """Greedy decoding on both models, slots 0..B-1 active in a step of B; checks logits and
    tokens every step and returns the tokens fed to each slot."""
    fed: list[list[int]] = [[] for _ in range(max(schedule))]
    nxt = [7, 100, 201, 250][:max(schedule)]
    for batch in schedule:
        tokens = nxt[:batch]
        positions = [len(fed[b]) for b in range(batch)]
        expected = ref.step(tokens, list(range(batch)))
        logits, greedy = step(torch.tensor(tokens), torch.tensor(positions))
        assert logits.dtype == torch.float32 and greedy.dtype == torch.int64
        assert_close(logits, expected)
        np.testing.assert_array_equal(greedy.numpy(), expected.argmax(axis=-1))
        for b in range(batch):
            fed[b].append(tokens[b])
            nxt[b] = int(greedy[b])
    return fed


@pytest.mark.parametrize("name", MODELS)
def test_ragged_steps_match_reference(name):
    _, ref, dec = setup(name)
    fed = run_schedule(ref, dec.step, SCHEDULE)
    assert [len(f) for f in fed] == [8, 5, 3]


@pytest.mark.parametrize("name", MODELS)
def test_single_request_many_steps(name):
    _, ref, dec = setup(name)
    run_schedule(ref, lambda t, p: dec.step(t, p, context=16), [1] * 12)


@pytest.mark.parametrize("name", MODELS)
def test_stale_cache_beyond_positions_is_masked(name):
    _, ref, dec = setup(name)
    gen = torch.Generator().manual_seed(0)
    for cache in dec.k_cache + dec.v_cache:
        cache.copy_(torch.randn(cache.shape, generator=gen) * 50)
    run_schedule(ref, dec.step, SCHEDULE)


def test_cache_holds_rope_keys_and_values_of_reference():
    config, ref, dec = setup("tiny-qwen3")
    run_schedule(ref, dec.step, SCHEDULE)
    for layer in range(config.num_layers):
        for slot, length in enumerate([8, 5, 3]):
            keys, values = ref.cache(slot, layer)                      # [S, K, D]
            np.testing.assert_allclose(dec.k_cache[layer][slot, :, :length].numpy(),
                                       keys.transpose(1, 0, 2), atol=1e-5)
            np.testing.assert_allclose(dec.v_cache[layer][slot, :, :length].numpy(),
                                       values.transpose(1, 0, 2), atol=1e-5)


def test_context_bound_and_repeated_step_give_the_same_result():
    _, _, dec = setup("tiny-llama")
    tokens, positions = torch.tensor([3, 4, 5]), torch.tensor([0, 1, 2])
    for _ in range(2):  # fill positions 0..2 of three slots with something
        dec.step(tokens, torch.tensor([0, 0, 0]))
        dec.step(tokens, torch.tensor([1, 1, 1]))
    full, greedy = dec.step(tokens, positions)
    cache = torch.stack(dec.k_cache), torch.stack(dec.v_cache)
    again, _ = dec.step(tokens, positions)           # idempotent: same writes, same result
    torch.testing.assert_close(again, full, rtol=0, atol=0)
    assert torch.equal(torch.stack(dec.k_cache), cache[0])
    assert torch.equal(torch.stack(dec.v_cache), cache[1])
    bounded, bounded_greedy = dec.step(tokens, positions, context=3)
    torch.testing.assert_close(bounded, full, rtol=1e-6, atol=1e-6)
    assert torch.equal(bounded_greedy, greedy)
    torch.testing.assert_close(torch.stack(dec.k_cache), cache[0], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", MODELS)
def test_graph_step_on_cpu_runs_on_static_buffers(name):
    _, ref, dec = setup(name)
    steps = {b: dec.graph_step(b, context=16) for b in (1, 2, 3)}
    buffers = {b: (s.tokens.data_ptr(), s.positions.data_ptr()) for b, s in steps.items()}
    run_schedule(ref, lambda t, p: steps[len(t)](t, p), SCHEDULE)
    assert all(s.graph is None for s in steps.values())     # no CUDA graphs off CUDA
    assert {b: (s.tokens.data_ptr(), s.positions.data_ptr())
            for b, s in steps.items()} == buffers
    assert steps[3].positions.tolist() == [7, 4, 2]


@pytest.mark.parametrize("name", MODELS)
def test_step_traces_as_one_graph(name):
    """fullgraph=True fails on any graph break: host syncs (.item()), data-dependent shapes
    or Python control flow on tensor values."""
    _, ref, dec = setup(name)
    steps = {b: dec.compiled_step(b, context=16, mode=None, backend="aot_eager")
             for b in (1, 2, 3)}
    run_schedule(ref, lambda t, p: steps[len(t)](t, p), SCHEDULE)


def test_rejects_bad_shapes_and_bounds():
    _, _, dec = setup("tiny-llama", max_batch=2, max_context=8)
    one = torch.zeros(1, dtype=torch.int64)
    with pytest.raises(ValueError, match="B"):
        dec.step(torch.zeros(3, dtype=torch.int64), torch.zeros(3, dtype=torch.int64))
    with pytest.raises(ValueError, match="context"):
        dec.step(one, one, context=9)
    with pytest.raises(ValueError, match=r"\[B\]"):
        dec.step(one, torch.zeros(2, dtype=torch.int64))
    with pytest.raises(ValueError, match="batch"):
        dec.graph_step(3)
    with pytest.raises(ValueError, match="mode"):
        dec.compiled_step(1, mode="default")
    with pytest.raises(ValueError, match="max_context"):
        TorchDecoder(get_config("tiny-llama"), random_weights(get_config("tiny-llama")), 1,
                     10_000)
