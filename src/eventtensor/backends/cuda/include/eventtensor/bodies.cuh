// Tile bodies of the task kinds, run by a whole CTA. A tile is a strided view of a tensor
// region (rank <= 4); each body matches its numpy reference in eventtensor/ops (fp32
// accumulation).
#pragma once

struct EtTile {
    float* p;
    int rank;
    long long n[4];   // extent per dimension
    long long s[4];   // stride per dimension, in elements
};

// Row-major tensor `base` of shape `shape` (rank r), region starting at `lo` with extents `n`.
__device__ __forceinline__ EtTile et_tile(float* base, int r, const long long* shape,
                                          const long long* lo, const long long* n) {
    EtTile t;
    t.rank = r;
    long long stride = 1, off = 0;
    for (int d = r - 1; d >= 0; --d) {
        t.n[d] = n[d];
        t.s[d] = stride;
        off += lo[d] * stride;
        stride *= shape[d];
    }
    t.p = base + off;
    return t;
}

// Element `i` of the tile flattened over its first `dims` dimensions, at offset `last` in
// the dimension after them. Index math in 32 bits (tiles are far below 2^31 elements).
__device__ __forceinline__ float* et_at(const EtTile& t, int i, int dims, long long last) {
    long long off = 0;
    for (int d = dims - 1; d >= 0; --d) {
        int n = (int)t.n[d];
        off += (long long)(i % n) * t.s[d];
        i /= n;
    }
    return t.p + off + (dims < t.rank ? last * t.s[dims] : 0);
}

__device__ __forceinline__ int et_count(const EtTile& t, int dims) {
    long long c = 1;
    for (int d = 0; d < dims; ++d) c *= t.n[d];
    return (int)c;
}

// Offset in `src` of the element of a result of shape src.n (rank src_rank, right-aligned
// against out's dimensions, size-1 dimensions broadcast) that out's element `e` receives.
__device__ __forceinline__ long long et_bcast(const EtTile& src, int src_rank, const EtTile& out,
                                              int e) {
    long long off = 0;
    int shift = out.rank - src_rank;
    for (int d = out.rank - 1; d >= 0; --d) {
        int n = (int)out.n[d];
        int i = e % n;
        e /= n;
        int sd = d - shift;
        if (sd >= 0 && src.n[sd] != 1) off += (long long)i * src.s[sd];
    }
    return off;
}

// row_sum: x summed over its last axis, broadcast into the out tile (numpy semantics)
__device__ void et_body_row_sum(const EtTile& x, const EtTile& out) {
    int cells = et_count(out, out.rank);
    long long k = x.n[x.rank - 1];
    EtTile rows = x;
    rows.n[x.rank - 1] = 1;
    for (int e = threadIdx.x; e < cells; e += blockDim.x) {
        const float* p = x.p + et_bcast(rows, x.rank, out, e);
        float acc = 0.f;
        for (long long j = 0; j < k; ++j) acc += p[j * x.s[x.rank - 1]];
        *et_at(out, e, out.rank, 0) = acc;
    }
}

// sum_partials: p summed over its first axis, broadcast into the out tile
__device__ void et_body_sum_partials(const EtTile& p, const EtTile& out) {
    int cells = et_count(out, out.rank);
    EtTile inner = p;  // p without its first axis
    for (int d = 0; d + 1 < p.rank; ++d) { inner.n[d] = p.n[d + 1]; inner.s[d] = p.s[d + 1]; }
    for (int e = threadIdx.x; e < cells; e += blockDim.x) {
        const float* q = p.p + et_bcast(inner, p.rank - 1, out, e);
        float acc = 0.f;
        for (long long s = 0; s < p.n[0]; ++s) acc += q[s * p.s[0]];
        *et_at(out, e, out.rank, 0) = acc;
    }
}

// gemm_partial: out[0, r, c] = sum_k x[r, k] * w[k, c]
__device__ void et_body_gemm_partial(const EtTile& x, const EtTile& w, const EtTile& out) {
    int rows = (int)x.n[0], cols = (int)w.n[1];
    long long k = x.n[1];
    for (int e = threadIdx.x; e < rows * cols; e += blockDim.x) {
        int r = e / cols, c = e % cols;
        float acc = 0.f;
        for (long long j = 0; j < k; ++j)
            acc += x.p[r * x.s[0] + j * x.s[1]] * w.p[j * w.s[0] + c * w.s[1]];
        out.p[r * out.s[out.rank - 2] + c * out.s[out.rank - 1]] = acc;
    }
}
