"""The command line: demo, run and print."""
import subprocess
import sys

from eventtensor.cli import main


def test_demo_runs_every_example(capsys):
    assert main(["demo", "--interleavings", "2", "--sms", "8"]) == 0
    out = capsys.readouterr().out
    for name in ("splitk_rowsum", "symbolic_batch", "toy_moe", "splitk_gemv_bf16"):
        assert f"== {name}" in out
    assert "B=64" in out and "dynamic" in out and "guarded" in out
    assert "all results match the numpy references: 112 interleavings checked" in out
    assert "persistent kernel" in out


def test_run_with_binding(capsys):
    assert main(["run", "symbolic_batch", "--binding", "B=5", "--mode", "dynamic",
                 "--sms", "3", "--interleavings", "3"]) == 0
    assert "B=5" in capsys.readouterr().out


def test_run_reports_symbol_out_of_range(capsys):
    assert main(["run", "splitk_rowsum", "--binding", "n=1000"]) == 1
    assert "symbol n = 1000 is out of its declared range [1, 256]" in capsys.readouterr().err


def test_malformed_binding_stops_the_parser(capsys):
    for text in ("B", "B=abc", "B=3,,n=2"):
        try:
            main(["run", "symbolic_batch", "--binding", text])
        except SystemExit as exit_:
            assert exit_.code == 2
        else:
            raise AssertionError(f"--binding {text} was taken")
        assert "is not NAME=INTEGER" in capsys.readouterr().err


def test_binding_of_an_unknown_symbol_names_the_symbols(capsys):
    assert main(["run", "symbolic_batch", "--binding", "Q=3"]) == 1
    assert "symbol B has no value (the symbols: B; not symbols: Q)" in capsys.readouterr().err


def test_print_emits_python(capsys):
    assert main(["print", "toy_moe", "--lowered"]) == 0
    assert "pb.trigger('expert_ready', 'expert_gemm'" in capsys.readouterr().out


def test_console_script_module_entry():
    r = subprocess.run([sys.executable, "-m", "eventtensor.cli", "print", "splitk_rowsum"],
                       capture_output=True, text=True, check=True)
    assert "def build():" in r.stdout


def test_dump_and_debug_make_every_stage_inspectable(tmp_path, monkeypatch, capsys):
    import numpy as np

    from eventtensor.examples import EXAMPLES
    from eventtensor.passes import PIPELINE
    from eventtensor.printer import from_python
    from eventtensor.schedule import lower
    monkeypatch.setenv("EVENTTENSOR_DUMP", str(tmp_path))
    monkeypatch.setenv("EVENTTENSOR_DEBUG", "1")
    t = lower(EXAMPLES["splitk_rowsum"].build(), {"n": 3}, "static", 4)
    d = tmp_path / "splitk_rowsum"
    passes = sorted(f.name for f in d.glob("*.py"))
    assert passes == [f"{i:02d}_{name}.py" for i, (name, _) in enumerate(PIPELINE)]
    assert from_python((d / "04_validate.py").read_text()) == t.program
    tables = np.load(d / "tables_static_n3.npz")
    np.testing.assert_array_equal(tables["queue_task"], t.queue_task)
    err = capsys.readouterr().err
    assert "[eventtensor] pass derive_wait_counts on splitk_rowsum" in err
    assert "[eventtensor] lowered splitk_rowsum at {'n': 3}: 15 tasks, static schedule" in err
