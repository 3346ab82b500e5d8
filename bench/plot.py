#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Plots kolo-bench CSV files: one PNG per collective, bus bandwidth against message size.

    /usr/bin/python3 bench/plot.py mpi.csv [gloo.csv ...] [--out-dir DIR]
                                   [--metric busbw|algbw|time] [--logy] [--prefix NAME]
                                   [--collectives LIST]
                                   [--cpu TEXT] [--date TEXT] [--title TEXT]

Every (transport, ranks, algorithm, dtype, redop) found in the files becomes one line, so the
native baseline and kolo's ring, or two transports, land on the same axes. Files are written as
DIR/<prefix><collective>.png (DIR defaults to the directory of the first CSV). Rows without a
time (a collective the transport has no native form of) are skipped. The title names the
collective, the transports and the rank counts; --cpu and --date add a second line, so a PNG
says where and when it was measured.

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


# Legend names: "native" is the transport's own collective (the baseline), the others kolo's.
ALGORITHM_NAMES = {
    "native": "native (transport's own)",
    "ring": "kolo's own (ring)",
    "auto": "kolo auto",
    "recursive_doubling": "kolo recursive doubling",
    "halving_doubling": "kolo halving-doubling",
    "tree": "kolo tree",
    "bruck": "kolo Bruck",
    "gloo_ring": "Gloo ring (direct)",
    "gloo_hd": "Gloo halving-doubling (direct)",
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
                label = (ALGORITHM_NAMES.get(row["algorithm"], row["algorithm"]),
                         row.get("transport", "?"), "%s ranks" % row.get("ranks", "?"),
                         row.get("dtype", ""), row.get("redop", ""))
                series = plots.setdefault(row["collective"], collections.OrderedDict())
                series.setdefault(label, []).append((int(row["bytes"]), float(row[column])))
    for collective, series in plots.items():
        for points in series.values():
            points.sort()
        plots[collective] = collections.OrderedDict(
            zip(short_labels(list(series)), series.values()))
    return plots


def short_labels(keys):
    """Legend texts: the parts of each key that differ between the lines of one plot.

    The algorithm is always kept; a transport, rank count, dtype or reduction that every line
    shares is left to the title."""
    keep = [0] + [i for i in range(1, len(keys[0])) if len({k[i] for k in keys}) > 1]
    return [", ".join(k[i] for i in keep if k[i] not in ("", "-")) for k in keys]


def describe_runs(paths):
    """'shm, 2 ranks, float32' for the title, from the files' transport and ranks columns."""
    transports, ranks, dtypes = [], [], []
    for path in paths:
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                for seen, value in ((transports, row.get("transport")),
                                    (ranks, row.get("ranks")), (dtypes, row.get("dtype"))):
                    if value and value not in seen:
                        seen.append(value)
    text = " / ".join(transports) or "?"
    if ranks:
        text += ", %s ranks" % "/".join(ranks)
    if dtypes:
        text += ", " + "/".join(dtypes)
    return text


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv", nargs="+", help="CSV files written by kolo-bench --csv")
    parser.add_argument("--out-dir", help="where the PNGs go (default: the first CSV's folder)")
    parser.add_argument("--metric", choices=sorted(METRICS), default="busbw")
    parser.add_argument("--collectives", help="comma-separated collectives to draw (default: all)")
    parser.add_argument("--logy", action="store_true",
                        help="log-scale y axis (for lines that differ 10x or more)")
    parser.add_argument("--prefix", default="",
                        help="file name prefix: DIR/<prefix><collective>.png")
    parser.add_argument("--cpu", help="CPU model for the title, e.g. from lscpu")
    parser.add_argument("--date", help="date of the run for the title")
    parser.add_argument("--title", help="words after the collective in the title "
                        "(default: the transports and rank counts found in the files)")
    args = parser.parse_args(argv)
    column, axis_label = METRICS[args.metric]
    try:
        plots = read_series(args.csv, column)
    except (OSError, ValueError) as e:
        print("plot.py: %s" % e, file=sys.stderr)
        return 1
    if args.collectives:
        wanted = args.collectives.split(",")
        plots = collections.OrderedDict((c, s) for c, s in plots.items() if c in wanted)
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
        logy = args.metric == "time" or args.logy
        if logy:
            ax.set_yscale("log")
        ticks = sorted({p[0] for points in series.values() for p in points})
        step = max(1, len(ticks) // 10)
        ax.set_xticks(ticks[::step])
        ax.set_xticklabels([human_bytes(t) for t in ticks[::step]], rotation=45, ha="right")
        ax.set_xlabel('message size (nccl-tests "size"; log scale)')
        ax.set_ylabel(axis_label + ("; log scale" if logy else ""))
        if not logy:
            ax.set_ylim(bottom=0)
        title = "kolo-bench %s: %s" % (collective, args.title or describe_runs(args.csv))
        where = ", ".join(x for x in (args.cpu, args.date) if x)
        if where:
            title += "\n" + where
        ax.set_title(title, fontsize="medium")
        ax.grid(True, which="both", alpha=0.3)
        if len(series) <= 8:
            ax.legend(fontsize="small")
        else:  # many series: beside the axes rather than over the curves
            ax.legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
        path = os.path.join(out_dir, "%s%s.png" % (args.prefix, collective))
        fig.savefig(path, dpi=120, bbox_inches="tight")
        plt.close(fig)
        print("plot.py: wrote %s" % path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
