"""bfloat16 on the CPU: the rounding helper against exact references, and the interpreter
rounding every bfloat16 tile it stores (inputs and task outputs)."""
import numpy as np
import pytest

from eventtensor import ProgramBuilder
from eventtensor.backends.cpu import run
from eventtensor.dtypes import numpy_dtype, round_to_dtype
from eventtensor.schedule import lower

# The positive finite bfloat16 values in bit order (bits 0 .. 0x7F7F), then 2^128: the value
# past the largest one, where rounding goes to infinity.
BF16_UP = np.append((np.arange(0x7F80, dtype=np.uint32) << 16).view(np.float32)
                    .astype(np.float64), 2.0 ** 128)


def nearest_bfloat16(x: np.ndarray) -> np.ndarray:
    """Independent reference: the nearest bfloat16 of each float64 value found by search among
    all of them (ties to the even bit pattern), as float32. Differences of neighbours are exact
    in float64 (Sterbenz)."""
    a = np.abs(x)
    lo = np.clip(np.searchsorted(BF16_UP, a, side="right") - 1, 0, 0x7F80)
    hi = np.minimum(lo + 1, 0x7F80)
    d_lo, d_hi = a - BF16_UP[lo], BF16_UP[hi] - a
    bits = np.where((d_hi < d_lo) | ((d_hi == d_lo) & (hi % 2 == 0)), hi, lo)
    mag = (bits.astype(np.uint32) << 16).view(np.float32)  # 0x7F80 << 16 is infinity
    out = np.copysign(mag, x).astype(np.float32)
    return np.where(np.isnan(x), np.float32(np.nan), out)


def same_values(got: np.ndarray, want: np.ndarray) -> None:
    """Equal as float32 bit patterns, any NaN matching any NaN."""
    assert got.dtype == np.float32 and got.shape == want.shape
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    np.testing.assert_array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32))


def float32_cases(rng) -> np.ndarray:
    """Random bit patterns (every class: zeros, subnormals, normals, inf, NaN), exact ties,
    values one float32 ulp either side of a tie, and edge values."""
    bits = rng.integers(0, 2 ** 32, 200_000, dtype=np.uint64).astype(np.uint32)
    ties = (bits & np.uint32(0xFFFF0000)) | np.uint32(0x8000)
    near = np.concatenate([ties - np.uint32(1), ties + np.uint32(1)])
    small = rng.integers(0, 0x10000, 20_000, dtype=np.uint32)        # float32 subnormals
    edge = np.array([0.0, -0.0, 1.0, 1 + 2 ** -8, 1 + 3 * 2 ** -8, -(1 + 2 ** -8), np.inf,
                     -np.inf, np.nan, 3.3895313892515355e38, 3.3961e38,
                     np.finfo(np.float32).max, np.finfo(np.float32).tiny,
                     np.finfo(np.float32).smallest_subnormal], np.float32)
    return np.concatenate([bits.view(np.float32), ties.view(np.float32),
                           near.view(np.float32), small.view(np.float32),
                           (small | np.uint32(0x80000000)).view(np.float32), edge])


def test_bfloat16_rounding_of_float32_matches_nearest_even():
    x = float32_cases(np.random.default_rng(0))
    with np.errstate(invalid="ignore"):  # signalling NaNs
        exact = x.astype(np.float64)
    same_values(round_to_dtype("bfloat16", x), nearest_bfloat16(exact))


def test_bfloat16_rounding_of_float64_rounds_once():
    """float64 values within a hair of a tie round as the exact value says, not as its float32
    rounding (which lands on the tie) would."""
    rng = np.random.default_rng(1)
    bits = rng.integers(0x0080, 0x7F7F, 50_000, dtype=np.uint32) | rng.choice([0, 0x8000], 50_000)
    ties = ((bits << 16) | 0x8000).astype(np.uint32).view(np.float32).astype(np.float64)
    x = np.concatenate([ties, ties * (1 + 2.0 ** -40), ties * (1 - 2.0 ** -40),
                        rng.standard_normal(50_000) * 10.0 ** rng.integers(-45, 39, 50_000),
                        [1e300, -1e300, 1e-300, -1e-300, 2.0 ** 128, np.inf, np.nan]])
    with np.errstate(over="ignore"):
        same_values(round_to_dtype("bfloat16", x), nearest_bfloat16(x))
    assert not np.array_equal(round_to_dtype("bfloat16", x[50_000:100_000]),
                              round_to_dtype("bfloat16", x[50_000:100_000].astype(np.float32)))


def test_bfloat16_rounding_keeps_shape_and_is_idempotent():
    x = np.random.default_rng(2).standard_normal((3, 5, 7)).astype(np.float32)[:, ::2]
    once = round_to_dtype("bfloat16", x)
    assert once.shape == x.shape and once.dtype == numpy_dtype("bfloat16") == np.float32
    same_values(round_to_dtype("bfloat16", once), once)
    assert round_to_dtype("bfloat16", np.float64(1 + 2 ** -8)).shape == ()
    assert round_to_dtype("int32", np.array([3.0])).dtype == np.int32


@pytest.mark.parametrize("lib", ["torch", "ml_dtypes"])
def test_bfloat16_rounding_matches_library(lib):
    mod = pytest.importorskip(lib)
    x = float32_cases(np.random.default_rng(3))
    with np.errstate(invalid="ignore"):  # signalling NaNs
        if lib == "torch":
            want = mod.from_numpy(x).to(mod.bfloat16).float().numpy()
        else:
            want = x.astype(mod.bfloat16).astype(np.float32)
    same_values(round_to_dtype("bfloat16", x), want)


def bf16_rowsum_program():
    """row_sum of a float32 input into a bfloat16 output, and of a bfloat16 input."""
    pb = ProgramBuilder("bf16_rowsum")
    pb.input("A", (4, 2))
    pb.input("Ab", (4, 2), "bfloat16")
    pb.output("out", (4, 1), "bfloat16")
    pb.output("outb", (4, 1))
    pb.grid("rs", "row_sum", "i", (4,), reads={"A": "i, :"}, writes={"out": "i, :"})
    pb.grid("rsb", "row_sum", "i", (4,), reads={"Ab": "i, :"}, writes={"outb": "i, :"})
    return pb.build()


@pytest.mark.parametrize("mode", ["static", "dynamic"])
def test_interpreter_rounds_bfloat16_inputs_and_tiles(mode):
    a = np.array([[1.0, 2 ** -8], [1.0, 3 * 2 ** -8], [1.0, 5 * 2 ** -9], [-1.0, -2 ** -8]])
    res = run(lower(bf16_rowsum_program(), {}, mode, 2), {"A": a, "Ab": a}, seed=0)
    # ties go to the even neighbour: 1 + 2^-8 -> 1, 1 + 3 * 2^-8 -> 1 + 2^-6
    np.testing.assert_array_equal(res.tensors["out"][:, 0],
                                  [1.0, 1 + 2 ** -6, 1 + 2 ** -7, -1.0])
    assert res.tensors["out"].dtype == np.float32
    np.testing.assert_array_equal(res.tensors["Ab"], round_to_dtype("bfloat16", a))
    np.testing.assert_array_equal(res.tensors["outb"][:, 0],
                                  round_to_dtype("bfloat16", a).astype(np.float32).sum(1))
