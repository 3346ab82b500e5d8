# SPDX-License-Identifier: Apache-2.0
"""Adversarial probes of the runtime through the C API at 2-8 ranks: cross-rank mismatches the
negotiator must catch, ranks submitting in different orders or not at all (the stall check must
name them), zero-size and > 2^31-byte tensors, 2000 ops in flight, ops from 8 threads at once, a
rank shutting down under the others' pending ops (probe_worker.cc); a rank SIGKILLed in the
middle of a large broadcast / alltoall / allgather / allreduce, during negotiation and during a
process set's creation at 4 and 8 ranks (fault_worker.cc); the same over mpirun and across two
network-namespace hosts.

Run: /usr/bin/python3 -m pytest -q test/fault/test_probes.py (paths: see faultlib.py).
"""

import os
import re
import signal
import sys

import pytest

import faultlib as fl
from faultlib import EXIT_NAMED, SLACK_S, TIMEOUT_S
from test_faults import check_survivor, jobs  # noqa: F401 - the fixture

TRANSPORTS = {"shm": "auto", "tcp": "off"}

# probe_worker cases that need no special settings; every rank runs them in this order.
CASES = ("mismatch-dtype,mismatch-shape,mismatch-op,mismatch-prescale,mismatch-postscale,"
         "mismatch-root,mismatch-allgather-dims,mismatch-allgather-dtype,mismatch-reducescatter,"
         "mismatch-alltoall-dims,mismatch-optype,mismatch-grouped-size,mismatch-set-members,"
         "cached-mismatch,sets,swapped-order,zero-size,many-inflight,threads,shutdown-inflight")
PROBE_RE = re.compile(r"PROBE case=(\S+) rank=(-?\d+) result=(\w+) secs=([\d.]+) detail=(.*)")

# Known bugs: cases that fail today, skipped by name until the engine is fixed (see README.md,
# "Open bugs"). Remove an entry to turn its test on; KOLO_FAULT_KNOWN_BUGS=1 runs them all.
KNOWN_BUGS = {
}


def known_bug(name):
    """Skips a known bug's test unless KOLO_FAULT_KNOWN_BUGS=1 (to check a fix)."""
    if name in KNOWN_BUGS and os.environ.get("KOLO_FAULT_KNOWN_BUGS") != "1":
        pytest.skip("known bug %s: %s" % (name, KNOWN_BUGS[name]))


def probe_lines(text):
    return [m.groups() for m in map(PROBE_RE.search, text.splitlines()) if m]


def check_probes(text, np_, cases):
    """Every rank printed PASS for every case."""
    lines = probe_lines(text)
    failed = [l for l in lines if l[2] != "PASS"]
    assert not failed, "\n".join(" ".join(l) for l in failed) + "\n" + text[-6000:]
    for case in cases.split(","):
        ranks = sorted(int(l[1]) for l in lines if l[0] == case)
        assert ranks == list(range(np_)), "case %s: ranks %s reported\n%s" % (case, ranks, text)


@pytest.mark.parametrize("np_,transport", [(4, "tcp"), (4, "shm"), (8, "tcp"), (8, "shm")])
def test_probes(jobs, np_, transport):
    job = jobs(np_, ["--cases", CASES, "--bound", 20], shm=TRANSPORTS[transport],
               env={"KOLO_TIMEOUT_SECONDS": 20, "KOLO_START_TIMEOUT": 30}, program=fl.PROBE)
    codes = job.wait(seconds=60)
    check_probes(job.text(), np_, CASES)
    assert set(codes.values()) == {0}, job.text()


def test_probes_stalls(jobs):
    """A rank that never submits, two ranks waiting for each other's op, a set removed by one
    rank only: every rank's op fails with STALLED naming the op and the missing ranks at the
    stall shutdown, and the job goes on (a barrier after each case)."""
    cases = "stall-missing,stall-crossed,remove-partial"
    job = jobs(3, ["--cases", cases, "--bound", 6], shm="off", program=fl.PROBE,
               env={"KOLO_TIMEOUT_SECONDS": 10, "KOLO_STALL_CHECK_TIME_SECONDS": 0.5,
                    "KOLO_STALL_SHUTDOWN_TIME_SECONDS": 1.5})
    codes = job.wait(seconds=40)
    check_probes(job.text(), 3, cases)
    assert set(codes.values()) == {0}, job.text()


def mem_available_gib():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / (1 << 20)
    return 0


def test_probes_huge(jobs):
    """An allreduce of 2^31 + 1000 int8 elements and an allgather whose output passes 2^31
    bytes, 2 ranks over shared memory (about 3 GiB per rank at the peak)."""
    if mem_available_gib() < 10:
        pytest.skip("needs 10 GiB of available memory")
    job = jobs(2, ["--cases", "huge", "--bound", 60], shm="auto", program=fl.PROBE,
               env={"KOLO_TIMEOUT_SECONDS": 60})
    codes = job.wait(seconds=120)
    check_probes(job.text(), 2, "huge")
    assert set(codes.values()) == {0}, job.text()


@pytest.mark.skipif(not fl.MPIEXEC, reason="no mpirun (KOLO_MPIEXEC unset)")
@pytest.mark.parametrize("transport", sorted(TRANSPORTS))
def test_probes_mpirun(transport):
    tag = fl.new_tag()
    env = fl.base_env(KOLO_CONTROLLER="mpi", KOLO_SHM=TRANSPORTS[transport],
                      KOLO_TIMEOUT_SECONDS=20)
    argv = [fl.MPIEXEC, "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", "4",
            "-x", "KOLO_CONTROLLER", "-x", "KOLO_SHM", "-x", "KOLO_TIMEOUT_SECONDS",
            fl.PROBE, "--cases", CASES, "--bound", "20", "--tag", tag]
    try:
        rc, out, _ = fl.run_tool(argv, env, 60)
    finally:
        left = fl.reap_leftovers(tag)
    assert not left, "processes left behind: %s" % left
    check_probes(out, 4, CASES)
    assert rc == 0, out


# ---- a rank killed at 4 and 8 ranks over TCP -----------------------------------------------------

# (np, mode, victim): the victim dies mid-collective (64 MiB), during rounds of new names, at
# the negotiation root, in the middle and last. At 3 and 6 ranks the control round's recursive
# doubling first folds odd ranks below 2 (n - p) onto their even partners (ops/fold_internal.h):
# there a folded-out rank (1 of 3) and a partner that carries one (2 of 6) die mid-round.
KILL_CASES = [
    (4, "kill-mid-bcast", 1), (4, "kill-mid-alltoall", 3), (4, "kill-mid-allgather", 0),
    (4, "kill-negotiate", 0), (8, "kill-mid", 5), (8, "kill-mid-bcast", 3),
    (8, "kill-mid-alltoall", 0), (8, "kill-mid-allgather", 7), (8, "kill-negotiate", 3),
    (3, "kill-negotiate", 1), (6, "kill-negotiate", 2),
]


@pytest.mark.parametrize("np_,mode,victim", KILL_CASES,
                         ids=["np%d-%s-v%d" % c for c in KILL_CASES])
def test_rank_lost_at_scale(jobs, np_, mode, victim):
    """Every survivor's op fails within the timeout naming the lost rank, its next submission
    fails at once naming it too, kolo_shutdown is prompt, nothing is left running."""
    # 64 MiB each (an allgather at 8 ranks: 16 MiB each, 128 MiB out on every rank).
    mb = 16 if (np_, mode) == (8, "kill-mid-allgather") else 64
    args = ["--mode", mode, "--victim", victim, "--bound", 30, "--mb", mb]
    if mode == "kill-negotiate":
        args += ["--delay-ms", 400]
    job = jobs(np_, args, shm="off")
    codes = job.wait()
    assert codes[victim] == -signal.SIGKILL, "victim exit %s\n%s" % (codes[victim], job.text())
    for r in range(np_):
        if r != victim:
            assert codes[r] == EXIT_NAMED, "rank %d exit %s\n%s" % (r, codes[r], job.text())
            check_survivor(job, r, victim)
    assert "FAULT_VICTIM rank=%d action=SIGKILL" % victim in job.text(victim), job.text()
    assert job.elapsed() < 25, job.text()


@pytest.mark.parametrize("np_,victim,transport", [(4, 1, "tcp"), (8, 2, "tcp"), (4, 1, "shm")],
                         ids=["np4-v1-tcp", "np8-v2-tcp", "np4-v1-shm"])
def test_rank_lost_during_set_creation(jobs, np_, victim, transport):
    """A member of the new set {0..N-2} dies 3 ms into kolo_add_process_set, while the set's
    transport connects: every survivor (members and the rank outside) must fail within the
    timeout naming the lost rank (also a member waiting inside Gloo's own pair connect, which
    waits 5 times its pair's timeout: kolo gives the pairs a fifth of it)."""
    job = jobs(np_, ["--mode", "kill-set", "--victim", victim, "--delay-ms", 3, "--bound", 30],
               shm=TRANSPORTS[transport])
    codes = job.wait()
    for r in range(np_):
        if r != victim:
            assert codes[r] == EXIT_NAMED, "rank %d exit %s\n%s" % (r, codes[r], job.text())
            check_survivor(job, r, victim)


# ---- two hosts in network namespaces ------------------------------------------------------------

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from netns import IP, fixture_body  # noqa: E402


@pytest.fixture(scope="module")
def netns():
    """Hosts A and B (10.98.0.1, .2) and a launcher namespace L (10.98.0.254) on a bridge
    (test/support/netns.py); all created here and deleted afterwards."""
    yield from fixture_body("kf%d" % (os.getpid() % 100000), "10.98.0", pytest.skip)


def kolorun_in_netns(netns, argv, tag, seconds=60, **env):
    env = fl.base_env(KOLO_LAUNCHER_REMOTE_SHELL="%s netns exec {host} sh -c" % IP,
                      KOLO_LAUNCHER_FORCE_REMOTE="1", KOLO_LAUNCHER_KILL_GRACE_SECONDS="2",
                      PYTHONDONTWRITEBYTECODE="1", **env)
    hosts = "%s:2,%s:2" % (netns["A"], netns["B"])
    full = [IP, "netns", "exec", netns["L"], fl.python(), fl.KOLORUN, "-np", "4", "-H", hosts,
            "--network-interface", "kolo0"] + argv + ["--tag", tag]
    try:
        return fl.run_tool(full, env, seconds)
    finally:
        left = fl.reap_leftovers(tag)
        assert not left, "processes left behind: %s" % left


def test_netns_probes(netns):
    """The probes across two hosts (shared memory inside each, Gloo over the bridge)."""
    rc, out, _ = kolorun_in_netns(netns, [fl.PROBE, "--cases", CASES, "--bound", "20"],
                                  fl.new_tag(), KOLO_TIMEOUT_SECONDS=20)
    check_probes(out, 4, CASES)
    assert rc == 0, out


@pytest.mark.parametrize("mode,victim", [("kill-mid", 2), ("kill-mid-alltoall", 1)])
def test_netns_rank_lost(netns, mode, victim):
    """A rank killed mid-collective on one host: the survivors on both hosts name it (they exit
    by themselves within kolorun's failure grace) and kolorun reports it."""
    known_bug("netns-" + mode)
    rc, out, wall = kolorun_in_netns(
        netns, [fl.WORKER, "--mode", mode, "--victim", str(victim), "--bound", "30", "--mb",
                "64"], fl.new_tag(), KOLO_LAUNCHER_FAILURE_GRACE_SECONDS="8")
    assert rc != 0, out
    assert re.search(r"kolorun: .*rank %d\b" % victim, out), out
    results = [fl.parse_results(line.split(":", 1)[-1])
               for line in out.splitlines() if "FAULT_RESULT" in line]
    results = [r[0] for r in results if r]
    assert sorted(r["rank"] for r in results) == [r for r in range(4) if r != victim], out
    for res in results:
        assert res["code"] in ("PEER_LOST", "ABORTED"), out
        assert res["named"] == 1 and res["next_named"] == 1, out
        assert res["elapsed"] <= TIMEOUT_S + SLACK_S, out
    assert wall < 30, out
