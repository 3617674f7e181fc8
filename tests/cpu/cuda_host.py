"""Host emulation of the CTA bodies in the device headers: each CUDA thread of a 256-thread
CTA is a host thread, __syncthreads a barrier of all of them and __shfl_xor_sync an exchange
among the 32 lanes of a warp, so a thread that skips a barrier or a shuffle hangs the run (a
timeout fails the test). `run_host` compiles the headers (inline PTX replaced by host code,
PATCHES) with SHIM and a main body, runs it and returns its stdout."""
import re
import shutil
import subprocess

import pytest

from eventtensor.backends.cuda.compiler import INCLUDE

CXX = shutil.which("g++") or shutil.which("c++")
needs_cxx = pytest.mark.skipif(CXX is None, reason="no host C++ compiler")

# headers with their inline PTX statements (bf16 rounding, prefetch, mbarriers, bulk
# asynchronous copies) replaced by host code
PATCHES = {
    "llm_dense.cuh": {
        r'asm volatile\("mma\.sync\.aligned\.m16n8k16[^;]*;[^;]*;': "et_host_mma(d, a, b);",
    },
    "llm_common.cuh": {
        # the rings of cp.async copies (ET_LINEAR_ASYNC, ET_LINEAR_MMA_RING, ET_ATTN_STREAM) in
        # a static buffer; a copy lands when its thread waits for its group (et_host_async_*)
        r'extern __shared__ __align__\(128\) unsigned char et_dynamic_smem\[\];':
            "static unsigned char et_dynamic_smem[3 * 65536] __attribute__((aligned(128)));",
        r'asm volatile\("createpolicy\.fractional\.L2::evict_first\.b64 %0, 1\.0;" '
        r': "=l"\(p\)\);': "p = 1;",
        r'asm volatile\("createpolicy\.fractional\.L2::evict_normal\.b64 %0, 1\.0;" '
        r': "=l"\(p\)\);': "p = 0;",
        r'(?s)asm volatile\("cp\.async\.cg\.shared\.global.*?"memory"\);':
            "et_host_async_copy(dst, src, bytes); (void)policy; ++et_host_async_words;",
        r'asm\("mov\.u32 %0, %%dynamic_smem_size;" : "=r"\(n\)\);':
            "n = ET_HOST_DYNAMIC_SMEM;",
        r'asm volatile\("cp\.async\.commit_group;" ::: "memory"\);': "et_host_async_commit();",
        r'asm volatile\("cp\.async\.wait_group %0;" :: "n"\(N\) : "memory"\);':
            "et_host_async_wait(N);",
    },
    "bodies.cuh": {
        r'asm\("cvt\.rn\.bf16\.f32 %0, %1;" : "=h"\(r\.bits\) : "f"\(v\)\);':
            "r.bits = et_host_bf16(v);",
        r'asm volatile\("prefetch\.global\.\w+ \[%0\];" :: "l"\(t\.p \+ off\)\);':
            "et_host_prefetch(t.p + off);",
        r'asm volatile\("prefetch\.global\.L1 \[%0\];" :: "l"\(p\)\);': "(void)p;",
    },
    "stage.cuh": {
        r'asm volatile\("mbarrier\.init[^;]*;[^;]*;':
            "et_host_mbar(bar)[0] = count; et_host_mbar(bar)[1] = 0;",
        r'asm volatile\("mbarrier\.arrive\.expect_tx[^;]*;[^;]*;':
            "et_host_mbar(bar)[0] -= 1; et_host_mbar(bar)[1] += bytes;",
        r'unsigned done;\s*asm volatile\("\{\\n\\t\.reg \.pred p;[^;]*;[^;]*;[^;]*;':
            "const unsigned done = et_host_mbar(bar)[0] == 0 && et_host_mbar(bar)[1] == 0;",
        r'(?s)asm volatile\("\{\\n\\t\.reg \.b64 policy;.*?"memory"\);':
            "et_host_copy(dst, src, bytes); et_host_mbar(bar)[1] -= bytes;",
    },
}

SHIM = r"""
#include <algorithm>
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __shared__ static
using std::min;
struct alignas(16) float4 { float x, y, z, w; };
struct EtDim3 { unsigned x, y, z; };
static thread_local EtDim3 threadIdx;
static const EtDim3 blockDim = {256, 1, 1};
static std::barrier<>* et_cta;
struct EtWarp { std::barrier<> bar{32}; float v[32]; unsigned a[32][4], b[32][2]; };
static EtWarp* et_warps;
inline void __syncthreads() { et_cta->arrive_and_wait(); }
inline float __shfl_xor_sync(unsigned mask, float v, int o) {
    if (mask != 0xffffffffu) std::abort();
    EtWarp& w = et_warps[threadIdx.x / 32];
    w.v[threadIdx.x % 32] = v;
    w.bar.arrive_and_wait();
    const float r = w.v[(threadIdx.x % 32) ^ o];
    w.bar.arrive_and_wait();
    return r;
}
inline float et_host_bf16_at(unsigned pair, int half) {  // element `half` of a bf16 pair
    const unsigned u = half ? pair & 0xffff0000u : pair << 16;
    float f; std::memcpy(&f, &u, 4);
    return f;
}
// One m16n8k16 bf16 MMA of the warp (PTX fragment layout, see llm_dense.cuh et_mma_bf16):
// the lanes deposit their fragments, each computes its 4 accumulators in float.
inline void et_host_mma(float* d, const unsigned* a, const unsigned* b) {
    EtWarp& w = et_warps[threadIdx.x / 32];
    const int l = threadIdx.x % 32;
    for (int i = 0; i < 4; ++i) w.a[l][i] = a[i];
    for (int i = 0; i < 2; ++i) w.b[l][i] = b[i];
    w.bar.arrive_and_wait();
    float A[16][16], B[16][8];
    for (int L = 0; L < 32; ++L) {
        const int g = L / 4, q = L % 4;
        for (int e = 0; e < 2; ++e) {
            A[g][2 * q + e] = et_host_bf16_at(w.a[L][0], e);
            A[g + 8][2 * q + e] = et_host_bf16_at(w.a[L][1], e);
            A[g][2 * q + 8 + e] = et_host_bf16_at(w.a[L][2], e);
            A[g + 8][2 * q + 8 + e] = et_host_bf16_at(w.a[L][3], e);
            B[2 * q + e][g] = et_host_bf16_at(w.b[L][0], e);
            B[2 * q + 8 + e][g] = et_host_bf16_at(w.b[L][1], e);
        }
    }
    const int g = l / 4, q = l % 4;
    for (int i = 0; i < 4; ++i)
        for (int k = 0; k < 16; ++k) d[i] += A[g + 8 * (i >> 1)][k] * B[k][2 * q + (i & 1)];
    w.bar.arrive_and_wait();
}
static std::atomic<long long> et_host_async_words{0};  // cp.async copies issued
// cp.async as the hardware may do it at the latest: a thread's copies (their source read at
// issue) land only when it waits for their group (cp.async.wait_group N: all but its N newest
// committed groups), so that a body reading a slot before it waited for it reads stale data
struct EtHostCopy {
    void* dst;
    unsigned char data[16];
    int bytes;
};
static thread_local std::vector<std::vector<EtHostCopy>> et_host_groups;  // committed, oldest first
static thread_local std::vector<EtHostCopy> et_host_open;  // issued since the last commit
inline void et_host_async_copy(void* dst, const void* src, int bytes) {
    EtHostCopy c{dst, {}, bytes};
    if (bytes) std::memcpy(c.data, src, 16);
    et_host_open.push_back(c);
}
inline void et_host_async_commit() {
    et_host_groups.push_back(std::move(et_host_open));
    et_host_open.clear();
}
inline void et_host_async_wait(int n) {
    while ((int)et_host_groups.size() > n) {
        for (const EtHostCopy& c : et_host_groups.front())
            if (c.bytes) std::memcpy(c.dst, c.data, 16);
            else std::memset(c.dst, 0, 16);
        et_host_groups.erase(et_host_groups.begin());
    }
}
static std::mutex et_prefetch_mutex;
static std::set<const void*> et_prefetched;
inline void et_host_prefetch(const void* p) {
    std::lock_guard<std::mutex> lock(et_prefetch_mutex);
    et_prefetched.insert(p);
}
typedef unsigned long long u64;
static std::mutex et_copy_mutex;
static std::vector<int> et_copy_sizes;  // bytes of each asynchronous copy, in issue order
inline int* et_host_mbar(u64* bar) { return reinterpret_cast<int*>(bar); }  // arrivals, bytes
inline void et_host_copy(void* dst, const void* src, int bytes) {
    std::memcpy(dst, src, bytes);
    std::lock_guard<std::mutex> lock(et_copy_mutex);
    et_copy_sizes.push_back(bytes);
}
inline unsigned long long __cvta_generic_to_shared(const void* p) { return (size_t)p; }
inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
inline unsigned short et_host_bf16(float v) {
    unsigned u; std::memcpy(&u, &v, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40);
    return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}
@PRELUDE@
#ifndef ET_HOST_DYNAMIC_SMEM  // %dynamic_smem_size: the static buffer's (a prelude may say less)
#define ET_HOST_DYNAMIC_SMEM (3 * 65536)
#endif
#include "eventtensor/bodies.cuh"
@EXTRA_INCLUDES@
template <typename F> void et_run_cta(F body) {
    std::barrier<> cta(256);
    std::unique_ptr<EtWarp[]> warps(new EtWarp[8]);
    et_cta = &cta;
    et_warps = warps.get();
    std::vector<std::thread> threads;
    for (unsigned t = 0; t < 256; ++t)
        threads.emplace_back([&body, t] { threadIdx = {t, 0, 0}; body(); });
    for (auto& th : threads) th.join();
}
inline float et_val(float v) { return v; }
inline float et_val(et_bf16 v) { return et_to_float(v); }
template <typename T> void et_print(int id, const T* p, int n) {
    std::printf("case %d", id);
    for (int i = 0; i < n; ++i) std::printf(" %.9g", et_val(p[i]));
    std::printf("\n");
}
"""

def run_host(tmp, main_body: str, headers: tuple[str, ...] = (), prelude: str = "") -> str:
    """Compile bodies.cuh and then `headers` (other headers of include/eventtensor, included
    after it), each with its PATCHES applied (each exactly once), with SHIM, host code
    `prelude` (before the headers: more stand-ins for device intrinsics) and `main_body`;
    run it."""
    (tmp / "eventtensor").mkdir()
    for h in ("bodies.cuh", *headers):
        src = (INCLUDE / "eventtensor" / h).read_text()
        for pattern, host in PATCHES.get(h, {}).items():
            src, count = re.subn(pattern, host, src)
            assert count == 1, f"{h}: {pattern!r} matched {count} times"
        (tmp / "eventtensor" / h).write_text(src)
    includes = "\n".join(f'#include "eventtensor/{h}"' for h in headers)
    (tmp / "main.cpp").write_text(SHIM.replace("@EXTRA_INCLUDES@", includes)
                                  .replace("@PRELUDE@", prelude) +
                                  "int main() {\n" + main_body + "\n}\n")
    subprocess.run([CXX, "-std=c++20", "-O1", "-pthread", f"-I{tmp}", str(tmp / "main.cpp"),
                    "-o", str(tmp / "main")], check=True, capture_output=True, timeout=300)
    return subprocess.run([str(tmp / "main")], capture_output=True, text=True, timeout=300,
                          check=True).stdout
