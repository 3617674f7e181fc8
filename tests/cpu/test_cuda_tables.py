"""The CUDA runtime's host-side table packing (no GPU needed): static queues in stream order
must hold, per SM and in queue order, exactly the non-guarded tasks with their own wait and
notify records."""
import numpy as np
import pytest

from eventtensor.backends.cuda.codegen import COUNT_FLAT_BITS
from eventtensor.backends.cuda.runtime import (
    CHUNK,
    CHUNK_NOTIFIES,
    CHUNK_WAITS,
    SLAB_WORDS,
    _device_targets,
    _notify_records,
    _static_streams,
    _task_records,
    _wait_records,
)
from eventtensor.examples import EXAMPLES
from eventtensor.lower import bind, build_tables
from eventtensor.schedule import StaticTemplate, prepare, schedule
from eventtensor.schedule.static import bucket_queues

CASES = [("symbolic_batch", {"B": 3}, None), ("symbolic_batch", {"B": 37}, {"B": 64}),
         ("splitk_rowsum", {"n": 5}, None), ("toy_moe", {"T": 13}, None)]


@pytest.mark.parametrize("name, env, bucket", CASES)
@pytest.mark.parametrize("mode", ["static", "unfused"])
def test_static_streams_follow_the_queues(name, env, bucket, mode):
    ex = EXAMPLES[name]
    p = prepare(ex.build(), mode)
    sms = 5
    tmpl = StaticTemplate(p, sms, "critical_path")
    t = build_tables(bind(p, env))
    queues = bucket_queues(t, tmpl, bucket) if bucket else None
    t = schedule(t, mode, sms, template=tmpl, queues=queues)
    rec, waits, notifies = _task_records(t), _wait_records(t), _notify_records(t)
    s = _static_streams(t, rec, waits, notifies)
    guarded = int((t.queue_task < 0).sum())
    assert (guarded > 0) == (bucket is not None)
    assert len(s["stream_task"]) == len(t.queue_task) - guarded
    for sm in range(sms):
        queue = [x for x in t.queue_task[t.queue_ptr[sm]:t.queue_ptr[sm + 1]] if x >= 0]
        lo, hi, w_lo, w_hi, n_lo, n_hi = s["stream_bounds"][sm]
        if hi > lo:  # the SM's waits and notifies: from its first task's to its last task's
            first, last = s["stream_rec"][lo], s["stream_rec"][hi - 1]
            assert (w_lo, w_hi, n_lo, n_hi) == (first[1], last[2], first[3], last[4])
        else:
            assert w_lo == w_hi and n_lo == n_hi
        assert list(s["stream_task"][lo:hi]) == queue
        for pos, task in zip(range(lo, hi), queue):
            r = s["stream_rec"][pos]
            assert r[0] == rec[task, 0] and (r[5:] == rec[task, 5:]).all()
            np.testing.assert_array_equal(s["stream_wait"][r[1]:r[2]],
                                          waits[t.wait_ptr[task]:t.wait_ptr[task + 1]])
            np.testing.assert_array_equal(s["stream_notify"][r[3]:r[4]],
                                          notifies[t.notify_ptr[task]:t.notify_ptr[task + 1]])
        # the CTA's slab: its first chunk as the static loop stages it (EtChunk layout)
        slab = s["slabs"][sm].view(np.int32)
        assert s["slabs"].shape == (sms, SLAB_WORDS)
        recs, slab = slab[:8 * CHUNK].reshape(-1, 8), slab[8 * CHUNK:]
        wts, slab = slab[:2 * CHUNK_WAITS].reshape(-1, 2), slab[2 * CHUNK_WAITS:]
        nts, ids = slab[:CHUNK_NOTIFIES], slab[CHUNK_NOTIFIES:]
        n, nw, nn = min(CHUNK, hi - lo), min(CHUNK_WAITS, w_hi - w_lo), min(CHUNK_NOTIFIES,
                                                                         n_hi - n_lo)
        np.testing.assert_array_equal(recs[:n], s["stream_rec"][lo:lo + n])
        np.testing.assert_array_equal(ids[:n], s["stream_task"][lo:lo + n])
        np.testing.assert_array_equal(wts[:nw], s["stream_wait"][w_lo:w_lo + nw])
        np.testing.assert_array_equal(nts[:nn], s["stream_notify"][n_lo:n_lo + nn])
        assert not recs[n:].any() and not ids[n:].any() and not wts[nw:].any()


def test_first_chunk_slab_holds_as_many_waits_as_fit():
    """A CTA whose first tasks have more waits than its chunk holds: the slab carries the
    first CHUNK_WAITS of them (the rest the static loop reads from global memory)."""
    from eventtensor import ProgramBuilder
    pb = ProgramBuilder("wide_waits")
    pb.event("E", (40,))
    pb.event("F", (60,))
    pb.grid("p", "nop", "i", (8,), notify={"E": "i->5*i:5*i + 5"})
    pb.grid("c", "nop", "j", (60,), wait={"E": "j->:"}, notify={"F": "j->j"})
    p = prepare(pb.build(), "static")
    t = schedule(build_tables(bind(p, {})), "static", 1,
                 template=StaticTemplate(p, 1, "critical_path"))
    s = _static_streams(t, _task_records(t), _wait_records(t), _notify_records(t))
    lo, hi, w_lo, w_hi, n_lo, n_hi = s["stream_bounds"][0]
    assert (hi - lo, w_hi - w_lo) == (68, 60 * 40)
    slab = s["slabs"][0].view(np.int32)
    waits = slab[8 * CHUNK:8 * CHUNK + 2 * CHUNK_WAITS].reshape(-1, 2)
    np.testing.assert_array_equal(waits, s["stream_wait"][:CHUNK_WAITS])
    first = s["stream_rec"][lo:lo + CHUNK]
    assert first[-1, 2] - first[0, 1] > CHUNK_WAITS  # the chunk's waits do not all fit


def _decode_program():
    from eventtensor.models.config import get_config
    from eventtensor.models.decode import build_decode_program
    from eventtensor.models.gpu_decode import gpu_tiles
    cfg = get_config("tiny-llama")
    return build_decode_program(cfg, 8, 256, gpu_tiles(cfg, 8), max_tokens=8,
                                weight_dtype="bfloat16", cache_dtype="bfloat16")


@pytest.mark.parametrize("build, env", [(lambda: EXAMPLES["toy_moe"].build(), {"T": 13}),
                                        (_decode_program, {"B": 5})])
def test_device_targets_locate_every_runtime_count(build, env):
    """ET_TARGET holds each runtime-read count's place (tensor << COUNT_FLAT_BITS | offset):
    with distinct values in every count tensor, the value at that place is the one the
    event's count load reads at the element's coordinates (`Load.values`), and every other
    element keeps its wait count."""
    p = prepare(build(), "static")
    t = build_tables(bind(p, env))
    b, dev = t.bound, _device_targets(t)
    runtime = [ev for ev in p.events if ev.runtime_count is not None]
    assert runtime
    values = {ev.runtime_count.tensor: np.arange(np.prod(b.tensor_shapes[ev.runtime_count.tensor]),
                                                 dtype=np.int64).reshape(
        b.tensor_shapes[ev.runtime_count.tensor]) * 7 + 3 for ev in runtime}
    placed = np.zeros(b.num_elements, bool)
    for ev in runtime:
        ld, base, shape = ev.runtime_count, b.event_base[ev.name], b.event_shapes[ev.name]
        for flat, idx in enumerate(np.ndindex(*shape)):
            at = -1 - int(dev[base + flat])
            assert at >= 0, b.element_name(base + flat)
            assert p.tensors[at >> COUNT_FLAT_BITS].name == ld.tensor
            read = values[ld.tensor].reshape(-1)[at & ((1 << COUNT_FLAT_BITS) - 1)]
            expected = ld.values({**b.env, **dict(zip(ev.axes, idx))}, values)
            assert [read] == list(expected), b.element_name(base + flat)
            placed[base + flat] = True
    np.testing.assert_array_equal(dev[~placed], t.target[~placed])
    assert (t.target[placed] < 0).all()
