// eventtensor dynamic and hybrid modes: the device queue fed by event completions -- early
// push, runtime wait counts, data-dependent notifies, trigger ranges and termination.
// Included by the generated kernel after runtime.cuh, whose loops call the entry points below.
// In hybrid mode static tasks follow the same counter protocol (their notifies of watched
// elements count and complete them; they arm the counts they write).
// Semantics match eventtensor.backends.cpu (the executable specification).
//
// Counter of element x (64 bits), by its wait count:
//   static   completions (unit 1, or 2^16 under early push: dispatches in bits 0..15);
//   runtime  notifies in bits 0..31; arming adds ET_ARMED | count << 32, once: done by the task
//            that wrote the count (after its body), or by CTA 0 at launch for an input tensor.
// Exactly one thread completes an element: the notifier whose increment reaches the count of
// a static or armed counter, or the armer if the notifies reached the count before it armed.
// Completing releases the element's consumers (under early push they were released when its
// last notifier was dispatched) and the trigger ranges it starts.
// Termination: ET_RETIRED counts retired tasks plus the tasks of a trigger grid that no range
// covers (added by the completer of the trigger edge's last source element). A CTA whose queue
// slot stays empty leaves once ET_RETIRED reaches the number of dynamic tasks.
#pragma once

#define ET_ARMED (1ull << 62)
#define ET_COUNT_SHIFT 32
#define ET_COUNT_MASK 0x3fffffffull
#define ET_LOW32 0xffffffffull
// Notify record bit 31: an early-push element whose completion releases trigger ranges. Its
// record carries ET_PUSH_BIT instead of ET_EARLY_BIT, so et_notify_task calls
// et_notify_watched, which counts it in units of 2^16 and sees the completing notify.
#define ET_EARLY_WATCH_BIT ((int)0x80000000u)
#define ET_RETIRED (&ET_DYN_STATE[0])
// Trigger edge j: source elements completed << 32 | consumer tasks their ranges covered.
#define ET_TRIGGER_STATE(j) (&ET_DYN_STATE[1 + (j)])

// Generated per program (codegen.py); empty outside dynamic and hybrid modes:
// Thread 0 of CTA 0, at launch: et_arm the runtime-count elements counted by an input tensor.
__device__ void et_arm_inputs(const long long* A);
// Thread 0, element x completed: et_release_range for every trigger edge from x's event.
__device__ void et_release_triggers(const long long* A, int x);

// Thread 0, once per element and launch: element x reached its wait count.
__device__ void et_complete(const long long* A, int x, bool early) {
    if (!early) et_release_consumers(A, x);
    et_release_triggers(A, x);
}

// Whether the notify (unit 1 << shift) that left element x's counter at `v` completed x.
__device__ __forceinline__ bool et_reaches(const long long* A, int x, u64 v, int shift) {
    const long long count = ET_TARGET[x];
    if (count >= 0) return (long long)(v >> shift) == count;
    return (v & ET_ARMED) && (v & ET_LOW32) == ((v >> ET_COUNT_SHIFT) & ET_COUNT_MASK);
}

// Thread 0: one notify of element x, unit 1 << shift; completes x if it reached the count.
__device__ __forceinline__ void et_notify_counted(const long long* A, int x, int shift) {
    const u64 unit = 1ull << shift;
    if (et_reaches(A, x, et_atom_release_add(&ET_COUNTER[x], unit) + unit, shift))
        et_complete(A, x, shift != 0);
}

__device__ void et_notify_watched(const long long* A, int rec) {
    et_notify_counted(A, rec & ET_ELEM_MASK, (rec & ET_EARLY_WATCH_BIT) ? 16 : 0);
}

// Thread 0: the wait count of runtime-count element x is `count` (its tensor was written by
// this CTA, or is an input). The first arming holds (a negative count never completes); the
// armer completes x if the notifies already reached the count. The fence makes the arming a
// release: a task waiting on x sees what this CTA wrote. Not inlined: a count tensor may arm
// the elements of many events (one per layer), each a loop calling this.
__device__ __noinline__ void et_arm(const long long* A, int x, long long count) {
    u64* c = &ET_COUNTER[x];
    const u64 n = (u64)count & ET_COUNT_MASK;
    __threadfence();
    u64 old = *(volatile u64*)c;
    while (!(old & ET_ARMED)) {
        const u64 seen = atomicCAS(c, old, old | ET_ARMED | n << ET_COUNT_SHIFT);
        if (seen == old) {
            if ((old & ET_LOW32) >= n) et_complete(A, x, false);
            return;
        }
        old = seen;
    }
}

// Thread 0: a source element of trigger edge j completed with range [lo, hi) (clipped) of the
// consumer grid, task ids base .. base + n - 1: each task in it loses one pending dependency.
// The edge's last source element (of n_src) counts the tasks no range covered as retired:
// they are never pushed.
__device__ void et_release_range(const long long* A, int j, long long base, long long n,
                                 long long lo, long long hi, long long n_src) {
    lo = lo < 0 ? 0 : lo;
    hi = hi > n ? n : hi;
    const long long covered = hi > lo ? hi - lo : 0;
    for (long long t = base + lo; t < base + hi; ++t)
        if (et_release(A, (int)t)) et_push(A, (int)t);
    const u64 old = atomicAdd(ET_TRIGGER_STATE(j), (1ull << 32) + (u64)covered);
    if ((long long)(old >> 32) + 1 == n_src) {
        const long long uncovered = n - (long long)(old & ET_LOW32) - covered;
        if (uncovered > 0) et_red_release_add(ET_RETIRED, (u64)uncovered);
    }
}

// Thread 0, `task` just popped: count its dispatch on the early-push elements it notifies;
// the last dispatch of an element releases its consumers.
__device__ void et_dispatch(const long long* A, const EtTask& task) {
    for (int i = task.a.w; i < task.b.x; ++i) {
        const int rec = ET_NOTIFY_REC[i];
        if (!(rec & (ET_EARLY_BIT | ET_EARLY_WATCH_BIT))) continue;
        const int x = rec & ET_ELEM_MASK;
        const u64 old = atomicAdd(&ET_COUNTER[x], 1ull);
        if ((long long)(old & 0xFFFFull) + 1 == ET_TARGET[x]) et_release_consumers(A, x);
    }
}

// Thread 0: the task in the next queue slot, its dispatch counted; -1 when no task is left
// (every slot taken, or every dynamic task retired or never to be pushed) or on abort. A slot
// empty for longer than the watchdog bound fails the launch (a DeadlockError on the host).
__device__ int et_pop(const long long* A) {
    const unsigned k = atomicAdd(ET_HEAD, 1u);
    if (k >= ET_N_DYNAMIC) return -1;
    const u64 start = et_globaltimer();
    for (unsigned polls = 1;; ++polls) {
        const int task = et_ld_acquire_int(&ET_QUEUE[k]);
        if (task >= 0) {
            et_dispatch(A, et_load_task(A, task));
            return task;
        }
        if (polls < 64) continue;
        if (*(volatile int*)ET_ABORT || et_ld_acquire(ET_RETIRED) == ET_N_DYNAMIC) return -1;
        if (et_globaltimer() - start > ET_WATCHDOG_NS) {
            et_fail(ET_ERR, ET_ABORT, -1, k, 0, 0, 2);
            return -1;
        }
        et_nanosleep(64);
    }
}

// Hybrid mode, thread 0 of a CTA whose static task is blocked: claim the next queue slot if
// a task was pushed into it and no CTA holds its ticket; -1 otherwise.
__device__ int et_try_pop(const long long* A) {
    const unsigned h = *(volatile unsigned*)ET_HEAD;
    if (h >= ET_N_DYNAMIC || h >= *(volatile unsigned*)ET_TAIL ||
        atomicCAS(ET_HEAD, h, h + 1) != h)
        return -1;
    int task;  // slot h is reserved by its pusher, whose next store publishes the task
    while ((task = et_ld_acquire_int(&ET_QUEUE[h])) < 0) {}
    et_dispatch(A, et_load_task(A, task));
    return task;
}

// Thread 0, after the notifies of `task`: arm the counts it wrote, then count it retired (after
// every push it made, so ET_RETIRED reaches the number of dynamic tasks only at the end).
__device__ void et_retire(const long long* A, const EtTask& task) {
    et_arm_written(A, task);
    et_red_release_add(ET_RETIRED, 1ull);
}
