#!/usr/bin/env python3
"""Where a synchronous call's time goes: joins the guest's and the worker's
marks (common/trace.h, a build with -DPVGPU_TRACE) by request id and prints,
per opcode, the median and 10th percentile of each leg in microseconds.

usage: scripts/trace_breakdown.py /tmp/pvgpu-trace-*.txt
"""
import collections
import statistics
import sys

LEGS = [
    (0, 1, "guest: encode + publish request"),
    (1, 2, "request crossing: worker sees it"),
    (2, 3, "worker: read payload"),
    (3, 4, "worker: decode + dispatch + executor"),
    (4, 5, "worker: bookkeeping + device output"),
    (5, 6, "worker: encode + publish reply"),
    (6, 7, "reply crossing: guest sees it"),
    (7, 8, "guest: read + decode reply"),
    (0, 8, "total (client call)"),
]
OPCODE = 0x10000


def main(paths):
    marks = collections.defaultdict(dict)
    for path in paths:
        with open(path) as f:
            for line in f:
                i, p, ns = (int(x) for x in line.split())
                marks[i].setdefault(p, ns)
    by_op = collections.defaultdict(list)
    for i, m in marks.items():
        ops = [p - OPCODE for p in m if p >= OPCODE]
        if ops and all(p in m for p in range(9)):
            by_op[ops[0]].append(m)
    for op, ms in sorted(by_op.items()):
        print(f"opcode {op:#06x}: {len(ms)} calls (us: median, p10)")
        for a, b, name in LEGS:
            d = sorted((m[b] - m[a]) / 1000 for m in ms)
            print(f"  {name:40s} {statistics.median(d):7.3f} {d[len(d) // 10]:7.3f}")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
