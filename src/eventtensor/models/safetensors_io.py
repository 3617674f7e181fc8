"""Reading and writing `.safetensors` files with numpy alone, bfloat16 included.

The format: an 8-byte little-endian header length N, N bytes of JSON mapping each tensor name
to `{"dtype", "shape", "data_offsets": [begin, end]}` (offsets into the data section after the
header; an optional `"__metadata__"` entry of strings), then the little-endian tensor bytes.
numpy has no bfloat16, so bfloat16 tensors are read as their 16-bit patterns and widened to
float32 exactly (the bits become the high half of a float32); float16 widens exactly too.
"""
from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..dtypes import round_to_dtype

# safetensors dtype tag -> numpy dtype of the stored bits (bfloat16 as its 16-bit patterns)
STORED: dict[str, np.dtype] = {"F32": np.dtype("<f4"), "F16": np.dtype("<f2"),
                               "BF16": np.dtype("<u2")}
TAGS = {"float32": "F32", "float16": "F16", "bfloat16": "BF16"}
MAX_HEADER_BYTES = 100 << 20


class SafetensorsError(ValueError):
    """A `.safetensors` file is malformed; the message names the file (and tensor)."""


@dataclass(frozen=True)
class TensorInfo:
    """One tensor's entry in a file header: dtype tag, shape, byte range in the file."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int


def read_header(path: str | Path) -> dict[str, TensorInfo]:
    """The tensors of file `path` by name, with absolute byte offsets, after checking that
    every byte range lies in the file and matches its dtype and shape (dtype tags other than
    F32/F16/BF16 are returned as they are, for the caller to reject)."""
    path = Path(path)
    size = path.stat().st_size
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) < 8:
            raise SafetensorsError(f"{path.name}: too short for a safetensors file")
        (n,) = struct.unpack("<Q", raw)
        if n > min(size - 8, MAX_HEADER_BYTES):
            raise SafetensorsError(f"{path.name}: header length {n} exceeds the file")
        try:
            header = json.loads(f.read(n))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise SafetensorsError(f"{path.name}: header is not JSON ({e})") from None
    if not isinstance(header, dict):
        raise SafetensorsError(f"{path.name}: header is not a JSON object")
    start, out = 8 + n, {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            tag, shape = entry["dtype"], tuple(int(s) for s in entry["shape"])
            begin, end = (int(o) for o in entry["data_offsets"])
        except (KeyError, TypeError, ValueError):
            raise SafetensorsError(f"{path.name}: tensor {name!r} has a malformed header "
                                   f"entry {entry!r}") from None
        if not 0 <= begin <= end <= size - start:
            raise SafetensorsError(f"{path.name}: tensor {name!r} data_offsets "
                                   f"[{begin}, {end}] lie outside the file")
        if tag in STORED and end - begin != math.prod(shape) * STORED[tag].itemsize:
            raise SafetensorsError(f"{path.name}: tensor {name!r} has {end - begin} bytes, "
                                   f"not the {math.prod(shape)} {tag} values of shape {shape}")
        out[name] = TensorInfo(name, tag, shape, start + begin, start + end)
    return out


def read_tensor(path: str | Path, info: TensorInfo) -> np.ndarray:
    """Tensor `info` of file `path` as a new float32 array holding exactly the stored values
    (dtype F32, F16 or BF16)."""
    stored = STORED[info.dtype]
    count = (info.end - info.begin) // stored.itemsize
    bits = np.fromfile(path, dtype=stored, count=count, offset=info.begin)
    if info.dtype == "BF16":
        out = (bits.astype(np.uint32) << 16).view(np.float32)
    else:
        out = bits.astype(np.float32)
    return out.reshape(info.shape)


def encode(array: np.ndarray, dtype: str) -> np.ndarray:
    """`array` as the little-endian array of dtype `dtype` ("float32", "float16" or
    "bfloat16", values rounded to nearest even) whose bytes the file stores."""
    a = np.asarray(array)
    if dtype == "bfloat16":
        bits = round_to_dtype("bfloat16", a.astype(np.float32)).view(np.uint32) >> 16
        return bits.astype("<u2")
    return a.astype(STORED[TAGS[dtype]])


def write_file(path: str | Path, tensors: dict[str, np.ndarray], dtype: str,
               metadata: dict[str, str] | None = None) -> int:
    """Write `tensors` (in the given order) to `path` in `dtype`; returns the bytes of tensor
    data written. The header is padded with spaces to a multiple of 8 bytes."""
    tag = TAGS[dtype]
    encoded = {name: encode(a, dtype) for name, a in tensors.items()}
    header: dict[str, object] = {"__metadata__": dict(metadata or {"format": "pt"})}
    offset = 0
    for name, a in encoded.items():
        header[name] = {"dtype": tag, "shape": list(a.shape),
                        "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for a in encoded.values():
            f.write(np.ascontiguousarray(a).data)
    return offset
