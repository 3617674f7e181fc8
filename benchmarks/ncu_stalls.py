"""Warp-stall samples of one kernel from Nsight Compute's source page, summed by reason:
over the whole kernel and over the instructions outside its hottest stretch of code (the
dispatch loop and the small task bodies, where a decode step's critical path runs at B = 1).

    python3 benchmarks/ncu_stalls.py ncu_B1_source.csv.gz > ncu_B1_stalls.md

The input: `ncu --import REP --page source --csv --print-source sass | gzip` (what
scripts/ncu_decode.sh writes). "Hottest stretch": the window of 2000 instructions with the
most executed instructions (the streaming linear's loop in the decode kernel).
"""
from __future__ import annotations

import csv
import gzip
import sys
from collections import Counter


def stalls(path: str) -> str:
    with gzip.open(path, "rt") as f:
        rows = list(csv.reader(f))
    head, data = rows[1], rows[2:]
    col = {h: i for i, h in enumerate(head)}
    reasons = [h for h in head if h.startswith("stall_") and "Not Issued" not in h]

    def num(row, name):
        try:
            return int(row[col[name]])
        except ValueError:
            return 0
    executed = [num(r, "Instructions Executed") for r in data]
    width = 2000
    sums = [sum(executed[i:i + width]) for i in range(0, max(1, len(data) - width), 100)]
    hot = 100 * max(range(len(sums)), key=sums.__getitem__)
    total, rest = Counter(), Counter()
    for i, r in enumerate(data):
        for s in reasons:
            total[s] += num(r, s)
            if not hot <= i < hot + width:
                rest[s] += num(r, s)
    lines = [f"# Warp-stall samples of {rows[0][1]}", "",
             f"{len(data)} instructions; the hottest stretch: instructions {hot} to "
             f"{hot + width} ({sum(executed[hot:hot + width]) / max(1, sum(executed)):.0%} of "
             "those executed).", "",
             "| reason | all samples | share | outside the hottest stretch | share |",
             "|---|---:|---:|---:|---:|"]
    t, o = sum(total.values()) or 1, sum(rest.values()) or 1
    for s, v in total.most_common():
        if v:
            lines.append(f"| {s} | {v} | {v / t:.1%} | {rest[s]} | {rest[s] / o:.1%} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(stalls(sys.argv[1]))
