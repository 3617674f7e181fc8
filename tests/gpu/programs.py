"""Programs the GPU tests and the sanitizer run besides the paper examples."""
from eventtensor.frontend import ProgramBuilder


def nop_joins(n: int):
    """Row sums joined by `nop` tasks (thread 0 alone waits and notifies them): join(i) waits
    for the row sums of rows i and i + 1, the second pass adds both up; plus wait-free row sums
    of another tensor, so the CTA's other threads run ahead of thread 0 into bodies."""
    pb = ProgramBuilder(f"nop_joins{n}")
    pb.input("A", (n + 1, 8))
    pb.input("B", (n, 8))
    pb.temp("S", (n + 1, 1))
    pb.output("out", (n, 1))
    pb.output("b_sum", (n, 1))
    pb.event("R", (n + 1,))
    pb.event("J", (n,))
    pb.grid("rows", "row_sum", "i", (n + 1,), reads={"A": "i, :"}, writes={"S": "i, :"},
            notify={"R": "i->i"})
    pb.grid("join", "nop", "i", (n,), wait={"R": "i->i:i + 2"}, notify={"J": "i->i"})
    pb.grid("free", "row_sum", "i", (n,), reads={"B": "i, :"}, writes={"b_sum": "i, :"})
    pb.grid("pairs", "sum_partials", "i", (n,), reads={"S": "i:i + 2, :"},
            writes={"out": "i, :"}, wait={"J": "i->i"})
    return pb.build()
