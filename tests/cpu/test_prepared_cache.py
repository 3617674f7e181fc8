"""The disk cache of prepared programs: the same program as `prepare`, served from disk on
the second call, recomputed when the entry is unreadable or the program differs."""
import pytest

from eventtensor.backends.cuda import prepared
from eventtensor.models import get_config
from eventtensor.models.decode import build_decode_program
from eventtensor.schedule import prepare


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EVENTTENSOR_CACHE", str(tmp_path))


def _program(layers=1):
    return build_decode_program(get_config("tiny-qwen3").replace(num_layers=layers), 4, 32)


@pytest.mark.parametrize("mode", ["static", "unfused"])
def test_second_prepare_comes_from_disk(tmp_path, monkeypatch, mode):
    p = _program()
    first = prepared.prepare_cached(p, mode)
    assert first == prepare(p, mode)
    monkeypatch.setattr(prepared, "prepare", lambda *a: pytest.fail("not served from disk"))
    assert prepared.prepare_cached(_program(), mode) == first


def test_other_programs_and_broken_entries_are_prepared_again(tmp_path, monkeypatch):
    prepared.prepare_cached(_program(), "static")
    calls = []
    real = prepared.prepare
    monkeypatch.setattr(prepared, "prepare", lambda *a: calls.append(a) or real(*a))
    two = prepared.prepare_cached(_program(layers=2), "static")
    assert len(calls) == 1 and len(two.grids) > len(prepare(_program(), "static").grids)
    for entry in tmp_path.glob("prepared-*.pickle"):
        entry.write_bytes(b"not a pickle")
    assert prepared.prepare_cached(_program(), "static") == prepare(_program(), "static")
    assert len(calls) == 2
