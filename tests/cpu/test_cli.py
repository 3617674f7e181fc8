"""The command line: demo, run and print."""
import subprocess
import sys

from eventtensor.cli import main


def test_demo_runs_every_example(capsys):
    assert main(["demo", "--interleavings", "2", "--sms", "8"]) == 0
    out = capsys.readouterr().out
    for name in ("splitk_rowsum", "symbolic_batch", "toy_moe"):
        assert f"== {name}" in out
    assert "B=64" in out and "dynamic" in out and "guarded" in out
    assert "all results match the numpy references: 80 interleavings checked" in out
    assert "persistent kernel" in out


def test_run_with_binding(capsys):
    assert main(["run", "symbolic_batch", "--binding", "B=5", "--mode", "dynamic",
                 "--sms", "3", "--interleavings", "3"]) == 0
    assert "B=5" in capsys.readouterr().out


def test_run_reports_symbol_out_of_range(capsys):
    assert main(["run", "splitk_rowsum", "--binding", "n=1000"]) == 1
    assert "symbol n = 1000 is out of its declared range [1, 256]" in capsys.readouterr().err


def test_print_emits_python(capsys):
    assert main(["print", "toy_moe", "--lowered"]) == 0
    assert "pb.trigger('expert_ready', 'expert_gemm'" in capsys.readouterr().out


def test_console_script_module_entry():
    r = subprocess.run([sys.executable, "-m", "eventtensor.cli", "print", "splitk_rowsum"],
                       capture_output=True, text=True, check=True)
    assert "def build():" in r.stdout
