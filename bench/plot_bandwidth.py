#!/usr/bin/env python3
"""Plot the bandwidth shmoo of two or more `pvgpu-bandwidth --json` outputs.

    plot_bandwidth.py -o shmoo.png native=native.json unix=unix.json shm=shm.json
    plot_bandwidth.py -o shmoo.png unix=compare-unix.json shm=compare-shm.json

Each argument is [LABEL=]FILE.  A file may be a plain run (one curve, called
LABEL, or "native"/"pvgpu" from the library it loaded) or a `--compare` run
(two curves: its native run, called "native", and its pvgpu run, called
LABEL).  Only the first native curve is drawn when several files carry one.
A `socket_baseline` in any file is drawn as a dashed line in every panel.

One panel per direction and host memory (H2D/D2H x pinned/pageable), MB/s
(1 MB = 1e6 bytes) against the copy size on a log scale.
"""
import argparse
import json
import sys

PANELS = [("h2d", "pinned"), ("h2d", "pageable"),
          ("d2h", "pinned"), ("d2h", "pageable")]


def size_label(n):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return "%d %s" % (n >> shift, unit)
    return "%d B" % n


def through_pvgpu(run):
    """Whether pvgpu's libcuda.so.1 served the run ("driver_pvgpu"); output
    written before the runtime was linked in says "pvgpu_shim" instead."""
    lib = run.get("library", {})
    return bool(lib.get("driver_pvgpu", lib.get("pvgpu_shim")))


def curve(run, metric):
    """{(dir, memory): [(bytes, MB/s), ...]} of one run's results."""
    out = {}
    for r in run.get("results", []):
        value = r.get(metric)
        if value is None:
            continue
        out.setdefault((r["direction"], r["memory"]), []).append(
            (r["bytes"], value))
    for points in out.values():
        points.sort()
    return out


def load(args_files, metric):
    """Curves [(label, curve)] and the first socket baseline found."""
    curves, baseline, have_native = [], None, False
    for arg in args_files:
        label, sep, path = arg.partition("=")
        if not sep:
            label, path = None, arg
        try:
            with open(path) as f:
                doc = json.load(f)
        except (OSError, ValueError) as e:
            sys.exit("plot_bandwidth.py: %s: %s" % (path, e))
        if doc.get("benchmark") != "pvgpu-bandwidth":
            sys.exit("plot_bandwidth.py: %s is not pvgpu-bandwidth --json "
                     "output" % path)
        if doc.get("mode") == "compare":
            runs = [("native", doc["native"]), (label or "pvgpu", doc["pvgpu"])]
        else:
            runs = [(label or ("pvgpu" if through_pvgpu(doc) else "native"),
                     doc)]
        for name, run in runs:
            is_native = not through_pvgpu(run)
            if is_native and have_native and name == "native":
                continue        # one native reference is enough
            have_native |= is_native
            curves.append((name, curve(run, metric)))
            if baseline is None and run.get("socket_baseline"):
                baseline = run["socket_baseline"]
        if baseline is None and doc.get("socket_baseline"):
            baseline = doc["socket_baseline"]
    return curves, baseline


def main():
    ap = argparse.ArgumentParser(
        description="Plot pvgpu-bandwidth --json outputs (MB/s vs size).")
    ap.add_argument("files", nargs="+", metavar="[LABEL=]FILE")
    ap.add_argument("-o", "--output", default="bandwidth.png",
                    help="PNG to write (default bandwidth.png)")
    ap.add_argument("--metric", default="mbps", choices=["mbps", "mbps_wall"],
                    help="cudaEvent (mbps, default) or wall-clock figures")
    ap.add_argument("--title", default="pvgpu-bandwidth: synchronous "
                    "cudaMemcpy")
    args = ap.parse_args()

    curves, baseline = load(args.files, args.metric)
    if len(curves) < 2:
        sys.exit("plot_bandwidth.py: need at least two curves to compare")

    import matplotlib
    matplotlib.use("Agg")       # no display needed
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(12, 8), sharex=True)
    sizes = sorted({b for _, c in curves for pts in c.values()
                    for b, _ in pts})
    for ax, (direction, memory) in zip(axes.flat, PANELS):
        for name, c in curves:
            pts = c.get((direction, memory))
            if pts:
                ax.plot([b for b, _ in pts], [v for _, v in pts],
                        marker="o", markersize=3, label=name)
        if baseline:
            ax.plot([s["bytes"] for s in baseline],
                    [s["mbps"] for s in baseline], linestyle="--",
                    color="grey", label="unix socket baseline")
        ax.set_xscale("log", base=2)
        ax.set_title("%s %s" % (direction.upper(), memory))
        ax.set_ylabel("MB/s (1 MB = 1e6 bytes)")
        ax.grid(True, which="major", alpha=0.3)
        ax.set_ylim(bottom=0)
        if sizes:
            step = max(1, len(sizes) // 10)
            ticks = sizes[::step]
            ax.set_xticks(ticks)
            ax.set_xticklabels([size_label(s) for s in ticks], rotation=45,
                               fontsize=8)
        ax.legend(fontsize=8)
    for ax in axes[1]:
        ax.set_xlabel("copy size")
    fig.suptitle(args.title + (" (wall clock)" if args.metric == "mbps_wall"
                               else ""))
    fig.tight_layout()
    fig.savefig(args.output, dpi=120)
    print("wrote %s" % args.output)


if __name__ == "__main__":
    main()
