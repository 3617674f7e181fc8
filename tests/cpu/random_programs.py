"""Seeded generator of random eventtensor programs, with an independent numpy evaluation.

A generated program is a DAG of task grids of kinds `row_sum` and `sum_partials` over one
symbol `n`. Every data tensor has R*n rows (R in {2, 4, 8}); the input `X` is (R*n, C).
Each *stage* creates one tensor written by one or two task grids ("parts"), each part writing
its own block of columns, so a consumer of a two-part tensor depends on two grids (fan-in);
every part reads one earlier tensor chosen at random (fan-out, a DAG rather than a chain).

A part is a grid over axes "i" (extent cdiv(n, m)) or "ij" (extent (cdiv(n, m), J)); its task
(i, j) covers rows m*R*i : min(m*R*i + m*R, R*n), with a row-block multiplier m in {1, 2, 3},
so producer and consumer row tilings often differ and one consumer task depends on one to
three producer tasks (or several consumer tasks on one producer task). Column patterns:

  i  row_sum       reads columns [a, b) (span, ':' or a single index); writes the row sums,
                   broadcast over its columns
  i  sum_partials  reads [a, b); writes the column sums of its row block, broadcast over rows
  ij row_sum       task j reads the same [a, b) or its own chunk [a + c*j, a + c*j + c);
                   writes column c0 + j
  ij sum_partials  task j reads chunk [a + c*j, a + c*j + c); writes [c0 + c*j, c0 + c*j + c)

Events (explicit variant): for each (consumer part, producer part) pair whose columns overlap,
the consumer waits on an event the producer notifies. Styles:
  1d  E shape (cdiv(cdiv(n, mp), g),), notify "i->(i//g)" / "ij->(i//g)" (g in {1, 2});
      the consumer waits on the row tiles its rows overlap (an index or a span)
  2d  (producer over "ij") E shape (cdiv(n, mp), Jp), notify "ij->ij"; the consumer waits
      on its row tiles and on the producer columns its read overlaps (clamped spans in j)
Wait counts are mostly derived, sometimes declared (a number, or a closed form). An event
may be shared by several consumers of one producer. The derived variant declares no events
(`derive_events=True`); there a part reads either a whole tensor (':') or columns lying inside
those of every writer over "ij" (see `restrict_for_derive`).

`generate(seed)` gives a small program (tasks <= ~100, n <= 6, run at two bindings);
`generate_wide(seed)` one of 1000-2500 tasks at n = 64 (config `WIDE`).

The reference (`reference`) evaluates the same DAG with whole-tensor numpy slicing.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field

import numpy as np

from eventtensor import ProgramBuilder, sym
from eventtensor.ir import Program


@dataclass
class Part:
    name: str
    kind: str            # "row_sum" | "sum_partials"
    axes: str            # "i" | "ij"
    m: int               # row-block multiplier: task i covers rows m*R*i : m*R*i + m*R
    J: int               # extent of j (1 for axes "i")
    src: str             # tensor read
    a: int               # first column read
    b: int               # one past the last column read (every task; ignored when chunked)
    chunk: int           # > 0: task j reads [a + chunk*j, a + chunk*j + chunk)
    read_full: bool      # read region written as ':' (then a == 0, b == width of src)
    read_index: bool     # single column read written as an index ("rows, 3")
    out: str             # tensor written
    c0: int = 0          # first column written
    width: int = 0       # columns written by the whole grid
    row_form: str = ""   # "plain" | "smin": how the row region is written when m == 1
    write_full: bool = False
    write_index: bool = False  # i grid writing one column: written as an index ("rows, 2")

    def read_cols(self, j: int) -> tuple[int, int]:
        if self.chunk:
            lo = self.a + self.chunk * j
            return lo, lo + self.chunk
        return self.a, self.b

    def write_cols(self, j: int) -> tuple[int, int]:
        if self.axes == "i":
            return self.c0, self.c0 + self.width
        step = 1 if self.kind == "row_sum" else self.chunk
        lo = self.c0 + step * j
        return lo, lo + step

    def read_union(self) -> tuple[int, int]:
        los, his = zip(*(self.read_cols(j) for j in range(self.J)))
        return min(los), max(his)

    def write_union(self) -> tuple[int, int]:
        return self.c0, self.c0 + self.width


@dataclass
class Tensor:
    name: str
    width: int
    writers: list[str] = field(default_factory=list)
    readers: list[str] = field(default_factory=list)
    output: bool = False


@dataclass
class EventSpec:
    name: str
    producer: str
    style: str           # "1d" | "2d"
    g: int = 1           # 1d coarsening: element k gathers producer row tiles g*k .. g*k+g-1
    declared: str | None = None  # wait count text, or None (derived)


@dataclass
class WaitSpec:
    consumer: str
    event: str
    text: str


@dataclass
class Spec:
    """A random program: parts (grids) in stage order, tensors, events, and run settings."""

    seed: int
    R: int
    C: int
    n_hi: int
    parts: list[Part]
    tensors: dict[str, Tensor]
    derive: bool
    order: list[int]              # declaration order of the parts (a permutation)
    events: list[EventSpec] = field(default_factory=list)
    waits: list[WaitSpec] = field(default_factory=list)
    bindings: list[int] = field(default_factory=list)

    def part(self, name: str) -> Part:
        return next(p for p in self.parts if p.name == name)

    # -------------------------------------------------------------- program text
    def rows(self, p: Part) -> str:
        R, m = self.R, p.m
        if m == 1 and p.row_form == "plain":
            return f"{R}*i:{R}*i + {R}"
        return f"{m * R}*i:smin({m * R}*i + {m * R}, {R}*n)"

    def read_region(self, p: Part) -> str:
        rows = self.rows(p)
        if p.read_full:
            return f"{rows}, :"
        if p.chunk:
            if p.chunk == 1 and p.read_index:
                return f"{rows}, {p.a} + j"
            return f"{rows}, ({p.a} + {p.chunk}*j):({p.a} + {p.chunk}*j + {p.chunk})"
        if p.read_index and p.b == p.a + 1:
            return f"{rows}, {p.a}"
        return f"{rows}, {p.a}:{p.b}"

    def write_region(self, p: Part) -> str:
        rows = self.rows(p)
        if p.write_full:
            return f"{rows}, :"
        if p.axes == "i":
            if p.width == 1 and p.write_index:
                return f"{rows}, {p.c0}"
            return f"{rows}, {p.c0}:{p.c0 + p.width}"
        if p.kind == "row_sum":
            return f"{rows}, {p.c0} + j" if p.c0 else f"{rows}, j"
        c = p.chunk
        if c == 1:
            return f"{rows}, {p.c0} + j"
        return f"{rows}, ({p.c0} + {c}*j):({p.c0} + {c}*j + {c})"

    def build(self, order: list[int] | None = None) -> Program:
        """The program; `order` overrides the declaration order of the grids."""
        pb = ProgramBuilder(f"random_{self.seed}", derive_events=self.derive)
        n = pb.symbol("n", 1, self.n_hi)
        pb.input("X", (self.R * n, self.C))
        for t in self.tensors.values():
            if t.name == "X":
                continue
            (pb.output if t.output else pb.temp)(t.name, (self.R * n, t.width))
        for ev in self.events:
            p = self.part(ev.producer)
            tiles = sym.cdiv(n, p.m) if p.m > 1 else n
            shape = (sym.cdiv(tiles, ev.g) if ev.g > 1 else tiles,) if ev.style == "1d" \
                else (tiles, p.J)
            pb.event(ev.name, shape, wait_count=ev.declared)
        for k in self.order if order is None else order:
            p = self.parts[k]
            tiles = sym.cdiv(n, p.m) if p.m > 1 else n
            extent = (tiles,) if p.axes == "i" else (tiles, p.J)
            notify = {ev.name: _notify_text(p, ev) for ev in self.events
                      if ev.producer == p.name}
            wait = {w.event: w.text for w in self.waits if w.consumer == p.name}
            pb.grid(p.name, p.kind, p.axes, extent, reads={p.src: self.read_region(p)},
                    writes={p.out: self.write_region(p)}, notify=notify or None,
                    wait=wait or None)
        return pb.build()

    # -------------------------------------------------------------- dependencies
    def producers_of(self, c: Part) -> list[Part]:
        """Parts writing columns of `c.src` that some task of `c` reads."""
        lo, hi = c.read_union()
        out = []
        for name in self.tensors[c.src].writers:
            p = self.part(name)
            wlo, whi = p.write_union()
            if wlo < hi and lo < whi:
                out.append(p)
        return out

    def num_tasks(self, n: int) -> int:
        return sum(-(-n // p.m) * p.J for p in self.parts)

    def inputs(self, n: int, seed: int) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(seed)
        return {"X": rng.integers(-3, 4, size=(self.R * n, self.C)).astype(np.float32)}


def _notify_text(p: Part, ev: EventSpec) -> str:
    if ev.style == "2d":
        return "ij->ij"
    idx = "i" if ev.g == 1 else f"(i//{ev.g})"
    return f"{p.axes}->{idx}"


# ------------------------------------------------------------------ wait maps (explicit events)

def _row_tiles(c: Part, p: Part, rng: random.Random) -> tuple[str, str] | str:
    """Producer row tiles that consumer task i's rows overlap: an index text, or (lo, hi)."""
    mc, mp = c.m, p.m
    general = rng.random() < 0.3
    if mc == mp and not general:
        return "i"
    if mc == 1 and not general:
        return f"(i//{mp})"
    if mp == 1 and not general:
        return (f"({mc}*i)", f"smin({mc}*i + {mc}, n)")
    return (f"(({mc}*i)//{mp})", f"cdiv(smin({mc}*i + {mc}, n), {mp})")


def _wait_1d(c: Part, p: Part, g: int, rng: random.Random) -> str:
    tiles = _row_tiles(c, p, rng)
    if isinstance(tiles, str):
        dim = tiles if g == 1 else f"({tiles}//{g})"
    else:
        lo, hi = tiles
        dim = f"{lo}:{hi}" if g == 1 else f"({lo}//{g}):cdiv({hi}, {g})"
    return f"{c.axes}->{dim}"


def _wait_2d(c: Part, p: Part, rng: random.Random) -> str:
    tiles = _row_tiles(c, p, rng)
    row = tiles if isinstance(tiles, str) else f"{tiles[0]}:{tiles[1]}"
    step = 1 if p.kind == "row_sum" else p.chunk     # producer task jp writes one step
    if c.chunk and c.axes == "ij":
        # consumer task j reads [a + c*j, a + c*j + c): producer columns overlapping it
        off = c.a - p.c0
        lo = f"smin({p.J}, smax(0, ({off} + {c.chunk}*j)//{step}))"
        hi = f"smax({lo}, smin({p.J}, cdiv({off} + {c.chunk}*j + {c.chunk}, {step})))"
        col = f"{lo}:{hi}"
    else:
        rlo, rhi = c.read_union()
        lo = min(p.J, max(0, (rlo - p.c0) // step))
        hi = max(lo, min(p.J, -(-(rhi - p.c0) // step)))
        col = ":" if (lo, hi) == (0, p.J) and rng.random() < 0.7 else f"{lo}:{hi}"
    return f"{c.axes}->{row}, {col}"


def add_explicit_events(spec: Spec, rng: random.Random) -> None:
    shared: dict[tuple[str, str, int], EventSpec] = {}
    count = 0
    for c in spec.parts:
        for p in spec.producers_of(c):
            style = "2d" if p.axes == "ij" and rng.random() < 0.4 else "1d"
            g = 2 if style == "1d" and rng.random() < 0.3 else 1
            key = (p.name, style, g)
            ev = shared.get(key)
            if ev is None or rng.random() < 0.4:
                count += 1
                declared = None
                if rng.random() < 0.3:
                    if style == "2d":
                        declared = "1"
                    elif g == 1:
                        declared = str(p.J)
                    else:
                        tiles = f"cdiv(n, {p.m})" if p.m > 1 else "n"
                        declared = f"smin({g}, {tiles} - {g}*k)*{p.J}"
                ev = EventSpec(f"E{count}_{p.name}", p.name, style, g, declared)
                spec.events.append(ev)
                shared[key] = ev
            text = _wait_1d(c, p, ev.g, rng) if style == "1d" else _wait_2d(c, p, rng)
            spec.waits.append(WaitSpec(c.name, ev.name, text))


# ------------------------------------------------------------------ the generator

@dataclass(frozen=True)
class Config:
    """Ranges the generator draws from."""

    n_hi: tuple[int, int] = (2, 6)      # upper end of the symbol's range (lower end is 1)
    grids: tuple[int, int] = (2, 7)     # number of task grids
    J: tuple[int, ...] = (1, 2, 3)      # extents of axis j
    m: tuple[int, ...] = (1, 1, 2, 2, 3)  # row-block multipliers
    max_width: int = 4                  # widest sum_partials write
    p_ij: float = 0.5                   # probability of a grid over axes "ij"


SMALL = Config()
WIDE = Config(n_hi=(64, 64), grids=(3, 6), J=(4, 6, 8), m=(1, 1, 2, 3), max_width=8, p_ij=0.8)


def _make_part(name: str, src: Tensor, out: str, c0: int, rng: random.Random,
               cfg: Config) -> Part:
    w = src.width
    kind = rng.choice(["row_sum", "sum_partials"])
    axes = "ij" if rng.random() < cfg.p_ij else "i"
    m = rng.choice(cfg.m)
    form = rng.choice(["plain", "smin"])
    if axes == "ij":
        J = rng.choice(cfg.J)
        if kind == "sum_partials" or rng.random() < 0.6:
            # chunked read: task j reads [a + chunk*j, a + chunk*j + chunk), a + chunk*J <= w
            options = [c for c in range(1, w + 1) if c * J <= w]
            if not options:
                J, options = 1, list(range(1, w + 1))
            if kind == "sum_partials":
                options = [c for c in options if c * J <= cfg.max_width] or [1]
            chunk = rng.choice(options)
            a = rng.randint(0, w - chunk * J)
            p = Part(name, kind, axes, m, J, src.name, a, a + chunk * J, chunk, False,
                     rng.random() < 0.5, out, c0, row_form=form)
            p.width = J if kind == "row_sum" else chunk * J
            return p
        a, b, full = _span(w, rng)
        p = Part(name, kind, axes, m, J, src.name, a, b, 0, full, False, out, c0,
                 row_form=form)
        p.width = J
        return p
    a, b, full = _span(w, rng)
    if kind == "sum_partials" and b - a > cfg.max_width:
        b, full = a + cfg.max_width, False
    p = Part(name, kind, axes, m, 1, src.name, a, b, 0, full, rng.random() < 0.5, out, c0,
             row_form=form)
    p.width = (b - a) if kind == "sum_partials" else rng.choice([1, 1, 2])
    p.write_index = rng.random() < 0.5
    return p


def _span(w: int, rng: random.Random) -> tuple[int, int, bool]:
    if rng.random() < 0.4:
        return 0, w, True
    a = rng.randint(0, w - 1)
    b = rng.randint(a + 1, w)
    return a, b, False


def generate(seed: int, derive: bool | None = None, cfg: Config = SMALL,
             restrict: bool = True, shuffle: bool | None = None) -> Spec:
    """A random program spec, deterministic in `seed`. `derive`: declare no events and let
    the derive_events pass build them (default: 30% of seeds); `restrict`: keep derived
    programs to the region shapes the pass handles; `shuffle`: declare the grids in a random
    order rather than stage order (default: half of the seeds)."""
    rng = random.Random(seed)
    R = rng.choice([2, 4, 8])
    C = rng.choice([4, 8])
    n_hi = rng.randint(*cfg.n_hi)
    if derive is None:
        derive = rng.random() < 0.3
    tensors: dict[str, Tensor] = {"X": Tensor("X", C)}
    parts: list[Part] = []
    target = rng.randint(*cfg.grids)
    stage = 0
    while len(parts) < target:
        stage += 1
        tname = f"T{stage}"
        nparts = 2 if rng.random() < 0.35 and target - len(parts) >= 2 else 1
        c0 = 0
        names = list(tensors)
        for _ in range(nparts):
            # any earlier tensor may be read (a DAG), the two latest a little more often
            src = tensors[rng.choice(names + names[-2:])]
            name = f"g{len(parts)}"
            p = _make_part(name, src, tname, c0, rng, cfg)
            if derive and restrict:
                restrict_for_derive(p, tensors, parts)
            parts.append(p)
            src.readers.append(name)
            c0 += p.width
        tensors[tname] = Tensor(tname, c0, [p.name for p in parts if p.out == tname])
        if nparts == 1 and parts[-1].axes == "i" and rng.random() < 0.3:
            parts[-1].write_full = True
    for t in tensors.values():
        if t.name != "X":
            t.output = not t.readers or rng.random() < 0.3
    order = list(range(len(parts)))
    if (rng.random() < 0.5) if shuffle is None else shuffle:
        rng.shuffle(order)
    spec = Spec(seed, R, C, n_hi, parts, tensors, derive, order)
    if not derive:
        add_explicit_events(spec, rng)
    spec.bindings = [rng.randint(1, n_hi), rng.randint(max(1, n_hi - 1), n_hi)]
    return spec


def restrict_for_derive(p: Part, tensors: dict[str, Tensor], parts: list[Part]) -> None:
    """The derive_events pass maps a consumer's read range to producer column tiles without
    clamping to the columns that producer writes, and it connects the consumer to *every*
    writer of the tensor. So in the derived variant a read must be ':' or lie inside the
    columns of every writer over axes "ij" (writers over "i" index no column by a task
    coordinate). Other reads become ':'."""
    src = tensors[p.src]
    writers = [x for x in parts if x.name in src.writers]
    lo, hi = p.read_union()
    if p.read_full or all(w.axes == "i" or (w.c0 <= lo and hi <= w.c0 + w.width)
                          for w in writers):
        return
    p.a, p.b, p.read_full, p.chunk = 0, src.width, True, 0
    if p.kind == "sum_partials":
        p.axes, p.J, p.width = "i", 1, src.width
    elif p.axes == "ij":
        p.width = p.J


# ------------------------------------------------------------------ numpy reference

def reference(spec: Spec, n: int, X: np.ndarray) -> dict[str, np.ndarray]:
    """Every tensor the program writes, computed with whole-tensor numpy slicing."""
    R = spec.R
    rows = R * n
    vals: dict[str, np.ndarray] = {"X": X.astype(np.float32)}
    for t in spec.tensors.values():
        if t.name != "X":
            vals[t.name] = np.full((rows, t.width), np.nan, np.float32)
    for p in spec.parts:               # stage order: sources are computed first
        S = vals[p.src].astype(np.float64)
        T = vals[p.out]
        for j in range(p.J):
            a, b = p.read_cols(j)
            lo, hi = p.write_cols(j)
            if p.kind == "row_sum":
                T[:, lo:hi] = S[:, a:b].sum(axis=1, keepdims=True)
            else:
                B = p.m * R
                for r0 in range(0, rows, B):
                    T[r0:r0 + B, lo:hi] = S[r0:r0 + B, a:b].sum(axis=0, keepdims=True)
    del vals["X"]
    return vals


# ------------------------------------------------------------------ wide variant

def generate_wide(seed: int, min_tasks: int = 1000, max_tasks: int = 2500) -> Spec:
    """A program of the WIDE configuration (n = 64 at its maximum, J up to 8, explicit
    events) with between `min_tasks` and `max_tasks` tasks at n = 64, in which at most one
    grid reads the input (every other grid waits on a producer)."""
    for k in range(1000):
        spec = generate(seed * 1000 + k, derive=False, cfg=WIDE)
        if min_tasks <= spec.num_tasks(spec.n_hi) <= max_tasks and \
                sum(p.src == "X" for p in spec.parts) == 1:
            spec.bindings = [spec.n_hi]
            return spec
    raise AssertionError(f"no wide program of {min_tasks}..{max_tasks} tasks from seed {seed}")
