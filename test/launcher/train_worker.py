# SPDX-License-Identifier: Apache-2.0
"""A rank that trains with the kolo runtime (allreduces of numpy arrays) until one rank dies.

  train_worker.py DIR [--hang RANK] [--victim RANK]

The victim rank (default: the last) writes DIR/killed ("<unix time>") and SIGKILLs itself at
step 20. Every other rank records the SIGTERM/SIGINT it gets in DIR/sig.<rank> ("NAME <unix
time>"), writes DIR/pid.<rank>, and when an allreduce raises KoloInternalError, writes the
message to DIR/caught.<rank> and exits 3 -- except the --hang rank, which then ignores SIGTERM
and sleeps until kolorun kills it. Every wait is bounded (60 s): a survivor that never sees
the failure exits 99 and writes DIR/finished.<rank>.
"""

import os
import signal
import sys
import time

import numpy as np

import kolo

DIR = sys.argv[1]


def opt(name, default):
    return int(sys.argv[sys.argv.index(name) + 1]) if name in sys.argv else default


def write(name, text):
    tmp = os.path.join(DIR, name + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, os.path.join(DIR, name))


def main():
    kolo.init()
    rank, size = kolo.rank(), kolo.size()
    victim, hang = opt("--victim", size - 1), opt("--hang", -1)

    def on_signal(signum, _frame):
        write("sig.%d" % rank, "%s %.3f" % (signal.Signals(signum).name, time.time()))
        if rank != hang:
            os._exit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    write("pid.%d" % rank, "%d 0" % os.getpid())  # conftest.read_pids: "pid grandchild-pid"
    deadline = time.monotonic() + 60
    grad = np.full(1000, rank + 1, np.float32)
    step = 0
    try:
        while time.monotonic() < deadline:
            out = kolo.allreduce(grad, name="grad.%d" % (step % 4), op=kolo.Sum)
            assert out[0] == size * (size + 1) / 2, out[0]
            step += 1
            if rank == victim and step == 20:
                write("killed", "%.3f" % time.time())
                os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(0.005)
    except kolo.KoloInternalError as e:
        write("caught.%d" % rank, "%.3f %s" % (time.time(), e))
        if rank == hang:
            while time.monotonic() < deadline:  # ignores the failure; SIGTERM is recorded only
                time.sleep(0.05)
        sys.exit(3)
    write("finished.%d" % rank, str(step))
    sys.exit(99)


if __name__ == "__main__":
    main()
