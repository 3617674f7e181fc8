"""The decode program's megakernel: generated code shared by the layers (one case per distinct
grid, tensors from a constant table by grid), tensor pointers beyond the launch slots in
their own table, and the kernels compiling with NVRTC for sm_90a (no GPU needed)."""
import re

import pytest

from eventtensor import ProgramBuilder
from eventtensor.backends.cuda.codegen import (
    MAX_SLOTS,
    SYM_BASE,
    generate,
    kernel_name,
    uses_tensor_table,
)
from eventtensor.backends.cuda.compiler import compile_source
from eventtensor.models import get_config
from eventtensor.models.decode import build_decode_program, tiles_with
from eventtensor.models.gpu_decode import gpu_tiles
from eventtensor.schedule import prepare

nvrtc = pytest.importorskip("cuda.bindings.nvrtc", reason="cuda-bindings not installed")


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EVENTTENSOR_CACHE", str(tmp_path / "cache"))


def decode_program(name, mode="static", layers=None, max_batch=64, tiles=""):
    cfg = get_config(name)
    if layers is not None:
        cfg = cfg.replace(num_layers=layers)
    p = build_decode_program(cfg, max_batch, 256, tiles_with(gpu_tiles(cfg, max_batch), tiles),
                             weight_dtype="bfloat16", cache_dtype="bfloat16")
    return cfg, prepare(p, mode)


def test_layers_share_their_cases_and_take_their_tensors_by_grid():
    """Every grid of a layer shares its dispatch case with the same grid of the other layers:
    the cases do not grow with the layers, and the constant table row of each grid that shares
    a case lists exactly the tensors that grid touches."""
    _, p2 = decode_program("tiny-qwen3", layers=2)
    _, p4 = decode_program("tiny-qwen3", layers=4)
    head = "__device__ __forceinline__ void et_run_task("
    cases = [src.split(head)[1].split("\n}\n")[0].count("{  // task")
             for src in (generate(p2, "static"), generate(p4, "static"))]
    assert cases[0] == cases[1]
    src = generate(p4, "static")
    table = src.split("__constant__ short et_run_task_tensors[")[1].split("};")[0]
    rows = re.findall(r"\{([0-9, ]*)\},  // (\w+)", table)
    assert [name for _, name in rows] == [g.name for g in p4.grids]
    for ids, name in rows:
        grid = p4.grid(name)
        if re.search(rf"^    case {p4.grids.index(grid)}: {{", src, re.M):  # its own case
            assert not ids.strip()
            continue
        touched = {r.tensor for r in grid.reads + grid.writes} | \
            {t for r in grid.reads + grid.writes for t in r.map.tensors_read}
        got = [p4.tensors[int(i)].name for i in ids.split(",")]
        assert sorted(got) == sorted(touched), name
    assert "ET_TENSOR(et_run_task_tensors[task.a.x][" in src


def test_tensor_pointers_beyond_the_slots_travel_in_a_table():
    """A program with more tensors than the launch slots after its symbols hold gets
    ET_NUM_TENSORS and reads its pointers from the shared copy of the tensor table; a small
    one keeps them in the slots."""
    pb = ProgramBuilder("many")
    n = MAX_SLOTS - SYM_BASE  # one tensor too many once the symbol takes a slot
    B = pb.symbol("B", 1, 4)
    for i in range(n):
        pb.input(f"x{i}", (B, 4))
    pb.output("y", (B, 1))
    pb.grid("sum", "row_sum", "i", (1,), reads={f"x{n - 1}": ":, :"}, writes={"y": ":, :"})
    p = prepare(pb.build(), "static")
    assert uses_tensor_table(p)
    src = generate(p, "static")
    assert f"#define ET_NUM_TENSORS {n + 1}" in src
    assert "#define ET_TENSOR(i) (et_tensor_table()[i])" in src
    compile_source(src, kernel_name(p, "static"))
    _, small = decode_program("tiny-llama", layers=1)
    assert not uses_tensor_table(small)
    assert "ET_NUM_TENSORS" not in generate(small, "static")


@pytest.mark.parametrize("name, mode", [("tiny-llama", "static"), ("tiny-qwen3", "static"),
                                        ("tiny-qwen3", "dynamic"), ("tiny-llama", "unfused")])
def test_decode_kernels_compile_for_sm90a(name, mode):
    """The decode step's kernel (every decode task kind, bf16 weights and caches) compiles;
    Qwen3's q/k norms are tiles, Llama's absent ones empty tiles."""
    cfg, p = decode_program(name, mode)
    src = generate(p, mode)
    assert ("// no q_norm" in src) == (not cfg.qk_norm)
    assert "et_body_decode_attention(" in src and "et_body_linear_partial(" in src
    c = compile_source(src, kernel_name(p, mode))
    assert c.cubin[:4] == b"\x7fELF"


def test_decode_kernel_with_fused_norms_compiles():
    """With fuse_norm the residual adds write the norms after them (residual_rms_norm: out
    and h tiles by param, one case for the attention's and one for the MLP's, whose
    partials differ in their split); the kernel compiles."""
    _, p = decode_program("tiny-qwen3", layers=2, tiles="fuse_norm=1")
    src = generate(p, "static")
    assert src.count("et_body_residual_rms_norm(") == 2 and "et_body_rms_norm(" in src
    assert compile_source(src, kernel_name(p, "static")).cubin[:4] == b"\x7fELF"


def test_decode_kernel_with_folded_silu_compiles():
    """With fold_silu the down projections apply the SiLU-and-multiply to the gate and up
    partials (silu_linear_partial); no silu_mul case is left; the kernel compiles."""
    _, p = decode_program("tiny-llama", layers=2, tiles="fold_silu=1")
    src = generate(p, "static")
    assert "et_body_silu_linear_partial(" in src and "et_body_silu_mul(" not in src
    assert compile_source(src, kernel_name(p, "static")).cubin[:4] == b"\x7fELF"


def test_decode_kernel_with_folded_norms_compiles():
    """With fold_norm the residual adds write the sums of squares of their rows and the
    projections after them apply the norm (norm_linear_partial); only layer 0's input norm
    and the final norm keep rms_norm cases; the plain projections take the same folding
    passes (ET_LINEAR_FOLDS), which a kernel without folded norms leaves out; the kernel
    compiles."""
    _, p = decode_program("tiny-qwen3", layers=2, tiles="fold_norm=1")
    src = generate(p, "static")
    assert "et_body_norm_linear_partial(" in src and "et_body_residual_add_sumsq(" in src
    assert src.count("kind rms_norm;") == 1  # one case: l0_attn_norm, final_norm
    assert "#define ET_LINEAR_FOLDS 1\n" in src
    assert "ET_LINEAR_FOLDS" not in generate(decode_program("tiny-qwen3", layers=2)[1], "static")
    assert compile_source(src, kernel_name(p, "static")).cubin[:4] == b"\x7fELF"


def test_decode_sessions_default_knobs_compile():
    """The decode session's knobs (decode_knobs: no next-task L2 prefetch, evict-first
    weights, tensor cores from 8 rows with their weights through the ring of blocks and
    their MMAs in the spread order, CUDA-core passes of up to 8 rows, the attention's KV
    stream, every task's notifies published at once, one-row linears' weights through 2
    rounds in shared memory, both issued before the task's waits; the stage ring
    without evict-first weights, the rings and the early copies, caller knobs on top) make
    a kernel that compiles and differs from the device library's defaults."""
    from eventtensor.models.gpu_decode import DECODE_KNOBS, decode_knobs
    assert decode_knobs(None) == DECODE_KNOBS == {"ET_PREFETCH_NEXT": 0,
                                                  "ET_WEIGHTS_EVICT_FIRST": 1,
                                                  "ET_LINEAR_MMA": 8,
                                                  "ET_LINEAR_CORE_ROWS": 8,
                                                  "ET_ATTN_STREAM": 16,
                                                  "ET_LINEAR_MMA_RING": 4,
                                                  "ET_LINEAR_MMA_SPREAD": 1,
                                                  "ET_DEFER_MAX": 1,
                                                  "ET_LINEAR_ASYNC": 2,
                                                  "ET_LINEAR_EARLY": 1}
    assert decode_knobs({"ET_STAGE_BYTES": 4096}) == {"ET_PREFETCH_NEXT": 0,
                                                      "ET_LINEAR_MMA": 8,
                                                      "ET_LINEAR_CORE_ROWS": 8,
                                                      "ET_LINEAR_MMA_SPREAD": 1,
                                                      "ET_DEFER_MAX": 1,
                                                      "ET_STAGE_BYTES": 4096}
    assert decode_knobs({"ET_PREFETCH_NEXT": 1})["ET_PREFETCH_NEXT"] == 1
    _, p = decode_program("tiny-llama", layers=1)
    src = generate(p, "static", knobs=decode_knobs(None))
    assert "#define ET_PREFETCH_NEXT 0" in src and "#define ET_WEIGHTS_EVICT_FIRST 1" in src
    assert "#define ET_LINEAR_MMA 8" in src and "#define ET_LINEAR_CORE_ROWS 8" in src
    assert "#define ET_ATTN_STREAM 16" in src and "#define ET_LINEAR_MMA_RING 4" in src
    assert "#define ET_LINEAR_MMA_SPREAD 1" in src and "#define ET_DEFER_MAX 1" in src
    assert "#define ET_LINEAR_ASYNC 2" in src and "#define ET_LINEAR_EARLY 1" in src
    assert compile_source(src, kernel_name(p, "static")).cubin[:4] == b"\x7fELF"


def test_mma_k_split_needs_the_weight_ring():
    """ET_LINEAR_MMA_KSPLIT: 1 (off) or 2 groups of warps, with ET_LINEAR_MMA_RING (each
    thread copies its own blocks); refused by name else."""
    _, p = decode_program("tiny-llama", layers=1)
    for knobs in ({"ET_LINEAR_MMA_KSPLIT": 2}, {"ET_LINEAR_MMA_KSPLIT": 4,
                                                "ET_LINEAR_MMA_RING": 4}):
        with pytest.raises(ValueError, match=f"knob ET_LINEAR_MMA_KSPLIT="
                                             f"{knobs['ET_LINEAR_MMA_KSPLIT']}: the tensor-core "
                                             "linear's warps split k in 1"):
            generate(p, "static", knobs=knobs)
    assert "#define ET_LINEAR_MMA_KSPLIT 2" in generate(
        p, "static", knobs={"ET_LINEAR_MMA_RING": 4, "ET_LINEAR_MMA_KSPLIT": 2})


@pytest.mark.parametrize("knobs", [{"ET_PREFETCH_BYTES": 262144}, {"ET_STAGE_BYTES": 131072},
                                   {"ET_PREFETCH_NEXT": 0, "ET_PREFETCH_OWN": 1},
                                   {"ET_LINEAR_MMA": 8}, {"ET_LINEAR_ASYNC": 3},
                                   {"ET_LINEAR_ASYNC": 3, "ET_LINEAR_EARLY": 1},
                                   {"ET_LINEAR_MMA": 8, "ET_LINEAR_MMA_RING": 4,
                                    "ET_LINEAR_EARLY": 2},
                                   {"ET_LINEAR_MMA": 8, "ET_LINEAR_MMA_RING": 4,
                                    "ET_LINEAR_MMA_KSPLIT": 2}])
def test_decode_kernel_with_weight_prefetch_compiles(knobs):
    """With the prefetch window (the weight tiles of the tasks ahead go to L2 from the static
    walker), the stage ring (they are copied into shared memory ahead of their tasks), a
    task's own tiles prefetched while it waits, linears of 8 rows and more on tensor cores,
    one-row linears' weight words through rounds in shared memory (their first rounds
    issued before the task's waits, too), or the tensor-core linears' through the ring of
    blocks with the first blocks issued before the waits, or with k split over two groups of
    warps, the decode kernel compiles and differs from the default one."""
    _, p = decode_program("tiny-llama", layers=2)
    plain = compile_source(generate(p, "static"), kernel_name(p, "static"))
    src = generate(p, "static", knobs=knobs)
    for name, value in knobs.items():
        assert f"#define {name} {value}" in src
    c = compile_source(src, kernel_name(p, "static"))
    assert c.cubin[:4] == b"\x7fELF" and c.cubin != plain.cubin


def test_bulk_prefetch_window_issues_tma_prefetches(tmp_path, monkeypatch):
    """ET_PREFETCH_BULK with the prefetch window: the weight tiles of the tasks ahead go to
    L2 by bulk prefetches of the TMA unit (whole tiles or rows), which the kernel's PTX
    holds; without the knob it holds none."""
    _, p = decode_program("tiny-llama", layers=1)
    monkeypatch.setenv("EVENTTENSOR_CACHE", str(tmp_path / "cache"))
    for bulk in (0, 1):
        monkeypatch.setenv("EVENTTENSOR_DUMP", str(tmp_path / f"dump{bulk}"))
        knobs = {"ET_PREFETCH_BYTES": 262144, "ET_PREFETCH_BULK": bulk}
        compile_source(generate(p, "static", knobs=knobs), kernel_name(p, "static"))
        ptx = (tmp_path / f"dump{bulk}" / f"{kernel_name(p, 'static')}.ptx").read_text()
        assert ("cp.async.bulk.prefetch.L2.global" in ptx) == bool(bulk)


def test_early_linear_parts_only_in_static_kernels_with_the_ring():
    """ET_LINEAR_EARLY: the decode program's linear_partial grids get an early part (their
    tile views, et_early_linear_partial) in static and unfused kernels; the other grids and
    the dynamic kernel none; a bit of the knob without its ring (1: ET_LINEAR_ASYNC's, 2:
    ET_LINEAR_MMA_RING's) is refused, and so are early rounds (ET_LINEAR_EARLY_ROUNDS) past
    the ring or without bit 1."""
    _, p = decode_program("tiny-llama", layers=1)
    knobs = {"ET_LINEAR_ASYNC": 2, "ET_LINEAR_EARLY": 1}
    src = generate(p, "static", knobs=knobs)
    linear = [gi for gi, grid in enumerate(p.grids) if grid.kind == "linear_partial"]
    assert len(linear) == 8
    assert "bool et_has_early(int g) {\n    return " + \
        " || ".join(f"g == {gi}" for gi in linear) + ";" in src
    assert src.count("et_early_linear_partial(t0, t1, t2);") >= 2
    assert "et_early_task" not in generate(p, "static", knobs={"ET_LINEAR_ASYNC": 2})
    assert "et_early_task" not in generate(p, "dynamic", knobs=knobs)
    ring = generate(p, "static", knobs={"ET_LINEAR_MMA_RING": 4, "ET_LINEAR_EARLY": 2})
    assert ring.count("et_early_linear_partial(t0, t1, t2);") >= 2
    for knobs in ({"ET_LINEAR_EARLY": 1}, {"ET_LINEAR_MMA_RING": 4, "ET_LINEAR_EARLY": 1},
                  {"ET_LINEAR_ASYNC": 2, "ET_LINEAR_EARLY": 2},
                  {"ET_LINEAR_ASYNC": 2, "ET_LINEAR_EARLY": 4}):
        with pytest.raises(ValueError, match=f"knob ET_LINEAR_EARLY={knobs['ET_LINEAR_EARLY']}: "
                                             "the early weight copies go to the ring of "
                                             "ET_LINEAR_ASYNC"):
            generate(p, "static", knobs=knobs)
    for rounds, knobs in ((3, {"ET_LINEAR_ASYNC": 2, "ET_LINEAR_EARLY": 1}),
                          (0, {"ET_LINEAR_ASYNC": 2, "ET_LINEAR_EARLY": 1}),
                          (1, {"ET_LINEAR_ASYNC": 2, "ET_LINEAR_MMA_RING": 4,
                               "ET_LINEAR_EARLY": 2})):
        with pytest.raises(ValueError, match=f"knob ET_LINEAR_EARLY_ROUNDS={rounds}: the "
                                             "one-row linear's rounds issued early, 1 to "
                                             "ET_LINEAR_ASYNC=2"):
            generate(p, "static", knobs={**knobs, "ET_LINEAR_EARLY_ROUNDS": rounds})


@pytest.mark.parametrize("name, bits", [("tiny-llama", 1 << 2), ("llama-3.2-1b", 1 << 4),
                                        ("qwen3-8b", 1 << 4)])
def test_only_the_attention_instances_the_program_uses(name, bits):
    """The kernel compiles the fast attention path for its own query heads per KV head
    (tiny-llama 2, Llama-3.2-1B and Qwen3-8B 4), not for all three group sizes."""
    _, p = decode_program(name, layers=1)
    assert f"#define ET_ATTN_GROUPS {bits}\n" in generate(p, "static")


def test_precompile_fills_the_cache_with_the_sessions_kernels():
    """gpu_decode.precompile compiles, side by side, the kernels the decode sessions of its
    builds would compile (same program, knobs and options): one each, duplicates once; the
    build a session then makes finds its cubin in the cache."""
    from eventtensor.backends.cuda.build import build_kernel
    from eventtensor.models.gpu_decode import decode_knobs, precompile, session_program
    cfg = get_config("tiny-llama").replace(num_layers=1)
    tiles = gpu_tiles(cfg, 4)
    builds = [(tiles, "static", {}), (tiles, "unfused", {}), (tiles, "static", {}),
              (tiles, "static", {"knobs": {"ET_LINEAR_MMA_LO": 0}})]
    assert precompile(cfg, 4, 64, builds) == 3
    program = session_program(cfg, 4, 64, tiles, 4)
    for mode, knobs in (("static", None), ("unfused", None), ("static", {"ET_LINEAR_MMA_LO": 0})):
        build = build_kernel(program, mode, 8, knobs=decode_knobs(knobs))
        assert build.compiled.cached, (mode, knobs)
    assert not build_kernel(program, "dynamic", 8, knobs=decode_knobs(None)).compiled.cached


def test_split_by_waves_balances_the_phases_of_both_models():
    """The wave model's splits: Llama-3.2-1B keeps the splits measured best on an H100 (gate
    and up 2, down 8, o 8: one wave of 128 tasks each); Qwen3-8B's gate and up go to 4 (three
    waves of 512 KB tasks, not two of 1 MB), its down and o to 4, and its q tasks to at most
    256 KB (split 16); a K too short for any slice keeps the fallback."""
    from eventtensor.models.gpu_decode import split_by_waves
    llama, qwen = gpu_tiles(get_config("llama-3.2-1b"), 64), gpu_tiles(get_config("qwen3-8b"), 64)
    assert (llama.mlp_split, llama.down_split, llama.o_split) == (2, 8, 8)
    assert (llama.k_split, llama.q_split) == (4, 4)
    assert (qwen.mlp_split, qwen.down_split, qwen.o_split) == (4, 4, 4)
    assert (qwen.k_split, qwen.q_split) == (4, 16)
    assert split_by_waves(64, 4, 256, fallback=3) == 3
    # one tile of 1 MB: 16 tasks of 64 KB (one wave) beat 1 task of 1 MB
    assert split_by_waves(4096, 1, 256, fallback=1) == 16
