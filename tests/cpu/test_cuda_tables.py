"""The CUDA runtime's host-side table packing (no GPU needed): static queues in stream order
must hold, per SM and in queue order, exactly the non-guarded tasks with their own wait and
notify records."""
import numpy as np
import pytest

from eventtensor.backends.cuda.runtime import (
    CHUNK,
    CHUNK_NOTIFIES,
    CHUNK_WAITS,
    SLAB_WORDS,
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
