#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Elastic training's two costs at 4 ranks on this machine (issue 14, "Measured"), from the
timestamped lines of examples/elastic_train.py under kolorun's elastic mode:

  recovery: a worker SIGKILLs itself at step 30 (4 -> 3 ranks); the time from its death to the
            first step completed by the new world (rank 0's next STEP line with size 3);
  scale-up: the discovery script's host list goes from localhost:3 to localhost:4 after step
            30; the time from that change to the first step of the 4-rank world, and the part
            of it the new worker spent starting up (process start and imports, until it waits
            for its round).

    KOLO_LIBRARY=build/bindings/c/libkolo.so PYTHONPATH=bindings/python \\
        python3 bench/elastic_bench.py [--repeat 3]

Prints one line per run and the medians. Needs torch (the python running this script is used
for the workers).
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
KOLORUN = os.path.join(REPO, "bindings", "launcher", "kolorun")
EXAMPLE = os.path.join(REPO, "examples", "elastic_train.py")
STEP = re.compile(r"\]<stdout>:STEP ([0-9.]+) round (\d+) size (\d+) step (\d+)")


def job(np, hosts_text, extra, on_line=None, timeout=180):
    d = tempfile.mkdtemp(prefix="kolo_elastic_bench")
    hosts = os.path.join(d, "hosts")
    with open(hosts, "w") as f:
        f.write(hosts_text + "\n")
    script = os.path.join(d, "discover.sh")
    with open(script, "w") as f:
        f.write("#!/bin/sh\ncat %s\n" % hosts)
    os.chmod(script, 0o755)
    env = dict(os.environ, KOLO_ELASTIC_DISCOVERY_INTERVAL="0.2")
    argv = [sys.executable, KOLORUN, "-np", str(np), "--min-np", "2", "--max-np", "4",
            "--host-discovery-script", script, sys.executable, EXAMPLE, "--epochs", "4",
            "--log-steps", "--step-sleep", "0.01"] + extra
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    killer = threading.Timer(timeout, proc.kill)
    killer.start()
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if on_line:
            on_line(line, hosts)
    proc.wait()
    killer.cancel()
    if proc.returncode != 0:
        raise RuntimeError("job failed (%d):\n%s" % (proc.returncode, "".join(lines[-30:])))
    return lines


def steps(lines):
    out = []
    for line in lines:
        m = STEP.search(line)
        if m:
            out.append((float(m.group(1)), int(m.group(3)), int(m.group(4))))
    return out


def recovery():
    lines = job(4, "localhost:4", ["--kill-rank", "3", "--kill-step", "30"])
    died = [float(l.rsplit(" at ", 1)[1]) for l in lines if "kills itself at step" in l][0]
    first = min(t for t, size, _ in steps(lines) if size == 3 and t > died)
    return first - died


def scale_up():
    changed = []

    def on_line(line, hosts):
        m = STEP.search(line)
        if m and not changed and int(m.group(4)) >= 30:
            with open(hosts + ".new", "w") as f:
                f.write("localhost:4\n")
            os.replace(hosts + ".new", hosts)
            changed.append(time.time())

    lines = job(3, "localhost:3", ["--epochs", "25"], on_line)
    first = min(t for t, size, _ in steps(lines) if size == 4)
    new = [l for l in lines if l.startswith("[3]<stdout>:worker 3 started")][0]
    started, ready = (float(x) for x in re.findall(r"([0-9]{9,}\.[0-9]+)", new))
    return first - changed[0], ready - started


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--repeat", type=int, default=3)
    a = p.parse_args()
    rec, up, boot = [], [], []
    for i in range(a.repeat):
        rec.append(recovery())
        print("run %d: death -> first step on 3 ranks: %.2f s" % (i, rec[-1]), flush=True)
        total, startup = scale_up()
        up.append(total)
        boot.append(startup)
        print("run %d: host list 3 -> 4 slots -> first step on 4 ranks: %.2f s (new worker's "
              "start-up: %.2f s)" % (i, total, startup), flush=True)
    print("median over %d runs: recovery %.2f s; scale-up %.2f s, of which the new worker's "
          "start-up %.2f s" % (a.repeat, statistics.median(rec), statistics.median(up),
                              statistics.median(boot)))


if __name__ == "__main__":
    main()
