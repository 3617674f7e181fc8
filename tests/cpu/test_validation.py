"""Every validation error, each checked to name the task grid, event, tensor or symbol at fault."""
import importlib

import pytest

from eventtensor import ProgramBuilder, bind, run_pipeline
from eventtensor.errors import (
    CycleError,
    IndexOutOfRangeError,
    MapError,
    ProgramError,
    SymbolRangeError,
    UnnotifiedEventError,
    UnwrittenReadError,
    WaitCountError,
)


def chain(n_hi=8, notify="ij->i", wait="i->i", count=None, event_shape=None, extra=None):
    """split-K row sum with knobs to break it."""
    pb = ProgramBuilder("chain")
    n = pb.symbol("n", 1, n_hi)
    pb.input("A", (32 * n, 128))
    pb.temp("partial", (32 * n, 4))
    pb.output("out", (32 * n, 1))
    pb.event("E", event_shape if event_shape is not None else (n,), wait_count=count)
    pb.grid("partial_sum", "row_sum", "ij", (n, 4),
            reads={"A": "32*i:32*i + 32, 32*j:32*j + 32"},
            writes={"partial": "32*i:32*i + 32, j"}, notify={"E": notify} if notify else None)
    pb.grid("final_sum", "row_sum", "i", (n,), reads={"partial": "32*i:32*i + 32, :"},
            writes={"out": "32*i:32*i + 32, 0"}, wait={"E": wait})
    if extra:
        extra(pb, n)
    return pb.build()


def test_valid_program_passes():
    p = run_pipeline(chain())
    assert str(p.event("E").wait_count) == "k->4"


def test_notify_map_arity_names_edge_and_grid():
    with pytest.raises(MapError, match=r"notify edge partial_sum -> E: map 'i->i' has 1 input "
                                       r"axes \(i\) but expected 2 \(ij\)"):
        chain(notify="i->i")


def test_map_rank_against_event_rank():
    with pytest.raises(MapError, match=r"wait edge final_sum -> E: map 'i->ii' gives 2 indices "
                                       r"but the target has rank 1"):
        chain(wait="i->ii")


def test_region_rank_against_tensor():
    pb = ProgramBuilder("r")
    pb.input("A", (4, 4))
    pb.output("o", (4, 1))
    pb.grid("g", "row_sum", "i", (4,), reads={"A": "i"}, writes={"o": "i, 0"})
    with pytest.raises(MapError, match=r"region of tensor 'A' reads by task grid 'g'.*rank 2"):
        pb.build()


def test_out_of_range_event_index_names_edge_task_and_binding():
    p = chain(wait="i->i + 1")
    with pytest.raises(IndexOutOfRangeError,
                       match=r"wait edge final_sum -> E, task final_sum\(0\): map 'i->\(i \+ 1\)' "
                             r"gives index 1 in dimension 0 of size 1 at \{'n': 1\}"):
        run_pipeline(p)


def test_out_of_range_only_for_some_binding():
    # E has a fixed shape of 4: fine for n <= 4, out of range for larger n
    p = chain(n_hi=6, event_shape=(4,))
    with pytest.raises(IndexOutOfRangeError, match=r"notify edge partial_sum -> E.*'n': 6"):
        run_pipeline(p)


def test_event_nobody_notifies():
    p = chain(notify=None)
    with pytest.raises(UnnotifiedEventError, match=r"event 'E' is waited on by task grid\(s\) "
                                                   r"final_sum but no task grid notifies it"):
        run_pipeline(p)


def test_element_nobody_notifies():
    pb = ProgramBuilder("sparse")
    pb.input("A", (8, 4))
    pb.temp("p", (8, 1))
    pb.output("o", (4, 1))
    pb.event("E", (8,), wait_count=1)
    pb.grid("prod", "row_sum", "i", (4,), reads={"A": "2*i:2*i + 2, :"},
            writes={"p": "2*i:2*i + 2, :"}, notify={"E": "i->2*i"})
    pb.grid("cons", "row_sum", "i", (4,), reads={"p": "2*i:2*i + 2, :"}, writes={"o": "i, :"},
            wait={"E": "i->2*i + 1"})
    with pytest.raises(UnnotifiedEventError, match=r"event element E\[1\] waits for 1 notifies "
                                                   r"but no task notifies it"):
        run_pipeline(pb.build())


def test_wait_count_unreachable():
    with pytest.raises(WaitCountError, match=r"wait count of event element E\[0\] can never be "
                                             r"reached: it waits for 5 notifies but receives 4"):
        run_pipeline(chain(count=5))


def test_wait_count_exceeded():
    with pytest.raises(WaitCountError, match=r"E\[0\] is exceeded: it waits for 3 notifies but "
                                             r"receives 4"):
        run_pipeline(chain(count=3))


def test_data_dependent_notify_needs_declared_count():
    pb = ProgramBuilder("dd")
    pb.input("idx", (4,), "int32")
    pb.input("A", (4, 2))
    pb.output("o", (4, 1))
    pb.event("E", (4,))
    pb.grid("g", "row_sum", "i", (4,), reads={"A": "i, :"}, writes={"o": "i, :"},
            notify={"E": "i->idx[i]"})
    with pytest.raises(WaitCountError, match=r"event 'E' is notified through the data-dependent "
                                             r"map 'i->idx\[i\]' of task grid 'g'"):
        run_pipeline(pb.build())


def test_cycle_names_tasks_and_grids():
    pb = ProgramBuilder("cyclic")
    pb.input("A", (4, 2))
    pb.temp("x", (4, 1))
    pb.temp("y", (4, 1))
    pb.event("Ex", (4,))
    pb.event("Ey", (4,))
    pb.grid("f", "row_sum", "i", (4,), reads={"y": "i, :"}, writes={"x": "i, :"},
            wait={"Ey": "i->i"}, notify={"Ex": "i->i"})
    pb.grid("g", "row_sum", "i", (4,), reads={"x": "i, :"}, writes={"y": "i, :"},
            wait={"Ex": "i->i"}, notify={"Ey": "i->i"})
    with pytest.raises(CycleError, match=r"dependency cycle between task grids f, g.*"
                                         r"f\(0\) <- g\(0\) <- f\(0\)"):
        run_pipeline(pb.build())


def test_task_waiting_on_its_own_notify_is_a_cycle():
    pb = ProgramBuilder("self_wait")
    pb.input("A", (4, 2))
    pb.output("o", (4, 1))
    pb.event("E", (4,))
    pb.grid("g", "row_sum", "i", (4,), reads={"A": "i, :"}, writes={"o": "i, :"},
            wait={"E": "i->i"}, notify={"E": "i->i"})
    with pytest.raises(CycleError, match=r"g\(0\) <- g\(0\)"):
        run_pipeline(pb.build())


def test_stage_barriers_are_checked_grid_by_grid(monkeypatch):
    """Unfused mode's barriers (each grid waits on element s - 1 of the event it notifies at
    s) are no intra-grid waits: the acyclicity check stays on the grid graph instead of
    sorting every task (minutes for a decode step's dense barrier edges)."""
    from eventtensor.schedule.unfused import unfuse
    lower = importlib.import_module("eventtensor.lower")     # the package exports lower()

    tables = lower.build_tables(bind(run_pipeline(unfuse(run_pipeline(chain()))), {"n": 8}))

    def sort_tasks(_):
        raise AssertionError("stage barriers sent the check to the task-level sort")
    monkeypatch.setattr(lower, "topological_order", sort_tasks)
    lower.check_acyclic(tables)


def test_read_of_tensor_nobody_writes():
    pb = ProgramBuilder("orphan")
    pb.temp("t", (4, 2))
    pb.output("o", (4, 1))
    pb.grid("g", "row_sum", "i", (4,), reads={"t": "i, :"}, writes={"o": "i, :"})
    with pytest.raises(UnwrittenReadError, match=r"task grid 'g' reads tensor 't' but no task "
                                                 r"writes it and it is not an input"):
        run_pipeline(pb.build())


def test_read_of_region_nobody_writes():
    pb = ProgramBuilder("gap")
    n = pb.symbol("n", 1, 4)
    pb.input("A", (8 * n, 2))
    pb.temp("t", (8 * n, 1))
    pb.output("o", (n, 1))
    pb.event("E", (n,))
    # the producer writes only the first 4 of every 8 rows; the consumer reads all 8
    pb.grid("prod", "row_sum", "i", (n,), reads={"A": "8*i:8*i + 4, :"},
            writes={"t": "8*i:8*i + 4, :"}, notify={"E": "i->i"})
    pb.grid("cons", "sum_partials", "i", (n,), reads={"t": "8*i:8*i + 8, :"},
            writes={"o": "i, :"}, wait={"E": "i->i"})
    with pytest.raises(UnwrittenReadError, match=r"task cons\(0\) of task grid 'cons' reads "
                                                 r"t\[0:8, 0:1\], part of which no task writes"):
        run_pipeline(pb.build())


def test_symbol_out_of_declared_range():
    p = run_pipeline(chain(n_hi=8))
    with pytest.raises(SymbolRangeError, match=r"symbol n = 9 is out of its declared range "
                                               r"\[1, 8\]"):
        bind(p, {"n": 9})
    with pytest.raises(SymbolRangeError, match="symbol n has no value"):
        bind(p, {})


@pytest.mark.parametrize("mutate, message", [
    (lambda pb: pb.grid("h", "no_such_kind", "i", (1,)), "unknown task kind 'no_such_kind'"),
    (lambda pb: pb.input("A", (1,)), "tensor 'A' is declared twice"),
    (lambda pb: pb.grid("h", "row_sum", "i", (1,), reads={"out": "0:32, :"},
                        writes={"A": "0:32, 0:1"}), "task grid 'h' writes input tensor 'A'"),
    (lambda pb: pb.temp("bad", (4,), "complex64"), "tensor 'bad' has unsupported dtype"),
])
def test_structural_errors(mutate, message):
    with pytest.raises(ProgramError, match=message):
        chain(extra=lambda pb, n: mutate(pb))


def test_undeclared_symbol_in_shape():
    from eventtensor import sym
    pb = ProgramBuilder("u")
    pb.input("A", (sym.Sym("m", 1, 4), 2))
    with pytest.raises(ProgramError, match=r"shape of tensor 'A' uses undeclared symbol\(s\) m"):
        pb.build()


def test_index_tensor_must_be_integer():
    pb = ProgramBuilder("f")
    pb.input("idx", (4,), "float32")
    pb.input("A", (4, 2))
    pb.output("o", (4, 1))
    pb.event("E", (4,), wait_count=1)
    pb.grid("g", "row_sum", "i", (4,), reads={"A": "i, :"}, writes={"o": "i, :"},
            notify={"E": "i->idx[i]"})
    with pytest.raises(MapError, match=r"notify edge g -> E: map 'i->idx\[i\]' reads tensor "
                                       r"'idx' of dtype float32"):
        pb.build()
