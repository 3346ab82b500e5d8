#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Plots kolo-bench CSV files: one PNG per collective, bus bandwidth against message size.

    /usr/bin/python3 bench/plot.py mpi.csv [gloo.csv ...] [--out-dir DIR]
                                   [--metric busbw|algbw|time]

Every (transport, ranks, algorithm, dtype, redop) found in the files becomes one line, so the
native baseline and kolo's ring, or two transports, land on the same axes. Files are written as
DIR/<collective>.png (DIR defaults to the directory of the first CSV). Rows without a time
(a collective the transport has no native form of) are skipped.

matplotlib is optional: without it the script says so, prints what it would have plotted and
exits 0, so scripts that call it never fail on a machine without it.
"""

import argparse
import collections
import csv
import os
import sys

METRICS = {
    "busbw": ("busbw_gbps", "bus bandwidth (GB/s)"),
    "algbw": ("algbw_gbps", "algorithm bandwidth (GB/s)"),
    "time": ("time_us", "time per op (us)"),
}


def human_bytes(n):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return ("%d %s" % (n, unit)) if float(n).is_integer() else ("%.1f %s" % (n, unit))
        n /= 1024.0
    return str(n)


def read_series(paths, column):
    """{collective: {label: [(bytes, value), ...]}} from kolo-bench CSV files."""
    plots = collections.OrderedDict()
    for path in paths:
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            missing = {"collective", "bytes", "algorithm", column} - set(reader.fieldnames or [])
            if missing:
                raise ValueError("%s: not a kolo-bench CSV (missing %s)"
                                 % (path, ", ".join(sorted(missing))))
            for row in reader:
                if not row[column]:
                    continue
                label = "%s %s x%s %s" % (row["algorithm"], row.get("transport", "?"),
                                          row.get("ranks", "?"), row.get("dtype", ""))
                if row.get("redop") not in (None, "", "none", "sum"):
                    label += " " + row["redop"]
                series = plots.setdefault(row["collective"], collections.OrderedDict())
                series.setdefault(label, []).append((int(row["bytes"]), float(row[column])))
    for series in plots.values():
        for points in series.values():
            points.sort()
    return plots


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv", nargs="+", help="CSV files written by kolo-bench --csv")
    parser.add_argument("--out-dir", help="where the PNGs go (default: the first CSV's folder)")
    parser.add_argument("--metric", choices=sorted(METRICS), default="busbw")
    args = parser.parse_args(argv)
    column, axis_label = METRICS[args.metric]
    try:
        plots = read_series(args.csv, column)
    except (OSError, ValueError) as e:
        print("plot.py: %s" % e, file=sys.stderr)
        return 1
    if not plots:
        print("plot.py: no measured rows in %s" % ", ".join(args.csv), file=sys.stderr)
        return 1

    try:
        import matplotlib
        matplotlib.use("Agg")  # files only, no display needed
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot.py: matplotlib is not installed for %s; nothing drawn "
              "(install it, e.g. apt-get install python3-matplotlib, to get PNGs)."
              % sys.executable)
        for collective, series in plots.items():
            for label, points in series.items():
                print("  would plot %s / %s: %d sizes, %s .. %s" % (
                    collective, label, len(points), human_bytes(points[0][0]),
                    human_bytes(points[-1][0])))
        return 0

    out_dir = args.out_dir or os.path.dirname(os.path.abspath(args.csv[0]))
    os.makedirs(out_dir, exist_ok=True)
    for collective, series in plots.items():
        fig, ax = plt.subplots(figsize=(8, 5))
        for label, points in series.items():
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", markersize=3,
                    label=label)
        ax.set_xscale("log", base=2)
        if args.metric == "time":
            ax.set_yscale("log")
        ticks = sorted({p[0] for points in series.values() for p in points})
        step = max(1, len(ticks) // 10)
        ax.set_xticks(ticks[::step])
        ax.set_xticklabels([human_bytes(t) for t in ticks[::step]], rotation=45, ha="right")
        ax.set_xlabel("message size (bytes, nccl-tests convention)")
        ax.set_ylabel(axis_label)
        ax.set_title("kolo-bench: %s" % collective)
        ax.grid(True, which="both", alpha=0.3)
        if len(series) <= 8:
            ax.legend(fontsize="small")
        else:  # many series: beside the axes rather than over the curves
            ax.legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
        path = os.path.join(out_dir, "%s.png" % collective)
        fig.savefig(path, dpi=120, bbox_inches="tight")
        plt.close(fig)
        print("plot.py: wrote %s" % path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
