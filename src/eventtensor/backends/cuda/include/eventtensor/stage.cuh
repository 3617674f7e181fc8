// Weight prefetch, how a tile is staged: a static task's input tiles (regions of tensors no
// task writes: weights, norm scales, positions) are fetched before the task waits on its
// events, so that a CTA's stream of weight reads does not pause while it waits (which tasks
// are staged where and when: ring.cuh). Included after bodies.cuh.
//
// The generated `et_stage(A, task, s)` builds each input tile of `task` and hands it to the
// stager `s` as `s.tile(j, t)` (j: the tile's place among the task's staged tiles). Stagers:
//   EtPrefetchL2   prefetch the tile into L2 (the default, and the prefetch window);
//   EtStagePlan    place the tiles in a stage ring allocation (bytes, offsets);
//   EtStageCopy    copy them there with bulk asynchronous copies completing on an mbarrier.
#pragma once

// ------------------------------------------------------------------ PTX

__device__ __forceinline__ unsigned et_smem_addr(const void* p) {
    return (unsigned)__cvta_generic_to_shared(p);
}
__device__ __forceinline__ void et_mbar_init(u64* bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(et_smem_addr(bar)),
                 "r"(count) : "memory");
}
// One arrival on `bar` expecting `bytes` more of asynchronous copies (release: the caller's
// earlier shared-memory writes are seen by whoever waits for the phase).
__device__ __forceinline__ void et_mbar_arrive_expect(u64* bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;"
                 :: "r"(et_smem_addr(bar)), "r"(bytes) : "memory");
}
// Whether the phase of `bar` with parity `parity` has completed (acquire: its copies and the
// writes released by its arrival are visible to the caller).
__device__ __forceinline__ bool et_mbar_done(u64* bar, unsigned parity) {
    unsigned done;
    asm volatile("{\n\t.reg .pred p;\n\t"
                 "mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 p, [%1], %2;\n\t"
                 "selp.u32 %0, 1, 0, p;\n\t}"
                 : "=r"(done) : "r"(et_smem_addr(bar)), "r"(parity) : "memory");
    return done;
}
// `bytes` (a multiple of 16) from global `src` to shared `dst` (both 16-byte aligned),
// completing on `bar`; in L2 the lines are the first to go (evict-first: a step reads each
// weight once, and the kernel's code, activations and KV rows should stay there).
__device__ __forceinline__ void et_bulk_copy(void* dst, const void* src, unsigned bytes,
                                             u64* bar) {
    asm volatile("{\n\t.reg .b64 policy;\n\t"
                 "createpolicy.fractional.L2::evict_first.b64 policy, 1.0;\n\t"
                 "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"
                 ".L2::cache_hint [%0], [%1], %2, [%3], policy;\n\t}"
                 :: "r"(et_smem_addr(dst)), "l"(src), "r"(bytes), "r"(et_smem_addr(bar))
                 : "memory");
}

// `bytes` (a multiple of 16) from global `src` (16-byte aligned) into L2 by the TMA unit: one
// instruction for the whole run, nothing to wait for, and no load of the thread's in flight
// (a release fence of the CTA does not wait for it, unlike prefetch.global.L2).
__device__ __forceinline__ void et_bulk_prefetch(const void* src, unsigned bytes) {
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" :: "l"(src), "r"(bytes)
                 : "memory");
}

// Whether tile t can be bulk-copied: rows of whole, 16-byte aligned words (et_rows_of_words).
template <typename T>
__device__ __forceinline__ bool et_bulk_ok(const EtTileT<T>& t) {
    return et_rows_of_words(t) && et_tile_bytes(t) > 0;
}

// Whether every row of tile t follows the one before it in memory (one copy for all rows).
template <typename T>
__device__ __forceinline__ bool et_dense(const EtTileT<T>& t) {
    long long stride = 1;
    bool dense = true;
#pragma unroll
    for (int d = 3; d >= 0; --d)
        if (d < t.rank) {
            dense &= !t.idx[d] && (t.n[d] == 1 || t.s[d] == stride);
            stride *= t.n[d];
        }
    return dense;
}

// ------------------------------------------------------------------ stagers

// Knob ET_PREFETCH_BULK (0: off): EtPrefetchL2 brings a tile of 16-byte words into L2 with
// bulk prefetches (et_bulk_prefetch; a dense tile in one, else one a row) instead of one
// prefetch.global.L2 a line. Other tiles keep the line prefetches.
#ifndef ET_PREFETCH_BULK
#define ET_PREFETCH_BULK 0
#endif

// Prefetch each tile into L2, threads me, me + step, ... of the CTA taking their share (of
// its lines, or of its rows with ET_PREFETCH_BULK); `bytes` sums the tiles' bytes.
struct EtPrefetchL2 {
    int me, step, bytes;
    template <typename T>
    __device__ void tile(int, const EtTileT<T>& t) {
        const int tile_bytes = et_tile_bytes(t);
        bytes += tile_bytes;
        if (!ET_PREFETCH_BULK || !et_bulk_ok(t)) {
            et_prefetch_tile(t, me, step);
        } else if (et_dense(t)) {
            if (me == 0) et_bulk_prefetch(t.p, (unsigned)tile_bytes);
        } else {
            const int rows = et_rows(t);
            const unsigned row_bytes = (unsigned)(tile_bytes / rows);
            for (int r = me; r < rows; r += step)
                et_bulk_prefetch(t.p + et_row_off(t, r), row_bytes);
        }
    }
};

// A task's tiles placed one after another (16-byte aligned) in one allocation: `off[j]`
// where tile j goes, -1 for a tile left to L2; `bytes`: the allocation's size.
struct EtStagePlan {
    int bytes, off[ET_STAGE_TILES];
    __device__ EtStagePlan() : bytes(0) {
#pragma unroll
        for (int j = 0; j < ET_STAGE_TILES; ++j) off[j] = -1;
    }
    template <typename T>
    __device__ void tile(int j, const EtTileT<T>& t) {
        if (!et_bulk_ok(t)) return;
        off[j] = bytes;
        bytes += (et_tile_bytes(t) + 15) & ~15;
    }
};

// Lane `lane` of the copying warp: the share of the copies of the tiles of a plan placed at
// `buf` (the allocation) into the ring, completing on `bar`: a dense tile in one copy (lane
// 0), else one copy per row (lanes taking rows lane, lane + 32, ...); a tile the plan left
// out is prefetched into L2 by the warp.
struct EtStageCopy {
    const EtStagePlan& plan;
    unsigned char* buf;
    u64* bar;
    int lane;
    template <typename T>
    __device__ void tile(int j, const EtTileT<T>& t) {
        if (plan.off[j] < 0) {
            et_prefetch_tile(t, lane, 32);
            return;
        }
        unsigned char* dst = buf + plan.off[j];
        if (et_dense(t)) {
            if (lane == 0) et_bulk_copy(dst, t.p, (unsigned)et_tile_bytes(t), bar);
            return;
        }
        const int rows = et_rows(t);
        const unsigned row_bytes = (unsigned)(et_tile_bytes(t) / rows);
        for (int r = lane; r < rows; r += 32)
            et_bulk_copy(dst + r * row_bytes, t.p + et_row_off(t, r), row_bytes, bar);
    }
};

// ------------------------------------------------------------------ ring placement

// Where the next allocation of `bytes` starts in a ring of `cap` bytes if it has room for
// it, else 0xffffffff. `head`: the bytes allocated so far (positions), `tail`: the start
// of the oldest allocation still in use (head if none). An allocation never crosses the end
// of the ring: it starts at the ring's beginning instead, skipping the bytes before it.
__device__ __forceinline__ unsigned et_ring_place(unsigned head, unsigned tail,
                                                  unsigned bytes, unsigned cap) {
    const unsigned at_end = cap - head % cap;
    const unsigned at = bytes > at_end ? head + at_end : head;
    return at + bytes - tail <= cap ? at : 0xffffffffu;
}
