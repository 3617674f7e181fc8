"""The decode megakernel on the GPU: tiny Llama and Qwen3 against the numpy reference (every
step's logits, greedy tokens, requests joining and leaving), and real-size shapes (random
weights) against transformers with the same weights."""
import sys
from pathlib import Path

import numpy as np
import pytest

from eventtensor.models import ReferenceModel, get_config, random_weights
from eventtensor.models.decode import greedy_generate
from eventtensor.models.weights import random_weights_on_gpu

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))

pytestmark = pytest.mark.gpu


def _session(cfg, weights, max_batch, max_context, **kw):
    from eventtensor.models.gpu_decode import GpuDecodeSession
    return GpuDecodeSession(cfg, weights, max_batch, max_context, progress=False, **kw)


def _tiny_steps_match_reference(name, steps, seed, **options):
    """A session of tiny model `name` (bf16 weights, caches in fp32, `options` for the
    session) against the float64 reference: three requests at different positions, b
    joining at step 1, c at step 2; every step's logits within fp32 accumulation error and
    greedy tokens equal."""
    cfg = get_config(name)
    weights = random_weights(cfg, seed=5)
    session = _session(cfg, weights, 4, 96, cache_dtype="float32", **options)
    ref = ReferenceModel(cfg, weights)
    rng = np.random.default_rng(seed)
    for step in range(steps):
        live = ["a", "b", "c"][:1 + min(step, 2)]
        toks = rng.integers(0, cfg.vocab_size, len(live))
        got = session.step(live, toks)
        want = ref.step(toks, live)
        np.testing.assert_allclose(got.logits.cpu().numpy(), want,
                                   atol=2e-4 * np.abs(want).max(), rtol=0)
        np.testing.assert_array_equal(got.next_tokens, np.argmax(want, axis=-1))


@pytest.mark.parametrize("mode", ["static", "unfused"])
@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen3"])
def test_tiny_logits_and_tokens_match_reference(name, mode):
    _tiny_steps_match_reference(name, 12, 0, mode=mode)


# tiles of whole weight rows (tiny-llama, bf16: q, k, v and LM-head tiles of 2 KB, gate, up
# and down tiles of 4 KB, argmax partials over 4 LM-head tiles): with a 3 KB ring one tile at
# a time and the 4 KB ones left to L2; with 5 KB one or two at a time, allocations wrapping
# at the end
RING_TILES = "k_split=1,mlp_split=1,proj_tile=16,n_tile=16,down_tile=16,ffn_tile=32," \
             "down_split=1,vocab_tile=16,argmax_tile=64,kv_chunk=16"


@pytest.mark.parametrize("name, norm", [("tiny-llama", "fuse_norm"), ("tiny-qwen3", "fuse_norm"),
                                        ("tiny-llama", "fold_norm"), ("tiny-qwen3", "fold_norm"),
                                        ("tiny-llama", "fold_silu"),
                                        ("tiny-qwen3", "fold_norm=1,fold_silu")])
def test_tiny_fused_or_folded_norms_match_reference(name, norm):
    """Residual adds that also compute the norm after them (fuse_norm), or the sums of
    squares of their rows for the projections after them to apply the norm (fold_norm, with
    residual tiles of 32 columns: several sums per row); the down projections applying the
    SiLU-and-multiply to the gate and up partials (fold_silu), alone and with folded
    norms."""
    from eventtensor.models.decode import tiles_with
    from eventtensor.models.gpu_decode import gpu_tiles
    _tiny_steps_match_reference(name, 8, 2, tiles=tiles_with(gpu_tiles(get_config(name), 4),
                                                            f"{norm}=1,residual_tile=32"))


@pytest.mark.parametrize("options", [{"knobs": {"ET_PREFETCH_OWN": 1}},
                                     {"knobs": {"ET_PREFETCH_BYTES": 65536,
                                                "ET_PREFETCH_BULK": 1}},
                                     {"knobs": {"ET_LINEAR_ASYNC": 3, "ET_LINEAR_EARLY": 1}},
                                     {"knobs": {"ET_ATTN_STREAM": 0}},
                                     {"fast_compile": "mid"}, {"fast_compile": "separate"}],
                         ids=["prefetch_own", "bulk_window", "early", "attn_registers", "mid",
                              "separate"])
def test_tiny_kernel_options_match_reference(options):
    """A waiting task's own tiles prefetched into L2 (ET_PREFETCH_OWN), the tiles of the
    tasks ahead prefetched by bulk prefetches (ET_PREFETCH_BULK in the prefetch window),
    one-row linears' first weight rounds issued before their tasks' waits (ET_LINEAR_EARLY;
    the first step has one request), the attention's KV words loaded into registers a pass
    at a time (ET_ATTN_STREAM 0, the decode session streaming them), and the kernel
    compiled at NVRTC's --Ofast-compile=mid or with its functions assembled one by one
    (fast_compile="separate")."""
    _tiny_steps_match_reference("tiny-qwen3", 6, 5, **options)


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen3"])
def test_tiny_one_kv_chunk_matches_reference(name):
    """One KV chunk over the whole context (96 positions): the attention tiles write the
    attention output themselves, no merge."""
    from eventtensor.models.decode import tiles_with
    from eventtensor.models.gpu_decode import gpu_tiles
    _tiny_steps_match_reference(name, 8, 4, tiles=tiles_with(gpu_tiles(get_config(name), 4),
                                                            "kv_chunk=96"))


@pytest.mark.parametrize("tiles, knobs", [
    ("", {}),
    (",fold_norm=1,residual_tile=32", {"ET_LINEAR_MMA_SPREAD": 1, "ET_LINEAR_MMA_RING": 8}),
    (",fold_norm=1,residual_tile=32", {"ET_LINEAR_MMA_RING": 4, "ET_LINEAR_MMA_KSPLIT": 2})],
    ids=["plain", "folded_spread_ring8", "folded_k_split"])
@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen3"])
def test_tiny_tensor_core_linears_match_reference(name, tiles, knobs):
    """Every linear on tensor cores (ET_LINEAR_MMA=1; unsplit q/k/v, gate and up, so that
    each K-slice is a multiple of 32); and so with the norms folded into the projections
    (fold_norm: their x scaled as it is staged), a block's MMAs in the spread order
    (ET_LINEAR_MMA_SPREAD) and a ring of 8 weight blocks, or k split over two groups of
    warps (ET_LINEAR_MMA_KSPLIT)."""
    from eventtensor.models.decode import tiles_with
    from eventtensor.models.gpu_decode import gpu_tiles
    _tiny_steps_match_reference(name, 8, 3,
                                tiles=tiles_with(gpu_tiles(get_config(name), 4),
                                                 "k_split=1,mlp_split=1" + tiles),
                                knobs={"ET_LINEAR_MMA": 1, **knobs})


@pytest.mark.parametrize("ring", [3072, 5120, 65536])
@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen3"])
def test_tiny_stage_ring_matches_reference(name, ring):
    """The stage ring (weights copied into shared memory ahead of their tasks) with rings
    that hold one tile, two (wrapping), or many."""
    from eventtensor.models.decode import DecodeTiles, tiles_with
    _tiny_steps_match_reference(name, 8, 1, tiles=tiles_with(DecodeTiles(rows=4), RING_TILES),
                                knobs={"ET_STAGE_BYTES": ring})


class _Checked:
    """A decode session whose every step is checked against the reference: the logits of
    each request within `tol` (relative to the step's largest) of the reference's; the step
    returns the reference's picks, so an error shows at its step and does not carry on."""

    def __init__(self, session, ref, tol):
        self.session, self.ref, self.tol, self.steps = session, ref, tol, 0

    def free_slots(self):
        return self.session.free_slots()

    @property
    def max_tokens(self):
        return self.session.max_tokens

    def release(self, request_id):
        self.session.release(request_id)
        self.ref.release(request_id)

    def step(self, request_ids, tokens):
        got = self.session.step(request_ids, tokens).logits.float().cpu().numpy()
        want = self.ref.step(tokens, request_ids)
        err = np.abs(got - want).max(axis=1) / np.abs(want).max()
        assert (err <= self.tol).all(), \
            f"step {self.steps}, batch {len(tokens)}: relative logit errors {err.round(5)}"
        self.steps += 1
        return type("Picks", (), {"next_tokens": np.argmax(want, axis=-1)})


ARRIVALS = dict(prompts=[[1, 2, 3], [4, 5], [6], [7, 8, 9, 10]], budgets=[10, 6, 8, 5],
                starts=[0, 1, 1, 4])


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen3"])
def test_tiny_greedy_with_arrivals_bf16_cache(name):
    """Greedy decoding with requests joining and leaving (the batch changes between steps,
    one kernel) and bf16 caches: every step's logits match the reference holding its cache
    in bf16 (fed the same tokens), and a second run, on the kernel's own picks, gives the
    reference's tokens."""
    cfg = get_config(name)
    weights = random_weights(cfg, seed=6)
    prompts, budgets, starts = ARRIVALS.values()
    checked = _Checked(_session(cfg, weights, 3, 64),
                       ReferenceModel(cfg, weights, cache_dtype="bfloat16"), 5e-4)
    want = greedy_generate(checked, prompts, budgets, start_steps=starts)
    assert greedy_generate(checked.session, prompts, budgets, start_steps=starts) == want


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen3"])
def test_tiny_prompt_chunks_match_reference(name):
    """Steps of more tokens than requests (prompt chunks, causal within each request) mixed
    with decode tokens, crossing the 128-position KV chunk: every token's logits against the
    reference (bf16 cache) and greedy generation with chunked prompts equal to the
    reference's."""
    cfg = get_config(name)
    weights = random_weights(cfg, seed=8)
    session = _session(cfg, weights, 3, 256, max_tokens=40)
    checked = _Checked(session, ReferenceModel(cfg, weights, cache_dtype="bfloat16"), 5e-4)
    rng = np.random.default_rng(9)
    plan = [["a"] * 40, ["a"] * 30 + ["b"] * 10, ["a"] * 40, ["a"] * 20 + ["b", "c"],
            ["c"] * 3 + ["a"] + ["b"] * 36, ["b", "a", "c"]]      # a at 130 after step 3
    for ids in plan:
        checked.step(ids, rng.integers(0, cfg.vocab_size, len(ids)))
    for r in "abc":
        checked.release(r)
    prompts = [list(rng.integers(0, cfg.vocab_size, n)) for n in (37, 5, 60)]
    want = greedy_generate(checked, prompts, 6)
    assert greedy_generate(session, prompts, 6) == want


def _hf_model(cfg, weights):
    """transformers' model of `cfg` in float32 on the GPU holding exactly `weights`."""
    import torch
    import transformers
    from hf_models import hf_config
    cls = transformers.LlamaForCausalLM if cfg.architecture == "llama" else \
        transformers.Qwen3ForCausalLM
    with torch.device("meta"):
        model = cls(hf_config(cfg))
    state = {n: w.float() for n, w in weights.items()}
    model.load_state_dict(state, strict=False, assign=True)
    if cfg.tie_word_embeddings:
        model.tie_weights()
    model.model.rotary_emb = type(model.model.rotary_emb)(config=model.config, device="cuda")
    return model.eval()


@pytest.mark.parametrize("name, batches", [("llama-3.2-1b", (1, 3, 16, 64)),
                                           ("qwen3-8b", (1, 3, 16, 64))])
def test_real_size_matches_transformers(name, batches):
    """Real shapes with random weights: for each batch size, 32 greedy steps per request
    from different prompts; transformers (float32, same weights) rerun on every request's
    whole sequence gives logits within bf16 tolerance of ours at every step, and our pick is
    its argmax wherever its top two logits are apart by more than that tolerance."""
    import torch
    cfg = get_config(name)
    weights = random_weights_on_gpu(cfg, seed=1)
    session = _session(cfg, weights, 64, 256)
    model = _hf_model(cfg, weights)
    rng = np.random.default_rng(2)
    for batch in batches:
        prompts = [list(rng.integers(0, cfg.vocab_size, 1 + b % 5)) for b in range(batch)]
        logits: list[list[np.ndarray]] = [[] for _ in prompts]
        ids = [object() for _ in prompts]
        seqs = [list(p) for p in prompts]
        fed = [0] * batch
        for _ in range(32 + max(len(p) for p in prompts) - 1):
            live = [r for r in range(batch) if fed[r] < len(seqs[r]) and len(seqs[r]) - len(
                prompts[r]) < 32]
            if not live:
                break
            res = session.step([ids[r] for r in live], [seqs[r][fed[r]] for r in live])
            out = res.logits.float().cpu().numpy()
            for j, r in enumerate(live):
                fed[r] += 1
                if fed[r] >= len(prompts[r]):
                    logits[r].append(out[j])
                    if fed[r] == len(seqs[r]):
                        seqs[r].append(int(res.next_tokens[j]))
        for r in range(batch):
            session.release(ids[r])
            with torch.no_grad():
                want = model(torch.tensor([seqs[r][:-1]], device="cuda"),
                             use_cache=False).logits[0].double().cpu().numpy()
            want = want[len(prompts[r]) - 1:]
            got = np.stack(logits[r])
            tol = 0.02 * np.abs(want).max()
            np.testing.assert_allclose(got, want, atol=tol, rtol=0,
                                       err_msg=f"{name} B={batch} request {r}")
            picks = np.array(seqs[r][len(prompts[r]):])
            top2 = np.sort(want, axis=-1)[:, -2:]
            clear = top2[:, 1] - top2[:, 0] > 2 * tol
            assert (picks[clear] == np.argmax(want, axis=-1)[clear]).all(), \
                f"{name} B={batch} request {r}: greedy tokens differ"
            assert clear.sum() >= 4  # random weights: many near ties; still 4 picks checked
