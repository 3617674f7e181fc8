// Dense bodies of the decode step (task kinds of eventtensor/ops/llm.py): embedding, RMSNorm,
// split-K linear, residual add, SiLU-multiply and the two argmax steps. Included after
// bodies.cuh and llm_common.cuh. Each body is called by all threads of the CTA (256, 8 warps;
// blockDim.x a multiple of 32) after a CTA barrier; tiles of any element type (float or
// et_bf16) are read as float, math is fp32, results are rounded to the out tile's type.
// Every body has a fast path for plain tiles (no index vectors, 32-bit offsets) of unit
// column stride and a per-element path for any other tile.
#pragma once

// ------------------------------------------------------------------ tile helpers

// 8 bytes: 4 bfloat16 elements.
struct alignas(8) EtWord8 {
    unsigned u[2];
};

// Element e of a 16-byte word of float (e < 4) or bfloat16 (e < 8) elements, widened.
__device__ __forceinline__ float et_word_at(const EtWord16& w, int e, const float*) {
    return __uint_as_float(w.u[e]);
}
__device__ __forceinline__ float et_word_at(const EtWord16& w, int e, const et_bf16*) {
    return __uint_as_float(e & 1 ? w.u[e >> 1] & 0xffff0000u : w.u[e >> 1] << 16);
}

// A weight word of a linear body. With HINT (the knob ET_WEIGHTS_EVICT_FIRST set, and room
// in the registers), loaded with an L2 evict-first policy (and not kept in L1): a step reads
// each weight once, so that they leave L2 before the activations, caches and kernel code
// that later tasks read again.
#ifndef ET_WEIGHTS_EVICT_FIRST
#define ET_WEIGHTS_EVICT_FIRST 0
#endif
template <bool HINT>
__device__ __forceinline__ EtWord16 et_load_weight_word(const void* p) {
    if constexpr (!HINT) return *reinterpret_cast<const EtWord16*>(p);
    EtWord16 w;  // (volatile: the policy made beside each load, not held in registers)
    asm volatile("{\n\t.reg .b64 policy;\n\t"
        "createpolicy.fractional.L2::evict_first.b64 policy, 1.0;\n\t"
        "ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], policy;\n\t}"
        : "=r"(w.u[0]), "=r"(w.u[1]), "=r"(w.u[2]), "=r"(w.u[3]) : "l"(p));
    return w;
}

// Four consecutive elements at p (aligned to 4 elements), as float.
__device__ __forceinline__ float4 et_load4(const float* p) {
    return *reinterpret_cast<const float4*>(p);
}
__device__ __forceinline__ float4 et_load4(const et_bf16* p) {
    const EtWord8 w = *reinterpret_cast<const EtWord8*>(p);
    float4 v;
    v.x = __uint_as_float(w.u[0] << 16);
    v.y = __uint_as_float(w.u[0] & 0xffff0000u);
    v.z = __uint_as_float(w.u[1] << 16);
    v.w = __uint_as_float(w.u[1] & 0xffff0000u);
    return v;
}

// v rounded to four consecutive elements at p (aligned to 4 elements).
__device__ __forceinline__ void et_store4(float* p, float4 v) {
    *reinterpret_cast<float4*>(p) = v;
}
__device__ __forceinline__ void et_store4(et_bf16* p, float4 v) {
    EtWord8 w;
    w.u[0] = et_from_float<et_bf16>(v.x).bits | (unsigned)et_from_float<et_bf16>(v.y).bits << 16;
    w.u[1] = et_from_float<et_bf16>(v.z).bits | (unsigned)et_from_float<et_bf16>(v.w).bits << 16;
    *reinterpret_cast<EtWord8*>(p) = w;
}

__device__ __forceinline__ float4 et_add4(float4 a, float4 b) {
    a.x += b.x;
    a.y += b.y;
    a.z += b.z;
    a.w += b.w;
    return a;
}

// Whether t is plain and read four columns at a time: unit column stride, columns a multiple
// of 4, every other stride a multiple of 4 and p aligned to 4 elements.
template <typename T>
__device__ __forceinline__ bool et_quads(const EtTileT<T>& t) {
    if (t.rank == 0 || !et_plain(t) ||
        reinterpret_cast<unsigned long long>(t.p) % (4 * sizeof(T)))
        return false;
    bool ok = true;
#pragma unroll
    for (int d = 0; d < 4; ++d) {
        if (d + 1 < t.rank) ok &= t.s[d] % 4 == 0;
        if (d + 1 == t.rank) ok &= t.s[d] == 1 && t.n[d] % 4 == 0;
    }
    return ok;
}

// Extent and stride of dimension rank - 1 - back of t (1 and 0 past its rank). (The
// helpers of this header select dimensions in loops unrolled over the 4 a tile may have, never
// by a run-time index, so that a tile's fields stay in registers; as selects, which the
// compiler does not turn back into an indexed load.)
template <typename T>
__device__ __forceinline__ int et_back_n(const EtTileT<T>& t, int back) {
    int v = 1;
#pragma unroll
    for (int d = 0; d < 4; ++d) v = d + 1 + back == t.rank ? (int)t.n[d] : v;
    return v;
}
template <typename T>
__device__ __forceinline__ int et_back_s(const EtTileT<T>& t, int back) {
    int v = 0;
#pragma unroll
    for (int d = 0; d < 4; ++d) v = d + 1 + back == t.rank ? (int)t.s[d] : v;
    return v;
}

// A tile seen as [leads, rows, cols]: its last dimension the columns, the one before the
// rows (extent 1 at rank 1), all earlier ones flattened into the leading (split) index.
template <typename T>
__device__ __forceinline__ int et_cols(const EtTileT<T>& t) { return et_back_n(t, 0); }
template <typename T>
__device__ __forceinline__ int et_nrows(const EtTileT<T>& t) { return et_back_n(t, 1); }
template <typename T>
__device__ __forceinline__ int et_leads(const EtTileT<T>& t) {
    int n = 1;
#pragma unroll
    for (int d = 0; d < 2; ++d)
        if (d + 2 < t.rank) n *= (int)t.n[d];
    return n;
}

// Offset of element (lead, r, c) of t seen as [leads, rows, cols].
template <typename T>
__device__ __forceinline__ long long et_lrc_off(const EtTileT<T>& t, int lead, int r, int c) {
    long long off = 0;
#pragma unroll
    for (int d = 3; d >= 0; --d)
        if (d < t.rank) {
            int i;
            if (d == t.rank - 1) {
                i = c;
            } else if (d == t.rank - 2) {
                i = r;
            } else {
                const int n = (int)t.n[d];
                i = lead % n;
                lead /= n;
            }
            off += (long long)(t.idx[d] ? t.idx[d][i] : i) * t.s[d];
        }
    return off;
}

// Offset of the element of t at position r of dimension 0 and 0 of every other dimension.
template <typename T>
__device__ __forceinline__ long long et_first_off(const EtTileT<T>& t, int r) {
    long long off = et_off(t, 0, r);
#pragma unroll
    for (int d = 1; d < 4; ++d)
        if (d < t.rank) off += et_off(t, d, 0);
    return off;
}

// ------------------------------------------------------------------ rows over the CTA

// Rows of a tile spread over the CTA: each row gets a group of wpr warps (a power of two,
// the largest with rows * wpr <= warps, so that a few rows still use every warp); group g
// takes rows g, g + groups, ... in `iters` iterations, the same count on every thread, so
// that barriers inside an iteration are uniform. `part` numbers the threads of a group.
struct EtRowGroups {
    int wpr, threads, groups, group, part, iters;
};

__device__ __forceinline__ EtRowGroups et_row_groups(int rows) {
    const int warps = (int)blockDim.x >> 5;
    EtRowGroups g;
    g.wpr = 1;
    while (2 * g.wpr <= warps && rows * 2 * g.wpr <= warps) g.wpr *= 2;
    g.threads = 32 * g.wpr;
    g.groups = warps / g.wpr;
    g.group = (int)threadIdx.x / g.threads;
    g.part = (int)threadIdx.x % g.threads;
    g.iters = (rows + g.groups - 1) / g.groups;
    return g;
}

// v summed over the threads of the calling thread's row group, for each of them. Writes
// et_llm_smem()[0 .. warps) and ends with a barrier when wpr > 1 (every thread calls it).
__device__ __forceinline__ float et_group_total(float v, const EtRowGroups& g) {
    v = et_warp_sum(v);
    if (g.wpr == 1) return v;
    float* sm = et_llm_smem();
    const int warp = (int)threadIdx.x >> 5, first = warp & ~(g.wpr - 1);
    if ((threadIdx.x & 31) == 0) sm[warp] = v;
    __syncthreads();
    float s = 0.f;
    for (int i = 0; i < g.wpr; ++i) s += sm[first + i];
    __syncthreads();
    return s;
}

// Whether (a, ia) comes first in argmax order: the larger value, NaN after every number
// (NaN is smaller than everything), ties (and two NaNs) to the lower index.
__device__ __forceinline__ bool et_arg_first(float a, int ia, float b, int ib) {
    const bool na = a != a, nb = b != b;
    if (na || nb) return nb && (!na || ia < ib);
    return a > b || (a == b && ia < ib);
}

// The first in argmax order of the (v, i) of the threads of the calling thread's row group,
// for each of them (a total order: every thread gets the same pair). Writes et_llm_smem()
// [0 .. warps) (values) and [32 .. 32 + warps) (indices) and ends with a barrier when wpr > 1
// (every thread calls it).
__device__ __forceinline__ void et_group_argmax(float& v, int& i, const EtRowGroups& g) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, v, o);
        const int oi = __shfl_xor_sync(0xffffffffu, i, o);
        if (et_arg_first(ov, oi, v, i)) v = ov, i = oi;
    }
    if (g.wpr == 1) return;
    float* sv = et_llm_smem();
    int* si = reinterpret_cast<int*>(sv + 32);
    const int warp = (int)threadIdx.x >> 5, first = warp & ~(g.wpr - 1);
    if ((threadIdx.x & 31) == 0) sv[warp] = v, si[warp] = i;
    __syncthreads();
    for (int w = first; w < first + g.wpr; ++w)
        if (et_arg_first(sv[w], si[w], v, i)) v = sv[w], i = si[w];
    __syncthreads();
}

// ------------------------------------------------------------------ embedding

// embedding: row [.., E] (the gathered table rows, bf16) copied to out [.., E] (float),
// converted. Fast path when every row of both is a run of aligned 16-byte words: thread t
// takes words t, t + blockDim.x, ... (4 loads in flight before it stores), a warp reading
// 512 contiguous bytes per load.
template <typename W, typename O>
__device__ __forceinline__ void et_body_embedding(const EtTileT<W>& row, const EtTileT<O>& out) {
    const int rows = et_rows(row), cols = et_cols(row);
    const int bd = (int)blockDim.x, tid = (int)threadIdx.x;
    if (et_rows_of_words(row) && et_rows_of_words(out) && et_plain(out) &&
        et_rows(out) == rows && et_cols(out) == cols) {
        constexpr int V = 16 / sizeof(W);
        const int words = cols / V, items = rows * words;
        for (int e0 = 0; e0 < items; e0 += 4 * bd) {
            EtWord16 v[4];
#pragma unroll
            for (int u = 0; u < 4; ++u) {
                const int e = e0 + tid + u * bd, r = e / words;
                if (e < items)
                    v[u] = *reinterpret_cast<const EtWord16*>(row.p + et_row_off(row, r) +
                                                               (e - r * words) * V);
            }
#pragma unroll
            for (int u = 0; u < 4; ++u) {
                const int e = e0 + tid + u * bd, r = e / words;
                if (e >= items) continue;
                O* dst = out.p + et_row_off(out, r) + (e - r * words) * V;
#pragma unroll
                for (int q = 0; q < V / 4; ++q) {
                    float4 f;
                    f.x = et_word_at(v[u], 4 * q, row.p);
                    f.y = et_word_at(v[u], 4 * q + 1, row.p);
                    f.z = et_word_at(v[u], 4 * q + 2, row.p);
                    f.w = et_word_at(v[u], 4 * q + 3, row.p);
                    et_store4(dst + 4 * q, f);
                }
            }
        }
        return;
    }
    const int orows = et_nrows(out), rrows = et_nrows(row);
#pragma unroll 1
    for (int e = tid; e < rows * cols; e += bd) {
        const int r = e / cols, c = e - r * cols;
        out.p[et_lrc_off(out, r / orows, r % orows, c)] =
            et_from_float<O>(et_to_float(row.p[et_lrc_off(row, r / rrows, r % rrows, c)]));
    }
}

// ------------------------------------------------------------------ rms_norm

// rms_norm: out[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * w for the rows of x [n, E],
// w [E], out [n, E]. Rows spread over the CTA (et_row_groups: one row uses all 8 warps, 8 rows
// and more a warp each); a thread takes columns part, part + threads, ...
//
// The fast path, for x, w and out of 16-byte loads of 4 columns (x and out rows xr and orr
// apart): a thread's columns go in chunks of ET_NORM_QUADS groups of 4, each chunk's loads
// issued together (Llama-3.2-1B's 2048 columns over a warp: one chunk), and w's lines are
// prefetched into L1 meanwhile; after the group's sum of squares the scaling reads x and w
// again, both from L1. Two rounds of loads a row, one of them from L1, instead of one memory
// latency every few columns. Not inlined: its registers would count against every task of
// the kernel's dispatch function.
#define ET_NORM_QUADS 16
template <typename X, typename W, typename O>
__device__ __noinline__ void et_rms_norm_quads(const X* x, int xr, const W* w, O* out, int orr,
                                               int rows, int cols, float eps) {
    constexpr int Q = ET_NORM_QUADS;
    const EtRowGroups g = et_row_groups(rows);
    const int step = 4 * g.threads, span = Q * step;  // a chunk: Q quads of every thread
    const float4 zero = {0.f, 0.f, 0.f, 0.f};
    for (int it = 0; it < g.iters; ++it) {
        const int r = it * g.groups + g.group;
        const bool live = r < rows;
        const X* xp = x + r * xr;
        float ss = 0.f;
        for (int base = 4 * g.part; live && base < cols; base += span) {
            float4 v[Q];
#pragma unroll
            for (int q = 0; q < Q; ++q) {
                const int c = base + q * step;
                v[q] = c < cols ? et_load4(xp + c) : zero;
                if (c < cols) et_prefetch_l1(w + c);
            }
#pragma unroll
            for (int q = 0; q < Q; ++q)
                ss += (v[q].x * v[q].x + v[q].y * v[q].y) + (v[q].z * v[q].z + v[q].w * v[q].w);
        }
        const float inv = rsqrtf(et_group_total(ss, g) / (float)cols + eps);
        O* op = out + r * orr;
        for (int base = 4 * g.part; live && base < cols; base += span) {
            float4 v[Q], s[Q];
#pragma unroll
            for (int q = 0; q < Q; ++q) {
                const int c = base + q * step;
                v[q] = c < cols ? et_load4(xp + c) : zero;
                s[q] = c < cols ? et_load4(w + c) : zero;
            }
#pragma unroll
            for (int q = 0; q < Q; ++q) {
                const int c = base + q * step;
                if (c < cols)
                    et_store4(op + c, {v[q].x * inv * s[q].x, v[q].y * inv * s[q].y,
                                       v[q].z * inv * s[q].z, v[q].w * inv * s[q].w});
            }
        }
    }
}

template <typename X, typename W, typename O>
__device__ __forceinline__ void et_body_rms_norm(const EtTileT<X>& x, const EtTileT<W>& w,
                                                 const EtTileT<O>& out, float eps) {
    const int rows = et_nrows(x), cols = et_cols(x);
    if (et_quads(x) && et_quads(w) && et_quads(out) && x.rank <= 2 && w.rank == 1 &&
        out.rank <= 2) {
        et_rms_norm_quads(x.p, x.rank == 2 ? (int)x.s[0] : 0, w.p, out.p,
                          out.rank == 2 ? (int)out.s[0] : 0, rows, cols, eps);
        return;
    }
    const EtRowGroups g = et_row_groups(rows);
    for (int it = 0; it < g.iters; ++it) {
        const int r = it * g.groups + g.group;
        const bool live = r < rows;
        float ss = 0.f;
        for (int c = g.part; live && c < cols; c += g.threads) {
            const float v = et_to_float(x.p[et_lrc_off(x, 0, r, c)]);
            ss += v * v;
        }
        const float inv = rsqrtf(et_group_total(ss, g) / (float)cols + eps);
        for (int c = g.part; live && c < cols; c += g.threads)
            out.p[et_lrc_off(out, 0, r, c)] = et_from_float<O>(
                et_to_float(x.p[et_lrc_off(x, 0, r, c)]) * inv *
                et_to_float(w.p[et_lrc_off(w, 0, 0, c)]));
    }
}

// ------------------------------------------------------------------ elementwise on partials

// Four columns from pa and from pb of two tiles' rows, each summed over its leading (split)
// index: leads first, first + step, ... below la (slices sa apart) and below lb (sb apart),
// up to 8 loads of each in flight together (one round for 8 * step leads).
template <typename A, typename B>
__device__ __forceinline__ void et_lead_sums4(const A* pa, int la, int sa, const B* pb, int lb,
                                              int sb, int first, int step, float4& va,
                                              float4& vb) {
    va = vb = {0.f, 0.f, 0.f, 0.f};
    const int leads = la > lb ? la : lb;
    for (int s0 = first; s0 < leads; s0 += 8 * step) {
        float4 x[8], y[8];
#pragma unroll
        for (int u = 0; u < 8; ++u) {
            const int s = s0 + u * step;
            if (s < la) x[u] = et_load4(pa + s * sa);
            if (s < lb) y[u] = et_load4(pb + s * sb);
        }
#pragma unroll
        for (int u = 0; u < 8; ++u) {
            const int s = s0 + u * step;
            if (s < la) va = et_add4(va, x[u]);
            if (s < lb) vb = et_add4(vb, y[u]);
        }
    }
}

// One element of a tile's rows summed over its leading (split) index.
template <typename T>
__device__ __forceinline__ float et_lead_sum(const EtTileT<T>& t, int leads, int r, int c) {
    float acc = 0.f;
    for (int s = 0; s < leads; ++s) acc += et_to_float(t.p[et_lrc_off(t, s, r, c)]);
    return acc;
}

// v as a store to O leaves it (rounded to bf16 for a bf16 O).
template <typename O>
__device__ __forceinline__ float4 et_as_stored(float4 v) {
    return {et_to_float(et_from_float<O>(v.x)), et_to_float(et_from_float<O>(v.y)),
            et_to_float(et_from_float<O>(v.z)), et_to_float(et_from_float<O>(v.w))};
}

struct EtNoSink {
    __device__ __forceinline__ void operator()(int, float4) const {}
};

// out[r, c] = f(sum over the leading index of a at (r, c), the same of b) for every cell of
// out [rows, cols] (a, b: [S, rows, cols] or [rows, cols]). Fast path for tiles of rank <= 3
// read four columns at a time: a unit is a group of 4 columns of a row; thread t takes units
// t, t + blockDim.x, ... (a warp reading 512 contiguous bytes of a float row per load), the
// loads of a and b in flight together. Where the units leave threads idle and there are more
// than 8 leads (a few rows summed over many partials), lead groups: threads t + g * units
// (g < LG, LG = min(threads / units, ceil(leads / 8))) take the leads g, g + LG, ... of unit
// t, one round of loads, and group 0 adds the others' sums from et_llm_smem (a barrier
// between, and one before the body returns). The fast path hands each unit e (row e / quads,
// columns 4 (e % quads) ..) to sink(e, its four values as stored) and returns true; the
// other path calls no sink and returns false.
template <typename A, typename B, typename O, typename F, typename K = EtNoSink>
__device__ __forceinline__ bool et_map_partials(const EtTileT<A>& a, const EtTileT<B>& b,
                                                const EtTileT<O>& out, F f, K sink = {}) {
    const int rows = et_nrows(out), cols = et_cols(out), la = et_leads(a), lb = et_leads(b);
    if (et_quads(a) && et_quads(b) && et_quads(out) && a.rank <= 3 && b.rank <= 3 &&
        out.rank <= 2) {
        const int ar = et_back_s(a, 1), br = et_back_s(b, 1), orr = et_back_s(out, 1);
        const int as = a.rank == 3 ? (int)a.s[0] : 0, bs = b.rank == 3 ? (int)b.s[0] : 0;
        const int quads = cols / 4, units = rows * quads, nt = (int)blockDim.x;
        const int want = ((la > lb ? la : lb) + 7) / 8, room = units > 0 ? nt / units : 0;
        const int lg = want < room ? want : room;  // lead groups (0 or 1: none)
        // unit e's sums over the leads first, first + step, ..., into va and vb
        auto sums = [&](int e, int first, int step, float4& va, float4& vb) {
            const int r = e / quads, c = 4 * (e - r * quads);
            et_lead_sums4(a.p + r * ar + c, la, as, b.p + r * br + c, lb, bs, first, step, va,
                          vb);
        };
        auto apply = [&](int e, float4 va, float4 vb) {
            const int r = e / quads, c = 4 * (e - r * quads);
            float4 v;
            v.x = f(va.x, vb.x);
            v.y = f(va.y, vb.y);
            v.z = f(va.z, vb.z);
            v.w = f(va.w, vb.w);
            et_store4(out.p + r * orr + c, v);
            sink(e, et_as_stored<O>(v));
        };
        if (lg > 1) {  // (uniform) one pass of units * lg threads
            float4* P = reinterpret_cast<float4*>(et_llm_smem());  // 2 per thread past group 0
            const int e = (int)threadIdx.x % units, g = (int)threadIdx.x / units;
            float4 va, vb;
            if (g < lg) sums(e, g, lg, va, vb);
            if (g > 0 && g < lg) {
                P[2 * ((int)threadIdx.x - units)] = va;
                P[2 * ((int)threadIdx.x - units) + 1] = vb;
            }
            __syncthreads();
            if (g == 0) {
#pragma unroll 1
                for (int h = 1; h < lg; ++h) {
                    const int i = 2 * ((h - 1) * units + e);
                    va = et_add4(va, P[i]);
                    vb = et_add4(vb, P[i + 1]);
                }
                apply(e, va, vb);
            }
            __syncthreads();
            return true;
        }
#pragma unroll 1
        for (int e = (int)threadIdx.x; e < units; e += nt) {
            float4 va, vb;
            sums(e, 0, 1, va, vb);
            apply(e, va, vb);
        }
        return true;
    }
#pragma unroll 1
    for (int e = (int)threadIdx.x; e < rows * cols; e += (int)blockDim.x) {
        const int r = e / cols, c = e - r * cols;
        out.p[et_lrc_off(out, 0, r, c)] =
            et_from_float<O>(f(et_lead_sum(a, la, r, c), et_lead_sum(b, lb, r, c)));
    }
    return false;
}

// residual_add: out [n, E] = x [n, E] + the split-K partials parts [S, n, E] summed.
struct EtAdd {
    __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
};
template <typename X, typename P, typename O>
__device__ __forceinline__ void et_body_residual_add(const EtTileT<X>& x, const EtTileT<P>& parts,
                                                     const EtTileT<O>& out) {
    et_map_partials(x, parts, out, EtAdd{});
}

// residual_add_sumsq: residual_add, then ss [n, 1] (or [n]) = the sum of the squares of each
// row of out as stored: its share of the RMSNorm that norm_linear_partial folds into the
// projections after it. The fast path of et_map_partials leaves each unit's squares in
// et_body_scratch (up to ET_SCRATCH_FLOATS units), so that the rows' sums read them there;
// other tiles read out back (after the barrier that makes the CTA's stores visible to all
// its threads, as residual_rms_norm does).
template <typename X, typename P, typename O, typename S>
__device__ __forceinline__ void et_body_residual_add_sumsq(const EtTileT<X>& x,
                                                           const EtTileT<P>& parts,
                                                           const EtTileT<O>& out,
                                                           const EtTileT<S>& ss) {
    float* sq = et_body_scratch();  // unit e's sum of squares at sq[e]
    const bool kept = et_map_partials(x, parts, out, EtAdd{}, [sq](int e, float4 v) {
        if (e < ET_SCRATCH_FLOATS) sq[e] = (v.x * v.x + v.y * v.y) + (v.z * v.z + v.w * v.w);
    });
    __syncthreads();
    const int rows = et_nrows(out), cols = et_cols(out), quads = cols / 4;
    const bool scratch = kept && rows * quads <= ET_SCRATCH_FLOATS;
    const EtRowGroups g = et_row_groups(rows);
#pragma unroll 1
    for (int it = 0; it < g.iters; ++it) {  // uniform: et_group_total may hold barriers
        const int r = it * g.groups + g.group;
        float t = 0.f;
        if (r < rows && scratch)
#pragma unroll 1
            for (int q = g.part; q < quads; q += g.threads) t += sq[r * quads + q];
        else if (r < rows)
#pragma unroll 1
            for (int c = g.part; c < cols; c += g.threads) {
                const float v = et_to_float(out.p[et_lrc_off(out, 0, r, c)]);
                t += v * v;
            }
        t = et_group_total(t, g);
        if (r < rows && g.part == 0) ss.p[et_first_off(ss, r)] = et_from_float<S>(t);
    }
}

// residual_rms_norm: out [n, E] = x + the partials parts [S, n, E] summed (residual_add),
// then h [n, E] = the RMSNorm of out's rows with weight w [E] (rms_norm, reading out back:
// the barrier between makes the CTA's stores visible to all its threads).
template <typename X, typename P, typename W, typename O>
__device__ __forceinline__ void et_body_residual_rms_norm(const EtTileT<X>& x,
                                                          const EtTileT<P>& parts,
                                                          const EtTileT<W>& w,
                                                          const EtTileT<O>& out,
                                                          const EtTileT<O>& h, float eps) {
    et_body_residual_add(x, parts, out);
    __syncthreads();
    et_body_rms_norm(out, w, h, eps);
}

// silu(g) * u, silu(g) = g / (1 + exp(-g)): exp overflows to inf for g < -88, giving -0,
// never NaN.
__device__ __forceinline__ float et_silu_mul(float g, float u) { return g / (1.f + expf(-g)) * u; }

// silu_mul: out [n, c] = et_silu_mul of the gate and up partials [S, n, c] summed.
template <typename G, typename U, typename O>
__device__ __forceinline__ void et_body_silu_mul(const EtTileT<G>& gate, const EtTileT<U>& up,
                                                 const EtTileT<O>& out) {
    et_map_partials(gate, up, out, [](float g, float u) { return et_silu_mul(g, u); });
}

// ------------------------------------------------------------------ argmax

// argmax_partial: for each row r of logits x [n, V'] (V' >= 1), mx[r] its max and arg[r] =
// tile * tile_index + the column of its first occurrence (et_arg_first's order: NaN counts as
// smaller than every number, so a row is NaN only if all of it is). mx, arg: [n, 1] or [n].
// Rows spread over the CTA (et_row_groups), each thread scanning columns part, part +
// threads, ...
template <typename X, typename O>
__device__ __forceinline__ void et_body_argmax_partial(const EtTileT<X>& x, const EtTileT<O>& mx,
                                                       const EtITile& arg, int tile,
                                                       int tile_index) {
    const int rows = et_nrows(x), cols = et_cols(x);
    const EtRowGroups g = et_row_groups(rows);
    for (int it = 0; it < g.iters; ++it) {
        const int r = it * g.groups + g.group;
        float v = __uint_as_float(0x7fc00000u);  // NaN at the largest index: any column beats it
        int i = 0x7fffffff;
        if (r < rows) {
#pragma unroll 4
            for (int c = g.part; c < cols; c += g.threads) {
                const float xc = et_to_float(x.p[et_lrc_off(x, 0, r, c)]);
                if (et_arg_first(xc, c, v, i)) v = xc, i = c;
            }
        }
        et_group_argmax(v, i, g);
        if (r < rows && g.part == 0) {
            mx.p[et_first_off(mx, r)] = et_from_float<O>(v);
            arg.p[et_first_off(arg, r)] = tile * tile_index + i;
        }
    }
}

// argmax_reduce: out[r] = arg[r, t] of the tile t whose max x[r, t] comes first in
// et_arg_first's order (the largest, ties to the first tile, so to the lowest vocabulary
// index) for x, arg [n, tiles] and out [n]. Rows spread over the CTA as in argmax_partial.
template <typename X>
__device__ __forceinline__ void et_body_argmax_reduce(const EtTileT<X>& x, const EtITile& arg,
                                                      const EtITile& out) {
    const int rows = et_nrows(x), tiles = et_cols(x);
    const EtRowGroups g = et_row_groups(rows);
    for (int it = 0; it < g.iters; ++it) {
        const int r = it * g.groups + g.group;
        float v = __uint_as_float(0x7fc00000u);
        int t = 0x7fffffff;
        if (r < rows) {
#pragma unroll 4
            for (int c = g.part; c < tiles; c += g.threads) {
                const float xc = et_to_float(x.p[et_lrc_off(x, 0, r, c)]);
                if (et_arg_first(xc, c, v, t)) v = xc, t = c;
            }
        }
        et_group_argmax(v, t, g);
        if (r < rows && g.part == 0) out.p[et_first_off(out, r)] = arg.p[et_lrc_off(arg, 0, r, t)];
    }
}

// ------------------------------------------------------------------ linear_partial

// A linear_partial on plain tiles: out cell (r, j), at out[r * dr + j * dc], is the sum over
// t < k of x[r * xr + t * xk] * w[j * wr + t] (w's rows contiguous); with a fold (below),
// x[r, t] scaled by its row's et_norm_scales()[r0 + r] and its column's norm weight first.
struct EtLinear {
    int rows, cols, k, xr, xk, wr, dr, dc, r0;
};

template <typename A, typename B>
struct EtSame {
    static constexpr bool value = false;
};
template <typename A>
struct EtSame<A, A> {
    static constexpr bool value = true;
};

// The row scales of a folded RMSNorm (up to ET_NORM_ROWS rows).
#define ET_NORM_ROWS 64
__device__ __forceinline__ float* et_norm_scales() { return et_body_scratch(); }

// What the streaming and tensor-core passes do to x as they stage it: nothing (EtNoFold);
// with an EtSiluFold (silu_linear_partial), x holds the gate partials and each value the
// passes take is silu of the gate partials summed times the up partials summed (et_fold_x,
// et_fold_x4: the SiLU-and-multiply folded in; a type of its own, so that the other passes
// keep their registers); with an EtNormFold whose ss is set, scale it by an RMSNorm folded in
// (norm_linear_partial): row r by
// 1 / sqrt(sum over j < T of ss[r, j] / cols + eps), column t by the norm weight nw[t]. A pass
// given rows > 0 writes the row scales (et_fold_scales) once its first weight loads are
// issued, so that the sums' loads travel with them instead of before them (and, in the
// streaming pass, where one round of the CTA's threads loads them all, with x's first chunk
// too: one memory latency before the first step, not two); the later row blocks of the same
// tile get rows = 0 and reuse them. The column scales load with x (the
// streaming pass element by element, the tensor-core pass a chunk's through the scratch),
// so that a K-slice of any length folds. A zero EtNormFold (ss null) scales nothing: where a
// kernel has both kinds (ET_LINEAR_FOLDS, set by codegen when the program has
// norm_linear_partial tasks), linear_partial takes it too, so that the passes are compiled
// once, not once per kind.
#ifndef ET_LINEAR_FOLDS
#define ET_LINEAR_FOLDS 0
#endif
struct EtNoFold {};
template <typename N>
struct EtNormFold {
    const float* ss;  // row r's sums at ss[r * ss_r + j] (null: no norm)
    const N* nw;      // column t's weight at nw[t]
    int ss_r, T, rows, cols;
    float eps;
};
struct EtSiluFold {
    unsigned long long up;  // the up partials (x's layout) this many bytes past x
    int parts, part_s;      // partial p of x and up at p * part_s
};
// Whether F folds an RMSNorm (EtNormFold).
template <typename F>
constexpr bool et_folds = false;
template <typename N>
constexpr bool et_folds<EtNormFold<N>> = true;

// Fold f's row sums, a group of TP <= 32 lanes a row (TP the power of two from T up to 32),
// lane j summing the row's sums j, j + TP, ... (one load where T <= 32): et_fold_part loads
// the share of the CTA's thread i (i < rows * TP, else 0), et_fold_put (all threads of the
// round i0 .. i0 + blockDim.x, uniform: shuffles) sums each group's and writes its row's
// scale to et_norm_scales (the caller's barrier makes them visible).
template <typename N>
__device__ __forceinline__ int et_fold_lanes_log2(const EtNormFold<N>& f) {
    return et_log2_ceil(f.T < 32 ? f.T : 32);
}
template <typename N>
__device__ __forceinline__ float et_fold_part(const EtNormFold<N>& f, int i) {
    const int lg = et_fold_lanes_log2(f), r = i >> lg, j = i & ((1 << lg) - 1);
    if (r >= f.rows) return 0.f;
    float v = j < f.T ? f.ss[r * f.ss_r + j] : 0.f;
    for (int jj = j + 32; jj < f.T; jj += 32) v += f.ss[r * f.ss_r + jj];  // (T > 32)
    return v;
}
template <typename N>
__device__ __forceinline__ void et_fold_put(const EtNormFold<N>& f, int i, float v) {
    const int lg = et_fold_lanes_log2(f), TP = 1 << lg;
    v = et_group_sum(v, TP);
    if (i < f.rows << lg && (i & (TP - 1)) == 0)
        et_norm_scales()[i >> lg] = rsqrtf(v / (float)f.cols + f.eps);
}

// The up partial at the same place as x's element p (a SiLU fold's `up` bytes past it).
template <typename T>
__device__ __forceinline__ const float* et_fold_up(const T* p, unsigned long long up) {
    return reinterpret_cast<const float*>(reinterpret_cast<unsigned long long>(p) + up);
}
// With a SiLU fold, the value the passes take for x's element *p: et_silu_mul of the gate
// partials (x) and the up partials summed there.
template <typename X>
__device__ __forceinline__ float et_fold_x(const X* p, const EtSiluFold& f) {
    const float* q = et_fold_up(p, f.up);
    float g = 0.f, u = 0.f;
#pragma unroll 2
    for (int k = 0; k < f.parts; ++k) {
        g += et_to_float(p[(long long)k * f.part_s]);
        u += q[(long long)k * f.part_s];
    }
    return et_silu_mul(g, u);
}
// The same for the four floats of x from p (16-byte aligned).
__device__ __forceinline__ float4 et_fold_x4(const float* p, const EtSiluFold& f) {
    const float* q = et_fold_up(p, f.up);
    float4 g = {0.f, 0.f, 0.f, 0.f}, u = g;
#pragma unroll 2
    for (int k = 0; k < f.parts; ++k) {
        g = et_add4(g, et_load4(p + (long long)k * f.part_s));
        u = et_add4(u, et_load4(q + (long long)k * f.part_s));
    }
    return {et_silu_mul(g.x, u.x), et_silu_mul(g.y, u.y), et_silu_mul(g.z, u.z),
            et_silu_mul(g.w, u.w)};
}

// All threads: fold f's row scales (its `rows` rows) into et_norm_scales, a round of the
// CTA's threads at a time (the caller's barrier makes them visible).
template <typename N>
__device__ __forceinline__ void et_fold_scales(const EtNormFold<N>& f) {
    const int n = f.rows << et_fold_lanes_log2(f);
#pragma unroll 1
    for (int i0 = 0; i0 < n; i0 += (int)blockDim.x) {  // (uniform: shuffles)
        const int i = i0 + (int)threadIdx.x;
        et_fold_put(f, i, et_fold_part(f, i));
    }
}
__device__ __forceinline__ void et_fold_scales(const EtNoFold&) {}

// Weight words of the one-row streaming path through shared memory (knob ET_LINEAR_ASYNC = D
// rounds, 0: off): each thread copies its own words of the rounds ahead (a round: the
// R * KW = 16 words a thread takes in one step) with cp.async into its own slots of a ring of
// D rounds in dynamic shared memory (D * ET_ASYNC_ROUND_BYTES a CTA). A step reads its round
// into registers and at once refills the slot with the round D ahead, so that D rounds are in
// flight while it computes one: 128 KB a CTA with D = 2 instead of the 64 KB its registers
// hold. A thread reads back only what it copied itself: no barrier, only its own
// cp.async groups (one per round) to wait for. Excludes the stage ring (ET_STAGE_BYTES).
// The ring is there only where the launch gives the CTA that much dynamic shared memory
// (et_linear_ring; a launch may keep it for L1): without it, the path loads the words into
// registers, as with ET_LINEAR_ASYNC 0.
#ifndef ET_LINEAR_ASYNC
#define ET_LINEAR_ASYNC 0
#endif
#ifndef ET_LINEAR_EARLY  // (runtime.cuh sets it in a megakernel)
#define ET_LINEAR_EARLY 0
#endif
// ET_LINEAR_EARLY_ROUNDS: the rounds a one-row linear task issues before its waits (bit 1 of
// ET_LINEAR_EARLY), 1 to ET_LINEAR_ASYNC (the default: the whole ring); the body issues the
// rest of the ring's. Copies issued early compete for memory with the tasks on the critical
// path that the linear waits for; yet on an H100, Llama-3.2-1B at B = 1, 2 rounds of 2 gave
// 1.595 ms a step against 1.666 for 1 round and 1.743 for none
// (benchmarks/results/splits/decode_tiles_early_rounds_5ffd0c5_h100.md).
#ifndef ET_LINEAR_EARLY_ROUNDS
#define ET_LINEAR_EARLY_ROUNDS (ET_LINEAR_ASYNC > 0 ? ET_LINEAR_ASYNC : 1)
#endif
#define ET_ASYNC_ROUND_BYTES 65536  // 256 threads x 16 words x 16 bytes
static_assert(ET_LINEAR_ASYNC == 0 || ET_LINEAR_ASYNC == 2 || ET_LINEAR_ASYNC == 3,
              "ET_LINEAR_ASYNC takes 0 (off), 2 or 3 rounds");
static_assert(ET_LINEAR_EARLY_ROUNDS >= 1 &&
                  (ET_LINEAR_ASYNC == 0 || ET_LINEAR_EARLY_ROUNDS <= ET_LINEAR_ASYNC),
              "ET_LINEAR_EARLY_ROUNDS takes 1 to ET_LINEAR_ASYNC rounds");
// Whether the launch gave the one-row path its ring (ET_LINEAR_ASYNC rounds of dynamic shared
// memory).
__device__ __forceinline__ bool et_linear_ring() {
    return ET_LINEAR_ASYNC > 0 &&
           et_dynamic_smem_size() >= (unsigned)(ET_LINEAR_ASYNC * ET_ASYNC_ROUND_BYTES);
}
// This thread's first word in ring slot q % ET_LINEAR_ASYNC (a slot: one round, 16 words a
// thread, word i of thread t at i * 256 + t).
__device__ __forceinline__ EtWord16* et_async_slot(int q) {
    return et_async_ring() + (q % ET_LINEAR_ASYNC) * 16 * 256 + (int)threadIdx.x;
}

// Round q of the one-row path's weight words (R rows of KW words a thread, et_linear_words'
// mapping: step q % steps of column pass q / steps), this thread's share, into ring slot
// q % ET_LINEAR_ASYNC; zeros past k and c.
template <int R, int KW, typename W>
__device__ __forceinline__ void et_async_round(const W* w, const EtLinear& g, int steps, int q,
                                               unsigned long long policy) {
    constexpr int V = 16 / sizeof(W), STEP = 8 * KW;
    const int lane = (int)threadIdx.x & 7, grp = (int)threadIdx.x >> 3, words = g.k / V;
    const int jq = q / steps * 32 * R, sq = q % steps;
    const W* wq = w + (jq + grp) * g.wr + lane * V;
    EtWord16* slot = et_async_slot(q);
#pragma unroll
    for (int m = 0; m < KW; ++m)
#pragma unroll
        for (int u = 0; u < R; ++u) {
            const int word = STEP * sq + 8 * m;  // of lane 0
            const bool ok = jq + grp + 32 * u < g.cols && word + lane < words;
            et_async_word(slot + (u * KW + m) * 256, ok ? wq + 32 * u * g.wr + word * V : w,
                          ok ? 16 : 0, policy);
        }
}

// Rounds q0 .. q1 - 1 of the one-row path, a cp.async group each (empty past the last
// round): with q0 = 0 and q1 = ET_LINEAR_ASYNC, what et_linear_words has in flight before it
// takes round 0.
template <int R, int KW, typename W>
__device__ __forceinline__ void et_async_first_rounds(const W* w, const EtLinear& g,
                                                      unsigned long long policy, int q0,
                                                      int q1) {
    constexpr int V = 16 / sizeof(W), STEP = 8 * KW;
    const int steps = (g.k / V + STEP - 1) / STEP;
    const int rounds = (g.cols + 32 * R - 1) / (32 * R) * steps;
#pragma unroll 1
    for (int q = q0; q < q1; ++q) {
        if (q < rounds) et_async_round<R, KW>(w, g, steps, q, policy);
        et_async_commit();
    }
}

// ET_LINEAR_EARLY (runtime.cuh): the rounds (or tensor-core blocks) of the coming linear
// body this thread issued before its task's waits (0, or ET_LINEAR_EARLY_ROUNDS or
// ET_LINEAR_MMA_RING - 1). Each thread reads back only its own count, as it does its own
// copies: no barrier.
__device__ __forceinline__ unsigned char& et_async_early() {
    __shared__ unsigned char issued[256];
    return issued[threadIdx.x];
}
// This thread's early copies dropped: landed (none stays in flight) and the count zero. At
// kernel entry, where shared memory holds whatever an earlier kernel left there, and after a
// task whose early part ran but whose body did not (guarded, or the launch aborting).
__device__ __forceinline__ void et_early_drop() {
    if (ET_LINEAR_EARLY) {
        et_async_wait<0>();
        et_async_early() = 0;
    }
}

// The streaming path of linear_partial, for rows <= NB of x and weight rows that are runs of
// aligned 16-byte words (V = 16 / sizeof(W) elements each; k a multiple of V).
//
// Mapping: the 256 threads form 32 groups of 8 lanes. A column pass covers 32 * R weight
// rows: group g owns rows j0 + g + 32 * u (u < R), lane l of the group the words l, l + 8, ...
// of each. A step takes KW words of each of the R rows (words 8 * (KW * s + m) + l, m < KW):
// one load instruction of a warp reads 4 rows x 128 contiguous bytes, R * KW 16-byte loads
// per thread and step, all issued before any is used.
// x is staged in et_llm_smem as float, in chunks of CHUNK words of k: word m of the chunk at
// xs[m * WS ..], its V * NB floats element-major ([e][r], rows r >= rows zero) plus 4 floats
// of padding, so that the 8 lanes of a group (8 different words) read 8 distinct 16-byte bank
// groups and the 4 groups of a warp (the same words) a broadcast: a thread reads each x value
// once per step (float4 loads) and applies it to its R rows. Each thread loads its share of
// the next chunk into registers while the current one is used.
// The lanes of a group sum their accumulators acc[u][r] (shuffles) and lane l stores the
// cells with (u * NB + r) % 8 == l. For NB <= 8, a pass issues its first weight loads before
// it stages x, so that the two travel together, and where all of k fits one chunk, x is
// staged once, by the first pass, for every pass. Barriers: uniform (steps and chunks depend
// on k only, passes on c); the last one after the last read of the staged x. Not inlined:
// one copy per instance of this large loop, whose call costs little next to its work.
template <int NB, int R, int KW, typename F, typename X, typename W, typename O>
__device__ __noinline__ void et_linear_words(const X* x, const W* w, O* out, EtLinear g,
                                             F fold) {
    constexpr int V = 16 / sizeof(W), WS = V * NB + 4, STEP = 8 * KW;
    constexpr int CHUNK = ET_LLM_SMEM_BYTES / 4 / WS / STEP * STEP, S = CHUNK / STEP;
    constexpr int XE = CHUNK * V * NB, XT = (XE + 255) / 256;  // floats of a chunk, per thread
    static_assert(S >= 1, "a staged chunk holds at least one step");
    const int lane = (int)threadIdx.x & 7, grp = (int)threadIdx.x >> 3;
    const int words = g.k / V, steps = (words + STEP - 1) / STEP;
    float* xs = et_llm_smem();
    float xv[XT];
    // this thread's share of chunk `chunk`, zero past k; a fold's column scales applied, and
    // its row scales where `rows_scaled` (else scale_rows applies them once written)
    auto load_x = [&](int chunk, bool rows_scaled) {
#pragma unroll
        for (int i = 0; i < XT; ++i) {
            const int f = (int)threadIdx.x + 256 * i, r = f / (CHUNK * V);
            const int t = chunk * CHUNK * V + f - r * (CHUNK * V);
            if constexpr (EtSame<F, EtSiluFold>::value)
                xv[i] = f < XE && r < g.rows && t < g.k ? et_fold_x(x + r * g.xr + t * g.xk, fold)
                                                        : 0.f;
            else
                xv[i] = f < XE && r < g.rows && t < g.k ? et_to_float(x[r * g.xr + t * g.xk])
                                                        : 0.f;
            if constexpr (et_folds<F>)
                if (fold.ss && f < XE && r < g.rows && t < g.k)
                    xv[i] *= (rows_scaled ? et_norm_scales()[g.r0 + r] : 1.f) *
                             et_to_float(fold.nw[t]);
        }
    };
    auto scale_rows = [&]() {
#pragma unroll
        for (int i = 0; i < XT; ++i) {
            const int f = (int)threadIdx.x + 256 * i, r = f / (CHUNK * V);
            if (f < XE && r < g.rows) xv[i] *= et_norm_scales()[g.r0 + r];
        }
    };
    auto store_x = [&]() {
#pragma unroll
        for (int i = 0; i < XT; ++i) {
            const int f = (int)threadIdx.x + 256 * i, r = f / (CHUNK * V), kk = f - r * CHUNK * V;
            if (f < XE) xs[kk / V * WS + kk % V * NB + r] = xv[i];
        }
    };
    // NB <= 8: weights issued before x is staged, and x staged once for all passes where
    // one chunk holds all of k (more rows: the registers go to the accumulators)
    constexpr bool EARLY = NB <= 8, HINT = ET_WEIGHTS_EVICT_FIRST && NB <= 4;
    const bool one_chunk = EARLY && steps <= S;
    // ET_LINEAR_ASYNC (one row, where the launch gave the ring): round q = step q % steps of
    // pass q / steps, in slot q % D
    constexpr bool ASYNC = ET_LINEAR_ASYNC > 0 && NB == 1 && R * KW == 16;
    constexpr int D = ASYNC ? ET_LINEAR_ASYNC : 1;
    const bool ring = ASYNC && et_linear_ring();
    const int rounds = ring ? (g.cols + 32 * R - 1) / (32 * R) * steps : 0;
    int round = 0;  // the next round a step takes
    unsigned long long policy = 0;
    if constexpr (ASYNC)
        if (ring) {  // the first D rounds in flight (issued early, or now)
            policy = et_async_policy<HINT>();
            int early = 0;
            if constexpr (ET_LINEAR_EARLY) {
                early = et_async_early();
                et_async_early() = 0;
            }
            et_async_first_rounds<R, KW>(w, g, policy, early, D);
        }
    if constexpr (et_folds<F> && !EARLY)  // (weights issued after x: the scales first)
        if (fold.rows) {
            et_fold_scales(fold);
            __syncthreads();
        }
    for (int j0 = 0; j0 < g.cols; j0 += 32 * R) {
        const W* wg = w + (j0 + grp) * g.wr + lane * V;  // this thread's first row and word
        EtWord16 cur[R][KW];
        auto load_w = [&](EtWord16 (&dst)[R][KW], int s) {  // step s, zero past k and c
#pragma unroll
            for (int m = 0; m < KW; ++m)
#pragma unroll
                for (int u = 0; u < R; ++u) {
                    const int word = STEP * s + 8 * m;  // of lane 0
                    dst[u][m] = j0 + grp + 32 * u < g.cols && word + lane < words
                                    ? et_load_weight_word<HINT>(wg + 32 * u * g.wr +
                                                                word * V)
                                    : EtWord16{};
                }
        };
        auto take_w = [&](EtWord16 (&dst)[R][KW], int s) {  // step s's words into dst
            if constexpr (ASYNC)
                if (ring) {  // this round's group waited and read, its slot refilled
                    et_async_wait<D - 1>();
                    const EtWord16* slot = et_async_slot(round);
#pragma unroll
                    for (int m = 0; m < KW; ++m)
#pragma unroll
                        for (int u = 0; u < R; ++u) dst[u][m] = slot[(u * KW + m) * 256];
                    if (round + D < rounds) et_async_round<R, KW>(w, g, steps, round + D, policy);
                    et_async_commit();
                    ++round;
                    return;
                }
            load_w(dst, s);
        };
        float acc[R][NB] = {};
        if (EARLY) take_w(cur, 0);
        auto load_first_x = [&]() {  // chunk 0 into xv (the first pass: a fold's scales too)
            if constexpr (et_folds<F> && EARLY)
                if (j0 == 0 && fold.rows) {  // (uniform) with the first weights in flight
                    if ((fold.rows << et_fold_lanes_log2(fold)) <= (int)blockDim.x) {
                        // one round of row sums: their loads travel with x's
                        const float part = et_fold_part(fold, (int)threadIdx.x);
                        load_x(0, false);
                        et_fold_put(fold, (int)threadIdx.x, part);
                        __syncthreads();
                        scale_rows();
                    } else {
                        et_fold_scales(fold);
                        __syncthreads();
                        load_x(0, true);
                    }
                    return;
                }
            load_x(0, true);
        };
        if (j0 == 0 || !one_chunk) {
            load_first_x();
            store_x();
            __syncthreads();
        }
        if (!EARLY) take_w(cur, 0);
#pragma unroll 1
        for (int s = 0; s < steps; ++s) {
            const int local = s % S;  // the step within its chunk
            if (local == 0 && s + S < steps) load_x(s / S + 1, true);
            if (s > 0) take_w(cur, s);
#pragma unroll
            for (int m = 0; m < KW; ++m) {
                const float* xw = xs + (STEP * local + 8 * m + lane) * WS;
#pragma unroll
                for (int q = 0; q < V * NB / 4; ++q) {
                    const float4 x4 = *reinterpret_cast<const float4*>(xw + 4 * q);
                    const float xq[4] = {x4.x, x4.y, x4.z, x4.w};
#pragma unroll
                    for (int c = 0; c < 4; ++c) {
                        const int e = (4 * q + c) / NB, r = (4 * q + c) % NB;
#pragma unroll
                        for (int u = 0; u < R; ++u)
                            acc[u][r] += xq[c] * et_word_at(cur[u][m], e, w);
                    }
                }
            }
            if (local == S - 1 && s + 1 < steps) {  // on to the next chunk
                __syncthreads();
                store_x();
                __syncthreads();
            }
        }
        // every read of the staged x done: the next pass (restaging) or body may write it
        if (!one_chunk || j0 + 32 * R >= g.cols) __syncthreads();
#pragma unroll
        for (int o = 4; o > 0; o >>= 1)
#pragma unroll
            for (int u = 0; u < R; ++u)
#pragma unroll
                for (int r = 0; r < NB; ++r)
                    acc[u][r] += __shfl_xor_sync(0xffffffffu, acc[u][r], o);
#pragma unroll
        for (int u = 0; u < R; ++u)
#pragma unroll
            for (int r = 0; r < NB; ++r) {
                const int j = j0 + grp + 32 * u;
                if ((u * NB + r) % 8 == lane && j < g.cols && r < g.rows)
                    out[r * g.dr + j * g.dc] = et_from_float<O>(acc[u][r]);
            }
    }
}

// ------------------------------------------------------------------ tensor cores

// The tensor-core path of linear_partial (knob ET_LINEAR_MMA: the fewest rows of x it takes,
// 0: none), for bf16 weights and float x and out.
#ifndef ET_LINEAR_MMA
#define ET_LINEAR_MMA 0
#endif
#ifndef ET_LINEAR_MMA_BUILT  // whether the path is compiled (its host test sets both)
#define ET_LINEAR_MMA_BUILT (ET_LINEAR_MMA > 0)
#endif

// d += A B for one m16n8k16 MMA of bf16 A [16, 16] (row-major) and B [16, 8] (column-major)
// with float accumulators, the fragments laid out as the PTX ISA gives them: lane l = 4 g + q
// holds A rows g and g + 8 at columns 2q, 2q + 1 (a[0], a[1]) and 2q + 8, 2q + 9 (a[2],
// a[3]), B column g at rows 2q, 2q + 1 (b[0]) and 2q + 8, 2q + 9 (b[1]), and d rows g (d[0],
// d[1]) and g + 8 (d[2], d[3]) at columns 2q, 2q + 1; the lower half of a register holds the
// element of the lower index.
__device__ __forceinline__ void et_mma_bf16(float (&d)[4], const unsigned (&a)[4],
                                            const unsigned (&b)[2]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
                 "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Two floats as a bf16 pair (lo in the lower half).
__device__ __forceinline__ unsigned et_bf16x2(float lo, float hi) {
    return (unsigned)et_from_float<et_bf16>(lo).bits |
           ((unsigned)et_from_float<et_bf16>(hi).bits << 16);
}

// Four floats v as bf16 pairs hi[0] = (v0, v1), hi[1] = (v2, v3) and the pairs of what they
// leave, lo: v = hi + lo to about 16 bits of mantissa (an MMA on each keeps x near float).
__device__ __forceinline__ void et_split_bf16(const float4 v, unsigned (&hi)[2],
                                              unsigned (&lo)[2]) {
    const float f[4] = {v.x, v.y, v.z, v.w};
    float r[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) r[i] = f[i] - et_to_float(et_from_float<et_bf16>(f[i]));
    hi[0] = et_bf16x2(f[0], f[1]), hi[1] = et_bf16x2(f[2], f[3]);
    lo[0] = et_bf16x2(r[0], r[1]), lo[1] = et_bf16x2(r[2], r[3]);
}

// 1: x as bf16 hi and lo parts, two MMAs each (x kept to about 16 bits of mantissa);
// 0: x rounded to bf16, one MMA (half the tensor-core and split work, x as a bf16 model has it)
#ifndef ET_LINEAR_MMA_LO
#define ET_LINEAR_MMA_LO 1
#endif

// The order of a block's MMAs (knob ET_LINEAR_MMA_SPREAD): 0, each accumulator's hi and lo
// MMAs back to back (the lo one waits for the hi one's result); 1, the hi MMAs of every
// accumulator, then the lo ones, so that consecutive MMAs are independent. Each accumulator
// sums its products in the same order either way: the same bits.
#ifndef ET_LINEAR_MMA_SPREAD
#define ET_LINEAR_MMA_SPREAD 0
#endif
static_assert(ET_LINEAR_MMA_SPREAD == 0 || ET_LINEAR_MMA_SPREAD == 1,
              "ET_LINEAR_MMA_SPREAD takes 0 or 1");

// ET_LINEAR_MMA_RING = D (0: off; 2 to 8): the tensor-core path's weight words through a
// ring of D blocks in dynamic shared memory (a block: the NT words a thread takes for 32 of
// k, ET_MMA_RING_BLOCK_BYTES a CTA). Each thread copies its own words with cp.async D - 1
// blocks ahead of the block its MMAs take and reads back only what it copied (no barrier:
// its own cp.async groups, one a block), so that D - 1 blocks of weights stay in flight,
// whatever x's loads and staging wait for. Without it, a chunk's weight words are loaded into
// registers a chunk ahead, issued only once the chunk before has staged its x.
#ifndef ET_LINEAR_MMA_RING
#define ET_LINEAR_MMA_RING 0
#endif
#define ET_MMA_RING_BLOCK_BYTES 16384  // NT (4) words x 256 threads x 16 bytes
static_assert(ET_LINEAR_MMA_RING == 0 || (ET_LINEAR_MMA_RING >= 2 && ET_LINEAR_MMA_RING <= 8),
              "ET_LINEAR_MMA_RING takes 0 (off) or 2 to 8 blocks");

// ET_LINEAR_MMA_KSPLIT = 2 (1: off): a tensor-core linear task with at most half a pass's
// columns (et_mma_group) puts its warps in G = 2 groups of warps / G, group kg on the blocks
// kg, kg + G, ... of k (of every chunk: KB a multiple of G) for the columns of a pass of
// warps / G warps, the groups' accumulators summed through et_llm_smem at the end of the
// pass: a warp's x fragments go to all of its 4 column tiles instead of at most 2, and the
// CTA loads them G times less often. Wider tasks keep one group (G = 1): two passes would
// stage x twice. With the weight ring only (each thread copies its own blocks).
#ifndef ET_LINEAR_MMA_KSPLIT
#define ET_LINEAR_MMA_KSPLIT 1
#endif
static_assert(ET_LINEAR_MMA_KSPLIT == 1 || (ET_LINEAR_MMA_KSPLIT == 2 && ET_LINEAR_MMA_RING > 0),
              "ET_LINEAR_MMA_KSPLIT takes 1 (off) or 2, with ET_LINEAR_MMA_RING");

// A compile-time int as a value (of a generic lambda's argument).
template <int N>
struct EtConst {
    static constexpr int value = N;
};

// This warp's place in et_linear_mma's task of g (ET_LINEAR_MMA_KSPLIT): the groups of
// warps, 2 where the columns fit a pass of half the warps (4 tiles of 8 columns a warp), else
// 1; the warps a group; the warp's slot in its group and its group (without the knob: known
// at compile time).
struct EtMmaGroup {
    int groups, warps, slot, kg;
};
__device__ __forceinline__ EtMmaGroup et_mma_group(const EtLinear& g) {
    const int warp = (int)threadIdx.x >> 5, warps = (int)blockDim.x >> 5;
    EtMmaGroup m;
    m.groups = ET_LINEAR_MMA_KSPLIT == 2 && g.cols <= 16 * warps ? 2 : 1;
    m.warps = warps / m.groups;
    m.slot = ET_LINEAR_MMA_KSPLIT == 1 ? warp : warp % m.warps;
    m.kg = ET_LINEAR_MMA_KSPLIT == 1 ? 0 : warp / m.warps;
    return m;
}

// This thread's weight words in the pass of et_linear_mma from column p0 (its mapping, with
// W = warps / G warps a group (et_mma_group): warp w's tiles of 8 rows from
// p0 + 8 (w % W + W t), t < 4, on the blocks of group kg = w / W; lane 4 r + q the word of
// row r at k 32 n + 8 q in block n), worked out once a pass: the word of block 0 of each tile
// (row 0's for a row past the columns, which reads as zeros: `live` false), which tiles have
// columns (warp-uniform), the warp's group and the thread's first word of the ring of
// ET_LINEAR_MMA_RING blocks (word t of the thread's i-th block at
// ring[(i % RING * 4 + t) * 256]).
struct EtMmaCopies {
    const et_bf16* src[4];
    bool live[4], tile[4];
    EtMmaGroup grp;
    EtWord16* ring;
};
__device__ __forceinline__ EtMmaCopies et_mma_copies(const et_bf16* w, const EtLinear& g,
                                                     int p0) {
    const int lane = (int)threadIdx.x & 31;
    EtMmaCopies c;
    c.grp = et_mma_group(g);
#pragma unroll
    for (int t = 0; t < 4; ++t) {
        const int c0 = p0 + 8 * (c.grp.slot + c.grp.warps * t), j = c0 + (lane >> 2);
        c.tile[t] = c0 < g.cols;
        c.live[t] = j < g.cols;
        c.src[t] = w + (long long)(c.live[t] ? j : 0) * g.wr + 8 * (lane & 3);
    }
    c.ring = et_async_ring() + (int)threadIdx.x;
    return c;
}

// This thread's word t of its i-th block in the ring.
__device__ __forceinline__ EtWord16* et_mma_ring_word(const EtMmaCopies& c, int i, int t) {
    constexpr int RING = ET_LINEAR_MMA_RING > 0 ? ET_LINEAR_MMA_RING : 1;
    return c.ring + (i % RING * 4 + t) * 256;
}

// This thread's i-th block (block G i + kg) of weight words into the ring,
// one cp.async group: zeros for rows past the columns, no copy for tiles past them or a
// block past k (an empty group).
__device__ __forceinline__ void et_mma_copy_block(const EtMmaCopies& c, const EtLinear& g,
                                                  int i, unsigned long long policy) {
    const int n = c.grp.groups * i + c.grp.kg;
#pragma unroll
    for (int t = 0; t < 4; ++t)
        if (c.tile[t] && 32 * n < g.k)
            et_async_word(et_mma_ring_word(c, i, t), c.src[t] + 32 * n, c.live[t] ? 16 : 0,
                          policy);
    et_async_commit();
}

// linear_partial on tensor cores, rows <= 16 * MT of x. k goes in chunks of KB blocks of 32:
// the CTA stages a chunk of x once, split into bf16 hi and lo parts already in the MMA's A
// fragment layout (lane by lane, in et_llm_smem: every fragment's hi word, then every lo
// word, so that a warp's 16-byte loads and stores of either part are 512 contiguous bytes,
// free of bank conflicts), and every warp takes its fragments with two 16-byte shared loads
// instead of loading and splitting x itself. Warp w
// takes the column tiles of 8 weight rows w, w + warps, ... (NT of them, a pass; more columns
// go in further passes; with ET_LINEAR_MMA_KSPLIT, w % W, w % W + W, ... for groups of W
// warps, each group on its own blocks of k); per block of 32 of k, lane l = 4 g + q loads,
// of each tile, the 16-byte word of weight row g at k 8q .. 8q + 7 (a warp: 8 rows x 64
// contiguous bytes) and
// runs two MMAs per 16 rows of x, the first on the word's k 8q .. 8q + 3, the second on
// 8q + 4 .. 8q + 7: the MMA's k index kk stands for the block's k 8q + 4h + 2 (kk / 8) +
// kk % 2 (q = kk % 8 / 2) in both operands, so A's registers are the float4 of x rows g,
// g + 8 at k 8q + 4h (hi, and lo unless ET_LINEAR_MMA_LO is 0). While a chunk's MMAs run,
// each thread holds the next chunk's x floats in registers, and its weight words there too
// or, with ET_LINEAR_MMA_RING, the next blocks' in the ring. Accumulators
// in float; k a multiple of 32, x rows 16-byte aligned with unit column stride, w's rows
// whole words. Barriers: two a chunk (uniform: chunks depend on k, passes on the columns).
// With a fold (norm_linear_partial): x[r, t] times et_norm_scales()[g.r0 + r] and the norm
// weight nw[t] as a chunk is staged (after its loads landed, so that they stay in flight
// during the chunk before): the chunk's norm weights load with its x, a column a thread,
// and go to et_norm_scales()[ET_NORM_ROWS ..] once the chunk before is staged.
template <int MT, typename F, typename O>
__device__ __noinline__ void et_linear_mma(const float* x, const et_bf16* w, O* out,
                                           EtLinear g, F fold) {
    constexpr bool HINT = ET_WEIGHTS_EVICT_FIRST;
    constexpr int NT = 4, KB = MT == 1 ? 4 : 2;  // tiles a warp; blocks a chunk
    constexpr int RING = ET_LINEAR_MMA_RING;
    static_assert(NT * 256 * 16 == ET_MMA_RING_BLOCK_BYTES, "a ring block: NT words a thread");
    static_assert(RING == 0 || NT == 4, "et_mma_copies' mapping: NT = 4");
    const unsigned long long policy = RING > 0 ? et_async_policy<HINT>() : 0ull;
    constexpr int FRAGS = KB * 2 * MT * 32, PER = FRAGS / 256;  // of a chunk; a thread's
    static_assert(FRAGS * 2 * (int)sizeof(EtWord16) <= ET_LLM_SMEM_BYTES && FRAGS % 256 == 0,
                  "a chunk's fragments fill et_llm_smem in whole rounds of the CTA");
    const int lane = (int)threadIdx.x & 31, gr = lane >> 2, q = lane & 3;
    // ET_LINEAR_MMA_KSPLIT: G groups of W warps, group kg on the blocks kg, kg + G, ...
    static_assert(KB % ET_LINEAR_MMA_KSPLIT == 0, "every group takes the same blocks a chunk");
    const EtMmaGroup grp = et_mma_group(g);
    const int G = grp.groups, W = grp.warps, wl = grp.slot, kg = grp.kg;
    const int chunks = (g.k + 32 * KB - 1) / (32 * KB);
    EtWord16* const frag_hi = reinterpret_cast<EtWord16*>(et_llm_smem());
    EtWord16* const frag_lo = frag_hi + FRAGS;
    const float4 zero = {0.f, 0.f, 0.f, 0.f};
    // this thread's fragments f = threadIdx.x + 256 i of a chunk: ((b * 2 + h) * MT + mt) * 32
    // + lane, x rows 16 mt + g and + 8 at k 32 b + 8 q + 4 h of the chunk
    float4 xa[PER][2];
    float cw = 0.f;  // a fold: the norm weight of the chunk's column threadIdx.x (< 32 * KB)
    auto frag_at = [&](int i, int c, int& r, int& k0) {  // fragment i's x row g and k
        const int f = (int)threadIdx.x + 256 * i, fl = f & 31, rest = f >> 5;
        const int mt = rest % MT, bh = rest / MT, b = bh >> 1, h = bh & 1;
        r = 16 * mt + (fl >> 2), k0 = 32 * (KB * c + b) + 8 * (fl & 3) + 4 * h;
    };
    auto load_x = [&](int c) {  // chunk c's x into xa
#pragma unroll
        for (int i = 0; i < PER; ++i) {
            int r, k0;
            frag_at(i, c, r, k0);
            auto x4 = [&](const float* p) {
                if constexpr (EtSame<F, EtSiluFold>::value) return et_fold_x4(p, fold);
                else return et_load4(p);
            };
            xa[i][0] = r < g.rows && k0 < g.k ? x4(x + r * g.xr + k0) : zero;
            xa[i][1] = r + 8 < g.rows && k0 < g.k ? x4(x + (r + 8) * g.xr + k0) : zero;
        }
        if constexpr (et_folds<F>) {
            const int t = 32 * KB * c + (int)threadIdx.x;
            if (fold.ss && (int)threadIdx.x < 32 * KB && t < g.k) cw = et_to_float(fold.nw[t]);
        }
    };
    auto put_cw = [&]() {  // the loaded norm weights to the scratch, read after a barrier
        if constexpr (et_folds<F>)
            if (fold.ss && (int)threadIdx.x < 32 * KB)
                et_norm_scales()[ET_NORM_ROWS + threadIdx.x] = cw;
    };
    auto scale_x = [&](int c) {  // a fold: the loaded x of chunk c times its norm scales
        const float* sc = et_norm_scales();
#pragma unroll
        for (int i = 0; i < PER; ++i) {
            int r, k0;
            frag_at(i, c, r, k0);
            if (k0 >= g.k) continue;  // zeros stay zeros (the scratch past k is not set)
            const float4 cs =
                *reinterpret_cast<const float4*>(sc + ET_NORM_ROWS + k0 - 32 * KB * c);
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                if (r + 8 * e >= g.rows) continue;
                const float rs = sc[g.r0 + r + 8 * e];
                float4& v = xa[i][e];
                v.x *= rs * cs.x, v.y *= rs * cs.y, v.z *= rs * cs.z, v.w *= rs * cs.w;
            }
        }
    };
    auto stage_x = [&](int c) {
        if constexpr (et_folds<F>)
            if (fold.ss) scale_x(c);
#pragma unroll
        for (int i = 0; i < PER; ++i) {
            unsigned hi0[2], lo0[2], hi1[2], lo1[2];
            et_split_bf16(xa[i][0], hi0, lo0);
            et_split_bf16(xa[i][1], hi1, lo1);
            const int f = (int)threadIdx.x + 256 * i;
            frag_hi[f] = EtWord16{{hi0[0], hi1[0], hi0[1], hi1[1]}};
            if constexpr (ET_LINEAR_MMA_LO)
                frag_lo[f] = EtWord16{{lo0[0], lo1[0], lo0[1], lo1[1]}};
        }
    };
#pragma unroll 1
    for (int p0 = 0; p0 < g.cols; p0 += 8 * NT * W) {
        const EtMmaCopies copies = et_mma_copies(w, g, p0);  // this lane's weight rows
        const bool* const tile = copies.tile;
        auto load_w = [&](EtWord16 (&words)[KB][NT], int c) {
#pragma unroll
            for (int b = 0; b < KB; ++b)
#pragma unroll
                for (int t = 0; t < NT; ++t) {
                    const int kb = 32 * (KB * c + b);
                    words[b][t] = copies.live[t] && kb < g.k
                                      ? et_load_weight_word<HINT>(copies.src[t] + kb)
                                      : EtWord16{};
                }
        };
        float acc[MT][NT][4] = {};
        // the warp's tiles with columns: the first `live` (warp-uniform: a tile's first
        // column grows with t), so that a block's MMAs run unpredicated, in an instance for
        // that count (a predicated mma.sync costs a warp sync each)
        int live = 0;
#pragma unroll
        for (int t = 0; t < NT; ++t) live += tile[t];
        auto mma_block = [&](const EtWord16 (&words)[NT], int b, auto tiles) {
            constexpr int LIVE = decltype(tiles)::value;  // block b of the chunk, LIVE tiles
            // the hi (part 0) and lo (part 1) MMAs of each accumulator: back to back, or
            // with ET_LINEAR_MMA_SPREAD every accumulator's hi MMA, then the lo ones
            constexpr int PARTS = ET_LINEAR_MMA_LO ? 2 : 1;
            constexpr int OUTER = ET_LINEAR_MMA_SPREAD ? PARTS : 1, INNER = PARTS / OUTER;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                EtWord16 ah[MT], al[MT];
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    const int f = ((b * 2 + h) * MT + mt) * 32 + lane;
                    ah[mt] = frag_hi[f];
                    if constexpr (ET_LINEAR_MMA_LO) al[mt] = frag_lo[f];
                }
#pragma unroll
                for (int po = 0; po < OUTER; ++po)
#pragma unroll
                    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                        for (int t = 0; t < LIVE; ++t) {
                            const unsigned bw[2] = {words[t].u[2 * h], words[t].u[2 * h + 1]};
#pragma unroll
                            for (int pi = 0; pi < INNER; ++pi)
                                et_mma_bf16(acc[mt][t], po + pi ? al[mt].u : ah[mt].u, bw);
                        }
            }
        };
        EtWord16 cur[RING > 0 ? 1 : KB][NT], nxt[RING > 0 ? 1 : KB][NT] = {};  // no ring
        if constexpr (RING > 0) {  // the first RING - 1 blocks (issued early, or now)
            int early = 0;
            if constexpr (ET_LINEAR_EARLY) {
                early = et_async_early();
                et_async_early() = 0;
            }
            for (int n = early; n < RING - 1; ++n) et_mma_copy_block(copies, g, n, policy);
        } else {
            load_w(cur, 0);
        }
        load_x(0);
        // with the first weights and x in flight (the loop's first barrier publishes them)
        if constexpr (et_folds<F>)
            if (p0 == 0 && fold.rows) et_fold_scales(fold);
        put_cw();
#pragma unroll 1
        for (int c = 0; c < chunks; ++c) {
            __syncthreads();  // every warp done with the fragments of the chunk before
            stage_x(c);
            __syncthreads();
            if (c + 1 < chunks) {  // the next chunk's x (and words) in flight during these MMAs
                if constexpr (RING == 0) load_w(nxt, c + 1);
                load_x(c + 1);
            }
#pragma unroll
            for (int b = 0; b < KB; ++b) {
                const int n = KB * c + b;
                if (32 * n >= g.k) break;  // (uniform) the last chunk's end
                if (b % G != kg) continue;  // (warp-uniform) another group's block
                EtWord16 words[NT];
                if constexpr (RING > 0) {
                    // the thread's i-th block; into the slot of its block before, whose words
                    // its MMAs have taken
                    const int i = n >> (G - 1);  // (n / G)
                    et_mma_copy_block(copies, g, i + RING - 1, policy);
                    et_async_wait<RING - 1>();
#pragma unroll
                    for (int t = 0; t < NT; ++t)
                        words[t] = tile[t] ? *et_mma_ring_word(copies, i, t) : EtWord16{};
                } else {
#pragma unroll
                    for (int t = 0; t < NT; ++t) words[t] = cur[b][t];
                }
                static_assert(NT == 4, "a case for every count of live tiles");
                switch (live) {  // (the same for every block of the pass)
                    case 4: mma_block(words, b, EtConst<4>{}); break;
                    case 3: mma_block(words, b, EtConst<3>{}); break;
                    case 2: mma_block(words, b, EtConst<2>{}); break;
                    case 1: mma_block(words, b, EtConst<1>{}); break;
                    default: break;  // (a warp past the columns)
                }
            }
            if constexpr (RING == 0)
#pragma unroll
                for (int b = 0; b < KB; ++b)
#pragma unroll
                    for (int t = 0; t < NT; ++t) cur[b][t] = nxt[b][t];
            if (c + 1 < chunks) put_cw();  // (every thread read this chunk's: the barrier)
        }
        // (uniform) group 1's sums into group 0's, a row tile at a time
        if (ET_LINEAR_MMA_KSPLIT == 2 && G == 2) {
            float* const sums = et_llm_smem();  // [NT * 4][W * 32]
            static_assert(NT * 4 * 128 * sizeof(float) <= ET_LLM_SMEM_BYTES,
                          "a row tile's sums of a group of 128 threads fit");
            const int me = wl * 32 + lane;
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                __syncthreads();  // the fragments, or the sums before, read
                if (kg == 1)
#pragma unroll
                    for (int e = 0; e < NT * 4; ++e)
                        sums[e * W * 32 + me] = acc[mt][e / 4][e % 4];
                __syncthreads();
                if (kg == 0)
#pragma unroll
                    for (int e = 0; e < NT * 4; ++e)
                        acc[mt][e / 4][e % 4] += sums[e * W * 32 + me];
            }
        }
        if (kg == 0)
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int t = 0; t < NT; ++t)
#pragma unroll
                    for (int i = 0; i < 4; ++i) {
                        const int r = 16 * mt + gr + 8 * (i >> 1);
                        const int c = p0 + 8 * (wl + W * t) + 2 * q + (i & 1);
                        if (r < g.rows && c < g.cols)
                            out[r * g.dr + c * g.dc] = et_from_float<O>(acc[mt][t][i]);
                    }
    }
}

// Whether et_linear_mma takes a linear_partial of x (float), w (bf16) and g: at least
// ET_LINEAR_MMA rows, k a multiple of 32, x rows of aligned float4 runs.
template <typename X, typename W>
__device__ __forceinline__ bool et_mma_ok(const X* x, const W*, const EtLinear& g) {
    if constexpr (!EtSame<X, float>::value || !EtSame<W, et_bf16>::value) {
        return false;
    } else {
        return ET_LINEAR_MMA > 0 && g.rows >= ET_LINEAR_MMA && g.k % 32 == 0 && g.xk == 1 &&
               g.xr % 4 == 0 && reinterpret_cast<unsigned long long>(x) % 16 == 0;
    }
}

// The most rows of x the CUDA-core path below takes in one pass (1, 2, 4, 8 or 16): more
// rows go in blocks of this many, the weights streamed once per block. A kernel whose
// linears of more rows take the tensor-core path (ET_LINEAR_MMA) sets it lower and compiles
// fewer instances (the rest stay correct, only slower).
#ifndef ET_LINEAR_CORE_ROWS
#define ET_LINEAR_CORE_ROWS 16
#endif
static_assert(ET_LINEAR_CORE_ROWS == 1 || ET_LINEAR_CORE_ROWS == 2 || ET_LINEAR_CORE_ROWS == 4 ||
                  ET_LINEAR_CORE_ROWS == 8 || ET_LINEAR_CORE_ROWS == 16,
              "ET_LINEAR_CORE_ROWS must be 1, 2, 4, 8 or 16");

// Whether et_linear_blocks takes one row of k elements of W in one pass of R = 8, KW = 2 (k
// of at most 16 words), else R = 4, KW = 4.
template <typename W>
__device__ __forceinline__ bool et_one_pass_row(int k) {
    return k <= 16 * (16 / (int)sizeof(W));
}

// The rows of x in blocks of at most ET_LINEAR_CORE_ROWS, each through et_linear_words with
// NB the block's rows rounded up to a power of two (so n <= 16 streams the weights once;
// more rows stream them again per block, then mostly from L2). Loads per thread in flight,
// issued before x is staged for up to 8 rows: 16 for 1 row (R = 8, KW = 2 where k is at most
// 16 words, et_one_pass_row: split-K chunks of 128 bf16, a pass's loads cover 256 weight
// rows, a 64 KB tile in one round; else R = 4, KW = 4), 2 rows (R = 8, KW = 2) and 4 rows
// (R = 4, KW = 4); 8 for 8 rows (R = 4, KW = 2) and 4 for 16 (R = 4, KW = 1), whose
// accumulators take the registers (more spill). (Measured on an H200, one CTA per SM
// streaming 277 MB of bf16 weights in tasks of 128 columns by k = 4096, with 16 loads in
// flight for 2 rows (8 double-buffered), 8 for 4 and 4 for 8: n = 1 at about 3.8 TB/s, n = 2
// at 3.5, n = 4 at 3.1, n = 8 at 1.9, n = 16 at 1.4, against 4.25 TB/s of device-to-device
// copy.) Up to 255 registers, no spills, at one CTA per SM. A fold's scales are written by
// the first block's pass and reused by the others.
template <typename X, typename W, typename O, typename F = EtNoFold>
__device__ __forceinline__ void et_linear_blocks(const X* x, const W* w, O* out, EtLinear g,
                                                 F fold = {}) {
    const int rows = g.rows;
    auto block_fold = [&](int r0) {  // (no fold: EtNoFold)
        F f = fold;
        if constexpr (et_folds<F>) f.rows = r0 == 0 ? fold.rows : 0;
        return f;
    };
    if constexpr (ET_LINEAR_MMA_BUILT)
        if (et_mma_ok(x, w, g)) {
#pragma unroll 1
            for (int r0 = 0; r0 < rows; r0 += 64) {
                EtLinear b = g;
                b.rows = rows - r0 < 64 ? rows - r0 : 64;
                b.r0 = g.r0 + r0;
                const float* xb = reinterpret_cast<const float*>(x) + r0 * g.xr;
                const et_bf16* wb = reinterpret_cast<const et_bf16*>(w);
                O* ob = out + r0 * g.dr;
                const F f = block_fold(r0);
                if (b.rows <= 16) et_linear_mma<1>(xb, wb, ob, b, f);
                else if (b.rows <= 32) et_linear_mma<2>(xb, wb, ob, b, f);
                else et_linear_mma<4>(xb, wb, ob, b, f);
            }
            return;
        }
    constexpr int CR = ET_LINEAR_CORE_ROWS;
    for (int r0 = 0; r0 < rows; r0 += CR) {
        EtLinear b = g;
        b.rows = rows - r0 < CR ? rows - r0 : CR;
        b.r0 = g.r0 + r0;
        const X* xb = x + r0 * g.xr;
        O* ob = out + r0 * g.dr;
        if (b.rows == 1 && et_one_pass_row<W>(b.k))
            et_linear_words<1, 8, 2>(xb, w, ob, b, block_fold(r0));
        else if (b.rows == 1) et_linear_words<1, 4, 4>(xb, w, ob, b, block_fold(r0));
        else if (b.rows == 2) {  // (each instance compiled only where a block can need it)
            if constexpr (CR >= 2) et_linear_words<2, 8, 2>(xb, w, ob, b, block_fold(r0));
        } else if (b.rows <= 4) {
            if constexpr (CR >= 4) et_linear_words<4, 4, 4>(xb, w, ob, b, block_fold(r0));
        } else if (b.rows <= 8) {
            if constexpr (CR >= 8) et_linear_words<8, 4, 2>(xb, w, ob, b, block_fold(r0));
        } else if constexpr (CR >= 16) {
            et_linear_words<16, 4, 1>(xb, w, ob, b, block_fold(r0));
        }
    }
}

// Whether the staged path below is compiled: in a kernel with the stage ring, the only way a
// weight tile reaches shared memory (ET_STAGE_BYTES, runtime.cuh), and outside a megakernel
// (this header's own tests). A kernel without the ring leaves out its code.
#if !defined(ET_STAGE_BYTES) || ET_STAGE_BYTES > 0
#define ET_LINEAR_STAGED 1
#else
#define ET_LINEAR_STAGED 0
#endif

// The staged path of linear_partial: w's tile in shared memory (the stage ring: dense rows
// of k elements, whole 16-byte words), rows <= NB of x (unit column stride, rows 16-byte
// aligned). Thread t = q * P + p, with P threads to a weight row (the largest power of two
// <= both the words of a row and 256) and Q = 256 / P row lanes: in each pass over JR * Q
// rows it takes the words p, p + P, ... of rows q, q + Q, ..., q + (JR - 1) * Q (a warp reads
// contiguous words of one or more rows: no bank conflicts), JR of them in flight at once,
// and the x words of the same columns, from global memory (four floats a load). The P
// threads of a row add up their sums: shuffles within a warp, then, for P > 32, one float
// per warp and cell in et_llm_smem, summed by the cell's thread. Not inlined (one copy per
// NB). Barriers: uniform (passes and P depend on k and c only).
template <int NB, typename X, typename W, typename O>
__device__ __noinline__ void et_linear_staged(const X* x, const W* w, O* out, EtLinear g) {
    constexpr int V = 16 / sizeof(W), JR = NB == 1 ? 16 : 8, CELLS = JR * NB;
    const int words = g.k / V, t = (int)threadIdx.x, lane = t & 31, warp = t >> 5;
    int P = 1;
    while (2 * P <= words && 2 * P <= 256) P *= 2;
    const int Q = 256 / P, p = t & (P - 1), q = t / P;
    float* red = et_llm_smem();
#pragma unroll 1
    for (int j0 = 0; j0 < g.cols; j0 += Q * JR) {
        float acc[JR][NB] = {};
#pragma unroll 1
        for (int c = p; c < words; c += P) {
            EtWord16 wv[JR];
#pragma unroll
            for (int i = 0; i < JR; ++i) {
                const int j = j0 + q + Q * i;
                wv[i] = j < g.cols ? *reinterpret_cast<const EtWord16*>(w + j * g.wr + c * V)
                                   : EtWord16{};
            }
            float xv[NB][V];
#pragma unroll
            for (int r = 0; r < NB; ++r)
#pragma unroll
                for (int e = 0; e < V; e += 4) {
                    const float4 v = r < g.rows ? et_load4(x + r * g.xr + c * V + e)
                                                : float4{0.f, 0.f, 0.f, 0.f};
                    xv[r][e] = v.x, xv[r][e + 1] = v.y, xv[r][e + 2] = v.z, xv[r][e + 3] = v.w;
                }
#pragma unroll
            for (int i = 0; i < JR; ++i)
#pragma unroll
                for (int e = 0; e < V; ++e) {
                    const float we = et_word_at(wv[i], e, w);
#pragma unroll
                    for (int r = 0; r < NB; ++r) acc[i][r] += xv[r][e] * we;
                }
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1)
            if (o < P)
#pragma unroll
                for (int i = 0; i < JR; ++i)
#pragma unroll
                    for (int r = 0; r < NB; ++r)
                        acc[i][r] += __shfl_xor_sync(0xffffffffu, acc[i][r], o);
        if (P <= 32) {  // the row's sums are whole in each of its lanes: lane p == i stores
#pragma unroll
            for (int i = 0; i < JR; ++i)
#pragma unroll
                for (int r = 0; r < NB; ++r) {
                    const int j = j0 + q + Q * i;
                    if ((i * NB + r) % P == p && j < g.cols && r < g.rows)
                        out[r * g.dr + j * g.dc] = et_from_float<O>(acc[i][r]);
                }
            continue;
        }
        if (lane == 0)
#pragma unroll
            for (int i = 0; i < JR; ++i)
#pragma unroll
                for (int r = 0; r < NB; ++r) red[warp * CELLS + i * NB + r] = acc[i][r];
        __syncthreads();
        const int per_row = P / 32;  // warps holding sums of the same rows
        if (t < Q * CELLS) {
            const int qq = t / CELLS, cell = t - qq * CELLS, i = cell / NB, r = cell - i * NB;
            const int j = j0 + qq + Q * i;
            float sum = 0.f;
            for (int k = 0; k < per_row; ++k) sum += red[(qq * per_row + k) * CELLS + cell];
            if (j < g.cols && r < g.rows) out[r * g.dr + j * g.dc] = et_from_float<O>(sum);
        }
        __syncthreads();  // red is written again by the next pass (or the next body)
    }
}

// One thread per cell of out [rows, c] (any tiles, w [c, k]): out[r, j] = row(r) * the sum
// over t < k of xv(r, t) * w[j, t].
template <typename W, typename O, typename XV, typename R>
__device__ __forceinline__ void et_linear_cells(int rows, int k, const EtTileT<W>& w,
                                                const EtTileT<O>& out, XV xv, R row) {
    const int cols = (int)w.n[0];
#pragma unroll 1
    for (int e = (int)threadIdx.x; e < rows * cols; e += (int)blockDim.x) {
        const int r = e / cols, j = e - r * cols;
        float acc = 0.f;
#pragma unroll 1
        for (int t = 0; t < k; ++t)
            acc += xv(r, t) * et_to_float(w.p[et_off(w, 0, j) + et_off(w, 1, t)]);
        out.p[et_lrc_off(out, 0, r, j)] = et_from_float<O>(acc * row(r));
    }
}
// x[r, t] of a tile x [n, k].
template <typename X>
__device__ __forceinline__ float et_x_at(const EtTileT<X>& x, int r, int t) {
    return et_to_float(x.p[et_off(x, 0, r) + et_off(x, 1, t)]);
}

// linear_partial for tiles that the streaming and staged paths do not take: et_dot2 (a lane
// group per cell) for plain ones (`plain`, with g), else one thread per cell. Out of line:
// one copy per tile types for every grid case (the decode step's tiles never come here).
template <typename X, typename W, typename O>
__device__ __noinline__ void et_linear_rest(const EtTileT<X> x, const EtTileT<W> w,
                                            const EtTileT<O> out, bool plain, EtLinear g) {
    if (plain) {
        const EtDot2 d = {g.rows, g.cols, g.k, g.xr, 0, g.xk, 0, g.wr, (int)w.s[1], g.dr, g.dc};
        return et_dot2<1>(x.p, w.p, out.p, d);
    }
    et_linear_cells((int)x.n[0], (int)x.n[1], w, out,
                    [x](int r, int t) { return et_x_at(x, r, t); }, [](int) { return 1.f; });
}

// Whether x, w and out are plain tiles of a linear_partial's layout (x [n, k], w [c, k], out
// [.., n, c]).
template <typename X, typename W, typename O>
__device__ __forceinline__ bool et_linear_plain(const EtTileT<X>& x, const EtTileT<W>& w,
                                                const EtTileT<O>& out) {
    return x.rank == 2 && w.rank == 2 && out.rank >= 2 && et_plain(x) && et_plain(w) &&
           et_plain(out);
}

// Whether they are, with w's rows runs of aligned 16-byte words: the streaming, staged and
// tensor-core paths (with g their EtLinear).
template <typename X, typename W, typename O>
__device__ __forceinline__ bool et_linear_words_ok(const EtTileT<X>& x, const EtTileT<W>& w,
                                                   const EtTileT<O>& out, const EtLinear& g) {
    constexpr int V = 16 / sizeof(W);
    return et_linear_plain(x, w, out) && w.s[1] == 1 && g.k % V == 0 && g.wr % V == 0 &&
           reinterpret_cast<unsigned long long>(w.p) % 16 == 0;
}

// The EtLinear of a linear_partial's tiles (meaningful where they are plain).
template <typename X, typename W, typename O>
__device__ __forceinline__ EtLinear et_linear_of(const EtTileT<X>& x, const EtTileT<W>& w,
                                                 const EtTileT<O>& out) {
    return {(int)x.n[0], (int)w.n[0], (int)x.n[1], (int)x.s[0], (int)x.s[1], (int)w.s[0],
            et_back_s(out, 1), et_back_s(out, 0), 0};
}

// Whether et_linear_staged takes the tiles (w's tile in shared memory: the stage ring).
template <typename X, typename W>
__device__ __forceinline__ bool et_linear_staged_ok(const X* x, const W* w, const EtLinear& g) {
    if constexpr (!ET_LINEAR_STAGED)
        return false;
    else
        return g.rows <= 2 && __isShared(w) && g.xk == 1 && g.xr % 4 == 0 &&
               reinterpret_cast<unsigned long long>(x) % 16 == 0;
}

// linear_partial: out[.., r, j] = sum_t x[r, t] * w[j, t] for x [n, k], w [c, k] (HF layout,
// [out, in]) and out [n, c] or [1, n, c]. Plain tiles whose w rows are runs of aligned
// 16-byte words: et_linear_staged for w in shared memory (staged) and n <= 2, else
// et_linear_blocks (tensor cores or the streaming path); any other tile: et_linear_rest.
template <typename X, typename W, typename O>
__device__ __forceinline__ void et_body_linear_partial(const EtTileT<X>& x, const EtTileT<W>& w,
                                                       const EtTileT<O>& out) {
    const EtLinear g = et_linear_of(x, w, out);
    if (et_linear_words_ok(x, w, out, g)) {
        if (et_linear_staged_ok(x.p, w.p, g))
            return g.rows == 1 ? et_linear_staged<1>(x.p, w.p, out.p, g)
                               : et_linear_staged<2>(x.p, w.p, out.p, g);
        if constexpr (ET_LINEAR_FOLDS)  // (the folding passes, scaling nothing)
            return et_linear_blocks(x.p, w.p, out.p, g, EtNormFold<W>{});
        else
            return et_linear_blocks(x.p, w.p, out.p, g);
    }
    et_linear_rest(x, w, out, et_linear_plain(x, w, out), g);
}

// Whether the launch runs the early parts of its linear tasks (knob ET_LINEAR_EARLY,
// runtime.cuh): with bit 2 (the tensor-core blocks) every launch; with bit 1 alone only one
// that gave the one-row linear its ring (et_linear_ring): elsewhere the early parts would
// issue nothing and only cost their tile views before the task's waits.
__device__ __forceinline__ bool et_early_now() {
    return (ET_LINEAR_EARLY & 2) || et_linear_ring();
}

// The copies of a linear task's early part (below), all threads, for its weight tile w and
// its EtLinear g (`mma`: its body takes the tensor-core path): where that path has the ring
// of blocks (ET_LINEAR_MMA_RING; bit 2 of the knob), this thread's first
// ET_LINEAR_MMA_RING - 1 blocks of weight words; where the body takes the one-row streaming
// path with the ring of rounds (ET_LINEAR_ASYNC; bit 1), its first ET_LINEAR_EARLY_ROUNDS
// rounds (the body issues the rest of the ring's); issued as that path would issue them and
// counted in et_async_early for the body to skip. Not inlined: one copy for the early parts
// of every linear grid.
template <typename W>
__device__ __noinline__ void et_early_copies(const W* w, EtLinear g, bool mma) {
    const unsigned long long policy = et_async_policy<ET_WEIGHTS_EVICT_FIRST>();
    if constexpr ((ET_LINEAR_EARLY & 2) && ET_LINEAR_MMA_RING > 0 && ET_LINEAR_MMA_BUILT) {
        if (mma) {
            const EtMmaCopies copies = et_mma_copies(reinterpret_cast<const et_bf16*>(w), g, 0);
            for (int n = 0; n < ET_LINEAR_MMA_RING - 1; ++n)
                et_mma_copy_block(copies, g, n, policy);
            et_async_early() = ET_LINEAR_MMA_RING - 1;
        }
    }
    if constexpr ((ET_LINEAR_EARLY & 1) && ET_LINEAR_ASYNC > 0) {
        if (g.rows != 1 || mma || !et_linear_ring()) return;
        constexpr int Q = ET_LINEAR_EARLY_ROUNDS;
        if (et_one_pass_row<W>(g.k)) et_async_first_rounds<8, 2>(w, g, policy, 0, Q);
        else et_async_first_rounds<4, 4>(w, g, policy, 0, Q);
        et_async_early() = Q;
    }
}

// The early part of a linear_partial task (knob ET_LINEAR_EARLY, runtime.cuh), all threads,
// before the task waits on its inputs: et_early_copies where the body takes a path with a
// ring. Reads no input (x's pointer and shape only), so that no wait guards it.
template <typename X, typename W, typename O>
__device__ __forceinline__ void et_early_linear_partial(const EtTileT<X>& x,
                                                        const EtTileT<W>& w,
                                                        const EtTileT<O>& out) {
    if constexpr (ET_LINEAR_EARLY) {
        const EtLinear g = et_linear_of(x, w, out);
        if (!et_linear_words_ok(x, w, out, g) || et_linear_staged_ok(x.p, w.p, g)) return;
        et_early_copies(w.p, g, ET_LINEAR_MMA_BUILT && et_mma_ok(x.p, w.p, g));
    }
}

// norm_linear_partial: linear_partial of x [n, k] scaled per row by 1 / sqrt(sum(ss[r, :]) /
// cols + eps) (ss [n, T]: the sums of squares of the row's T residual tiles) and per column
// by the norm weight nw [k]: the RMSNorm of the rows, whose K-slice x is, folded into the
// projection after it. The streaming and tensor-core paths take it as an EtNormFold: they
// write the row scales to et_norm_scales once their first weight loads are issued, load the
// norm weight with x and apply both as they stage x; tiles they do not take (unaligned, more
// rows than ET_NORM_ROWS, sums not float or rows of sums and weight not contiguous) go one
// thread per cell.
template <typename X, typename S, typename N, typename W, typename O>
__device__ __forceinline__ void et_body_norm_linear_partial(const EtTileT<X>& x,
                                                            const EtTileT<S>& ss,
                                                            const EtTileT<N>& nw,
                                                            const EtTileT<W>& w,
                                                            const EtTileT<O>& out, float eps,
                                                            int cols) {
    const int rows = (int)x.n[0], T = et_cols(ss);
    auto row_scale = [&](int r) {
        float t = 0.f;
#pragma unroll 1
        for (int j = 0; j < T; ++j) t += et_to_float(ss.p[et_lrc_off(ss, 0, r, j)]);
        return rsqrtf(t / (float)cols + eps);
    };
    auto col_scale = [&](int t) { return et_to_float(nw.p[et_lrc_off(nw, 0, 0, t)]); };
    const EtLinear g = et_linear_of(x, w, out);
    if constexpr (EtSame<S, float>::value)
        if (et_linear_words_ok(x, w, out, g) && rows <= ET_NORM_ROWS && ss.rank == 2 &&
            !ss.idx[0] && !ss.idx[1] && ss.s[1] == 1 && nw.rank == 1 && !nw.idx[0] &&
            nw.s[0] == 1) {
            const EtNormFold<N> fold{ss.p, nw.p, (int)ss.s[0], T, rows, cols, eps};
            return et_linear_blocks(x.p, w.p, out.p, g, fold);
        }
    et_linear_cells(rows, (int)x.n[1], w, out,
                    [&](int r, int t) { return et_x_at(x, r, t) * col_scale(t); }, row_scale);
}

// Tile t [S, n, k] (or [n, k]) seen as its first partial [n, k] (the same pointer, the last
// two dimensions' extents, strides and index vectors).
template <typename T>
__device__ __forceinline__ EtTileT<T> et_first_part(const EtTileT<T>& t) {
    if (t.rank != 3) return t;
    EtTileT<T> v = t;
    v.rank = 2;
#pragma unroll
    for (int d = 0; d < 2; ++d) v.n[d] = t.n[d + 1], v.s[d] = t.s[d + 1], v.idx[d] = t.idx[d + 1];
    return v;
}

// silu_linear_partial: linear_partial of silu(g) * u for the gate and up partials g, u [S, n,
// k] (or [n, k]) summed: the SiLU-and-multiply, never stored, folded into the projection
// after it (w [c, k], out [.., n, c]). Float partials of one layout, plain, whose first
// partial the streaming and tensor-core paths take as x, take them with an EtSiluFold of
// the up partials (each x value they stage: et_fold_x); any other tiles go one thread per
// cell.
template <typename G, typename U, typename W, typename O>
__device__ __forceinline__ void et_body_silu_linear_partial(const EtTileT<G>& gate,
                                                            const EtTileT<U>& up,
                                                            const EtTileT<W>& w,
                                                            const EtTileT<O>& out) {
    const EtTileT<G> x = et_first_part(gate);
    const int parts = gate.rank == 3 ? (int)gate.n[0] : 1;
    const EtLinear g = et_linear_of(x, w, out);
    if constexpr (EtSame<G, float>::value && EtSame<U, float>::value) {
        bool same = gate.rank == up.rank && et_plain(gate) && et_plain(up);
#pragma unroll
        for (int d = 0; d < 4; ++d)
            if (d < gate.rank) same &= gate.n[d] == up.n[d] && gate.s[d] == up.s[d];
        if (same && et_linear_words_ok(x, w, out, g)) {
            const EtSiluFold fold{reinterpret_cast<unsigned long long>(up.p) -
                                      reinterpret_cast<unsigned long long>(gate.p),
                                  parts, parts > 1 ? (int)gate.s[0] : 0};
            return et_linear_blocks(x.p, w.p, out.p, g, fold);
        }
    }
    et_linear_cells(
        (int)x.n[0], (int)x.n[1], w, out,
        [&](int r, int t) { return et_silu_mul(et_lead_sum(gate, parts, r, t),
                                               et_lead_sum(up, parts, r, t)); },
        [](int) { return 1.f; });
}
