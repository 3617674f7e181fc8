"""Every generated megakernel compiles with NVRTC for sm_90a (no GPU needed)."""
import pytest

from eventtensor.backends.cuda.codegen import UnsupportedOnGpu, generate, kernel_name
from eventtensor.backends.cuda.compiler import CompileError, compile_source
from eventtensor.examples import EXAMPLES
from eventtensor.passes import run_pipeline
from eventtensor.schedule import prepare

nvrtc = pytest.importorskip("cuda.bindings.nvrtc", reason="cuda-bindings not installed")


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EVENTTENSOR_CACHE", str(tmp_path / "cache"))


def program_for(name, mode):
    return prepare(EXAMPLES[name].build(), mode)


GPU_CASES = [(n, m) for n in ("splitk_rowsum", "symbolic_batch") for m in
             ("static", "dynamic", "unfused")] + [("toy_moe", "static"), ("toy_moe", "unfused")]


@pytest.mark.parametrize("name, mode", GPU_CASES)
def test_example_kernels_compile_for_sm90a(name, mode):
    p = program_for(name, mode)
    src = generate(p, mode)
    assert f"task grid {p.grids[0].name}" in src  # readable: grids named in comments
    if name == "toy_moe":  # data-dependent notify, wait, trigger and runtime counts
        assert "// notify expert_ready[t->topk_ids[t, :]]" in src
        assert "// trigger expert_ready -> k->exp_indptr[k]:exp_indptr[k + 1]" in src
        assert "// expert_ready: k->expert_counts[k]" in src
    c = compile_source(src, kernel_name(p, mode))
    assert c.cubin[:4] == b"\x7fELF" and not c.cached
    again = compile_source(src, kernel_name(p, mode))
    assert again.cached and again.cubin == c.cubin


def test_dump_writes_every_stage(tmp_path, monkeypatch):
    monkeypatch.setenv("EVENTTENSOR_DUMP", str(tmp_path / "dump"))
    p = program_for("splitk_rowsum", "static")
    compile_source(generate(p, "static"), kernel_name(p, "static"))
    names = sorted(f.suffix for f in (tmp_path / "dump").iterdir() if f.is_file())
    assert names == [".cu", ".cubin", ".ptx"]


def test_random_programs_compile():
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).parent))
    from random_programs import generate as gen
    for seed in range(6):
        p = run_pipeline(gen(seed).build())
        for mode in ("static", "dynamic"):
            compile_source(generate(p, mode), kernel_name(p, mode))


def test_codegen_error_names_the_edge():
    with pytest.raises(UnsupportedOnGpu, match=r"notify edge gather -> expert_ready is data "
                                               r"dependent; .* static and unfused modes only"):
        generate(run_pipeline(EXAMPLES["toy_moe"].build()), "dynamic")
    with pytest.raises(UnsupportedOnGpu, match="scheduling mode 'hybrid'"):
        generate(run_pipeline(EXAMPLES["splitk_rowsum"].build()), "hybrid")


def test_compile_error_carries_the_log():
    with pytest.raises(CompileError, match="could not compile kernel broken"):
        compile_source('extern "C" __global__ void broken() { undefined_thing(); }', "broken")
