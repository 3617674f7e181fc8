"""The pure parts of benchmarks/kernel_size_bench.py: knob texts and the per-function
instruction counts of nvdisasm's output."""
import runpy
from pathlib import Path

import pytest

BENCH = runpy.run_path(str(Path(__file__).resolve().parents[2] / "benchmarks" /
                           "kernel_size_bench.py"), run_name="kernel_size_bench")

SASS = """
        .text.k
        .global         k
k:
        /*0000*/                   LDC R1, c[0x0][0x28] ;
        /*0010*/                   EXIT ;
.L_x_0:
        /*0020*/                   BRA `(.L_x_0) ;
$k$_Z4bodyv:
        /*0030*/                   MOV R2, R3 ;
$__internal_0_$__cuda_sm20_rem_s64:
        /*0040*/                   RET.REL.NODEC R20 `(k) ;
"""


def test_instructions_are_counted_per_function_labels_not_branch_targets():
    assert BENCH["instructions_by_function"](SASS) == {
        "k": 3, "_Z4bodyv": 1, "__cuda_sm20_rem_s64": 1}


def test_knob_texts_parse_and_name_bad_items():
    assert BENCH["parse_knobs"]("") == {}
    assert BENCH["parse_knobs"]("ET_PREFETCH_NEXT=1, ET_LINEAR_MMA=8") == {
        "ET_PREFETCH_NEXT": 1, "ET_LINEAR_MMA": 8}
    with pytest.raises(SystemExit, match="'rows=4' is not ET_NAME=N"):
        BENCH["parse_knobs"]("rows=4")
