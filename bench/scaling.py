#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Scaling sweep: kolo-runtime-bench and kolo-bench at several rank counts over Gloo TCP, each
against Gloo's own ring and halving-doubling allreduce in the same job.

    /usr/bin/python3 bench/scaling.py                # np 2,4,8,16; local and netns -> build/scaling
    /usr/bin/python3 bench/scaling.py --quick --np 2 --mode local --out /tmp/s   # CI size

Modes:
  local  one host, kolorun -np N, KOLO_SHM=off (so ranks talk Gloo TCP over loopback);
  netns  two "hosts" built from network namespaces, as test/launcher/test_netns.py does: a
         launcher namespace L with a bridge and two hosts A, B joined to it by veth pairs;
         kolorun runs in L with -H A:N/2,B:N/2 --network-interface kolo0 and starts the ranks
         through "ip netns exec". The namespaces get names unique to this process and are
         deleted afterwards, whatever happens (every process left in them is stopped first);
         nothing outside them is touched and no traffic leaves them. Needs root and iproute2;
         without them the mode is skipped with a message.

Per (mode, np), two jobs:
  kolo-runtime-bench --sizes-file <one line "1"> --fusion on: the runtime's 4-byte allreduce
      latency (median of the slowest rank), Gloo's native allreduce through kolo's transport,
      kolo's ring, and Gloo's own ring and halving-doubling called directly;
  kolo-bench --ops allreduce --gloo-algorithms: 4 bytes and --large-bytes with kolo's ring,
      recursive doubling, halving-doubling, auto and Gloo native, plus gloo_ring / gloo_hd.

With --repeat K each (mode, np) runs K times and every figure is the minimum over them.
Writes <out>/scaling.csv (one row per mode and np; cost_model.py reads it), <out>/scaling.json
(the same plus every kolo-bench row) and the raw logs, and prints a markdown table. Exit status:
0 when every requested run produced its numbers (a skipped netns mode counts as produced), 1
otherwise. Standard library only.
"""

import argparse
import csv
import json
import math
import os
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.realpath(__file__))
ROOT = os.path.dirname(HERE)
KOLORUN = os.path.join(ROOT, "bindings", "launcher", "kolorun")
sys.path.insert(0, os.path.join(ROOT, "test", "support"))
from netns import IP, Unavailable, two_hosts  # noqa: E402  (the launcher tests' namespace hosts)

KB_ALGORITHMS = ["ring", "recursive_doubling", "halving_doubling", "auto", "native", "gloo_ring",
                 "gloo_hd"]
# scaling.csv columns (cost_model.py reads them by name)
COLUMNS = (["mode", "np", "hosts", "cores", "runtime_design", "runtime_us", "runtime_p90_us", "gloo_native_us",
            "kolo_ring_us", "gloo_ring_us", "gloo_hd_us", "large_bytes"] +
           ["kb_small_%s_us" % a for a in KB_ALGORITHMS] +
           ["kb_large_%s_us" % a for a in KB_ALGORITHMS])


def machine_cores():
    """The cores this sweep's ranks could run on (cost_model.py splits its fit at np = cores)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def parse_bytes(text):
    units = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = text.strip().upper().rstrip("B").rstrip("I")
    unit = t[-1] if t and t[-1] in units else ""
    return int(t[:len(t) - len(unit)]) * units[unit]


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=os.path.join(ROOT, "build"),
                   help="build directory with bench/kolo-bench and bench/kolo-runtime-bench")
    p.add_argument("--np", default="2,4,8,16", help="comma-separated rank counts (even for netns)")
    p.add_argument("--mode", default="local,netns", help="local, netns or both")
    p.add_argument("--latency-iters", type=int, default=300, help="runtime-bench 4-byte iterations")
    p.add_argument("--latency-warmup", type=int, default=30)
    p.add_argument("--iters", type=int, default=20, help="kolo-bench timed iterations per row")
    p.add_argument("--warmup", type=int, default=3, help="kolo-bench untimed iterations per row")
    p.add_argument("--large-bytes", default="4M", help="kolo-bench's large allreduce (4 * 4^k)")
    p.add_argument("--timeout", type=float, default=240, help="seconds per job before it is killed")
    p.add_argument("--repeat", type=int, default=1,
                   help="run each (mode, np) this many times; every figure is the minimum")
    p.add_argument("--quick", action="store_true",
                   help="CI size: 30 latency iterations, 3 kolo-bench iterations, large 4 KiB")
    p.add_argument("--out", help="directory for csv/json/logs (default: <build>/scaling)")
    a = p.parse_args(argv)
    if a.quick:
        a.latency_iters, a.latency_warmup, a.iters, a.warmup = 30, 5, 3, 1
        a.large_bytes = "4K"
    a.out = a.out or os.path.join(a.build, "scaling")
    a.np = [int(x) for x in a.np.split(",") if x]
    a.mode = [m for m in a.mode.split(",") if m]
    for m in a.mode:
        if m not in ("local", "netns"):
            p.error("unknown mode %r" % m)
    if a.repeat < 1:
        p.error("--repeat needs 1 or more")
    if not a.np or min(a.np) < 2:
        p.error("--np needs rank counts of 2 or more")
    a.large = parse_bytes(a.large_bytes)
    k = math.log(a.large / 4.0, 4) if a.large >= 16 else -1
    if k < 1 or abs(k - round(k)) > 1e-9 or a.large > (4 << 20):
        p.error("--large-bytes must be 4 * 4^k, at most 4M (16, 64, ..., 4K, 16K, ..., 4M)")
    return a


# ---- running one job ---------------------------------------------------------------------------
def run_job(argv, env, timeout, log_path):
    """Runs argv in its own process group; on timeout SIGTERM (kolorun stops its ranks), then
    SIGKILL of the group. Returns (returncode or None on timeout, stdout text)."""
    with open(log_path, "w") as log:
        log.write("$ %s\n" % " ".join(argv))
        log.flush()
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, start_new_session=True)
        try:
            out, _ = proc.communicate(timeout=timeout)
        except KeyboardInterrupt:  # the job is in its own session: stop it with us
            os.killpg(proc.pid, signal.SIGKILL)
            raise
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                out, _ = proc.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                out, _ = proc.communicate()
            log.write(out or "")
            log.write("\n# killed after %.0f s\n" % timeout)
            return None, out or ""
        log.write(out)
        return proc.returncode, out


def runtime_design():
    """Which coordinator the measured build has, for cost_model.py: "main" when a small cached
    allreduce rides in the control round (core/piggyback, KOLO_CONTROL_PIGGYBACK_BYTES, with
    the binomial-tree request gather), else "new" (recursive-doubling round, then Gloo's ring
    for the 4-byte data)."""
    return "main" if os.path.exists(os.path.join(ROOT, "core", "piggyback.cc")) else "new"


def job_env(extra=None):
    env = dict(os.environ)
    for name in list(env):  # a clean KOLO_* environment, as the launcher tests use
        if name.startswith(("KOLO_", "HOROVOD_")):
            del env[name]
    env.update({"KOLO_SHM": "off", "KOLO_TIMEOUT_SECONDS": "60", "KOLO_START_TIMEOUT": "60",
                "PYTHONDONTWRITEBYTECODE": "1"})
    env.update(extra or {})
    return env


def csv_rows(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return list(csv.DictReader(f))


def num(text):
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


class Launch(object):
    """How one mode starts a job of np ranks: the argv prefix and environment."""

    def __init__(self, mode, netns=None):
        self.mode, self.netns = mode, netns

    def prefix(self, np):
        if self.mode == "local":
            return [sys.executable, KOLORUN, "-np", str(np)], "localhost:%d" % np
        hosts = "%s:%d,%s:%d" % (self.netns["A"], np // 2, self.netns["B"], np - np // 2)
        return ([IP, "netns", "exec", self.netns["L"], sys.executable, KOLORUN, "-np", str(np),
                 "-H", hosts, "--network-interface", "kolo0"], hosts)

    def env(self):
        if self.mode == "local":
            return job_env()
        return job_env({"KOLO_LAUNCHER_REMOTE_SHELL": "%s netns exec {host} sh -c" % IP,
                        "KOLO_LAUNCHER_FORCE_REMOTE": "1",
                        "KOLO_LAUNCHER_KILL_GRACE_SECONDS": "1"})


def measure(args, launch, np, out_dir, run_index=0):
    """Both jobs at one (mode, np); returns (row dict, kolo-bench rows, error text or None)."""
    tag = "%s_np%d" % (launch.mode, np) + ("_r%d" % run_index if args.repeat > 1 else "")
    prefix, hosts = launch.prefix(np)
    row = {c: "" for c in COLUMNS}
    row.update({"mode": launch.mode, "np": np, "hosts": hosts, "cores": machine_cores(),
                "large_bytes": args.large,
                "runtime_design": runtime_design()})
    errors = []

    sizes = os.path.join(out_dir, "one_element.txt")
    with open(sizes, "w") as f:
        f.write("1\n")
    rt_csv = os.path.join(out_dir, "runtime_%s.csv" % tag)
    if os.path.exists(rt_csv):
        os.remove(rt_csv)  # the program appends
    rc, _ = run_job(prefix + [os.path.join(args.build, "bench", "kolo-runtime-bench"),
                              "--sizes-file", sizes, "--fusion", "on",
                              "--latency-iters", str(args.latency_iters),
                              "--latency-warmup", str(args.latency_warmup),
                              "--steps", "3", "--warmup-steps", "1", "--csv", rt_csv],
                    launch.env(), args.timeout, os.path.join(out_dir, "runtime_%s.log" % tag))
    rt = csv_rows(rt_csv)
    if rc != 0 or not rt:
        errors.append("kolo-runtime-bench %s: %s (log: runtime_%s.log)" %
                      (tag, "timed out" if rc is None else "exit status %s" % rc, tag))
    else:
        r = rt[-1]
        row.update({"runtime_us": r["lat_runtime_median_us"],
                    "runtime_p90_us": r["lat_runtime_p90_us"],
                    "gloo_native_us": r["lat_native_median_us"],
                    "kolo_ring_us": r["lat_ring_median_us"],
                    "gloo_ring_us": r.get("lat_gloo_ring_median_us", ""),
                    "gloo_hd_us": r.get("lat_gloo_hd_median_us", "")})
        if not row["gloo_ring_us"] or not row["gloo_hd_us"]:
            errors.append("kolo-runtime-bench %s: no Gloo ring / halving-doubling figures" % tag)

    kb_csv = os.path.join(out_dir, "kolobench_%s.csv" % tag)
    step = min(1024, int(round(math.sqrt(args.large / 4.0))))
    rc, _ = run_job(prefix + [os.path.join(args.build, "bench", "kolo-bench"), "--ops", "allreduce",
                              "--min-bytes", "4", "--max-bytes", str(args.large),
                              "--step-factor", str(step), "--iters", str(args.iters),
                              "--warmup", str(args.warmup), "--stat", "median", "--no-check",
                              "--algorithms", "ring,recursive_doubling,halving_doubling,auto,native",
                              "--gloo-algorithms", "--csv", kb_csv],
                    launch.env(), args.timeout, os.path.join(out_dir, "kolobench_%s.log" % tag))
    kb = csv_rows(kb_csv) if rc == 0 else []
    if rc != 0 or not kb:
        errors.append("kolo-bench %s: %s (log: kolobench_%s.log)" %
                      (tag, "timed out" if rc is None else "exit status %s" % rc, tag))
    for r in kb:
        size = {"4": "small", str(args.large): "large"}.get(r["bytes"])
        if size and r["algorithm"] in KB_ALGORITHMS:
            row["kb_%s_%s_us" % (size, r["algorithm"])] = r["time_us"]
    return row, kb, "; ".join(errors) or None


def min_of(runs):
    """Per figure, the minimum over the repeated runs (the least disturbed one)."""
    row = dict(runs[0])
    for c in COLUMNS:
        vals = [num(r[c]) for r in runs if num(r[c]) is not None]
        if c.endswith("_us") and vals:
            row[c] = "%.3f" % min(vals)
    return row


# ---- report ------------------------------------------------------------------------------------
def fmt(v, digits=0):
    x = num(v)
    return "-" if x is None else ("%.*f" % (digits, x))


def best_gloo(row):
    vals = [num(row[k]) for k in ("gloo_ring_us", "gloo_hd_us") if num(row[k]) is not None]
    return min(vals) if vals else None


def best_kolo(row, size):
    best = None
    for a in ("ring", "recursive_doubling", "halving_doubling", "auto"):
        v = num(row["kb_%s_%s_us" % (size, a)])
        if v is not None and (best is None or v < best[1]):
            best = (a, v)
    return best


def short(a):
    return {"recursive_doubling": "rd", "halving_doubling": "hd"}.get(a, a)


def markdown(rows, large):
    # the large column in ms from 1 MiB up, else in us: a 4 KiB allreduce (--quick) takes tens
    # of us, which "%.1f" ms printed as 0.0
    unit, lscale, ldigits = ("ms", 1e-3, 1) if large >= (1 << 20) else ("us", 1.0, 0)
    lines = [
        "| np | mode | kolo runtime 4 B (us) | Gloo ring 4 B | Gloo HD 4 B | runtime / best Gloo "
        "| kolo-bench 4 B: best kolo / Gloo ring / Gloo HD (us) | kolo-bench %s: best kolo / "
        "Gloo ring / Gloo HD (%s) |" % (human(large), unit),
        "| ---: | --- | ---: | ---: | ---: | ---: | --- | --- |"]
    for r in rows:
        g = best_gloo(r)
        rt = num(r["runtime_us"])
        ratio = "%.1f" % (rt / g) if rt is not None and g else "-"
        cells = []
        for size, scale, digits in (("small", 1.0, 0), ("large", lscale, ldigits)):
            b = best_kolo(r, size)
            k = "-" if b is None else "%.*f (%s)" % (digits, b[1] * scale, short(b[0]))
            gr, gh = num(r["kb_%s_gloo_ring_us" % size]), num(r["kb_%s_gloo_hd_us" % size])
            cells.append("%s / %s / %s" % (
                k, "-" if gr is None else "%.*f" % (digits, gr * scale),
                "-" if gh is None else "%.*f" % (digits, gh * scale)))
        lines.append("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
            r["np"], r["mode"], fmt(r["runtime_us"]), fmt(r["gloo_ring_us"]),
            fmt(r["gloo_hd_us"]), ratio, cells[0], cells[1]))
    return "\n".join(lines)


def human(n):
    for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size and n % size == 0:
            return "%d %s" % (n // size, unit)
    return "%d B" % n


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    for prog in ("kolo-bench", "kolo-runtime-bench"):
        path = os.path.join(args.build, "bench", prog)
        if not os.access(path, os.X_OK):
            sys.exit("scaling.py: %s is not built (ninja -C %s %s)" % (path, args.build, prog))
    os.makedirs(args.out, exist_ok=True)
    out_dir = os.path.abspath(args.out)
    rows, kb_all, failures, notes = [], [], [], []
    started = time.time()
    for mode in args.mode:
        nps = args.np
        hosts = None
        launch = Launch(mode)
        if mode == "netns":
            odd = [n for n in nps if n % 2]
            if odd:
                notes.append("netns: skipped odd np %s (two hosts of equal size)" % odd)
                nps = [n for n in nps if n % 2 == 0]
            hosts = two_hosts("ksc%d" % (os.getpid() % 100000), "10.99.0")
            try:
                names = hosts.__enter__()
            except Unavailable as e:
                notes.append("netns: skipped (%s)" % e)
                continue
            launch = Launch(mode, names)
        try:
            for np in nps:
                t0 = time.time()
                runs = []
                for k in range(args.repeat):
                    row, kb, error = measure(args, launch, np, out_dir, k)
                    runs.append(row)
                    kb_all += [dict(r, mode=mode, repeat=k) for r in kb]
                    if error:
                        failures.append(error)
                rows.append(min_of(runs))
                print("# %s np %d: %.0f s%s" % (mode, np, time.time() - t0,
                                                 "" if not error else " -- " + error),
                      file=sys.stderr, flush=True)
        finally:
            if hosts is not None:
                hosts.__exit__(None, None, None)

    with open(os.path.join(out_dir, "scaling.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        for r in rows:
            w.writerow(r)
    with open(os.path.join(out_dir, "scaling.json"), "w") as f:
        json.dump({"command": " ".join([sys.executable] + sys.argv), "rows": rows,
                   "kolo_bench_rows": kb_all, "notes": notes, "failures": failures,
                   "seconds": round(time.time() - started, 1)}, f, indent=1)
    print(markdown(rows, args.large))
    print("\n4 B columns: median us of the slowest rank per iteration; kolo-bench figures are "
          "medians too. rd = recursive doubling, hd = halving-doubling.")
    for n in notes:
        print("# note: " + n)
    for e in failures:
        print("# FAILED: " + e)
    print("# results: %s/scaling.csv, scaling.json (%.0f s)" % (out_dir, time.time() - started))
    return 1 if failures or not rows and not notes else 0


if __name__ == "__main__":
    sys.exit(main())
