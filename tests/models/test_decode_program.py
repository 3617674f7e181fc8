"""The decode-step program on the CPU interpreter: logits and greedy tokens against the numpy
reference and transformers, ragged positions with requests joining and leaving, the event
structure, and every decode task kind against plain numpy."""
from dataclasses import replace

import numpy as np
import pytest

from eventtensor.lower import bind, build_tables
from eventtensor.models import CONFIGS, ReferenceModel, random_weights
from eventtensor.models.decode import (
    DecodeSession,
    DecodeTiles,
    build_decode_program,
    greedy_generate,
    tensor_name,
    tiles_with,
)
from eventtensor.models.reference import apply_rope, causal_attention, rms_norm, rope_cos_sin
from eventtensor.ops import KINDS, TaskContext
from eventtensor.passes import run_pipeline
from eventtensor.schedule.cost import grid_costs

TINY = ["tiny-llama", "tiny-qwen3"]
# two row tiles at B = 3 (the last one clipped), split-K 2, two KV chunks of 16
TILES = DecodeTiles(rows=2, k_split=2, n_tile=32, ffn_tile=64, vocab_tile=64, kv_chunk=16)
MAX_BATCH, MAX_CONTEXT = 4, 32


@pytest.fixture(scope="module", params=TINY)
def model(request):
    """(config, random bf16-valued weights)."""
    cfg = CONFIGS[request.param]
    return cfg, random_weights(cfg, seed=7)


def _session(cfg, weights, max_batch=MAX_BATCH, **kw) -> DecodeSession:
    # NaN where nothing is cached: a read past a request's length would poison its logits
    return DecodeSession(cfg, weights, max_batch, MAX_CONTEXT, TILES, num_sms=4,
                         cache_fill=np.nan, **kw)


def _close(got: np.ndarray, want: np.ndarray) -> None:
    """Within 1e-4 of the logit scale."""
    scale = max(1.0, float(np.abs(want).max()))
    err = float(np.abs(got - want).max())
    assert np.isfinite(got).all() and err <= 1e-4 * scale, f"max error {err:.3g}"


# ------------------------------------------------------------------ whole program

@pytest.mark.parametrize("batch", [1, 3])
def test_logits_match_reference(model, batch):
    cfg, weights = model
    session, ref = _session(cfg, weights), ReferenceModel(cfg, weights)
    rng = np.random.default_rng(batch)
    ids = [f"r{i}" for i in range(batch)]
    for step, mode in enumerate(["static", "dynamic", "static", "unfused", "static"]):
        tokens = rng.integers(0, cfg.vocab_size, batch)
        got = session.step(ids, tokens, mode=mode)
        want = ref.step(tokens, ids)
        _close(got.logits, want)
        assert got.next_tokens.tolist() == np.argmax(got.logits, axis=-1).tolist()
        assert got.next_tokens.tolist() == np.argmax(want, axis=-1).tolist(), step
    assert all(session.positions[r] == 5 for r in ids)
    cached = ref.cache(ids[-1], 1)[0]                     # [S, K, D] after RoPE
    slot = session.slots[ids[-1]]
    np.testing.assert_allclose(session.k_cache[1, slot, :, :5].transpose(1, 0, 2), cached,
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("prompt_chunk", [1, None])
def test_greedy_16_steps_matches_reference(model, prompt_chunk):
    cfg, weights = model
    prompts = [[1], [2, 3, 4], [5, 6, 7, 8, 9]]        # positions cross the KV chunk at 16
    session = _session(cfg, weights)
    got = greedy_generate(session, prompts, 16, prompt_chunk=prompt_chunk)
    assert got == ReferenceModel(cfg, weights).greedy_generate(prompts, 16)
    # requests leave as they finish: the batch shrinks from 3 to 1; prompts fed in chunks
    # fill the step's 4 tokens
    sizes = {b for b, _ in session._tables}
    assert not session.slots and sizes == ({1, 2, 3} if prompt_chunk else {1, 2, 3, 4})


def test_prompt_chunks_match_reference(model):
    """Steps of T tokens over R < T requests (a prompt chunk is adjacent tokens of one
    request, causal among themselves), mixed with decode tokens of other requests, chunks
    crossing the KV chunk boundary at 16: every token's logits against the reference's."""
    cfg, weights = model
    session = _session(cfg, weights, max_batch=3, max_tokens=9)
    ref = ReferenceModel(cfg, weights)
    rng = np.random.default_rng(4)
    plan = [["a"] * 5 + ["b"] * 3, ["a", "b"] + ["c"] * 6, ["a"] * 7 + ["b"],
            ["a"] * 4 + ["c"] * 2 + ["b"], ["b", "a", "c"], ["c"] * 9]
    for step, ids in enumerate(plan):
        tokens = rng.integers(0, cfg.vocab_size, len(ids))
        got = session.step(ids, tokens, mode=("static", "dynamic", "unfused")[step % 3])
        want = ref.step(tokens, ids)
        _close(got.logits, want)
        assert got.next_tokens.tolist() == np.argmax(want, axis=-1).tolist(), step
    assert [session.positions[r] for r in "abc"] == [18, 7, 18]
    cached = ref.cache("a", 0)[1]                        # values [S, K, D]
    np.testing.assert_allclose(
        session.v_cache[0, session.slots["a"], :, :18].transpose(1, 0, 2), cached,
        rtol=1e-5, atol=1e-5)


def test_step_rejects_bad_token_layouts(model):
    cfg, weights = model
    session = _session(cfg, weights, max_tokens=6)
    with pytest.raises(ValueError, match="request 'a' are not adjacent"):
        session.step(["a", "b", "a"], [1, 2, 3])
    with pytest.raises(ValueError, match="1 to 6 tokens a step"):
        session.step(["a"] * 7, [1] * 7)
    for _ in range(5):
        session.step(["a"] * 6, [1] * 6)
    with pytest.raises(ValueError, match="request 'a' would pass its 32 cache positions"):
        session.step(["b", "a", "a", "a"], [1] * 4)
    assert session.positions == {"a": 30} and session.steps == 5   # nothing changed


def test_ragged_requests_join_and_leave(model):
    cfg, weights = model
    session, ref = _session(cfg, weights), ReferenceModel(cfg, weights)
    rng = np.random.default_rng(3)
    # (step, live requests): "a" and "b" start, "c" joins at step 2, "a" leaves after step 4,
    # "d" joins at step 5 in a's old slot (stale rows there), and "b" leaves after step 8
    plan = [["a", "b"]] * 2 + [["a", "b", "c"]] * 3 + [["b", "c", "d"]] * 4 + [["c", "d"]] * 2
    for step, ids in enumerate(plan):
        if step == 5:
            session.release("a")
            ref.release("a")
        if step == 9:
            session.release("b")
        tokens = rng.integers(0, cfg.vocab_size, len(ids))
        got = session.step(ids, tokens, mode="dynamic" if step % 4 == 3 else "static")
        want = ref.step(tokens, ids)
        _close(got.logits, want)
        assert got.next_tokens.tolist() == np.argmax(want, axis=-1).tolist()
        if step == 5:
            assert session.slots["d"] == 0 and session.positions["c"] == 4
    assert [session.positions[r] for r in ("c", "d")] == [9, 6]
    assert {b for b, _ in session._tables} == {2, 3}      # one program, any batch


def test_greedy_generate_with_arrivals_equals_each_alone(model):
    cfg, weights = model
    prompts = [[10, 11], [12], [13, 14, 15], [16]]
    budgets, starts = [5, 9, 4, 3], [0, 0, 2, 3]
    session = _session(cfg, weights, max_batch=2)        # request 2 waits for a free slot
    got = greedy_generate(session, prompts, budgets, start_steps=starts)
    ref = ReferenceModel(cfg, weights)
    assert got == [ref.greedy_generate([p], n)[0] for p, n in zip(prompts, budgets)]
    assert greedy_generate(session, [[1]], 0) == [[]]


def test_matches_transformers_greedy(model):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from hf_models import hf_logits, hf_model
    cfg, weights = model
    prompt, steps = [3, 1, 4, 1, 5], 8
    session = _session(cfg, weights)
    rows, sequence = [], list(prompt)
    for i in range(len(prompt) + steps - 1):
        rows.append(session.step(["r"], [sequence[i]]))
        if i >= len(prompt) - 1:
            sequence.append(int(rows[-1].next_tokens[0]))
    want = hf_logits(hf_model(cfg, weights), sequence[:-1])
    _close(np.concatenate([r.logits for r in rows]), want)
    assert sequence[len(prompt):] == [int(t) for t in np.argmax(want[len(prompt) - 1:], -1)]


def test_clipped_tiles_and_chunks():
    """Tiles that do not divide their dimensions (rows 3 of B = 5, columns 24 of 64, vocab 96
    of 256, KV chunks 12 of 30), split-K 4 (q's 8), one o_proj split: dynamic schedule."""
    cfg = CONFIGS["tiny-qwen3"]
    weights = random_weights(cfg, seed=5)
    tiles = DecodeTiles(rows=3, k_split=4, q_split=8, o_split=1, n_tile=24, ffn_tile=48,
                        down_split=4, vocab_tile=96, kv_chunk=12)
    session = DecodeSession(cfg, weights, 5, 30, tiles, mode="dynamic", num_sms=3,
                            cache_fill=np.nan)
    prompts = [[1], [2, 3, 4], [5, 6, 7, 8, 9, 10, 11, 12, 13, 14], [3], [4, 4]]
    got = greedy_generate(session, prompts, 6)       # request 2 reaches KV chunk 1
    assert got == ReferenceModel(cfg, weights).greedy_generate(prompts, 6)


def test_session_contract():
    cfg = CONFIGS["tiny-llama"]
    session = _session(cfg, random_weights(cfg, seed=1), max_batch=2)
    with pytest.raises(ValueError, match="1 to 2"):
        session.step(["a", "b", "c"], [1, 2, 3])
    with pytest.raises(ValueError, match=rf"token 1 of the step has id {cfg.vocab_size}, "
                                         rf"outside the vocabulary \[0, {cfg.vocab_size}\)"):
        session.step(["a", "b"], [3, cfg.vocab_size])
    assert not session.slots
    small = DecodeSession(cfg, random_weights(cfg, seed=1), 1, 2,
                          DecodeTiles(rows=1, kv_chunk=1, vocab_tile=128))
    small.step(["a"], [1])
    small.step(["a"], [2])
    with pytest.raises(ValueError, match="cache positions"):
        small.step(["a"], [3])
    with pytest.raises(ValueError, match="free slots"):
        small.step(["b"], [3])
    with pytest.raises(ValueError, match="tiles.k_split"):
        build_decode_program(cfg, 2, 32, DecodeTiles(k_split=3))
    with pytest.raises(ValueError, match="tiles.q_split = 3 must be positive and divide"):
        build_decode_program(cfg, 2, 32, DecodeTiles(q_split=3))


def test_tiles_with_parses_fields_and_names_bad_ones():
    base = DecodeTiles(rows=4, mlp_split=2)
    got = tiles_with(base, "norm_rows=8, residual_tile=256,mlp_split=none")
    assert got == DecodeTiles(rows=4, norm_rows=8, residual_tile=256)
    assert tiles_with(base, "") == base
    with pytest.raises(ValueError, match="norm_row"):
        tiles_with(base, "norm_row=8")
    with pytest.raises(ValueError, match="tiles.rows"):
        tiles_with(base, "rows=0")
    with pytest.raises(ValueError, match="tiles.rows"):
        tiles_with(base, "rows=none")


# ------------------------------------------------------------------ event structure

def _dependencies(cfg, tiles, batch: int):
    """For the decode program of `cfg` with `tiles` bound to B = `batch`: a function from a
    task's name to the names of the tasks that notify an element it waits on (affine
    waits)."""
    program = run_pipeline(build_decode_program(cfg, MAX_BATCH, MAX_CONTEXT, tiles))
    tables = build_tables(bind(program, {"B": batch}))
    b = tables.bound
    names = {b.task_name(t): t for t in range(b.num_tasks)}

    def producers(task: str) -> set[str]:
        t = names[task]
        waited = set(tables.wait_elem[tables.wait_ptr[t]:tables.wait_ptr[t + 1]].tolist())
        return {b.task_name(s) for s in range(b.num_tasks) if waited & set(
            tables.notify_elem[tables.notify_ptr[s]:tables.notify_ptr[s + 1]].tolist())}
    producers.names, producers.program = names, program
    return producers


@pytest.mark.parametrize("name", TINY)
def test_fine_grained_events(name):
    cfg = CONFIGS[name]
    deps = _dependencies(cfg, TILES, 3)
    program = deps.program
    # attention tile t = (b*NC + c)*K + h with b=2, c=1, h=1 (K = NC = 2): its head's
    # q/k/v tiles of row blocks 0 .. b's (1; the earlier ones may hold earlier tokens of its
    # request) and the plan, nothing else
    assert deps("l0_attn(11)") == {"l0_qk_rope(0, 1)", "l0_qk_rope(1, 1)", "plan(0)"}
    assert deps("l0_attn(1)") == {"l0_qk_rope(0, 1)", "plan(0)"}
    assert deps("l0_kv_append(2, 1)") == {"l0_qk_rope(1, 1)"}
    assert deps("l0_qk_rope(1, 0)") == {f"l0_{p}_proj(1, 0, {s})" for p in "qkv" for s in (0, 1)}
    assert deps("l0_attn_merge(2, 1)") == {"l0_attn(9)", "l0_attn(11)", "plan(0)"}
    # o_proj split s reads the heads of KV group s: only their merges
    assert deps("l0_o_proj(1, 0, 1)") == {"l0_attn_merge(2, 1)"}
    assert deps("l1_down_proj(0, 1, 1)") == {"l1_silu_mul(0, 1)"}
    assert deps("l1_attn_norm(1)") == {"l0_mlp_residual(1, 0)"}
    assert deps("argmax(1)") == {f"argmax_tile(1, {n})" for n in range(4)}
    done = program.event("l0_attn_done")
    assert done.runtime_count is not None and str(done.runtime_count) == "attn_plan[k, 2]"
    assert [e.event for e in program.edges_of(grid="l1_attn", kind="trigger")] == ["planned"]
    head = next(r.tensor for r in program.grid("lm_head").reads if r.tensor != "h_final")
    assert head == tensor_name("model.embed_tokens.weight" if cfg.tie_word_embeddings
                               else "lm_head.weight")
    for g, cost in grid_costs(program, {"B": 3}).items():
        assert cost.bytes > 0 and cost.flops >= 0, g
    assert grid_costs(program, {"B": 3})["l0_q_proj"].flops == 2 * 2 * 32 * cfg.group_size \
        * cfg.head_dim


def test_kv_appends_follow_their_layers_attention_in_the_static_order():
    """The KV-cache appends, which nothing waits on, come right after their layer's
    attention tiles (their sibling: both read the RoPE) in the critical-path order, filling
    the SMs that wait for the attention, not after the LM head at the end of every SM's
    queue."""
    from eventtensor.schedule import StaticTemplate, prepare
    cfg = CONFIGS["tiny-llama"]
    program = prepare(build_decode_program(cfg, MAX_BATCH, MAX_CONTEXT, TILES), "static")
    names = [g.name for g in program.grids]
    order = [names[g] for g in StaticTemplate(program, 4).order]
    for layer in range(cfg.num_layers):
        at = order.index(f"l{layer}_kv_append")
        assert order[at - 1] == f"l{layer}_attn", order
    last = [names[g] for g in StaticTemplate(program, 4, "critical_path_sinks_last").order]
    assert all(last.index(f"l{i}_kv_append") > last.index("lm_head")
               for i in range(cfg.num_layers))


NORM_TILES = DecodeTiles(rows=2, k_split=2, mlp_split=1, n_tile=32, ffn_tile=64,
                         vocab_tile=64, kv_chunk=16, norm_rows=1, residual_tile=32)


def test_norm_and_residual_tiles():
    """Norms of one row, residual adds of one row by half of E, gate/up unsplit: each norm
    waits on both column tiles of its row's residual, a projection row tile on its rows'
    norms, a residual tile on the partials of its columns only."""
    cfg = CONFIGS["tiny-llama"]
    deps = _dependencies(cfg, NORM_TILES, 3)
    assert deps("l1_attn_norm(2)") == {"l0_mlp_residual(2, 0)", "l0_mlp_residual(2, 1)"}
    assert deps("l0_q_proj(1, 0, 1)") == {"l0_attn_norm(2)"}
    assert deps("l0_gate_proj(0, 1, 0)") == {"l0_mlp_norm(0)", "l0_mlp_norm(1)"}
    assert deps("l0_mlp_residual(1, 1)") == {"l0_attn_residual(1, 1)", "l0_down_proj(0, 1, 0)",
                                             "l0_down_proj(0, 1, 1)"}
    assert "l0_gate_proj(0, 1, 1)" not in deps.names


# norms of one row, residual adds of two rows (the last tile clipped at B = 3)
SPLIT_ROWS_TILES = replace(NORM_TILES, residual_rows=2)


def test_residual_rows_apart_from_norm_rows():
    """With residual_rows, the residual adds take tiles of their own rows: a norm waits on
    the residual tiles holding its row, a residual tile on the partials and the residual
    stream of its rows (the down projection's row tile 1 of 2 rows is rows 2 and 3), and
    the last tile covers the one row left."""
    cfg = CONFIGS["tiny-llama"]
    deps = _dependencies(cfg, SPLIT_ROWS_TILES, 3)
    assert deps("l1_attn_norm(2)") == {"l0_mlp_residual(1, 0)", "l0_mlp_residual(1, 1)"}
    assert deps("l1_attn_norm(1)") == {"l0_mlp_residual(0, 0)", "l0_mlp_residual(0, 1)"}
    assert deps("l0_mlp_residual(1, 1)") == {"l0_attn_residual(1, 1)", "l0_down_proj(1, 1, 0)",
                                             "l0_down_proj(1, 1, 1)"}
    assert "l0_mlp_residual(2, 0)" not in deps.names


@pytest.mark.parametrize("mode", ["static", "dynamic"])
def test_residual_rows_apart_from_norm_rows_match_reference(mode):
    cfg = CONFIGS["tiny-llama"]
    _steps_close(cfg, random_weights(cfg, seed=10), SPLIT_ROWS_TILES, mode, ["a", "b", "c"], 7)


def _steps_close(cfg, weights, tiles, mode, requests, seed):
    """Three steps of one token for each of `requests` on the interpreter (4 SMs, NaN in
    the unused cache rows): every step's logits close to the reference's."""
    session = DecodeSession(cfg, weights, MAX_BATCH, MAX_CONTEXT, tiles, num_sms=4,
                            cache_fill=np.nan, mode=mode)
    ref = ReferenceModel(cfg, weights)
    rng = np.random.default_rng(seed)
    for _ in range(3):
        tokens = rng.integers(0, cfg.vocab_size, len(requests))
        _close(session.step(requests, tokens).logits, ref.step(tokens, requests))


@pytest.mark.parametrize("mode", ["static", "dynamic"])
def test_norm_and_residual_tiles_match_reference(model, mode):
    _steps_close(*model, NORM_TILES, mode, ["a", "b", "c"], 3)


# RoPE tiles of 2 rows under row tiles of 3: at B = 4 RoPE tile 1 (rows 2, 3) straddles the
# two row tiles of the projections
ROPE_TILES = DecodeTiles(rows=3, k_split=2, n_tile=32, ffn_tile=64, vocab_tile=64, kv_chunk=16,
                         rope_rows=2)


def test_rope_tiles():
    """A RoPE tile waits on the q, k, v partials of its rows' projection tiles (both, where
    it straddles them); the attention tiles of token b on the RoPE tiles 0 .. b // 2."""
    cfg = CONFIGS["tiny-llama"]
    deps = _dependencies(cfg, ROPE_TILES, 4)
    assert deps("l0_qk_rope(1, 1)") == {f"l0_{r}_proj({m}, 1, {s})" for r in "qkv"
                                        for m in (0, 1) for s in (0, 1)}
    assert deps("l0_qk_rope(0, 1)") == {f"l0_{r}_proj(0, 1, {s})" for r in "qkv"
                                        for s in (0, 1)}
    K, chunks = cfg.num_kv_heads, MAX_CONTEXT // ROPE_TILES.kv_chunk
    for token, tiles in ((1, [0]), (2, [0, 1]), (3, [0, 1])):
        task = f"l0_attn({(token * chunks + 1) * K + 1})"  # chunk 1, KV head 1
        assert {d for d in deps(task) if "rope" in d} == {f"l0_qk_rope({m}, 1)" for m in tiles}


@pytest.mark.parametrize("mode", ["static", "dynamic"])
def test_rope_tiles_match_reference(model, mode):
    _steps_close(*model, ROPE_TILES, mode, ["a", "b", "c", "d"], 5)


# q, k, v tiles across head boundaries (24 columns: q has 64, k and v 32, the last clipped),
# unsplit q/k/v, down tiles of 40 of 64 columns, SiLU tiles of 48 of 128 (across gate and up
# tiles of 32), argmax partials over 100 of 256 columns
# (3 LM-head tiles of 32 and part of a fourth each, the last clipped)
FREE_TILES = DecodeTiles(rows=2, k_split=1, mlp_split=2, proj_tile=24, n_tile=32,
                         down_tile=40, down_split=2, ffn_tile=32, silu_tile=48, vocab_tile=32,
                         argmax_tile=100, kv_chunk=16)


def test_projection_tiles_across_heads():
    """A head's rope waits on every q, k and v tile overlapping its columns; an argmax
    partial on the LM-head tiles overlapping its columns."""
    cfg = CONFIGS["tiny-llama"]  # q: 2 KV heads x 32 columns, k and v: 2 x 16
    deps = _dependencies(cfg, FREE_TILES, 2)
    assert deps("l0_qk_rope(0, 1)") == {
        "l0_q_proj(0, 1, 0)", "l0_q_proj(0, 2, 0)", "l0_k_proj(0, 0, 0)", "l0_k_proj(0, 1, 0)",
        "l0_v_proj(0, 0, 0)", "l0_v_proj(0, 1, 0)"}
    assert deps("argmax_tile(0, 2)") == {
        "lm_head(0, 6)", "lm_head(0, 7)"}
    assert "argmax_tile(0, 3)" not in deps.names and "l0_down_proj(0, 1, 1)" in deps.names
    assert deps("l0_silu_mul(0, 1)") == {
        f"l0_{w}_proj(0, {n}, {s})" for w in ("gate", "up") for n in (1, 2) for s in (0, 1)}


@pytest.mark.parametrize("mode", ["static", "dynamic"])
def test_projection_tiles_across_heads_match_reference(mode):
    cfg = CONFIGS["tiny-qwen3"]
    _steps_close(cfg, random_weights(cfg, seed=7), FREE_TILES, mode, ["a", "b"], 4)


FUSED_TILES = DecodeTiles(rows=2, k_split=2, n_tile=32, ffn_tile=64, vocab_tile=64,
                          kv_chunk=16, norm_rows=1, fuse_norm=1)


def test_fused_norms_leave_one_norm_grid():
    """With fuse_norm every residual add writes the norm after it (the next layer's input
    norm, the final norm after the last layer): only layer 0's input norm keeps its grid,
    and the projections after a norm wait on the fused tasks of their rows."""
    cfg = CONFIGS["tiny-llama"]
    deps = _dependencies(cfg, FUSED_TILES, 3)
    program = deps.program
    assert [g.name for g in program.grids if g.kind == "rms_norm"] == ["l0_attn_norm"]
    assert sum(g.kind == "residual_rms_norm" for g in program.grids) == 2 * cfg.num_layers
    assert deps("l1_q_proj(1, 0, 0)") == {"l0_mlp_residual(2)"}
    assert deps("l0_gate_proj(0, 0, 1)") == {
        "l0_attn_residual(0)", "l0_attn_residual(1)"}
    assert deps("lm_head(0, 0)") == {
        "l1_mlp_residual(0)", "l1_mlp_residual(1)"}


@pytest.mark.parametrize("mode", ["static", "dynamic"])
def test_fused_norms_match_reference(mode):
    cfg = CONFIGS["tiny-qwen3"]
    _steps_close(cfg, random_weights(cfg, seed=8), FUSED_TILES, mode, ["a", "b", "c"], 5)


# residual tiles of 32 columns (tiny E = 64: two sums of squares per row), split-K 2
FOLDED_TILES = DecodeTiles(rows=2, k_split=2, n_tile=32, ffn_tile=64, vocab_tile=64,
                           kv_chunk=16, norm_rows=1, residual_tile=32, fold_norm=1)


def test_folded_norms_leave_the_first_and_final_norm_grids():
    """With fold_norm the residual adds write the sums of squares of their tiles' rows and
    the projections after them normalise their K-slice themselves: only layer 0's input norm
    and the final norm keep their grids, and a projection waits on every residual tile of
    its rows (their sums of squares), nothing else."""
    cfg = CONFIGS["tiny-llama"]
    deps = _dependencies(cfg, FOLDED_TILES, 3)
    program = deps.program
    assert [g.name for g in program.grids if g.kind == "rms_norm"] == ["l0_attn_norm",
                                                                       "final_norm"]
    kinds = [g.kind for g in program.grids]
    assert kinds.count("norm_linear_partial") == 5 * cfg.num_layers - 3  # not l0's q, k, v
    assert kinds.count("residual_add_sumsq") == 2 * cfg.num_layers - 1   # not the last
    assert deps("l1_q_proj(1, 0, 0)") == {
        "l0_mlp_residual(2, 0)", "l0_mlp_residual(2, 1)"}
    assert deps("l0_gate_proj(0, 0, 1)") == {
        f"l0_attn_residual({m}, {n})" for m in (0, 1) for n in (0, 1)}
    with pytest.raises(ValueError, match="fuse_norm and tiles.fold_norm"):
        build_decode_program(cfg, MAX_BATCH, MAX_CONTEXT, replace(FOLDED_TILES, fuse_norm=1))


@pytest.mark.parametrize("mode", ["static", "dynamic"])
def test_folded_norms_match_reference(mode):
    cfg = CONFIGS["tiny-qwen3"]
    _steps_close(cfg, random_weights(cfg, seed=9), FOLDED_TILES, mode, ["a", "b", "c"], 6)


# the SiLU-and-multiply folded into the down projection, with the norms folded too
FOLDED_SILU_TILES = replace(TILES, fold_silu=1)


def test_folded_silu_leaves_no_silu_grid():
    """With fold_silu the down projection's chunks read the gate and up partials of their
    K-slice and apply the SiLU-and-multiply themselves: no silu_mul grid, and a down chunk
    waits on the gate and up tiles of its K-slice (both split-K partials), nothing else."""
    cfg = CONFIGS["tiny-llama"]
    deps = _dependencies(cfg, FOLDED_SILU_TILES, 3)
    kinds = [g.kind for g in deps.program.grids]
    assert "silu_mul" not in kinds and kinds.count("silu_linear_partial") == cfg.num_layers
    assert deps("l0_down_proj(1, 0, 1)") == {f"l0_{proj}_proj(1, 1, {s})"
                                             for proj in ("gate", "up") for s in (0, 1)}


@pytest.mark.parametrize("name, tiles", [("tiny-llama", FOLDED_SILU_TILES),
                                         ("tiny-qwen3", replace(FOLDED_TILES, fold_silu=1))])
@pytest.mark.parametrize("mode", ["static", "dynamic"])
def test_folded_silu_matches_reference(name, tiles, mode):
    cfg = CONFIGS[name]
    _steps_close(cfg, random_weights(cfg, seed=10), tiles, mode, ["a", "b", "c"], 6)


# one KV chunk of the whole context: no merge grid
ONE_CHUNK_TILES = replace(TILES, kv_chunk=MAX_CONTEXT)


def test_one_kv_chunk_leaves_no_merge():
    """With one KV chunk (kv_chunk >= max_context) each attention tile writes the attention
    output of its token and KV head itself: no merge grid, and an o_proj tile waits on the
    attention tiles of its rows and heads."""
    cfg = CONFIGS["tiny-llama"]
    deps = _dependencies(cfg, ONE_CHUNK_TILES, 3)
    program = deps.program
    assert not [g.name for g in program.grids if g.kind == "attn_merge"]
    # o_proj (m, n, s): row tile m = 1 (token 2), split s = KV head 1's columns
    assert deps("l0_o_proj(1, 0, 1)") == {"l0_attn(5)"}
    assert deps("l0_o_proj(0, 1, 0)") == {"l0_attn(0)", "l0_attn(2)"}


@pytest.mark.parametrize("mode, tiles", [
    ("static", ONE_CHUNK_TILES), ("dynamic", ONE_CHUNK_TILES), ("unfused", ONE_CHUNK_TILES),
    # o_proj splits of half a head, of all heads; a chunk longer than the context
    ("static", replace(ONE_CHUNK_TILES, o_split=4)),
    ("static", replace(ONE_CHUNK_TILES, o_split=1)),
    ("static", replace(ONE_CHUNK_TILES, kv_chunk=2 * MAX_CONTEXT, rows=1))])
def test_one_kv_chunk_matches_reference(mode, tiles):
    cfg = CONFIGS["tiny-qwen3"]
    _steps_close(cfg, random_weights(cfg, seed=10), tiles, mode, ["a", "b", "c"], 7)


# ------------------------------------------------------------------ task kinds

def _run(kind: str, inputs: dict, outs: dict, params: dict, coords=None) -> dict:
    """One task of `kind` on the given tiles; outputs float32 (int32 for names in
    params["ints"])."""
    ints = params.pop("ints", ())
    ctx = TaskContext("g", coords or {"i": 0}, {}, params,
                      {k: np.asarray(v) for k, v in inputs.items()}, dict(outs),
                      {k: np.dtype(np.int32 if k in ints else np.float32) for k in outs})
    got = KINDS[kind].reference(ctx)
    shapes = {k: np.shape(v) for k, v in inputs.items()}
    assert KINDS[kind].flops(shapes, dict(outs), params) >= 0
    assert {k: v.shape for k, v in got.items()} == outs
    return got


RNG = np.random.default_rng(0)


def _r(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("n", [1, 3, 7])
def test_row_kinds(n):
    x, w, parts = _r(n, 7), _r(7), _r(3, n, 7)
    got = _run("rms_norm", {"x": x, "w": w}, {"y": (n, 7)}, {"x": "x", "w": "w", "eps": 1e-5})
    np.testing.assert_allclose(got["y"], rms_norm(x.astype(np.float64), w, 1e-5), rtol=1e-6)
    got = _run("residual_add", {"x": x, "p": parts}, {"y": (n, 7)}, {"x": "x", "parts": "p"})
    np.testing.assert_allclose(got["y"], x + parts.sum(0), rtol=1e-6, atol=1e-6)
    g, u = _r(1, n, 3), _r(1, n, 3)
    got = _run("silu_mul", {"g": g, "u": u}, {"y": (n, 3)}, {"gate": "g", "up": "u"})
    np.testing.assert_allclose(got["y"], (g / (1 + np.exp(-g)) * u)[0], rtol=1e-6)
    table = _r(n, 7)
    got = _run("embedding", {"t": table}, {"y": (n, 7)}, {})
    np.testing.assert_array_equal(got["y"], table)


@pytest.mark.parametrize("n, k, c", [(1, 1, 1), (3, 7, 3), (7, 3, 7)])
def test_linear_partial(n, k, c):
    x, w = _r(n, k), _r(c, k)
    for shape in ((n, c), (1, n, c)):
        got = _run("linear_partial", {"x": x, "w": w}, {"y": shape}, {"x": "x", "w": "w"})
        np.testing.assert_allclose(got["y"].reshape(n, c), x.astype(np.float64) @ w.T,
                                   rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("n, g, s", [(1, 1, 1), (3, 3, 3), (7, 7, 1)])
@pytest.mark.parametrize("qk_norm", [False, True])
def test_qk_norm_rope(n, g, s, qk_norm):
    D = 6
    q, k, v = _r(s, n, g * D), _r(s, n, D), _r(s, n, D)
    pos = RNG.integers(0, 50, n).astype(np.int32)
    inv = (1.0 / 100.0 ** (np.arange(0, D, 2) / D)).astype(np.float32)
    qn, kn = _r(D), _r(D)
    params = {"q": "q", "k": "k", "v": "v", "pos": "p", "inv_freq": "f", "q_out": "qo",
              "k_out": "ko", "v_out": "vo", "head_dim": D, "eps": 1e-6}
    inputs = {"q": q, "k": k, "v": v, "p": pos, "f": inv}
    if qk_norm:
        params.update(q_norm="qn", k_norm="kn")
        inputs.update(qn=qn, kn=kn)
    got = _run("qk_norm_rope", inputs, {"qo": (n, g * D), "ko": (n, D), "vo": (n, D)},
               params)
    wq, wk = q.astype(np.float64).sum(0).reshape(n, g, D), k.astype(np.float64).sum(0)
    wk = wk.reshape(n, 1, D)
    if qk_norm:
        wq, wk = rms_norm(wq, qn, 1e-6), rms_norm(wk, kn, 1e-6)
    cos, sin = rope_cos_sin(inv.astype(np.float64), pos)
    np.testing.assert_allclose(got["qo"], apply_rope(wq, cos, sin).reshape(n, -1), rtol=1e-5,
                               atol=1e-5)
    np.testing.assert_allclose(got["ko"], apply_rope(wk, cos, sin).reshape(n, -1), rtol=1e-5,
                               atol=1e-5)
    np.testing.assert_allclose(got["vo"], v.sum(0), rtol=1e-6, atol=1e-6)


def test_kv_append():
    k, v = _r(1, 7), _r(1, 7)
    got = _run("kv_append", {"k": k, "v": v}, {"kc": (1, 1, 1, 1, 7), "vc": (1, 1, 1, 1, 7)},
               {"k": "k", "v": "v", "k_out": "kc", "v_out": "vc"})
    np.testing.assert_array_equal(got["kc"].reshape(1, 7), k)
    np.testing.assert_array_equal(got["vc"].reshape(1, 7), v)


@pytest.mark.parametrize("g, pos", [(1, 0), (3, 6), (7, 13), (3, 20)])
def test_decode_attention_and_merge(g, pos):
    """Split-KV chunks of 7 positions, merged, equal attention over positions 0..pos; the
    cache at pos and beyond holds garbage that must not count."""
    T, chunks, heads, D = 7, 3, 3, 5
    cache_k, cache_v = _r(chunks * T, D), _r(chunks * T, D)
    cache_k[pos:], cache_v[pos:] = np.nan, np.nan
    k_new, v_new, q = _r(1, D), _r(1, D), _r(1, g * D)
    outs, lses = [], []
    h, b = 1, 0
    for c in range(chunks):
        t = (b * chunks + c) * heads + h
        got = _run("decode_attention",
                   {"q": q, "kc": cache_k[T * c:T * c + T].reshape(1, 1, 1, T, D),
                    "vc": cache_v[T * c:T * c + T].reshape(1, 1, 1, T, D), "kn": k_new,
                    "vn": v_new, "p": np.array([pos], np.int32)},
                   {"o": (1, g, 1, D), "l": (1, g, 1)},
                   {"q": "q", "k_cache": "kc", "v_cache": "vc", "k_new": "kn", "v_new": "vn",
                    "pos": "p", "out": "o", "lse": "l", "chunk": T, "chunks": chunks,
                    "kv_heads": heads}, coords={"t": t})
        outs.append(got["o"])
        lses.append(got["l"])
        if T * c > pos:      # past the request's length: contributes nothing
            assert np.all(got["l"] == -np.inf) and np.all(got["o"] == 0)
    keys = np.concatenate([cache_k[:pos], k_new]).astype(np.float64)
    vals = np.concatenate([cache_v[:pos], v_new]).astype(np.float64)
    want = causal_attention(q.reshape(1, g, D).astype(np.float64), keys[:, None, :],
                            vals[:, None, :]).reshape(1, g * D)
    merged = _run("attn_merge", {"o": np.concatenate(outs, 2), "l": np.concatenate(lses, 2)},
                  {"y": (1, g * D)}, {"parts": "o", "lse": "l"})
    np.testing.assert_allclose(merged["y"], want, rtol=1e-5, atol=1e-6)
    live = pos // T + 1        # what the program reads: only the live chunks
    merged = _run("attn_merge", {"o": np.concatenate(outs[:live], 2),
                                 "l": np.concatenate(lses[:live], 2)},
                  {"y": (1, g * D)}, {"parts": "o", "lse": "l"})
    np.testing.assert_allclose(merged["y"], want, rtol=1e-5, atol=1e-6)
    scores = q.reshape(g, D).astype(np.float64) @ keys[:min(pos + 1, T)].T / np.sqrt(D)
    np.testing.assert_allclose(lses[0].reshape(g), np.log(np.exp(scores).sum(-1)), rtol=1e-6)


@pytest.mark.parametrize("n, tiles, width", [(1, 1, 1), (3, 3, 7), (7, 7, 3)])
def test_greedy_argmax_ties_go_to_lowest_index(n, tiles, width):
    logits = RNG.integers(0, 3, (n, tiles * width)).astype(np.float32)   # many ties
    maxes, args = np.zeros((n, tiles), np.float32), np.zeros((n, tiles), np.int32)
    for j in range(tiles):
        got = _run("argmax_partial", {"x": logits[:, j * width:(j + 1) * width]},
                   {"m": (n, 1), "a": (n, 1)},
                   {"x": "x", "max": "m", "arg": "a", "tile": width, "axis": "n",
                    "ints": ("a",)}, coords={"m": 0, "n": j})
        maxes[:, j], args[:, j] = got["m"][:, 0], got["a"][:, 0]
    got = _run("argmax_reduce", {"x": maxes, "a": args}, {"y": (n,)},
               {"x": "x", "arg": "a", "ints": ("y",)})
    np.testing.assert_array_equal(got["y"], np.argmax(logits, axis=-1))


def test_decode_plan():
    pos = np.array([0, 15, 16, 31, 3], np.int32)
    params = {"pos": "p", "chunk": 16, "chunks": 2, "kv_heads": 3, "context": 32,
              "ints": ("y",)}
    got = _run("decode_plan", {"p": pos}, {"y": (5, 3)}, dict(params))["y"]
    np.testing.assert_array_equal(got[:, 2], [1, 1, 2, 2, 1])
    np.testing.assert_array_equal(got[:, 0], np.arange(5) * 6)
    np.testing.assert_array_equal(got[:, 1] - got[:, 0], got[:, 2] * 3)
    with pytest.raises(ValueError, match="outside the KV cache"):
        _run("decode_plan", {"p": np.array([32], np.int32)}, {"y": (1, 3)}, dict(params))
