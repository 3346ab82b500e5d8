#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A minimal local launcher for the Python tests: run_ranks.py -np N [--timeout S] CMD ...

Starts N copies of CMD with the environment kolo's runtime reads (KOLO_RANK, KOLO_SIZE,
KOLO_LOCAL_RANK/SIZE, KOLO_CROSS_RANK/SIZE, KOLO_CONTROLLER=gloo) and a file-store rendezvous
(KOLO_RENDEZVOUS_DIR, a fresh temporary folder), prefixes every output line with "[rank]",
and exits with the first non-zero exit status. When a rank fails the others get a grace period
to fail on their own (their collectives report the lost peer), then are killed; the whole job
is killed after --timeout seconds. kolorun does the same job and more; this script keeps the
tests runnable where kolorun is not built.
"""

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

GRACE_SECONDS = 30.0


def _pump(stream, prefix, out, lock):
    for line in iter(stream.readline, b""):
        with lock:
            out.write(prefix + line)
            out.flush()
    stream.close()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-np", "--num-proc", type=int, required=True, dest="np")
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if args.np < 1 or not command:
        parser.error("need -np >= 1 and a command")

    rendezvous = tempfile.mkdtemp(prefix="kolo-ranks-")
    lock = threading.Lock()
    out = sys.stdout.buffer
    procs, pumps = [], []
    try:
        for r in range(args.np):
            env = dict(os.environ)
            for var in ("KOLO_RENDEZVOUS_ADDR", "KOLO_RENDEZVOUS_PORT"):
                env.pop(var, None)
            env.update(KOLO_RANK=str(r), KOLO_SIZE=str(args.np), KOLO_LOCAL_RANK=str(r),
                       KOLO_LOCAL_SIZE=str(args.np), KOLO_CROSS_RANK="0", KOLO_CROSS_SIZE="1",
                       KOLO_CONTROLLER="gloo", KOLO_RENDEZVOUS_DIR=rendezvous)
            p = subprocess.Popen(command, env=env, stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, start_new_session=True)
            procs.append(p)
            t = threading.Thread(target=_pump, args=(p.stdout, b"[%d]: " % r, out, lock),
                                 daemon=True)
            t.start()
            pumps.append(t)
        return _supervise(procs, args.timeout)
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        for t in pumps:
            t.join(5)
        shutil.rmtree(rendezvous, ignore_errors=True)


def _supervise(procs, timeout):
    start = time.monotonic()
    failed_at = None
    while True:
        codes = [p.poll() for p in procs]
        if all(c is not None for c in codes):
            bad = [c for c in codes if c != 0]
            return bad[0] if bad else 0
        now = time.monotonic()
        if failed_at is None and any(c not in (None, 0) for c in codes):
            failed_at = now
        if now - start > timeout or (failed_at is not None and now - failed_at > GRACE_SECONDS):
            why = "timed out" if now - start > timeout else "a rank failed"
            sys.stderr.write("run_ranks: %s; killing ranks %s\n"
                             % (why, [i for i, c in enumerate(codes) if c is None]))
            for p in procs:
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGKILL)
            for p in procs:
                p.wait()
            bad = [c for c in codes if c not in (None, 0)]
            return bad[0] if bad else 124
        time.sleep(0.05)


if __name__ == "__main__":
    sys.exit(main())
