// Shared pieces of the decode-step bodies (llm_dense.cuh, llm_attention.cuh): their one
// shared-memory buffer, asynchronous copies to shared memory and warp reductions. Included
// after bodies.cuh.
#pragma once

// Shared memory of the decode bodies: one buffer for all of them (a CTA runs one body at a
// time), ET_LLM_SMEM_BYTES bytes, 16-byte aligned. A body that uses it starts after a CTA
// barrier (its task's waits end in one) and ends with one before it returns when other
// threads may still read what it wrote there.
#ifndef ET_LLM_SMEM_BYTES
#define ET_LLM_SMEM_BYTES 16384
#endif
__device__ __forceinline__ float* et_llm_smem() {
    __shared__ float4 buf[ET_LLM_SMEM_BYTES / 16];
    return reinterpret_cast<float*>(buf);
}

// Dynamic shared memory as 16-byte words: the rings of asynchronous copies of the bodies
// (llm_dense.cuh ET_LINEAR_ASYNC, llm_attention.cuh ET_ATTN_STREAM), one at a time.
__device__ __forceinline__ EtWord16* et_async_ring() {
    extern __shared__ __align__(128) unsigned char et_dynamic_smem[];
    return reinterpret_cast<EtWord16*>(et_dynamic_smem);
}
// The bytes of dynamic shared memory the launch gave each CTA.
__device__ __forceinline__ unsigned et_dynamic_smem_size() {
    unsigned n;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(n));
    return n;
}
// An L2 policy for the copies: evict-first (weights read once) or normal.
template <bool FIRST>
__device__ __forceinline__ unsigned long long et_async_policy() {
    unsigned long long p;
    if constexpr (FIRST)
        asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
    else
        asm volatile("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;" : "=l"(p));
    return p;
}
// One 16-byte word from global src to shared dst, asynchronously; zeros where bytes is 0.
// (dst's shared-window address from __cvta_generic_to_shared, which the compiler folds for an
// address it knows to be in shared memory, rather than a cvta in the statement, for which it
// builds the generic address first.)
__device__ __forceinline__ void et_async_word(EtWord16* dst, const void* src, int bytes,
                                              unsigned long long policy) {
    asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;"
                 :: "r"((unsigned)__cvta_generic_to_shared(dst)), "l"(src), "r"(bytes),
                 "l"(policy) : "memory");
}
__device__ __forceinline__ void et_async_commit() {
    asm volatile("cp.async.commit_group;" ::: "memory");
}
// Wait until at most N of this thread's cp.async groups are pending.
template <int N>
__device__ __forceinline__ void et_async_wait() {
    asm volatile("cp.async.wait_group %0;" :: "n"(N) : "memory");
}

// The smallest lg with 2^lg >= x (x >= 1), at compile time.
__host__ __device__ constexpr int et_lg_ceil(int x) { return x <= 1 ? 0 : 1 + et_lg_ceil((x + 1) / 2); }

// The same at run time.
__device__ __forceinline__ int et_log2_ceil(int x) {
    int lg = 0;
    while ((1 << lg) < x) ++lg;
    return lg;
}

// v summed over the 32 lanes of the warp, for every lane (all 32 lanes call it).
__device__ __forceinline__ float et_warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// The largest v over the 32 lanes of the warp, for every lane (all 32 lanes call it).
__device__ __forceinline__ float et_warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
