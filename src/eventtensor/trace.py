"""Execution traces of megakernel runs: one format for simulated, interpreter and measured runs.

A `Trace` holds one `TaskSpan` per executed task (which SM ran it, when it was fetched, when its
body started and ended, in microseconds). It exports to Chrome/Perfetto trace-event JSON
(`to_chrome`, `save_json`; loads in ui.perfetto.dev and chrome://tracing) and reads it back
(`from_chrome`, `load_json`), and draws PNG Gantt charts (`save_png`, `save_side_by_side`).
matplotlib is imported only when a PNG is drawn.
"""
from __future__ import annotations

import json
import math
import os
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

SOURCES = ("simulated", "measured", "interpreter")
_DPI = 120
_WAIT_COLOR = "#c8c8c8"


@dataclass(frozen=True)
class TaskSpan:
    """One task run on one SM. Times in microseconds, `fetch_us <= start_us <= end_us`.

    `start_us - fetch_us` is the time the SM spent waiting on the events in `waits`; `end_us`
    ends the body. `notify_us`, where measured, is when the task's notifies were issued (at
    or after `end_us`, and past later tasks of its SM where it held them back); `notified_us`
    is that, or `end_us` where it was not measured.
    """

    sm: int
    task: str
    kind: str
    grid: str
    start_us: float
    end_us: float
    fetch_us: float
    waits: tuple[str, ...] = ()
    notify_us: float | None = None

    @property
    def notified_us(self) -> float:
        return self.end_us if self.notify_us is None else self.notify_us


def _span_key(s: TaskSpan) -> tuple[int, float, str]:
    return (s.sm, s.start_us, s.task)


@dataclass
class Trace:
    """A run of `num_sms` SMs. `source` is one of "simulated", "measured", "interpreter".

    Spans are validated and sorted by (sm, start_us, task) on construction. `meta` must be
    JSON-serialisable (string keys) for `save_json`; it round-trips as JSON does.
    """

    title: str
    source: str
    num_sms: int
    spans: list[TaskSpan]
    meta: dict[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise ValueError(f"trace {self.title!r}: source {self.source!r} not in {SOURCES}")
        if self.num_sms < 0:
            raise ValueError(f"trace {self.title!r}: num_sms must be >= 0, got {self.num_sms}")
        for s in self.spans:
            where = f"trace {self.title!r}: task {s.task!r} (grid {s.grid!r}, SM {s.sm})"
            if not 0 <= s.sm < self.num_sms:
                raise ValueError(f"{where}: SM index outside [0, {self.num_sms})")
            if not all(math.isfinite(t) for t in (s.fetch_us, s.start_us, s.notified_us)):
                raise ValueError(f"{where}: non-finite time")
            if s.notified_us < s.end_us:
                raise ValueError(f"{where}: notify_us {s.notify_us} < end_us {s.end_us}")
            if s.end_us < s.start_us:
                raise ValueError(f"{where}: end_us {s.end_us} < start_us {s.start_us}")
            if s.start_us < s.fetch_us:
                raise ValueError(f"{where}: start_us {s.start_us} < fetch_us {s.fetch_us}")
        self.spans = sorted(self.spans, key=_span_key)

    @property
    def t0_us(self) -> float:
        """Earliest fetch time (0.0 when empty)."""
        return min((s.fetch_us for s in self.spans), default=0.0)

    @property
    def makespan_us(self) -> float:
        """Latest end (or notifies issued, where measured) minus earliest fetch, in
        microseconds (0.0 when empty)."""
        if not self.spans:
            return 0.0
        return max(s.notified_us for s in self.spans) - self.t0_us

    def busy_fraction(self) -> float:
        """Sum of task body times over `num_sms * makespan_us` (0.0 when empty or zero-length)."""
        denom = self.num_sms * self.makespan_us
        if denom <= 0:
            return 0.0
        return sum(s.end_us - s.start_us for s in self.spans) / denom

    def to_chrome(self) -> dict[str, Any]:
        """Chrome trace-event dict: pid 0 = this trace, tid = SM, one "X" event per task.

        A "wait" event (cat "wait") covers fetch..start on the same thread where start > fetch.
        Task events carry `args` grid, waits, fetch_us, end_us and notify_us where measured
        (for an exact round trip).
        """
        ev: list[dict[str, Any]] = [
            {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": self.title}}
        ]
        for sm in range(self.num_sms):
            ev.append({"ph": "M", "name": "thread_name", "pid": 0, "tid": sm,
                       "args": {"name": f"SM {sm}"}})
            ev.append({"ph": "M", "name": "thread_sort_index", "pid": 0, "tid": sm,
                       "args": {"sort_index": sm}})
        for s in self.spans:
            if s.start_us > s.fetch_us:
                name = "wait " + ", ".join(s.waits) if s.waits else "wait"
                ev.append({"ph": "X", "name": name, "cat": "wait", "ts": s.fetch_us,
                           "dur": s.start_us - s.fetch_us, "pid": 0, "tid": s.sm,
                           "args": {"task": s.task, "waits": list(s.waits)}})
            ev.append({"ph": "X", "name": s.task, "cat": s.kind, "ts": s.start_us,
                       "dur": s.end_us - s.start_us, "pid": 0, "tid": s.sm,
                       "args": {"grid": s.grid, "waits": list(s.waits),
                                "fetch_us": s.fetch_us, "end_us": s.end_us,
                                **({} if s.notify_us is None else {"notify_us": s.notify_us})}})
        other = {"title": self.title, "source": self.source, "num_sms": self.num_sms,
                 "meta": self.meta}
        return {"traceEvents": ev, "displayTimeUnit": "ns", "otherData": other}

    @classmethod
    def from_chrome(cls, data: dict[str, Any]) -> Trace:
        """Inverse of `to_chrome`: rebuild spans from task events (those with a "grid" arg)."""
        try:
            other = data["otherData"]
            spans = []
            for e in data["traceEvents"]:
                args = e.get("args") or {}
                if e.get("ph") != "X" or "grid" not in args:
                    continue  # metadata and wait events
                start = float(e["ts"])
                spans.append(TaskSpan(
                    sm=int(e["tid"]), task=str(e["name"]), kind=str(e["cat"]),
                    grid=str(args["grid"]), start_us=start,
                    end_us=float(args.get("end_us", start + float(e["dur"]))),
                    fetch_us=float(args.get("fetch_us", start)),
                    waits=tuple(str(w) for w in args.get("waits", ())),
                    notify_us=float(args["notify_us"]) if "notify_us" in args else None))
            return cls(title=str(other["title"]), source=str(other["source"]),
                       num_sms=int(other["num_sms"]), spans=spans,
                       meta=dict(other.get("meta") or {}))
        except (KeyError, TypeError) as exc:
            raise ValueError(f"not a trace written by Trace.to_chrome: missing {exc}") from exc

    def save_json(self, path: str | os.PathLike[str]) -> None:
        """Write `to_chrome()` as JSON atomically (temp file in the same folder + os.replace)."""
        text = json.dumps(self.to_chrome(), allow_nan=False)
        _atomic_write(path, lambda f: f.write(text.encode("utf-8")))

    @classmethod
    def load_json(cls, path: str | os.PathLike[str]) -> Trace:
        """Read a file written by `save_json`."""
        with open(path, encoding="utf-8") as f:
            return cls.from_chrome(json.load(f))

    def save_png(self, path: str | os.PathLike[str], max_sms: int | None = None) -> None:
        """Draw a Gantt chart (one row per SM, colour per kind) to a PNG, atomically.

        `max_sms` limits rows to the first N SMs that ran any task. Times are relative to t0_us.
        """
        rows = _rows(self, max_sms)
        fig = _figure(width=11.0, height=_panel_height(len(rows), cap=14.0))
        ax = fig.add_subplot(1, 1, 1)
        _draw(ax, self, rows, _colors(self.spans), xmax=self.makespan_us)
        ax.set_xlabel("time (µs)")
        _legend(fig, ax, [self])
        _save_fig(fig, path)


def save_side_by_side(traces: Sequence[Trace], path: str | os.PathLike[str]) -> None:
    """Stack one Gantt panel per trace in a PNG, sharing the x axis (time since each trace's t0)
    and one kind -> colour mapping, so simulated and measured runs compare directly."""
    if not traces:
        raise ValueError("save_side_by_side needs at least one trace")
    rows = [_rows(t, None) for t in traces]
    heights = [_panel_height(len(r), cap=8.0) for r in rows]
    scale = min(1.0, 20.0 / sum(heights))
    fig = _figure(width=11.0, height=sum(heights) * scale)
    axes = fig.subplots(len(traces), 1, sharex=True, squeeze=False,
                        gridspec_kw={"height_ratios": heights})[:, 0]
    colors = _colors([s for t in traces for s in t.spans])
    xmax = max(t.makespan_us for t in traces)
    for ax, t, r in zip(axes, traces, rows):
        _draw(ax, t, r, colors, xmax=xmax)
    axes[-1].set_xlabel("time (µs)")
    _legend(fig, axes[0], traces, colors)
    _save_fig(fig, path)


# ----------------------------------------------------------------------------- helpers


def _atomic_write(path: str | os.PathLike[str], write: Callable[[IO[bytes]], object]) -> None:
    target = os.fspath(path)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=os.path.dirname(target) or ".")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _rows(trace: Trace, max_sms: int | None) -> list[int]:
    """SM indices to draw: all SMs when <= 32 and no limit, else SMs that ran a task."""
    used = sorted({s.sm for s in trace.spans})
    if max_sms is not None:
        if max_sms < 1:
            raise ValueError(f"max_sms must be >= 1, got {max_sms}")
        return used[:max_sms]
    return list(range(trace.num_sms)) if trace.num_sms <= 32 else used


def _panel_height(nrows: int, cap: float) -> float:
    return min(cap, max(2.5, 1.3 + 0.2 * nrows))


def _colors(spans: Sequence[TaskSpan]) -> dict[str, Any]:
    """Deterministic kind -> RGBA: tab10 (or tab20 beyond 10 kinds) in sorted kind order."""
    from matplotlib import colormaps

    kinds = sorted({s.kind for s in spans})
    cmap = colormaps["tab10" if len(kinds) <= 10 else "tab20"]
    return {k: cmap(i % cmap.N) for i, k in enumerate(kinds)}


def _figure(width: float, height: float) -> Any:
    import matplotlib

    if "matplotlib.pyplot" not in sys.modules:  # never switch an interactive session's backend
        matplotlib.use("Agg")
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=_DPI)


def _title(trace: Trace, rows: list[int], limited: bool) -> str:
    text = (f"{trace.title} ({trace.source}, makespan {trace.makespan_us:.2f} µs, "
            f"busy {trace.busy_fraction():.0%})")
    if limited:
        text += f" [first {len(rows)} of {trace.num_sms} SMs]"
    elif len(rows) < trace.num_sms:
        text += f" [{len(rows)} of {trace.num_sms} SMs ran tasks]"
    return text


def _draw(ax: Any, trace: Trace, rows: list[int], colors: dict[str, Any], xmax: float) -> None:
    """Draw one trace's Gantt panel on `ax`; row i (top to bottom) is SM rows[i]."""
    limited = len(rows) < len({s.sm for s in trace.spans})  # max_sms cut off busy SMs
    ax.set_title(_title(trace, rows, limited), fontsize=9)
    ax.set_ylabel("SM")
    ax.set_ylim(len(rows) - 0.5 if rows else 0.5, -0.5)
    ax.set_xlim(0.0, xmax if xmax > 0 else 1.0)
    pos = {sm: i for i, sm in enumerate(rows)}
    spans = [s for s in trace.spans if s.sm in pos]
    if not spans:
        ax.text(0.5, 0.5, "no tasks", transform=ax.transAxes, ha="center", va="center")
    t0 = trace.t0_us
    waits = [s for s in spans if s.start_us > s.fetch_us]
    if waits:
        ax.barh([pos[s.sm] for s in waits], [s.start_us - s.fetch_us for s in waits],
                left=[s.fetch_us - t0 for s in waits], height=0.25, color=_WAIT_COLOR,
                linewidth=0)
    thin = len(rows) > 40
    for kind in sorted({s.kind for s in spans}):
        ks = [s for s in spans if s.kind == kind]
        ax.barh([pos[s.sm] for s in ks], [s.end_us - s.start_us for s in ks],
                left=[s.start_us - t0 for s in ks], height=0.8, color=colors[kind],
                edgecolor="none" if thin else "white", linewidth=0 if thin else 0.4)
    step = max(1, math.ceil(len(rows) / 32))
    ax.set_yticks(range(0, len(rows), step))
    ax.set_yticklabels([str(rows[i]) for i in range(0, len(rows), step)], fontsize=7)
    ax.tick_params(axis="x", labelsize=8)
    ax.set_axisbelow(True)
    ax.grid(axis="x", alpha=0.3)


def _legend(fig: Any, ax: Any, traces: Sequence[Trace],
            colors: dict[str, Any] | None = None) -> None:
    from matplotlib.patches import Patch

    spans = [s for t in traces for s in t.spans]
    colors = colors if colors is not None else _colors(spans)
    handles = [Patch(color=c, label=k) for k, c in colors.items()]
    if any(s.start_us > s.fetch_us for s in spans):
        handles.append(Patch(color=_WAIT_COLOR, label="wait"))
    if handles:
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7,
                  frameon=False)
    fig.tight_layout()


def _save_fig(fig: Any, path: str | os.PathLike[str]) -> None:
    _atomic_write(path, lambda f: fig.savefig(f, format="png", dpi=_DPI))
