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

// Bring a tile's cache lines into L1 (issued by every thread of the CTA, no wait): used to
// load the next task's input tiles (weights) while the current task notifies and the next
// one waits on its events.
template <typename T>
__device__ void et_prefetch_tile(const EtTileT<T>& t) {
    const int per_line = 128 / (int)sizeof(T);
    long long rows = 1;
    for (int d = 0; d + 1 < t.rank; ++d) rows *= t.n[d];
    int last = t.rank - 1;
    long long chunks = last >= 0 ? (t.n[last] + per_line - 1) / per_line : 1;
    for (long long e = threadIdx.x; e < rows * chunks; e += blockDim.x) {
        long long r = e / chunks;
        int c = (int)(e % chunks) * per_line;
        long long off = 0;
        for (int d = last - 1; d >= 0; --d) {
            off += et_off(t, d, (int)(r % t.n[d]));
            r /= t.n[d];
        }
        if (last >= 0) off += et_off(t, last, c);
        asm volatile("prefetch.global.L1 [%0];" :: "l"(t.p + off));
    }
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

// The bodies below take tiles of any element types (float or et_bf16), read as float and
// accumulate in float; the result is rounded to the out tile's type on store.

// row_sum: x summed over its last axis, broadcast into the out tile (numpy semantics)
template <typename X, typename O>
__device__ void et_body_row_sum(const EtTileT<X>& x, const EtTileT<O>& out) {
    int cells = et_count(out, out.rank);
    long long k = x.n[x.rank - 1];
    EtTileT<X> rows = x;
    rows.n[x.rank - 1] = 1;
    for (int e = threadIdx.x; e < cells; e += blockDim.x) {
        const X* p = x.p + et_bcast(rows, x.rank, out, e);
        float acc = 0.f;
        for (int j = 0; j < k; ++j) acc += et_to_float(p[et_off(x, x.rank - 1, j)]);
        *et_at(out, e, out.rank, 0) = et_from_float<O>(acc);
    }
}

// sum_partials: p summed over its first axis, broadcast into the out tile
template <typename P, typename O>
__device__ void et_body_sum_partials(const EtTileT<P>& p, const EtTileT<O>& out) {
    int cells = et_count(out, out.rank);
    EtTileT<P> inner = p;  // p without its first axis
    for (int d = 0; d + 1 < p.rank; ++d) {
        inner.n[d] = p.n[d + 1]; inner.s[d] = p.s[d + 1]; inner.idx[d] = p.idx[d + 1];
    }
    for (int e = threadIdx.x; e < cells; e += blockDim.x) {
        const P* q = p.p + et_bcast(inner, p.rank - 1, out, e);
        float acc = 0.f;
        for (int s = 0; s < p.n[0]; ++s) acc += et_to_float(q[et_off(p, 0, s)]);
        *et_at(out, e, out.rank, 0) = et_from_float<O>(acc);
    }
}

// gemm_partial: out[0, r, c] = sum_k x[r, k] * w[k, c]
template <typename X, typename W, typename O>
__device__ void et_body_gemm_partial(const EtTileT<X>& x, const EtTileT<W>& w,
                                     const EtTileT<O>& out) {
    int rows = (int)x.n[0], cols = (int)w.n[1];
    long long k = x.n[1];
    for (int e = threadIdx.x; e < rows * cols; e += blockDim.x) {
        int r = e / cols, c = e % cols;
        float acc = 0.f;
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
    __shared__ float logit[256];
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
