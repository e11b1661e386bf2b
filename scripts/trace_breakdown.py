#!/usr/bin/env python3
"""Where a synchronous call's time goes: joins the guest's and the worker's
marks (common/trace.h, a build with -DPVGPU_TRACE) by request id and prints,
per opcode, the median and 10th percentile of each leg in microseconds.
Staged copies (through the window's slots) also get a line per block leg,
and the slowest and fastest of them block by block.

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
# An async operation (a launch...) has no reply: its legs up to the worker's
# handler returning.
ASYNC_LEGS = LEGS[:4] + [(0, 4, "total (guest entry to handler done)")]
OPCODE = 0x10000
G_SENT, G_RETURN = 1, 8
# common/trace.h: a staged copy's block k marks base + k
G_BLOCK, W_ISSUE, W_RETIRE = 0x20000, 0x30000, 0x40000


def us(d):
    return sorted(x / 1000 for x in d)


def blocks(m):
    """A staged copy's blocks: (guest copied, DMA issued, DMA done) each."""
    out = []
    for k in range(0xffff):
        b = tuple(m.get(base + k) for base in (G_BLOCK, W_ISSUE, W_RETIRE))
        if b[0] is None:
            break
        out.append(b)
    return out


def staged(ms):
    """Per staged copy: the guest's copy-in or -out, the DMA, the waits."""
    rows = []
    for m in ms:
        bl = blocks(m)
        if not bl or G_SENT not in m or G_RETURN not in m:
            continue
        t0 = m[G_SENT]
        dma = [(i, r) for _, i, r in bl if i and r]
        rows.append({"total": m[G_RETURN] - t0, "copy": bl[-1][0] - t0,
                     "dma": dma[-1][1] - dma[0][0] if dma else 0,
                     "tail": m[G_RETURN] - bl[-1][0], "bl": bl, "t0": t0})
    if not rows:
        return
    print(f"  staged: {len(rows)} copies of {len(rows[0]['bl'])} blocks "
          "(us: median, p10, p90, max)")
    for key, name in (("total", "sent to return"),
                      ("copy", "sent to last block copied"),
                      ("dma", "worker: first DMA issued to last done"),
                      ("tail", "last block copied to return")):
        d = us(r[key] for r in rows)
        print(f"  {name:40s} {statistics.median(d):7.1f} {d[len(d) // 10]:7.1f}"
              f" {d[len(d) * 9 // 10]:7.1f} {d[-1]:7.1f}")
    rows.sort(key=lambda r: r["total"])
    for label, r in (("fastest", rows[0]), ("slowest", rows[-1])):
        print(f"  {label} ({r['total'] / 1000:.1f} us), from sent: block "
              "copied / DMA issued / DMA done")
        for k, b in enumerate(r["bl"]):
            print(f"    {k:3d} " + " / ".join(
                f"{(x - r['t0']) / 1000:8.1f}" if x else "       -" for x in b))


def main(paths):
    marks = collections.defaultdict(dict)
    for path in paths:
        with open(path) as f:
            for line in f:
                i, p, ns = (int(x) for x in line.split())
                marks[i].setdefault(p, ns)
    by_op = collections.defaultdict(list)
    for i, m in marks.items():
        ops = [p - OPCODE for p in m if OPCODE <= p < 2 * OPCODE]
        if ops and all(p in m for p in range(9)):
            by_op[(ops[0], 0)].append(m)
        elif ops and all(p in m for p in range(5)) and 5 not in m:
            by_op[(ops[0], 1)].append(m)
    for (op, is_async), ms in sorted(by_op.items()):
        kind = "async operations" if is_async else "calls"
        print(f"opcode {op:#06x}: {len(ms)} {kind} (us: median, p10, p90)")
        for a, b, name in ASYNC_LEGS if is_async else LEGS:
            d = sorted((m[b] - m[a]) / 1000 for m in ms)
            print(f"  {name:40s} {statistics.median(d):7.3f} {d[len(d) // 10]:7.3f}"
                  f" {d[len(d) * 9 // 10]:7.3f}")
        staged(ms)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
