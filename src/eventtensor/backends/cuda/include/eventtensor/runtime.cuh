// eventtensor device runtime: event wait / notify, static queue walker, dynamic queue with
// early push, watchdog, profiling and on-device counter re-initialisation.
//
// The generated kernel defines ET_* table accessors (see codegen.py) and `et_run_task`, then
// includes this header. One CTA per SM; thread 0 drives synchronisation, all threads run
// tile bodies. Semantics match eventtensor.backends.cpu (the executable specification).
#pragma once

typedef unsigned long long u64;

// ------------------------------------------------------------------ error record
// err[0]: flag (0 ok, 1 watchdog), err[1]: task, err[2]: element, err[3]: counter value,
// err[4]: wait count, err[5]: SM (CTA), err[6]: kind (1 wait, 2 queue pop, 3 stage ring slot
// (err[2]) of the task)
#define ET_ERR_WATCHDOG 1

__device__ __forceinline__ u64 et_ld_acquire(const u64* p) {
    u64 v;
    asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ int et_ld_acquire_int(const int* p) {
    int v;
    asm volatile("ld.acquire.gpu.global.s32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void et_red_release_add(u64* p, u64 v) {
    asm volatile("red.release.gpu.global.add.u64 [%0], %1;" :: "l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ void et_red_relaxed_add(u64* p, u64 v) {
    asm volatile("red.relaxed.gpu.global.add.u64 [%0], %1;" :: "l"(p), "l"(v) : "memory");
}
// With a relaxed atomic after it, a release: the CTA's writes before the barrier that
// precedes it are visible to whoever observes the atomic. (A release fence alone: unlike
// fence.acq_rel it does not invalidate the SM's L1.)
__device__ __forceinline__ void et_fence_release() {
    asm volatile("fence.release.gpu;" ::: "memory");
}
// After a relaxed load that observed a release: an acquire (the CTA's later reads see what
// the releaser published). It invalidates the SM's L1 and issues no load.
__device__ __forceinline__ void et_fence_acquire() {
    asm volatile("fence.acquire.gpu;" ::: "memory");
}
__device__ __forceinline__ void et_st_release_int(int* p, int v) {
    asm volatile("st.release.gpu.global.s32 [%0], %1;" :: "l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ u64 et_globaltimer() {
    u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
__device__ __forceinline__ void et_nanosleep(unsigned ns) {
    asm volatile("nanosleep.u32 %0;" :: "r"(ns));
}

// Record the first error (watchdog) and raise the abort flag every spin loop checks.
__device__ void et_fail(long long* err, int* abort_flag, long long task, long long elem,
                        long long counter, long long count, int kind) {
    if (atomicCAS((unsigned long long*)&err[0], 0ull, (unsigned long long)ET_ERR_WATCHDOG) == 0) {
        err[1] = task; err[2] = elem; err[3] = counter; err[4] = count;
        err[5] = blockIdx.x; err[6] = kind;
        __threadfence();
    }
    atomicExch(abort_flag, 1);
}

// Waits poll without sleeping for ET_SPIN_NS (a dependent hop must not pay a sleep's wake-up
// latency), checking the abort flag and the watchdog every 32 polls; longer waits sleep
// ET_SLEEP_NS between polls. (More than one poll in flight, staggered, measured slower.)
#ifndef ET_SPIN_NS
#define ET_SPIN_NS 200000ull
#endif
#ifndef ET_SLEEP_NS
#define ET_SLEEP_NS 256
#endif
// ET_ACQUIRE_POLLS 1: every poll of a wait is an acquire load (each invalidates the SM's L1;
// the poll that sees the count ends the wait); 0: polls are relaxed loads and an acquire
// fence follows the poll that sees the count.
#ifndef ET_ACQUIRE_POLLS
#define ET_ACQUIRE_POLLS 0
#endif

__device__ __forceinline__ u64 et_ld_relaxed(const u64* p) {
    u64 v;
    asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

// Whether counter value v satisfies a wait: (v >> shift) >= count, or, for count < 0 (a
// runtime count under the armed protocol of dynamic.cuh), v armed with its notifies (bits
// 0..31) at the count it was armed with (bits 32..61).
__device__ __forceinline__ bool et_satisfied(u64 v, int shift, long long count) {
    if (count >= 0) return (long long)(v >> shift) >= count;
    return (v >> 62) & 1 && (v & 0xffffffffull) >= ((v >> 32) & 0x3fffffffull);
}

__device__ __forceinline__ u64 et_atom_release_add(u64* p, u64 v) {
    u64 old;
    asm volatile("atom.release.gpu.global.add.u64 %0, [%1], %2;" : "=l"(old) : "l"(p), "l"(v)
                 : "memory");
    return old;
}

// ------------------------------------------------------------------ table accessors
// The launch argument is one array of 64-bit slots (codegen.py and runtime.py agree on it),
// copied into shared memory at kernel start: `A` below is that shared copy.
#define ET_SLOTS 128
#define ET_I32(slot) ((int*)(A[slot]))
#define ET_QUEUE_TASK ET_I32(1)
#define ET_TASK_REC ((const int4*)(A[2]))   // per task: 2 x int4, see EtTask
#define ET_GRID_DYNAMIC(g) ((A[3] >> (g)) & 1)  // whether grid g runs from the device queue
#define ET_WAIT_PTR ET_I32(4)
#define ET_WAIT_REC ((const int2*)(A[5]))  // per wait: {element | early << 30, wait count}
#define ET_NOTIFY_PTR ET_I32(6)
// per notify: element | early << 30 | completion releases consumers or trigger ranges << 29
// (| early-push element with trigger ranges << 31, see dynamic.cuh)
#define ET_NOTIFY_REC ET_I32(7)
#define ET_ELEM_MASK 0x1fffffff
#define ET_EARLY_BIT (1 << 30)
#define ET_PUSH_BIT (1 << 29)
#define ET_TARGET ((const long long*)(A[8]))
#define ET_COUNTER ((u64*)(A[9]))
#define ET_SHIFT ET_I32(10)          // per element: 16 for early-push elements, else 0
#define ET_READY ET_I32(11)
#define ET_N_READY ((int)A[12])
#define ET_RELEASED ET_I32(13)    // per task: dependencies released (dynamic tasks)
#define ET_PENDING0 ET_I32(14)    // per task: dependencies to release before it is pushed
#define ET_PUSH_PTR ET_I32(15)
#define ET_PUSH_TASK ET_I32(16)
#define ET_QUEUE ET_I32(17)
#define ET_HEAD ((unsigned*)(A[18]))
#define ET_TAIL (ET_HEAD + 1)
#define ET_N_DYNAMIC ((unsigned)A[20])
#define ET_ERR ((long long*)(A[21]))
#define ET_ABORT ET_I32(22)
#define ET_NUM_ELEMENTS ((int)A[24])
#define ET_WATCHDOG_NS ((u64)A[25])
#define ET_PROF ((u64*)(A[26]))
#define ET_NUM_TASKS ((int)A[27])
#define ET_SKIP_PTR ET_I32(28)
#define ET_SKIP_ELEM ET_I32(29)
#define ET_DYN_STATE ((u64*)(A[30]))  // dynamic mode, see dynamic.cuh: retired tasks, triggers
#define ET_N_TRIGGERS ((int)A[31])    // trigger edges (ET_DYN_STATE holds 1 + this many)
// Launch parity: the device state a launch changes (event counters, released dependency
// counts, queue slots, queue head and tail, dynamic-mode state) exists twice. Launch e of a
// CTA (its epoch, kept in the launch arguments) uses copy e % 2 through the slots above and
// re-initialises its share of the other copy, which the next launch uses: no host memset, no
// end-of-launch barrier. The other copy's pointers sit in these slots while a launch runs:
#define ET_NEXT_COUNTER ((u64*)(A[43]))
#define ET_NEXT_RELEASED ET_I32(44)
#define ET_NEXT_QUEUE ET_I32(45)
#define ET_NEXT_HEAD ((unsigned*)(A[46]))
#define ET_NEXT_DYN_STATE ((u64*)(A[47]))
// Static queues in stream order (guarded slots dropped): positions lo .. hi of the CTA's SM
// (ET_SM_ARGS) hold task ids (ET_QUEUE_TASK) and records (ET_STREAM_REC, wait and
// notify ranges indexing ET_STREAM_WAIT / ET_STREAM_NOTIFY), so a chunk of an SM's tasks and
// all their waits and notifies are contiguous and staged into shared memory at once.
// Per SM (launch arguments after the ET_SLOTS slots, 6 per SM, copied into slots 32..37 of the
// CTA's own SM): its stream positions [lo, hi), waits [lo, hi) and notifies [lo, hi).
#define ET_SM_ARGS 32
#define ET_STREAM_REC ((const int4*)(A[40]))
#define ET_STREAM_WAIT ((const int2*)(A[41]))
#define ET_STREAM_NOTIFY ET_I32(42)
#define ET_SYM(i) (A[48 + (i)])
// A program with more tensors than the slots after its symbols hold (codegen.py
// `uses_tensor_table`) passes their ET_NUM_TENSORS pointers in a table, slot 38, which every
// CTA copies into shared memory at kernel start (et_load_tensor_table).
#define ET_TENSOR_TABLE ((const long long*)(A[38]))
#ifdef ET_NUM_TENSORS
__device__ __forceinline__ long long* et_tensor_table() {
    __shared__ long long table[ET_NUM_TENSORS];
    return table;
}
#endif
// All threads, after the slots are in A: the tensor table copied in (if the program has one).
__device__ __forceinline__ void et_load_tensor_table(const long long* A) {
#ifdef ET_NUM_TENSORS
    for (int k = threadIdx.x; k < ET_NUM_TENSORS; k += blockDim.x)
        et_tensor_table()[k] = ET_TENSOR_TABLE[k];
    __syncthreads();
#endif
}

// One task's record, packed on the host: {grid, wait_lo, wait_hi, notify_lo} and
// {notify_hi, coord 0, coord 1, coord 2}: two 16-byte loads.
struct EtTask {
    int id;
    int4 a, b;
};

__device__ __forceinline__ EtTask et_no_task() {  // a task record standing for none
    EtTask r;
    r.id = -1;
    r.a = r.b = make_int4(0, 0, 0, 0);
    return r;
}

__device__ __forceinline__ EtTask et_load_task(const long long* A, int t) {
    EtTask r;
    r.id = t;
    if (t >= 0) { r.a = ET_TASK_REC[2 * t]; r.b = ET_TASK_REC[2 * t + 1]; }
    return r;
}

// Generated per program (codegen.py):
// The dispatch switch: the body of `task`, its staged input tiles (if `staged`, see et_stage)
// read from shared memory. Inlined into its one call site of a kernel: as a call, the
// dispatcher's live registers are saved to the stack around every body and reloaded after
// it (measured: 0.7-0.9 µs more from each body's barrier to its notifies).
__device__ __forceinline__ void et_run_task(const long long* A, const EtTask& task,
                                            void* const* staged);
// Whether tasks of grid g have data-dependent waits or a trigger (et_extra_waits).
__device__ __forceinline__ bool et_has_extra_waits(int g);
// Whether tasks of grid g have no body (kind nop): only waits and notifies.
__device__ __forceinline__ bool et_sync_only(int g);
// Thread 0, after the table waits: data-dependent waits and the trigger of `task`.
// Returns 1 to run the body, 2 if the task is guarded (no trigger range holds it), 0 on abort.
__device__ int et_extra_waits(const long long* A, const EtTask& task);
// Whether tasks of grid g read input tiles that et_stage stages (affine regions of input
// tensors).
__device__ __forceinline__ bool et_has_stage(int g);
// Each staged input tile t of `task` handed to the stager s as s.tile(j, t), j its place
// among the task's staged tiles (stage.cuh).
template <class S>
__device__ void et_stage(const long long* A, const EtTask& task, S& s);
// Thread 0, after the body: data-dependent notifies of `task`.
__device__ void et_extra_notifies(const long long* A, const EtTask& task);
// Wait count of element x whose count is read at run time from a tensor (table value -1).
__device__ long long et_runtime_count(const long long* A, int x);

// Dynamic mode (dynamic.cuh, included by the generated kernel after this header), thread 0:
// a table notify whose record has ET_PUSH_BIT: count it; complete the element on its count.
__device__ void et_notify_watched(const long long* A, int rec);
// The next task of the device queue (dispatch counted), or -1: no task left, or aborting.
__device__ int et_pop(const long long* A);
// Hybrid mode: a task of the device queue if one is published and unclaimed, else -1.
__device__ int et_try_pop(const long long* A);
// After the notifies of `task`: arm the runtime counts it wrote, count it retired.
__device__ void et_retire(const long long* A, const EtTask& task);
// After the body and notifies of `task` (dynamic and hybrid modes): arm the runtime counts
// whose count tensor region it wrote.
__device__ void et_arm_written(const long long* A, const EtTask& task);
// At launch (CTA 0): arm the runtime counts read from input tensors.
__device__ void et_arm_inputs(const long long* A);

// The wait count of element x for et_wait, given its table value c: in dynamic and hybrid
// modes (ET_ARMED_COUNTS) a runtime count (-1) stays -1, checked by the armed protocol of
// dynamic.cuh; in static mode it is read from its tensor.
__device__ __forceinline__ long long et_wait_count(const long long* A, int x, long long c) {
#ifdef ET_ARMED_COUNTS
    return c;
#else
    return c >= 0 ? c : et_runtime_count(A, x);
#endif
}

// Outcome of a wait: aborting (watchdog or another CTA's failure), satisfied, or, in hybrid
// mode, interrupted by a dynamic task popped while the wait was blocked (see et_do_task).
#define ET_WAIT_ABORT 0
#define ET_WAIT_OK 1
#define ET_WAIT_NEST 3

// A poll of a wait's counter (see ET_ACQUIRE_POLLS).
__device__ __forceinline__ u64 et_poll(const u64* counter) {
    return ET_ACQUIRE_POLLS ? et_ld_acquire(counter) : et_ld_relaxed(counter);
}

// Thread 0 only: spin until the counter satisfies the wait (`et_satisfied`); the poll that
// sees it (an acquire load), or with relaxed polls an acquire fence after it, orders the
// CTA's later reads after the producers' writes (ET_ACQUIRE_POLLS). With `fence` false the
// caller makes that fence itself (one after several waits: see et_wait_task). With `nest`
// set (hybrid mode), a blocked wait polls the device queue too and returns ET_WAIT_NEST with
// the popped task in *nest. `v`: the wait's first poll of the counter.
__device__ int et_wait_seen(const long long* A, int x, int shift, long long count,
                            long long task, int* nest, u64 v, bool fence = true) {
    u64* counter = &ET_COUNTER[x];
    if (!et_satisfied(v, shift, count)) {
        const u64 start = et_globaltimer();
        bool sleepy = false;
        for (unsigned polls = 1;; ++polls) {
            v = et_poll(counter);
            if (et_satisfied(v, shift, count)) break;
#ifdef ET_HYBRID
            if (nest && polls % 4 == 0 && (*nest = et_try_pop(A)) >= 0) return ET_WAIT_NEST;
#endif
            if (polls % 32 == 0) {
                if (*(volatile int*)ET_ABORT) return ET_WAIT_ABORT;
                const u64 waited = et_globaltimer() - start;
                if (waited > ET_WATCHDOG_NS) {
                    et_fail(ET_ERR, ET_ABORT, task, x, (long long)(v >> shift), count, 1);
                    return ET_WAIT_ABORT;
                }
                sleepy = waited > ET_SPIN_NS;
            }
            if (sleepy) et_nanosleep(ET_SLEEP_NS);
        }
    }
    if (!ET_ACQUIRE_POLLS && fence) et_fence_acquire();
    return ET_WAIT_OK;
}
__device__ __forceinline__ int et_wait(const long long* A, int x, int shift, long long count,
                                       long long task, int* nest) {
    return et_wait_seen(A, x, shift, count, task, nest, et_poll(&ET_COUNTER[x]));
}

// Thread 0: wait until element x reached its wait count.
__device__ __forceinline__ bool et_wait_elem(const long long* A, int task, int x) {
    return et_wait(A, x, ET_SHIFT[x], et_wait_count(A, x, ET_TARGET[x]), task, nullptr) ==
           ET_WAIT_OK;
}

__device__ __forceinline__ void et_notify_elem(const long long* A, int x) {
    et_red_release_add(&ET_COUNTER[x], 1ull << ET_SHIFT[x]);
}

// Thread 0: a consumer lost its last pending dependency -> push it.
__device__ __forceinline__ void et_push(const long long* A, int task) {
    unsigned slot = atomicAdd(ET_TAIL, 1u);
    et_st_release_int(&ET_QUEUE[slot], task);
}

// Thread 0: one dependency of task t released; true if it was the last.
__device__ __forceinline__ bool et_release(const long long* A, int t) {
    const int need = ET_PENDING0[t];  // loaded while the atomic travels
    return atomicAdd(&ET_RELEASED[t], 1) + 1 == need;
}

__device__ void et_release_consumers(const long long* A, int x) {
    for (int i = ET_PUSH_PTR[x]; i < ET_PUSH_PTR[x + 1]; ++i) {
        int c = ET_PUSH_TASK[i];
        if (et_release(A, c)) et_push(A, c);
    }
}

// Profiling (ET_PROF set): per task ET_PROF_TASK words: when it was fetched, its waits
// satisfied, its body done (thread 0), the barrier after it passed, the release fence done,
// its notifies issued (global timer, ns), its SM, its body entered (et_stamp_setup); then
// per CTA ET_PROF_CTA words: kernel entry, launch arguments loaded, next launch's state
// reset, exit.
#define ET_PROF_TASK 8
#define ET_PROF_CTA 4
__device__ __forceinline__ void et_stamp(u64* prof, int task, int k) {
    if (prof) prof[ET_PROF_TASK * task + k] = et_globaltimer();
}
// Word 7 of a task: when thread 0 has built its tile views and enters its body (stage
// kernels, whose slot of ET_PROF is 0, stamp nothing).
__device__ __forceinline__ void et_stamp_setup(const long long* A, const EtTask& task) {
    if (threadIdx.x == 0 && task.id >= 0 && ET_PROF)
        ET_PROF[ET_PROF_TASK * task.id + 7] = et_globaltimer();
    asm volatile("" ::: "memory");  // (the body's loads stay after the stamp)
}
__device__ __forceinline__ void et_stamp_cta(const long long* A, int k, u64 t) {
    if (threadIdx.x == 0 && ET_PROF)
        ET_PROF[ET_PROF_TASK * ET_NUM_TASKS + ET_PROF_CTA * blockIdx.x + k] = t;
}

// One task as the CTA sees it: its record and its wait and notify lists (in shared memory
// when staged, else in global memory).
struct EtView {
    EtTask task;
    const int2* waits;
    const int* notifies;
    int num_waits, num_notifies;
};

// Thread 0: the table waits of `v`, then its data-dependent waits and trigger. 1: run the
// body, 2: guarded (its barrier-style notifies are made here), 0: aborting, ET_WAIT_NEST: a
// table wait was interrupted by the dynamic task in *nest (hybrid; wait again after it).
// The first polls of ET_POLL_BATCH (a knob: 8, 16 or 32) table waits go out together
// (satisfied waits cost one round trip between them, not one each); then the waits are
// checked in table order, each spinning until satisfied. With relaxed polls one acquire
// fence follows them all (a fence a wait cost the tasks with many, such as a projection
// waiting on the attention of 64 rows, tens of µs), and one before any runtime wait count
// (static mode; such waits come last), so that the count is read after an acquire that
// covers the waits before it.
#ifndef ET_POLL_BATCH
#define ET_POLL_BATCH 8
#endif
static_assert(ET_POLL_BATCH == 8 || ET_POLL_BATCH == 16 || ET_POLL_BATCH == 32,
              "ET_POLL_BATCH takes 8, 16 or 32 polls in flight");
__device__ int et_wait_task(const long long* A, const EtView& v, int* nest) {
    bool unfenced = false;  // satisfied waits not yet followed by an acquire fence
    for (int i0 = 0; i0 < v.num_waits; i0 += ET_POLL_BATCH) {
        u64 seen[ET_POLL_BATCH];
#pragma unroll
        for (int k = 0; k < ET_POLL_BATCH; ++k)
            if (i0 + k < v.num_waits) seen[k] = et_poll(&ET_COUNTER[v.waits[i0 + k].x &
                                                                    ET_ELEM_MASK]);
#pragma unroll
        for (int k = 0; k < ET_POLL_BATCH; ++k) {
            if (i0 + k >= v.num_waits) break;
            const int2 w = v.waits[i0 + k];
            const int x = w.x & ET_ELEM_MASK;
            if (w.y < 0 && unfenced) {  // a count read from memory: after an acquire
                et_fence_acquire();
                unfenced = false;
            }
            const int r = et_wait_seen(A, x, (w.x & ET_EARLY_BIT) ? 16 : 0,
                                       et_wait_count(A, x, w.y), v.task.id, nest, seen[k],
                                       false);
            if (r != ET_WAIT_OK) return r;
            unfenced = !ET_ACQUIRE_POLLS;
        }
    }
    if (unfenced) et_fence_acquire();
    const int ok = et_extra_waits(A, v.task);
    if (ok == 2)
        for (int i = ET_SKIP_PTR[v.task.id]; i < ET_SKIP_PTR[v.task.id + 1]; ++i)
            et_notify_elem(A, ET_SKIP_ELEM[i]);
    return ok;
}

// Thread 0, after the CTA barrier that follows the body and a release fence (together they
// publish the CTA's stores): the notifies of `v`.
__device__ void et_notify_task(const long long* A, const EtView& v) {
    for (int i = 0; i < v.num_notifies; ++i) {
        const int r = v.notifies[i];
        const int x = r & ET_ELEM_MASK;
        if (r & ET_EARLY_BIT) {            // early push: consumers already released
            et_red_relaxed_add(&ET_COUNTER[x], 1ull << 16);
        } else if (!(r & ET_PUSH_BIT)) {   // nobody to push
            et_red_relaxed_add(&ET_COUNTER[x], 1ull);
        } else {
            et_notify_watched(A, r);
        }
    }
    et_extra_notifies(A, v.task);
}

__device__ EtView et_global_view(const long long* A, int t) {
    EtView v;
    v.task = et_load_task(A, t);
    v.waits = ET_WAIT_REC + v.task.a.y;
    v.num_waits = v.task.a.z - v.task.a.y;
    v.notifies = ET_NOTIFY_REC + v.task.a.w;
    v.num_notifies = v.task.b.x - v.task.a.w;
    return v;
}

// Thread 0, after the release fence that follows the CTA's writes of task `v`: its notifies
// and their profiling stamps.
__device__ __forceinline__ void et_notify_fenced(const long long* A, const EtView& v,
                                                 u64* prof) {
    et_stamp(prof, v.task.id, 4);
    et_notify_task(A, v);
    et_stamp(prof, v.task.id, 5);
    if (prof) prof[ET_PROF_TASK * v.task.id + 6] = blockIdx.x;
}

// Thread 0, once the CTA's writes of task `v` are done: one release fence, then its notifies.
__device__ __forceinline__ void et_publish_task(const long long* A, const EtView& v, u64* prof) {
    if (v.num_notifies) et_fence_release();
    et_notify_fenced(A, v, prof);
}

// Notifies held back (static and unfused modes): while the task a CTA runs next cannot block
// -- it has no waits, or the same table waits as the task before it (satisfied already), and
// no data-dependent ones -- thread 0 defers the notifies of the tasks it ran, up to
// ET_DEFER_MAX tasks; the task after which the next one could block publishes them all
// behind one release fence (a run of wait-free tiles pays one fence, not one per tile).
// Nothing this CTA runs meanwhile waits on a held notify (the run's waits are those of its
// first task), so holding them back cannot deadlock. Not in hybrid and dynamic modes (armed
// runtime counts).
#ifndef ET_DEFER_MAX
#define ET_DEFER_MAX 8
#endif
struct EtRun {  // in shared memory, used by thread 0 alone
    EtView held[ET_DEFER_MAX];
    int n;
};
__device__ __forceinline__ EtRun& et_run() {
    __shared__ EtRun run;
    return run;
}

// Thread 0: publish the held tasks of `run`: one release fence (if any of them notifies),
// then their notifies (and profiling stamps).
__device__ void et_publish_run(const long long* A, EtRun& run, u64* prof) {
    bool any = false;
    for (int i = 0; i < run.n; ++i) any |= run.held[i].num_notifies > 0;
    if (any) et_fence_release();
    for (int i = 0; i < run.n; ++i) et_notify_fenced(A, run.held[i], prof);
    run.n = 0;
}

// A task without a body (kind nop) of a static queue: thread 0 alone waits and notifies; the
// other threads go on to the next task (whose barriers wait for thread 0). After an abort,
// thread 0 goes on too: the CTA's next blocked wait sees the abort flag and ends the loop.
__device__ void et_do_sync_task(const long long* A, const EtView& v, u64 fetch_ns) {
    u64* const prof = ET_PROF;
    const int ok = et_wait_task(A, v, nullptr);
    if (prof) {
        prof[ET_PROF_TASK * v.task.id] = fetch_ns;
        for (int k = 1; k <= 3; ++k) et_stamp(prof, v.task.id, k);  // no body, no barrier
    }
    // (not 1: aborting, or guarded, its notifies made by et_wait_task)
    if (ok == 1) et_publish_task(A, v, prof);
}

// Weight prefetch (stage.cuh), one of three ways:
// - ET_STAGE_BYTES > 0: the stage ring, that many bytes of dynamic shared memory (codegen.py
//   `stage_bytes` gives the most that fits the CTAs of an SM) into which warp 1 copies the
//   input tiles of the static tasks ahead of the one its CTA runs; their bodies read them
//   there;
// - ET_PREFETCH_BYTES > 0: the prefetch window: warps 1 .. keep the input tiles of the tasks
//   after the current one of the static chunk in flight into L2, up to that many bytes
//   beyond the current task (at least one task);
// - neither (the default): warps 1 .. prefetch the next task's tiles into L2 at the start of
//   the current one (unless ET_PREFETCH_NEXT is 0) and, with ET_PREFETCH_OWN set, the
//   current task's own tiles while thread 0 waits on its events. (The next task's prefetches
//   may still be in flight when the current task's release fence waits for the CTA's memory
//   operations; the task's own are done by then: its body read the tiles.)
// The L2 prefetches of the last two are line by line, or bulk with ET_PREFETCH_BULK
// (stage.cuh EtPrefetchL2).
#ifndef ET_STAGE_BYTES
#define ET_STAGE_BYTES 0
#endif
#define ET_STAGE_TILES 4  // input tiles staged per task (et_stage), at most
#ifndef ET_STAGE_SLOTS
#define ET_STAGE_SLOTS 8  // tasks staged in the stage ring and not yet run, at most
#endif
#ifndef ET_PREFETCH_BYTES
#define ET_PREFETCH_BYTES 0
#endif
#ifndef ET_PREFETCH_NEXT
#define ET_PREFETCH_NEXT 1
#endif
#ifndef ET_PREFETCH_OWN
#define ET_PREFETCH_OWN 0
#endif
static_assert(ET_PREFETCH_BYTES == 0 || ET_STAGE_BYTES == 0,
              "the prefetch window and the stage ring exclude each other");
// Threads me, me + step, ...: the input tiles of `task` into L2; returns their bytes.
__device__ int et_prefetch_task(const long long* A, const EtTask& task, int me, int step);
// Warps 1 .. of the CTA (warp 0's thread 0 waits and notifies meanwhile): et_prefetch_task.
__device__ __forceinline__ int et_prefetch_by_warps(const long long* A, const EtTask& task) {
    return et_prefetch_task(A, task, (int)threadIdx.x - 32, (int)blockDim.x - 32);
}
// The tiles of the task holding stage ring slot `slot` (null: a tile left to L2).
__device__ void* const* et_ring_tiles(int slot);
// Every thread: wait until the tiles of ring slot `slot` (phase parity `parity`) landed.
__device__ bool et_ring_wait(const long long* A, int task, int slot, unsigned parity);
// Thread 0 at kernel entry, before the CTA barrier of et_load_args: the ring's mbarriers.
__device__ void et_ring_init();

// Weights before the waits (knob ET_LINEAR_EARLY, bits: 1 the rounds of ET_LINEAR_ASYNC, 2 the
// blocks of ET_LINEAR_MMA_RING): all threads of the CTA run the early part of a static task
// that will wait (generated et_early_task: for a one-row linear its first rounds of weight
// copies, for a tensor-core one its first ring blocks, llm_dense.cuh et_early_linear_partial)
// before thread 0 waits on its events, so that the copies arrive while it waits. Not with a
// device queue (ET_ARMED_COUNTS): a task nested in a blocked wait would take the ring.
#ifndef ET_LINEAR_EARLY
#define ET_LINEAR_EARLY 0
#endif
// Every thread: no early copies pending, none counted (llm_dense.cuh; at kernel entry and
// after a task that ran its early part but not its body).
__device__ __forceinline__ void et_early_drop();
#if ET_LINEAR_EARLY && !defined(ET_ARMED_COUNTS)
#define ET_EARLY_TASKS 1
__device__ void et_early_task(const long long* A, const EtTask& task);
__device__ __forceinline__ bool et_has_early(int g);
__device__ __forceinline__ bool et_early_now();  // (llm_dense.cuh)
#else
#define ET_EARLY_TASKS 0
#endif

// Whether a static task of grid g takes et_do_sync_task (thread 0 alone).
__device__ __forceinline__ bool et_thread0_task(int g) {
#ifdef ET_HYBRID  // (hybrid: a blocked wait may run a dynamic task, which takes the CTA)
    return false;
#else
    return et_sync_only(g);
#endif
}

// Warps 1 .. of the CTA, at the start of static task `task` (followed by `next`), without
// the stage ring or the prefetch window: the input tiles of `task` if it waits on events
// (`waits`; ET_PREFETCH_OWN) and of `next` (ET_PREFETCH_NEXT) into L2, while thread 0 waits.
__device__ __forceinline__ void et_prefetch_tasks(const long long* A, const EtTask& task,
                                                  bool waits, const EtTask& next) {
    if (ET_STAGE_BYTES > 0 || ET_PREFETCH_BYTES > 0 || threadIdx.x < 32) return;
    if (ET_PREFETCH_OWN && waits && et_has_stage(task.a.x)) et_prefetch_by_warps(A, task);
    if (ET_PREFETCH_NEXT && next.id >= 0 && et_has_stage(next.a.x))
        et_prefetch_by_warps(A, next);
}

// Whether `next` (its table waits: `next_waits`, `num_next_waits`), the static task a CTA runs
// after the one of `v`, cannot block: it has no waits, or the same table waits as `v`
// (satisfied once `v` ran: counters only grow during a launch) and no data-dependent ones,
// and both take the whole CTA. Static and unfused modes only (no armed runtime counts).
__device__ __forceinline__ bool et_free_run(const EtView& v, const EtTask& next,
                                            const int2* next_waits, int num_next_waits) {
#ifdef ET_ARMED_COUNTS
    return false;
#else
    if (next.id < 0 || et_thread0_task(v.task.a.x) || et_thread0_task(next.a.x) ||
        et_has_extra_waits(next.a.x))
        return false;
    if (num_next_waits == 0) return true;
    if (num_next_waits != v.num_waits) return false;
    for (int i = 0; i < num_next_waits; ++i)
        if (next_waits[i].x != v.waits[i].x || next_waits[i].y != v.waits[i].y) return false;
    return true;
#endif
}

// Waits, body and notifies of one task by the whole CTA, with two CTA barriers: after the
// waits and after the body (a static task without a body: et_do_sync_task). Meanwhile warps
// 1 .. prefetch input tiles into L2 (et_prefetch_tasks); a task holding stage
// ring slot `slot` (phase parity `parity`; -1: none) waits for its tiles there before the
// first barrier and its body reads them there. With `satisfied` (et_free_run: the task
// before it on the CTA waited on the same events) its table waits are skipped. A static
// task's notifies go to `run` (thread 0's), published now unless `defer`
// (see EtRun). `fetch_ns`: when the task was fetched (profiling). A task of the device queue
// (`DYNAMIC`) is retired after its notifies; in hybrid mode a static task's blocked wait
// runs popped dynamic tasks in between (`et_wait_task`), then waits again. False if the
// launch is aborting.
template <bool DYNAMIC>
__device__ bool et_do_task(const long long* A, const EtView& v, const EtTask& next,
                           u64 fetch_ns, int slot, unsigned parity, bool satisfied,
                           EtRun* run, bool defer) {
    __shared__ int s_ok, s_nest;
    if (!DYNAMIC) et_prefetch_tasks(A, v.task, v.num_waits && !satisfied, next);
    if (!DYNAMIC && et_thread0_task(v.task.a.x)) {
        if (threadIdx.x == 0) et_do_sync_task(A, v, fetch_ns);
        return true;
    }
    const bool waits = (v.num_waits && !satisfied) || et_has_extra_waits(v.task.a.x);
#if ET_EARLY_TASKS
    const bool early = !DYNAMIC && waits && et_has_early(v.task.a.x) && et_early_now();
    if (early) et_early_task(A, v.task);
#endif
    int ok = 1;  // a task without waits or staged tiles needs neither verdict nor barrier
    while (waits || slot >= 0) {
        if (threadIdx.x == 0 && !satisfied) {
#ifdef ET_HYBRID
            s_ok = et_wait_task(A, v, DYNAMIC ? nullptr : &s_nest);
#else
            s_ok = et_wait_task(A, v, nullptr);
#endif
        }
        if (threadIdx.x == 0 && satisfied) s_ok = 1;
        if (slot >= 0 && !et_ring_wait(A, v.task.id, slot, parity) && threadIdx.x == 0)
            s_ok = 0;  // (aborting)
        __syncthreads();
        ok = s_ok;
        if (ok != ET_WAIT_NEST) break;
        if constexpr (!DYNAMIC) {
            const int t = s_nest;
            __syncthreads();  // s_ok and s_nest are read before the nested task rewrites them
            if (!et_do_task<true>(A, et_global_view(A, t), et_no_task(),
                                  ET_PROF ? et_globaltimer() : 0, -1, 0, false, nullptr,
                                  false))
                return false;
        }
    }
    u64* const prof = ET_PROF;  // read once: a task's stamps cost no shared-memory loads
    if (threadIdx.x == 0 && prof) {
        prof[ET_PROF_TASK * v.task.id] = fetch_ns;
        et_stamp(prof, v.task.id, 1);
    }
#if ET_EARLY_TASKS
    if (ok != 1 && early) et_early_drop();  // (the body would have taken them)
#endif
    if (ok == 0) return false;
    if (ok == 1) et_run_task(A, v.task, slot >= 0 ? et_ring_tiles(slot) : nullptr);
    if (threadIdx.x == 0) et_stamp(prof, v.task.id, 2);
    __syncthreads();
    if (threadIdx.x == 0) {
        et_stamp(prof, v.task.id, 3);
        if (!DYNAMIC && (defer || run->n)) {  // a run of held-back tasks
            if (ok == 1) run->held[run->n++] = v;
            if (!defer) et_publish_run(A, *run, prof);
        } else if (ok == 1) {
            et_publish_task(A, v, prof);
        }
        if (DYNAMIC) {
            et_retire(A, v.task);
        } else {
#ifdef ET_ARMED_COUNTS
            if (ok == 1) et_arm_written(A, v.task);
#endif
        }
    }
    return true;
}

// The slot holding the other launch parity's copy of slot i (see ET_NEXT_COUNTER), or -1.
// Compares, not a switch: every thread of the CTA asks for its own slot at once.
__device__ __forceinline__ int et_parity_pair(int i) {
    const int own[5] = {9, 13, 17, 18, 30};
    int pair = -1;
#pragma unroll
    for (int k = 0; k < 5; ++k) {
        if (i == own[k]) pair = 43 + k;
        if (i == 43 + k) pair = own[k];
    }
    return pair;
}

// A plain global load the compiler issues where it stands (not sunk into a branch on a value
// loaded in the same round).
__device__ __forceinline__ long long et_ld_now(const long long* p) {
    long long v;
    asm volatile("ld.global.b64 %0, [%1];" : "=l"(v) : "l"(p));
    return v;
}
__device__ __forceinline__ int4 et_ld_now(const int4* p) {
    int4 v;
    asm volatile("ld.global.v4.b32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}

// Static queue walker. The CTA stages its queue in chunks of ET_CHUNK tasks: task ids and
// records, and with them (one round of loads) the next waits and notifies of its stream, as
// many as the shared buffers hold; a chunk whose waits or notifies go past them reads those
// from global memory. The per-task dispatch then reads only shared memory. The first chunk
// comes staged with the launch arguments (its copy there: the CTA's slab, see et_load_args).
#define ET_CHUNK 32
#define ET_CHUNK_WAITS 256
#define ET_CHUNK_NOTIFIES 256
#define ET_THREADS 256  // threads per CTA (runtime.py THREADS): one per staged word
static_assert(ET_THREADS >= ET_SLOTS && ET_THREADS >= 2 * ET_CHUNK &&
              ET_THREADS >= ET_CHUNK_WAITS && ET_THREADS >= ET_CHUNK_NOTIFIES,
              "the launch arguments and each chunk part are staged one word per thread");
struct EtChunk {
    int4 rec[2 * ET_CHUNK];
    int2 wait[ET_CHUNK_WAITS];
    int notify[ET_CHUNK_NOTIFIES];
    int id[ET_CHUNK];
};
// The slab: an EtChunk image in 64-bit words (runtime.py builds it)
#define ET_SLAB_WORDS ((int)(sizeof(EtChunk) / 8))
static_assert(sizeof(EtChunk) % 16 == 0, "the slab is copied in 16-byte words");

__device__ __forceinline__ EtChunk& et_chunk() {
    __shared__ EtChunk chunk;
    return chunk;
}

// Whether the kernel walks a static queue (all modes but dynamic).
#if defined(ET_ARMED_COUNTS) && !defined(ET_HYBRID)
#define ET_STATIC_QUEUE 0
#else
#define ET_STATIC_QUEUE 1
#endif

// Launch overlap (programmatic dependent launch, opt-in on the host): every CTA lets the next
// launch on the stream start its CTAs at once; those load what does not depend on this launch
// (argument slots, stream bounds, first chunk), then wait for it to end, its writes visible,
// before they read their epoch or touch any state. Without the launch attribute both
// instructions do nothing.
__device__ __forceinline__ void et_allow_next_launch() {
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}
__device__ __forceinline__ void et_wait_previous_launch() {
    asm volatile("griddepcontrol.wait;" ::: "memory");
}

// Kernel entry, all threads, one round of loads: the launch arguments into the shared slots A
// (see ET_SM_ARGS), the slots of the launch's parity copy swapped in, and the CTA's first
// chunk into et_chunk(). The launch arguments are: ET_SLOTS slots, 6 stream bounds per CTA,
// one slab per CTA (ET_SLAB_WORDS), one epoch per CTA. Every load is issued before any value
// is used (the epoch's after et_wait_previous_launch, which without launch overlap returns at
// once). Returns the CTA's epoch.
__device__ __forceinline__ long long et_load_args(long long* A, const long long* args) {
    const long long* slabs = args + ET_SLOTS + 6 * gridDim.x;
    const int i = threadIdx.x, pair = et_parity_pair(i);
    const bool sm_arg = i >= ET_SM_ARGS && i < ET_SM_ARGS + 6;
    const long long* own_at = sm_arg ? args + ET_SLOTS + 6 * blockIdx.x + (i - ET_SM_ARGS)
                                     : args + min(i, ET_SLOTS - 1);
    const long long own = et_ld_now(own_at);
    const long long other = et_ld_now(pair >= 0 ? args + pair : own_at);
    const int4* slab = reinterpret_cast<const int4*>(slabs + ET_SLAB_WORDS * blockIdx.x);
    const int words = ET_STATIC_QUEUE ? (int)sizeof(EtChunk) / 16 : 0;
    const int k0 = i, k1 = i + blockDim.x;
    int4 a = {}, b = {};
    if (k0 < words) a = et_ld_now(slab + k0);
    if (k1 < words) b = et_ld_now(slab + k1);
    et_wait_previous_launch();  // the epoch: written at the end of the previous launch, by
    // a CTA on any SM (a strong load: no line of this SM's L1 can be stale)
    const long long epoch = (long long)et_ld_relaxed(
        reinterpret_cast<const u64*>(slabs + ET_SLAB_WORDS * gridDim.x + blockIdx.x));
    int4* chunk = reinterpret_cast<int4*>(&et_chunk());
    for (int k = k1 + blockDim.x; k < words; k += blockDim.x) chunk[k] = slab[k];
    if (k0 < words) chunk[k0] = a;
    if (k1 < words) chunk[k1] = b;
    if (i < ET_SLOTS) A[i] = (epoch & 1) ? other : own;
    __syncthreads();
    et_load_tensor_table(A);
    return epoch;
}

// All threads, at launch: this CTA's share of the other parity copy back to its initial
// state (stores only, nothing waits on them; the next launch starts after this one ends).
__device__ void et_reset_next(const long long* A) {
    const int step = gridDim.x * blockDim.x, first = blockIdx.x * blockDim.x + threadIdx.x;
    for (int x = first; x < ET_NUM_ELEMENTS; x += step) ET_NEXT_COUNTER[x] = 0;
    if (!ET_N_DYNAMIC) return;  // the rest serves the device queue only
    for (int t = first; t < ET_NUM_TASKS; t += step) ET_NEXT_RELEASED[t] = 0;
    for (int k = first; k < (int)ET_N_DYNAMIC; k += step) ET_NEXT_QUEUE[k] = -1;
    for (int j = first; j <= ET_N_TRIGGERS; j += step) ET_NEXT_DYN_STATE[j] = 0;
    if (first == 0) ET_NEXT_HEAD[0] = ET_NEXT_HEAD[1] = 0;
}

// The prefetch window (ET_PREFETCH_BYTES), warps 1 .., at task k of the chunk `ch` of n
// tasks: task k's tiles leave the window (`ahead`: the bytes prefetched for the tasks after
// the current one; `pf`: the first task not prefetched; bytes[t]: those of task t), then the
// tasks after it enter it while it holds fewer than ET_PREFETCH_BYTES. The same in every
// thread: each one issues its share of every tile's lines.
__device__ __forceinline__ void et_prefetch_window(const long long* A, const EtChunk& ch, int k,
                                                   int n, int& pf, int& ahead, int* bytes) {
    if (pf > k) ahead -= bytes[k];
    else pf = k + 1;
    while (pf < n && ahead < ET_PREFETCH_BYTES) {
        EtTask t;
        t.id = ch.id[pf];
        t.a = ch.rec[2 * pf];
        t.b = ch.rec[2 * pf + 1];
        bytes[pf] = et_has_stage(t.a.x) ? et_prefetch_by_warps(A, t) : 0;
        ahead += bytes[pf++];
    }
}

// The stage ring's copying warp (ring.cuh): its state, the same in each of its lanes: the
// next stream position to consider, the ordinal (among the CTA's staged tasks) of the next
// task to stage and the ring position of the next allocation.
struct EtRingFill {
    int next;
    unsigned q, head;
};
// Warp 1, at the start of the static task whose staged ordinal is `q_run`: stage the tasks
// from f.next on, up to stream position `hi` (the chunk `ch` holds positions p0 .. p0 + n).
__device__ void et_ring_fill(const long long* A, const EtChunk& ch, int p0, int n, int hi,
                             unsigned q_run, EtRingFill& f);
// Warp 1, once the CTA ran its last task or aborts: wait until every copy it issued landed.
__device__ void et_ring_drain(unsigned q_run, const EtRingFill& f);

__device__ bool et_static_loop(const long long* A) {
    EtChunk& ch = et_chunk();
    const int lo = (int)A[ET_SM_ARGS], hi = (int)A[ET_SM_ARGS + 1];
    const int w_end = (int)A[ET_SM_ARGS + 3], n_end = (int)A[ET_SM_ARGS + 5];
    int w0 = (int)A[ET_SM_ARGS + 2], n0 = (int)A[ET_SM_ARGS + 4];
    const bool filler = ET_STAGE_BYTES > 0 && threadIdx.x / 32 == 1;  // the ring's copier
    EtRingFill fill = {lo, 0u, 0u};
    unsigned q_run = 0;  // the staged ordinal of the next staged task the CTA runs
    bool ok = true;
    EtRun& run = et_run();  // thread 0: the tasks whose notifies it holds back
    if (threadIdx.x == 0) run.n = 0;
    for (int p0 = lo; p0 < hi; p0 += ET_CHUNK) {
        const int n = min(ET_CHUNK, hi - p0);
        const int w_have = min(ET_CHUNK_WAITS, w_end - w0);
        const int n_have = min(ET_CHUNK_NOTIFIES, n_end - n0);
        if (p0 != lo) {  // the first chunk came with the launch arguments
            // one word of each part per thread (blockDim.x >= every part's length), all
            // loaded before any is stored: one round of loads
            const int k = threadIdx.x;
            int4 rec = {};
            int2 w = {};
            int id = 0, nt = 0;
            if (k < 2 * n) rec = ET_STREAM_REC[2 * p0 + k];
            if (k < n) id = ET_QUEUE_TASK[p0 + k];
            if (k < w_have) w = ET_STREAM_WAIT[w0 + k];
            if (k < n_have) nt = ET_STREAM_NOTIFY[n0 + k];
            __syncthreads();  // the previous chunk is no longer read
            if (k < 2 * n) ch.rec[k] = rec;
            if (k < n) ch.id[k] = id;
            if (k < w_have) ch.wait[k] = w;
            if (k < n_have) ch.notify[k] = nt;
            __syncthreads();
        }
        const int nw = ch.rec[2 * n - 2].z - w0, nn = ch.rec[2 * n - 1].x - n0;
        const bool wait_staged = nw <= w_have, notify_staged = nn <= n_have;
        const int2* waits = wait_staged ? ch.wait : ET_STREAM_WAIT + w0;
        const int* notifies = notify_staged ? ch.notify : ET_STREAM_NOTIFY + n0;
        int pf = 0, ahead = 0, bytes[ET_PREFETCH_BYTES > 0 ? ET_CHUNK : 1];  // (the window)
        bool satisfied = false;  // the waits of the task up next are (et_free_run)
        for (int k = 0; k < n; ++k) {
            const u64 fetch_ns = ET_PROF ? et_globaltimer() : 0;
            if (ET_PREFETCH_BYTES > 0 && threadIdx.x >= 32)
                et_prefetch_window(A, ch, k, n, pf, ahead, bytes);
            if (filler) et_ring_fill(A, ch, p0, n, hi, q_run, fill);
            EtView v;
            v.task.id = ch.id[k];
            v.task.a = ch.rec[2 * k];
            v.task.b = ch.rec[2 * k + 1];
            v.waits = waits + (v.task.a.y - w0);
            v.num_waits = v.task.a.z - v.task.a.y;
            v.notifies = notifies + (v.task.a.w - n0);
            v.num_notifies = v.task.b.x - v.task.a.w;
            EtTask next = et_no_task();  // (id -1: none in this chunk)
            if (k + 1 < n) {
                next.id = ch.id[k + 1];
                next.a = ch.rec[2 * k + 2];
                next.b = ch.rec[2 * k + 3];
            }
            const bool free_next = et_free_run(v, next, waits + (next.a.y - w0),
                                               next.a.z - next.a.y);
            const bool defer = threadIdx.x == 0 && free_next && run.n + 1 < ET_DEFER_MAX;
            const bool ring = ET_STAGE_BYTES > 0 && et_has_stage(v.task.a.x);
            const int slot = ring ? (int)(q_run % ET_STAGE_SLOTS) : -1;
            ok = et_do_task<false>(A, v, next, fetch_ns, slot, (q_run / ET_STAGE_SLOTS) & 1,
                                   satisfied, &run, defer);
            if (!ok) break;
            q_run += ring;
            satisfied = free_next;
        }
        if (!ok) break;
        w0 += nw;
        n0 += nn;
    }
    if (filler) et_ring_drain(q_run, fill);
    return ok;
}

// Dynamic and hybrid modes, at launch: the ready dynamic tasks are pushed (spread over the
// CTAs), CTA 0 arms the runtime counts read from input tensors.
__device__ void et_dynamic_start(const long long* A) {
    if (threadIdx.x == 0) {
        for (int i = blockIdx.x; i < ET_N_READY; i += gridDim.x) et_push(A, ET_READY[i]);
        if (blockIdx.x == 0) et_arm_inputs(A);
    }
}

// Dynamic queue walker (protocol in dynamic.cuh): pop, run and retire tasks until none is
// left.
__device__ void et_dynamic_loop(const long long* A) {
    __shared__ int s_task;
    while (true) {
        if (threadIdx.x == 0) s_task = et_pop(A);
        __syncthreads();
        const int t = s_task;
        if (t < 0) return;
        if (!et_do_task<true>(A, et_global_view(A, t), et_no_task(),
                              ET_PROF ? et_globaltimer() : 0, -1, 0, false, nullptr, false))
            return;
    }
}

// The kernel body of each mode.
__device__ void et_run_static(const long long* A) { et_static_loop(A); }
__device__ void et_run_dynamic(const long long* A) {
    et_dynamic_start(A);
    et_dynamic_loop(A);
}
// Hybrid: the static queue (blocked waits serve the device queue), then the device queue.
__device__ void et_run_hybrid(const long long* A) {
    et_dynamic_start(A);
    if (et_static_loop(A)) et_dynamic_loop(A);
}

// The kernel of a program: arguments, the next launch's state, the mode's loops, and the
// CTA's epoch advanced (also after an abort: the host resets all state then, see sync()).
#define ET_KERNEL(name, run, ctas_per_sm)                                                    \
    extern "C" __global__ void __launch_bounds__(ET_THREADS, ctas_per_sm)                    \
        name(long long* __restrict__ args) {                                                  \
        __shared__ long long A[ET_SLOTS];                                                     \
        const u64 entry_ns = et_globaltimer();                                                \
        et_allow_next_launch();                                                               \
        et_ring_init();                                                                       \
        et_early_drop();                                                                      \
        const long long epoch = et_load_args(A, args);                                        \
        et_stamp_cta(A, 0, entry_ns);                                                         \
        et_stamp_cta(A, 1, ET_PROF ? et_globaltimer() : 0);                                   \
        et_reset_next(A);                                                                     \
        et_stamp_cta(A, 2, ET_PROF ? et_globaltimer() : 0);                                   \
        run(A);                                                                               \
        et_stamp_cta(A, 3, ET_PROF ? et_globaltimer() : 0);                                   \
        if (threadIdx.x == 0)                                                                 \
            args[ET_SLOTS + (6 + ET_SLAB_WORDS) * gridDim.x + blockIdx.x] = epoch + 1;        \
    }

// The stage-per-kernel baseline (the same tile bodies, one launch per task grid, kernel
// boundaries in place of events): CTA (x, y, z) runs the task of grid `g` at coordinates
// (x, y, z). The argument slots come by value, so no load precedes the body's own.
struct EtLaunchSlots {
    long long v[ET_SLOTS];
};
#define ET_STAGE_KERNEL(name)                                                                 \
    extern "C" __global__ void __launch_bounds__(ET_THREADS)                                  \
        name(const __grid_constant__ EtLaunchSlots args, int g) {                             \
        EtTask task;                                                                          \
        task.id = -1;                                                                         \
        task.a = make_int4(g, 0, 0, 0);                                                       \
        task.b = make_int4(0, blockIdx.x, blockIdx.y, blockIdx.z);                            \
        et_early_drop();                                                                      \
        et_load_tensor_table(args.v);                                                         \
        et_run_task(args.v, task, nullptr);                                                   \
    }
