"""The dense decode bodies of llm_dense.cuh (embedding, rms_norm, linear_partial,
norm_linear_partial, residual_add, residual_add_sumsq, residual_rms_norm, silu_mul,
argmax_partial, argmax_reduce) against the kinds' numpy references
in eventtensor.ops.llm, compiled for the host (cuda_host.py: a host thread per CUDA thread,
so a skipped barrier or shuffle hangs the run), and the header compiled for sm_90a by nvcc.

All cases run in one host program: their tensors lie in one binary file (each 64-byte
aligned, bf16 as raw bits), which the program reads, runs every case's body on and writes
back. Cases take each fast path (16-byte words, groups of 4 columns, every row-block size of
the streaming linear path, chunked x staging, several column passes) and the generic paths
(unaligned starts, odd extents, index vectors, rank-3 outputs); out elements outside a tile
must keep their sentinel."""
import re
import shutil
import subprocess
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pytest
from cuda_host import needs_cxx, run_host

from eventtensor.backends.cuda.compiler import INCLUDE
from eventtensor.dtypes import round_to_dtype
from eventtensor.ops.registry import KINDS, TaskContext

F, B, INT = "float32", "bfloat16", "int32"
SENTINEL = 1000.0
HEADERS = ("llm_common.cuh", "llm_dense.cuh")

# host stand-ins of the device intrinsics the header uses beyond cuda_host.SHIM
PRELUDE = r"""
inline int __shfl_xor_sync(unsigned mask, int v, int o) {
    float f;
    std::memcpy(&f, &v, 4);
    f = __shfl_xor_sync(mask, f, o);
    std::memcpy(&v, &f, 4);
    return v;
}
inline float rsqrtf(float v) { return 1.f / std::sqrt(v); }
static bool et_host_staged = false;  // whether the case's tiles count as staged (shared)
inline bool __isShared(const void*) { return et_host_staged; }
static int et_host_mma_rows = 0;  // the case's ET_LINEAR_MMA (0: no tensor-core path)
#define ET_LINEAR_MMA et_host_mma_rows
#define ET_LINEAR_MMA_BUILT 1
"""


@dataclass
class Tile:
    """Region from `lo` of extents `n` of a tensor of `shape`; a dimension in `idx` selects
    the positions idx[d] instead (lo[d] must then be 0)."""
    shape: tuple
    lo: tuple
    n: tuple
    dtype: str = F
    idx: dict = field(default_factory=dict)

    def positions(self):
        return [np.asarray(self.idx[d]) if d in self.idx else np.arange(lo, lo + n)
                for d, (lo, n) in enumerate(zip(self.lo, self.n))]

    def region(self, a):
        return a[np.ix_(*self.positions())]


def normal(rng, shape):
    return rng.standard_normal(shape)


@dataclass
class Case:
    """One body call: input tiles by role, then output tiles by role (the call's order),
    then `args`; `params` and `coords` complete the reference's TaskContext; `data` makes
    an input's tensor (default: standard normal)."""
    kind: str
    ins: dict
    outs: dict
    args: tuple = ()
    params: dict = field(default_factory=dict)
    coords: dict = field(default_factory=dict)
    data: dict = field(default_factory=dict)
    staged: bool = False  # its tiles as if in shared memory (the stage ring)
    mma: int = 0  # ET_LINEAR_MMA: the fewest rows the tensor-core path takes (0: none)


def linear(n, k, c, wdt=B, x_lo=(0, 0), w_shape=None, w_lo=(0, 0), out=None, staged=False,
           x_cols=3, mma=0, **kw):
    """linear_partial of x rows [n, k] (from x_lo of a [n + x_lo[0], k + x_lo[1] + x_cols]
    tensor) and w [c, k] (from w_lo of w_shape, with `staged` as if in shared memory); out
    [n, c], or the Tile given; `mma`: the case's ET_LINEAR_MMA."""
    x = Tile((n + x_lo[0], k + x_lo[1] + x_cols), x_lo, (n, k), **kw)
    w = Tile(w_shape or (c + w_lo[0], k + w_lo[1]), w_lo, (c, k), wdt)
    return Case("linear_partial", {"x": x, "w": w}, {"out": out or Tile((n, c), (0, 0), (n, c))},
                staged=staged, mma=mma)


def rows_case(kind, roles, n, cols, splits=(1, 1), lo=(0, 0), dtypes=(F, F), **data):
    """An elementwise kind on [n, cols] rows from `lo`: input roles with split counts (None:
    no split axis), the out tile [n, cols] of a tensor one row and 4 columns wider."""
    ins = {}
    for role, s, dt in zip(roles, splits, dtypes):
        shape, start, ext = (n + lo[0] + 1, cols + lo[1] + 4), lo, (n, cols)
        if s is not None:
            shape, start, ext = (s, *shape), (0, *start), (s, *ext)
        ins[role] = Tile(shape, start, ext, dt)
    out = Tile((n + lo[0] + 1, cols + lo[1] + 4), lo, (n, cols))
    return Case(kind, ins, {"out": out}, data=data)


def rms(n, E, lo=(0, 0), wdt=B, out_dt=F):
    x = Tile((n + lo[0] + 2, E + lo[1] + 4), lo, (n, E))
    out = Tile((n + 2, E + 8), (1, 4), (n, E), out_dt)
    return Case("rms_norm", {"x": x, "w": Tile((E,), (0,), (E,), wdt)}, {"out": out},
                args=("1e-5f",), params={"eps": 1e-5})


def add_norm(n, E, S, lo=(0, 0), wdt=B):
    """residual_rms_norm of rows x [n, E] (from lo) plus S partials: out and h tiles of
    tensors one row and 4 columns wider (h at another place)."""
    case = rows_case("residual_rms_norm", ("x", "parts"), n, E, (None, S), lo=lo)
    case.ins["w"] = Tile((E,), (0,), (E,), wdt)
    case.outs["h"] = Tile((n + 2, E + 8), (1, 4), (n, E))
    case.args, case.params = ("1e-5f",), {"eps": 1e-5}
    return case


def norm_linear(n, k, c, T, cols=2048, wdt=B, x_lo=(0, 0), x_cols=3, mma=0):
    """norm_linear_partial: x rows [n, k] (from x_lo of a tensor x_cols columns wider), the
    sums of squares ss [n, T] of their T residual tiles (positive, about cols / T each: rms
    near 1), the norm weight's slice [k] and w [c, k]; `mma`: the case's ET_LINEAR_MMA."""
    x = Tile((n + x_lo[0], k + x_lo[1] + x_cols), x_lo, (n, k))
    ss = Tile((n + 1, T + 2), (1, 1), (n, T))
    return Case("norm_linear_partial",
                {"x": x, "ss": ss, "norm_w": Tile((k + 8,), (8,), (k,), wdt),
                 "w": Tile((c, k), (0, 0), (c, k), wdt)},
                {"out": Tile((n, c), (0, 0), (n, c))}, args=("1e-5f", str(cols)),
                params={"eps": 1e-5, "cols": cols}, mma=mma,
                data={"ss": lambda rng, shape: (0.5 + rng.random(shape)) * cols / T})


def silu_linear(n, k, c, S, wdt=B, lo=(0, 0), mma=0, up_cols=4, **data):
    """silu_linear_partial: gate and up partials [S, n, k] (S None: [n, k]) from lo of
    tensors one row and 4 columns wider (up `up_cols` wider: with another than 4, another
    layout than gate's), w [c, k], out [n, c]; `mma`: the case's ET_LINEAR_MMA."""
    def part(extra):
        shape, start, ext = (n + lo[0] + 1, k + lo[1] + extra), lo, (n, k)
        if S is not None:
            shape, start, ext = (S, *shape), (0, *start), (S, *ext)
        return Tile(shape, start, ext)
    return Case("silu_linear_partial", {"gate": part(4), "up": part(up_cols),
                                        "w": Tile((c, k), (0, 0), (c, k), wdt)},
                {"out": Tile((n, c), (0, 0), (n, c))}, mma=mma, data=data)


def add_sumsq(n, cols, S, lo=(0, 0)):
    """residual_add_sumsq of rows [n, cols] (from lo) plus S partials: the out tile and the
    sums of squares ss [n, 1] at column 1 of a [n + 1, 3] tensor."""
    case = rows_case("residual_add_sumsq", ("x", "parts"), n, cols, (None, S), lo=lo)
    case.outs["ss"] = Tile((n + 1, 3), (0, 1), (n, 1))
    return case


def ties(rng, shape):  # small integers: many ties, negatives
    return rng.integers(-6, 3, shape).astype(np.float64)


def with_nan(rng, shape):  # row 0 all NaN, row 1 NaN and -inf around a max, the rest ties
    a = ties(rng, shape)
    a[0] = np.nan
    if len(a) > 1:
        a[1] = -np.inf
        a[1, ::3] = np.nan
        a[1, -2] = -5.0
    return a


def argmax_partial(n, V, tile, index, B_rows=None, r0=0, data=ties):
    """argmax_partial of logit rows [n, V'] of tile `index` (width `tile`) of [rows, V]."""
    rows = B_rows or n + r0
    width = min(tile, V - tile * index)
    tiles = -(-V // tile)
    return Case("argmax_partial",
                {"x": Tile((rows, V), (r0, tile * index), (n, width))},
                {"max": Tile((rows, tiles), (r0, index), (n, 1)),
                 "arg": Tile((rows, tiles), (r0, index), (n, 1), INT)},
                args=(str(tile), str(index)), params={"tile": tile, "axis": "n"},
                coords={"n": index}, data={"x": data})


def argmax_reduce(n, tiles, r0=0):
    return Case("argmax_reduce",
                {"x": Tile((n + r0, tiles), (r0, 0), (n, tiles)),
                 "arg": Tile((n + r0, tiles), (r0, 0), (n, tiles), INT)},
                {"out": Tile((n + r0 + 1,), (r0,), (n,), INT)},
                data={"x": ties, "arg": lambda rng, s: rng.integers(0, 150000, s)})


def silu_big(rng, shape):  # magnitudes up to 1000: exp(-g) overflows for g < -88
    return rng.standard_normal(shape) * np.array([1.0, 30.0, 300.0, 1000.0])[
        rng.integers(0, 4, shape)]


CASES = [
    # embedding: gathered rows (16-byte words), float tables, bf16 out, unaligned (per element)
    Case("embedding", {"row": Tile((50, 64), (0, 0), (1, 64), B, idx={0: [7]})},
         {"out": Tile((4, 64), (2, 0), (1, 64))}),
    Case("embedding", {"row": Tile((9, 4096), (0, 0), (3, 4096), B, idx={0: [8, 0, 8]})},
         {"out": Tile((3, 4096), (0, 0), (3, 4096))}),
    Case("embedding", {"row": Tile((5, 72), (3, 0), (1, 72), B)},
         {"out": Tile((2, 80), (1, 8), (1, 72))}),
    Case("embedding", {"row": Tile((6, 40), (0, 0), (1, 40), idx={0: [5]})},
         {"out": Tile((1, 40), (0, 0), (1, 40))}),
    Case("embedding", {"row": Tile((6, 48), (1, 0), (1, 48), B)},
         {"out": Tile((1, 48), (0, 0), (1, 48), B)}),
    Case("embedding", {"row": Tile((10, 40), (2, 3), (1, 30), B)},
         {"out": Tile((1, 33), (0, 1), (1, 30))}),
    # rms_norm: one row over the whole CTA, a few rows, a warp per row, unaligned, odd E
    rms(1, 4096), rms(2, 256), rms(3, 256), rms(16, 256), rms(17, 128), rms(64, 64),
    rms(1, 512, wdt=F), rms(5, 256, out_dt=B),
    rms(3, 66, lo=(1, 1)), rms(2, 66), rms(4, 100, lo=(0, 2)),
    # a warp a row of 2048 columns (16 groups of 4 a lane: one chunk of loads), of 2052 (a
    # second chunk of one group) and of 4104 (three chunks)
    rms(8, 2048), rms(9, 2052), rms(16, 4104),
    # linear_partial, streaming path: each row block (1, 2, 4, 8, 16), two x chunks, clipped
    # tiles, several column passes, 17 and 64 rows, split-K chunks of x and w, float weights
    linear(1, 4096, 128), linear(2, 512, 96), linear(3, 512, 128), linear(4, 256, 300),
    linear(7, 1024, 64), linear(8, 8192, 32), linear(13, 256, 128), linear(16, 1024, 256),
    linear(17, 128, 128), linear(64, 64, 200), linear(2, 72, 40), linear(1, 8, 5),
    linear(5, 256, 72, x_lo=(2, 256), w_shape=(200, 1024), w_lo=(128, 512)),
    linear(4, 256, 64, F), linear(16, 320, 40, F), linear(1, 2000, 33, F),
    linear(3, 64, 256, out=Tile((2, 3, 300), (1, 0, 44), (1, 3, 256))),
    # one row, k of at most 16 words (256-row passes, x staged once for all passes), and
    # one row over two x chunks with several passes (x restaged per pass)
    linear(1, 128, 600), linear(1, 64, 256, x_lo=(0, 64), w_shape=(256, 256), w_lo=(0, 128)),
    linear(1, 4096, 300), linear(4, 128, 520),
    # 2 and 8 rows: passes of 256 and 128 weight rows, x staged once for all of them
    linear(2, 256, 520), linear(6, 128, 300),
    # linear_partial, staged weights (et_linear_staged): rows of one word to 8192 columns
    # (P from 1 to 256 threads a row), whole passes and a clipped one, one and two rows,
    # float weights, a rank-3 out; x rows 16-byte aligned (x_cols 4)
    *(linear(n, k, c, staged=True, x_cols=4, **kw) for n, k, c, kw in (
        (1, 2048, 16, {}), (1, 8192, 16, {}), (2, 2048, 24, {}), (1, 128, 256, {}),
        (2, 512, 70, {}), (1, 8, 5, {}), (1, 256, 300, {}), (2, 64, 33, {"wdt": F}),
        (1, 1024, 40, {"out": Tile((2, 3, 60), (1, 1, 4), (1, 1, 40))}))),
    # linear_partial on tensor cores (et_linear_mma, from 8 rows; x rows 16-byte aligned:
    # x_cols 4): 1, 2 and 4 row tiles of 16, clipped rows and column tiles, two blocks of 64
    # rows, a split-K slice of x and w, k of 10 blocks (chunks cut short), a rank-3 out, more
    # columns than a pass takes (256), k of 2.5 chunks at 4 row tiles; below the threshold,
    # bf16 x (not float) and k not a multiple of 32, the CUDA-core paths
    *(linear(n, k, c, x_cols=4, mma=8, **kw) for n, k, c, kw in (
        (16, 256, 64, {}), (8, 512, 40, {}), (17, 128, 24, {}), (64, 64, 200, {}),
        (33, 96, 8, {}), (70, 32, 16, {}), (13, 64, 36, {"x_lo": (1, 64)}),
        (16, 128, 72, {"w_shape": (100, 512), "w_lo": (8, 256)}), (20, 320, 136, {}),
        (9, 32, 24, {"out": Tile((2, 10, 30), (1, 1, 4), (1, 9, 24))}),
        (16, 64, 300, {}), (40, 96, 264, {}), (48, 160, 40, {}),
        (4, 128, 32, {}), (16, 64, 32, {"dtype": B}), (16, 48, 32, {}))),
    # linear_partial, lane groups (et_dot2): k not a multiple of 8, unaligned weight rows
    linear(5, 100, 48), linear(3, 64, 20, w_lo=(0, 4)), linear(2, 37, 16, F),
    linear(17, 30, 24, w_shape=(24, 31)),
    # linear_partial, per cell: an index vector on x's rows
    Case("linear_partial",
         {"x": Tile((6, 40), (0, 0), (3, 40), idx={0: [4, 1, 4]}),
          "w": Tile((10, 40), (0, 0), (10, 40), B)},
         {"out": Tile((1, 3, 10), (0, 0, 0), (1, 3, 10))}),
    # residual_add: S = 1, 4, 12 partials; no split axis; bf16 x; unaligned; 64 rows
    rows_case("residual_add", ("x", "parts"), 1, 4096, (None, 1)),
    rows_case("residual_add", ("x", "parts"), 3, 256, (None, 4)),
    rows_case("residual_add", ("x", "parts"), 16, 128, (None, 12)),
    rows_case("residual_add", ("x", "parts"), 17, 64, (None, None), dtypes=(B, F)),
    rows_case("residual_add", ("x", "parts"), 64, 32, (None, 2)),
    rows_case("residual_add", ("x", "parts"), 3, 66, (None, 4), lo=(1, 1)),
    # ... lead groups (few rows, many partials): 4 groups of 8, 3 groups of 7, 7, 6 leads
    rows_case("residual_add", ("x", "parts"), 1, 256, (None, 32)),
    rows_case("residual_add", ("x", "parts"), 2, 128, (None, 20)),
    # residual_rms_norm: one row over the CTA, 3 and 17 rows, float weights, unaligned
    add_norm(1, 2048, 8), add_norm(3, 256, 4), add_norm(17, 128, 2, wdt=F),
    add_norm(2, 66, 3, lo=(1, 1)), add_norm(1, 512, 32),
    # norm_linear_partial: the streaming path (one row, row blocks of 16 and 1, K-slices of
    # x, float weights, K-slices of 1024 and 2048, more than 32 sums a row, more rows of sums
    # than one round of the CTA's threads loads), the per-cell path (k not whole words, rows
    # past ET_NORM_ROWS)
    norm_linear(1, 128, 256, 8), norm_linear(3, 512, 96, 2, x_lo=(1, 512)),
    norm_linear(1, 128, 32, 40), norm_linear(40, 64, 24, 8),
    norm_linear(17, 128, 64, 4), norm_linear(2, 256, 40, 8, wdt=F, cols=256),
    norm_linear(1, 1024, 16, 2), norm_linear(3, 2048, 40, 8, x_lo=(1, 2048), cols=4096),
    norm_linear(5, 100, 48, 4), norm_linear(65, 64, 8, 1),
    # ... on tensor cores (from 8 rows, x rows 16-byte aligned): 1, 2 and 4 row tiles of 16,
    # clipped rows, k of 2.5 chunks, a K-slice of x from column 512, more columns than a pass,
    # K-slices of 1024 and 2048
    *(norm_linear(n, k, c, T, x_cols=4, mma=8, **kw) for n, k, c, T, kw in (
        (16, 128, 64, 8, {}), (20, 320, 40, 4, {}), (64, 512, 32, 8, {}),
        (9, 128, 24, 2, {"x_lo": (2, 512)}), (40, 96, 264, 4, {}), (16, 1024, 40, 8, {}),
        (33, 2048, 24, 4, {"x_lo": (0, 2048), "cols": 4096}))),
    # silu_linear_partial: the streaming path (one row over 2 and 4 partials, in one and in
    # several steps, several passes; row blocks of 4 and 16, clipped, unaligned; float
    # weights; one partial, no split axis; large gates), the per-cell path (up in another
    # layout), the tensor-core path (1, 2 and 4 row tiles of 16, clipped, unaligned rows)
    silu_linear(1, 1024, 64, 2), silu_linear(1, 128, 256, 4), silu_linear(3, 512, 40, 2,
                                                                         lo=(1, 8)),
    silu_linear(17, 128, 16, 2), silu_linear(2, 256, 40, 2, wdt=F), silu_linear(2, 64, 8, None),
    silu_linear(1, 256, 32, 2, gate=silu_big), silu_linear(3, 40, 24, 2, up_cols=6),
    *(silu_linear(n, k, c, S, mma=8, **kw) for n, k, c, S, kw in (
        (16, 128, 64, 2, {}), (40, 256, 24, 4, {}), (9, 96, 40, 2, {"lo": (2, 0)}),
        (64, 512, 32, 2, {}))),
    # residual_add_sumsq: one row over the CTA, a tile of 256 columns, 8 and 17 rows (the
    # squares kept in the scratch), unaligned and more units than the scratch holds (out read
    # back)
    add_sumsq(1, 2048, 8), add_sumsq(1, 256, 16), add_sumsq(8, 256, 4),
    add_sumsq(17, 64, 2), add_sumsq(2, 66, 3, lo=(1, 1)), add_sumsq(1, 256, 32),
    add_sumsq(3, 2048, 2),
    # silu_mul: S = 1, 4, large |gate| (no NaN), unaligned, bf16 partials
    rows_case("silu_mul", ("gate", "up"), 1, 256, gate=silu_big),
    rows_case("silu_mul", ("gate", "up"), 16, 128, (4, 4), gate=silu_big),
    rows_case("silu_mul", ("gate", "up"), 17, 64, (1, 1), dtypes=(B, B), gate=silu_big),
    rows_case("silu_mul", ("gate", "up"), 3, 30, (4, 4), lo=(2, 3), gate=silu_big),
    rows_case("silu_mul", ("gate", "up"), 1, 64, (12, 9), gate=silu_big),  # lead groups
    # argmax_partial: ties, negatives, clipped last tile, one row over the CTA, NaN rows
    argmax_partial(1, 3000, 1024, 2), argmax_partial(1, 1500, 1500, 0),
    argmax_partial(3, 1000, 256, 3), argmax_partial(16, 512, 256, 1, r0=16),
    argmax_partial(17, 300, 256, 0), argmax_partial(64, 100, 64, 1),
    argmax_partial(5, 700, 256, 2, data=normal),
    argmax_partial(3, 256, 256, 0, data=with_nan), argmax_partial(2, 40, 40, 0, data=with_nan),
    # argmax_reduce: ties across tiles, one row over the CTA, many rows
    argmax_reduce(1, 2000), argmax_reduce(3, 600, r0=2), argmax_reduce(16, 70),
    argmax_reduce(17, 9), argmax_reduce(64, 3),
]


def ctype(dtype):
    return {F: "float", B: "et_bf16", INT: "int"}[dtype]


def encode(dtype, a):
    if dtype == B:
        return (np.asarray(a, np.float32).view(np.uint32) >> 16).astype(np.uint16).tobytes()
    return np.asarray(a, np.int32 if dtype == INT else np.float32).tobytes()


def decode(dtype, raw, shape):
    if dtype == B:
        bits = np.frombuffer(raw, np.uint16).astype(np.uint32) << 16
        return bits.view(np.float32).reshape(shape)
    return np.frombuffer(raw, np.int32 if dtype == INT else np.float32).reshape(shape)


class Layout:
    """The tensors of all cases in one buffer, each at a 64-byte aligned offset."""

    def __init__(self):
        self.parts, self.size = [], 0

    def add(self, dtype, a) -> int:
        raw = encode(dtype, a)
        at = self.size
        self.parts.append(raw + b"\0" * (-len(raw) % 64))
        self.size += len(self.parts[-1])
        return at


def c_tile(name, t: Tile, at: int) -> list[str]:
    r = len(t.shape)
    idx = ", ".join(f"{name}_i{d}" if d in t.idx else "nullptr" for d in range(r))
    lines = [f"static const int {name}_i{d}[] = {{{', '.join(map(str, p))}}};"
             for d, p in t.idx.items()]
    return lines + [
        f"const long long {name}_s[] = {{{', '.join(map(str, t.shape))}}};",
        f"const long long {name}_l[] = {{{', '.join(map(str, t.lo))}}};",
        f"const long long {name}_n[] = {{{', '.join(map(str, t.n))}}};",
        f"const int* const {name}_x[] = {{{idx}}};",
        f"const EtTileT<{ctype(t.dtype)}> {name} = et_tile(({ctype(t.dtype)}*)(D + {at}), {r}, "
        f"{name}_s, {name}_l, {name}_n, {name}_x);"]


def make_inputs(case: Case, rng):
    vals = {}
    for role, t in case.ins.items():
        a = case.data.get(role, normal)(rng, t.shape)
        vals[role] = a.astype(np.int32) if t.dtype == INT else round_to_dtype(t.dtype, a)
    return vals


def reference(case: Case, tiles: dict) -> dict:
    ctx = TaskContext(
        grid="g", coords=dict(case.coords), env={},
        params={**{r: r for r in (*case.ins, *case.outs)}, **case.params},
        inputs={r: v if case.ins[r].dtype == INT else v.astype(np.float64)
                for r, v in tiles.items()},
        out_shapes={r: t.n for r, t in case.outs.items()},
        out_dtypes={r: np.int32 if t.dtype == INT else np.float64 for r, t in case.outs.items()})
    return KINDS[case.kind].reference(ctx)


def nan_last_argmax(x):
    """Per row of x: the max and first index in the header's order (NaN below everything)."""
    keyed = np.where(np.isnan(x), -np.inf, x)
    idx = np.empty(len(x), np.int64)
    for i, (row, k) in enumerate(zip(x, keyed)):
        ok = ~np.isnan(row)
        idx[i] = np.flatnonzero(ok & (k == k[ok].max()))[0] if ok.any() else 0
    return x[np.arange(len(x)), idx], idx


def silu_scale(gate, up, shape):
    """What fp32 rounding of the partial sums g = sum gate, u = sum up can move silu(g) * u
    by, over fp32 epsilon: |silu'(g)| sum |gate| |u| + |silu(g)| sum |up| (+ |silu(g) u|)."""
    summed = [a.reshape(-1, *shape).astype(np.float64) for a in (gate, up)]
    g, u = (a.sum(axis=0) for a in summed)
    with np.errstate(over="ignore"):
        sig = 1.0 / (1.0 + np.exp(-g))
    silu, d = g * sig, sig * (1.0 + g * (1.0 - sig))
    return (np.abs(d) * np.abs(summed[0]).sum(axis=0) * np.abs(u) +
            np.abs(silu) * np.abs(summed[1]).sum(axis=0) + np.abs(silu * u))


def expectations(case: Case, vals: dict):
    """Per out role: (expected tensor, tolerance per element)."""
    tiles = {r: case.ins[r].region(v) for r, v in vals.items()}
    ref = reference(case, tiles)
    if case.kind == "argmax_partial" and np.isnan(tiles["x"]).any():
        m, i = nan_last_argmax(tiles["x"])
        ref = {"max": m.reshape(-1, 1), "arg": (i + case.coords["n"] * int(case.args[0]))
               .reshape(-1, 1)}
    scale = {}
    if case.kind in ("linear_partial", "residual_add", "rms_norm", "residual_rms_norm",
                     "norm_linear_partial", "residual_add_sumsq"):
        mag = reference(case, {r: np.abs(v) for r, v in tiles.items()})
        scale = {r: np.abs(ref[r]) + np.abs(mag[r]) for r in ref}
    elif case.kind == "silu_mul":
        scale = {"out": silu_scale(tiles["gate"], tiles["up"], case.outs["out"].n)}
    elif case.kind == "silu_linear_partial":  # silu_scale (|silu(g) u| among it) through |w|
        act = silu_scale(tiles["gate"], tiles["up"], case.ins["gate"].n[-2:])
        scale = {"out": act @ np.abs(tiles["w"].astype(np.float64)).T}
    out = {}
    for role, t in case.outs.items():
        full = np.full(t.shape, SENTINEL, np.int32 if t.dtype == INT else np.float32)
        tol = np.zeros(t.shape)
        want = np.reshape(ref[role], t.n)
        full[np.ix_(*t.positions())] = want if t.dtype == INT else round_to_dtype(t.dtype, want)
        if role in scale:
            rtol = 1e-2 if t.dtype == B else 1e-5
            tol[np.ix_(*t.positions())] = rtol * np.reshape(scale[role], t.n) + 1e-30
        out[role] = (full, tol)
    return out


# ET_LINEAR_EARLY on the host: the body alone first, counting its weight copies, then the
# outputs back to their sentinels, then the early part (it must issue the first rounds) and
# the body (it must take them: the same copies in all, none issued twice or left counted),
# at most `most` copies in all
EARLY_RUN = """
    const long long at_ = {at}, size_ = {size};
    std::vector<unsigned char> sentinel_(D + at_, D + at_ + size_);
    et_host_async_words = 0;
    et_run_cta([&] {{ et_body_{kind}({call}); }});
    const long long plain_ = et_host_async_words.exchange(0);
    std::memcpy(D + at_, sentinel_.data(), size_);
    std::atomic<int> bad_{{plain_ > {most}}};  // (copies the body may issue in all)
    et_run_cta([&] {{
        et_early_{kind}({call});
        if (et_async_early() != {expect}) ++bad_;
        et_body_{kind}({call});
        if (et_async_early() != 0) ++bad_;
    }});
    if (bad_ || et_host_async_words != plain_) {{
        std::printf("case {i}: %d threads off, %lld copies early against %lld\\n", bad_.load(),
                    et_host_async_words.load(), plain_);
        return 3;
    }}"""


def run_cases(tmp, all_cases, prelude=PRELUDE, early=None, most=None):
    """Each case's body on the host emulation (compiled with `prelude`): per case, its out
    tensors by role and its expectations (reference and tolerance by role). With `early`
    set (one out tensor a case), each runs as EARLY_RUN, its early part counting that many
    copies ahead, and the body issuing at most `most` copies in all (None: any number)."""
    rng = np.random.default_rng(11)
    layout, blocks, cases = Layout(), [], []
    for i, case in enumerate(all_cases):
        vals = make_inputs(case, rng)
        lines, names, outs = [f"{{  // case {i}: {case.kind}"], [], {}
        for role, t in (*case.ins.items(), *case.outs.items()):
            if role in vals:
                at = layout.add(t.dtype, vals[role])
            else:
                at = layout.add(t.dtype, np.full(t.shape, SENTINEL))
                outs[role] = at
            lines += ["    " + line for line in c_tile(f"t_{role}", t, at)]
            names.append(f"t_{role}")
        call = ", ".join([*names, *case.args])
        lines += [f"    et_host_staged = {str(case.staged).lower()};",
                  f"    et_host_mma_rows = {case.mma};"]
        if early is not None:
            (role, t), = case.outs.items()
            size = int(np.prod(t.shape)) * (2 if t.dtype == B else 4)
            lines.append(EARLY_RUN.format(at=outs[role], size=size, kind=case.kind, call=call,
                                          i=i, expect=early,
                                          most="LLONG_MAX" if most is None else most))
        else:
            lines.append(f"    et_run_cta([&] {{ et_body_{case.kind}({call}); }});")
        lines.append("}")
        blocks.append("\n".join(lines))
        cases.append((case, outs, expectations(case, vals)))
    data, back = tmp / "data.bin", tmp / "back.bin"
    data.write_bytes(b"".join(layout.parts))
    main = "\n".join([
        f"unsigned char* D = static_cast<unsigned char*>(std::aligned_alloc(64, {layout.size}));",
        f'FILE* in = std::fopen("{data}", "rb");',
        f"if (!in || std::fread(D, 1, {layout.size}, in) != {layout.size}) return 1;",
        "std::fclose(in);", *blocks,
        f'FILE* out = std::fopen("{back}", "wb");',
        f"std::fwrite(D, 1, {layout.size}, out);", "std::fclose(out);"])
    run_host(tmp, main, headers=HEADERS, prelude=prelude)
    raw = back.read_bytes()
    got = []
    for case, outs, expect in cases:
        tensors = {}
        for role, at in outs.items():
            t = case.outs[role]
            size = int(np.prod(t.shape)) * (2 if t.dtype == B else 4)
            tensors[role] = decode(t.dtype, raw[at:at + size], t.shape)
        got.append((tensors, expect))
    return got


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return run_cases(tmp_path_factory.mktemp("llm_dense"), CASES)


MMA_CASES = [c for c in CASES if c.mma]
# et_linear_mma with x rounded to bf16 (ET_LINEAR_MMA_LO 0; x drawn as bf16 values, so that
# the reference is exact: linear_partial only, a folded norm's scales round x again)


def bf16_normal(rng, shape):
    return round_to_dtype(B, normal(rng, shape))


LO0_CASES = [replace(c, data={**c.data, "x": bf16_normal}) for c in MMA_CASES
             if c.kind == "linear_partial"]


@pytest.fixture(scope="module")
def mma_lo0_results(tmp_path_factory):
    prelude = PRELUDE + "#define ET_LINEAR_MMA_LO 0\n"
    return run_cases(tmp_path_factory.mktemp("mma_lo0"), LO0_CASES, prelude)


def check_outputs(tensors, expect):
    """Each out tensor equal to its reference or within its tolerance (NaN where it is)."""
    for role, (want, tol) in expect.items():
        got = tensors[role]
        if want.dtype == np.int32:
            np.testing.assert_array_equal(got, want, err_msg=role)
            continue
        same = (got == want) | (np.isnan(got) & np.isnan(want))
        close = np.abs(got.astype(np.float64) - want) <= tol
        bad = ~(same | close)
        assert not bad.any(), (f"{role}: {bad.sum()} cells off, first at "
                               f"{np.argwhere(bad)[0]}: got {got[bad][0]}, want {want[bad][0]}")


def case_id(case: Case) -> str:
    return case.kind + "-" + "-".join("x".join(map(str, t.n)) for t in case.ins.values())


@needs_cxx
@pytest.mark.parametrize("i", range(len(CASES)), ids=[case_id(c) for c in CASES])
def test_body_matches_reference(results, i):
    check_outputs(*results[i])


@needs_cxx
@pytest.mark.parametrize("i", range(len(LO0_CASES)), ids=[case_id(c) for c in LO0_CASES])
def test_mma_x_rounded_to_bf16_matches_reference(mma_lo0_results, i):
    check_outputs(*mma_lo0_results[i])


# et_linear_mma with its weight words through the thread's ring of blocks in shared memory
# (ET_LINEAR_MMA_RING 2, 4, 5 and 8: k of 1 to 16 blocks, chunks cut short, clipped rows and
# column tiles, more columns than a pass takes), with a block's MMAs in the spread order
# (ET_LINEAR_MMA_SPREAD) beside the ring of 4, and with k split over two groups of warps
# (ET_LINEAR_MMA_KSPLIT: each thread's own blocks through the ring, the groups' sums added
# at the end of a pass)
MMA_RING_VARIANTS = {"ring2": "#define ET_LINEAR_MMA_RING 2\n",
                     "ring4": "#define ET_LINEAR_MMA_RING 4\n",
                     "ring5": "#define ET_LINEAR_MMA_RING 5\n",
                     "ring8": "#define ET_LINEAR_MMA_RING 8\n",
                     "ring4_spread": "#define ET_LINEAR_MMA_RING 4\n"
                                     "#define ET_LINEAR_MMA_SPREAD 1\n",
                     "ring2_ksplit2": "#define ET_LINEAR_MMA_RING 2\n"
                                      "#define ET_LINEAR_MMA_KSPLIT 2\n",
                     "ring5_ksplit2": "#define ET_LINEAR_MMA_RING 5\n"
                                      "#define ET_LINEAR_MMA_KSPLIT 2\n",
                     "ring4_spread_ksplit2": "#define ET_LINEAR_MMA_RING 4\n"
                                             "#define ET_LINEAR_MMA_SPREAD 1\n"
                                             "#define ET_LINEAR_MMA_KSPLIT 2\n"}


@pytest.fixture(scope="module", params=list(MMA_RING_VARIANTS))
def mma_ring_results(request, tmp_path_factory):
    return run_cases(tmp_path_factory.mktemp(f"mma_{request.param}"), MMA_CASES,
                     PRELUDE + MMA_RING_VARIANTS[request.param])


@needs_cxx
@pytest.mark.parametrize("i", range(len(MMA_CASES)), ids=[case_id(c) for c in MMA_CASES])
def test_mma_ring_matches_reference(mma_ring_results, i):
    check_outputs(*mma_ring_results[i])


# the CUDA-core linear paths with ET_LINEAR_CORE_ROWS 2: more rows in blocks of 2 and 1
CORE_CASES = [c for c in CASES if c.kind in ("linear_partial", "norm_linear_partial",
                                             "silu_linear_partial")
              and not c.mma and not c.staged]


@pytest.fixture(scope="module")
def core_rows_results(tmp_path_factory):
    return run_cases(tmp_path_factory.mktemp("core_rows2"), CORE_CASES,
                     PRELUDE + "#define ET_LINEAR_CORE_ROWS 2\n")


@needs_cxx
@pytest.mark.parametrize("i", range(len(CORE_CASES)), ids=[case_id(c) for c in CORE_CASES])
def test_linear_core_rows_blocks_match_reference(core_rows_results, i):
    check_outputs(*core_rows_results[i])


# linear_partial through the passes that fold a norm, given a zero fold (ET_LINEAR_FOLDS, as in
# a kernel that has norm_linear_partial tasks too): streaming and on tensor cores, all
# row-block sizes
FOLDS_CASES = [c for c in CASES if c.kind == "linear_partial" and not c.staged]


@pytest.fixture(scope="module")
def folds_results(tmp_path_factory):
    return run_cases(tmp_path_factory.mktemp("folds"), FOLDS_CASES,
                     PRELUDE + "#define ET_LINEAR_FOLDS 1\n")


@needs_cxx
@pytest.mark.parametrize("i", range(len(FOLDS_CASES)), ids=[case_id(c) for c in FOLDS_CASES])
def test_linear_through_the_folding_passes_matches_reference(folds_results, i):
    check_outputs(*folds_results[i])


# one-row linears with their weight words through the thread's ring of rounds in shared
# memory (ET_LINEAR_ASYNC 2 and 3; passes and steps from 1 to 48 rounds, rows clipped,
# words past k), plain and with a fold (norm or SiLU)
ONE_ROW_CASES = [c for c in CORE_CASES if c.ins["x" if "x" in c.ins else "gate"].n[-2] == 1]


@pytest.fixture(scope="module", params=[2, 3], ids=["async2", "async3"])
def async_results(request, tmp_path_factory):
    return run_cases(tmp_path_factory.mktemp(f"async{request.param}"), ONE_ROW_CASES,
                     PRELUDE + f"#define ET_LINEAR_ASYNC {request.param}\n")


@needs_cxx
@pytest.mark.parametrize("i", range(len(ONE_ROW_CASES)),
                         ids=[case_id(c) for c in ONE_ROW_CASES])
def test_linear_async_rounds_match_reference(async_results, i):
    check_outputs(*async_results[i])


# the first copies issued before the task's waits (ET_LINEAR_EARLY): variant -> (cases,
# knobs, copies issued early, copies at most in all): the one-row linears' rounds
# (ET_LINEAR_ASYNC 2 and 3, bit 1 of ET_LINEAR_EARLY: the whole ring early, or with
# ET_LINEAR_EARLY_ROUNDS 1 round; with 2 but a launch's dynamic shared
# memory short of the ring, none at all: the words go through registers), the tensor-core
# linears' blocks (ET_LINEAR_MMA_RING 3, bit 2, also with x through its ring) for the cases
# that path takes (8 rows or more, float x, k a multiple of 32), and those with bit 1 alone
# (nothing early)
MMA_EARLY_CASES = [c for c in MMA_CASES if c.kind == "linear_partial"
                   and c.ins["x"].n[0] >= c.mma and c.ins["x"].n[1] % 32 == 0
                   and c.ins["x"].dtype == F]
ONE_ROW_LINEAR_CASES = [c for c in ONE_ROW_CASES if c.kind == "linear_partial"]
EARLY_VARIANTS = {
    "async2": (ONE_ROW_LINEAR_CASES, {"ET_LINEAR_ASYNC": 2, "ET_LINEAR_EARLY": 1}, 2, None),
    "async3_one": (ONE_ROW_LINEAR_CASES, {"ET_LINEAR_ASYNC": 3, "ET_LINEAR_EARLY": 1,
                                          "ET_LINEAR_EARLY_ROUNDS": 1}, 1, None),
    "async3": (ONE_ROW_LINEAR_CASES, {"ET_LINEAR_ASYNC": 3, "ET_LINEAR_EARLY": 1}, 3, None),
    "async2_no_ring": (ONE_ROW_LINEAR_CASES, {"ET_LINEAR_ASYNC": 2, "ET_LINEAR_EARLY": 1,
                                              "ET_HOST_DYNAMIC_SMEM": 65536}, 0, 0),
    "mma_ring3": (MMA_EARLY_CASES, {"ET_LINEAR_MMA_RING": 3, "ET_LINEAR_EARLY": 2}, 2, None),
    "mma_ring3_ksplit2": (MMA_EARLY_CASES, {"ET_LINEAR_MMA_RING": 3, "ET_LINEAR_MMA_KSPLIT": 2,
                                            "ET_LINEAR_EARLY": 2}, 2, None),
    "mma_ring3_rows_bit": (MMA_EARLY_CASES, {"ET_LINEAR_MMA_RING": 3, "ET_LINEAR_ASYNC": 2,
                                             "ET_LINEAR_EARLY": 1}, 0, None)}


@pytest.fixture(scope="module")
def early_results(tmp_path_factory):
    """Each variant's results, run on first use."""
    done = {}

    def results(variant):
        if variant not in done:
            cases, knobs, early, most = EARLY_VARIANTS[variant]
            defines = "".join(f"#define {k} {v}\n" for k, v in knobs.items())
            done[variant] = run_cases(tmp_path_factory.mktemp(f"early_{variant}"), cases,
                                      PRELUDE + defines, early=early, most=most)
        return done[variant]
    return results


@needs_cxx
@pytest.mark.parametrize("variant, i", [(v, i) for v, (cases, *_) in EARLY_VARIANTS.items()
                                        for i in range(len(cases))],
                         ids=[f"{v}-{case_id(c)}" for v, (cases, *_) in EARLY_VARIANTS.items()
                              for c in cases])
def test_linear_early_copies_match_reference(early_results, variant, i):
    """The first copies issued before the task's waits (et_early_linear_partial), the rest
    by the body: the body's outputs, and the copies counted in EARLY_RUN."""
    check_outputs(*early_results(variant)[i])


NVCC = shutil.which("nvcc") or next((p for p in ["/usr/local/cuda/bin/nvcc"]
                                     if Path(p).exists()), None)

# every body instantiated, one kernel each (as a grid's case of the megakernel), with the tile
# types of the decode program: float activations, bf16 or float weights, int indices
INSTANCES = r"""
#include "eventtensor/bodies.cuh"
#include "eventtensor/llm_common.cuh"
#include "eventtensor/llm_dense.cuh"
// tiles as the megakernel has them: local values (a parameter passed by reference would be
// copied to the stack)
#define ET_BODY(name, call, ...)                 \
    __global__ void name(__VA_ARGS__) {          \
        auto local = [](auto t) { return t; };   \
        call;                                    \
    }
#define ET_TYPES(W)                                                                          \
    ET_BODY(embedding_##W, et_body_embedding(local(a), local(o)), EtTileT<W> a, EtTile o)    \
    ET_BODY(rms_norm_##W, et_body_rms_norm(local(x), local(a), local(o), 1e-6f), EtTile x,   \
            EtTileT<W> a, EtTile o)                                                          \
    ET_BODY(linear_##W, et_body_linear_partial(local(x), local(a), local(o)), EtTile x,      \
            EtTileT<W> a, EtTile o)                                                          \
    ET_BODY(residual_##W, et_body_residual_add(local(a), local(x), local(o)), EtTileT<W> a,  \
            EtTile x, EtTile o)                                                              \
    ET_BODY(silu_##W, et_body_silu_mul(local(a), local(a), local(o)), EtTileT<W> a, EtTile o)  \
    ET_BODY(add_norm_##W, et_body_residual_rms_norm(local(x), local(o), local(a), local(o),     \
            local(h), 1e-6f), EtTile x, EtTileT<W> a, EtTile o, EtTile h)                       \
    ET_BODY(norm_linear_##W, et_body_norm_linear_partial(local(x), local(s), local(a),           \
            local(a), local(o), 1e-6f, 2048), EtTile x, EtTile s, EtTileT<W> a, EtTile o)       \
    ET_BODY(add_sumsq_##W, et_body_residual_add_sumsq(local(a), local(x), local(o),             \
            local(s)), EtTileT<W> a, EtTile x, EtTile o, EtTile s)                              \
    ET_BODY(silu_linear_##W, et_body_silu_linear_partial(local(x), local(x), local(a),          \
            local(o)), EtTile x, EtTileT<W> a, EtTile o)
ET_TYPES(et_bf16)
ET_TYPES(float)
ET_BODY(argmax_tile, et_body_argmax_partial(local(x), local(o), local(i), 256, 1), EtTile x,
        EtTile o, EtITile i)
ET_BODY(argmax, et_body_argmax_reduce(local(x), local(i), local(j)), EtTile x, EtITile i,
        EtITile j)
"""


def spills_by_function(resource_usage: str) -> dict[str, tuple[int, int]]:
    """(spill store bytes, spill load bytes) of each function of nvcc's --resource-usage
    report that spills (mangled names)."""
    out, name = {}, None
    for line in resource_usage.splitlines():
        if "Function properties for" in line:
            name = line.split("Function properties for")[1].strip()
        elif "spill stores" in line and name:
            nums = [int(w) for w in line.replace(",", " ").split() if w.isdigit()]
            if nums[1] or nums[2]:
                out[name] = (nums[1], nums[2])
    return out


@pytest.mark.skipif(NVCC is None, reason="no nvcc")
@pytest.mark.parametrize("defines, spill", [([], 0), (["-DET_WEIGHTS_EVICT_FIRST=1"], 8),
                                            (["-DET_LINEAR_MMA=8", "-DET_LINEAR_CORE_ROWS=8"], 32),
                                            (["-DET_LINEAR_MMA=8", "-DET_LINEAR_CORE_ROWS=8",
                                              "-DET_LINEAR_MMA_RING=4"], 32),
                                            (["-DET_LINEAR_MMA=8", "-DET_LINEAR_CORE_ROWS=8",
                                              "-DET_LINEAR_MMA_RING=8",
                                              "-DET_LINEAR_MMA_SPREAD=1"], 32),
                                            (["-DET_LINEAR_MMA=8", "-DET_LINEAR_CORE_ROWS=8",
                                              "-DET_LINEAR_MMA_RING=4",
                                              "-DET_LINEAR_FOLDS=1"], 32),
                                            (["-DET_LINEAR_MMA=8", "-DET_LINEAR_CORE_ROWS=8",
                                              "-DET_LINEAR_MMA_RING=4",
                                              "-DET_LINEAR_MMA_KSPLIT=2",
                                              "-DET_LINEAR_FOLDS=1"], 32),
                                            (["-DET_WEIGHTS_EVICT_FIRST=1", "-DET_LINEAR_MMA=8",
                                              "-DET_LINEAR_CORE_ROWS=8", "-DET_LINEAR_MMA_RING=4",
                                              "-DET_LINEAR_ASYNC=2", "-DET_LINEAR_EARLY=1"],
                                             32)])
def test_header_compiles_for_sm90a(tmp_path, defines, spill):
    """Every body compiles for sm_90a (with the kernel's --use_fast_math) and no path
    spills registers; with weights loaded evict-first (an opt-in knob), at most 8 bytes in
    the one-row, 8-rows-per-thread pass; with the tensor-core path (ET_LINEAR_MMA, and the
    CUDA-core path up to 8 rows a pass as the decode kernel has it), whose functions spill
    nothing, at most 32 bytes once a task in the body that calls them (the registers it
    keeps across the call). The passes that fold an RMSNorm or a SiLU into x (EtNormFold,
    streaming or on tensor cores) may spill up to 32 bytes, and the norm_linear_partial and
    silu_linear_partial bodies that call them up to 64 bytes, once a task (the fold and the
    row-block loop's state kept across the calls); with the tensor-core path, which they
    call too, those bodies up to 128 bytes, and so may the linear_partial bodies where they
    call the folding passes (ET_LINEAR_FOLDS).
    The same bounds hold with the decode session's knobs (the one-row linear's ring of 2
    rounds and its early rounds among them)."""
    src = tmp_path / "dense.cu"
    src.write_text(INSTANCES)
    res = subprocess.run([NVCC, "-arch=sm_90a", "-std=c++17", "--use_fast_math", *defines,
                          f"-I{INCLUDE}", "-c", str(src), "-o", str(tmp_path / "dense.o"),
                          "--resource-usage"], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    found = spills_by_function(res.stderr)
    # et_linear_words<NB, R, KW, EtNormFold<..> or EtSiluFold, ..>, et_linear_mma<MT, ..> alike
    scaled = r"et_linear_(?:words|mma)I.*Et(?:Norm|Silu)Fold"
    # with ET_LINEAR_FOLDS the linear_partial bodies call the folding passes too
    calls = r"norm_linear|silu_linear" + (r"|^_Z\d+linear_" if "-DET_LINEAR_FOLDS=1" in defines
                                          else "")
    folded = {n: v for n, v in found.items() if re.search(calls, n) or re.search(scaled, n)}
    mma = any(d.startswith("-DET_LINEAR_MMA=") for d in defines)
    assert all(max(v) <= (32 if not re.search(calls, n) else 128 if mma else 64)
               for n, v in folded.items()), folded
    plain = {n: v for n, v in found.items() if n not in folded}
    assert all(max(v) <= spill for v in plain.values()) and len(plain) <= (spill > 0), plain
