"""How IR dtypes are held in numpy on the CPU.

numpy has no bfloat16: a bfloat16 tensor is a float32 array whose values are all exactly
representable in bfloat16. Every value stored into one goes through `round_to_dtype`, which
rounds to nearest, ties to even (the rounding of CUDA's `cvt.rn.bf16.f32` and of torch), so
inputs given with more precision are rounded, not rejected.
"""
from __future__ import annotations

import numpy as np

NUMPY_DTYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": np.float32,
                "int32": np.int32, "int64": np.int64}
ELEMENT_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "int32": 4, "int64": 8}  # on the GPU


def numpy_dtype(name: str) -> type[np.generic]:
    """The numpy dtype that holds IR dtype `name` on the CPU."""
    return NUMPY_DTYPES[name]


def round_to_dtype(name: str, array) -> np.ndarray:
    """`array` as a new array of `numpy_dtype(name)` holding values of dtype `name`: float
    values rounded to nearest (ties to even), bfloat16 ones to 8 significant bits."""
    a = np.asarray(array)
    if name != "bfloat16":
        return a.astype(numpy_dtype(name))
    if a.dtype != np.float32:
        a = _to_float32_odd(a.astype(np.float64))
    return _float32_to_bfloat16(a)


def _to_float32_odd(a: np.ndarray) -> np.ndarray:
    """float64 to float32 rounded to odd (toward zero, lowest bit set when inexact): a second
    rounding of the result to bfloat16 then equals rounding `a` directly."""
    with np.errstate(over="ignore"):
        f = a.astype(np.float32)
    toward_zero = np.where(np.abs(f.astype(np.float64)) > np.abs(a),
                           np.nextafter(f, np.float32(0)), f)
    bits = toward_zero.view(np.uint32)
    inexact = (toward_zero.astype(np.float64) != a) & ~np.isnan(a)
    return (bits | inexact.astype(np.uint32)).view(np.float32)


def _float32_to_bfloat16(f: np.ndarray) -> np.ndarray:
    """float32 rounded to the nearest bfloat16 (ties to even; NaN becomes the quiet NaN), as
    float32."""
    bits = np.ascontiguousarray(f).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).astype(np.uint32)
    return np.where(np.isnan(f), np.float32(np.nan), rounded.view(np.float32).reshape(f.shape))
