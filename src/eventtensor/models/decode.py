"""The decode step of a dense decoder (Llama 3, Qwen3) as one eventtensor program.

`build_decode_program(config, max_batch, max_context, max_tokens=...)` gives one program
for every number B in [1, max_tokens] of new tokens in a step, spread over up to `max_batch`
requests (cache slots): in decode each request brings one token; a prompt chunk brings several
tokens of one request, adjacent and in order, causal among themselves. Each token sits at its
own position (its request's cached tokens plus the request's tokens before it in the step)
and gets its logits and greedy next token. Legend of `config.py` plus C max_context, T KV
chunk, NC = cdiv(C, T) chunks, G = H/K, BM token rows of a tile, S split-K partials, mn
= cdiv(B, NR) tiles of NR rows (`norm_rows`) of the norms, and ma = cdiv(B, NA) tiles of NA
rows (`residual_rows`) by RT columns (`residual_tile`) of the residual adds.

Inputs: every weight under `tensor_name(hf_name)` (the HF name with dots as underscores),
tokens [B], positions [B], slots [B] (the cache slot of each token's request), starts [B]
(the row of the first token of the same request in this step: b itself in decode),
rope_inv_freq [D/2] (`reference.rope_inv_freq`), per layer l the caches `cache_name("k", l)` and
`cache_name("v", l)` [max_batch, K, C, D]. Outputs: logits [B, V], next_tokens [B], per layer
`cache_name("k", l, out=True)` and the v one [max_batch, K, C, D]. (One cache tensor per
layer, so that every layer's tasks differ only in the tensors they touch and share their
generated code on the GPU.)

The KV cache. The IR has no read-write tensor: `verify` rejects a task writing an input, and
every output or temp starts a launch unwritten (poisoned on the interpreter), so nothing
persists across launches. The caches are therefore read as inputs (positions below the
request's first new token) and the new rows are appended to the layer's cache outputs at
[slots[b], h, positions[b]] (a data-dependent region); no task reads those outputs, and
attention takes the new keys and values of the step (rows starts[b] .. b) from the layer's
temps. `DecodeSession` copies the
appended rows into its cache arrays after each launch; a device launch can instead pass the
same buffer as a cache input and its output (the only element both touch, the new row, is masked
on the read side).

Per layer l, tiles and events (events come from the tile regions unless named here):
  attn_norm (mn)          x rows -> h rows
  q/k/v_proj (mb, n, S)   h rows, split-K chunk s -> partials of column tile n (by default
                          KV head n's G*D or D columns, else `proj_tile` columns); S is
                          `q_split` for q, `k_split` for k and v
  qk_rope (mr, K)         tiles of RR rows (`rope_rows`, mr = cdiv(B, RR)); waits on the
                          q, k, v tiles of its rows and head -> q, k, v of head h
  kv_append (B, K)        waits on qk_rope of (b's rows, h) -> cache outputs at the position
  attn (B*NC*K,)          t = (b*NC + c)*K + h; waits on `l{l}_rope_done` of the row tiles
                          0 .. b's (those of its request's earlier tokens among them) and
                          head h, and on `planned`, which triggers only the tiles of chunks
                          0..pos_b // T: chunks past a token's position are never run
  attn_merge (B, K)       waits on `planned` (so attn_plan is written), then on
                          `l{l}_attn_done[b, h]`, whose wait count n_b is read at run time
                          from attn_plan; reads the n_b chunk partials. With one chunk
                          (kv_chunk >= max_context) the attention tiles write the attention
                          output themselves and o_proj waits on `l{l}_attn_done`: no merge
  o_proj (mb, E/tile, So) by default split s = KV group s: waits only on its heads' merges
  attn_residual (ma, E/RT) x + sum of o partials; mlp_norm (mn)
  gate/up_proj (mb, F/tile, Sm), silu_mul (mb, F/stile), down_proj (mb, E/dtile, Sd): a down
  chunk waits on the SiLU tiles it reads (with `fold_silu` the silu grid goes: a down chunk
  reads the gate and up partials of its K-slice and applies the SiLU-and-multiply itself,
  silu_linear_partial, waiting on the gate and up tiles it reads); mlp_residual (ma, E/RT)
  -> next layer's x rows
  (with `fuse_norm`, each residual add (mn) also writes the norm after it, the next layer's
  attn_norm or mlp_norm, so those grids go: one stage fewer before each projection; with
  `fold_norm`, each residual tile also writes the sums of squares of its rows, x_ss [B, E/RT],
  and the projections after it (norm_linear_partial) scale their K-slice of x by the row's
  1/rms and the norm weight themselves: the norm grids go but layer 0's and the final one)
then final_norm (mn), lm_head (mb, V/tile), argmax_tile (mb, V/argmax tile), argmax (mb).
Before the layers: plan (1 task: attn_plan [B, 3] from positions, notifies `planned`) and embed (B).

Maps cannot compute with loaded values (`positions[b] // T + 1` is not a map), so the plan
task writes each request's chunk count and trigger range as integers. Trigger ranges release
tasks of 1-D grids only, hence the flattened attention grid. A triggered task resolves its
range before it waits on the trigger element, reading attn_plan rows of every request: the
attention tiles also wait on `planned` through an affine edge, and the plan is one task.
"""
from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import NamedTuple

import numpy as np

from .. import sym
from ..backends.cpu import RunResult, run
from ..frontend import ProgramBuilder
from ..ir import Program
from ..lower import Tables
from ..schedule import lower
from .config import ModelConfig
from .reference import rope_inv_freq
from .weights import check_weights


def tensor_name(hf_name: str) -> str:
    """The program tensor holding HF parameter `hf_name` (dots become underscores)."""
    return hf_name.replace(".", "_")


def cache_name(kv: str, layer: int, out: bool = False) -> str:
    """The program tensor of layer `layer`'s key (`kv` "k") or value ("v") cache: the
    input, or with `out` the output the step appends the new rows to."""
    return f"l{layer}_{kv}_cache" + ("_out" if out else "")


@dataclass(frozen=True)
class DecodeTiles:
    """Tile sizes of the decode program. Column tiles may leave a clipped last tile; split
    counts must divide the dimension they split."""

    rows: int = 16                 # BM: requests per row tile
    k_split: int = 1               # S: split-K over E of k, v (and q, gate, up: q_split,
                                   # mlp_split)
    q_split: int | None = None     # split-K of q over E; None: k_split
    o_split: int | None = None     # So: split of o_proj over H*D; None: one per KV group (K)
    proj_tile: int | None = None   # columns of a q, k or v tile; None: one KV head's
    n_tile: int = 128              # columns of an o_proj tile (of E)
    down_tile: int | None = None   # columns of a down_proj tile (of E); None: n_tile
    ffn_tile: int = 128            # columns of a gate or up tile (of F)
    silu_tile: int | None = None   # columns of a SiLU tile (of F); None: ffn_tile
    down_split: int | None = None  # Sd: split of down_proj over F; None: one per ffn tile
    vocab_tile: int = 256          # columns of an LM-head tile (of V)
    argmax_tile: int | None = None  # columns of a partial argmax (of V); None: vocab_tile
    kv_chunk: int = 64             # T: positions per attention tile
    mlp_split: int | None = None   # split-K of gate and up over E; None: k_split
    norm_rows: int | None = None   # rows of an RMSNorm tile; None: rows
    rope_rows: int | None = None   # rows of a RoPE tile; None: rows
    residual_tile: int | None = None  # columns of a residual tile (of E); None: all of E
    residual_rows: int | None = None  # rows of a residual tile; None: norm_rows
    fuse_norm: int = 0             # 1: each residual add also computes the RMSNorm after it
    fold_norm: int = 0             # 1: the projections after a residual add apply its norm
    fold_silu: int = 0             # 1: the down projection applies the SiLU-and-multiply


def tiles_with(base: DecodeTiles, text: str) -> DecodeTiles:
    """`base` with the fields of `text`, "field=value,..." (value a positive integer, or
    none for the fields whose default is None), e.g. "norm_rows=8,mlp_split=4"."""
    known = {f.name for f in fields(DecodeTiles)}
    changes: dict[str, int | None] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = (part.strip() for part in item.partition("="))
        if not sep or key not in known:
            raise ValueError(f"tiles: {item!r} is not field=value of a DecodeTiles field "
                             f"({', '.join(sorted(known))})")
        if value.lower() == "none" and getattr(DecodeTiles, key, 0) is None:
            changes[key] = None
        elif value.isdigit() and int(value) > 0:
            changes[key] = int(value)
        else:
            raise ValueError(f"tiles.{key}: {value!r} is not a positive integer")
    return replace(base, **changes)


def _span(axis: str, size: int, total: int | str) -> str:
    """Region text of tile `axis` of width `size` in a dimension of length `total`."""
    lo = f"{size}*{axis}"
    if isinstance(total, int) and total % size == 0:
        return f"{lo}:{lo} + {size}"
    return f"{lo}:smin({lo} + {size}, {total})"


def _split(total: int, parts: int, what: str) -> int:
    if parts < 1 or total % parts:
        raise ValueError(f"tiles.{what} = {parts} must be positive and divide {total}")
    return total // parts


class _Decode:
    """Builder state: the config, the tiles and the names every layer shares."""

    def __init__(self, config: ModelConfig, max_batch: int, max_context: int, max_tokens: int,
                 tiles: DecodeTiles, weight_dtype: str, cache_dtype: str, name: str):
        self.cfg, self.t = config, tiles
        for field in ("rows", "proj_tile", "n_tile", "down_tile", "ffn_tile", "silu_tile",
                      "vocab_tile", "argmax_tile", "kv_chunk", "norm_rows", "rope_rows",
                      "residual_tile", "residual_rows"):
            if getattr(tiles, field) is not None and getattr(tiles, field) < 1:
                raise ValueError(f"tiles.{field} must be positive")
        if max_batch < 1 or max_context < 1 or max_tokens < 1:
            raise ValueError("max_batch, max_context and max_tokens must be positive")
        self.pb = pb = ProgramBuilder(name, derive_events=True)
        self.B = pb.symbol("B", 1, max_tokens)
        self.mb = sym.cdiv(self.B, tiles.rows)
        self.rows = _span("m", tiles.rows, "B")
        self.C, self.T = max_context, tiles.kv_chunk
        self.NC = -(-max_context // tiles.kv_chunk)
        E, F, D = config.hidden_size, config.intermediate_size, config.head_dim
        self.ks = _split(E, tiles.k_split, "k_split")
        self.q_split = tiles.q_split or tiles.k_split
        self.qks = _split(E, self.q_split, "q_split")
        self.mlp_split = tiles.mlp_split or tiles.k_split
        self.ms = _split(E, self.mlp_split, "mlp_split")
        if tiles.fuse_norm and tiles.fold_norm:
            raise ValueError("tiles.fuse_norm and tiles.fold_norm exclude each other (the "
                             "norm after a residual add is computed by one or the other)")
        self.nr = tiles.norm_rows or tiles.rows
        self.norm_span, self.norm_tiles = _span("m", self.nr, "B"), sym.cdiv(self.B, self.nr)
        na = tiles.residual_rows or self.nr
        self.res_span, self.res_tiles = _span("m", na, "B"), sym.cdiv(self.B, na)
        self.rr = tiles.rope_rows or tiles.rows
        self.rope_span, self.rope_tiles = _span("m", self.rr, "B"), sym.cdiv(self.B, self.rr)
        self.res_tile = tiles.residual_tile or E
        self.qs = _split(config.q_size, tiles.o_split or config.num_kv_heads, "o_split")
        down = tiles.down_split or (F // tiles.ffn_tile if F % tiles.ffn_tile == 0 else 1)
        self.fs = _split(F, down, "down_split")
        for hf, shape in config.param_shapes().items():
            pb.input(tensor_name(hf), shape, weight_dtype)
        B = self.B
        for n in ("tokens", "positions", "slots", "starts"):
            pb.input(n, (B,), "int32")
        pb.input("rope_inv_freq", (D // 2,))
        cache = (max_batch, config.num_kv_heads, max_context, D)
        for layer in range(config.num_layers):
            for kv in "kv":
                pb.input(cache_name(kv, layer), cache, cache_dtype)
                pb.output(cache_name(kv, layer, out=True), cache, cache_dtype)
        pb.output("logits", (B, config.vocab_size))
        pb.output("next_tokens", (B,), "int32")

    def w(self, layer: int, name: str) -> str:
        return tensor_name(f"model.layers.{layer}.{name}.weight")

    def linear(self, name: str, x: str | tuple[str, str], w: str, out: str, n_cols: int,
               tile: int, total: int, split: int, chunk: int,
               norm: tuple[str, str] | None = None, wait: dict[str, str] | None = None) -> None:
        """Split-K GEMV grid (mb, column tiles, split) of out[s, rows, cols] = x @ W^T; with
        `norm` (the sums of squares of x's residual tiles, the norm weight), of the RMSNorm
        of x (norm_linear_partial); with x a pair (the gate and up partials), of their
        SiLU-and-multiply (silu_linear_partial). `wait`: events it waits on (event -> map
        text) besides those derived from its reads."""
        pb, rows = self.pb, self.rows
        cols, ks = _span("n", tile, total), f"{chunk}*s:{chunk}*s + {chunk}"
        pb.temp(out, (split, self.B, total))
        if isinstance(x, tuple):
            gate, up = x
            pb.grid(name, "silu_linear_partial", "mns", (self.mb, n_cols, split),
                    reads={gate: f":, {rows}, {ks}", up: f":, {rows}, {ks}", w: f"{cols}, {ks}"},
                    writes={out: f"s, {rows}, {cols}"},
                    params={"gate": gate, "up": up, "w": w}, wait=wait)
            return
        reads = {x: f"{rows}, {ks}", w: f"{cols}, {ks}"}
        params: dict[str, object] = {"x": x, "w": w}
        kind = "linear_partial"
        if norm is not None:
            ss, nw = norm
            reads.update({ss: f"{rows}, :", nw: ks})
            params.update({"ss": ss, "norm_w": nw, "eps": self.cfg.rms_norm_eps,
                           "cols": self.cfg.hidden_size})
            kind = "norm_linear_partial"
        pb.grid(name, kind, "mns", (self.mb, n_cols, split), reads=reads,
                writes={out: f"s, {rows}, {cols}"}, params=params, wait=wait)

    def normed(self, name: str, x: str, w: str, h: str | None, out: str,
               has_sumsq: bool) -> tuple[str, tuple[str, str] | None]:
        """The input of the projections after norm `w` of stream x: (x, the fold for
        `linear`) when they apply it themselves (`fold_norm`, the residual add before wrote
        x's sums of squares: `has_sumsq`), else h (a fused residual wrote it) or `out`, the
        output of a new norm grid `name`."""
        if self.t.fold_norm and has_sumsq:
            return x, (x + "_ss", w)
        if h is None:
            h = out
            self.norm(name, x, w, out)
        return h, None

    def norm(self, name: str, x: str, w: str, out: str) -> None:
        """RMSNorm grid over tiles of `norm_rows` rows."""
        rows = self.norm_span
        self.pb.temp(out, (self.B, self.cfg.hidden_size))
        self.pb.grid(name, "rms_norm", "m", (self.norm_tiles,),
                     reads={x: f"{rows}, :", w: ":"}, writes={out: f"{rows}, :"},
                     params={"x": x, "w": w, "eps": self.cfg.rms_norm_eps})

    def residual(self, name: str, x: str, parts: str, out: str,
                 norm: tuple[str, str], sumsq: bool = False) -> str | None:
        """x + the partials summed, over tiles of `residual_rows` rows by `residual_tile`
        columns. With `fuse_norm`, tasks of `norm_rows` rows of all of E also write the RMSNorm
        of the sum (`norm`: its weight and output) and return the norm's name; else None:
        the norm is left to its own grid or, with `sumsq`, to the projections after it (the
        tiles also write the sums of squares of their rows to `out`_ss [B, column tiles])."""
        E = self.cfg.hidden_size
        self.pb.temp(out, (self.B, E))
        if not self.t.fuse_norm:
            rows, tile = self.res_span, self.res_tile
            cols, n_cols = _span("n", tile, E), -(-E // tile)
            reads = {x: f"{rows}, {cols}", parts: f":, {rows}, {cols}"}
            if not sumsq:
                self.pb.grid(name, "residual_add", "mn", (self.res_tiles, n_cols),
                             reads=reads, writes={out: f"{rows}, {cols}"},
                             params={"x": x, "parts": parts})
                return None
            self.pb.temp(out + "_ss", (self.B, n_cols))
            self.pb.grid(name, "residual_add_sumsq", "mn", (self.res_tiles, n_cols),
                         reads=reads, writes={out: f"{rows}, {cols}", out + "_ss": f"{rows}, n"},
                         params={"x": x, "parts": parts, "out": out, "ss": out + "_ss"})
            return None
        w, h, rows = *norm, self.norm_span
        self.pb.temp(h, (self.B, E))
        self.pb.grid(name, "residual_rms_norm", "m", (self.norm_tiles,),
                     reads={x: f"{rows}, :", parts: f":, {rows}, :", w: ":"},
                     writes={out: f"{rows}, :", h: f"{rows}, :"},
                     params={"x": x, "parts": parts, "w": w, "out": out, "h": h,
                             "eps": self.cfg.rms_norm_eps})
        return h

    # ------------------------------------------------------------------ program parts
    def prologue(self) -> str:
        pb, K = self.pb, self.cfg.num_kv_heads
        pb.temp("attn_plan", (self.B, 3), "int32")
        pb.event("planned", (self.B,))
        pb.grid("plan", "decode_plan", "s", (1,), reads={"positions": ":"},
                writes={"attn_plan": ":, :"}, notify={"planned": "s->:"},
                params={"pos": "positions", "chunk": self.T, "chunks": self.NC,
                        "kv_heads": K, "context": self.C})
        pb.temp("x0", (self.B, self.cfg.hidden_size))
        pb.grid("embed", "embedding", "b", (self.B,),
                reads={tensor_name("model.embed_tokens.weight"): "tokens[b], :"},
                writes={"x0": "b, :"})
        return "x0"

    def attention(self, i: int, x: str, h: str | None) -> tuple[str, str | None]:
        """Layer i's attention half on the residual stream x (h: its input norm, if a fused
        residual wrote it); returns the stream after it and its MLP norm (if fused)."""
        cfg, pb, t, rows, B = self.cfg, self.pb, self.t, self.rows, self.B
        K, D, G, E = cfg.num_kv_heads, cfg.head_dim, cfg.group_size, cfg.hidden_size
        GD, p = G * D, f"l{i}_"
        h, fold = self.normed(p + "attn_norm", x, self.w(i, "input_layernorm"), h, p + "h",
                              has_sumsq=i > 0)
        for proj, width, split, chunk in (("q", GD, self.q_split, self.qks),
                                          ("k", D, t.k_split, self.ks),
                                          ("v", D, t.k_split, self.ks)):
            tile = t.proj_tile or width
            self.linear(p + f"{proj}_proj", h, self.w(i, f"self_attn.{proj}_proj"),
                        p + f"{proj}_part", -(-K * width // tile), tile, K * width, split,
                        chunk, norm=fold)
        head = {"q": f"{GD}*h:{GD}*h + {GD}", "k": f"{D}*h:{D}*h + {D}"}
        head["v"] = head["k"]
        rr = self.rope_span
        reads = {p + f"{r}_part": f":, {rr}, {head[r]}" for r in "qkv"}
        reads.update({"positions": rr, "rope_inv_freq": ":"})
        params: dict[str, object] = {r: p + f"{r}_part" for r in "qkv"}
        params.update({f"{r}_out": p + r for r in "qkv"})
        params.update({"pos": "positions", "inv_freq": "rope_inv_freq", "head_dim": D,
                       "eps": cfg.rms_norm_eps})
        if cfg.qk_norm:
            for r in "qk":
                reads[self.w(i, f"self_attn.{r}_norm")] = ":"
                params[f"{r}_norm"] = self.w(i, f"self_attn.{r}_norm")
        for r, width in (("q", cfg.q_size), ("k", cfg.kv_size), ("v", cfg.kv_size)):
            pb.temp(p + r, (B, width))
        pb.event(p + "rope_done", (self.rope_tiles, K))
        pb.grid(p + "qk_rope", "qk_norm_rope", "mh", (self.rope_tiles, K), reads=reads,
                writes={p + r: f"{rr}, {head[r]}" for r in "qkv"}, params=params,
                notify={p + "rope_done": "mh->m, h"})
        cache_row = "slots[b], h, positions[b], :"
        pb.grid(p + "kv_append", "kv_append", "bh", (B, K),
                reads={p + "k": f"b, {head['k']}", p + "v": f"b, {head['v']}"},
                writes={cache_name(kv, i, out=True): cache_row for kv in "kv"},
                params={"k": p + "k", "v": p + "v", "k_out": cache_name("k", i, out=True),
                        "v_out": cache_name("v", i, out=True)})
        # split-KV attention over a 1-D grid, so one trigger range per request covers the
        # tiles of its live chunks: t = (b*NC + c)*K + h. With one chunk (NC == 1) a tile's
        # normalised output is the attention output itself: the tiles write it and no merge
        # follows.
        NK, one_chunk = self.NC * K, self.NC == 1
        b, h, c = f"(t // {NK})", f"(t % {K})", f"((t // {K}) % {self.NC})"
        chunk = _span(c, self.T, self.C)
        heads = f"{G}*{h}:{G}*{h} + {G}"
        pb.temp(p + "attn", (B, cfg.q_size))
        if one_chunk:  # (an explicit event: the regions of the flat grid are not derivable)
            out, out_region = p + "attn", f"{b}, {GD}*{h}:{GD}*{h} + {GD}"
            pb.event(p + "attn_done", (B, K))
        else:
            out, out_region = p + "o_chunks", f"{b}, {heads}, {c}, :"
            pb.temp(out, (B, cfg.num_heads, self.NC, D))
            pb.event(p + "attn_done", (B, K), wait_count="attn_plan[k, 2]")
        notify = {p + "attn_done": f"t->{b}, {h}"}
        pb.temp(p + "lse", (B, cfg.num_heads, self.NC))
        cache = f"slots[{b}], {h}, {chunk}, :"
        new = f"starts[{b}]:{b} + 1, {D}*{h}:{D}*{h} + {D}"  # the request's new rows so far
        pb.grid(p + "attn", "decode_attention", "t", (B * NK,),
                reads={p + "q": f"{b}, {GD}*{h}:{GD}*{h} + {GD}", cache_name("k", i): cache,
                       cache_name("v", i): cache, p + "k": new, p + "v": new,
                       "positions": b},
                writes={out: out_region, p + "lse": f"{b}, {heads}, {c}"},
                notify=notify,
                wait={"planned": f"t->{b}",
                      p + "rope_done": f"t->0:{b} // {self.rr} + 1, {h}"},
                params={"q": p + "q", "k_cache": cache_name("k", i),
                        "v_cache": cache_name("v", i),
                        "k_new": p + "k", "v_new": p + "v", "pos": "positions",
                        "out": out, "lse": p + "lse", "chunk": self.T,
                        "chunks": self.NC, "kv_heads": K})
        pb.trigger("planned", p + "attn", "k->attn_plan[k, 0]:attn_plan[k, 1]")
        if not one_chunk:
            live = "0:attn_plan[b, 2]"
            pb.grid(p + "attn_merge", "attn_merge", "bh", (B, K),
                    reads={p + "o_chunks": f"b, {G}*h:{G}*h + {G}, {live}, :",
                           p + "lse": f"b, {G}*h:{G}*h + {G}, {live}"},
                    writes={p + "attn": f"b, {head['q']}"},
                    wait={"planned": "bh->b", p + "attn_done": "bh->bh"},
                    params={"parts": p + "o_chunks", "lse": p + "lse", "span_hint": self.NC})
        n_e, qc = -(-E // t.n_tile), self.qs  # split s: columns qc*s .. qc*s + qc - 1
        # (one chunk: split s waits on the attention tiles of its rows and KV heads)
        heads_of_s = f"{qc}*s // {GD}:({qc}*s + {qc + GD - 1}) // {GD}"
        self.linear(p + "o_proj", p + "attn", self.w(i, "self_attn.o_proj"), p + "o_part",
                    n_e, t.n_tile, E, cfg.q_size // qc, qc,
                    wait={p + "attn_done": f"mns->{rows}, {heads_of_s}"} if one_chunk else None)
        h2 = self.residual(p + "attn_residual", x, p + "o_part", p + "x_mid",
                           norm=(self.w(i, "post_attention_layernorm"), p + "h2"),
                           sumsq=bool(t.fold_norm))
        return p + "x_mid", h2

    def mlp(self, i: int, x: str, h2: str | None) -> tuple[str, str | None]:
        """Layer i's MLP half, as `attention`; the norm returned is the next layer's input
        norm (the final norm after the last layer)."""
        cfg, pb, t, rows = self.cfg, self.pb, self.t, self.rows
        E, F, p = cfg.hidden_size, cfg.intermediate_size, f"l{i}_"
        h2, fold = self.normed(p + "mlp_norm", x, self.w(i, "post_attention_layernorm"), h2,
                               p + "h2", has_sumsq=True)
        n_f = -(-F // t.ffn_tile)
        for proj in ("gate", "up"):
            self.linear(p + f"{proj}_proj", h2, self.w(i, f"mlp.{proj}_proj"),
                        p + f"{proj}_part", n_f, t.ffn_tile, F, self.mlp_split, self.ms,
                        norm=fold)
        act: str | tuple[str, str] = (p + "gate_part", p + "up_part")
        if not t.fold_silu:
            silu = t.silu_tile or t.ffn_tile
            cols = _span("n", silu, F)
            act = p + "act"
            pb.temp(act, (self.B, F))
            pb.grid(p + "silu_mul", "silu_mul", "mn", (self.mb, -(-F // silu)),
                    reads={p + "gate_part": f":, {rows}, {cols}",
                           p + "up_part": f":, {rows}, {cols}"},
                    writes={act: f"{rows}, {cols}"},
                    params={"gate": p + "gate_part", "up": p + "up_part"})
        down = t.down_tile or t.n_tile
        self.linear(p + "down_proj", act, self.w(i, "mlp.down_proj"), p + "down_part",
                    -(-E // down), down, E, F // self.fs, self.fs)
        last = i + 1 == cfg.num_layers
        norm = (tensor_name("model.norm.weight"), "h_final") if last else \
            (self.w(i + 1, "input_layernorm"), f"l{i + 1}_h")
        return f"x{i + 1}", self.residual(p + "mlp_residual", x, p + "down_part", f"x{i + 1}",
                                          norm=norm, sumsq=bool(t.fold_norm) and not last)

    def epilogue(self, x: str, h: str | None) -> None:
        cfg, pb, t, rows = self.cfg, self.pb, self.t, self.rows
        V = cfg.vocab_size
        if h is None:
            self.norm("final_norm", x, tensor_name("model.norm.weight"), "h_final")
        head = tensor_name("model.embed_tokens.weight" if cfg.tie_word_embeddings
                           else "lm_head.weight")
        n_v, cols = -(-V // t.vocab_tile), _span("n", t.vocab_tile, V)
        pb.grid("lm_head", "linear_partial", "mn", (self.mb, n_v),
                reads={"h_final": f"{rows}, :", head: f"{cols}, :"},
                writes={"logits": f"{rows}, {cols}"}, params={"x": "h_final", "w": head})
        at = t.argmax_tile or t.vocab_tile
        n_a, cols = -(-V // at), _span("n", at, V)
        pb.temp("tile_max", (self.B, n_a))
        pb.temp("tile_arg", (self.B, n_a), "int32")
        pb.grid("argmax_tile", "argmax_partial", "mn", (self.mb, n_a),
                reads={"logits": f"{rows}, {cols}"},
                writes={"tile_max": f"{rows}, n", "tile_arg": f"{rows}, n"},
                params={"x": "logits", "max": "tile_max", "arg": "tile_arg",
                        "tile": at, "axis": "n"})
        pb.grid("argmax", "argmax_reduce", "m", (self.mb,),
                reads={"tile_max": f"{rows}, :", "tile_arg": f"{rows}, :"},
                writes={"next_tokens": rows}, params={"x": "tile_max", "arg": "tile_arg"})


def build_decode_program(config: ModelConfig, max_batch: int, max_context: int,
                         tiles: DecodeTiles | None = None, *, max_tokens: int | None = None,
                         weight_dtype: str | None = None, cache_dtype: str = "float32",
                         name: str | None = None) -> Program:
    """The decode step of `config` for B in [1, max_tokens] new tokens (default max_tokens:
    max_batch) of up to `max_batch` requests with KV caches of `max_context` positions (see
    the module docstring for tensors, tiles and events).
    Weights are declared in `weight_dtype` (default: the config's dtype), activations in
    float32. Raises ValueError for tiles that do not fit the config."""
    d = _Decode(config, max_batch, max_context, max_tokens or max_batch, tiles or DecodeTiles(),
                weight_dtype or config.dtype, cache_dtype,
                name or f"decode_{config.architecture}_l{config.num_layers}")
    x, h = d.prologue(), None
    for i in range(config.num_layers):
        x, h = d.mlp(i, *d.attention(i, x, h))
    d.epilogue(x, h)
    return d.pb.build()


# ------------------------------------------------------------------------------ running it

class StepResult(NamedTuple):
    """One decode step: the greedy next token [B] and the logits [B, V] of every request
    (in the order given), and the interpreter's run."""

    next_tokens: np.ndarray
    logits: np.ndarray
    run: RunResult


class RequestSlots:
    """The cache slot and position of every live request of a decode session with
    `max_batch` slots of `max_context` positions and steps of up to `max_tokens` tokens
    (default max_batch); `admit` checks a step's tokens."""

    def __init__(self, vocab_size: int, max_batch: int, max_context: int,
                 max_tokens: int | None = None):
        self.vocab_size, self.max_batch, self.max_context = vocab_size, max_batch, max_context
        self.max_tokens = max_tokens or max_batch
        self.slots: dict[Hashable, int] = {}
        self.positions: dict[Hashable, int] = {}
        self.steps = 0

    def free_slots(self) -> int:
        return self.max_batch - len(self.slots)

    def add(self, request_id: Hashable) -> int:
        """Start `request_id` at position 0 in a free cache slot (returned)."""
        if request_id in self.slots:
            raise ValueError(f"request {request_id!r} is already live")
        used = set(self.slots.values())
        free = [s for s in range(self.max_batch) if s not in used]
        if not free:
            raise ValueError(f"all {self.max_batch} cache slots are in use")
        self.slots[request_id], self.positions[request_id] = free[0], 0
        return free[0]

    def release(self, request_id: Hashable) -> None:
        """End `request_id`: its slot is free again (its stale rows stay, masked)."""
        self.slots.pop(request_id)
        self.positions.pop(request_id)

    def admit(self, request_ids: Sequence[Hashable], tokens: Sequence[int] | np.ndarray
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Token t of the step belongs to request `request_ids[t]` (unknown ids join first, at
        position 0); a request's tokens are adjacent, in order (one in decode, a prompt chunk
        otherwise). Returns the tokens, slots, positions and starts (row of the request's
        first token in the step) [B] (int32). Raises ValueError, changing nothing, for a
        bad step, token id or a full cache."""
        ids, toks = list(request_ids), np.asarray(tokens, np.int64).reshape(-1)
        if len(ids) != len(toks) or not 1 <= len(ids) <= self.max_tokens:
            raise ValueError(f"{len(toks)} tokens for {len(ids)} request ids (1 to "
                             f"{self.max_tokens} tokens a step allowed)")
        starts = np.arange(len(ids), dtype=np.int32)
        first: dict[Hashable, int] = {}
        for t, r in enumerate(ids):
            if r in first and ids[t - 1] != r:
                raise ValueError(f"the tokens of request {r!r} are not adjacent in the step")
            starts[t] = first.setdefault(r, t)
        outside = (toks < 0) | (toks >= self.vocab_size)
        if outside.any():  # (every step: the index is looked up only for the error)
            t = int(np.argmax(outside))
            raise ValueError(f"token {t} of the step has id {int(toks[t])}, outside the "
                             f"vocabulary [0, {self.vocab_size})")
        new = [r for r in first if r not in self.slots]
        if len(new) > self.free_slots():
            raise ValueError(f"{len(new)} new requests but {self.free_slots()} free slots")
        offset = np.arange(len(ids)) - starts
        pos = np.array([self.positions.get(r, 0) for r in ids]) + offset
        if (pos >= self.max_context).any():
            r = ids[int(np.argmax(pos >= self.max_context))]
            raise ValueError(f"request {r!r} would pass its {self.max_context} cache positions")
        for r in new:
            self.add(r)
        slots = np.array([self.slots[r] for r in ids], np.int32)
        return toks.astype(np.int32), slots, pos.astype(np.int32), starts

    def advance(self, request_ids: Sequence[Hashable]) -> None:
        """After a step: each request one position further per token it brought."""
        for r in request_ids:
            self.positions[r] += 1
        self.steps += 1


class DecodeSession(RequestSlots):
    """Decode state for one program on the interpreter: the weights, the KV caches
    [L, max_batch, K, C, D] (float32, `cache_fill` where nothing is cached) and the requests
    (`RequestSlots`). `step` runs one launch of the same program for any number of tokens;
    lowered tables are kept per (number of tokens, mode)."""

    def __init__(self, config: ModelConfig, weights: Mapping[str, np.ndarray], max_batch: int,
                 max_context: int, tiles: DecodeTiles | None = None, *, mode: str = "static",
                 max_tokens: int | None = None, num_sms: int = 8, seed: int = 0,
                 cache_fill: float = 0.0):
        check_weights(config, dict(weights))
        super().__init__(config.vocab_size, max_batch, max_context, max_tokens)
        self.config, self.mode, self.num_sms, self.seed = config, mode, num_sms, seed
        self.program = build_decode_program(config, max_batch, max_context, tiles,
                                            max_tokens=self.max_tokens)
        shapes = config.param_shapes()
        self.inputs = {tensor_name(n): np.asarray(w) for n, w in weights.items() if n in shapes}
        self.inputs["rope_inv_freq"] = rope_inv_freq(config).astype(np.float32)
        cache = (config.num_layers, max_batch, config.num_kv_heads, max_context,
                 config.head_dim)
        self.k_cache = np.full(cache, cache_fill, np.float32)
        self.v_cache = np.full(cache, cache_fill, np.float32)
        self._tables: dict[tuple[int, str], Tables] = {}

    def tables(self, batch: int, mode: str | None = None) -> Tables:
        key = (batch, mode or self.mode)
        if key not in self._tables:
            self._tables[key] = lower(self.program, {"B": batch}, key[1], self.num_sms)
        return self._tables[key]

    def step(self, request_ids: Sequence[Hashable], tokens: Sequence[int] | np.ndarray,
             mode: str | None = None) -> StepResult:
        """Run the step's tokens (see `admit`); append each token's k and v at its position
        and advance its request."""
        toks, slots, pos, starts = self.admit(request_ids, tokens)
        feed = {**self.inputs, "tokens": toks, "positions": pos, "slots": slots,
                "starts": starts}
        for layer in range(self.config.num_layers):
            for kv, cache in (("k", self.k_cache), ("v", self.v_cache)):
                feed[cache_name(kv, layer)] = cache[layer]
        res = run(self.tables(len(toks), mode), feed, seed=self.seed + self.steps)
        for layer in range(self.config.num_layers):
            for kv, cache in (("k", self.k_cache), ("v", self.v_cache)):
                new = res.tensors[cache_name(kv, layer, out=True)]
                cache[layer, slots, :, pos, :] = new[slots, :, pos, :]
        self.advance(request_ids)
        return StepResult(res.tensors["next_tokens"].astype(np.int64),
                          res.tensors["logits"].copy(), res)


def greedy_generate(session: RequestSlots, prompts: Sequence[Sequence[int]],
                    max_new_tokens: int | Sequence[int],
                    start_steps: Sequence[int] | None = None,
                    prompt_chunk: int | None = None) -> list[list[int]]:
    """Greedy decoding through `session` (`step(request_ids, tokens)`, `free_slots`,
    `release`). Request r joins at step `start_steps[r]` (default 0; later while no slot is
    free), feeds its prompt in chunks of up to `prompt_chunk` tokens a step (default: as many
    as the step's `max_tokens` leaves after one token per other live request), then its own
    picks (argmax, lowest index on ties), one a step, and leaves (its slot released) after
    `max_new_tokens[r]` picks: the tokens of a step change, the program does not. Returns
    each prompt's new tokens."""
    n = len(prompts)
    budget = [max_new_tokens] * n if isinstance(max_new_tokens, int) else list(max_new_tokens)
    start = [0] * n if start_steps is None else list(start_steps)
    if len(budget) != n or len(start) != n or any(len(p) == 0 for p in prompts):
        raise ValueError("need one non-empty prompt, budget and start step per request")
    if prompt_chunk is not None and prompt_chunk < 1:
        raise ValueError(f"prompt_chunk must be positive, got {prompt_chunk}")
    for r, prompt in enumerate(prompts):
        bad = [t for t in prompt if not 0 <= t < session.vocab_size]
        if bad:
            raise ValueError(f"prompt {r}: token id {bad[0]} is outside the vocabulary "
                             f"[0, {session.vocab_size})")
    cap = getattr(session, "max_tokens", None) or session.max_batch
    out: list[list[int]] = [[] for _ in prompts]
    ids = [object() for _ in prompts]
    fed = [0] * n
    todo = [r for r in range(n) if budget[r] > 0]
    live: list[int] = []
    step = 0
    while todo or live:
        for r in [r for r in todo if start[r] <= step]:
            if session.free_slots() > sum(fed[q] == 0 for q in live) and len(live) < cap:
                todo.remove(r)
                live.append(r)
        if live:
            room = cap - len(live)  # tokens beyond one per live request
            owners, toks = [], []
            for r in live:
                left = len(prompts[r]) - fed[r]
                take = 1 if left <= 0 else min(left, 1 + room, prompt_chunk or left)
                room -= take - 1
                owners += [r] * take
                toks += prompts[r][fed[r]:fed[r] + take] if left > 0 else [out[r][-1]]
            res = session.step([ids[r] for r in owners], toks)
            for t, r in enumerate(owners):
                fed[r] += 1
                if fed[r] >= len(prompts[r]) and (t + 1 == len(owners) or owners[t + 1] != r):
                    out[r].append(int(res.next_tokens[t]))
            for r in [r for r in live if len(out[r]) >= budget[r]]:
                live.remove(r)
                session.release(ids[r])
        step += 1
    return out
