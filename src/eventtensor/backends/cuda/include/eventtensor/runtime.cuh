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
// err[4]: wait count, err[5]: SM (CTA), err[6]: kind (1 wait, 2 queue pop)
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

// Thread 0 only: spin until (counter >> shift) >= count. False if aborted (watchdog or
// another CTA's failure).
__device__ bool et_wait(u64* counter, int shift, long long count, long long task, long long elem,
                        long long* err, int* abort_flag, u64 watchdog_ns) {
    u64 start = 0;
    unsigned spins = 0;
    while (true) {
        u64 v = et_ld_acquire(counter);
        if ((long long)(v >> shift) >= count) return true;
        if (++spins < 64) continue;  // short waits: poll without sleeping
        if (*(volatile int*)abort_flag) return false;
        u64 now = et_globaltimer();
        if (start == 0) start = now;
        else if (now - start > watchdog_ns) {
            et_fail(err, abort_flag, task, elem, (long long)(v >> shift), count, 1);
            return false;
        }
        et_nanosleep(64);
    }
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
#define ET_SLOTS 64
#define ET_I32(slot) ((int*)(A[slot]))
#define ET_QUEUE_PTR ET_I32(0)
#define ET_QUEUE_TASK ET_I32(1)
#define ET_TASK_REC ((const int4*)(A[2]))   // per task: 2 x int4, see EtTask
#define ET_WAIT_PTR ET_I32(4)
#define ET_WAIT_REC ((const int2*)(A[5]))  // per wait: {element | early << 30, wait count}
#define ET_NOTIFY_PTR ET_I32(6)
#define ET_NOTIFY_REC ET_I32(7)  // per notify: element | early << 30 | has pushes << 29
#define ET_ELEM_MASK 0x1fffffff
#define ET_EARLY_BIT (1 << 30)
#define ET_PUSH_BIT (1 << 29)
#define ET_TARGET ((const long long*)(A[8]))
#define ET_COUNTER ((u64*)(A[9]))
#define ET_SHIFT ET_I32(10)          // per element: 16 for early-push elements, else 0
#define ET_READY ET_I32(11)
#define ET_N_READY ((int)A[12])
#define ET_PENDING ET_I32(13)
#define ET_PENDING0 ET_I32(14)
#define ET_PUSH_PTR ET_I32(15)
#define ET_PUSH_TASK ET_I32(16)
#define ET_QUEUE ET_I32(17)
#define ET_HEAD ((unsigned*)(A[18]))
#define ET_TAIL ((unsigned*)(A[19]))
#define ET_N_DYNAMIC ((unsigned)A[20])
#define ET_ERR ((long long*)(A[21]))
#define ET_ABORT ET_I32(22)
#define ET_DONE_CTAS ((unsigned*)(A[23]))
#define ET_NUM_ELEMENTS ((int)A[24])
#define ET_WATCHDOG_NS ((u64)A[25])
#define ET_PROF ((u64*)(A[26]))
#define ET_NUM_TASKS ((int)A[27])
#define ET_SKIP_PTR ET_I32(28)
#define ET_SKIP_ELEM ET_I32(29)
#define ET_SYM(i) (A[32 + (i)])

// One task's record, packed on the host: {grid, wait_lo, wait_hi, notify_lo} and
// {notify_hi, coord 0, coord 1, coord 2}: two 16-byte loads, prefetched ahead of use.
struct EtTask {
    int id;
    int4 a, b;
};

__device__ __forceinline__ EtTask et_load_task(const long long* A, int t) {
    EtTask r;
    r.id = t;
    if (t >= 0) { r.a = ET_TASK_REC[2 * t]; r.b = ET_TASK_REC[2 * t + 1]; }
    return r;
}

// Generated per program (codegen.py):
__device__ void et_run_task(const long long* A, const EtTask& task);  // the dispatch switch
// Thread 0, after the table waits: data-dependent waits and the trigger of `task`.
// Returns 1 to run the body, 2 if the task is guarded (no trigger range holds it), 0 on abort.
__device__ int et_extra_waits(const long long* A, const EtTask& task);
// All threads: prefetch the input tiles (affine regions of input tensors) of `task`.
__device__ void et_prefetch(const long long* A, const EtTask& task);
// Thread 0, after the body: data-dependent notifies of `task`.
__device__ void et_extra_notifies(const long long* A, const EtTask& task);
// Wait count of element x whose count is read at run time from a tensor (table value -1).
__device__ long long et_runtime_count(const long long* A, int x);

__device__ __forceinline__ long long et_target(const long long* A, int x) {
    long long c = ET_TARGET[x];
    return c >= 0 ? c : et_runtime_count(A, x);
}

// Thread 0: wait until element x reached its wait count.
__device__ __forceinline__ bool et_wait_elem(const long long* A, int task, int x) {
    return et_wait(&ET_COUNTER[x], ET_SHIFT[x], et_target(A, x), task, x, ET_ERR, ET_ABORT,
                   ET_WATCHDOG_NS);
}

__device__ __forceinline__ void et_notify_elem(const long long* A, int x) {
    et_red_release_add(&ET_COUNTER[x], 1ull << ET_SHIFT[x]);
}

// Thread 0: a consumer lost its last pending dependency -> push it.
__device__ __forceinline__ void et_push(const long long* A, int task) {
    unsigned slot = atomicAdd(ET_TAIL, 1u);
    et_st_release_int(&ET_QUEUE[slot], task);
}

__device__ void et_release_consumers(const long long* A, int x) {
    for (int i = ET_PUSH_PTR[x]; i < ET_PUSH_PTR[x + 1]; ++i) {
        int c = ET_PUSH_TASK[i];
        if (atomicSub(&ET_PENDING[c], 1) == 1) et_push(A, c);
    }
}

// Waits, body and notifies of one task by the whole CTA; `next` (thread 0's value) is the
// task to prefetch while this one runs. Two CTA barriers per task: after the waits and after
// the body. False if the launch is aborting.
__device__ bool et_do_task(const long long* A, EtTask& cur, int next, u64 fetch_ns) {
    __shared__ EtTask s_task, s_next;
    __shared__ int s_ok;
    if (threadIdx.x == 0) {
        int ok = 1;
        for (int i = cur.a.y; i < cur.a.z && ok; ++i) {
            int2 w = ET_WAIT_REC[i];
            int x = w.x & ET_ELEM_MASK;
            ok = et_wait(&ET_COUNTER[x], (w.x & ET_EARLY_BIT) ? 16 : 0,
                         w.y >= 0 ? (long long)w.y : et_runtime_count(A, x), cur.id, x, ET_ERR,
                         ET_ABORT, ET_WATCHDOG_NS);
        }
        if (ok) ok = et_extra_waits(A, cur);
        if (ok == 2) {  // guarded: no body; barrier-style notifies still arrive
            for (int i = ET_SKIP_PTR[cur.id]; i < ET_SKIP_PTR[cur.id + 1]; ++i)
                et_notify_elem(A, ET_SKIP_ELEM[i]);
        }
        s_ok = ok;
        s_task = cur;
        if (ET_PROF) { ET_PROF[4 * cur.id] = fetch_ns; ET_PROF[4 * cur.id + 1] = et_globaltimer(); }
    }
    __syncthreads();
    if (!s_ok) return false;
    if (s_ok == 2) {
        if (threadIdx.x == 0) cur = et_load_task(A, next);
        return true;
    }
    EtTask t = s_task;
    EtTask pre;
    int nrec[4];
    if (threadIdx.x == 0) {  // loads that overlap the body: next task, this task's notifies
        pre = et_load_task(A, next);
        for (int k = 0; k < 4 && t.a.w + k < t.b.x; ++k) nrec[k] = ET_NOTIFY_REC[t.a.w + k];
    }
    et_run_task(A, t);
    if (threadIdx.x == 0) s_next = pre;
    __syncthreads();
    if (threadIdx.x != 0 && s_next.id >= 0) et_prefetch(A, s_next);  // while thread 0 notifies
    if (threadIdx.x == 0) {  // bar.sync above + release below publish the CTA's stores
        for (int i = t.a.w; i < t.b.x; ++i) {
            int r = i - t.a.w < 4 ? nrec[i - t.a.w] : ET_NOTIFY_REC[i];
            int x = r & ET_ELEM_MASK;
            if (r & ET_EARLY_BIT) {            // early push: consumers already released
                et_red_release_add(&ET_COUNTER[x], 1ull << 16);
            } else if (!(r & ET_PUSH_BIT)) {   // nobody to push
                et_red_release_add(&ET_COUNTER[x], 1ull);
            } else {
                u64 old = et_atom_release_add(&ET_COUNTER[x], 1ull);
                if ((long long)old + 1 == et_target(A, x)) et_release_consumers(A, x);
            }
        }
        et_extra_notifies(A, t);
        if (ET_PROF) { ET_PROF[4 * t.id + 2] = et_globaltimer(); ET_PROF[4 * t.id + 3] = blockIdx.x; }
        cur = pre;
    }
    return true;
}

// Thread 0: the next non-guarded queue position from `j` on (guarded slots are < 0).
__device__ __forceinline__ int et_skip_guarded(const long long* A, int j, int hi) {
    while (j < hi && ET_QUEUE_TASK[j] < 0) ++j;
    return j;
}

__device__ void et_static_loop(const long long* A) {
    int hi = ET_QUEUE_PTR[blockIdx.x + 1];
    __shared__ int s_more;
    EtTask cur;
    int i = 0, ahead = -1;  // thread 0: position of the next task, id of the one after
    if (threadIdx.x == 0) {
        i = et_skip_guarded(A, ET_QUEUE_PTR[blockIdx.x], hi);
        cur = et_load_task(A, i < hi ? ET_QUEUE_TASK[i] : -1);
        i = et_skip_guarded(A, i + 1, hi);
        ahead = i < hi ? ET_QUEUE_TASK[i] : -1;
    }
    while (true) {
        int next = -1;
        if (threadIdx.x == 0) {  // queue entries are read one task ahead of their use
            s_more = cur.id >= 0;
            next = ahead;
            i = et_skip_guarded(A, i + 1, hi);
            ahead = i < hi ? ET_QUEUE_TASK[i] : -1;
        }
        __syncthreads();
        if (!s_more) return;
        if (!et_do_task(A, cur, next, ET_PROF ? et_globaltimer() : 0)) return;
    }
}

__device__ void et_dynamic_loop(const long long* A) {
    __shared__ int s_task;
    if (threadIdx.x == 0)
        for (int i = blockIdx.x; i < ET_N_READY; i += gridDim.x) et_push(A, ET_READY[i]);
    while (true) {
        if (threadIdx.x == 0) {
            int task = -1;
            unsigned k = atomicAdd(ET_HEAD, 1u);
            if (k < ET_N_DYNAMIC) {
                u64 start = et_globaltimer();
                unsigned spins = 0;
                while ((task = et_ld_acquire_int(&ET_QUEUE[k])) < 0) {
                    if (++spins < 64) continue;
                    if (*(volatile int*)ET_ABORT) break;
                    if (et_globaltimer() - start > ET_WATCHDOG_NS) {
                        et_fail(ET_ERR, ET_ABORT, -1, k, 0, 0, 2);
                        break;
                    }
                    et_nanosleep(64);
                }
                if (task >= 0) {  // dispatch: count it on early-push elements it notifies
                    EtTask r = et_load_task(A, task);
                    for (int i = r.a.w; i < r.b.x; ++i) {
                        int r = ET_NOTIFY_REC[i];
                        if (!(r & ET_EARLY_BIT)) continue;
                        int x = r & ET_ELEM_MASK;
                        u64 old = atomicAdd(&ET_COUNTER[x], 1ull);
                        if ((long long)(old & 0xFFFFull) + 1 == ET_TARGET[x])
                            et_release_consumers(A, x);
                    }
                }
            }
            s_task = task;
        }
        __syncthreads();
        int t = s_task;
        if (t < 0) return;
        EtTask cur;
        if (threadIdx.x == 0) cur = et_load_task(A, t);
        if (!et_do_task(A, cur, -1, ET_PROF ? et_globaltimer() : 0)) return;
    }
}

// The last CTA to finish re-initialises counters, dependency counts and the queue, so the
// next launch needs no host memset.
__device__ void et_finish(const long long* A) {
    __shared__ int s_last;
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        s_last = atomicAdd(ET_DONE_CTAS, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!s_last || *(volatile int*)ET_ABORT) return;
    __threadfence();
    for (int x = threadIdx.x; x < ET_NUM_ELEMENTS; x += blockDim.x) ET_COUNTER[x] = 0;
    for (int t = threadIdx.x; t < ET_NUM_TASKS; t += blockDim.x) ET_PENDING[t] = ET_PENDING0[t];
    for (unsigned k = threadIdx.x; k < ET_N_DYNAMIC; k += blockDim.x) ET_QUEUE[k] = -1;
    __syncthreads();
    if (threadIdx.x == 0) { *ET_HEAD = 0; *ET_TAIL = 0; *ET_DONE_CTAS = 0; __threadfence(); }
}
