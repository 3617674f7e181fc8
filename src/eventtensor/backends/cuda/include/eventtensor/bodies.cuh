// Tile bodies of the task kinds, run by a whole CTA. A tile is a strided view of a tensor
// region (rank <= 4); each body matches its numpy reference in eventtensor/ops (fp32
// accumulation).
#pragma once

// bfloat16 element: the raw bits (sign, 8 exponent bits, 7 mantissa bits). NVRTC ships no
// cuda_bf16.h, so the two conversions are written here: widening is exact, narrowing rounds
// to nearest, ties to even (NaN stays NaN), as eventtensor.dtypes.round_to_dtype does.
struct et_bf16 {
    unsigned short bits;
};

__device__ __forceinline__ float et_to_float(float v) { return v; }
__device__ __forceinline__ float et_to_float(et_bf16 v) {
    return __uint_as_float((unsigned)v.bits << 16);
}

template <typename T>
__device__ __forceinline__ T et_from_float(float v);
template <>
__device__ __forceinline__ float et_from_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ et_bf16 et_from_float<et_bf16>(float v) {
    et_bf16 r;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r.bits) : "f"(v));
    return r;
}

template <typename T>
struct EtTileT {
    T* p;
    int rank;
    long long n[4];       // extent per dimension
    long long s[4];       // stride per dimension, in elements
    const int* idx[4];    // per dimension: positions read from an index tensor, or null
};
typedef EtTileT<float> EtTile;
typedef EtTileT<et_bf16> EtBTile;
typedef EtTileT<int> EtITile;

// Row-major tensor `base` of shape `shape` (rank r), region starting at `lo` with extents `n`;
// a dimension with idx[d] set selects the positions idx[d][0 .. n[d]) instead.
template <typename T>
__device__ __forceinline__ EtTileT<T> et_tile(T* base, int r, const long long* shape,
                                              const long long* lo, const long long* n,
                                              const int* const* idx) {
    EtTileT<T> t;
    t.rank = r;
    long long stride = 1, off = 0;
#pragma unroll
    for (int d = r - 1; d >= 0; --d) {
        t.n[d] = n[d];
        t.s[d] = stride;
        t.idx[d] = idx[d];
        off += lo[d] * stride;
        stride *= shape[d];
    }
    t.p = base + off;
    return t;
}

template <typename T>
__device__ __forceinline__ long long et_off(const EtTileT<T>& t, int d, int i) {
    return (long long)(t.idx[d] ? t.idx[d][i] : i) * t.s[d];
}

// Bring the line of p into the SM's L1 (no wait).
__device__ __forceinline__ void et_prefetch_l1(const void* p) {
    asm volatile("prefetch.global.L1 [%0];" :: "l"(p));
}

// Bring a tile's cache lines into L2 (no wait): a task's input tiles (weights), loaded
// before it waits on its events (stage.cuh). Threads me, me + step, ... of the caller's take
// lines me, me + step, ...; 32-bit index math. (Not L1: the acquire that ends a wait
// invalidates the SM's L1.)
template <typename T>
__device__ void et_prefetch_tile(const EtTileT<T>& t, int me, int step) {
    if (t.rank == 0) return;
    const int per_line = 128 / (int)sizeof(T), last = t.rank - 1;
    const int chunks = ((int)t.n[last] + per_line - 1) / per_line;
    int rows = 1;
    for (int d = 0; d < last; ++d) rows *= (int)t.n[d];
    for (int e = me; e < rows * chunks; e += step) {
        int r = e / chunks;
        long long off = et_off(t, last, (e - r * chunks) * per_line);
        for (int d = last - 1; d >= 0; --d) {
            const int n = (int)t.n[d];
            off += et_off(t, d, r % n);
            r /= n;
        }
        asm volatile("prefetch.global.L2 [%0];" :: "l"(t.p + off));
    }
}

// ------------------------------------------------------------------ staged tiles
//
// A task's input tiles may be staged in shared memory before the task waits (stage.cuh); the
// body then reads them there, as dense row-major tiles (`et_staged`).

// The number of rows of tile t (the product of its extents but the last).
// (The loops over dimensions of this section are unrolled over the 4 a tile may have, so
// that a tile's fields stay in registers.)
template <typename T>
__device__ __forceinline__ int et_rows(const EtTileT<T>& t) {
    int rows = 1;
#pragma unroll
    for (int d = 0; d < 3; ++d)
        if (d + 1 < t.rank) rows *= (int)t.n[d];
    return rows;
}

// Offset in t of the first element of row `r` (rows numbered row-major over all dimensions
// but the last).
template <typename T>
__device__ __forceinline__ long long et_row_off(const EtTileT<T>& t, int r) {
    long long off = 0;
#pragma unroll
    for (int d = 2; d >= 0; --d)
        if (d + 1 < t.rank) {
            const int n = (int)t.n[d];
            off += et_off(t, d, r % n);
            r /= n;
        }
    return off;
}

// The bytes of tile t's elements.
template <typename T>
__device__ __forceinline__ int et_tile_bytes(const EtTileT<T>& t) {
    int cols = t.rank ? 1 : 0;
#pragma unroll
    for (int d = 0; d < 4; ++d)
        if (d + 1 == t.rank) cols = (int)t.n[d];
    return et_rows(t) * cols * (int)sizeof(T);
}

// dst = src, field by field. For the tiles an out-of-line fallback path takes by reference:
// copied so only where that path is taken, the caller's own tiles stay in registers (a
// whole-struct copy makes the compiler build them in local memory as the task starts, on
// every path: 2.4 µs of every decode_attention task's setup).
template <typename T>
__device__ __forceinline__ void et_copy_tile(EtTileT<T>& dst, const EtTileT<T>& src) {
    dst.p = src.p;
    dst.rank = src.rank;
#pragma unroll
    for (int d = 0; d < 4; ++d) dst.n[d] = src.n[d], dst.s[d] = src.s[d], dst.idx[d] = src.idx[d];
}

// Tile t, or, if the stage ring holds a copy of it (staged[j] set, see stage.cuh), the
// dense row-major view of that copy (field by field, not a choice between two tiles, which
// would put them in local memory).
template <typename T>
__device__ __forceinline__ EtTileT<T> et_staged(EtTileT<T> t, void* const* staged, int j) {
    T* const p = staged ? static_cast<T*>(staged[j]) : nullptr;
    long long stride = 1;
#pragma unroll
    for (int k = 3; k >= 0; --k)
        if (k < t.rank) {
            t.s[k] = p ? stride : t.s[k];
            t.idx[k] = p ? nullptr : t.idx[k];
            stride *= t.n[k];
        }
    t.p = p ? p : t.p;
    return t;
}

// Whether every row of t is a run of whole 16-byte words at 16-byte aligned addresses.
template <typename T>
__device__ __forceinline__ bool et_rows_of_words(const EtTileT<T>& t) {
    if (t.rank == 0 || reinterpret_cast<unsigned long long>(t.p) % 16) return false;
    bool ok = true;
#pragma unroll
    for (int d = 0; d < 4; ++d) {
        if (d + 1 < t.rank) ok &= (t.s[d] * (long long)sizeof(T)) % 16 == 0;
        if (d + 1 == t.rank)
            ok &= !t.idx[d] && t.s[d] == 1 && (t.n[d] * (long long)sizeof(T)) % 16 == 0;
    }
    return ok;
}

// Element `i` of the tile flattened over its first `dims` dimensions, at offset `last` in
// the dimension after them. Index math in 32 bits (tiles are far below 2^31 elements).
template <typename T>
__device__ __forceinline__ T* et_at(const EtTileT<T>& t, int i, int dims, int last) {
    long long off = 0;
    for (int d = dims - 1; d >= 0; --d) {
        int n = (int)t.n[d];
        off += et_off(t, d, i % n);
        i /= n;
    }
    return t.p + off + (dims < t.rank ? et_off(t, dims, last) : 0);
}

template <typename T>
__device__ __forceinline__ int et_count(const EtTileT<T>& t, int dims) {
    long long c = 1;
    for (int d = 0; d < dims; ++d) c *= t.n[d];
    return (int)c;
}

// Offset in `src` of the element of a result of shape src.n (rank src_rank, right-aligned
// against out's dimensions, size-1 dimensions broadcast) that out's element `e` receives.
template <typename S, typename O>
__device__ __forceinline__ long long et_bcast(const EtTileT<S>& src, int src_rank,
                                              const EtTileT<O>& out, int e) {
    long long off = 0;
    int shift = out.rank - src_rank;
    for (int d = out.rank - 1; d >= 0; --d) {
        int n = (int)out.n[d];
        int i = e % n;
        e /= n;
        int sd = d - shift;
        if (sd >= 0 && src.n[sd] != 1) off += et_off(src, sd, i);
    }
    return off;
}

// nop: no work (a task that only waits and notifies)
__device__ __forceinline__ void et_body_nop() {}

// ------------------------------------------------------------------ generic bodies
//
// Contract with the runtime: a body is entered by all blockDim.x threads of the CTA (a multiple
// of 32), and a CTA barrier follows every body. The bodies take tiles of any element types
// (float or et_bf16), read as float and accumulate in float; the result is rounded to the out
// tile's type on store.
//
// A body sits on a dependency chain, so it is written for latency: fast paths for tiles without
// index vectors whose offsets fit in an int (32-bit index math) and of modest extents (all the
// examples' tiles), the plain per-element loop otherwise. In a fast path each thread issues a
// batch of independent loads before it uses any of them (one memory latency per batch), and a
// reduction is split over a group of lanes when there are fewer outputs than threads.

// Shared scratch of the bodies: one 4 KB array (16-byte aligned) for all of them, so that no
// body adds static shared memory of its own. A body may write it from its start on: the barrier
// after every body ensures no thread still reads what an earlier body left there.
#define ET_SCRATCH_FLOATS 1024
__device__ __forceinline__ float* et_body_scratch() {
    __shared__ float4 scratch[ET_SCRATCH_FLOATS / 4];
    return reinterpret_cast<float*>(scratch);
}

// True if t has no index vectors and all its element offsets fit in an int.
template <typename T>
__device__ __forceinline__ bool et_plain(const EtTileT<T>& t) {
    long long span = 0;
#pragma unroll
    for (int d = 0; d < 4; ++d)
        if (d < t.rank) {
            if (t.idx[d]) return false;
            span += (t.n[d] - 1) * t.s[d];
        }
    return span < (1ll << 31);
}

// log2 of the lanes that split each of `units` reductions of length k: the largest power of
// two q <= 32 with q <= k and q * units <= blockDim.x (1 if there is no such q > 1).
__device__ __forceinline__ int et_split_log2(int units, int k) {
    int lg = 0;
    while (lg < 5 && (2 << lg) <= k && units <= (int)(blockDim.x >> (lg + 1))) ++lg;
    return lg;
}

// v summed over the aligned group of q lanes (a power of two <= 32) of the calling thread, for
// every lane: all 32 lanes of the warp call it (each group sums its own lanes).
__device__ __forceinline__ float et_group_sum(float v, int q) {
    for (int o = q >> 1; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// The absent second factor of a plain sum: reads as 1.
struct EtOne {};
template <typename T>
__device__ __forceinline__ float et_ld(const T* p, int i) { return et_to_float(p[i]); }
__device__ __forceinline__ float et_ld(const EtOne*, int) { return 1.f; }

// A 2-D sum of products: out cell (r, c), at dst[r * dr + c * dc], is the sum over j < k of
// a[r * ar + c * ac + j * ak] * b[r * br + c * bc + j * bk] (stride 0: broadcast).
struct EtDot2 {
    int rows, cols, k, ar, ac, ak, br, bc, bk, dr, dc;
};

// Mapping: the cells are cut into blocks of CW consecutive cells of a row (CW divides cols).
// Lane group g (q = 2^lg aligned lanes, G = blockDim.x / q groups) takes blocks g, g + G, ...;
// lane p of the group takes j = p, p + q, ..., loading JB of them for each of its CW cells
// before it adds any (none past k: no load is repeated), so a warp's load covers q consecutive
// j of 32 / q consecutive blocks. Then the group adds up its lanes with shuffles and lane 0
// stores. All lanes of a warp run the same iterations (while its first group has a block), so
// that the whole warp shuffles. No barrier.
template <int CW, typename A, typename B, typename O>
__device__ __forceinline__ void et_dot2(const A* a, const B* b, O* dst, EtDot2 g) {
    constexpr int JB = CW == 1 ? 8 : 4;
    const int blocks = g.rows * g.cols / CW;
    const int lg = et_split_log2(blocks, g.k), q = 1 << lg, p = threadIdx.x & (q - 1);
    const int step = blockDim.x >> lg;
    for (int blk = threadIdx.x >> lg, b0 = (threadIdx.x & ~31u) >> lg; b0 < blocks;
         blk += step, b0 += step) {
        const bool live = blk < blocks;  // else a group of the warp past the last block
        const int k = live ? g.k : 0;
        const int r = (unsigned)(blk * CW) / (unsigned)g.cols, c = blk * CW - r * g.cols;
        const int oa = r * g.ar + c * g.ac, ob = r * g.br + c * g.bc;
        float acc[CW] = {};
        for (int j0 = p; j0 < k; j0 += JB * q) {
            const int last = (k - 1 - j0) >> lg;  // u <= last: j0 + u * q < k
            const int ja = oa + j0 * g.ak, jb = ob + j0 * g.bk, qa = q * g.ak, qb = q * g.bk;
            float va[CW][JB], vb[CW][JB];
#pragma unroll
            for (int u = 0; u < JB; ++u)
#pragma unroll
                for (int m = 0; m < CW; ++m) {
                    va[m][u] = u <= last ? et_ld(a, ja + m * g.ac + u * qa) : 0.f;
                    vb[m][u] = u <= last ? et_ld(b, jb + m * g.bc + u * qb) : 0.f;
                }
#pragma unroll
            for (int u = 0; u < JB; ++u)
#pragma unroll
                for (int m = 0; m < CW; ++m)
                    if (u <= last) acc[m] += va[m][u] * vb[m][u];
        }
#pragma unroll
        for (int m = 0; m < CW; ++m) {
            const float sum = et_group_sum(acc[m], q);
            if (p == 0 && live) dst[r * g.dr + (c + m) * g.dc] = et_from_float<O>(sum);
        }
    }
}

// A 16-byte word of a tile: 4 float or 8 bfloat16 elements, summed as float.
struct alignas(16) EtWord16 {
    unsigned u[4];
};
__device__ __forceinline__ float et_word_sum(const EtWord16& w, const float*) {
    return (__uint_as_float(w.u[0]) + __uint_as_float(w.u[1])) +
           (__uint_as_float(w.u[2]) + __uint_as_float(w.u[3]));
}
__device__ __forceinline__ float et_word_sum(const EtWord16& w, const et_bf16*) {
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < 4; ++i)
        s += __uint_as_float(w.u[i] << 16) + __uint_as_float(w.u[i] & 0xffff0000u);
    return s;
}

// Row sums over a contiguous, 16-byte aligned reduction axis: out cell r, at dst[r * g.dr], is
// the sum of the k elements from a + r * g.ar (g.cols == 1, g.ak == 1, k and g.ar multiples of
// the V elements of a 16-byte word, a 16-byte aligned). As et_dot2 with words for elements:
// lane group of q lanes per row, lane p loading words p, p + q, ... (JB of them in flight),
// so a warp's load covers whole cache lines of 32 / q rows. No barrier.
template <typename A, typename O>
__device__ __forceinline__ void et_sum_rows16(const A* a, O* dst, EtDot2 g) {
    constexpr int V = 16 / sizeof(A), JB = 4;
    const int words = g.k / V;
    const int lg = et_split_log2(g.rows, words), q = 1 << lg, p = threadIdx.x & (q - 1);
    const int step = blockDim.x >> lg;
    for (int r = threadIdx.x >> lg, r0 = (threadIdx.x & ~31u) >> lg; r0 < g.rows;
         r += step, r0 += step) {
        const bool live = r < g.rows;  // else a group of the warp past the last row
        const EtWord16* row = reinterpret_cast<const EtWord16*>(a + (live ? r : 0) * g.ar);
        const int n = live ? words : 0;
        float acc = 0.f;
        for (int w0 = p; w0 < n; w0 += JB * q) {
            EtWord16 v[JB];
#pragma unroll
            for (int u = 0; u < JB; ++u)
                if (w0 + u * q < n) v[u] = row[w0 + u * q];
#pragma unroll
            for (int u = 0; u < JB; ++u)
                if (w0 + u * q < n) acc += et_word_sum(v[u], a);
        }
        const float sum = et_group_sum(acc, q);
        if (p == 0 && live) dst[r * g.dr] = et_from_float<O>(sum);
    }
}

// The sums of row_sum (keep: t summed over its last axis, kept with extent 1) and sum_partials
// (t summed over its first axis, removed), broadcast into out as by et_bcast (numpy semantics).
// Fast path, if t and out are plain and out has extent 1 in all but its last two dimensions:
// et_sum_rows16 for one sum per row over contiguous, aligned 16-byte words, else et_dot2, with
// blocks of 4 cells when there are more cells than threads (a thread's loads of all its cells
// overlap). Else one thread per out cell.
template <typename S, typename O>
__device__ __forceinline__ void et_sum(const EtTileT<S>& t, bool keep, const EtTileT<O>& out) {
    const int axis = keep ? t.rank - 1 : 0, vrank = keep ? t.rank : t.rank - 1, R = out.rank;
    auto src_dim = [&](int d) {  // t's dimension along out dimension d; -1: absent or broadcast
        const int sd = d - (R - vrank), td = keep ? sd : sd + 1;
        return d >= 0 && sd >= 0 && td != axis && t.n[td] != 1 ? td : -1;
    };
    if (et_plain(t) && et_plain(out) && (R < 3 || out.n[0] == 1) && (R < 4 || out.n[1] == 1)) {
        const int dr = src_dim(R - 2), dc = src_dim(R - 1);
        EtDot2 g = {};
        g.rows = R >= 2 ? (int)out.n[R - 2] : 1;
        g.cols = R >= 1 ? (int)out.n[R - 1] : 1;
        g.k = (int)t.n[axis];
        g.ar = dr < 0 ? 0 : (int)t.s[dr];
        g.ac = dc < 0 ? 0 : (int)t.s[dc];
        g.ak = (int)t.s[axis];
        g.dr = R >= 2 ? (int)out.s[R - 2] : 0;
        g.dc = R >= 1 ? (int)out.s[R - 1] : 0;
        constexpr int V = 16 / sizeof(S);
        if (g.ak == 1 && g.cols == 1 && g.k % V == 0 && g.ar % V == 0 &&
            reinterpret_cast<unsigned long long>(t.p) % 16 == 0)
            return et_sum_rows16(t.p, out.p, g);
        if (g.rows * g.cols > (int)blockDim.x && g.cols % 4 == 0)
            return et_dot2<4>(t.p, (const EtOne*)nullptr, out.p, g);
        return et_dot2<1>(t.p, (const EtOne*)nullptr, out.p, g);
    }
    const int cells = et_count(out, R);
#pragma unroll 1
    for (int e = threadIdx.x; e < cells; e += blockDim.x) {
        long long src = 0, dst = 0;
        int i = e;
        for (int d = R - 1; d >= 0; --d) {
            const int n = (int)out.n[d], id = i % n, sd = src_dim(d);
            i /= n;
            dst += et_off(out, d, id);
            if (sd >= 0) src += et_off(t, sd, id);
        }
        float acc = 0.f;
#pragma unroll 1
        for (int j = 0; j < t.n[axis]; ++j) acc += et_to_float(t.p[src + et_off(t, axis, j)]);
        out.p[dst] = et_from_float<O>(acc);
    }
}

// row_sum: x summed over its last axis, broadcast into the out tile
template <typename X, typename O>
__device__ __forceinline__ void et_body_row_sum(const EtTileT<X>& x, const EtTileT<O>& out) {
    et_sum(x, true, out);
}

// sum_partials: p summed over its first axis, broadcast into the out tile
template <typename P, typename O>
__device__ __forceinline__ void et_body_sum_partials(const EtTileT<P>& p, const EtTileT<O>& out) {
    et_sum(p, false, out);
}

// gemm_partial through the scratch: out cell (r, c) as in et_dot2 with a = x, b = w, for
// rows <= 16, cols <= blockDim.x and (k << lr) <= ET_SCRATCH_FLOATS, 4 * blockDim.x.
// Mapping: x is staged in the scratch as float, xs[j * R + r] (R = 2^lr: the rows rounded up to
// a power of two >= 4, padding rows zero), each thread loading at most 4 elements. Lane group c
// (q = 2^lg aligned lanes, q * cols <= blockDim.x) owns column c, its lane p the j = p, p + q,
// ...: it holds w[j, c] in registers, 16 in flight (the first 16 loaded together with x), and
// accumulates all rows; the group adds up its lanes with shuffles and lane p stores the rows r
// with r % q == p. A warp reads a block of 32 / q columns by q rows of w per load. Every thread
// stages x and reaches the one barrier, and every lane runs the shuffles (the groups past the
// last column with no work). Not inlined: one copy per instance of this large path, whose call
// costs little next to its work.
template <typename X, typename W, typename O>
__device__ __noinline__ void et_gemm_staged(const X* x, const W* w, O* out, EtDot2 g, int lr) {
    const int R = 1 << lr, lg = et_split_log2(g.cols, g.k), q = 1 << lg;
    const int p = threadIdx.x & (q - 1), c = threadIdx.x >> lg;
    const bool on = c < g.cols;  // else a group past the last column
    const int k = on ? g.k : 0, oc = c * g.bc;
    float wv[16];  // w[j, c] for j = p + q * (i + u), i the current batch of 8
    auto load_w = [&](int i, int u) {  // none past k
        const int j = p + q * (i + u);
        wv[u] = j < k ? et_to_float(w[oc + j * g.bk]) : 0.f;
    };
    if (k > 0)
#pragma unroll
        for (int u = 0; u < 16; ++u) load_w(0, u);
    float* xs = et_body_scratch();
    float xv[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
        const int f = threadIdx.x + u * blockDim.x, r = f & (R - 1), j = f >> lr;
        xv[u] = f < R * g.k && r < g.rows ? et_to_float(x[r * g.ar + j * g.ak]) : 0.f;
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) {
        const int f = threadIdx.x + u * blockDim.x;
        if (f < R * g.k) xs[f] = xv[u];
    }
    __syncthreads();
    float acc[16] = {};
    for (int i = 0; i < (k + q - 1) >> lg; i += 8) {
#pragma unroll
        for (int u = 0; u < 8; ++u) {
            const int j = p + q * (i + u);
            if (j < k) {
                const float4* xj = reinterpret_cast<const float4*>(xs + j * R);
#pragma unroll
                for (int b = 0; b < 4; ++b)
                    if (4 * b < g.rows) {
                        const float4 v = xj[b];
                        acc[4 * b] += v.x * wv[u];
                        acc[4 * b + 1] += v.y * wv[u];
                        acc[4 * b + 2] += v.z * wv[u];
                        acc[4 * b + 3] += v.w * wv[u];
                    }
            }
        }
#pragma unroll
        for (int u = 0; u < 8; ++u) {  // slide: the next batch down, the one after it loaded
            wv[u] = wv[u + 8];
            load_w(i + 8, u + 8);
        }
    }
    for (int o = q >> 1; o > 0; o >>= 1)  // as et_group_sum, for all rows at once
#pragma unroll
        for (int r = 0; r < 16; ++r) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], o);
#pragma unroll
    for (int r = 0; r < 16; ++r)
        if (r < g.rows && (r & (q - 1)) == p && on)
            out[r * g.dr + c * g.dc] = et_from_float<O>(acc[r]);
}

// gemm_partial: out[0, r, c] = sum_k x[r, k] * w[k, c]. Fast paths: et_dot2 (a lane group per
// output) when all outputs fit the CTA with at most 8 j per lane, else et_gemm_staged.
template <typename X, typename W, typename O>
__device__ __forceinline__ void et_body_gemm_partial(const EtTileT<X>& x, const EtTileT<W>& w,
                                                     const EtTileT<O>& out) {
    int rows = (int)x.n[0], cols = (int)w.n[1];
    long long k = x.n[1];
    if (x.rank == 2 && w.rank == 2 && out.rank >= 2 && et_plain(x) && et_plain(w) &&
        et_plain(out)) {
        const EtDot2 g = {rows, cols, (int)k, (int)x.s[0], 0, (int)x.s[1], 0, (int)w.s[1],
                          (int)w.s[0], (int)out.s[out.rank - 2], (int)out.s[out.rank - 1]};
        const int lr = rows <= 4 ? 2 : rows <= 8 ? 3 : 4;
        if (rows * cols <= (int)blockDim.x && k <= 8 << et_split_log2(rows * cols, (int)k))
            return et_dot2<1>(x.p, w.p, out.p, g);
        if (rows <= 16 && cols <= (int)blockDim.x && k << lr <= ET_SCRATCH_FLOATS &&
            k << lr <= 4 * blockDim.x)
            return et_gemm_staged(x.p, w.p, out.p, g, lr);
    }
#pragma unroll 1
    for (int e = threadIdx.x; e < rows * cols; e += blockDim.x) {
        int r = e / cols, c = e % cols;
        float acc = 0.f;
#pragma unroll 1
        for (int j = 0; j < k; ++j)
            acc += et_to_float(x.p[et_off(x, 0, r) + et_off(x, 1, j)]) *
                   et_to_float(w.p[et_off(w, 0, j) + et_off(w, 1, c)]);
        out.p[et_off(out, out.rank - 2, r) + et_off(out, out.rank - 1, c)] =
            et_from_float<O>(acc);
    }
}

// ------------------------------------------------------------------ toy MoE (paper example 3)

// moe_router: top-k experts of one token by logit (ties: lower expert first), softmax weights
__device__ void et_body_moe_router(const EtTile& x, const EtTile& w, const EtITile& ids,
                                   const EtTile& wts, int top_k) {
    float* logit = et_body_scratch();  // experts <= 256
    int d = (int)x.n[1], experts = (int)w.n[1];
    for (int e = threadIdx.x; e < experts; e += blockDim.x) {
        float acc = 0.f;
        for (int j = 0; j < d; ++j) acc += x.p[et_off(x, 1, j)] * w.p[et_off(w, 0, j) + et_off(w, 1, e)];
        logit[e] = acc;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        int chosen[8];
        float val[8], top = 0.f, sum = 0.f;
        for (int k = 0; k < top_k; ++k) {
            int best = -1;
            for (int e = 0; e < experts; ++e) {
                bool used = false;
                for (int q = 0; q < k; ++q) used |= chosen[q] == e;
                if (!used && (best < 0 || logit[e] > logit[best])) best = e;
            }
            chosen[k] = best;
            val[k] = logit[best];
        }
        top = val[0];
        for (int k = 0; k < top_k; ++k) sum += expf(val[k] - top);
        for (int k = 0; k < top_k; ++k) {
            ids.p[et_off(ids, 1, k)] = chosen[k];
            wts.p[et_off(wts, 1, k)] = expf(val[k] - top) / sum;
        }
    }
}

// moe_scan: group (token, k) pairs by expert; counts, tile counts, tile index pointer, each
// tile's expert and slot range, each pair's slot (token-major order within an expert)
__device__ void et_body_moe_scan(const EtITile& ids, const EtITile& counts, const EtITile& tiles,
                                 const EtITile& indptr, const EtITile& tile_expert,
                                 const EtITile& tile_lo, const EtITile& tile_hi,
                                 const EtITile& slot, int experts, int tile_m) {
    if (threadIdx.x != 0) return;
    int tokens = (int)ids.n[0], k = (int)ids.n[1], max_tiles = (int)tile_expert.n[0];
    int cnt[64], off[65], fill[64];
    for (int e = 0; e < experts; ++e) cnt[e] = 0;
    for (int t = 0; t < tokens; ++t)
        for (int q = 0; q < k; ++q) cnt[ids.p[et_off(ids, 0, t) + et_off(ids, 1, q)]] += 1;
    off[0] = 0;
    int tiles_so_far = 0;
    for (int i = 0; i < max_tiles; ++i) {
        tile_expert.p[et_off(tile_expert, 0, i)] = 0;
        tile_lo.p[et_off(tile_lo, 0, i)] = 0;
        tile_hi.p[et_off(tile_hi, 0, i)] = 0;
    }
    indptr.p[et_off(indptr, 0, 0)] = 0;
    for (int e = 0; e < experts; ++e) {
        int nt = (cnt[e] + tile_m - 1) / tile_m;
        off[e + 1] = off[e] + cnt[e];
        counts.p[et_off(counts, 0, e)] = cnt[e];
        tiles.p[et_off(tiles, 0, e)] = nt;
        for (int q = 0; q < nt; ++q) {
            int i = tiles_so_far + q;
            tile_expert.p[et_off(tile_expert, 0, i)] = e;
            tile_lo.p[et_off(tile_lo, 0, i)] = off[e] + q * tile_m;
            int hi = off[e] + (q + 1) * tile_m;
            tile_hi.p[et_off(tile_hi, 0, i)] = hi < off[e] + cnt[e] ? hi : off[e] + cnt[e];
        }
        tiles_so_far += nt;
        indptr.p[et_off(indptr, 0, e + 1)] = tiles_so_far;
        fill[e] = off[e];
    }
    for (int t = 0; t < tokens; ++t)
        for (int q = 0; q < k; ++q) {
            int e = ids.p[et_off(ids, 0, t) + et_off(ids, 1, q)];
            slot.p[et_off(slot, 0, t) + et_off(slot, 1, q)] = fill[e]++;
        }
}

// moe_gather: the token's row copied to each of its slots
__device__ void et_body_moe_gather(const EtTile& x, const EtTile& xs) {
    int cells = et_count(xs, xs.rank);
    for (int e = threadIdx.x; e < cells; e += blockDim.x)
        *et_at(xs, e, xs.rank, 0) = x.p[et_bcast(x, x.rank, xs, e)];
}

// moe_expert_gemm: ys rows = SiLU(xs rows @ W[expert])
__device__ void et_body_moe_expert_gemm(const EtTile& xs, const EtTile& w, const EtTile& ys) {
    int rows = (int)xs.n[0], d = (int)xs.n[1], f = (int)w.n[2];
    for (int e = threadIdx.x; e < rows * f; e += blockDim.x) {
        int r = e / f, c = e % f;
        float acc = 0.f;
        for (int j = 0; j < d; ++j)
            acc += xs.p[et_off(xs, 0, r) + et_off(xs, 1, j)] * w.p[et_off(w, 1, j) + et_off(w, 2, c)];
        ys.p[et_off(ys, 0, r) + et_off(ys, 1, c)] = acc / (1.f + expf(-acc));
    }
}

// moe_combine: out = sum over k of weight k * ys row of slot k
__device__ void et_body_moe_combine(const EtTile& ys, const EtTile& w, const EtTile& out) {
    int k = (int)ys.n[0], f = (int)ys.n[1];
    for (int c = threadIdx.x; c < f; c += blockDim.x) {
        float acc = 0.f;
        for (int q = 0; q < k; ++q)
            acc += w.p[et_off(w, 1, q)] * ys.p[et_off(ys, 0, q) + et_off(ys, 1, c)];
        out.p[et_off(out, 1, c)] = acc;
    }
}
