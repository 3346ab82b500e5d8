# SPDX-License-Identifier: Apache-2.0
"""A kolorun that dies without stopping its ranks (kill -9, the OOM killer) leaves nothing
behind: the orphan guard (kolo_launcher/orphan_guard.py) stops every local rank's process group,
in Gloo and in elastic mode; SIGQUIT stops the job as SIGTERM does. Also the guard's own rules,
without kolorun."""

import io
import os
import signal
import subprocess
import time

import pytest

from conftest import KOLORUN, PY, assert_all_gone, base_env, process_alive, read_pids, worker

from kolo_launcher.orphan_guard import serve, start_time
from kolo_launcher.workers import live_process_groups


def _start(args):
    return subprocess.Popen([PY, KOLORUN] + args, env=base_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)


@pytest.mark.parametrize("mode", ["gloo", "elastic"])
def test_kill9_of_kolorun_leaves_no_rank_nor_its_child(piddir, mode):
    flags = ["-np", "2"] if mode == "gloo" else ["--min-np", "2", "-H", "localhost:2"]
    p = _start(flags + worker("sigwait", "--dir", piddir))
    try:
        pids = read_pids(piddir, 2)  # (rank, its child `sleep 60`) each
        assert all(process_alive(pid) for pair in pids for pid in pair)
        p.kill()
        p.wait(10)
        assert_all_gone(pids, timeout=15)
        err = p.stderr.read().decode()
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == -signal.SIGKILL, err


def test_sigquit_stops_the_job_as_sigterm(piddir):
    p = _start(["-np", "2"] + worker("sigwait", "--dir", piddir))
    try:
        pids = read_pids(piddir, 2)
        p.send_signal(signal.SIGQUIT)
        _, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
    err = err.decode()
    assert p.returncode == 128 + signal.SIGQUIT, err
    assert "received SIGQUIT; sending SIGTERM to every rank" in err
    for rank in range(2):
        with open(os.path.join(piddir, "sig.%d" % rank)) as f:
            assert f.read() == "SIGTERM"
    assert_all_gone(pids, timeout=5)


def _group_of_sleepers():
    """A process group (a shell leading it, with a `sleep` child) to guard."""
    p = subprocess.Popen(["sh", "-c", "sleep 60 & wait"], start_new_session=True)
    deadline = time.monotonic() + 10
    while not _members(p.pid) >= 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    return p


def _members(pgid):
    return live_process_groups()[pgid]


def test_guard_stops_registered_groups_at_end_of_file_only():
    p = _group_of_sleepers()
    try:
        line = b"+%d %d\n" % (p.pid, start_time(p.pid))
        assert serve(2.0, io.BytesIO(line + b"done\n"), launcher=1) == []
        assert _members(p.pid) == 2  # kolorun stopped the job itself: nothing signalled
        assert serve(2.0, io.BytesIO(line + b"-%d\n" % p.pid), launcher=1) == []  # reaped
        assert serve(2.0, io.BytesIO(line), launcher=1) == [p.pid]
        p.wait(5)
        deadline = time.monotonic() + 5
        while _members(p.pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert _members(p.pid) == 0  # the shell and its sleep
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def test_guard_never_signals_a_pid_another_process_took():
    p = _group_of_sleepers()
    try:
        # Registered with another start time: the pid now belongs to a different process.
        line = b"+%d %d\n" % (p.pid, start_time(p.pid) - 1)
        assert serve(1.0, io.BytesIO(line), launcher=1) == []
        assert _members(p.pid) == 2
    finally:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()


