"""Index map language: parsing, printing round trip, concrete index sets, errors."""
import numpy as np
import pytest

from eventtensor import sym
from eventtensor.errors import IndexOutOfRangeError, MapError
from eventtensor.maps import FULL, Index, Load, Span, parse_map

B = sym.Sym("B", 1, 64)


def elems(text, env, shape, tensors=None):
    return parse_map(text, names={"B": B}).elements(env, shape, tensors).tolist()


def test_einsum_forms():
    m = parse_map("ij->i")
    assert m.axes == ("i", "j") and m.dims == (Index(sym.Sym("i", 0, None)),)
    assert parse_map("bh->bh").rank == 2
    assert parse_map("i->").rank == 0
    assert str(parse_map("ij->(i//2)")) == "ij->(i//2)"
    assert parse_map("ij->(i//2)j").rank == 2


def test_region_forms_and_values():
    assert elems("i->32*i:32*i + 32", {"i": 1}, (96,)) == list(range(32, 64))
    assert elems("ij->i, :", {"i": 1, "j": 0}, (3, 2)) == [2, 3]
    assert elems("ij->(i//2), j", {"i": 5, "j": 1}, (3, 2)) == [5]
    assert elems("i->", {"i": 3}, ()) == [0]
    assert elems("b->4*b:smin(4*b + 4, B)", {"b": 1, "B": 6}, (6,)) == [4, 5]


def test_data_dependent_forms():
    topk = np.array([[2, 0], [1, 3]])
    indptr = np.array([0, 2, 2, 5])
    m = parse_map("t->topk[t, :]")
    assert m.is_data_dependent and m.tensors_read == {"topk"}
    assert m.dims == (Index(Load("topk", (sym.Sym("t", 0, None), FULL))),)
    assert m.elements({"t": 1}, (4,), {"topk": topk}).tolist() == [1, 3]
    trig = parse_map("k->indptr[k]:indptr[k + 1]")
    assert isinstance(trig.dims[0], Span)
    assert trig.elements({"k": 2}, (6,), {"indptr": indptr}).tolist() == [2, 3, 4]
    assert trig.elements({"k": 1}, (6,), {"indptr": indptr}).tolist() == []


@pytest.mark.parametrize("text", [
    "ij->i", "bh->bh", "ij->(i//2)", "i->(32*i):(32*i + 32), :", "t->topk[t, :]",
    "k->indptr[k]:indptr[k + 1]", "i->", "ij->(i + j), (j % 3)", "b->(4*b):(smin(4*b + 4, B))",
])
def test_print_parse_round_trip(text):
    m = parse_map(text, names={"B": B})
    assert parse_map(str(m), names={"B": B}) == m


@pytest.mark.parametrize("text, message", [
    ("ij->q", "unknown name 'q'"),
    ("ii->i", "distinct single letters"),
    ("i->i::2", "steps are not supported"),
    ("i->i:", "needs both ends"),
    ("i->topk[t]", "unknown name 't'"),
    ("i->x.y", "x.y"),
    ("i->(i", "not valid"),
    ("k->a[k]:b[k, :]", "several values"),
])
def test_parse_errors(text, message):
    with pytest.raises(MapError, match=message.replace("(", r"\(").replace(".", r"\.")):
        parse_map(text)


def test_axes_must_match_caller():
    with pytest.raises(MapError, match="has 2 input axes .* expected 1"):
        parse_map("ij->i", axes=("i",), where="notify edge g -> E")


def test_out_of_range_names_map_and_binding():
    m = parse_map("i->i + 1")
    with pytest.raises(IndexOutOfRangeError,
                       match=r"edge g -> E.*index 4 in dimension 0 of size 4"):
        m.elements({"i": 3}, (4,), what="edge g -> E")
