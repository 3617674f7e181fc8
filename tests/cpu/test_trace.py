"""Tests for eventtensor.trace: numbers, Chrome JSON export/round trip, PNG Gantt charts."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from eventtensor.trace import TaskSpan, Trace, save_side_by_side


def _span(sm: int, task: str, kind: str, fetch: float, start: float, end: float,
          waits: tuple[str, ...] = ()) -> TaskSpan:
    return TaskSpan(sm=sm, task=task, kind=kind, grid=task.split("(")[0], start_us=start,
                    end_us=end, fetch_us=fetch, waits=waits)


def _trace(scale: float = 1.0, source: str = "simulated") -> Trace:
    """4 SMs, 3 kinds, two tasks that wait on events; SM 3 stays idle."""
    spans = [
        _span(1, "partial_sum(1, 0)", "row_sum", 0.0, 0.0, 2.0 * scale),
        _span(0, "partial_sum(0, 0)", "row_sum", 0.0, 0.0, 2.0 * scale),
        _span(0, "final_sum(0)", "reduce", 2.0 * scale, 3.0 * scale, 4.0 * scale, ("E[0]",)),
        _span(2, "scale(0)", "elementwise", 0.0, 0.0, 1.0 * scale),
        _span(2, "final_sum(1)", "reduce", 1.0 * scale, 2.5 * scale, 5.0 * scale,
              ("E[1]", "F[0]")),
    ]
    return Trace(title="demo", source=source, num_sms=4, spans=spans,
                 meta={"mode": "dynamic", "binding": {"N": 8}, "alpha_us": 0.5})


def _png_ok(path) -> None:
    import matplotlib.image as mpimg

    img = mpimg.imread(path)
    assert img.shape[0] > 200 and img.shape[1] > 200
    assert float(np.var(img[..., :3])) > 0


def test_makespan_and_busy_fraction() -> None:
    t = _trace()
    assert t.makespan_us == pytest.approx(5.0)
    # bodies: 2 + 2 + 1 + 1 + 2.5 = 8.5 over 4 SMs * 5 us
    assert t.busy_fraction() == pytest.approx(8.5 / 20.0)
    shifted = Trace("s", "measured", 2, [_span(1, "a(0)", "k", 100.0, 101.0, 103.0)])
    assert shifted.makespan_us == pytest.approx(3.0)
    assert shifted.busy_fraction() == pytest.approx(2.0 / 6.0)
    empty = Trace("e", "interpreter", 4, [])
    assert empty.makespan_us == 0.0 and empty.busy_fraction() == 0.0


def test_held_notifies() -> None:
    """A measured span's notifies may come after its body and past the next task's (held
    back): the makespan runs to the last notify, the busy fraction counts bodies only, the
    notify time round-trips through the JSON, and one before the body's end is refused."""
    held = TaskSpan(sm=0, task="gate(0)", kind="linear", grid="gate", start_us=0.0,
                    end_us=2.0, fetch_us=0.0, notify_us=5.5)
    after = TaskSpan(sm=0, task="up(0)", kind="linear", grid="up", start_us=2.5, end_us=5.0,
                     fetch_us=2.0, notify_us=5.25)
    t = Trace("held", "measured", 1, [held, after])
    assert t.makespan_us == pytest.approx(5.5) and held.notified_us == 5.5
    assert t.busy_fraction() == pytest.approx(4.5 / 5.5)
    assert Trace.from_chrome(json.loads(json.dumps(t.to_chrome()))) == t
    assert _span(0, "a(0)", "k", 0.0, 0.0, 1.0).notified_us == 1.0
    early = TaskSpan(sm=0, task="a(0)", kind="k", grid="a", start_us=0.0, end_us=2.0,
                     fetch_us=0.0, notify_us=1.0)
    with pytest.raises(ValueError, match="notify_us 1.0 < end_us 2.0"):
        Trace("bad", "measured", 1, [early])


def test_spans_sorted() -> None:
    keys = [(s.sm, s.start_us, s.task) for s in _trace().spans]
    assert keys == sorted(keys)


def test_to_chrome_structure() -> None:
    t = _trace()
    data = t.to_chrome()
    assert data["displayTimeUnit"] == "ns"
    assert data["otherData"] == {"title": "demo", "source": "simulated", "num_sms": 4,
                                 "meta": t.meta}
    ev = data["traceEvents"]
    meta = [e for e in ev if e["ph"] == "M"]
    assert {"name": "demo"} in [e["args"] for e in meta if e["name"] == "process_name"]
    names = {e["tid"]: e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    assert names == {sm: f"SM {sm}" for sm in range(4)}
    order = {e["tid"]: e["args"]["sort_index"] for e in meta if e["name"] == "thread_sort_index"}
    assert order == {sm: sm for sm in range(4)}
    assert all(e["pid"] == 0 for e in ev)

    tasks = [e for e in ev if e["ph"] == "X" and e["cat"] != "wait"]
    waits = [e for e in ev if e["ph"] == "X" and e["cat"] == "wait"]
    assert len(tasks) == len(t.spans) and len(waits) == 2
    assert [(e["tid"], e["ts"], e["name"]) for e in tasks] == [
        (s.sm, s.start_us, s.task) for s in t.spans]
    fin = next(e for e in tasks if e["name"] == "final_sum(1)")
    assert (fin["tid"], fin["cat"], fin["ts"], fin["dur"]) == (2, "reduce", 2.5, 2.5)
    assert fin["args"]["grid"] == "final_sum"
    assert fin["args"]["waits"] == ["E[1]", "F[0]"] and fin["args"]["fetch_us"] == 1.0
    w = {e["tid"]: e for e in waits}
    assert w[2]["name"] == "wait E[1], F[0]" and (w[2]["ts"], w[2]["dur"]) == (1.0, 1.5)
    assert w[0]["name"] == "wait E[0]" and (w[0]["ts"], w[0]["dur"]) == (2.0, 1.0)
    json.dumps(data)  # serialisable


def test_wait_without_named_events() -> None:
    t = Trace("w", "measured", 1, [_span(0, "a(0)", "k", 0.0, 0.5, 1.0)])
    waits = [e for e in t.to_chrome()["traceEvents"] if e.get("cat") == "wait"]
    assert [e["name"] for e in waits] == ["wait"]


def test_json_round_trip(tmp_path) -> None:
    t = _trace(scale=0.1)  # inexact floats: end must survive ts + dur rounding
    path = tmp_path / "trace.json"
    t.save_json(path)
    with open(path) as f:
        data = json.load(f)
    back = Trace.from_chrome(data)
    assert back == t
    assert Trace.load_json(path) == t
    assert [p.name for p in tmp_path.iterdir()] == ["trace.json"]  # no temp file left


def test_from_chrome_rejects_foreign_data() -> None:
    with pytest.raises(ValueError, match="to_chrome"):
        Trace.from_chrome({"traceEvents": []})


def test_png(tmp_path) -> None:
    path = tmp_path / "gantt.png"
    _trace().save_png(path)
    _png_ok(path)


def test_png_many_sms_and_max_sms(tmp_path) -> None:
    spans = [_span(sm, f"t({sm}, {i})", f"k{i % 12}", i * 1.0, i + 0.2, i + 1.0)
             for sm in range(0, 132, 2) for i in range(3)]
    t = Trace("big", "measured", 132, spans)
    t.save_png(tmp_path / "all.png")
    _png_ok(tmp_path / "all.png")
    t.save_png(tmp_path / "first.png", max_sms=8)
    _png_ok(tmp_path / "first.png")
    with pytest.raises(ValueError, match="max_sms"):
        t.save_png(tmp_path / "bad.png", max_sms=0)


def test_side_by_side(tmp_path) -> None:
    path = tmp_path / "both.png"
    save_side_by_side([_trace(), _trace(scale=1.7, source="measured")], path)
    _png_ok(path)
    with pytest.raises(ValueError):
        save_side_by_side([], tmp_path / "none.png")


def test_empty_trace_writes_files(tmp_path) -> None:
    t = Trace("empty", "interpreter", 4, [])
    t.save_json(tmp_path / "e.json")
    assert Trace.load_json(tmp_path / "e.json") == t
    t.save_png(tmp_path / "e.png")
    _png_ok(tmp_path / "e.png")
    save_side_by_side([t, _trace()], tmp_path / "mixed.png")
    _png_ok(tmp_path / "mixed.png")


@pytest.mark.parametrize("span, what", [
    (_span(0, "bad_end(0)", "k", 0.0, 2.0, 1.0), "end_us"),
    (_span(0, "bad_fetch(0)", "k", 3.0, 2.0, 4.0), "fetch_us"),
    (_span(4, "bad_sm(0)", "k", 0.0, 0.0, 1.0), "SM"),
    (_span(-1, "neg_sm(0)", "k", 0.0, 0.0, 1.0), "SM"),
    (_span(0, "nan_time(0)", "k", 0.0, 0.0, float("nan")), "non-finite"),
])
def test_invalid_span_raises(span: TaskSpan, what: str) -> None:
    with pytest.raises(ValueError, match=what) as info:
        Trace("bad", "simulated", 4, [span])
    assert span.task in str(info.value)


def test_invalid_source_raises() -> None:
    with pytest.raises(ValueError, match="source"):
        Trace("bad", "guessed", 1, [])


def test_import_does_not_load_matplotlib() -> None:
    code = "import sys, eventtensor.trace; print('matplotlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
