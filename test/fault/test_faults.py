# SPDX-License-Identifier: Apache-2.0
"""Fault injection, multi-process: a rank killed, stopped, exiting or closing its sockets; the
rendezvous store gone; the same faults under kolorun and mpirun.

Run: /usr/bin/python3 -m pytest -q test/fault/test_faults.py (paths: see faultlib.py).
Each job has a hard deadline (faultlib.HARD_S); every test checks that no process it started
(marked with a unique --tag) is left behind. KOLO_TIMEOUT_SECONDS is 3 in every job.
"""

import os
import re
import signal
import time

import pytest

import faultlib as fl
from faultlib import EXIT_INIT_FAILED, EXIT_NAMED, Job, SLACK_S, TIMEOUT_S

NP = 3
TRANSPORTS = {"shm": "auto", "tcp": "off"}  # KOLO_SHM: shared memory, or Gloo over TCP
FAULT_CODES = {"PEER_LOST", "ABORTED", "TIMEOUT"}

# (mode, victim, transports). close-sockets is TCP only: the shm transport does not use sockets
# once connected, so shutting them down is not a fault there.
KILL_CASES = [
    ("kill-init", 0, "shm tcp"), ("kill-init", 2, "shm tcp"),
    ("kill-before", 0, "shm tcp"), ("kill-before", 2, "shm tcp"),
    ("kill-during", 0, "shm tcp"), ("kill-during", 1, "shm tcp"),
    ("kill-after", 1, "shm tcp"), ("kill-after", 2, "shm tcp"),
    ("kill-mid", 0, "shm tcp"), ("kill-mid", 1, "shm tcp"), ("kill-mid", 2, "shm tcp"),
    ("exit", 0, "shm tcp"), ("exit", 2, "shm tcp"),
    ("close-sockets", 1, "tcp"), ("close-sockets", 0, "tcp"),
]
PARAMS = [pytest.param(mode, victim, t, id="%s-v%d-%s" % (mode, victim, t))
          for mode, victim, ts in KILL_CASES for t in ts.split()]


def record_latencies(job, case, transport, victim):
    start = fl.victim_wall(job.text(victim))
    if start is None:
        return
    for r in range(NP):
        if r == victim:
            continue
        res = job.result(r)
        if res.get("wall"):
            fl.LATENCIES.append((case, transport, res["code"], res["wall"] - start))


@pytest.fixture
def jobs(tmp_path):
    started = []

    def make(*args, **kw):
        job = Job(tmp_path, *args, **kw)
        started.append(job)
        return job

    yield make
    for job in started:
        job.close()


def check_survivor(job, rank, victim, codes=FAULT_CODES, bound=TIMEOUT_S + SLACK_S):
    """The survivor saw an error naming the victim within `bound`, the next submission failed
    at once naming it too, and kolo_shutdown returned promptly."""
    res = job.result(rank)
    where = "rank %d: %s\n%s" % (rank, res, job.text())
    assert res["role"] == "survivor", where
    assert res["code"] in codes, where
    assert res["named"] == 1, "the error does not name rank %d: %s" % (victim, where)
    assert res["elapsed"] <= bound, where
    assert res["next"] in ("ABORTED", "SHUTDOWN", "PEER_LOST"), where
    assert res["next_named"] == 1, where
    assert res["shutdown_s"] < 2.0, where
    return res


@pytest.mark.parametrize("mode,victim,transport", PARAMS)
def test_rank_lost(jobs, mode, victim, transport):
    job = jobs(NP, ["--mode", mode, "--victim", victim, "--bound", 30], shm=TRANSPORTS[transport])
    codes = job.wait()
    victim_exit = {"exit": 0, "close-sockets": EXIT_NAMED}.get(mode, -signal.SIGKILL)
    assert codes[victim] == victim_exit, "victim exit %s\n%s" % (codes[victim], job.text())
    for r in range(NP):
        if r == victim:
            continue
        res = job.result(r)
        if mode == "kill-init" and res["role"] == "init":
            # The victim died while this rank was still connecting: init fails promptly. Over
            # TCP, Gloo names the peer's address only (its pairs are not connected yet).
            assert codes[r] == EXIT_INIT_FAILED and res["code"] in FAULT_CODES, job.text()
            assert res["elapsed"] < TIMEOUT_S + SLACK_S, job.text()
            assert res["named"] == 1 or transport == "tcp", job.text()
            continue
        assert codes[r] == EXIT_NAMED, "rank %d exit %s\n%s" % (r, codes[r], job.text())
        check_survivor(job, r, victim)
    record_latencies(job, "%s v%d" % (mode, victim), transport, victim)
    if mode == "kill-mid":
        m = re.search(r"action=SIGKILL changed=(\d+)/64", job.text(victim))
        assert m and 0 < int(m.group(1)) < 64, "not killed mid-transfer:\n" + job.text(victim)
    assert job.elapsed() < 25, job.text()


# (ranks, victim, transport). At 5+ ranks the stopped last rank is two hops away from some
# survivors, which time out waiting for a live rank that waits for it: they must still name it
# (the live rank's provisional note is followed to the stopped one's missing note).
STOP_CASES = [(NP, v, t) for v in (0, 1) for t in sorted(TRANSPORTS)] + [
    (5, 4, "tcp"), (6, 5, "tcp"), (5, 4, "shm")]


@pytest.mark.parametrize("np_,victim,transport", STOP_CASES)
def test_rank_stopped(jobs, np_, victim, transport):
    """SIGSTOP past the timeout: the survivors fail within about KOLO_TIMEOUT_SECONDS naming
    the stopped rank; once continued, the stopped rank fails too instead of hanging."""
    job = jobs(np_, ["--mode", "stop", "--victim", victim, "--bound", 30],
               shm=TRANSPORTS[transport])
    survivors = [r for r in range(np_) if r != victim]
    codes = job.wait(survivors)
    for r in survivors:
        assert codes[r] == EXIT_NAMED, "rank %d exit %s\n%s" % (r, codes[r], job.text())
        check_survivor(job, r, victim, bound=TIMEOUT_S + 1.0 + SLACK_S)
    if np_ == NP:
        record_latencies(job, "stop v%d" % victim, transport, victim)
    job.signal(victim, signal.SIGCONT)
    assert job.wait([victim], seconds=job.elapsed() + 15)[victim] == EXIT_NAMED, job.text()
    assert job.result(victim)["code"] in FAULT_CODES, job.text()


def test_rank_shuts_down_alone(jobs):
    """One rank calls kolo_shutdown while the others go on: they get SHUTDOWN naming it."""
    job = jobs(NP, ["--mode", "shutdown", "--victim", 1, "--bound", 30])
    codes = job.wait()
    assert codes[1] == 0, job.text()
    for r in (0, 2):
        assert codes[r] == EXIT_NAMED, job.text()
        check_survivor(job, r, 1, codes={"SHUTDOWN"})


@pytest.mark.parametrize("transport", sorted(TRANSPORTS))
def test_recurring_name_with_a_late_rank(jobs, transport):
    """Regression: a cached op announced to rank 0 after the heartbeat, then completed through
    the cache, left stale requests that completed the name's next submission early (wrong sums
    on the early ranks, a hang on the late one)."""
    job = jobs(NP, ["--mode", "recurring", "--delay-ms", 600], shm=TRANSPORTS[transport],
               env={"KOLO_HEARTBEAT_SECONDS": "0.2"})
    codes = job.wait()
    for r in range(NP):
        assert codes[r] == 0 and job.result(r)["code"] == "OK", job.text()


@pytest.mark.parametrize("transport", sorted(TRANSPORTS))
def test_store_gone_at_start(jobs, tmp_path, transport):
    """No store server at the address: init fails within KOLO_START_TIMEOUT naming it."""
    server = fl.StoreServer(tmp_path)
    port = server.port
    server.stop()
    job = jobs(NP, ["--mode", "init"], port=port, shm=TRANSPORTS[transport],
               env={"KOLO_START_TIMEOUT": "3"})
    codes = job.wait(seconds=3 + 2 * SLACK_S)
    for r in range(NP):
        res = job.result(r)
        assert codes[r] == EXIT_INIT_FAILED, job.text()
        assert res["code"] in ("TIMEOUT", "IO", "PEER_LOST"), job.text()
        assert "127.0.0.1:%d" % port in res["msg"], job.text()
        assert res["elapsed"] < 3 + SLACK_S, job.text()


def test_rank_never_arrives(jobs):
    """Rank 2 of 3 never starts: ranks 0 and 1 fail init within KOLO_START_TIMEOUT naming it."""
    job = jobs(NP, ["--mode", "init"], ranks=[0, 1], env={"KOLO_START_TIMEOUT": "3"})
    codes = job.wait(seconds=3 + 2 * SLACK_S)
    for r in (0, 1):
        res = job.result(r)
        assert codes[r] == EXIT_INIT_FAILED, job.text()
        assert res["code"] == "TIMEOUT", job.text()
        assert re.search(r"\b2\b", res["msg"]), "rank 2 not named: " + job.text()
        assert res["elapsed"] < 3 + SLACK_S, job.text()


@pytest.mark.parametrize("transport", sorted(TRANSPORTS))
def test_store_gone_after_start(jobs, transport):
    """The store server dies after init: collectives go on (the store only serves rendezvous);
    creating a process set, which needs it on TCP, fails promptly instead of hanging."""
    job = jobs(NP, ["--mode", "ok", "--pause-ms", 1500, "--add-set", "--bound", 30],
               shm=TRANSPORTS[transport])
    deadline = time.monotonic() + 15
    while job.text().count("FAULT_READY") < NP:
        assert time.monotonic() < deadline and all(
            p.poll() is None for p in job.procs.values()), job.text()
        time.sleep(0.02)
    job.server.stop()
    codes = job.wait()
    for r in range(NP):
        res = job.result(r)
        assert res["code"] == "OK", job.text()  # the collectives after the store died
        set_line = re.search(r"FAULT_SET rank=%d code=(\w+) elapsed=([\d.]+)" % r, job.text(r))
        assert set_line, job.text()
        assert float(set_line.group(2)) < TIMEOUT_S + SLACK_S, job.text()
        if set_line.group(1) != "OK":
            assert codes[r] == EXIT_NAMED and "store" in job.text(r), job.text()


# ---- through the launchers -------------------------------------------------------------------

# Survivors get FAILURE_GRACE_S to exit by themselves after the first failure (kolorun's
# --failure-grace-seconds; 10 s by default), then TERM and, KILL_GRACE_S later, KILL.
FAILURE_GRACE_S = 1


def launcher_env(**extra):
    env = fl.base_env(KOLO_LAUNCHER_KILL_GRACE_SECONDS=2,
                      KOLO_LAUNCHER_FAILURE_GRACE_SECONDS=FAILURE_GRACE_S, **extra)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


@pytest.mark.parametrize("mode", ["kill-mid", "exit"])
def test_kolorun_rank_lost(mode):
    """kolorun exits non-zero naming the failed rank, quickly, and leaves nothing behind."""
    tag = fl.new_tag()
    argv = [fl.python(), fl.KOLORUN, "-np", str(NP), fl.WORKER, "--mode", mode, "--victim", "1",
            "--bound", "30", "--tag", tag]
    try:
        rc, out, wall = fl.run_tool(argv, launcher_env(), 40)
    finally:
        left = fl.reap_leftovers(tag)
    assert not left, "processes left behind: %s" % left
    assert rc != 0, out
    if mode == "kill-mid":
        assert rc in (128 + signal.SIGKILL, EXIT_NAMED), out
    assert re.search(r"kolorun: .*rank \d", out), out
    assert re.search(r"rank 1\b", out), out
    assert wall < 20, out


def test_kolorun_rank_stopped():
    """A SIGSTOPped rank under kolorun: the others give up after the timeout, kolorun stops the
    job (the stopped rank included) and exits with their status."""
    tag = fl.new_tag()
    argv = [fl.python(), fl.KOLORUN, "-np", str(NP), fl.WORKER, "--mode", "stop", "--victim", "1",
            "--bound", "30", "--tag", tag]
    try:
        rc, out, wall = fl.run_tool(argv, launcher_env(), 40)
    finally:
        left = fl.reap_leftovers(tag)
    assert not left, "processes left behind: %s" % left
    assert rc == EXIT_NAMED, out
    assert re.search(r"rank 1\b", out), out
    # The stopped rank never exits: the job ends after the grace window, TERM and KILL.
    assert wall < TIMEOUT_S + FAILURE_GRACE_S + 2 + 2 * SLACK_S, out


def mpi_argv(tag, mode, victim):
    return [fl.MPIEXEC, "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
            "-np", str(NP), "-x", "KOLO_CONTROLLER=mpi", "-x", "KOLO_TIMEOUT_SECONDS",
            "-x", "KOLO_SHM", fl.WORKER, "--mode", mode, "--victim", str(victim), "--bound", "30",
            "--tag", tag]


@pytest.mark.skipif(not fl.MPIEXEC, reason="no mpirun (KOLO_MPIEXEC unset)")
@pytest.mark.parametrize("transport", sorted(TRANSPORTS))
@pytest.mark.parametrize("mode", ["kill-mid", "stop"])
def test_mpirun_rank_lost(mode, transport):
    """Open MPI tears the whole job down when a rank dies (or when the survivors exit after the
    timeout around a stopped rank): mpirun exits non-zero in bounded time, nothing is left."""
    tag = fl.new_tag()
    env = fl.base_env(KOLO_CONTROLLER="mpi", KOLO_SHM=TRANSPORTS[transport])
    try:
        rc, out, wall = fl.run_tool(mpi_argv(tag, mode, 1), env, 40)
    finally:
        left = fl.reap_leftovers(tag)
    assert not left, "processes left behind: %s" % left
    assert rc != 0, out
    assert wall < 25, out


OUTSIDER_SCRIPT = r'''
import json, os, signal, sys, threading, time
sys.path.insert(0, os.environ["KOLO_PYTHON_PACKAGE"])
import numpy as np
import kolo
kolo.init()
r = kolo.rank()
pair = kolo.add_process_set([0, 1])
pidfile = os.path.join(os.environ["OUT_DIR"], "stopped.pid")
result = {"rank": r}
start = time.monotonic()
try:
    if r == 1:
        with open(pidfile, "w") as f:
            f.write(str(os.getpid()))
        threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGSTOP)).start()
    if r == 2:
        # Waits in rounds whose batches of {0, 1} it skips: each next exchange of the round
        # waits for 0 and 1 up to the stall shutdown.
        kolo.allreduce(np.ones(1, np.float32), name="only_rank_2")
    for i in range(100000):
        kolo.allreduce(np.ones(4000000, np.float32), name="pair", process_set=pair)
except Exception as e:
    result.update(error=str(e), after=time.monotonic() - start)
if r == 0:
    # Like a script that catches the error and goes on (writes a checkpoint): it stays alive,
    # so nothing closes; then it wakes the stopped rank so that the job can end.
    time.sleep(float(os.environ["LINGER"]))
    with open(pidfile) as f:
        os.kill(int(f.read()), signal.SIGCONT)
with open(os.path.join(os.environ["OUT_DIR"], "rank%d.json" % r), "w") as f:
    json.dump(result, f)
kolo.shutdown()
'''


@pytest.mark.skipif(not fl.MPIEXEC, reason="no mpirun (KOLO_MPIEXEC unset)")
def test_mpirun_rank_outside_a_set_hears_a_members_abort(tmp_path):
    """Under MPI without shared memory, rank 1 of the set {0, 1} stops; rank 0 times out and
    aborts its runtime but stays alive. Rank 2, outside the set, waits in the coordinator's
    exchange after rounds with a batch of {0, 1}, whose deadline is the stall shutdown (a long
    batch of a set is no failure): it hears of rank 0's abort on the MPI transport's abort
    channel within seconds, with the cause naming rank 1. Before, nothing told it (MPI has no
    closed connection) and it waited the stall shutdown (1800 s by default, 30 here)."""
    tag = fl.new_tag()
    script = tmp_path / "outsider.py"
    script.write_text(OUTSIDER_SCRIPT)
    env = fl.base_env(KOLO_CONTROLLER="mpi", KOLO_SHM="off", KOLO_STALL_SHUTDOWN_TIME_SECONDS=30,
                      OUT_DIR=tmp_path, LINGER=8,
                      KOLO_PYTHON_PACKAGE=os.environ.get("KOLO_PYTHON_PACKAGE")
                      or os.path.join(fl.REPO, "bindings", "python"))
    if os.environ.get("KOLO_LIBRARY"):
        env["KOLO_LIBRARY"] = os.environ["KOLO_LIBRARY"]
    argv = [fl.MPIEXEC, "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
            "-np", "3", "-x", "KOLO_CONTROLLER", "-x", "KOLO_SHM", "-x", "KOLO_TIMEOUT_SECONDS",
            "-x", "KOLO_STALL_SHUTDOWN_TIME_SECONDS", "-x", "OUT_DIR", "-x", "LINGER",
            "-x", "KOLO_PYTHON_PACKAGE", "-x", "KOLO_LIBRARY", "-x", "KOLO_LOG_LEVEL",
            fl.python(), str(script), "--tag", tag]
    try:
        rc, out, wall = fl.run_tool(argv, env, 45)
    finally:
        left = fl.reap_leftovers(tag)
    assert not left, "processes left behind: %s" % left
    import json
    path = tmp_path / "rank2.json"
    assert path.exists(), "rank 2 wrote no result:\n%s" % out
    outsider = json.loads(path.read_text())
    assert "error" in outsider, out
    assert "global rank 0 aborted its runtime" in outsider["error"], outsider
    assert "rank 1 (global 1)" in outsider["error"], outsider
    assert outsider["after"] < 0.5 + fl.TIMEOUT_S + fl.SLACK_S + 2, outsider
