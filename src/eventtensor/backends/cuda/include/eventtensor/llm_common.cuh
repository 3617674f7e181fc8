// Shared pieces of the decode-step bodies (llm_dense.cuh, llm_attention.cuh): their one
// shared-memory buffer and warp reductions. Included after bodies.cuh.
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
