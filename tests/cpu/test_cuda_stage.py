"""The stagers and the ring placement of stage.cuh (weight prefetch into the stage ring),
compiled for the host: bulk copies become memcpy, an mbarrier a pair of counters (pending
arrivals, expected bytes), so that a plan's copies must account for exactly the bytes its
arrival expects."""
import numpy as np
import pytest
from cuda_host import needs_cxx, run_host
from test_cuda_bodies import B, Op, tile_lines

from eventtensor.dtypes import round_to_dtype

pytestmark = needs_cxx

PRELUDE = "#define ET_STAGE_TILES 4"

RING_CASES = [  # (tile, how it is staged: one copy, a copy per row, or left to L2)
    (Op((64, 128), (32, 32), (32, 32)), "rows"),               # split-K's tile: aligned rows
    (Op((64, 128), (8, 0), (16, 128), B), "dense"),            # whole rows: one copy
    (Op((9, 48), (3, 4), (5, 20)), "rows"),                    # rows of 5 words from column 4
    (Op((9, 48), (3, 5), (5, 20)), "l2"),                      # rows off word alignment
    (Op((3, 100, 40), (1, 10, 3), (2, 7, 37)), "l2"),          # rank 3, odd row length
    (Op((3, 40, 64), (1, 0, 0), (2, 40, 64), B), "dense"),     # rank 3, whole planes
    (Op((3, 40, 64), (1, 8, 16), (2, 7, 32), B), "rows"),      # rank 3, aligned rows
    (Op((10, 64), (0, 8), (4, 16), idx={0: [7, 2, 2, 9]}), "rows"),  # gathered aligned rows
    (Op((300,), (4,), (288,)), "dense"),                       # rank 1
    (Op((300,), (5,), (290,)), "l2"),                          # rank 1, unaligned
]


@pytest.mark.parametrize("op, how", RING_CASES)
def test_stage_plan_and_copy_land_the_tile_densely_in_the_ring(tmp_path, op, how):
    """EtStagePlan places a tile of aligned 16-byte-word rows (a second tile after it, 16-byte
    aligned) and leaves any other tile to L2; EtStageCopy over the 32 lanes of a warp copies
    a dense tile in one copy and any other in one copy per row, to the planned place, and
    the copies complete exactly the bytes the arrival expected; et_staged views the copy as
    the tile."""
    ctype = "et_bf16" if op.dtype == B else "float"
    size = int(np.prod(op.n)) * (2 if op.dtype == B else 4)
    data = np.arange(int(np.prod(op.shape)), dtype=np.float32) % 251
    body = "\n".join([
        *tile_lines(op, data),
        "alignas(16) static float W[64]; for (int i = 0; i < 64; ++i) W[i] = 7000 + i;",
        "const long long ws[] = {64}, wl[] = {16}, wn[] = {32};",
        "const int* const wx[] = {nullptr};",
        "const EtTileT<float> w = et_tile(W, 1, ws, wl, wn, wx);",
        "EtStagePlan plan; plan.tile(0, t); plan.tile(1, w);",
        f"alignas(16) static unsigned char buf[{size + 256}];",
        "u64 bar; et_mbar_init(&bar, 1); et_mbar_arrive_expect(&bar, plan.bytes);",
        "for (int lane = 0; lane < 32; ++lane) {",
        "    EtStageCopy copy{plan, buf, &bar, lane}; copy.tile(0, t); copy.tile(1, w); }",
        'std::printf("plan %d %d %d done %d\\n", plan.off[0], plan.off[1], plan.bytes, '
        "(int)et_mbar_done(&bar, 0));",
        "void* staged[2] = {plan.off[0] >= 0 ? buf + plan.off[0] : nullptr, "
        "buf + plan.off[1]};",
        f"const EtTileT<{ctype}> v = et_staged(t, staged, 0);",
        "const EtTileT<float> vw = et_staged(w, staged, 1);",
        "long long cells = 1; for (int d = 0; d < v.rank; ++d) cells *= v.n[d];",
        "for (long long e = 0; e < cells; ++e) {",
        "    long long off = 0, i = e;",
        "    for (int d = v.rank - 1; d >= 0; --d) { off += (i % v.n[d]) * v.s[d]; i /= v.n[d]; }",
        '    std::printf("%.9g\\n", et_val(v.p[off])); }',
        'for (int i = 0; i < 32; ++i) std::printf("w %.9g\\n", vw.p[i]);',
        'for (int z : et_copy_sizes) std::printf("copy %d\\n", z);',
        'std::printf("prefetched %d\\n", (int)et_prefetched.size());'])
    out = run_host(tmp_path, body, ("stage.cuh",), PRELUDE).strip().split("\n")
    placed = -(-size // 16) * 16 if how != "l2" else 0
    assert out[0] == f"plan {0 if how != 'l2' else -1} {placed} {placed + 128} done 1"
    cells = int(np.prod(op.n))
    values = np.array([float(w) for w in out[1:1 + cells]], np.float32)
    want = round_to_dtype(op.dtype, data.reshape(op.shape))[np.ix_(*op.positions())]
    np.testing.assert_array_equal(values, want.reshape(-1))
    assert [float(w.split()[1]) for w in out[1 + cells:33 + cells]] == list(range(7016, 7048))
    copies = sorted(int(w.split()[1]) for w in out if w.startswith("copy"))
    row_bytes = op.n[-1] * (2 if op.dtype == B else 4)
    expect = {"dense": [size], "rows": [row_bytes] * (cells // op.n[-1]), "l2": []}[how]
    assert copies == sorted(expect + [128])  # (and w's one copy)
    assert (out[-1] != "prefetched 0") == (how == "l2")


def test_ring_placement_never_overlaps_live_allocations(tmp_path):
    """et_ring_place over random allocations freed in order (a FIFO, as tasks run): every
    allocation lies within the ring without crossing its end and overlaps no live one, and a
    refusal means the live allocations leave no room (placing it would overlap one of them);
    an empty ring, its head rounded to the ring's start, takes any allocation up to its
    size."""
    body = r"""
    const unsigned cap = 1000;
    struct Live { unsigned at, bytes; };
    std::vector<Live> live;  // oldest first
    unsigned head = 0, placed = 0, refused = 0;
    unsigned long long rng = 12345;
    auto next = [&](unsigned m) { rng = rng * 6364136223846793005ull + 1442695040888963407ull;
                                  return (unsigned)(rng >> 33) % m; };
    for (int step = 0; step < 200000; ++step) {
        if (!live.empty() && next(3) == 0) { live.erase(live.begin()); continue; }
        if (live.empty()) head = (head + cap - 1) / cap * cap;
        const unsigned tail = live.empty() ? head : live.front().at;
        const unsigned bytes = 16 * (1 + next(cap / 16));
        const unsigned at = et_ring_place(head, tail, bytes, cap);
        const unsigned lo = (at == 0xffffffffu ? 0 : at % cap);
        if (at == 0xffffffffu) {
            if (live.empty()) std::abort();  // an empty ring takes anything that fits it
            // no room: at the head, or (crossing the end) at the ring's start, it overlaps
            const unsigned h = head % cap, start = cap - h < bytes ? 0 : h;
            bool overlaps = false;
            for (const Live& l : live) {
                const unsigned a = l.at % cap;
                overlaps |= start < a + l.bytes && a < start + bytes;
            }
            if (!overlaps) std::abort();
            ++refused;
            continue;
        }
        if (lo + bytes > cap || at < head) std::abort();
        for (const Live& l : live) {
            const unsigned a = l.at % cap;
            if (lo < a + l.bytes && a < lo + bytes) std::abort();
        }
        live.push_back({at, bytes});
        head = at + bytes;
        ++placed;
    }
    std::printf("%u %u\n", placed, refused);
    """
    placed, refused = map(int, run_host(tmp_path, body, ("stage.cuh",), PRELUDE).split())
    assert placed > 50000 and refused > 10000  # both paths taken many times
