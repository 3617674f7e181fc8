"""The host-side build of a megakernel (`build.build_kernel`) and its disk cache: the same
products as the separate steps, served from disk on the second build, recomputed when an
entry is unreadable or the program or options differ; a cold build's validation error
is raised while NVRTC runs."""
import pytest

from eventtensor import ProgramBuilder
from eventtensor.backends.cuda import build as build_mod
from eventtensor.backends.cuda import build_cache
from eventtensor.backends.cuda.codegen import generate
from eventtensor.errors import WaitCountError
from eventtensor.examples import EXAMPLES
from eventtensor.models import get_config
from eventtensor.models.decode import build_decode_program
from eventtensor.schedule import prepare

pytest.importorskip("cuda.bindings.nvrtc", reason="cuda-bindings not installed")


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EVENTTENSOR_CACHE", str(tmp_path))


def _decode(layers=1):
    return build_decode_program(get_config("tiny-qwen3").replace(num_layers=layers), 4, 32)


@pytest.mark.parametrize("mode", ["static", "unfused"])
def test_second_prepare_comes_from_disk(monkeypatch, mode):
    first = build_cache.prepare_cached(_decode(), mode)
    assert first == prepare(_decode(), mode)
    monkeypatch.setattr(build_cache, "prepare", lambda *a: pytest.fail("not served from disk"))
    assert build_cache.prepare_cached(_decode(), mode) == first


def test_other_programs_and_broken_entries_are_prepared_again(tmp_path, monkeypatch):
    build_cache.prepare_cached(_decode(), "static")
    calls = []
    real = build_cache.prepare
    monkeypatch.setattr(build_cache, "prepare", lambda *a: calls.append(a) or real(*a))
    two = build_cache.prepare_cached(_decode(layers=2), "static")
    assert len(calls) == 1 and len(two.grids) > len(prepare(_decode(), "static").grids)
    for entry in tmp_path.glob("prepared-*.pickle"):
        entry.write_bytes(b"not a pickle")
    assert build_cache.prepare_cached(_decode(), "static") == prepare(_decode(), "static")
    assert len(calls) == 2


def test_warm_build_comes_from_the_caches(monkeypatch):
    program = EXAMPLES["splitk_rowsum"].build()
    cold = build_mod.build_kernel(program, "static", 8)
    assert {"prepare", "validate", "generate", "template", "compile"} <= set(cold.seconds)
    assert not cold.cached and cold.program == prepare(program, "static")
    assert cold.source == generate(cold.program, "static")
    assert cold.compiled.cubin[:4] == b"\x7fELF"
    queues = cold.template.instantiate({"n": 200})
    for name in ("prepare", "generate", "StaticTemplate", "validate"):
        monkeypatch.setattr(build_mod, name, lambda *a, **k: pytest.fail("not from the cache"))
    warm = build_mod.build_kernel(EXAMPLES["splitk_rowsum"].build(), "static", 8)
    assert warm.cached and set(warm.seconds) == {"wait", "total"}
    assert (warm.program, warm.source, warm.compiled.cubin) == (
        cold.program, cold.source, cold.compiled.cubin)
    for got, want in zip(warm.template.instantiate({"n": 200}), queues):
        assert (got == want).all()


def test_other_options_reuse_the_prepared_program(monkeypatch):
    program = EXAMPLES["splitk_rowsum"].build()
    build_mod.build_kernel(program, "static", 8)
    monkeypatch.setattr(build_mod, "prepare", lambda *a, **k: pytest.fail("prepared again"))
    other = build_mod.build_kernel(program, "static", 4, knobs={"ET_SPIN_NS": 50000})
    assert "generate" in other.seconds and "#define ET_SPIN_NS 50000" in other.source
    assert other.template.num_sms == 4


def test_cold_build_raises_the_validation_error():
    pb = ProgramBuilder("bad_count")
    pb.input("A", (4, 2))
    pb.output("o", (4, 1))
    pb.event("E", (4,), wait_count="k->3")  # one notify per element arrives, not 3
    pb.grid("p", "row_sum", "i", (4,), reads={"A": "i, :"}, writes={"o": "i, :"},
            notify={"E": "i->i"})
    pb.grid("c", "nop", "i", (4,), wait={"E": "i->i"})
    with pytest.raises(WaitCountError, match=r"wait count of event element E\[0\] can never "
                                             r"be reached: it waits for 3 notifies but "
                                             r"receives 1"):
        build_mod.build_kernel(pb.build(), "static", 4)


def test_fast_compile_level_is_its_own_cubin():
    program = EXAMPLES["splitk_rowsum"].build()
    full = build_mod.build_kernel(program, "static", 8)
    fast = build_mod.build_kernel(program, "static", 8, fast_compile="max")
    assert fast.source == full.source and not fast.compiled.cached
    assert fast.compiled.cubin[:4] == b"\x7fELF" and fast.compiled.cubin != full.compiled.cubin
    with pytest.raises(ValueError, match="fast_compile must be one of separate, min, mid, max "
                                         "or None, got 'fast'"):
        build_mod.build_kernel(program, "static", 8, fast_compile="fast")


def test_separately_assembled_functions_are_linked_into_their_own_cubin():
    """fast_compile="separate": NVRTC's PTX of the same source, every function assembled on
    its own and linked by nvJitLink: an executable cubin (not a relocatable object) holding
    the entry, unlike the whole-program one, and served from the cache the second time."""
    pytest.importorskip("cuda.bindings.nvjitlink", reason="nvJitLink not installed")
    program = EXAMPLES["splitk_rowsum"].build()
    whole = build_mod.build_kernel(program, "static", 8)
    separate = build_mod.build_kernel(program, "static", 8, fast_compile="separate")
    cubin = separate.compiled.cubin
    assert separate.source == whole.source and not separate.compiled.cached
    assert cubin[:4] == b"\x7fELF" and int.from_bytes(cubin[16:18], "little") == 2  # ET_EXEC
    assert separate.name.encode() in cubin and cubin != whole.compiled.cubin
    again = build_mod.build_kernel(program, "static", 8, fast_compile="separate")
    assert again.compiled.cached and again.compiled.cubin == cubin


def test_assembly_error_names_the_kernel():
    pytest.importorskip("cuda.bindings.nvjitlink", reason="nvJitLink not installed")
    from eventtensor.backends.cuda.compiler import CompileError, _link
    ptx = b".version 8.0\n.target sm_90a\n.address_size 64\n.entry k_bad() { bogus; }\n"
    with pytest.raises(CompileError, match=r"(?s)nvJitLink could not assemble kernel k_bad .*"
                                           r"known instruction: .bogus."):
        _link(ptx, "k_bad", "sm_90a")


def test_decode_program_comes_from_disk_the_second_time(monkeypatch):
    from eventtensor.models import gpu_decode
    cfg = get_config("tiny-llama")
    tiles = gpu_decode.gpu_tiles(cfg, 4)
    first = gpu_decode.decode_program_cached(cfg, 4, 32, tiles, max_tokens=4)
    assert first == build_decode_program(cfg, 4, 32, tiles, max_tokens=4)
    monkeypatch.setattr(gpu_decode, "build_decode_program",
                        lambda *a, **k: pytest.fail("not served from disk"))
    assert gpu_decode.decode_program_cached(cfg, 4, 32, tiles, max_tokens=4) == first
    with pytest.raises(pytest.fail.Exception, match="not served from disk"):  # other args
        gpu_decode.decode_program_cached(cfg, 4, 64, tiles, max_tokens=4)
