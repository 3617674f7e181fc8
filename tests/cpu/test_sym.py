"""Tests for eventtensor.sym: printing, simplification, parsing, bindings, Python/C printers."""
from __future__ import annotations

import pathlib
import pickle
import random
import shutil
import subprocess
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventtensor.sym import (
    C_PRELUDE,
    Add,
    CeilDiv,
    Const,
    Expr,
    FloorDiv,
    Max,
    Min,
    Mod,
    Mul,
    Sym,
    SymbolRangeError,
    as_expr,
    cdiv,
    check_binding,
    evaluate,
    parse,
    simplify,
    smax,
    smin,
)

B = Sym("B", 1, 256)
i = Sym("i")
j = Sym("j", 0, 3)
x = Sym("x")
n = Sym("n", 1, None)
y = Sym("y", None, None)
z = Sym("z", -5, 5)
NS = {"smin": smin, "smax": smax, "cdiv": cdiv}
NAMES = {s.name: s for s in (B, i, j, x, n, y, z)}


# -- printing and simplification ------------------------------------------------------------
@pytest.mark.parametrize("make, text", [
    (lambda: i * 2 + i, "3*i"),
    (lambda: B + 0, "B"),
    (lambda: 1 * B, "B"),
    (lambda: 0 * B, "0"),
    (lambda: B - B, "0"),
    (lambda: (B + 3) - 3, "B"),
    (lambda: 2 * (B + 1), "2*B + 2"),
    (lambda: (4 * B) // 4, "B"),
    (lambda: (4 * B + 8) // 4, "B + 2"),
    (lambda: (4 * i + j) // 4, "i"),
    (lambda: (4 * i + j) % 4, "j"),
    (lambda: x // 1, "x"),
    (lambda: x % 1, "0"),
    (lambda: (x // 2) // 3, "x//6"),
    (lambda: j // 4, "0"),
    (lambda: j % 4, "j"),
    (lambda: cdiv(32 * i + 32, 32), "i + 1"),
    (lambda: cdiv(4 * B, 4), "B"),
    (lambda: (32 * i) // 32, "i"),
    (lambda: smin(B, B), "B"),
    (lambda: smin(B, 300), "B"),
    (lambda: smax(B, 0), "B"),
    (lambda: smin(B, 8), "smin(B, 8)"),
    (lambda: smin(8, B), "smin(B, 8)"),
    (lambda: smax(smin(B, 8), 2), "smax(smin(B, 8), 2)"),
    (lambda: smin(smin(i, 4), smin(x, 9)), "smin(i, smin(x, 4))"),
    (lambda: 4 * B, "4*B"),
    (lambda: B + 3, "B + 3"),
    (lambda: 3 + B, "B + 3"),
    (lambda: 10 - B, "10 - B"),
    (lambda: (i + 1) // 2, "(i + 1)//2"),
    (lambda: cdiv(n, 4), "cdiv(n, 4)"),
    (lambda: n - 1, "n - 1"),
    (lambda: 3 * i + j - 1, "3*i + j - 1"),
    (lambda: j + i * 3 - 1, "3*i + j - 1"),
    (lambda: -i, "-i"),
    (lambda: -(x // 2), "-(x//2)"),
    (lambda: 3 * (x // 2) - B, "3*(x//2) - B"),
    (lambda: B - x % 4, "B - x%4"),
    (lambda: B * (i + j), "B*i + B*j"),
    (lambda: (B * i) // B, "i"),
    (lambda: (B * i + 3) % B, "3%B"),
    (lambda: (2 * i + 2 * j) // 4, "(i + j)//2"),
    (lambda: (x % 8) % 4, "x%4"),
    (lambda: (x % 6) % 4, "(x%6)%4"),
    (lambda: (x % 3) % 4, "x%3"),
    (lambda: cdiv(cdiv(x, 2), 3), "cdiv(x, 6)"),
    (lambda: y // -2, "(-y)//2"),
    (lambda: (7 * y) % 7, "0"),
    (lambda: 100 // B, "100//B"),
    (lambda: B * B * 2, "2*B*B"),
    (lambda: (2 * B + 2) * (i - 1), "2*B*i + 2*i - 2*B - 2"),
    (lambda: smin(i + 1, i), "i"),
    (lambda: smax(i + 1, i), "i + 1"),
    (lambda: as_expr(5) // 2 + 1, "3"),
])
def test_print(make: Callable[[], Expr], text: str) -> None:
    e = make()
    assert str(e) == text
    assert repr(e) == text
    assert simplify(e) == e
    assert parse(text, NAMES) == e


@pytest.mark.parametrize("make, text", [
    (lambda: (x // 2) // 3, "x/6"),
    (lambda: (-i) // 2, "et_floordiv(-i, 2)"),
    (lambda: y % 3, "et_mod(y, 3)"),
    (lambda: x % 3, "x%3"),
    (lambda: x // z, "et_floordiv(x, z)"),
    (lambda: cdiv(n, 4), "(n + 3)/4"),
    (lambda: cdiv(y, 4), "(-et_floordiv(-y, 4))"),
    (lambda: -(x // 2) + B, "B - x/2"),
    (lambda: -(x // 2), "-(x/2)"),
    (lambda: smin(B, 8), "et_min(B, 8)"),
    (lambda: smax(B, smax(i, 9)), "et_max(B, et_max(i, 9))"),
    (lambda: B + 2**40, "B + 1099511627776LL"),
    (lambda: B - 2**31, "B - 2147483648LL"),
    (lambda: B + 2**31 - 1, "B + 2147483647"),
])
def test_to_c(make: Callable[[], Expr], text: str) -> None:
    assert make().to_c() == text


def test_prelude() -> None:
    for name in ("et_floordiv", "et_mod", "et_min", "et_max"):
        assert f"long long {name}(long long a, long long b)" in C_PRELUDE
    assert "#ifdef __CUDACC__" in C_PRELUDE and "__host__ __device__" in C_PRELUDE


# -- structure, evaluation, bounds --------------------------------------------------------
def test_structural_equality_and_hashing() -> None:
    assert Sym("B", 1, 256) == B and hash(Sym("B", 1, 256)) == hash(B)
    assert Sym("B", 0, 10) != B
    assert (B + 1 == B + 1) is True
    assert (B == 3) is False and Const(3) != 3
    d = {B + 1: "a", 2 * i: "b"}
    assert d[1 + B] == "a" and d[i + i] == "b"
    assert pickle.loads(pickle.dumps(cdiv(n, 4) + smin(B, 8))) == cdiv(n, 4) + smin(B, 8)
    with pytest.raises(AttributeError):
        B.foo = 1  # type: ignore[attr-defined]
    with pytest.raises(TypeError):
        _ = B < 3  # type: ignore[operator]
    with pytest.raises(TypeError):
        _ = B / 2  # type: ignore[operator]


def test_eval_floor_semantics_and_errors() -> None:
    env = {"y": -7, "z": 0, "B": 3}
    assert (y // 3).eval(env) == -3 and (y % 3).eval(env) == 2
    assert (y // -2).eval(env) == 3 and (y % -2).eval(env) == -1
    assert cdiv(y, 3).eval(env) == -2 and cdiv(y, -3).eval(env) == 3
    assert smin(y, B).eval(env) == -7 and smax(y, B).eval(env) == 3
    with pytest.raises(ZeroDivisionError):
        (B // z).eval(env)
    with pytest.raises(ZeroDivisionError):
        (B % z).eval(env)
    with pytest.raises(KeyError, match="n"):
        (n + 1).eval(env)
    with pytest.raises(ZeroDivisionError):
        B // 0
    assert evaluate(5, {}) == 5 and evaluate(B + 1, {"B": 4}) == 5


def test_bounds() -> None:
    assert B.bounds() == (1, 256)
    assert (2 * B - 300).bounds() == (-298, 212)
    assert (-B).bounds() == (-256, -1)
    assert (B * z).bounds() == (-1280, 1280)
    assert (x % 5).bounds() == (0, 4)
    assert (y % -5).bounds() == (-4, 0)
    assert (y // 3).bounds() == (None, None)
    assert (x // 3).bounds() == (0, None)
    assert (B // z).bounds() == (-256, 256)
    assert (z % B).bounds() == (0, 255)
    assert cdiv(B, 4).bounds() == (1, 64)
    assert smin(B, y).bounds() == (None, 256)
    assert smax(B, y).bounds() == (1, None)
    assert (i - j).bounds() == (-3, None)
    assert Const(-4).bounds() == (-4, -4)


def test_queries_and_subs() -> None:
    e = 4 * i + j
    assert e.free_symbols() == frozenset({"i", "j"})
    assert Const(3).is_const and Const(3).value == 3 and not B.is_const
    assert (B - B).is_const and (B - B).value == 0
    with pytest.raises(TypeError):
        _ = B.value
    assert str(e.subs({"i": 2})) == "j + 8"
    assert e.subs({"i": B}) == 4 * B + j
    assert (i // 4).subs({"i": 9}) == Const(2)
    assert (e // 4).subs({"j": 3}) == i
    assert smin(i, 8).subs({"i": 3}) == Const(3)
    assert as_expr(3) == Const(3) and as_expr(B) is B
    for bad in (True, 1.5, "B"):
        with pytest.raises(TypeError):
            as_expr(bad)  # type: ignore[arg-type]


def test_int_helpers() -> None:
    assert smin(3, 5) == 3 and type(smin(3, 5)) is int
    assert smax(3, 5) == 5 and cdiv(7, 2) == 4
    assert cdiv(-7, 2) == -3 and cdiv(7, -2) == -3 and cdiv(-7, -2) == 4
    assert isinstance(smin(B, 3), Expr) and isinstance(cdiv(7, B), Expr)


_PY_OPS = {"//": lambda a, b: a // b, "%": lambda a, b: a % b, "cdiv": cdiv}


def test_constant_divisor_rewrites_exhaustive() -> None:
    """Linear numerators and nested divisions by constants of either sign, checked pointwise."""
    w = Sym("w", -3, 40)
    ks = [k for k in range(-6, 7) if k]
    for op1 in _PY_OPS.values():
        for a in range(-4, 5):
            for c in (-5, 0, 3):
                for k in ks:
                    e = op1(a * y + 2 * w + c, k)
                    assert simplify(e) == e
                    for yv, wv in ((-13, -3), (-1, 0), (0, 7), (5, 40), (22, 11)):
                        assert e.eval({"y": yv, "w": wv}) == op1(a * yv + 2 * wv + c, k)
        for op2 in _PY_OPS.values():
            for m in ks:
                for k in ks:
                    e = op2(op1(y, m), k)
                    for yv in range(-25, 26, 3):
                        assert e.eval({"y": yv}) == op2(op1(yv, m), k), (e, yv)


def test_raw_nodes_simplify() -> None:
    raw = FloorDiv(Add(((Mul(4, i), 1), (j, 1)), 0), 4)
    assert str(raw) == "(4*i + j)//4"
    assert simplify(raw) == i
    assert simplify(Mod(Add(((i, 4), (j, 1)), 0), 4)) == j
    assert simplify(CeilDiv(Mul(32, i), 32)) == i
    assert simplify(Min(B, B, 300)) == B and simplify(Max(B, 0)) == B
    assert simplify(Add(((B, 1), (B, -1)), 5)) == Const(5)


# -- symbols, parsing, bindings ---------------------------------------------------------------
@pytest.mark.parametrize("name", ["1a", "a b", "", "if", "None", "int", "smin", "cdiv", "é"])
def test_bad_symbol_names(name: str) -> None:
    with pytest.raises(ValueError, match="invalid symbol name"):
        Sym(name)


def test_bad_symbol_ranges() -> None:
    with pytest.raises(ValueError, match="empty range"):
        Sym("B", 5, 1)
    with pytest.raises(TypeError):
        Sym("B", 1.5)  # type: ignore[arg-type]
    assert Sym("B", None, None).bounds() == (None, None)


@pytest.mark.parametrize("text, expected", [
    ("4*B + 3", lambda: 4 * B + 3),
    ("  (i + 1) // 2 ", lambda: (i + 1) // 2),
    ("cdiv(n, 4)", lambda: cdiv(n, 4)),
    ("min(B, 8)", lambda: smin(B, 8)),
    ("smin(B, smax(i, 3))", lambda: smin(B, smax(i, 3))),
    ("max(B, i, 0)", lambda: smax(B, i)),
    ("-(i) + +2 - K", lambda: 2 - i - 7),
    ("i % 4 * 2", lambda: (i % 4) * 2),
    ("32*i + j", lambda: 32 * i + j),
    ("K", lambda: Const(7)),
])
def test_parse_good(text: str, expected: Callable[[], Expr]) -> None:
    assert parse(text, {**NAMES, "K": 7}) == as_expr(expected())


@pytest.mark.parametrize("text, piece", [
    ("B / 2", "'/'"),
    ("B ** 2", "'**'"),
    ("B << 1", "'<<'"),
    ("~B", "'~'"),
    ("B.x", "'B.x'"),
    ("B[0]", "'B[0]'"),
    ("1.5 * B", "1.5"),
    ("'s'", "'s'"),
    ("True", "True"),
    ("foo + 1", "'foo'"),
    ("abs(B)", "'abs'"),
    ("np.min(B, 2)", "'np.min'"),
    ("cdiv(B)", "cdiv"),
    ("smin(B)", "smin"),
    ("min(B, 2, key=1)", "keyword"),
    ("B if i else j", "'B if i else j'"),
    ("B < 3", "'B < 3'"),
    ("lambda: 1", "'lambda: 1'"),
    ("B +", "cannot parse"),
    ("B // 0", "division by zero"),
])
def test_parse_bad(text: str, piece: str) -> None:
    with pytest.raises(ValueError) as info:
        parse(text, NAMES)
    assert piece in str(info.value)
    assert repr(text) in str(info.value)


def test_check_binding() -> None:
    syms = [B, j]
    check_binding(syms, {"B": 256, "j": 0})
    check_binding(syms, {"B": np.int64(3), "j": 1})
    check_binding([y], {"y": -10**30})
    with pytest.raises(SymbolRangeError,
                       match=r"^symbol B = 300 is out of its declared range \[1, 256\]$"):
        check_binding(syms, {"B": 300, "j": 9})
    with pytest.raises(SymbolRangeError, match=r"^symbol j = -1 is out of its declared range"):
        check_binding(syms, {"B": 1, "j": -1})
    with pytest.raises(SymbolRangeError, match=r"^symbol B has no value \(the symbols: B, j\)$"):
        check_binding(syms, {"j": 1})
    with pytest.raises(SymbolRangeError, match=r"^symbol B has no value \(the symbols: B, j; "
                                               r"not symbols: b\)$"):
        check_binding(syms, {"b": 1, "j": 1})
    for bad in (2.0, True, "3", None):
        with pytest.raises(SymbolRangeError, match="symbol B"):
            check_binding(syms, {"B": bad, "j": 1})
    with pytest.raises(SymbolRangeError, match=r"\[0, inf\]"):
        check_binding([i], {"i": -1})
    assert issubclass(SymbolRangeError, ValueError)


# -- random expressions -----------------------------------------------------------------------
Pick = Callable[[int, int], int]
_OPS = ("add", "sub", "mul", "neg", "scale", "floordiv", "mod", "cdiv", "min", "max")


def gen_sym(pick: Pick, name: str, lo_range: tuple[int, int]) -> Sym:
    kind, lo = pick(0, 4), pick(*lo_range)
    if kind <= 1:
        return Sym(name, lo, lo + pick(0, 15 if lo_range[1] > 0 else 9))
    if kind == 2:
        return Sym(name, lo, None)
    return Sym(name, None, lo) if kind == 3 else Sym(name, None, None)


def gen_value(pick: Pick, s: Sym, spread: int) -> int:
    lo = s.lo if s.lo is not None else (s.hi if s.hi is not None else 0) - spread
    hi = s.hi if s.hi is not None else (s.lo if s.lo is not None else 0) + spread
    return pick(lo, hi)


def gen_expr(pick: Pick, syms: list[Sym], depth: int, cmax: int) -> Expr:
    """A raw (unsimplified) random tree; divisors are nonzero constants or nonzero symbols."""
    if depth == 0 or pick(0, 3) == 0:
        return Const(pick(-cmax, cmax)) if pick(0, 2) == 0 else syms[pick(0, len(syms) - 1)]
    op = _OPS[pick(0, len(_OPS) - 1)]
    a = gen_expr(pick, syms, depth - 1, cmax)
    if op == "neg":
        return Add(((a, -1),))
    if op == "scale":
        return Add(((a, pick(-5, 5)),), pick(-cmax, cmax))
    if op in ("floordiv", "mod", "cdiv"):
        nz = [s for s in syms if (s.lo is not None and s.lo > 0) or (s.hi is not None and s.hi < 0)]
        k = pick(0, len(nz))
        d: Expr = nz[k] if k < len(nz) else Const(pick(1, 9) * (1 if pick(0, 1) else -1))
        if pick(0, 3) == 0 and k < len(nz):
            d = Add(((d, 1),), 0)  # a compound divisor with the same value
        return {"floordiv": FloorDiv, "mod": Mod, "cdiv": CeilDiv}[op](a, d)
    b = gen_expr(pick, syms, depth - 1, cmax)
    return {"add": lambda: Add(((a, 1), (b, 1))), "sub": lambda: Add(((a, 1), (b, -1))),
            "mul": lambda: Mul(a, b), "min": lambda: Min(a, b), "max": lambda: Max(a, b)}[op]()


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[Expr, list[Sym], dict[str, int]]:
    def pick(lo: int, hi: int) -> int:
        return draw(st.integers(lo, hi))
    syms = [gen_sym(pick, name, (-10, 10)) for name in ("a", "b", "c", "d")[:pick(3, 4)]]
    env = {s.name: gen_value(pick, s, 25) for s in syms}
    return gen_expr(pick, syms, 5, 20), syms, env


def _within(v: int, b: tuple[int | None, int | None]) -> bool:
    return (b[0] is None or b[0] <= v) and (b[1] is None or v <= b[1])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_random_expressions(case: tuple[Expr, list[Sym], dict[str, int]]) -> None:
    e, syms, env = case
    s = simplify(e)
    v = e.eval(env)
    assert s.eval(env) == v
    assert eval(e.to_py(), {**NS, **env}) == v
    assert eval(s.to_py(), {**NS, **env}) == v
    assert _within(v, e.bounds()) and _within(v, s.bounds())
    assert simplify(s) == s
    symmap = {sy.name: sy for sy in syms}
    rebuilt = as_expr(eval(s.to_py(), {**NS, **symmap}))
    assert rebuilt == s
    assert as_expr(eval(e.to_py(), {**NS, **symmap})).eval(env) == v
    assert parse(str(s), symmap) == s
    assert s.free_symbols() <= e.free_symbols()
    assert e.subs(env) == Const(v)
    assert pickle.loads(pickle.dumps(s)) == s


def _abs_bound(e: Expr, vmax: int) -> int:
    """Bound on the magnitude of every intermediate value of the printed C expression."""
    if isinstance(e, Const):
        return abs(e.value)
    if isinstance(e, Sym):
        return vmax
    kids = [_abs_bound(k, vmax) for k in e.children()]
    if isinstance(e, Add):
        return abs(e.const) + sum(abs(c) * k for (_, c), k in zip(e.terms, kids))
    if isinstance(e, Mul):
        return int(np.prod([float(k) for k in kids]))
    return sum(kids) + 1


def test_c_printer_matches_eval(tmp_path: pathlib.Path) -> None:
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler on PATH")
    rnd = random.Random(20240611)
    cases: list[tuple[Expr, dict[str, int]]] = []
    while len(cases) < 600:  # 300 random expressions, each raw and simplified
        syms = [gen_sym(rnd.randint, name, (-9, 0)) for name in ("a", "b", "c", "d")]
        env = {s.name: rnd.randint(max(s.lo if s.lo is not None else -9, -9),
                                   min(s.hi if s.hi is not None else 9, 9)) for s in syms}
        e = gen_expr(rnd.randint, syms, 4, 9)
        if max(_abs_bound(e, 9), _abs_bound(simplify(e), 9)) < 2**60:
            cases += [(e, env), (simplify(e), env)]
    lines = ["#include <stdio.h>", C_PRELUDE, "int main(void) {"]
    for e, env in cases:
        decl = ", ".join(f"{k} = {v}" for k, v in env.items())
        lines.append(f'  {{ const long long {decl}; printf("%lld\\n", (long long)({e.to_c()})); }}')
    pairs = [(a, b) for a in range(-7, 8) for b in range(-3, 4) if b]
    for a, b in pairs:
        lines.append(f'  printf("%lld %lld\\n", et_floordiv({a}, {b}), et_mod({a}, {b}));')
    lines.append("  return 0;\n}")
    src = tmp_path / "sym_check.c"
    src.write_text("\n".join(lines))
    exe = tmp_path / "sym_check"
    subprocess.run([cc, "-std=c99", "-O0", "-w", "-o", str(exe), str(src)], check=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.split("\n")
    for (e, env), got in zip(cases, out):
        assert int(got) == e.eval(env), (e.to_c(), env)
    for (a, b), got in zip(pairs, out[len(cases):]):
        assert got == f"{a // b} {a % b}"
