"""The printer emits Python that rebuilds the program exactly."""
import pytest

from eventtensor import run_pipeline
from eventtensor.examples import EXAMPLES, moe
from eventtensor.printer import from_python, to_python


@pytest.mark.parametrize("build", [e.build for e in EXAMPLES.values()] + [
    lambda: moe.build(16),
    lambda: EXAMPLES["symbolic_batch"].build().replace(events=(), edges=(), derive_events=True),
])
def test_round_trip_as_written_and_after_passes(build):
    p = build()
    for program in (p, run_pipeline(p)):
        text = to_python(program)
        again = from_python(text)
        assert again == program
        assert to_python(again) == text


def test_printed_source_is_readable():
    text = to_python(run_pipeline(EXAMPLES["splitk_rowsum"].build()))
    assert "n = pb.symbol('n', 1, 256)" in text
    assert "pb.event('E', (n,), wait_count='k->4')" in text
    assert "pb.notify('partial_sum', 'E', 'ij->i')" in text
    assert "'A': 'ij->(32*i):(32*i + 32), (32*j):(32*j + 32)'" in text


def test_round_trip_detects_a_difference():
    p = EXAMPLES["splitk_rowsum"].build()
    text = to_python(p).replace("'ij->i'", "'ij->(i//1)'").replace("(n, 4)", "(n, 2)")
    assert from_python(text) != p
