"""The generic tile bodies of bodies.cuh (row_sum, sum_partials, gemm_partial) against numpy,
compiled for the host: each CUDA thread of a 256-thread CTA is a host thread, __syncthreads a
barrier of all of them and __shfl_xor_sync an exchange among the 32 lanes of a warp, so a
thread that skips a barrier or a shuffle hangs the run (a timeout fails the test). The cases
take every fast path (lane groups, blocks of 4 cells, x staged in the scratch, broadcasts, bf16
tiles, edge tiles) and the per-element loop (index vectors, rank-3 outputs, long k)."""
from dataclasses import dataclass, field

import numpy as np
import pytest
from cuda_host import needs_cxx, run_host

from eventtensor.dtypes import round_to_dtype

pytestmark = needs_cxx

SENTINEL = 1000.0  # out tensor elements outside the tile keep it


@dataclass
class Op:
    """A tile: tensor of `shape` (filled by the case), region from `lo` of extents `n`; a
    dimension in `idx` selects the positions idx[d] (lo[d] must then be 0)."""
    shape: tuple
    lo: tuple
    n: tuple
    dtype: str = "float32"
    idx: dict = field(default_factory=dict)

    def positions(self):
        return [np.asarray(self.idx[d]) if d in self.idx else np.arange(lo, lo + n)
                for d, (lo, n) in enumerate(zip(self.lo, self.n))]


def case(kind, *ops, integers=True):
    return kind, ops, integers


F, B = "float32", "bfloat16"
CASES = [
    # row_sum: splitk partial and final sums, lane groups over a row
    case("row_sum", Op((64, 128), (32, 32), (32, 32)), Op((64, 4), (32, 1), (32, 1))),
    case("row_sum", Op((64, 4), (0, 0), (32, 4)), Op((64, 1), (0, 0), (32, 1))),
    case("row_sum", Op((8, 40), (3, 5), (5, 33)), Op((8, 40), (3, 2), (5, 3))),  # over columns
    case("row_sum", Op((2, 800), (1, 16), (1, 768)), Op((2, 600), (1, 44), (1, 512))),
    case("row_sum", Op((16, 8), (2, 0), (8, 3)), Op((16, 8), (2, 1), (8, 1), B)),
    case("row_sum", Op((16, 8), (2, 0), (8, 7), B), Op((16, 8), (2, 1), (8, 1))),
    case("row_sum", Op((16, 8), (2, 0), (8, 7), B), Op((16, 8), (2, 1), (8, 1), B),
         integers=False),
    case("row_sum", Op((9,), (1,), (7,)), Op((3, 5), (0, 1), (3, 4))),  # rank 1: one sum
    case("row_sum", Op((300, 6), (0, 0), (300, 6)), Op((300, 2), (0, 1), (300, 1))),
    case("row_sum", Op((40, 50), (0, 0), (40, 50)), Op((40, 1), (0, 0), (40, 1)),
         integers=False),
    case("row_sum", Op((6, 5), (2, 0), (3, 0)), Op((6, 1), (2, 0), (3, 1))),  # k = 0
    # row_sum over aligned 16-byte words (4 float, 8 bf16): short rows, long rows, bf16
    case("row_sum", Op((3, 1000), (1, 8), (2, 992)), Op((3, 1), (1, 0), (2, 1)), integers=False),
    case("row_sum", Op((4, 64), (1, 16), (3, 32), B), Op((4, 1), (1, 0), (3, 1))),
    case("row_sum", Op((4, 64), (1, 16), (3, 32), B), Op((4, 1), (1, 0), (3, 1), B),
         integers=False),
    case("row_sum", Op((300, 8), (0, 0), (300, 8)), Op((300, 1), (0, 0), (300, 1))),
    # sum_partials: split-K reductions, bf16 out, blocks of 4 cells, rows as the partial axis
    case("sum_partials", Op((4, 8, 48), (0, 4, 16), (4, 4, 16)), Op((8, 48), (4, 16), (4, 16))),
    case("sum_partials", Op((2, 7, 32), (0, 4, 16), (2, 3, 16)), Op((7, 32), (4, 16), (3, 16))),
    case("sum_partials", Op((4, 32, 256), (0, 16, 64), (4, 16, 64)),
         Op((32, 256), (16, 64), (16, 64), B)),
    case("sum_partials", Op((4, 32, 256), (0, 16, 64), (4, 16, 64)),
         Op((32, 256), (16, 64), (16, 64), B), integers=False),
    case("sum_partials", Op((2, 32, 1), (0, 0, 0), (2, 32, 1), B), Op((32, 1), (0, 0), (32, 1))),
    case("sum_partials", Op((48, 8), (24, 2), (24, 3)), Op((48, 8), (24, 4), (24, 3))),
    case("sum_partials", Op((48, 8), (8, 2), (16, 1)), Op((48, 8), (8, 4), (16, 4))),
    case("sum_partials", Op((3, 20, 15), (0, 0, 0), (3, 20, 15)), Op((20, 15), (0, 0), (20, 15))),
    case("sum_partials", Op((5, 12, 20), (0, 0, 0), (5, 12, 20)), Op((1, 12, 20), (0, 0, 0),
                                                                    (1, 12, 20))),
    case("sum_partials", Op((37, 3), (0, 0), (37, 3)), Op((3,), (0,), (3,)), integers=False),
    # gemm_partial: lane group per output, x staged in the scratch, edge tiles, bf16
    case("gemm_partial", Op((9, 64), (4, 16), (4, 16)), Op((64, 48), (16, 16), (16, 16)),
         Op((4, 9, 48), (1, 4, 16), (1, 4, 16))),
    case("gemm_partial", Op((9, 48), (8, 24), (1, 24)), Op((48, 32), (24, 16), (24, 16)),
         Op((2, 9, 32), (1, 8, 16), (1, 1, 16))),
    case("gemm_partial", Op((40, 256), (16, 64), (16, 64), B), Op((256, 256), (64, 128),
                                                                  (64, 64), B),
         Op((4, 40, 256), (2, 16, 128), (1, 16, 64))),
    case("gemm_partial", Op((40, 256), (32, 64), (8, 64), B), Op((256, 256), (64, 128),
                                                                 (64, 64), B),
         Op((4, 40, 256), (2, 32, 128), (1, 8, 64)), integers=False),
    case("gemm_partial", Op((8, 30), (1, 3), (5, 20)), Op((30, 40), (3, 7), (20, 24)),
         Op((8, 40), (1, 7), (5, 24))),
    case("gemm_partial", Op((3, 20), (0, 0), (3, 16)), Op((16, 64), (0, 0), (16, 64)),
         Op((1, 3, 64), (0, 0, 0), (1, 3, 64))),
    case("gemm_partial", Op((16, 64), (0, 0), (16, 64)), Op((64, 200), (0, 0), (64, 200)),
         Op((1, 16, 200), (0, 0, 0), (1, 16, 200)), integers=False),
    case("gemm_partial", Op((2, 300), (0, 0), (2, 300)), Op((300, 8), (0, 0), (300, 8)),
         Op((1, 2, 8), (0, 0, 0), (1, 2, 8))),
    # the per-element loop: index vectors, a rank-3 out with a leading extent > 1
    case("row_sum", Op((10, 6), (0, 1), (4, 5), idx={0: [7, 2, 2, 9]}), Op((4, 1), (0, 0), (4, 1))),
    case("row_sum", Op((2, 4, 8), (0, 0, 0), (2, 4, 8)), Op((2, 4, 1), (0, 0, 0), (2, 4, 1))),
    case("sum_partials", Op((3, 6, 5), (0, 0, 0), (3, 6, 3), idx={2: [4, 0, 1]}),
         Op((6, 3), (0, 0), (6, 3))),
    case("gemm_partial", Op((5, 6), (0, 0), (3, 6), idx={0: [4, 1, 0]}),
         Op((6, 4), (0, 0), (6, 4)), Op((1, 3, 4), (0, 0, 0), (1, 3, 4))),
]


def reference(kind, vals, ops):
    out = ops[-1]
    if kind == "row_sum":
        res = vals[0].sum(axis=-1, keepdims=True)
    elif kind == "sum_partials":
        res = vals[0].sum(axis=0)
    else:
        res = (vals[0] @ vals[1])[None]
    res = np.broadcast_to(res.reshape(res.shape[-len(out.n):] if res.ndim > len(out.n)
                                      else res.shape), out.n)
    return round_to_dtype(out.dtype, res)


def c_array(name, dtype, values):
    if dtype == B:
        bits = (np.asarray(values, np.float32).view(np.uint32) >> 16).tolist()
        return (f"alignas(16) static et_bf16 {name}[] = "
                f"{{{', '.join(f'{{{b}}}' for b in bits)}, {{0}}}};")
    floats = ", ".join(repr(float(v)) for v in values)
    return f"alignas(16) static float {name}[] = {{{floats}, 0}};"


def c_case(i, kind, ops, rng, integers):
    lines, tiles, tensors = [f"{{  // case {i}: {kind}"], [], []
    for t, op in enumerate(ops):
        out = t == len(ops) - 1
        if out:
            data = np.full(op.shape, SENTINEL, np.float32)
        elif integers:
            data = rng.integers(-8, 9, op.shape).astype(np.float32)
        else:
            data = round_to_dtype(op.dtype, rng.standard_normal(op.shape).astype(np.float32))
        tensors.append(data)
        ctype = "et_bf16" if op.dtype == B else "float"
        r = len(op.shape)
        lines.append("    " + c_array(f"T{t}", op.dtype, data.reshape(-1)))
        for d, pos in op.idx.items():
            lines.append(f"    static const int I{t}_{d}[] = {{{', '.join(map(str, pos))}}};")
        idx = ", ".join(f"I{t}_{d}" if d in op.idx else "nullptr" for d in range(r))
        lines += [f"    const long long s{t}[] = {{{', '.join(map(str, op.shape))}}};",
                  f"    const long long l{t}[] = {{{', '.join(map(str, op.lo))}}};",
                  f"    const long long n{t}[] = {{{', '.join(map(str, op.n))}}};",
                  f"    const int* const i{t}[] = {{{idx}}};",
                  f"    const EtTileT<{ctype}> t{t} = et_tile(T{t}, {r}, s{t}, l{t}, n{t}, i{t});"]
        tiles.append(f"t{t}")
    lines += [f"    et_run_cta([&] {{ et_body_{kind}({', '.join(tiles)}); }});",
              f"    et_print({i}, T{len(ops) - 1}, {tensors[-1].size});", "}"]
    vals = [tensor[np.ix_(*op.positions())].astype(np.float64) for tensor, op in
            zip(tensors[:-1], ops[:-1])]
    expect = tensors[-1].copy()
    expect[np.ix_(*ops[-1].positions())] = reference(kind, vals, ops)
    return "\n".join(lines), expect


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    rng = np.random.default_rng(7)
    blocks, expects = zip(*(c_case(i, k, ops, rng, ints) for i, (k, ops, ints) in
                            enumerate(CASES)))
    got = {}
    for line in run_host(tmp_path_factory.mktemp("bodies"), "\n".join(blocks)).splitlines():
        words = line.split()
        got[int(words[1])] = np.array(words[2:], np.float32)
    return got, expects


@pytest.mark.parametrize("i", range(len(CASES)))
def test_body_matches_numpy(results, i):
    got, expects = results
    kind, ops, integers = CASES[i]
    want = expects[i].reshape(-1)
    if integers:  # integer-valued inputs: every fp32 partial sum is exact
        np.testing.assert_array_equal(got[i], want)
    else:  # any summation order, fp32 accumulation, then rounding to the out dtype
        rtol = 2e-2 if ops[-1].dtype == B else 1e-5
        np.testing.assert_allclose(got[i], want, rtol=rtol, atol=rtol)


def tile_lines(op: Op, data) -> list[str]:
    """C lines defining tensor T (holding `data`) and tile t, the region `op` of it."""
    ctype = "et_bf16" if op.dtype == B else "float"
    r = len(op.shape)
    idx = ", ".join(f"I{d}" if d in op.idx else "nullptr" for d in range(r))
    return [c_array("T", op.dtype, data),
            *(f"static const int I{d}[] = {{{', '.join(map(str, pos))}}};"
              for d, pos in op.idx.items()),
            f"const long long s[] = {{{', '.join(map(str, op.shape))}}};",
            f"const long long l[] = {{{', '.join(map(str, op.lo))}}};",
            f"const long long n[] = {{{', '.join(map(str, op.n))}}};",
            f"const int* const ix[] = {{{idx}}};",
            f"const EtTileT<{ctype}> t = et_tile(T, {r}, s, l, n, ix);"]


@pytest.mark.parametrize("op", [
    Op((64, 128), (32, 32), (32, 32)),                 # split-K's partial-sum tile
    Op((3, 100, 40), (1, 10, 3), (2, 7, 37)),          # rank 3, rows off line boundaries
    Op((10, 70), (0, 2), (4, 65), B, idx={0: [7, 2, 2, 9]}),  # gathered rows, bf16
    Op((300,), (5,), (290,)),                          # rank 1
])
def test_prefetch_tile_issues_one_prefetch_per_line_chunk_of_each_row(tmp_path, op):
    """Warps 1 .. (threads me = 0, 1, ... taking lines me, me + 224, ...) prefetch, for every
    row of the tile, the addresses of its line-sized chunks (from the row's first element):
    nothing outside the tile, nothing twice."""
    ctype = "et_bf16" if op.dtype == B else "float"
    r = len(op.shape)
    body = "\n".join([
        *tile_lines(op, np.zeros(int(np.prod(op.shape)))),
        "et_run_cta([&] { if (threadIdx.x >= 32) et_prefetch_tile(t, threadIdx.x - 32, 224); });",
        f'for (const void* p : et_prefetched) std::printf("%ld\\n", (long)(({ctype}*)p - T));'])
    got = sorted(int(w) for w in run_host(tmp_path, body).split())
    per_line = 128 // (2 if op.dtype == B else 4)
    strides = np.cumprod((1,) + op.shape[:0:-1])[::-1]
    rows = np.stack(np.meshgrid(*op.positions()[:-1], indexing="ij"), -1).reshape(-1, r - 1) \
        if r > 1 else np.zeros((1, 0), np.int64)
    firsts = sorted({int(row @ strides[:-1]) + op.lo[-1] + c
                     for row in rows for c in range(0, op.n[-1], per_line)})
    assert got == firsts
