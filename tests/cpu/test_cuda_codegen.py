"""Every generated megakernel compiles with NVRTC for sm_90a (no GPU needed)."""
import subprocess

import numpy as np
import pytest
from cuda_host import CXX, needs_cxx

from eventtensor import ProgramBuilder
from eventtensor.backends.cuda.codegen import (
    STAGES,
    UnsupportedOnGpu,
    dynamic_smem_bytes,
    generate,
    kernel_name,
    stage_bytes,
)
from eventtensor.backends.cuda.compiler import CompileError, compile_many, compile_source
from eventtensor.backends.cuda.runtime import (
    EARLY_BIT,
    EARLY_WATCH_BIT,
    PUSH_BIT,
    _notify_records,
)
from eventtensor.examples import EXAMPLES
from eventtensor.passes import run_pipeline
from eventtensor.schedule import lower, prepare

nvrtc = pytest.importorskip("cuda.bindings.nvrtc", reason="cuda-bindings not installed")


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EVENTTENSOR_CACHE", str(tmp_path / "cache"))


def program_for(name, mode):
    return prepare(EXAMPLES[name].build(), mode)


GPU_CASES = [(n, m) for n in ("splitk_rowsum", "symbolic_batch", "splitk_gemv_bf16") for m in
             ("static", "dynamic", "hybrid", "unfused")] + [
    ("toy_moe", "static"), ("toy_moe", "hybrid"), ("toy_moe", "unfused")]


@pytest.mark.parametrize("name, mode", GPU_CASES)
def test_example_kernels_compile_for_sm90a(name, mode):
    p = program_for(name, mode)
    src = generate(p, mode)
    assert f"task grid {p.grids[0].name}" in src  # readable: grids named in comments
    if name == "toy_moe":  # data-dependent notify, wait, trigger and runtime counts
        assert "// notify expert_ready[t->topk_ids[t, :]]" in src
        assert "// trigger expert_ready -> k->exp_indptr[k]:exp_indptr[k + 1]" in src
        assert "//   expert_ready: k->expert_counts[k]" in src
    if mode == "hybrid":  # the device queue's counter protocol, static queue nesting pops
        assert "#define ET_ARMED_COUNTS 1" in src and ", et_run_hybrid, 1)" in src
        if name == "toy_moe":  # the trigger range releases the grid only while it is dynamic
            assert "if (ET_GRID_DYNAMIC(3) && " in src
    if name == "splitk_gemv_bf16":  # bf16 x and W tiles, fp32 partials, bf16 y
        assert "const EtBTile t0 = et_staged(et_tile((et_bf16*)" in src  # input: staged
        assert "const EtTile t0 = et_tile((float*)" in src
    c = compile_source(src, kernel_name(p, mode))
    assert c.cubin[:4] == b"\x7fELF" and not c.cached
    again = compile_source(src, kernel_name(p, mode))
    assert again.cached and again.cubin == c.cubin


@pytest.mark.parametrize("name, mode", [("symbolic_batch", m) for m in
                                        ("static", "dynamic", "hybrid", "unfused")] +
                         [("toy_moe", "hybrid")])
def test_example_kernels_link_with_functions_assembled_one_by_one(name, mode):
    """fast_compile="separate" (NVRTC's PTX, every function assembled on its own and linked
    by nvJitLink) takes every scheduling mode's kernel: an executable cubin with the entry."""
    pytest.importorskip("cuda.bindings.nvjitlink", reason="nvJitLink not installed")
    p = program_for(name, mode)
    c = compile_source(generate(p, mode), kernel_name(p, mode), fast_compile="separate")
    assert c.cubin[:4] == b"\x7fELF" and int.from_bytes(c.cubin[16:18], "little") == 2
    assert kernel_name(p, mode).encode() in c.cubin


def test_kernel_for_two_ctas_per_sm_is_named_and_compiles():
    p = program_for("symbolic_batch", "static")
    src = generate(p, "static", ctas_per_sm=2)
    assert "ET_KERNEL(et_symbolic_batch_static_x2, et_run_static, 2)" in src
    assert compile_source(src, kernel_name(p, "static", 2)).cubin[:4] == b"\x7fELF"


def mixed_dtype_program(a: str, partial: str, out: str):
    """Split-K row sum with the given dtypes of input, partials and output."""
    pb = ProgramBuilder(f"rowsum_{a}_{partial}_{out}")
    pb.input("A", (32, 64), a)
    pb.temp("P", (2, 32, 1), partial)
    pb.output("out", (32, 1), out)
    pb.event("E")
    pb.grid("part", "row_sum", "j", (2,), reads={"A": ":, 32*j:32*j + 32"},
            writes={"P": "j, :, :"}, notify={"E": "j->"})
    pb.grid("final", "sum_partials", "i", (1,), reads={"P": ":, :, :"}, writes={"out": ":, :"},
            wait={"E": "i->"})
    return pb.build()


@pytest.mark.parametrize("dtypes", [("bfloat16", "bfloat16", "bfloat16"),
                                    ("bfloat16", "float32", "bfloat16"),
                                    ("float32", "bfloat16", "float32")])
def test_bodies_take_any_mix_of_float32_and_bfloat16_tiles(dtypes):
    p = prepare(mixed_dtype_program(*dtypes), "static")
    compile_source(generate(p, "static"), kernel_name(p, "static"))


def test_dump_writes_every_stage(tmp_path, monkeypatch):
    monkeypatch.setenv("EVENTTENSOR_DUMP", str(tmp_path / "dump"))
    p = program_for("splitk_rowsum", "static")
    compile_source(generate(p, "static"), kernel_name(p, "static"))
    names = sorted(f.suffix for f in (tmp_path / "dump").iterdir() if f.is_file())
    assert names == [".cu", ".cubin", ".ptx"]
    ptx = next((tmp_path / "dump").glob("*.ptx")).read_bytes()
    assert b".visible .entry" in ptx and b"\0" not in ptx  # ptxas takes the file as it is


def test_extra_nvrtc_options_reach_nvrtc_and_the_cache_key(tmp_path, monkeypatch):
    monkeypatch.setenv("EVENTTENSOR_CACHE", str(tmp_path))
    p = program_for("splitk_rowsum", "static")
    source, name = generate(p, "static"), kernel_name(p, "static")
    monkeypatch.setenv("EVENTTENSOR_NVRTC_OPTIONS", "--no-such-option")
    with pytest.raises(CompileError, match="no-such-option"):
        compile_source(source, name)
    monkeypatch.setenv("EVENTTENSOR_NVRTC_OPTIONS", "--split-compile=2  -DET_UNUSED_FLAG=1")
    split = compile_source(source, name)
    monkeypatch.delenv("EVENTTENSOR_NVRTC_OPTIONS")
    plain = compile_source(source, name)
    assert not split.cached and not plain.cached  # different options, different cubins
    assert len(list(tmp_path.glob("*.cubin"))) == 2


def test_random_programs_compile():
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).parent))
    from random_programs import generate as gen
    for seed in range(6):
        p = run_pipeline(gen(seed).build())
        for mode in ("static", "dynamic", "hybrid"):
            compile_source(generate(p, mode), kernel_name(p, mode))


@pytest.mark.parametrize("experts", [4, 8, 16])
def test_moe_dynamic_kernels_compile_for_sm90a(experts):
    """Dynamic mode with every kind of data-dependent edge: notifies that may complete their
    element, runtime counts armed by the scan task, trigger ranges released on completion."""
    from eventtensor.examples import moe
    p = prepare(moe.build(experts), "dynamic")
    src = generate(p, "dynamic")
    assert '#include "eventtensor/dynamic.cuh"' in src
    assert src.count("et_notify_counted(A, x, 0);") == 2  # gather, expert_gemm
    assert "// arm expert_ready: wait count expert_counts[k], written as expert_counts[:]" in src
    assert "// arm gemm_done: wait count expert_tiles[k], written as expert_tiles[:]" in src
    assert "// trigger expert_ready -> expert_gemm: k->exp_indptr[k]:exp_indptr[k + 1]" in src
    assert "et_release_range(A, 0, " in src
    assert compile_source(src, kernel_name(p, "dynamic")).cubin[:4] == b"\x7fELF"


def dynamic_edges_program(triggers: tuple[str, ...] = ("E",)):
    """E (static count, affine notifies: early push in dynamic mode) releases tasks
    lo[k]:hi[k] of grid c; F's wait count is read from the input `cnt`, and F is notified
    through the input `ids`."""
    pb = ProgramBuilder("dyn_edges")
    pb.input("A", (8, 4))
    for name, shape in (("lo", (2,)), ("hi", (2,)), ("ids", (6,)), ("cnt", (3,))):
        pb.input(name, shape, "int32")
    pb.output("t", (2, 1))
    pb.output("o", (8, 1))
    pb.output("u", (3, 1))
    pb.event("E", (2,))
    pb.event("F", (3,), wait_count="k->cnt[k]")
    pb.grid("p", "row_sum", "k", (2,), reads={"A": "k, :"}, writes={"t": "k, :"},
            notify={"E": "k->k"})
    pb.grid("c", "row_sum", "i", (8,), reads={"A": "i, :"}, writes={"o": "i, :"})
    for ev in triggers:
        pb.trigger(ev, "c", "k->lo[k]:hi[k]")
    pb.grid("q", "nop", "i", (6,), notify={"F": "i->ids[i]"})
    pb.grid("r", "row_sum", "k", (3,), reads={"A": "k, :"}, writes={"u": "k, :"},
            wait={"F": "k->k"})
    return pb.build()


def dynamic_edges_inputs(ids=(0, 2, 0, 2, 2, 0), cnt=None):
    """Tasks c(3), c(4) and c(7) are in no range; q(i) notifies F[ids[i]], whose wait count
    is `cnt` (default: the number of its notifies, so F[1] waits for none)."""
    return {"A": np.arange(32, dtype=np.float32).reshape(8, 4),
            "lo": np.array([0, 5], np.int32), "hi": np.array([3, 7], np.int32),
            "ids": np.array(ids, np.int32),
            "cnt": np.array(np.bincount(ids, minlength=3) if cnt is None else cnt, np.int32)}


def test_dynamic_kernel_arms_input_counts_and_watches_early_trigger_sources():
    p = prepare(dynamic_edges_program(), "dynamic")
    src = generate(p, "dynamic")
    assert "// arm F: wait count cnt[k] (input)" in src
    assert "// trigger E -> c: k->lo[k]:hi[k]" in src
    compile_source(src, kernel_name(p, "dynamic"))
    t = lower(dynamic_edges_program(), {}, "dynamic", 4)
    assert t.early[:2].all()  # E: early push, and its completion releases trigger ranges
    rec = _notify_records(t)[:2]  # p(0) and p(1) notify E[0] and E[1]
    np.testing.assert_array_equal(rec & 0x1FFFFFFF, [0, 1])
    assert ((rec & EARLY_WATCH_BIT) != 0).all() and ((rec & PUSH_BIT) != 0).all()
    assert not (rec & EARLY_BIT).any()
    static = lower(dynamic_edges_program(), {}, "static", 4)
    assert not (_notify_records(static) & (EARLY_WATCH_BIT | PUSH_BIT)).any()


def tile_counts_program(region: str):
    """A scan on grid (2,) whose task s writes `region` of the wait counts of E."""
    pb = ProgramBuilder("tile_counts")
    pb.input("topk_ids", (8, 2), "int32")
    writes = {"expert_counts": region, "expert_tiles": ":", "exp_indptr": ":",
              "tile_expert": ":", "tile_lo": ":", "tile_hi": ":", "slot": ":, :"}
    for name in writes:
        pb.temp(name, {"slot": (8, 2), "exp_indptr": (9,)}.get(name, (8,)), "int32")
    pb.event("E", (8,), wait_count="k->expert_counts[k]")
    pb.grid("scan", "moe_scan", "s", (2,), reads={"topk_ids": ":, :"}, writes=writes,
            params={"experts": 8, "tile_m": 4})
    pb.grid("g", "nop", "t", (8,), notify={"E": "t->topk_ids[t, :]"})
    pb.grid("c", "nop", "k", (8,), wait={"E": "k->k"})
    return pb.build()


@pytest.mark.parametrize("region, armed_if", [
    ("4*s:4*s + 4", "if ((e0 >= 4*c_s && e0 < 4*c_s + 4))"), ("s", "if ((e0 == c_s))")])
def test_counts_are_armed_by_the_task_that_wrote_them(region, armed_if):
    p = prepare(tile_counts_program(region), "dynamic")
    src = generate(p, "dynamic")
    assert f"{armed_if} et_arm(A, x, " in src
    compile_source(src, kernel_name(p, "dynamic"))


def test_codegen_error_names_what_the_gpu_does_not_run():
    p = run_pipeline(dynamic_edges_program(triggers=("E", "F")))
    with pytest.raises(UnsupportedOnGpu, match=r"task grid 'c' has 2 trigger edges \(from E, "
                                               r"F\); dynamic mode on the GPU releases a grid "
                                               r"through one trigger edge"):
        generate(p, "dynamic")
    generate(p, "static")
    with pytest.raises(UnsupportedOnGpu, match=r"task grid 'scan' writes count tensor "
                                               r"'expert_counts' through index vector "
                                               r"topk_ids\[s, :\]; dynamic mode arms counts "
                                               r"written at indices and ranges only"):
        generate(prepare(tile_counts_program("topk_ids[s, :]"), "dynamic"), "dynamic")
    with pytest.raises(UnsupportedOnGpu, match="scheduling mode 'auto' is not supported by "
                                               "the CUDA backend"):
        generate(run_pipeline(EXAMPLES["splitk_rowsum"].build()), "auto")


def test_int64_count_tensor_is_refused():
    """The device reads data-dependent indices and counts as int32."""
    pb = ProgramBuilder("int64_counts")
    pb.input("counts", (4,), "int64")
    pb.event("E", (4,), wait_count="k->counts[k]")
    pb.grid("g", "nop", "t", (4,), notify={"E": "t->t"})
    pb.grid("c", "nop", "k", (4,), wait={"E": "k->k"})
    with pytest.raises(UnsupportedOnGpu, match=r"map load counts\[k\] reads tensor 'counts' "
                                               r"of dtype int64; on the GPU, index and count "
                                               r"tensors must be int32"):
        generate(prepare(pb.build(), "static"), "static")


def test_trigger_source_complete_from_the_start_is_refused():
    pb = ProgramBuilder("zero_source")
    pb.input("A", (4, 2))
    for name in ("lo", "hi"):
        pb.input(name, (2,), "int32")
    pb.output("o", (4, 1))
    pb.event("E", (2,))
    pb.grid("p", "nop", "k", (2,), notify={"E": "k->1"})  # E[0] gets no notify: count 0
    pb.grid("c", "row_sum", "i", (4,), reads={"A": "i, :"}, writes={"o": "i, :"})
    pb.trigger("E", "c", "k->lo[k]:hi[k]")
    t = lower(pb.build(), {}, "dynamic", 4)
    with pytest.raises(UnsupportedOnGpu, match=r"trigger edge E -> c at \{\}: E\[0\] has wait "
                                               r"count 0 .* needs every source element"):
        _notify_records(t)


def test_compile_error_carries_the_log():
    with pytest.raises(CompileError, match="could not compile kernel broken"):
        compile_source('extern "C" __global__ void broken() { undefined_thing(); }', "broken")


@pytest.mark.parametrize("name", ["splitk_rowsum", "symbolic_batch", "splitk_gemv_bf16"])
def test_stage_kernels_compile_for_sm90a(name):
    """The stage-per-kernel baseline: the same dispatch switch, one task per CTA, the argument
    slots by value."""
    p = program_for(name, "static")
    src = generate(p, "stages")
    assert f"ET_STAGE_KERNEL({kernel_name(p, 'stages')})" in src and "ET_KERNEL(" not in src
    assert compile_source(src, kernel_name(p, "stages")).cubin[:4] == b"\x7fELF"


def test_stage_kernels_refuse_guarded_grids():
    with pytest.raises(UnsupportedOnGpu, match="task grid 'expert_gemm' has a trigger edge; "
                                               "the stage-per-kernel baseline runs every task"):
        generate(program_for("toy_moe", "static"), "stages")


def test_knobs_are_defined_before_the_device_library_and_checked():
    p = program_for("splitk_rowsum", "static")
    src = generate(p, "static", knobs={"ET_SPIN_NS": 50000, "ET_SLEEP_NS": 128})
    assert src.index("#define ET_SPIN_NS 50000") < src.index('#include "eventtensor/runtime.cuh"')
    compile_source(src, kernel_name(p, "static"))
    with pytest.raises(ValueError, match="knob ET_CHUNK=8: the device library's knobs are "
                                         "ET_SPIN_NS, ET_SLEEP_NS, ET_ACQUIRE_POLLS, "
                                         "ET_POLL_BATCH, ET_STAGE_BYTES, ET_DEFER_MAX"):
        generate(p, "static", knobs={"ET_CHUNK": 8})
    with pytest.raises(ValueError, match="ET_STAGE_BYTES=40000: the stage ring takes a "
                                         "multiple of 16 bytes, at most 0 with 8 CTA"):
        generate(p, "static", 8, knobs={"ET_STAGE_BYTES": 40000})
    with pytest.raises(ValueError, match="ET_STAGE_BYTES=1000: the stage ring takes a "
                                         "multiple of 16 bytes, at most 203776 with 1 CTA"):
        generate(p, "static", knobs={"ET_STAGE_BYTES": 1000})
    for other in ("ET_PREFETCH_BYTES", "ET_WEIGHTS_EVICT_FIRST"):
        with pytest.raises(ValueError, match=f"knobs ET_STAGE_BYTES=1024 and {other}=1: with "
                                             "the stage ring, weights reach their tasks"):
            generate(p, "static", knobs={"ET_STAGE_BYTES": 1024, other: 1})
    with pytest.raises(ValueError, match="knob ET_DEFER_MAX=0: a CTA holds back"):
        generate(p, "static", knobs={"ET_DEFER_MAX": 0})
    with pytest.raises(ValueError, match="knob ET_POLL_BATCH=12: a task's table waits are "
                                         "polled 8, 16, 32 at a time"):
        generate(p, "static", knobs={"ET_POLL_BATCH": 12})


def test_wait_polls_in_flight_knob_compiles():
    """ET_POLL_BATCH 32: the split-K row sum and the symbolic-batch GEMM chain with their
    tasks' waits polled 32 at a time compile."""
    for p in (program_for("splitk_rowsum", "static"), program_for("symbolic_batch", "static")):
        src = generate(p, "static", knobs={"ET_POLL_BATCH": 32})
        assert "#define ET_POLL_BATCH 32" in src
        assert compile_source(src, kernel_name(p, "static")).cubin[:4] == b"\x7fELF"


def test_stage_ring_fits_the_ctas_of_an_sm():
    """The largest stage ring by CTAs per SM: what the SM's 228 KB leave each CTA beside its
    static shared memory (at most 28 KB) and the system's 1 KB, in whole KB; the ring is
    opt-in (none unless the knob asks for one)."""
    assert [stage_bytes(c) for c in (1, 2, 4, 6, 8)] == [199 * 1024, 85 * 1024, 28 * 1024,
                                                         9 * 1024, 0]
    p = program_for("symbolic_batch", "static")
    src = generate(p, "static", 2, knobs={"ET_STAGE_BYTES": 16384})
    assert "#define ET_STAGE_BYTES 16384" in src
    assert '#include "eventtensor/ring.cuh"' in src
    assert compile_source(src, kernel_name(p, "static", 2)).cubin[:4] == b"\x7fELF"
    assert "#define ET_STAGE_BYTES" not in generate(p, "static") + generate(p, STAGES)


@pytest.mark.parametrize("knob, good, bad, refusal, too_big, ctas, room", [
    ("ET_LINEAR_ASYNC", 2, 1, "the one-row linear keeps 2 or 3 rounds", 2, 2, 87040),
    ("ET_ATTN_STREAM", 16, 8, "the attention's KV ring takes 16 or 32 words", 32, 2, 87040),
    ("ET_LINEAR_MMA_RING", 8, 9, "the tensor-core linear's ring takes 2 to 8 blocks of 16384 "
     "bytes", 4, 3, 48128)])
def test_rings_take_the_dynamic_shared_memory(knob, good, bad, refusal, too_big, ctas, room):
    """Each ring of the bodies' asynchronous copies (the one-row linear's rounds, the
    attention's KV words, the tensor-core linear's blocks) takes the sizes it documents,
    is refused where the CTAs of an SM leave too little room, and not beside the stage
    ring."""
    p = program_for("symbolic_batch", "static")
    assert f"#define {knob} {good}" in generate(p, "static", knobs={knob: good})
    with pytest.raises(ValueError, match=f"knob {knob}={bad}: {refusal}"):
        generate(p, "static", knobs={knob: bad})
    with pytest.raises(ValueError, match=rf"knob {knob}={too_big}: .* at most {room} bytes "
                                         rf"(a CTA )?with {ctas} CTA\(s\) per SM"):
        generate(p, "static", ctas, knobs={knob: too_big})
    with pytest.raises(ValueError, match=f"ET_STAGE_BYTES=16384 and {knob}={good} both"):
        generate(p, "static", knobs={knob: good, "ET_STAGE_BYTES": 16384})


def test_dynamic_shared_memory_is_the_largest_ring():
    """A launch asks for the stage ring's bytes, or the largest of the bodies' rings, which
    share the dynamic shared memory (a CTA runs one body at a time)."""
    assert dynamic_smem_bytes(None) == 0
    assert dynamic_smem_bytes({"ET_STAGE_BYTES": 16384}) == 16384
    assert dynamic_smem_bytes({"ET_LINEAR_ASYNC": 3}) == 3 * 65536
    assert dynamic_smem_bytes({"ET_ATTN_STREAM": 16}) == 65536
    assert dynamic_smem_bytes({"ET_ATTN_STREAM": 32, "ET_LINEAR_ASYNC": 3}) == 3 * 65536
    assert dynamic_smem_bytes({"ET_ATTN_STREAM": 32, "ET_LINEAR_ASYNC": 0}) == 2 * 65536
    assert dynamic_smem_bytes({"ET_LINEAR_MMA_RING": 3}) == 3 * 16384
    assert dynamic_smem_bytes({"ET_LINEAR_MMA_RING": 4, "ET_ATTN_STREAM": 16}) == 65536
    assert dynamic_smem_bytes({"ET_LINEAR_MMA_RING": 2, "ET_LINEAR_ASYNC": 2}) == 2 * 65536


def test_input_tiles_are_staged_and_read_from_the_stage_ring():
    """gemm2_partial hands its W2 tile (an input), not its Y1 tile (written by a task), to the
    stager, and reads W2 through et_staged."""
    src = generate(program_for("symbolic_batch", "static"), "static")
    assert "template <class S>\n__device__ void et_stage(const long long* A, const EtTask& " \
           "task, S& s) {" in src
    case = src[src.index("case 2: {  // task grid gemm2_partial", src.index("et_stage(")):]
    case = case[:case.index("break;")]
    assert "// stage W2[" in case and "s.tile(0, p0);" in case and "Y1" not in case
    assert "const EtTile t1 = et_staged(et_tile((float*)ET_TENSOR(2)" in src
    assert "const EtTile t0 = et_tile((float*)ET_TENSOR(4)" in src  # Y1: from global memory
    assert "return g == 0 || g == 2;" in src  # et_has_stage: the GEMM partials


def test_compile_many_fills_the_cache_in_parallel():
    kernels = [(generate(program_for(n, m), m), kernel_name(program_for(n, m), m))
               for n in ("splitk_rowsum", "symbolic_batch") for m in ("static", "dynamic")]
    first = compile_many(kernels, jobs=2)
    assert [c.name for c in first] == [name for _, name in kernels]
    assert not any(c.cached for c in first) and all(c.cubin[:4] == b"\x7fELF" for c in first)
    again = [compile_source(src, name) for src, name in kernels]
    assert all(c.cached for c in again) and [c.cubin for c in again] == [c.cubin for c in first]


def trigger_program(elements: int, tasks: int):
    """Grid p notifies E[k]; E[k] releases tasks lo[k]:hi[k] of grid c (`tasks` of them)."""
    pb = ProgramBuilder("triggers")
    pb.input("A", (tasks, 4))
    pb.input("lo", (elements,), "int32")
    pb.input("hi", (elements,), "int32")
    pb.output("o", (tasks, 1))
    pb.event("E", (elements,))
    pb.grid("p", "nop", "k", (elements,), notify={"E": "k->k"})
    pb.grid("c", "row_sum", "i", (tasks,), reads={"A": "i, :"}, writes={"o": "i, :"})
    pb.trigger("E", "c", "k->lo[k]:hi[k]")
    return pb.build()


def _c_block(src: str, start: str, end: str) -> str:
    """The text of `src` from the line starting with `start` through the first `end`."""
    i = src.index(start)
    return src[i:src.index(end, i) + len(end)]


@needs_cxx
def test_trigger_search_finds_the_range_of_every_task(tmp_path):
    """The static kernel's trigger search (et_extra_waits, from a proportional guess round the
    elements), compiled for the host: for disjoint ranges in element order, in reverse, in a
    random order, of unequal lengths, empty ones and tasks in no range among them, each task
    of the triggered grid waits on the one element whose range holds it, else is guarded."""
    elements, tasks = 6, 24
    p = prepare(trigger_program(elements, tasks), "static")
    src = generate(p, "static")
    func = _c_block(src, "__device__ int et_extra_waits(", "\n}\n")
    table = ("" if "et_extra_waits_tensors" not in src else
             _c_block(src, "__constant__ short et_extra_waits_tensors", "};\n"))
    tensor = {t.name: i for i, t in enumerate(p.tensors)}
    base = sum(int(np.prod(e.shape)) for e in p.events[:[e.name for e in p.events].index("E")])
    grid = [g.name for g in p.grids].index("c")
    rng = np.random.default_rng(3)
    cases = [([4 * k for k in range(6)], [4 * k + 4 for k in range(6)]),        # equal shares
             ([20 - 4 * k for k in range(6)], [24 - 4 * k for k in range(6)])]  # reversed
    for _ in range(6):  # cuts of 0..24 into ranges (empty ones, gaps) given in a random order
        cuts = np.sort(rng.integers(0, tasks + 1, 2 * elements))
        order = rng.permutation(elements)
        cases.append((cuts[0::2][order].tolist(), cuts[1::2][order].tolist()))

    def c_rows(i):  # the lo (0) or hi (1) arrays of the cases as a C initialiser
        return ", ".join("{" + ", ".join(map(str, c[i])) + "}" for c in cases)

    main = [f"int lo[{len(cases)}][{elements}] = {{{c_rows(0)}}};",
            f"int hi[{len(cases)}][{elements}] = {{{c_rows(1)}}};",
            f"for (int d = 0; d < {len(cases)}; ++d) {{",
            f"    g_t[{tensor['lo']}] = (long long)lo[d]; g_t[{tensor['hi']}] = (long long)hi[d];",
            f"    for (int t = 0; t < {tasks}; ++t) {{",
            f"        EtTask task{{t, {{{grid}, 0, 0, 0}}, {{0, t, 0, 0}}}};",
            "        g_found = -1;",
            "        const int r = et_extra_waits(nullptr, task);",
            '        std::printf("%d %d\\n", r, g_found);', "    }", "}"]
    (tmp_path / "main.cpp").write_text("\n".join([
        "#include <cstdio>", "#define __device__", "#define __constant__ static",
        "struct int4 { int x, y, z, w; };", "struct EtTask { int id; int4 a, b; };",
        "static long long g_t[64], g_sym[8];", "static int g_found;",
        "#define ET_TENSOR(i) (g_t[i])", "#define ET_SYM(i) (g_sym[i])",
        "static bool et_wait_elem(const long long*, int, int x) { g_found = x; return true; }",
        table, func, "int main() {", *main, "}", ""]))
    subprocess.run([CXX, "-std=c++17", "-O1", str(tmp_path / "main.cpp"), "-o",
                    str(tmp_path / "main")], check=True, capture_output=True, timeout=120)
    out = subprocess.run([str(tmp_path / "main")], capture_output=True, text=True,
                         check=True, timeout=60).stdout.split("\n")
    for d, (lo, hi) in enumerate(cases):
        for t in range(tasks):
            holders = [k for k in range(elements) if lo[k] <= t < hi[k]]
            assert len(holders) <= 1
            want = f"1 {base + holders[0]}" if holders else "2 -1"
            assert out[d * tasks + t] == want, (lo, hi, t)
