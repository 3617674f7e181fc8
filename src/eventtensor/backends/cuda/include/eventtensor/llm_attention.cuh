// Attention-side bodies of the decode step (eventtensor.ops.llm): decode_plan, qk_norm_rope,
// kv_append, decode_attention, attn_merge. Included after bodies.cuh and llm_common.cuh.
//
// The kernel is compiled with --use_fast_math: sinf / cosf are __sinf / __cosf (accurate only
// near 0, so angles are reduced first), expf / exp2f / log2f the approximate unit functions
// (softmax works in base 2: exp2f of scores pre-scaled by log2(e)), divisions approximate.
#pragma once

#define ET_LOG2E 1.44269502f
#define ET_LN2 0.693147182f

__device__ __forceinline__ float et_neg_inf() { return __uint_as_float(0xff800000u); }

// ------------------------------------------------------------------ decode_plan

// decode_plan: row b of plan [B, 3] = (b*chunks*kv_heads, that + kv_heads*n_b, n_b) with
// n_b = pos_b // chunk + 1 for pos [B]. The host rejects positions outside [0, context) before
// the launch; here n_b is clamped to [1, chunks] all the same, so that a bad position cannot
// make a later task (attention tiles, the merge's wait count) reach past the KV cache.
__device__ __forceinline__ void et_body_decode_plan(const EtITile& pos, const EtITile& plan,
                                                    int chunk, int chunks, int kv_heads,
                                                    int /*context: checked by the host*/) {
    const int B = (int)pos.n[0];
    for (int b = threadIdx.x; b < B; b += blockDim.x) {
        const int p = pos.p[et_off(pos, 0, b)];
        int n = (p < 0 ? 0 : p / chunk) + 1;
        n = n > chunks ? chunks : n;
        const int first = b * chunks * kv_heads;
        int* row = plan.p + et_off(plan, 0, b);
        row[et_off(plan, 1, 0)] = first;
        row[et_off(plan, 1, 1)] = first + kv_heads * n;
        row[et_off(plan, 1, 2)] = n;
    }
}

// ------------------------------------------------------------------ qk_norm_rope

// cos and sin of the angle p * f (|p| < 2^24) as the float64 reference takes it: the exact
// product hi + lo (lo the rounding error of the fp32 product hi), hi reduced by 2*pi with a
// two-part constant (the first step exact by FMA), then lo added: |error| < 1e-6 for any angle
// below 2^20, with __sinf / __cosf on the reduced angle.
__device__ __forceinline__ void et_rope_cos_sin(int p, float f, float& c, float& s) {
    const float x = (float)p, hi = __fmul_rn(x, f), lo = fmaf(x, f, -hi);
    const float k = rintf(hi * 0.159154937f);
    const float r = fmaf(-k, -1.74845553e-07f, fmaf(-k, 6.28318548f, hi)) + lo;
    c = cosf(r);
    s = sinf(r);
}

#define ET_ROPE_PAIRS 8  // (i, i + D/2) pairs per lane and head: D <= 16 * 32

#define ET_ROPE_SPLITS 16  // partials of a pair loaded together: one round for S <= 16

// x1[t], x2[t]: columns c0 + i and c0 + i + half (i = l + lanes * t < half) of row r of the
// partials tile p [S, n, cols], summed over S; zero where i >= half. A pair's loads of up to
// ET_ROPE_SPLITS partials are issued together (on the decode step's critical path, each
// round of loads is a memory latency).
template <typename T>
__device__ __forceinline__ void et_rope_load(const EtTileT<T>& p, int r, int c0, int l,
                                             int lanes, int half, float (&x1)[ET_ROPE_PAIRS],
                                             float (&x2)[ET_ROPE_PAIRS]) {
#pragma unroll
    for (int t = 0; t < ET_ROPE_PAIRS; ++t) x1[t] = x2[t] = 0.f;
    const int S = (int)p.n[0];
    const long long row = et_off(p, 1, r);
#pragma unroll
    for (int t = 0; t < ET_ROPE_PAIRS; ++t) {
        const int i = l + lanes * t;
        if (i >= half) break;
        const long long o1 = row + et_off(p, 2, c0 + i), o2 = row + et_off(p, 2, c0 + i + half);
#pragma unroll 1
        for (int s0 = 0; s0 < S; s0 += ET_ROPE_SPLITS) {
            float a[ET_ROPE_SPLITS], b[ET_ROPE_SPLITS];
#pragma unroll
            for (int u = 0; u < ET_ROPE_SPLITS; ++u) {
                const bool in = s0 + u < S;
                const long long o = in ? et_off(p, 0, s0 + u) : 0;
                a[u] = in ? et_to_float(p.p[o + o1]) : 0.f;
                b[u] = in ? et_to_float(p.p[o + o2]) : 0.f;
            }
#pragma unroll
            for (int u = 0; u < ET_ROPE_SPLITS; ++u) x1[t] += a[u], x2[t] += b[u];
        }
    }
}

// Tile a if `first`, else b, field by field (a choice between the tiles themselves would put
// them in local memory).
template <typename T>
__device__ __forceinline__ EtTileT<T> et_pick(bool first, const EtTileT<T>& a,
                                              const EtTileT<T>& b) {
    EtTileT<T> t;
    t.p = first ? a.p : b.p;
    t.rank = first ? a.rank : b.rank;
#pragma unroll
    for (int d = 0; d < 4; ++d) {
        t.n[d] = first ? a.n[d] : b.n[d];
        t.s[d] = first ? a.s[d] : b.s[d];
        t.idx[d] = first ? a.idx[d] : b.idx[d];
    }
    return t;
}

// Row r, columns c0 + i and c0 + i + half of out [n, cols] set to y1[t], y2[t].
template <typename O>
__device__ __forceinline__ void et_rope_store(const EtTileT<O>& out, int r, int c0, int l,
                                              int lanes, int half,
                                              const float (&y1)[ET_ROPE_PAIRS],
                                              const float (&y2)[ET_ROPE_PAIRS]) {
    const long long row = et_off(out, 0, r);
#pragma unroll
    for (int t = 0; t < ET_ROPE_PAIRS; ++t) {
        const int i = l + lanes * t;
        if (i < half) {
            out.p[row + et_off(out, 1, c0 + i)] = et_from_float<O>(y1[t]);
            out.p[row + et_off(out, 1, c0 + i + half)] = et_from_float<O>(y2[t]);
        }
    }
}

// qk_norm_rope: for n rows and the G query heads and one KV head, q [S, n, G*D], k and v
// [S, n, D] summed over S; each q head and k optionally RMS-normed over D (weights q_norm,
// k_norm [D]; an absent norm is a tile with p == nullptr), then rotated (rotate-half, angles
// pos[r] * inv_freq[i], see et_rope_cos_sin); written to q_out [n, G*D], k_out and v_out
// [n, D]. D even, D <= 512.
// Mapping: a unit is (row, head j) with j < G a q head, j == G the k head, j == G + 1 v; a group
// of 2^lg lanes takes a unit, lane l the pairs (i, i + D/2) for i = l, l + 2^lg, ...; units go
// round-robin over the groups of the CTA. lg: as many lanes (up to 32) as let every unit have
// its own group, but at least enough for 8 or fewer pairs per lane.
// The sum of squares of a head is a group sum, taken by every lane (uniform shuffles).
template <typename Q, typename F, typename N, typename O>
__device__ __forceinline__ void et_body_qk_norm_rope(
    const EtTileT<Q>& q, const EtTileT<Q>& k, const EtTileT<Q>& v, const EtITile& pos,
    const EtTileT<F>& inv_freq, const EtTileT<N>& q_norm, const EtTileT<N>& k_norm,
    const EtTileT<O>& q_out, const EtTileT<O>& k_out, const EtTileT<O>& v_out, int head_dim,
    float eps) {
    const int D = head_dim, half = D >> 1, n = (int)q.n[1], G = (int)(q.n[2] / D);
    const int heads = G + 2, units = n * heads;
    const int least = et_log2_ceil((half + ET_ROPE_PAIRS - 1) / ET_ROPE_PAIRS);
    int lg = 5;
    while (lg > least && (units << lg) > (int)blockDim.x) --lg;
    const int lanes = 1 << lg, l = threadIdx.x & (lanes - 1), groups = blockDim.x >> lg;
    const float inv_d = 1.f / (float)D;
    for (int u = threadIdx.x >> lg, u0 = (threadIdx.x & ~31u) >> lg; u0 < units;
         u += groups, u0 += groups) {
        const bool live = u < units;  // else a group of the warp past the last unit
        const int r = live ? u / heads : 0, j = live ? u - r * heads : heads;
        // the position, frequencies and norm weights first: in flight with the partials
        const int p = pos.p[et_off(pos, 0, r)];
        const bool normed = j < G ? q_norm.p != nullptr : j == G && k_norm.p != nullptr;
        const EtTileT<N> nw = et_pick(j < G, q_norm, k_norm);
        float freq[ET_ROPE_PAIRS], w1[ET_ROPE_PAIRS], w2[ET_ROPE_PAIRS];
#pragma unroll
        for (int t = 0; t < ET_ROPE_PAIRS; ++t) {
            const int i = l + lanes * t;
            freq[t] = i < half ? et_to_float(inv_freq.p[et_off(inv_freq, 0, i)]) : 0.f;
            w1[t] = normed && i < half ? et_to_float(nw.p[et_off(nw, 0, i)]) : 1.f;
            w2[t] = normed && i < half ? et_to_float(nw.p[et_off(nw, 0, i + half)]) : 1.f;
        }
        float x1[ET_ROPE_PAIRS], x2[ET_ROPE_PAIRS];
        // one load site for the three tiles (the body's code is fetched cold each layer)
        et_rope_load(et_pick(j < G, q, et_pick(j == G, k, v)), r, j < G ? j * D : 0, l, lanes,
                     j <= G || live ? half : 0, x1, x2);
        float ss = 0.f;
#pragma unroll
        for (int t = 0; t < ET_ROPE_PAIRS; ++t) ss += x1[t] * x1[t] + x2[t] * x2[t];
        ss = et_group_sum(ss, lanes);
        if (!live) continue;
        if (j == G + 1) {
            et_rope_store(v_out, r, 0, l, lanes, half, x1, x2);
            continue;
        }
        const float inv = normed ? rsqrtf(ss * inv_d + eps) : 1.f;
        float y1[ET_ROPE_PAIRS], y2[ET_ROPE_PAIRS];
#pragma unroll
        for (int t = 0; t < ET_ROPE_PAIRS; ++t) {
            const int i = l + lanes * t;
            if (i >= half) {
                y1[t] = y2[t] = 0.f;
                continue;
            }
            const float a = x1[t] * inv * w1[t], b = x2[t] * inv * w2[t];
            float c, s;
            et_rope_cos_sin(p, freq[t], c, s);
            y1[t] = a * c - b * s;
            y2[t] = b * c + a * s;
        }
        if (j < G) et_rope_store(q_out, r, j * D, l, lanes, half, y1, y2);
        else et_rope_store(k_out, r, 0, l, lanes, half, y1, y2);
    }
}

// ------------------------------------------------------------------ kv_append

// kv_append: the new key and value rows k, v [1, D] copied into the cache rows k_out, v_out
// [1, 1, 1, D] (converted to the cache's element type).
template <typename X, typename C>
__device__ __forceinline__ void et_body_kv_append(const EtTileT<X>& k, const EtTileT<X>& v,
                                                  const EtTileT<C>& k_out,
                                                  const EtTileT<C>& v_out) {
    const int cells = et_count(k_out, k_out.rank);
    for (int e = threadIdx.x; e < cells; e += blockDim.x) {
        *et_at(k_out, e, k_out.rank, 0) = et_from_float<C>(et_to_float(*et_at(k, e, k.rank, 0)));
        *et_at(v_out, e, v_out.rank, 0) = et_from_float<C>(et_to_float(*et_at(v, e, v.rank, 0)));
    }
}

// ------------------------------------------------------------------ reductions across lanes

// Sums of v over the 2^lg lanes of each group of lanes that differ only in lane bits b0 ..
// b0 + lg - 1 (lg + b0 <= 5), spread over the group: each halving step keeps half of the
// values (the upper half in the lane with the step's bit set) and adds the partner's copy of
// them. See et_scatter_slots for where the sums end up. All 32 lanes call it.
template <int N, int H>  // the steps from step s on, H = N >> (s + 1) values kept per lane
__device__ __forceinline__ void et_scatter_steps(float (&v)[N], int lg, int b0, int s) {
    if constexpr (H == 0) {
        for (; s < lg; ++s) v[0] += __shfl_xor_sync(0xffffffffu, v[0], 1 << (b0 + lg - 1 - s));
    } else {
        if (s >= lg) return;
        const int o = 1 << (b0 + lg - 1 - s);
        const bool up = (threadIdx.x & 31) & o;
#pragma unroll
        for (int i = 0; i < H; ++i) {
            const float send = up ? v[i] : v[i + H], keep = up ? v[i + H] : v[i];
            v[i] = keep + __shfl_xor_sync(0xffffffffu, send, o);
        }
        et_scatter_steps<N, H / 2>(v, lg, b0, s + 1);
    }
}
template <int N>
__device__ __forceinline__ void et_reduce_scatter(float (&v)[N], int lg, int b0) {
    et_scatter_steps<N, N / 2>(v, lg, b0, 0);
}

// After et_reduce_scatter<N> (N a power of two) over groups of 2^lg lanes: the lane with
// in-group index `me` holds the sums of values first .. first + count - 1 in v[0 .. count);
// with N < 2^lg several lanes hold the same sum, and `owner` marks one of them.
struct EtSlots {
    int first, count;
    bool owner;
};
template <int N>
__device__ __forceinline__ EtSlots et_scatter_slots(int lg, int me) {
    constexpr int lgn = N >= 64 ? 6 : N >= 32 ? 5 : N >= 16 ? 4 : N >= 8 ? 3 : N >= 4 ? 2
                      : N >= 2 ? 1 : 0;
    if (lgn >= lg) return {me << (lgn - lg), 1 << (lgn - lg), true};
    return {me >> (lg - lgn), 1, (me & ((1 << (lg - lgn)) - 1)) == 0};
}

// ------------------------------------------------------------------ decode_attention

// The 16-byte word w of a KV row as floats: 4 float or 8 bfloat16 elements.
template <typename C>
__device__ __forceinline__ void et_word_floats(const EtWord16& w, float* x) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        if constexpr (sizeof(C) == 4) {
            x[i] = __uint_as_float(w.u[i]);
        } else {
            x[2 * i] = __uint_as_float(w.u[i] << 16);
            x[2 * i + 1] = __uint_as_float(w.u[i] & 0xffff0000u);
        }
    }
}

// n consecutive floats from p (16-byte aligned, n a multiple of 4) into x.
__device__ __forceinline__ void et_load_floats(const float* p, float* x, int n) {
    for (int i = 0; i < n; i += 4) {
        const float4 f = *reinterpret_cast<const float4*>(p + i);
        x[i] = f.x, x[i + 1] = f.y, x[i + 2] = f.z, x[i + 3] = f.w;
    }
}

// p as a float pointer where the tile holds floats, else nullptr.
__device__ __forceinline__ const float* et_floats(const float* p) { return p; }
__device__ __forceinline__ const float* et_floats(const et_bf16*) { return nullptr; }

// Whether t is a plain run of 16-byte aligned floats along its last dimension (extent 1 in
// the others).
template <typename T>
__device__ __forceinline__ bool et_float_run(const EtTileT<T>& t) {
    if (t.rank == 0 || !et_floats(t.p) || !et_plain(t) || t.s[t.rank - 1] != 1 ||
        reinterpret_cast<unsigned long long>(t.p) % 16)
        return false;
    return et_rows(t) == 1;
}

// Whether the rows of KV tile t [.., T', D] lie along dimension rank - 2 (extent 1 before it)
// as runs of whole aligned 16-byte words, with int offsets.
template <typename T>
__device__ __forceinline__ bool et_kv_rows(const EtTileT<T>& t) {
    if (t.rank < 2 || !et_plain(t) || !et_rows_of_words(t)) return false;
    bool ok = true;
#pragma unroll
    for (int d = 0; d < 2; ++d)
        if (d + 2 < t.rank) ok &= t.n[d] == 1;
    return ok;
}

// The offset of element e = g * D + d of an attention output tile: out [1, G, 1, D] (row g,
// column d) or [1, G*D] (column e).
template <typename O>
__device__ __forceinline__ long long et_head_off(const EtTileT<O>& out, int e, int D) {
    const int lo = out.rank - 1;
    return out.rank == 2 ? et_row_off(out, 0) + et_off(out, lo, e)
                         : et_row_off(out, e / D) + et_off(out, lo, e % D);
}

// One attention tile on the fast path: keys 0 .. past - 1 from the cache rows, key `past` (if
// keys > past) the new one.
template <typename C, typename O>
struct EtAttn {
    const float *q, *k_new, *v_new;  // q [G*D]; k_new, v_new [D]
    const C *k, *v;                  // row j at k + j * rk, v + j * rv
    O *out, *lse;                    // out[g * og + d * od], lse[g * ls]
    int rk, rv, og, od, ls, G, D, past, keys;
};

// decode_attention, fast path: G <= GP heads (GP 2, 4 or 8), 4 <= W = D / V <= 32 words per
// row (V elements of 16 bytes; GP and W template arguments), keys * GP floats of et_llm_smem,
// 256 threads. The passes below take the `past` cache rows only (words past them read as
// zeros); the new row, if the chunk holds it, is key `past`: its scores from warp 0 after the
// key passes, its value from row group 0 after the value passes.
// Both phases map threads to rows alike: a group of L = 2^ceil(log2 W) lanes per row, lane wq
// word wq; row group rg (CTA thread >> log2 L) takes rows rg, rg + groups, ..., KB = 32 / V
// rows at a time (one 16-byte load each, all in flight), so that a warp's load reads whole
// rows (32 / L rows of 16 * L contiguous bytes).
// Scores: lane wq holds word wq of q's GP heads (GP * V floats); the KC * GP partial dot
// products of KC keys are reduce-scattered over the group and their owners store them,
// scaled by log2(e)/sqrt(D), to S[key * GP + g] in shared memory, each keeping the largest of
// its slots; the max m[g] of each head comes from those (warp maxima through shared memory,
// read after the barrier that follows the scores). Values: each thread adds
// p = exp2(score - m) of its keys into z[g] and p times its word into its GP * V outputs.
// The sums over the row groups: shuffles over the warp's, then, through et_llm_smem once S
// is read, over the 8 warps (rounds of ET_LLM_SMEM_BYTES / 32 bytes a warp), each output
// divided by its head's z.
// Key and value words: with ET_ATTN_STREAM = 0, each pass over KB keys (or values) loads its
// own words into registers, the first pass of both phases before the scores, so that the
// value loads overlap the key phase; a tile of several passes then waits on one memory
// latency per pass. With ET_ATTN_STREAM = N (16 or 32), the words stream through a ring of N
// words per thread in dynamic shared memory (N * 4 KB a CTA, et_async_ring): the key passes
// then the value passes form one sequence of groups of KB words, NG = N / KB groups of the
// ring, NG - 1 of them in flight (cp.async) while the thread takes one. Each thread copies
// and reads back only its own words, so it waits on its own cp.async groups, no barrier.
// Three CTA barriers and one more per round of outputs past the first; every thread runs the
// same iterations and shuffles. Loops that need no unrolling are kept rolled: the body runs
// once per tile, so its code size is fetch time.
#ifndef ET_ATTN_STREAM
#define ET_ATTN_STREAM 0
#endif
static_assert(ET_ATTN_STREAM == 0 || ET_ATTN_STREAM == 16 || ET_ATTN_STREAM == 32,
              "ET_ATTN_STREAM takes 0 (registers), 16 or 32 words a thread");
// Key j's value row x (word of V floats) into a lane's outputs o (GP heads) and sums z, with
// weights p[g] = exp2(S[j * GP + g] - m[g]); nothing where !in or g >= G.
template <int GP, int V>
__device__ __forceinline__ void et_attend_value(const float* S, int j, bool in, int G,
                                                const float (&m)[GP], const float (&x)[V],
                                                float (&z)[GP], float (&o)[GP * V]) {
    float p[GP];
#pragma unroll
    for (int g = 0; g < GP; ++g) {
        p[g] = in && g < G ? exp2f(S[j * GP + g] - m[g]) : 0.f;
        z[g] += p[g];
    }
#pragma unroll
    for (int g = 0; g < GP; ++g)
#pragma unroll
        for (int e = 0; e < V; ++e) o[g * V + e] += p[g] * x[e];
}

template <int GP, int W, typename C, typename O>
__device__ __noinline__ void et_attention_fast(const EtAttn<C, O> a) {
    constexpr int V = 16 / (int)sizeof(C), KB = 32 / V, KC = 4;  // KB: a 64-key chunk of D = 128
    constexpr int warps = 8;  // 256 threads
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float* S = et_llm_smem();
    // the mapping of both phases: L lanes a row, lane wq word wq, row group rg
    constexpr int lgl = et_lg_ceil(W), kstep = 256 >> lgl;
    const int wq = lane & ((1 << lgl) - 1), rg = threadIdx.x >> lgl;
    const bool kok = wq < W;
    EtWord16 kraw[KB], vraw[KB];
    // the KB words of this thread's rows j0, j0 + kstep, ... of k (or v), zeros past the cache
    auto load = [&](EtWord16 (&dst)[KB], const C* base, int rs, int j0) {
#pragma unroll
        for (int b = 0; b < KB; ++b) {
            const int j = j0 + b * kstep;
            dst[b] = kok && j < a.past ? reinterpret_cast<const EtWord16*>(base + j * rs)[wq]
                                       : EtWord16{};
        }
    };
    // the passes over the cache rows (the new row, if any, comes after them)
    const int passes = (a.past + KB * kstep - 1) / (KB * kstep);
    // the stream: group i is key pass i (i < passes) or value pass i - passes, in ring slot
    // i % NG
    constexpr int NG = ET_ATTN_STREAM / KB > 1 ? ET_ATTN_STREAM / KB : 2;
    const unsigned long long policy = ET_ATTN_STREAM ? et_async_policy<false>() : 0ull;
    auto slot = [&](int i) { return et_async_ring() + (i % NG) * KB * 256 + (int)threadIdx.x; };
    // a thread's first key and value words, and the elements between its consecutive rows
    const C* const k0 = a.k + rg * a.rk + wq * V;
    const C* const v0 = a.v + rg * a.rv + wq * V;
    const int kst = kstep * a.rk, vst = kstep * a.rv;
    auto issue = [&](int i) {  // group i's copies, as one cp.async group (empty past the last)
        EtWord16* s = slot(i);
        const bool key = i < passes;
        const int g = key ? i : i - passes, st = key ? kst : vst;
        const int j0 = rg + g * KB * kstep;
        const C* const src = (key ? k0 : v0) + g * KB * st;
        if (i < 2 * passes)
#pragma unroll
            for (int b = 0; b < KB; ++b) {
                const bool in = kok && j0 + b * kstep < a.past;  // else zeros, nothing read
                et_async_word(s + b * 256, in ? src + b * st : a.k, in ? 16 : 0, policy);
            }
        et_async_commit();
    };
    auto take = [&](EtWord16 (&dst)[KB], int i) {  // group i, once its copies landed
        issue(i + NG - 1);  // into the slot of group i - 1, taken before
        et_async_wait<NG - 1>();
        const EtWord16* s = slot(i);
#pragma unroll
        for (int b = 0; b < KB; ++b) dst[b] = s[b * 256];
    };
    if constexpr (ET_ATTN_STREAM > 0) {
#pragma unroll 1
        for (int i = 0; i < NG - 1; ++i) issue(i);
    } else {
        load(kraw, a.k, a.rk, rg);
        load(vraw, a.v, a.rv, rg);
    }
    float qr[GP][V];
#pragma unroll
    for (int g = 0; g < GP; ++g) {
        if (g < a.G && kok) et_load_floats(a.q + g * a.D + wq * V, qr[g], V);
        else
#pragma unroll
            for (int e = 0; e < V; ++e) qr[g][e] = 0.f;
    }
    const float scale = ET_LOG2E * rsqrtf((float)a.D);
    // the largest score this thread stores in each of its slots (the same head every pass)
    const EtSlots sl = et_scatter_slots<KC * GP>(lgl, wq);
    float top[KC * GP / 4];
#pragma unroll
    for (int i = 0; i < KC * GP / 4; ++i) top[i] = et_neg_inf();
    for (int j0 = rg, i = 0; i < passes; j0 += KB * kstep, ++i) {
        if constexpr (ET_ATTN_STREAM > 0) take(kraw, i);
        else if (i > 0) load(kraw, a.k, a.rk, j0);
#pragma unroll
        for (int h = 0; h < KB; h += KC) {
            float acc[KC * GP];
#pragma unroll
            for (int b = 0; b < KC; ++b) {
                float x[V];
                et_word_floats<C>(kraw[h + b], x);  // zeros past the cache rows
#pragma unroll
                for (int g = 0; g < GP; ++g) {
                    float d = 0.f;
#pragma unroll
                    for (int e = 0; e < V; ++e) d += qr[g][e] * x[e];
                    acc[b * GP + g] = d;
                }
            }
            et_reduce_scatter(acc, lgl, 0);
#pragma unroll
            for (int i = 0; i < KC * GP / 4; ++i) {  // count <= KC * GP / 4 (L >= 4)
                if (i == sl.count) break;
                const int f = sl.first + i, g = f % GP, j = j0 + (h + f / GP) * kstep;
                if (sl.owner && g < a.G && j < a.past) {
                    S[j * GP + g] = acc[i] * scale;
                    top[i] = fmaxf(top[i], acc[i] * scale);
                }
            }
        }
    }
    const bool fresh = a.keys > a.past;  // the new row is key `past`
    float top_new = et_neg_inf();  // lane g of warp 0: the new row's score of head g
    if (fresh && warp == 0) {  // its scores: warp 0, each group of L lanes the whole row
        float x[V];
        if (kok) et_load_floats(a.k_new + wq * V, x, V);
        else
#pragma unroll
            for (int e = 0; e < V; ++e) x[e] = 0.f;
#pragma unroll
        for (int g = 0; g < GP; ++g) {
            float d = 0.f;
#pragma unroll
            for (int e = 0; e < V; ++e) d += qr[g][e] * x[e];
            d = et_group_sum(d, 1 << lgl);
            if (lane == g && g < a.G) S[a.past * GP + g] = top_new = d * scale;
        }
    }
    // each head's largest score: over the warp's slots and lanes, then over the warps
    __shared__ float tops[warps][GP];
#pragma unroll
    for (int g = 0; g < GP; ++g) {
        float t = lane == g ? top_new : et_neg_inf();
#pragma unroll
        for (int i = 0; i < KC * GP / 4; ++i)
            if (i < sl.count && (sl.first + i) % GP == g) t = fmaxf(t, top[i]);
        t = et_warp_max(t);
        if (lane == 0) tops[warp][g] = t;
    }
    __syncthreads();
    float m[GP], z[GP], o[GP * V];
#pragma unroll
    for (int g = 0; g < GP; ++g) {
        m[g] = tops[0][g], z[g] = 0.f;
#pragma unroll
        for (int w = 1; w < warps; ++w) m[g] = fmaxf(m[g], tops[w][g]);
    }
#pragma unroll
    for (int i = 0; i < GP * V; ++i) o[i] = 0.f;
    for (int j0 = rg, i = 0; i < passes; j0 += KB * kstep, ++i) {
        if constexpr (ET_ATTN_STREAM > 0) take(vraw, passes + i);
        else if (i > 0) load(vraw, a.v, a.rv, j0);
#pragma unroll
        for (int b = 0; b < KB; ++b) {
            const int j = j0 + b * kstep;
            float x[V];
            et_word_floats<C>(vraw[b], x);  // zeros past the cache rows
            et_attend_value<GP, V>(S, j, j < a.past, a.G, m, x, z, o);
        }
    }
    if (fresh && rg == 0) {  // the new row's value: row group 0
        float x[V];
        if (kok) et_load_floats(a.v_new + wq * V, x, V);
        else
#pragma unroll
            for (int e = 0; e < V; ++e) x[e] = 0.f;
        et_attend_value<GP, V>(S, a.past, true, a.G, m, x, z, o);
    }
    // the row groups' sums: over the warp's row groups (the lanes of bits lgl ..), then over
    // the warps through shared memory, in rounds of EB floats a warp
    for (int bit = lgl; bit < 5; ++bit) {
#pragma unroll
        for (int i = 0; i < GP * V; ++i) o[i] += __shfl_xor_sync(0xffffffffu, o[i], 1 << bit);
#pragma unroll
        for (int g = 0; g < GP; ++g) z[g] += __shfl_xor_sync(0xffffffffu, z[g], 1 << bit);
    }
    __shared__ float zs[warps][GP];
    __syncthreads();  // the last read of S
    if (lane == 0)
#pragma unroll
        for (int g = 0; g < GP; ++g) zs[warp][g] = z[g];
    constexpr int EB = ET_LLM_SMEM_BYTES / 4 / warps;
    const int n = a.G * a.D;
    for (int e0 = 0; e0 < n; e0 += EB) {
        if (lane == wq && kok)  // row group 0 of the warp: word wq of every head
#pragma unroll
            for (int g = 0; g < GP; ++g)
#pragma unroll
                for (int e = 0; e < V; ++e) {
                    const int f = g * a.D + wq * V + e - e0;
                    if (g < a.G && f >= 0 && f < EB) S[warp * EB + f] = o[g * V + e];
                }
        __syncthreads();
        for (int f = e0 + (int)threadIdx.x; f < e0 + EB && f < n; f += 256) {
            const int g = f / a.D, d = f - g * a.D;
            float sum = 0.f, zt = 0.f;
#pragma unroll
            for (int w = 0; w < warps; ++w) sum += S[w * EB + f - e0], zt += zs[w][g];
            a.out[g * a.og + d * a.od] = et_from_float<O>(sum / zt);
            if (d == 0) {  // (m[g] by a select: no local copy of m for a run-time index)
                float mg = m[0];
#pragma unroll
                for (int h = 1; h < GP; ++h) mg = h == g ? m[h] : mg;
                a.lse[g * a.ls] = et_from_float<O>((mg + log2f(zt)) * ET_LN2);
            }
        }
        if (e0 + EB < n) __syncthreads();  // the sums read before the next round's partials
    }
}

// The tiles of an attention task, for the generic path: a copy made field by field where that
// path is taken (et_copy_tile), so that the body's own tiles stay in registers on the fast path.
template <typename X, typename C, typename O>
struct EtAttnTiles {
    EtTileT<X> q, kn, vn;
    EtTileT<C> kc, vc;
    EtTileT<O> out, lse;
};

// decode_attention, any tiles (index vectors, unaligned rows, any G and D, several new rows):
// keys 0 .. past - 1 from the cache rows, then the new rows first_new, first_new + 1, ...;
// keys in blocks of what et_llm_smem holds, scores by a thread per (head, key), an online
// softmax (warp per head: running max M, sum Z, rescale F) and the output accumulated in the
// out tile, a thread per (head, column).
template <typename X, typename C, typename O>
__device__ __noinline__ void et_attention_generic(const EtAttnTiles<X, C, O>& a, int G, int D,
                                                  int past, int first_new, int keys) {
    const EtTileT<X>&q = a.q, &kn = a.kn, &vn = a.vn;
    const EtTileT<C>&kc = a.kc, &vc = a.vc;
    const EtTileT<O>&out = a.out, &lse = a.lse;
    const int lane = threadIdx.x & 31, warps = blockDim.x >> 5;
    const int block = (ET_LLM_SMEM_BYTES / 4 - 3 * G) / G;
    float* S = et_llm_smem();  // S[g * block + key - j0]
    float* M = S + block * G;
    float* Z = M + G;
    float* F = Z + G;
    const long long q0 = et_row_off(q, 0);
    const int lq = q.rank - 1, lk = kc.rank - 1, lv = vc.rank - 1;
    const int nb0 = first_new - past;  // new row of key j >= past: nb0 + j
    auto key = [&](int j, int d) {
        return j < past ? et_to_float(kc.p[et_row_off(kc, j) + et_off(kc, lk, d)])
                        : et_to_float(kn.p[et_row_off(kn, nb0 + j) + et_off(kn, kn.rank - 1, d)]);
    };
    auto val = [&](int j, int d) {
        return j < past ? et_to_float(vc.p[et_row_off(vc, j) + et_off(vc, lv, d)])
                        : et_to_float(vn.p[et_row_off(vn, nb0 + j) + et_off(vn, vn.rank - 1, d)]);
    };
    auto at = [&](int e) { return out.p + et_head_off(out, e, D); };
    for (int e = threadIdx.x; e < G * D; e += blockDim.x) *at(e) = et_from_float<O>(0.f);
    for (int g = threadIdx.x; g < G; g += blockDim.x) M[g] = et_neg_inf(), Z[g] = 0.f;
    const float scale = ET_LOG2E * rsqrtf((float)D);
    for (int j0 = 0; j0 < keys; j0 += block) {
        const int nb = keys - j0 < block ? keys - j0 : block;
        __syncthreads();  // the previous block's values are read, M and Z set
        for (int e = threadIdx.x; e < G * nb; e += blockDim.x) {
            const int g = e / nb, j = e - g * nb;
            float dot = 0.f;
            for (int d = 0; d < D; ++d)
                dot += et_to_float(q.p[q0 + et_off(q, lq, g * D + d)]) * key(j0 + j, d);
            S[g * block + j] = dot * scale;
        }
        __syncthreads();
        for (int g = threadIdx.x >> 5; g < G; g += warps) {
            float m = M[g];
            for (int j = lane; j < nb; j += 32) m = fmaxf(m, S[g * block + j]);
            m = et_warp_max(m);
            float z = 0.f;
            for (int j = lane; j < nb; j += 32) {
                const float p = exp2f(S[g * block + j] - m);
                S[g * block + j] = p;
                z += p;
            }
            z = et_warp_sum(z);
            if (lane == 0) {
                const float f = exp2f(M[g] - m);  // 0 for the first block (M = -inf)
                F[g] = f, Z[g] = Z[g] * f + z, M[g] = m;
            }
        }
        __syncthreads();
        for (int e = threadIdx.x; e < G * D; e += blockDim.x) {
            const int g = e / D, d = e - g * D;
            float acc = et_to_float(*at(e)) * F[g];
            for (int j = 0; j < nb; ++j) acc += S[g * block + j] * val(j0 + j, d);
            *at(e) = et_from_float<O>(acc);
        }
    }
    __syncthreads();
    for (int e = threadIdx.x; e < G * D; e += blockDim.x)
        *at(e) = et_from_float<O>(et_to_float(*at(e)) / Z[e / D]);
    for (int g = threadIdx.x; g < G; g += blockDim.x)
        lse.p[et_row_off(lse, g) + et_off(lse, lse.rank - 1, 0)] =
            et_from_float<O>((M[g] + log2f(Z[g])) * ET_LN2);
    __syncthreads();
}

// The fast-path instances compiled: bit gp of ET_ATTN_GROUPS set for GP = gp (2, 4, 8), bit w of
// ET_ATTN_WORDS for W = w words a row (4 to 32); a kernel defines only the bits its attention
// tiles use (each instance is seconds of compile).
#ifndef ET_ATTN_GROUPS
#define ET_ATTN_GROUPS ((1 << 2) | (1 << 4) | (1 << 8))
#endif
#ifndef ET_ATTN_WORDS
#define ET_ATTN_WORDS ((1ull << 4) | (1ull << 8) | (1ull << 16) | (1ull << 32))
#endif

// et_attention_fast<GP, w>(a) where ET_ATTN_WORDS has an instance for w words a row; false
// where it has none.
template <int GP, int W = 4, typename C, typename O>
__device__ __forceinline__ bool et_attention_fast_words(const EtAttn<C, O>& a, int w) {
    if constexpr (W <= 32) {
        if constexpr ((ET_ATTN_WORDS >> W) & 1)
            if (w == W) return et_attention_fast<GP, W>(a), true;
        return et_attention_fast_words<GP, W + 1>(a, w);
    }
    return false;
}

// decode_attention: tile t = (b*chunks + c)*kv_heads + h of token b, KV chunk c (positions
// start = chunk*c ..), KV head h: the G query heads q [1, G*D] of the token at position
// p = pos[0], over the n new keys and values k_new, v_new [n, D] of its request in this step
// (positions p0 = p - n + 1 .. p) that fall in the chunk and the cache rows k_cache, v_cache
// [1, 1, T', D] of the chunk below p0 (rows at or past p0 are never read); out [1, G, 1, D]
// (a chunk's partial) or [1, G*D] (the attention output, where one chunk covers the context)
// the normalised softmax(q K^T / sqrt(D)) V, lse [1, G, 1] the natural log-sum-exp of the
// scaled scores; with nothing visible lse = -inf and out = 0. The fast path
// (et_attention_fast) takes one new row (decode), float q, k_new, v_new runs and cache rows
// of whole aligned 16-byte words with 4 to 32 words per row and G <= 8 (256 threads);
// anything else the generic path.
template <typename X, typename C, typename O>
__device__ __forceinline__ void et_body_decode_attention(
    const EtTileT<X>& q, const EtTileT<C>& k_cache, const EtTileT<C>& v_cache,
    const EtTileT<X>& k_new, const EtTileT<X>& v_new, const EtITile& pos, const EtTileT<O>& out,
    const EtTileT<O>& lse, int chunk, int chunks, int kv_heads, int t) {
    const int D = (int)k_cache.n[k_cache.rank - 1], rows = et_rows(k_cache);
    const int G = (int)(q.n[q.rank - 1] / D), start = chunk * ((t / kv_heads) % chunks);
    const int p = pos.p[et_off(pos, pos.rank - 1, 0)], n_new = et_rows(k_new);
    const int p0 = p - n_new + 1;
    const int past = p0 - start < 0 ? 0 : p0 - start < rows ? p0 - start : rows;
    const int first = start - p0 > 0 ? start - p0 : 0;
    const int end = start + chunk - p0 < n_new ? start + chunk - p0 : n_new;
    const int keys = past + (end > first ? end - first : 0);
    if (keys == 0) {
        for (int e = threadIdx.x; e < G * D; e += blockDim.x)
            out.p[et_head_off(out, e, D)] = et_from_float<O>(0.f);
        for (int g = threadIdx.x; g < G; g += blockDim.x)
            lse.p[et_row_off(lse, g) + et_off(lse, lse.rank - 1, 0)] =
                et_from_float<O>(et_neg_inf());
        return;
    }
    constexpr int V = 16 / (int)sizeof(C);
    const int gp = G <= 2 ? 2 : G <= 4 ? 4 : 8;
    if (((ET_ATTN_GROUPS >> gp) & 1) && blockDim.x == 256 && G >= 1 && G <= 8 && D / V >= 4 &&
        D / V <= 32 &&
        keys * gp <= ET_LLM_SMEM_BYTES / 4 && et_kv_rows(k_cache) && et_kv_rows(v_cache) &&
        et_float_run(q) && et_float_run(k_new) && et_float_run(v_new) &&
        (out.rank == 4 || out.rank == 2) && lse.rank == 3 && et_plain(out) && et_plain(lse)) {
        const int r = k_cache.rank - 2, od = (int)out.s[out.rank - 1];
        const EtAttn<C, O> a = {et_floats(q.p), et_floats(k_new.p), et_floats(v_new.p),
                                k_cache.p, v_cache.p, out.p, lse.p,
                                (int)k_cache.s[r], (int)v_cache.s[r],
                                out.rank == 4 ? (int)out.s[1] : D * od, od, (int)lse.s[1], G,
                                D, past, keys};
        if constexpr ((ET_ATTN_GROUPS >> 2) & 1)
            if (gp == 2 && et_attention_fast_words<2>(a, D / V)) return;
        if constexpr ((ET_ATTN_GROUPS >> 4) & 1)
            if (gp == 4 && et_attention_fast_words<4>(a, D / V)) return;
        if constexpr ((ET_ATTN_GROUPS >> 8) & 1)
            if (gp == 8 && et_attention_fast_words<8>(a, D / V)) return;
    }
    EtAttnTiles<X, C, O> all;
    et_copy_tile(all.q, q), et_copy_tile(all.kn, k_new), et_copy_tile(all.vn, v_new);
    et_copy_tile(all.kc, k_cache), et_copy_tile(all.vc, v_cache);
    et_copy_tile(all.out, out), et_copy_tile(all.lse, lse);
    et_attention_generic(all, G, D, past, first, keys);
}

// ------------------------------------------------------------------ attn_merge

// attn_merge: per head g of parts [1, G, m, D] and lse [1, G, m], out[g*D + d] (out [1, G*D])
// = sum_c w_c parts[g, c, d] with w_c = exp(lse_c - max) / sum_c exp(lse_c - max); chunks with
// lse = -inf weigh nothing (a head with no finite lse gets zeros).
// Units (head, VW columns: 4 as one float4 where parts' rows are aligned float runs, else 1)
// times chunk groups: CG groups (as many as fill the CTA) take chunks cg, cg + CG, ..., NB
// loads in flight, the first NB issued before the weights are known. Warp g: max and 1 / sum
// of head g to T[g], I[g] and the weights to Wt[g*m + c] where they fit in et_llm_smem (else
// each use recomputes them). The groups' partial sums are combined through shared memory.
// The body sits on the decode step's critical path and runs once per layer on a CTA, so its
// code is fetched cold each time: loops stay rolled and a row's offset is its head's plus a
// chunk stride (no per-load division) wherever the chunk dimension has no index vector.
template <typename X, typename O>
__device__ __noinline__ void et_body_attn_merge(const EtTileT<X>& parts, const EtTileT<X>& lse,
                                                const EtTileT<O>& out) {
    constexpr int NB = 4;
    const int m = (int)parts.n[parts.rank - 2], D = (int)parts.n[parts.rank - 1];
    const int G = et_rows(parts) / m, lane = threadIdx.x & 31, nt = blockDim.x;
    const int ll = lse.rank - 1, lp = parts.rank - 1;
    float* P = et_llm_smem();  // partial sums: 4 floats per thread
    float* T = P + 4 * nt;
    float* I = T + G;
    float* Wt = I + G;
    const bool fits = 4 * nt + 2 * G + G * m <= ET_LLM_SMEM_BYTES / 4;
    const bool vec = et_floats(parts.p) && et_plain(parts) && et_rows_of_words(parts);
    const bool strided = !parts.idx[parts.rank - 2];  // row (g, c) = row (g, 0) + c * cs
    const long long cs = strided ? et_off(parts, parts.rank - 2, 1) : 0;
    const int vw = vec ? 4 : 1, cols = D / vw, units = G * cols;
    const int cg_n = units < nt ? nt / units : 1;
    float x[NB][4];
    auto load = [&](int e, int c0) {  // chunks c0, c0 + cg_n, ... of unit e % units
        const int u = e % units, g = u / cols, d = (u - g * cols) * vw;
        const long long head = et_row_off(parts, g * m);
#pragma unroll
        for (int b = 0; b < NB; ++b) {
            const int c = c0 + b * cg_n;
            if (c >= m) break;
            const long long row = strided ? head + c * cs : et_row_off(parts, g * m + c);
            if (vec) {
                const float4 f = *reinterpret_cast<const float4*>(et_floats(parts.p) + row + d);
                x[b][0] = f.x, x[b][1] = f.y, x[b][2] = f.z, x[b][3] = f.w;
            } else {
                x[b][0] = et_to_float(parts.p[row + et_off(parts, lp, d)]);
            }
        }
    };
    const int e0 = threadIdx.x;
    if (e0 < units * cg_n) load(e0, e0 / units);
    auto lse_at = [&](int g, int c) {
        return et_to_float(lse.p[et_row_off(lse, g) + et_off(lse, ll, c)]);
    };
#pragma unroll 1
    for (int g = threadIdx.x >> 5; g < G; g += nt >> 5) {
        float top = et_neg_inf();
#pragma unroll 1
        for (int c = lane; c < m; c += 32) top = fmaxf(top, lse_at(g, c));
        top = et_warp_max(top);
        const bool any = top != et_neg_inf();
        float z = 0.f;
#pragma unroll 1
        for (int c = lane; c < m; c += 32) {
            const float w = any ? exp2f((lse_at(g, c) - top) * ET_LOG2E) : 0.f;
            if (fits) Wt[g * m + c] = w;
            z += w;
        }
        z = et_warp_sum(z);
        const float inv = z > 0.f ? 1.f / z : 0.f;
        if (fits)
#pragma unroll 1
            for (int c = lane; c < m; c += 32) Wt[g * m + c] *= inv;
        if (lane == 0) T[g] = top, I[g] = inv;
    }
    __syncthreads();
    auto weight = [&](int g, int c) {
        return fits ? Wt[g * m + c]
                    : I[g] > 0.f ? exp2f((lse_at(g, c) - T[g]) * ET_LOG2E) * I[g] : 0.f;
    };
    const long long o0 = et_row_off(out, 0);
    auto store = [&](int u, const float* acc) {
        const int g = u / cols, d = (u - g * cols) * vw;
#pragma unroll 1
        for (int i = 0; i < vw; ++i)
            out.p[o0 + et_off(out, out.rank - 1, g * D + d + i)] = et_from_float<O>(acc[i]);
    };
#pragma unroll 1
    for (int e = e0; e < units * cg_n; e += nt) {
        const int u = e % units, cg = e / units, g = u / cols;
        float acc[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll 1
        for (int c0 = cg; c0 < m; c0 += NB * cg_n) {
            if (e != e0 || c0 != cg) load(e, c0);
#pragma unroll
            for (int b = 0; b < NB; ++b) {
                const int c = c0 + b * cg_n;
                if (c >= m) break;
                const float w = weight(g, c);
#pragma unroll
                for (int i = 0; i < 4; ++i) acc[i] += w * x[b][i];
            }
        }
        if (cg_n == 1) {
            store(u, acc);
        } else {
#pragma unroll
            for (int i = 0; i < 4; ++i) P[4 * e + i] = acc[i];
        }
    }
    if (cg_n > 1) {
        __syncthreads();
#pragma unroll 1
        for (int u = threadIdx.x; u < units; u += nt) {
            float acc[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll 1
            for (int cg = 0; cg < cg_n; ++cg)
#pragma unroll
                for (int i = 0; i < 4; ++i) acc[i] += P[4 * (cg * units + u) + i];
            store(u, acc);
        }
    }
    __syncthreads();
}
