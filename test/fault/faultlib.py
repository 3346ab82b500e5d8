# SPDX-License-Identifier: Apache-2.0
"""Helpers of the fault-injection tests: start a store server and N fault_worker ranks, bound
every wait, parse FAULT_RESULT lines, and find processes a test left behind.

Paths come from the environment (CTest sets them; defaults fit a build in build-fault):
  KOLO_FAULT_WORKER  the fault_worker binary     KOLO_STORE_SERVER  kolo-store-server
  KOLO_KOLORUN       bindings/launcher/kolorun   KOLO_MPIEXEC       mpirun (optional)
"""

import os
import re
import signal
import subprocess
import sys
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, os.pardir, os.pardir))
BUILD = os.environ.get("KOLO_FAULT_BUILD_DIR") or os.path.join(REPO, "build-fault")
WORKER = os.environ.get("KOLO_FAULT_WORKER") or os.path.join(
    BUILD, "test", "fault", "kolo_fault_worker")
PROBE = os.environ.get("KOLO_FAULT_PROBE") or os.path.join(
    BUILD, "test", "fault", "kolo_fault_probe")
STORE_SERVER = os.environ.get("KOLO_STORE_SERVER") or os.path.join(
    BUILD, "test", "support", "kolo-store-server")
KOLORUN = os.environ.get("KOLO_KOLORUN") or os.path.join(REPO, "bindings", "launcher", "kolorun")
MPIEXEC = os.environ.get("KOLO_MPIEXEC", "")

TIMEOUT_S = 3.0   # KOLO_TIMEOUT_SECONDS of every job
SLACK_S = 4.0     # scheduling slack on a loaded 2-core machine
HARD_S = 45.0     # no test job may run longer than this

# Figures printed at the end of a pytest session (conftest.py): (case, transport, survivor's
# code, seconds from the fault to the survivor's error), and bad inputs tried per front end.
LATENCIES = []
BAD_INPUTS = {}


def summary_lines():
    lines = []
    for front, n in sorted(BAD_INPUTS.items()):
        lines.append("%s: %d bad inputs tried, each checked for its exception and message"
                     % (front, n))
    if LATENCIES:
        lines.append("fault detection (fault -> survivor's error), per case and transport:")
        cases = {}
        for case, transport, code, secs in LATENCIES:
            cases.setdefault((case, transport), []).append((secs, code))
        for (case, transport), rows in sorted(cases.items()):
            lines.append("  %-18s %-4s survivors=%d max=%.3f s codes=%s" % (
                case, transport, len(rows), max(x for x, _ in rows),
                ",".join(sorted({c for _, c in rows}))))
    return lines


RESULT_RE = re.compile(r"^FAULT_RESULT (.*?) msg=(.*)$")
EXIT_NAMED, EXIT_UNNAMED, EXIT_NO_FAULT, EXIT_INIT_FAILED = 3, 4, 5, 6


def base_env(**extra):
    """The caller's environment without KOLO_*/HOROVOD_* knobs, plus `extra`."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("KOLO_") and not k.startswith("HOROVOD_")}
    env.update({"KOLO_TIMEOUT_SECONDS": str(TIMEOUT_S), "KOLO_START_TIMEOUT": "10",
                "KOLO_LOG_LEVEL": "error"})
    env.update({k: str(v) for k, v in extra.items()})
    return env


def parse_results(text):
    """[{field: value, ..., "msg": text}] of every FAULT_RESULT line."""
    out = []
    for line in text.splitlines():
        m = RESULT_RE.match(line.strip())
        if not m:
            continue
        fields = dict(kv.split("=", 1) for kv in m.group(1).split())
        fields["msg"] = m.group(2)
        for key in ("rank", "named", "next_named"):
            fields[key] = int(fields[key])
        for key in ("elapsed", "shutdown_s", "wall"):
            if key in fields:
                fields[key] = float(fields[key])
        out.append(fields)
    return out


def new_tag():
    return "kolofault-" + uuid.uuid4().hex[:12]


def tagged_pids(tag):
    """Live (non-zombie) processes whose command line contains `tag`."""
    found = []
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open("/proc/%s/cmdline" % entry, "rb") as f:
                cmd = f.read()
            with open("/proc/%s/stat" % entry, "rb") as f:
                stat = f.read()
        except OSError:
            continue
        if tag.encode() in cmd and stat[stat.rfind(b")") + 2:].split()[0] != b"Z":
            found.append(int(entry))
    return found


def wait_gone(tag, seconds=5.0):
    """Waits until no process carries `tag`; returns the leftovers (empty when clean)."""
    deadline = time.monotonic() + seconds
    while True:
        left = tagged_pids(tag)
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.05)


def reap_leftovers(tag):
    """wait_gone, then SIGKILLs (after SIGCONT) whatever is left so that a failing test does
    not leave processes behind either; returns the leftovers found."""
    left = wait_gone(tag)
    for pid in left:
        for sig in (signal.SIGCONT, signal.SIGKILL):
            try:
                os.kill(pid, sig)
            except OSError:
                pass
    return left


def victim_wall(text):
    """Wall time of the victim's fault (its FAULT_VICTIM line), or None."""
    m = re.search(r"^FAULT_VICTIM .*wall=([\d.]+)", text, re.M)
    return float(m.group(1)) if m else None


class StoreServer:
    """kolo-store-server on 127.0.0.1 with a free port."""

    def __init__(self, tmp_path):
        self.log = open(os.path.join(str(tmp_path), "store.err"), "wb")
        self.proc = subprocess.Popen(
            [STORE_SERVER, "--host", "127.0.0.1", "--port", "0", "--ignore-stdin",
             "--max-seconds", str(int(HARD_S) + 30)],
            stdout=subprocess.PIPE, stderr=self.log, stdin=subprocess.DEVNULL)
        line = self.proc.stdout.readline().decode().strip()
        assert line.isdigit(), "kolo-store-server printed %r" % line
        self.port = int(line)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)
        self.log.close()


class Job:
    """N fault_worker ranks over Gloo (KOLO_SHM as given) with a store server of their own."""

    def __init__(self, tmp_path, np, args, shm="auto", ranks=None, port=None, env=None,
                 program=None):
        self.tmp = str(tmp_path)
        self.tag = new_tag()
        self.server = None if port is not None else StoreServer(tmp_path)
        self.port = port if port is not None else self.server.port
        self.procs = {}
        self.outputs = {}
        self.start = time.monotonic()
        for r in (range(np) if ranks is None else ranks):
            rank_env = base_env(KOLO_RANK=r, KOLO_SIZE=np, KOLO_LOCAL_RANK=r, KOLO_LOCAL_SIZE=np,
                                KOLO_CONTROLLER="gloo", KOLO_RENDEZVOUS_ADDR="127.0.0.1",
                                KOLO_RENDEZVOUS_PORT=self.port, KOLO_SHM=shm)
            rank_env.update({k: str(v) for k, v in (env or {}).items()})
            out = open(os.path.join(self.tmp, "rank%d.log" % r), "wb")
            self.outputs[r] = out.name
            self.procs[r] = subprocess.Popen(
                [program or WORKER] + [str(a) for a in args] + ["--tag", self.tag], env=rank_env,
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            out.close()

    def wait(self, ranks=None, seconds=HARD_S):
        """Waits for the ranks (all by default); returns {rank: exit status}. Kills the whole
        job and fails on the hard deadline: a hang is a failure, never a stuck test."""
        deadline = self.start + seconds
        codes = {}
        for r in (self.procs if ranks is None else ranks):
            left = deadline - time.monotonic()
            try:
                codes[r] = self.procs[r].wait(timeout=max(0.0, left))
            except subprocess.TimeoutExpired:
                self.kill()
                raise AssertionError("rank %d still running after %.0f s (a hang)\n%s"
                                     % (r, seconds, self.text()))
        return codes

    def elapsed(self):
        return time.monotonic() - self.start

    def text(self, rank=None):
        parts = []
        for r in (sorted(self.outputs) if rank is None else [rank]):
            with open(self.outputs[r], "rb") as f:
                parts.append("--- rank %d ---\n%s" % (r, f.read().decode(errors="replace")))
        return "\n".join(parts)

    def result(self, rank):
        res = parse_results(self.text(rank))
        assert len(res) == 1, "rank %d printed %d FAULT_RESULT lines\n%s" % (
            rank, len(res), self.text())
        return res[0]

    def signal(self, rank, sig):
        self.procs[rank].send_signal(sig)

    def kill(self):
        for p in self.procs.values():
            if p.poll() is None:
                try:
                    p.send_signal(signal.SIGCONT)
                    p.kill()
                except OSError:
                    pass
        for p in self.procs.values():
            p.wait(timeout=10)

    def close(self):
        self.kill()
        if self.server is not None:
            self.server.stop()
        left = wait_gone(self.tag)
        assert not left, "processes left behind: %s" % left


def run_tool(argv, env, seconds):
    """Runs kolorun/mpirun with a hard deadline; returns (exit status, output, wall seconds)."""
    start = time.monotonic()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate(timeout=10)
        raise AssertionError("%s still running after %.0f s:\n%s"
                             % (argv[0], seconds, out.decode(errors="replace")))
    return proc.returncode, out.decode(errors="replace"), time.monotonic() - start


def python():
    return sys.executable
