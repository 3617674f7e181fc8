"""The attention-side decode bodies of llm_attention.cuh (decode_plan, qk_norm_rope, kv_append,
decode_attention, attn_merge) against numpy references of the kinds in eventtensor.ops.llm,
compiled for the host (cuda_host.py: a host thread per CUDA thread) as one program of all the
cases; and the header compiled for sm_90a by nvcc where it is installed. Tiles are regions of
larger tensors laid out as in models/decode.py (a KV cache tile is the rank-4 view
[1, 1, T', D] that the rank-5 cache's folded leading index leaves). Cache rows at and past a
request's position hold NaN: an output that read one would be NaN."""
import os
import shutil
import subprocess

import numpy as np
import pytest
from cuda_host import needs_cxx, run_host

from eventtensor.backends.cuda.compiler import INCLUDE
from eventtensor.dtypes import round_to_dtype

F, B = "float32", "bfloat16"
HEADERS = ("llm_common.cuh", "llm_attention.cuh")
# host stand-ins of the device intrinsics the header uses beyond cuda_host.SHIM
PRELUDE = """
inline float rsqrtf(float x) { return 1.f / std::sqrt(x); }
inline float __fmul_rn(float a, float b) { return a * b; }
"""
SENTINEL = 1000.0  # out tensor elements outside the tile keep it
CTYPE = {F: "float", B: "et_bf16", "int32": "int"}


def c_values(dtype, values) -> str:
    """C initialisers of `values` as `dtype` (bf16 as raw bits; floats with 9 digits, exact)."""
    a = np.asarray(values).reshape(-1)
    if dtype == B:
        return ", ".join(f"{{{b}}}" for b in (a.astype(np.float32).view(np.uint32) >> 16))
    if dtype == "int32":
        return ", ".join(str(int(v)) for v in a)
    text = np.char.mod("%.9g", a.astype(np.float32))
    text = np.where(np.isnan(a), "NAN", np.where(np.isinf(a), np.where(a < 0, "-INFINITY",
                                                                        "INFINITY"), text))
    return ", ".join(text.tolist())


class Program:
    """C++ statements of all the cases, and what each printed result should be."""

    def __init__(self):
        self.lines: list[str] = []
        self.cases: list[tuple[str, np.ndarray, bool]] = []  # (label, expected, exact)
        self.names = 0

    def fresh(self, prefix: str) -> str:
        self.names += 1
        return f"{prefix}{self.names}"

    def tensor(self, dtype: str, data) -> str:
        name = self.fresh("T")
        self.lines.append(f"alignas(16) static {CTYPE[dtype]} {name}[] = "
                          f"{{{c_values(dtype, data)}, {{0}}}};")
        return name

    def tile(self, tensor: str, dtype: str, shape, lo, n, idx=None) -> str:
        """Tile of `tensor` (shape `shape`) from `lo` of extents `n`; idx {dim: positions}."""
        t, r, idx = self.fresh("t"), len(shape), idx or {}
        for d, pos in idx.items():
            self.lines.append(f"static const int {t}_x{d}[] = {{{', '.join(map(str, pos))}}};")
        ix = ", ".join(f"{t}_x{d}" if d in idx else "nullptr" for d in range(r))
        self.lines += [f"const long long {t}_s[] = {{{', '.join(map(str, shape))}}};",
                       f"const long long {t}_l[] = {{{', '.join(map(str, lo))}}};",
                       f"const long long {t}_n[] = {{{', '.join(map(str, n))}}};",
                       f"const int* const {t}_i[] = {{{ix}}};",
                       f"const EtTileT<{CTYPE[dtype]}> {t} = et_tile({tensor}, {r}, {t}_s, "
                       f"{t}_l, {t}_n, {t}_i);"]
        return t

    def absent(self, dtype: str) -> str:
        t = self.fresh("t")
        self.lines.append(f"const EtTileT<{CTYPE[dtype]}> {t} = {{}};")
        return t

    def run(self, call: str) -> None:
        self.lines.append(f"et_run_cta([&] {{ {call}; }});")

    def check(self, label: str, tensor: str, expected, exact: bool = False) -> None:
        """Print `tensor` (as many elements as `expected` has) and expect `expected`."""
        expected = np.asarray(expected, np.float32).reshape(-1)
        self.lines.append(f"et_print({len(self.cases)}, {tensor}, {expected.size});")
        self.cases.append((label, expected, exact))


def out_tensor(prog: Program, dtype: str, shape) -> tuple[str, np.ndarray]:
    data = np.full(shape, SENTINEL, np.float32)
    return prog.tensor(dtype, data), data


# ------------------------------------------------------------------ references (float64)

def ref_plan(pos, chunk, chunks, kv_heads):
    n = np.clip(np.maximum(pos, 0) // chunk + 1, 1, chunks)
    first = np.arange(len(pos)) * chunks * kv_heads
    return np.stack([first, first + kv_heads * n, n], axis=1)


def ref_rope(x, pos, inv_freq, w, eps):
    """x [n, heads, D]: optional RMSNorm (weight w) then rotate-half RoPE (ops.llm)."""
    if w is not None:
        x = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w
    ang = pos.astype(np.float64)[:, None] * inv_freq.astype(np.float64)[None, :]
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    h = x.shape[-1] // 2
    a, b = x[..., :h], x[..., h:]
    return np.concatenate([a * cos - b * sin, b * cos + a * sin], axis=-1)


def ref_attention(q, keys, values):
    """q [G, D] over keys, values [n, D]: (out [G, D], lse [G]) as ops.llm decode_attention."""
    if len(keys) == 0:
        return np.zeros_like(q), np.full(len(q), -np.inf)
    s = q @ keys.T / np.sqrt(q.shape[-1])
    m = s.max(axis=-1, keepdims=True)
    e = np.exp(s - m)
    z = e.sum(axis=-1, keepdims=True)
    return (e @ values) / z, (m + np.log(z))[:, 0]


def ref_merge(parts, lse):
    """parts [G, m, D], lse [G, m] -> [G*D]; heads with no finite lse give zeros."""
    top = lse.max(axis=-1, keepdims=True)
    w = np.where(np.isfinite(lse), np.exp(lse - np.where(np.isfinite(top), top, 0)), 0.0)
    z = w.sum(axis=1, keepdims=True)
    return ((w[:, :, None] * parts).sum(axis=1) / np.where(z > 0, z, 1)).reshape(-1)


def inv_freq(D, theta=1e6):
    return (1.0 / theta ** (np.arange(0, D, 2, dtype=np.float64) / D)).astype(np.float32)


# ------------------------------------------------------------------ cases

def plan_case(prog, rng, pos, chunk, context, kv_heads):
    chunks = -(-context // chunk)
    pos = np.asarray(pos, np.int32)
    Bn = len(pos)
    tp = prog.tile(prog.tensor("int32", pos), "int32", (Bn,), (0,), (Bn,))
    out = prog.tensor("int32", np.full(Bn * 3, -7))
    to = prog.tile(out, "int32", (Bn, 3), (0, 0), (Bn, 3))
    prog.run(f"et_body_decode_plan({tp}, {to}, {chunk}, {chunks}, {kv_heads}, {context})")
    prog.check(f"plan B={Bn}", out, ref_plan(pos.astype(np.int64), chunk, chunks, kv_heads),
               exact=True)


def rope_case(prog, rng, S, n, G, D, norm, pos, K=2, h=1, r0=2):
    """qk_norm_rope of KV head h of rows r0 .. r0 + n - 1 of [S, rows, K*G*D] partials."""
    rows, GD = r0 + n + 1, G * D
    q = rng.standard_normal((S, rows, K * GD)).astype(np.float32)
    k = rng.standard_normal((S, rows, K * D)).astype(np.float32)
    v = rng.standard_normal((S, rows, K * D)).astype(np.float32)
    positions = np.zeros(rows, np.int32)
    positions[r0:r0 + n] = pos
    freq = inv_freq(D)
    args = [prog.tile(prog.tensor(F, q), F, q.shape, (0, r0, h * GD), (S, n, GD)),
            prog.tile(prog.tensor(F, k), F, k.shape, (0, r0, h * D), (S, n, D)),
            prog.tile(prog.tensor(F, v), F, v.shape, (0, r0, h * D), (S, n, D)),
            prog.tile(prog.tensor("int32", positions), "int32", (rows,), (r0,), (n,)),
            prog.tile(prog.tensor(F, freq), F, (D // 2,), (0,), (D // 2,))]
    wq = wk = None
    for _ in "qk":
        if norm is None:
            args.append(prog.absent(F))
            continue
        w = round_to_dtype(norm, 1 + 0.2 * rng.standard_normal(D).astype(np.float32))
        args.append(prog.tile(prog.tensor(norm, w), norm, (D,), (0,), (D,)))
        wq, wk = (w, None) if wq is None else (wq, w)
    outs = []
    for width in (K * GD, K * D, K * D):
        name, data = out_tensor(prog, F, (rows, width))
        c = width // K
        args.append(prog.tile(name, F, (rows, width), (r0, h * c), (n, c)))
        outs.append((name, data, c))
    prog.run(f"et_body_qk_norm_rope({', '.join(args)}, {D}, 1e-6f)")
    qs, ks, vs = (a.astype(np.float64).sum(axis=0)[r0:r0 + n] for a in (q, k, v))
    p = np.asarray(pos)
    want = [ref_rope(qs[:, h * GD:(h + 1) * GD].reshape(n, G, D), p, freq, wq, 1e-6),
            ref_rope(ks[:, h * D:(h + 1) * D].reshape(n, 1, D), p, freq, wk, 1e-6),
            vs[:, h * D:(h + 1) * D]]
    label = f"rope S={S} n={n} G={G} D={D} norm={norm}"
    for (name, data, c), w, what in zip(outs, want, "qkv"):
        data[r0:r0 + n, h * c:(h + 1) * c] = w.reshape(n, c)
        prog.check(f"{label} {what}", name, data)


def append_case(prog, rng, cache_dtype, D, slot=1, h=1, position=5, b=1):
    K, C, slots, Bn = 2, 8, 3, 3
    k = rng.standard_normal((Bn, K * D)).astype(np.float32)
    v = rng.standard_normal((Bn, K * D)).astype(np.float32)
    caches = []
    for _ in "kv":
        data = np.full((slots, K, C, D), SENTINEL, np.float32)
        caches.append((prog.tensor(cache_dtype, data), data))
    ins = [prog.tile(prog.tensor(F, a), F, a.shape, (b, h * D), (1, D)) for a in (k, v)]
    cts = [prog.tile(name, cache_dtype, (slots, K, C, D), (slot, h, position, 0), (1, 1, 1, D))
           for name, _ in caches]
    prog.run(f"et_body_kv_append({', '.join(ins + cts)})")
    for (name, data), src, what in zip(caches, (k, v), "kv"):
        data[slot, h, position] = round_to_dtype(cache_dtype, src[b, h * D:(h + 1) * D])
        prog.check(f"kv_append {cache_dtype} {what}", name, data, exact=True)


class Attn:
    """One token's tensors of one layer as models/decode.py lays them out: caches
    [slots, K, C, D] (slot `slot`; rows at and past the first new position NaN), q
    [1, K*G*D], the `new` new keys and values of its request [new, K*D] (positions
    pos - new + 1 .. pos), chunk outputs [1, K*G, NC, D] and [1, K*G, NC]."""

    def __init__(self, prog, rng, cache_dtype, G, D, C, T, pos, K=2, h=1, slot=0, slots=1,
                 new=1, flat=False):
        self.prog, self.dt, self.G, self.D, self.C, self.T, self.pos = prog, cache_dtype, G, D, \
            C, T, pos
        self.K, self.h, self.slot, self.slots, self.NC = K, h, slot, slots, -(-C // T)
        self.new, self.p0 = new, pos - new + 1
        shape = (slots, K, C, D)
        self.kc, self.vc = (round_to_dtype(cache_dtype, rng.standard_normal(shape)
                                           .astype(np.float32)) for _ in "kv")
        for c in (self.kc, self.vc):
            c[slot, :, self.p0:] = np.nan
        self.q = rng.standard_normal((1, K * G * D)).astype(np.float32)
        self.kn, self.vn = (rng.standard_normal((new, K * D)).astype(np.float32) for _ in "kv")
        self.names = {n: prog.tensor(cache_dtype if n in ("kc", "vc") else F, getattr(self, n))
                      for n in ("kc", "vc", "q", "kn", "vn")}
        self.pos_t = prog.tile(prog.tensor("int32", [pos]), "int32", (1,), (0,), (1,))
        H, self.flat = K * G, flat  # flat: out [1, H*D], the one chunk's output (NC = 1)
        assert not flat or self.NC == 1
        self.out, self.out_data = out_tensor(prog, F, (1, H * D) if flat else (1, H, self.NC, D))
        self.lse, self.lse_data = out_tensor(prog, F, (1, H, self.NC))

    def head(self, a, width, row=0):
        return a[row, self.h * width:(self.h + 1) * width].astype(np.float64)

    def keys(self, lo, hi):
        """Keys and values [n, D] of positions lo .. hi - 1 (the cache below p0, then the new
        rows)."""
        h, p0, D = self.h, self.p0, self.D
        cached = slice(lo, max(lo, min(hi, p0)))
        fresh = range(max(lo, p0) - p0, max(0, min(hi, self.pos + 1) - p0))
        k = [self.kc[self.slot, h, cached]] + [self.head(self.kn, D, r)[None] for r in fresh]
        v = [self.vc[self.slot, h, cached]] + [self.head(self.vn, D, r)[None] for r in fresh]
        return np.concatenate(k).astype(np.float64), np.concatenate(v).astype(np.float64)

    def chunk(self, c, idx=False):
        """Run the attention tile of chunk c; returns the expected (out [G, D], lse [G])."""
        prog, G, D, T, h = self.prog, self.G, self.D, self.T, self.h
        start, rows = c * T, min(T, self.C - c * T)
        shape = (self.slots, self.K, self.C, D)
        caches = [prog.tile(self.names[n], self.dt, shape, (self.slot, h, 0 if idx else start, 0),
                            (1, 1, rows, D), {2: list(range(start, start + rows))} if idx else None)
                  for n in ("kc", "vc")]
        q = prog.tile(self.names["q"], F, self.q.shape, (0, h * G * D), (1, G * D))
        kn, vn = (prog.tile(self.names[n], F, (self.new, self.K * D), (0, h * D),
                            (self.new, D)) for n in ("kn", "vn"))
        H = self.K * G
        out = prog.tile(self.out, F, (1, H * D), (0, G * D * h), (1, G * D)) if self.flat \
            else prog.tile(self.out, F, (1, H, self.NC, D), (0, G * h, c, 0), (1, G, 1, D))
        lse = prog.tile(self.lse, F, (1, H, self.NC), (0, G * h, c), (1, G, 1))
        t = c * self.K + h
        prog.run(f"et_body_decode_attention({q}, {caches[0]}, {caches[1]}, {kn}, {vn}, "
                 f"{self.pos_t}, {out}, {lse}, {T}, {self.NC}, {self.K}, {t})")
        keys, values = self.keys(start, start + rows)
        o, lse_ = ref_attention(self.head(self.q, G * D).reshape(G, D), keys, values)
        if self.flat:
            self.out_data[0, G * D * h:G * D * (h + 1)] = o.reshape(-1)
        else:
            self.out_data[0, G * h:G * (h + 1), c] = o
        self.lse_data[0, G * h:G * (h + 1), c] = lse_
        return o, lse_

    def check(self, label):
        self.prog.check(f"{label} out", self.out, self.out_data)
        self.prog.check(f"{label} lse", self.lse, self.lse_data)


def attention_case(prog, rng, cache_dtype, G, D, C, T, pos, chunks, idx=False, **layout):
    a = Attn(prog, rng, cache_dtype, G, D, C, T, pos, **layout)
    for c in chunks:
        a.chunk(c, idx)
    a.check(f"attention {cache_dtype} G={G} D={D} C={C} T={T} p={pos} chunks={chunks}"
            f"{' idx' if idx else ''}{' new=' + str(layout['new']) if 'new' in layout else ''}"
            f"{' flat' if layout.get('flat') else ''}")


def merge_case(prog, rng, G, D, m, dead=(), K=2, h=1, NC=None):
    """attn_merge of KV head h's G heads over chunks 0 .. m - 1 of NC; chunks in `dead` have
    lse = -inf (zero parts), and head 0 of a G > 1 case has all its chunks dead."""
    NC, H = NC or m + 1, K * G
    parts = rng.standard_normal((1, H, NC, D)).astype(np.float32)
    lse = (3 * rng.standard_normal((1, H, NC))).astype(np.float32)
    for c in dead:
        lse[0, G * h:G * (h + 1), c] = -np.inf
        parts[0, G * h:G * (h + 1), c] = 0
    if dead and G > 1:
        lse[0, G * h] = -np.inf
        parts[0, G * h] = 0
    tp = prog.tile(prog.tensor(F, parts), F, parts.shape, (0, G * h, 0, 0), (1, G, m, D))
    tl = prog.tile(prog.tensor(F, lse), F, lse.shape, (0, G * h, 0), (1, G, m))
    out, data = out_tensor(prog, F, (1, H * D))
    to = prog.tile(out, F, (1, H * D), (0, h * G * D), (1, G * D))
    prog.run(f"et_body_attn_merge({tp}, {tl}, {to})")
    sl = slice(G * h, G * (h + 1))
    data[0, h * G * D:(h + 1) * G * D] = ref_merge(parts[0, sl, :m].astype(np.float64),
                                                   lse[0, sl, :m].astype(np.float64))
    prog.check(f"merge G={G} D={D} m={m} dead={dead}", out, data)


def end_to_end_case(prog, rng, cache_dtype, G, D, C, T, pos, **layout):
    """Every live chunk of a token through decode_attention, then attn_merge, against
    softmax attention over positions 0 .. pos (its request's new keys last)."""
    a = Attn(prog, rng, cache_dtype, G, D, C, T, pos, **layout)
    n = pos // T + 1
    for c in range(n):
        a.chunk(c)
    H = a.K * G
    sl = slice(G * a.h, G * (a.h + 1))
    tp = prog.tile(a.out, F, (1, H, a.NC, D), (0, G * a.h, 0, 0), (1, G, n, D))
    tl = prog.tile(a.lse, F, (1, H, a.NC), (0, G * a.h, 0), (1, G, n))
    out, data = out_tensor(prog, F, (1, H * D))
    to = prog.tile(out, F, (1, H * D), (0, a.h * G * D), (1, G * D))
    prog.run(f"et_body_attn_merge({tp}, {tl}, {to})")
    keys, values = a.keys(0, pos + 1)
    full, _ = ref_attention(a.head(a.q, G * D).reshape(G, D), keys, values)
    data[0, a.h * G * D:(a.h + 1) * G * D] = full.reshape(-1)
    assert np.allclose(ref_merge(a.out_data[0, sl, :n], a.lse_data[0, sl, :n]), full.reshape(-1),
                       rtol=1e-5, atol=1e-6)  # the references agree
    prog.check(f"end to end {cache_dtype} G={G} D={D} C={C} T={T} p={pos}", out, data)


def build() -> Program:
    prog, rng = Program(), np.random.default_rng(11)
    for pos, chunk, context, kv in (([0], 64, 512, 8), ([5, 63, 64, 0, 511], 64, 512, 8),
                                    (list(range(0, 4000, 200)), 64, 4096, 2),
                                    ([-3, 511, 512, 9000], 64, 500, 4)):  # clamped to [1, 8]
        plan_case(prog, rng, pos, chunk, context, kv)
    big = [0, 1, 1000, 4097, 32767, 131071]
    for S, n, G, D, norm in ((1, 1, 1, 64, None), (1, 1, 4, 128, B), (4, 5, 4, 128, B),
                             (4, 5, 1, 64, None), (1, 16, 4, 128, None), (4, 16, 1, 64, F),
                             (1, 5, 8, 64, F), (4, 1, 8, 128, None)):
        pos = rng.integers(0, 40000, n)
        pos[:min(n, len(big))] = big[:n]
        rope_case(prog, rng, S, n, G, D, norm, pos)
    for dt in (B, F):
        for D in (64, 128):
            append_case(prog, rng, dt, D)
    # (cache dtype, G, D, C, T, p, chunks): p before / at / inside / after a chunk, a chunk
    # clipped at the cache length, non-power-of-two words per row, long chunks
    one = {"K": 1, "h": 0}  # one KV head: the long caches
    for case, layout in (((B, 4, 128, 256, 64, 100, (0, 1, 2)), {}),  # after, inside, nothing
                         ((F, 4, 128, 256, 64, 128, (1, 2)), one),    # after; the new key alone
                         ((B, 1, 64, 200, 64, 197, (2, 3)), {}),      # clipped chunk T' = 8
                         ((F, 8, 64, 200, 64, 199, (3,)), {}),        # new key, clipped chunk
                         ((B, 8, 128, 128, 64, 64, (0, 1)), {}),
                         ((F, 2, 128, 128, 64, 37, (0, 1)), {}),
                         ((B, 3, 40, 96, 32, 50, (0, 1, 2)), {}),     # 5 words per row
                         ((F, 5, 36, 96, 32, 70, (0, 2)), {}),        # 9 words per row
                         ((B, 4, 64, 512, 256, 300, (0, 1)), one),    # T' = 256
                         ((F, 1, 128, 320, 256, 319, (0, 1)), one)):
        attention_case(prog, rng, *case, **layout)
    # the generic path: an index vector on the cache rows, G > 8, keys past et_llm_smem
    attention_case(prog, rng, B, 4, 64, 128, 64, 100, (0, 1), idx=True)
    attention_case(prog, rng, F, 10, 32, 96, 32, 40, (0, 1, 2))
    attention_case(prog, rng, B, 8, 32, 1200, 600, 1100, (0, 1), **one)
    # tiny-llama's layout with a bf16 cache (2 words per row: the generic path), slot 1 of 3,
    # one chunk longer than the cache
    for pos in (0, 1, 2, 40):
        attention_case(prog, rng, B, 2, 16, 64, 128, pos, (0,), slot=1, slots=3)
    # a prompt chunk: several new rows (the generic path), inside and across chunk boundaries
    attention_case(prog, rng, B, 4, 64, 256, 64, 100, (0, 1, 2), new=5)   # rows 96 .. 100
    attention_case(prog, rng, F, 4, 64, 256, 64, 70, (0, 1, 2), new=71)   # the whole prompt
    attention_case(prog, rng, B, 2, 128, 128, 64, 64, (0, 1), new=2, **one)  # 63, 64
    # one chunk over the whole context: the attention output itself, out [1, H*D] (fast path;
    # the generic one for 2 words per row, G > 8 and a prompt chunk)
    flat = {"flat": True}
    attention_case(prog, rng, B, 4, 64, 512, 512, 300, (0,), **flat)
    attention_case(prog, rng, F, 2, 128, 128, 128, 127, (0,), K=1, h=0, **flat)
    attention_case(prog, rng, B, 2, 16, 64, 128, 40, (0,), slot=1, slots=3, **flat)
    attention_case(prog, rng, F, 10, 32, 96, 96, 40, (0,), **flat)
    attention_case(prog, rng, B, 4, 64, 256, 256, 100, (0,), new=5, **flat)
    for G, D, m, dead in ((1, 64, 1, ()), (4, 128, 5, (1, 4)), (8, 128, 32, (0, 31)),
                          (2, 64, 7, ()), (4, 6, 9, (2,)), (8, 4, 400, (5,))):
        merge_case(prog, rng, G, D, m, dead)
    for dt, G, D, C, T, pos, layout in ((B, 4, 64, 200, 64, 0, {}), (B, 4, 64, 200, 64, 63, {}),
                                        (F, 4, 64, 200, 64, 64, {}),
                                        (B, 2, 128, 200, 64, 130, one),
                                        (F, 8, 128, 200, 64, 199, one),
                                        (B, 4, 64, 1024, 64, 1000, one),
                                        (B, 4, 64, 200, 64, 130, {"new": 9}),
                                        (F, 8, 128, 200, 64, 140, {"new": 141, "K": 1, "h": 0})):
        end_to_end_case(prog, rng, dt, G, D, C, T, pos, **layout)
    return prog


PROGRAM = build()


@pytest.fixture(scope="module", params=[0, 16, 32],
                ids=["register_passes", "stream_16", "stream_32"])
def results(request, tmp_path_factory):
    """Every case's output, with the attention's key and value words loaded a pass at a
    time into registers (ET_ATTN_STREAM 0) or streamed through a ring of 16 or 32 words a
    thread in shared memory (emulated copies land at once, so a group copied into a slot
    before the slot's words were taken breaks the result)."""
    out = run_host(tmp_path_factory.mktemp("llm_attention"), "\n".join(PROGRAM.lines),
                   headers=HEADERS,
                   prelude=PRELUDE + f"\n#define ET_ATTN_STREAM {request.param}\n")
    got = {}
    for line in out.splitlines():
        words = line.split()
        got[int(words[1])] = np.array(words[2:], np.float32)
    return got


@needs_cxx
@pytest.mark.parametrize("i", range(len(PROGRAM.cases)),
                         ids=[label for label, _, _ in PROGRAM.cases])
def test_body_matches_numpy(results, i):
    _, want, exact = PROGRAM.cases[i]
    got = results[i]
    if exact:
        np.testing.assert_array_equal(got, want)
    else:  # fp32 math against float64; -inf lse and sentinels exactly
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------ nvcc, sm_90a

NVCC = shutil.which("nvcc") or next((p for p in ["/usr/local/cuda/bin/nvcc"] if os.path.exists(p)),
                                    None)

DEVICE_SOURCE = r"""
#include "eventtensor/bodies.cuh"
#include "eventtensor/llm_common.cuh"
#include "eventtensor/llm_attention.cuh"
// tiles built in the kernel with constant ranks, as the generated code builds them
#define TILE(name, T, ptr, r, ...)                                                            \
    const long long name##_s[r] = {__VA_ARGS__};                                              \
    const long long name##_l[r] = {};                                                         \
    const int* const name##_i[r] = {};                                                        \
    const EtTileT<T> name = et_tile((T*)(ptr), r, name##_s, name##_l, name##_s, name##_i);
#define BOUNDS __launch_bounds__(256, 1)
__global__ void BOUNDS plan(int* pos, int* plan, int B) {
    TILE(tp, int, pos, 1, B) TILE(tq, int, plan, 2, B, 3)
    et_body_decode_plan(tp, tq, 64, 64, 8, 4096);
}
template <typename N>
__global__ void BOUNDS rope(float* q, float* k, float* v, int* pos, float* f, N* qn, N* kn,
                            float* qo, float* ko, float* vo, int S, int n, int G, bool norm) {
    TILE(tq, float, q, 3, S, n, G * 128) TILE(tk, float, k, 3, S, n, 128)
    TILE(tv, float, v, 3, S, n, 128) TILE(tp, int, pos, 1, n) TILE(tf, float, f, 1, 64)
    TILE(tqn, N, qn, 1, 128) TILE(tkn, N, kn, 1, 128) TILE(tqo, float, qo, 2, n, G * 128)
    TILE(tko, float, ko, 2, n, 128) TILE(tvo, float, vo, 2, n, 128)
    const EtTileT<N> none = {};
    if (norm) et_body_qk_norm_rope(tq, tk, tv, tp, tf, tqn, tkn, tqo, tko, tvo, 128, 1e-6f);
    else et_body_qk_norm_rope(tq, tk, tv, tp, tf, none, none, tqo, tko, tvo, 128, 1e-6f);
}
template __global__ void rope<float>(float*, float*, float*, int*, float*, float*, float*,
                                     float*, float*, float*, int, int, int, bool);
template __global__ void rope<et_bf16>(float*, float*, float*, int*, float*, et_bf16*, et_bf16*,
                                       float*, float*, float*, int, int, int, bool);
template <typename C>
__global__ void BOUNDS append(float* k, float* v, C* ko, C* vo) {
    TILE(tk, float, k, 2, 1, 128) TILE(tv, float, v, 2, 1, 128)
    TILE(tko, C, ko, 4, 1, 1, 1, 128) TILE(tvo, C, vo, 4, 1, 1, 1, 128)
    et_body_kv_append(tk, tv, tko, tvo);
}
template __global__ void append<float>(float*, float*, float*, float*);
template __global__ void append<et_bf16>(float*, float*, et_bf16*, et_bf16*);
template <typename C>
__global__ void BOUNDS attention(float* q, C* k, C* v, float* kn, float* vn, int* pos, float* o,
                                 float* l, int G, int t) {
    TILE(tq, float, q, 2, 1, G * 128) TILE(tk, C, k, 4, 1, 1, 64, 128)
    TILE(tv, C, v, 4, 1, 1, 64, 128) TILE(tkn, float, kn, 2, 1, 128)
    TILE(tvn, float, vn, 2, 1, 128) TILE(tp, int, pos, 1, 1)
    TILE(to, float, o, 4, 1, G, 1, 128) TILE(tl, float, l, 3, 1, G, 1)
    et_body_decode_attention(tq, tk, tv, tkn, tvn, tp, to, tl, 64, 64, 8, t);
}
template __global__ void attention<float>(float*, float*, float*, float*, float*, int*, float*,
                                          float*, int, int);
template __global__ void attention<et_bf16>(float*, et_bf16*, et_bf16*, float*, float*, int*,
                                            float*, float*, int, int);
__global__ void BOUNDS merge(float* p, float* l, float* o, int G, int m) {
    TILE(tp, float, p, 4, 1, G, m, 128) TILE(tl, float, l, 3, 1, G, m)
    TILE(to, float, o, 2, 1, G * 128)
    et_body_attn_merge(tp, tl, to);
}
"""


@pytest.mark.skipif(NVCC is None, reason="nvcc not installed")
@pytest.mark.parametrize("stream", [0, 16, 32])
def test_header_compiles_for_sm90a_without_spills(tmp_path, stream):
    """Every body, instantiated with float and bf16 caches and norms (and absent norms),
    compiles for sm_90a with the options NVRTC gets (fast math) and spills nothing, with
    the attention's words in registers or streamed (ET_ATTN_STREAM)."""
    src = tmp_path / "llm_attention.cu"
    src.write_text(DEVICE_SOURCE)
    res = subprocess.run([NVCC, "-arch=sm_90a", "-std=c++17", "--use_fast_math",
                          f"-DET_ATTN_STREAM={stream}",
                          f"-I{INCLUDE}", "--resource-usage", "-c", str(src), "-o",
                          str(tmp_path / "llm_attention.o")],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    usage = res.stdout + res.stderr
    assert "spill stores" in usage
    assert all(" 0 bytes spill stores" in line for line in usage.splitlines()
               if "spill stores" in line), usage
