# SPDX-License-Identifier: Apache-2.0
"""Shared helpers for the launcher tests (run with /usr/bin/python3 -m pytest test/launcher)."""

import json
import os
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, os.pardir, os.pardir))
KOLORUN = os.environ.get("KOLO_KOLORUN") or os.path.join(REPO, "bindings", "launcher", "kolorun")
PKG_DIR = os.path.join(REPO, "bindings", "launcher")
WORKER = os.path.join(HERE, "worker.py")
PY = sys.executable

sys.path.insert(0, PKG_DIR)


def base_env(**extra):
    env = dict(os.environ)
    for name in list(env):
        if name.startswith("KOLO_") and name not in ("KOLO_SSH_IDENTITY",):
            del env[name]
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["KOLO_LAUNCHER_KILL_GRACE_SECONDS"] = "2"
    # worker.py's ranks have no runtime that would notice a failed peer: stop them at once
    # (test_failure.py gives its ranks a grace window).
    env["KOLO_LAUNCHER_FAILURE_GRACE_SECONDS"] = "0"
    env.update({k: str(v) for k, v in extra.items()})
    return env


def kolorun(args, env=None, timeout=60, **kw):
    """Runs kolorun to completion; returns CompletedProcess (text)."""
    return subprocess.run([PY, KOLORUN] + list(args), env=env or base_env(), timeout=timeout,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def worker(*args):
    return [PY, WORKER] + [str(a) for a in args]


def results(stdout):
    """{rank: parsed JSON} from "[r]<stdout>:RESULT {...}" lines."""
    out = {}
    for line in stdout.splitlines():
        if line.startswith("[") and "]<stdout>:RESULT " in line:
            rank = int(line[1:line.index("]")])
            out[rank] = json.loads(line.split("]<stdout>:RESULT ", 1)[1])
    return out


def process_alive(pid):
    """True while pid exists and is not a zombie."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2:].split()[0] != b"Z"


def read_pids(d, n, timeout=20):
    """[(worker pid, grandchild pid)] for ranks 0..n-1 once every pid file exists."""
    deadline = time.monotonic() + timeout
    paths = [os.path.join(d, "pid.%d" % r) for r in range(n)]
    while True:
        if all(os.path.exists(p) for p in paths):
            return [tuple(int(x) for x in open(p).read().split()) for p in paths]
        if time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    raise AssertionError("not every rank wrote its pid file within %d s: %s"
                         % (timeout, sorted(os.listdir(d))))


def assert_all_gone(pids, timeout=0.0):
    """Every pid is gone (or a zombie), waiting at most `timeout` seconds for it."""
    deadline = time.monotonic() + timeout
    flat = [p for pair in pids for p in pair]
    while True:
        alive = [p for p in flat if process_alive(p)]
        if not alive or time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    for p in alive:  # clean up before failing, so one failure does not leak into later tests
        try:
            os.kill(p, 9)
        except OSError:
            pass
    assert not alive, "processes left behind: %s" % alive


@pytest.fixture
def piddir(tmp_path):
    d = tmp_path / "pids"
    d.mkdir()
    return str(d)
