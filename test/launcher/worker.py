# SPDX-License-Identifier: Apache-2.0
"""A stand-in rank for the launcher tests: reads kolorun's environment, talks to its store.

  worker.py topo [--ring]     publish host/<rank>, check the topology through the store, sum
                              rank+1 over all ranks with ADD; --ring also allreduces a vector
                              over direct TCP connections between the ranks (a ring)
  worker.py fail BAD CODE     connect; rank BAD exits CODE after 0.3 s, the others wait
  worker.py noconnect BAD     every rank but BAD connects; all wait
  worker.py connect_sleep S   connect, sleep S seconds, print "done"
  worker.py sigwait           connect; record any SIGINT/SIGTERM/SIGHUP, then exit 0
  worker.py env               print the KOLO_* environment as JSON
  worker.py echo              print to stdout and stderr, the last line without a newline
Options: --dir D writes D/pid.<rank> ("pid grandchild-pid") and D/sig.<rank>; --stubborn makes
the grandchild ignore SIGTERM (only SIGKILL stops it). Every wait is bounded (60 s).
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.environ.get("KOLO_TEST_LAUNCHER_PKG",
                                  os.path.join(HERE, os.pardir, os.pardir, "bindings",
                                               "launcher")))
from kolo_launcher.hosts import interface_ipv4  # noqa: E402
from store_client import StoreClient  # noqa: E402  (test/launcher, beside this file)

RANK = int(os.environ.get("KOLO_RANK", "-1"))
SIZE = int(os.environ.get("KOLO_SIZE", "0"))
TIMEOUT = 60.0


def opt(name, default=None):
    if name in sys.argv:
        return sys.argv[sys.argv.index(name) + 1]
    return default


def store():
    return StoreClient(os.environ["KOLO_RENDEZVOUS_ADDR"], int(os.environ["KOLO_RENDEZVOUS_PORT"]),
                       connect_timeout=TIMEOUT)


def topology():
    names = ["KOLO_RANK", "KOLO_SIZE", "KOLO_LOCAL_RANK", "KOLO_LOCAL_SIZE", "KOLO_CROSS_RANK",
             "KOLO_CROSS_SIZE"]
    t = {n[5:].lower(): int(os.environ[n]) for n in names}
    t["host"] = os.environ["KOLO_HOSTNAME"]
    return t


def barrier(s, name):
    if s.add("barrier/" + name, 1) == SIZE:
        s.set("barrier/%s/done" % name, b"1")
    s.wait(["barrier/%s/done" % name], timeout=TIMEOUT)


def ring_allreduce(s, vec):
    """Sum of every rank's vec, passed around a ring of direct TCP connections."""
    iface = os.environ.get("KOLO_GLOO_IFACE")
    addr = (interface_ipv4(iface) if iface else None) or "127.0.0.1"
    listener = socket.socket()
    listener.bind((addr, 0))
    listener.listen(1)
    listener.settimeout(TIMEOUT)
    s.set("addr/%d" % RANK, "%s:%d" % listener.getsockname())
    nxt = s.get("addr/%d" % ((RANK + 1) % SIZE), timeout=TIMEOUT).decode()
    host, port = nxt.rsplit(":", 1)
    out = socket.create_connection((host, int(port)), timeout=TIMEOUT)
    inc, _ = listener.accept()
    inc.settimeout(TIMEOUT)
    reader = inc.makefile("r")
    total, current = list(vec), list(vec)
    for _ in range(SIZE - 1):
        out.sendall((json.dumps(current) + "\n").encode())
        current = json.loads(reader.readline())
        total = [a + b for a, b in zip(total, current)]
    out.close()
    inc.close()
    me = "%s:%d" % listener.getsockname()
    listener.close()
    return total, me


def mode_topo():
    t = topology()
    with store() as s:
        s.set("host/%d" % RANK, t["host"])
        hosts = [s.get("host/%d" % r, timeout=TIMEOUT).decode() for r in range(SIZE)]
        s.add("sum", RANK + 1)
        barrier(s, "sum")
        result = dict(t, hosts=hosts, sum=s.get_int("sum"))
        if "--ring" in sys.argv:
            result["ring"], result["addr"] = ring_allreduce(
                s, [RANK + 1, 10 * (RANK + 1), 100 * RANK + 7])
        barrier(s, "end")  # nobody leaves while a peer still reads from the store
    print("RESULT " + json.dumps(result), flush=True)


def spawn_grandchild():
    if "--stubborn" in sys.argv:
        return subprocess.Popen(["sh", "-c", "trap '' TERM INT HUP; sleep 60 & wait; sleep 60"])
    return subprocess.Popen(["sleep", "60"])


def record_pids(child):
    d = opt("--dir")
    if d:
        with open(os.path.join(d, "pid.%d.tmp" % RANK), "w") as f:
            f.write("%d %d\n" % (os.getpid(), child.pid))
        os.replace(os.path.join(d, "pid.%d.tmp" % RANK), os.path.join(d, "pid.%d" % RANK))


def wait_forever():
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        time.sleep(0.05)
    sys.exit(99)


def mode_fail():
    bad, code = int(sys.argv[2]), int(sys.argv[3])
    child = spawn_grandchild()
    record_pids(child)  # before the store: the bad rank may fail as soon as every rank set it
    with store() as s:
        s.set("host/%d" % RANK, socket.gethostname())
        if RANK == bad:
            s.wait(["host/%d" % r for r in range(SIZE)], timeout=TIMEOUT)
            time.sleep(0.3)
            print("rank %d failing with %d" % (RANK, code), file=sys.stderr, flush=True)
            os._exit(code)
        wait_forever()


def mode_noconnect():
    bad = int(sys.argv[2])
    child = spawn_grandchild()
    record_pids(child)
    if RANK != bad:
        with store() as s:
            s.set("host/%d" % RANK, socket.gethostname())
    wait_forever()


def mode_connect_sleep():
    with store() as s:
        s.set("host/%d" % RANK, socket.gethostname())
    time.sleep(float(sys.argv[2]))
    print("done", flush=True)


def mode_sigwait():
    d = opt("--dir")

    def on_signal(signum, _frame):
        with open(os.path.join(d, "sig.%d" % RANK), "w") as f:
            f.write(signal.Signals(signum).name)
        os._exit(0)

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)
    child = spawn_grandchild()
    with store() as s:
        s.set("host/%d" % RANK, socket.gethostname())
    record_pids(child)
    wait_forever()


def mode_env():
    env = {k: v for k, v in os.environ.items() if k.startswith(("KOLO_", "TEST_", "NCCL_"))}
    print("RESULT " + json.dumps(env), flush=True)


def mode_echo():
    sys.stdout.write("line one\nline two\n")
    sys.stdout.flush()
    sys.stderr.write("an error line\n")
    sys.stderr.flush()
    sys.stdout.write("no newline at the end")
    sys.stdout.flush()


if __name__ == "__main__":
    {"topo": mode_topo, "fail": mode_fail, "noconnect": mode_noconnect, "sigwait": mode_sigwait,
     "connect_sleep": mode_connect_sleep,
     "env": mode_env, "echo": mode_echo}[sys.argv[1]]()
