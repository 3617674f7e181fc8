"""How fast one multiprocessor streams weights from memory, by load path and by how many
multiprocessors stream at once: the rate that bounds a decode task which reads its tile
alone (at B = 1 most phases of a step keep only part of the GPU streaming).

    PYTHONPATH=src python3 benchmarks/sm_stream_bench.py --out DIR

Each CTA (256 threads, one per SM) reads its own contiguous MB_PER_CTA of random words:
- `ldg U`: rounds of U 16-byte loads a thread, all issued before any is used (U = 16 is the
  decode linear's round of 64 KB a CTA), the next round after the last word arrived;
- `ldg2 U`: the same with the next round issued before the current one is used (2 * U
  words a thread in flight);
- `bulk C x N`: one thread keeps N bulk copies (`cp.async.bulk`, the tensor memory
  accelerator) of C bytes in flight into a ring of N slots of shared memory; the CTA reads
  each slot, then refills it.
Each launch reads the next region of a --buffer-mb buffer (round robin), so that none of
its words are in L2. Times are CUDA-event medians over --iters launches after warm-up.
Writes sm_stream.json and sm_stream.md.
"""
from __future__ import annotations

import argparse
import ctypes
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

SOURCE = r"""
typedef unsigned long long u64;
__device__ __forceinline__ uint4 ld_stream(const uint4* p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}
__device__ __forceinline__ unsigned fold(uint4 v) { return v.x ^ v.y ^ v.z ^ v.w; }

template <int U>
__device__ void ldg_rounds(const uint4* p, long long words, unsigned* sink) {
    unsigned acc = 0;
    for (long long base = threadIdx.x; base < words; base += 256 * U) {
        uint4 v[U];
#pragma unroll
        for (int u = 0; u < U; ++u) v[u] = ld_stream(p + base + 256 * u);
#pragma unroll
        for (int u = 0; u < U; ++u) acc += fold(v[u]);
    }
    if (acc == 0x9e3779b9u) sink[0] = acc;  // keeps the loads
}

template <int U>
__device__ void ldg_pipelined(const uint4* p, long long words, unsigned* sink) {
    unsigned acc = 0;
    uint4 cur[U], nxt[U];
    long long base = threadIdx.x;
#pragma unroll
    for (int u = 0; u < U; ++u) cur[u] = ld_stream(p + base + 256 * u);
    for (; base < words; base += 256 * U) {
        const bool more = base + 256 * U < words;
#pragma unroll
        for (int u = 0; u < U; ++u) nxt[u] = more ? ld_stream(p + base + 256 * (U + u)) : cur[u];
#pragma unroll
        for (int u = 0; u < U; ++u) acc += fold(cur[u]);
#pragma unroll
        for (int u = 0; u < U; ++u) cur[u] = nxt[u];
    }
    if (acc == 0x9e3779b9u) sink[0] = acc;
}

#define LDG(U)                                                                            \
    extern "C" __global__ void __launch_bounds__(256, 1)                                  \
        ldg_##U(const uint4* src, long long words, unsigned* sink) {                      \
        ldg_rounds<U>(src + words * blockIdx.x, words, sink);                             \
    }                                                                                     \
    extern "C" __global__ void __launch_bounds__(256, 1)                                  \
        ldg2_##U(const uint4* src, long long words, unsigned* sink) {                     \
        ldg_pipelined<U>(src + words * blockIdx.x, words, sink);                          \
    }
LDG(4)
LDG(8)
LDG(16)
LDG(32)

__device__ __forceinline__ unsigned smem(const void* p) {
    return (unsigned)__cvta_generic_to_shared(p);
}
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, unsigned bytes, u64* bar) {
    asm volatile("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;"
                 :: "r"(smem(bar)), "r"(bytes) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes "
                 "[%0], [%1], %2, [%3];"
                 :: "r"(smem(dst)), "l"(src), "r"(bytes), "r"(smem(bar)) : "memory");
}
__device__ __forceinline__ void wait_phase(u64* bar, unsigned parity) {
    unsigned done = 0;
    while (!done)
        asm volatile("{\n\t.reg .pred p;\n\t"
                     "mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 p, [%1], %2;\n\t"
                     "selp.u32 %0, 1, 0, p;\n\t}"
                     : "=r"(done) : "r"(smem(bar)), "r"(parity) : "memory");
}

// chunk bytes a copy (a multiple of 4096), slots copies in flight (at most 32)
extern "C" __global__ void __launch_bounds__(256, 1)
    bulk(const uint4* src, long long words, int chunk, int slots, unsigned* sink) {
    extern __shared__ __align__(128) uint4 ring[];
    __shared__ u64 bars[32];
    const char* p = reinterpret_cast<const char*>(src + words * blockIdx.x);
    const long long n = words * 16 / chunk;
    if (threadIdx.x == 0) {
        for (int s = 0; s < slots; ++s)
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(smem(&bars[s])));
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        for (int s = 0; s < slots && s < n; ++s)
            bulk_copy(reinterpret_cast<char*>(ring) + (long long)s * chunk,
                      p + (long long)s * chunk, chunk, &bars[s]);
    }
    __syncthreads();
    unsigned acc = 0;
    const int per = chunk / 16;
    for (long long i = 0; i < n; ++i) {
        const int s = (int)(i % slots);
        wait_phase(&bars[s], (unsigned)((i / slots) & 1));
        const uint4* slot = ring + (long long)s * per;
        for (int w = threadIdx.x; w < per; w += 256) acc += fold(slot[w]);
        __syncthreads();  // every thread read the slot: refill it
        if (threadIdx.x == 0 && i + slots < n)
            bulk_copy(reinterpret_cast<char*>(ring) + (long long)s * chunk,
                      p + (i + slots) * chunk, chunk, &bars[s]);
    }
    if (acc == 0x9e3779b9u) sink[0] = acc;
}
"""


class _Launches:
    """Launches of `func` on `ctas` CTAs of 256 threads on torch's current stream, each on
    the next region of ctas * words words of `src` (round robin), so that a launch never
    finds the words of the launches just before it in L2. The arguments of every region are
    built here, so that a call does nothing but launch."""

    def __init__(self, func, ctas: int, smem: int, src, words: int, extra: tuple, sink):
        import torch
        from cuda.bindings import driver

        from eventtensor.backends.cuda.runtime import _check
        regions = max(1, src.numel() * 4 // 16 // (ctas * words))
        types = (ctypes.c_void_p, ctypes.c_longlong, *[ctypes.c_int] * len(extra),
                 ctypes.c_void_p)
        self.params = [((src.data_ptr() + r * ctas * words * 16, words, *extra,
                         sink.data_ptr()), types) for r in range(regions)]
        self.stream = torch.cuda.current_stream().cuda_stream
        self.func, self.ctas, self.smem, self.n = func, ctas, smem, 0
        self.launch, self.check = driver.cuLaunchKernel, _check

    def __call__(self) -> None:
        params = self.params[self.n % len(self.params)]
        self.n += 1
        self.check(self.launch(self.func, self.ctas, 1, 1, 256, 1, 1, self.smem, self.stream,
                               params, 0), "cuLaunchKernel")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ctas", default="1,4,16,32,64,96,132")
    ap.add_argument("--mb-per-cta", type=float, default=4.0)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--buffer-mb", type=int, default=2048,
                    help="random words read round robin (far more than the 50 MB of L2)")
    ap.add_argument("--out", default="benchmarks/results")
    args = ap.parse_args(argv)
    import torch
    from cuda.bindings import driver
    from decode_bench import run_meta, time_ms, write_run

    from eventtensor.backends.cuda.compiler import compile_source
    from eventtensor.backends.cuda.runtime import load_kernel

    words = int(args.mb_per_cta * 2**20) // 16 // 65536 * 65536  # whole rounds and chunks
    ctas = [int(c) for c in args.ctas.split(",")]
    elems = max(max(ctas) * words * 4, args.buffer_mb << 18)  # (int32 elements)
    src = torch.randint(-2**31, 2**31 - 1, (elems,), dtype=torch.int32, device="cuda")
    sink = torch.zeros(4, dtype=torch.int32, device="cuda")
    configs = [(f"ldg {u}", f"ldg_{u}", ()) for u in (4, 8, 16, 32)]
    configs += [(f"ldg2 {u}", f"ldg2_{u}", ()) for u in (8, 16)]
    configs += [(f"bulk {c // 1024} KB x {n}", "bulk", (c, n))
                for c, n in ((16384, 4), (16384, 8), (32768, 4), (32768, 6), (16384, 12))]
    cubin = compile_source(SOURCE, "sm_stream").cubin
    rows = []
    for label, name, extra in configs:
        func = load_kernel(cubin, name)
        smem = extra[0] * extra[1] if extra else 0
        if smem > 48 * 1024:
            attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            driver.cuFuncSetAttribute(func, attr, smem)
        for n in ctas:
            ms = time_ms(_Launches(func, n, smem, src, words, extra, sink), args.iters,
                         warmup=3)
            per_sm = words * 16 / (ms * 1e-3) / 1e9
            rows.append({"path": label, "ctas": n, "ms": ms, "gb_s_per_sm": per_sm,
                         "tb_s": per_sm * n / 1e3})
            print(f"[sm_stream] {label:16s} {n:4d} CTAs {ms:8.3f} ms {per_sm:7.1f} GB/s a "
                  f"CTA {per_sm * n / 1e3:6.2f} TB/s", file=sys.stderr, flush=True)
    meta = run_meta("sm_stream_bench.py", argv, mb_per_cta=words * 16 / 2**20)
    paths = list(dict.fromkeys(r["path"] for r in rows))
    lines = ["# Streaming rate of one CTA by load path and CTAs streaming at once", "",
             f"{meta['date']}, commit {meta['commit']}, {meta['gpu']}. Command: "
             f"`{meta['command']}`", "",
             f"GB/s per CTA (one per SM), {meta['mb_per_cta']:.0f} MB each; in brackets the "
             "total TB/s.", "",
             "| path | " + " | ".join(f"{n} CTAs" for n in ctas) + " |",
             "|---|" + "---:|" * len(ctas)]
    for p in paths:
        cells = [next(r for r in rows if r["path"] == p and r["ctas"] == n) for n in ctas]
        lines.append(f"| `{p}` | " + " | ".join(f"{c['gb_s_per_sm']:.0f} ({c['tb_s']:.2f})"
                                                for c in cells) + " |")
    write_run(args.out, "sm_stream", meta, rows, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
