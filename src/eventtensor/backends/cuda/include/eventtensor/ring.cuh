// Weight prefetch, which tasks are staged where and when: the stage ring. Included after
// stage.cuh; the generated kernel defines et_stage and et_has_stage.
//
// The stage ring (knob ET_STAGE_BYTES > 0, dynamic shared memory): warp 1 of a CTA stages
// the input tiles of the static tasks ahead of the one the CTA runs, in stream order, into a
// ring of ET_STAGE_BYTES bytes, while it has room and fewer than ET_STAGE_SLOTS tasks are
// staged and not yet run. A staged task holds one contiguous allocation (an allocation that
// would cross the end of the ring starts at its beginning instead) and slot q % ET_STAGE_SLOTS
// of the ring (q: its ordinal among the CTA's staged tasks), whose mbarrier completes a
// phase once its copies have landed. The task's body reads its tiles there (`et_staged`);
// its allocation is free once the CTA barrier after its body has passed. A task whose
// tiles exceed the ring, or a tile that is not rows of aligned 16-byte words, is prefetched
// into L2 instead (its slot's tile pointer null): the ring never blocks a task.
#pragma once

static_assert(ET_STAGE_BYTES % 16 == 0, "the stage ring holds 16-byte words");
#define ET_RING_CAP (ET_STAGE_BYTES > 0 ? ET_STAGE_BYTES : 16)  // (a divisor without the ring)

// The ring's bookkeeping in shared memory: per slot its mbarrier, where its task's tiles
// lie (null: not staged) and where its allocation starts (a position counting every byte
// ever allocated, so that it also orders allocations).
struct EtRing {
    u64 bar[ET_STAGE_SLOTS];
    void* tiles[ET_STAGE_SLOTS][ET_STAGE_TILES];
    unsigned start[ET_STAGE_SLOTS];
};
__device__ __forceinline__ EtRing& et_ring() {
    __shared__ EtRing ring;
    return ring;
}
__device__ __forceinline__ unsigned char* et_ring_buf() {
    extern __shared__ __align__(128) unsigned char et_dynamic_smem[];
    return et_dynamic_smem;
}

// Thread 0 at kernel entry (before the CTA barrier of et_load_args): the slots' mbarriers,
// one arrival (the copying warp's) per phase.
__device__ void et_ring_init() {
    if (ET_STAGE_BYTES > 0 && threadIdx.x == 0)
        for (int i = 0; i < ET_STAGE_SLOTS; ++i) et_mbar_init(&et_ring().bar[i], 1);
}

// The task at stream position p of the CTA's static queue: from the staged chunk `ch` (its
// positions p0 .. p0 + n) or, past it, from global memory.
__device__ __forceinline__ EtTask et_stream_task(const long long* A, const EtChunk& ch, int p0,
                                                 int n, int p) {
    EtTask t;
    if (p - p0 < n) {
        t.id = ch.id[p - p0];
        t.a = ch.rec[2 * (p - p0)];
        t.b = ch.rec[2 * (p - p0) + 1];
    } else {
        t.id = ET_QUEUE_TASK[p];
        t.a = ET_STREAM_REC[2 * p];
        t.b = ET_STREAM_REC[2 * p + 1];
    }
    return t;
}

// (runtime.cuh) The tasks the CTA ran before the one of staged ordinal q_run are done, so
// staged tasks of ordinal < q_run hold no allocation any more. Stages the tasks from f.next
// on while they fit.
__device__ void et_ring_fill(const long long* A, const EtChunk& ch, int p0, int n, int hi,
                             unsigned q_run, EtRingFill& f) {
    EtRing& ring = et_ring();
    const int lane = (int)threadIdx.x & 31;
    if (f.q == q_run) f.head = (f.head + ET_RING_CAP - 1) / ET_RING_CAP * ET_RING_CAP;  // empty
    const unsigned tail = f.q == q_run ? f.head : ring.start[q_run % ET_STAGE_SLOTS];
    while (f.next < hi && f.q - q_run < ET_STAGE_SLOTS) {
        const EtTask t = et_stream_task(A, ch, p0, n, f.next);
        if (!et_has_stage(t.a.x)) {
            ++f.next;
            continue;
        }
        EtStagePlan plan;
        et_stage(A, t, plan);
        if (plan.bytes > ET_RING_CAP) plan = EtStagePlan{};  // to L2: it never fits
        const unsigned at = et_ring_place(f.head, tail, (unsigned)plan.bytes, ET_RING_CAP);
        if (at == 0xffffffffu) break;  // no room until the CTA's next task
        const int slot = (int)(f.q % ET_STAGE_SLOTS);
        unsigned char* buf = et_ring_buf() + at % ET_RING_CAP;
        if (lane == 0) {
            ring.start[slot] = at;
            for (int j = 0; j < ET_STAGE_TILES; ++j)
                ring.tiles[slot][j] = plan.off[j] >= 0 ? buf + plan.off[j] : nullptr;
            et_mbar_arrive_expect(&ring.bar[slot], (unsigned)plan.bytes);
        }
        __syncwarp();  // the expected bytes are counted before any copy can complete
        EtStageCopy copy{plan, buf, &ring.bar[slot], lane};
        et_stage(A, t, copy);
        f.head = at + (unsigned)plan.bytes;
        ++f.q;
        ++f.next;
    }
}

// Every thread, before the CTA barrier that ends the waits of the static task holding ring
// slot `slot` (phase parity `parity`): wait until its tiles have landed. A wait past the
// watchdog bound fails the launch (kind 3: the stage ring); false if the launch aborts.
__device__ bool et_ring_wait(const long long* A, int task, int slot, unsigned parity) {
    u64* bar = &et_ring().bar[slot];
    if (et_mbar_done(bar, parity)) return true;
    const u64 start = et_globaltimer();
    for (unsigned polls = 1;; ++polls) {
        if (et_mbar_done(bar, parity)) return true;
        if (polls % 64 == 0) {
            if (*(volatile int*)ET_ABORT) return false;
            if (et_globaltimer() - start > ET_WATCHDOG_NS) {
                et_fail(ET_ERR, ET_ABORT, task, slot, 0, 0, 3);
                return false;
            }
        }
    }
}

// Warp 1: the copies of the staged tasks of ordinals q_run .. f.q - 1, which the CTA will not
// run (it aborts), landed (a CTA does not exit with copies into its shared memory in flight).
__device__ void et_ring_drain(unsigned q_run, const EtRingFill& f) {
    for (unsigned q = q_run; q != f.q; ++q)
        while (!et_mbar_done(&et_ring().bar[q % ET_STAGE_SLOTS], (q / ET_STAGE_SLOTS) & 1)) {
        }
}

__device__ void* const* et_ring_tiles(int slot) { return et_ring().tiles[slot]; }

__device__ int et_prefetch_task(const long long* A, const EtTask& task, int me, int step) {
    EtPrefetchL2 l2{me, step, 0};
    et_stage(A, task, l2);
    return l2.bytes;
}
