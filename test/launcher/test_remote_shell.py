# SPDX-License-Identifier: Apache-2.0
"""The remote-start path (remote script, watcher channel, environment passing) on this machine:
KOLO_LAUNCHER_FORCE_REMOTE=1 with KOLO_LAUNCHER_REMOTE_SHELL="sh -c" instead of ssh."""

import os
import signal
import subprocess
import time

from conftest import (KOLORUN, PY, assert_all_gone, base_env, kolorun, read_pids, results,
                      worker)


def remote_env(**extra):
    return base_env(KOLO_LAUNCHER_FORCE_REMOTE="1", KOLO_LAUNCHER_REMOTE_SHELL="sh -c", **extra)


def test_remote_ranks_topology_environment_and_cwd(tmp_path):
    r = kolorun(["-np", "4", "-H", "localhost:2,127.0.0.1:2", "--verbose", "--cycle-time-ms", "4",
                 "-x", "TEST_X=a b'c"] + worker("topo", "--ring"),
                env=remote_env(TEST_INHERITED="yes"), cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "localhost (remote) ranks 0-1, 127.0.0.1 (remote) ranks 2-3" in r.stderr
    res = results(r.stdout)
    assert [(res[i]["host"], res[i]["local_rank"], res[i]["cross_rank"], res[i]["cross_size"])
            for i in range(4)] == [("localhost", 0, 0, 2), ("localhost", 1, 0, 2),
                                   ("127.0.0.1", 0, 1, 2), ("127.0.0.1", 1, 1, 2)]
    assert all(res[i]["sum"] == 10 and res[i]["ring"] == [10, 100, 628] for i in range(4))
    r = kolorun(["-np", "2", "-H", "localhost:1,127.0.0.1:1", "-x", "TEST_X=a b'c",
                 "--log-level", "error", "sh", "-c",
                 'echo "RESULT {\\"cwd\\": \\"$(pwd)\\", \\"x\\": \\"$TEST_X\\", '
                 '\\"inh\\": \\"$TEST_INHERITED\\", \\"lvl\\": \\"$KOLO_LOG_LEVEL\\"}"'],
                env=remote_env(TEST_INHERITED="yes"), cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    for t in results(r.stdout).values():
        assert t == {"cwd": str(tmp_path), "x": "a b'c", "inh": "yes", "lvl": "error"}


def test_failing_remote_rank_stops_the_others(piddir):
    r = kolorun(["-np", "3", "-H", "localhost:2,127.0.0.1:1"] +
                worker("fail", 2, 4, "--dir", piddir, "--stubborn"),
                env=remote_env(KOLO_LAUNCHER_KILL_GRACE_SECONDS="1"))
    assert r.returncode == 4, r.stderr
    assert "rank 2 (host 127.0.0.1) exited with status 4" in r.stderr
    assert_all_gone(read_pids(piddir, 3, timeout=0), timeout=3)


def test_remote_rank_killed_by_signal_reports_128_plus_n():
    r = kolorun(["-np", "2", "-H", "localhost:1,127.0.0.1:1", "sh", "-c",
                 'if [ "$KOLO_RANK" = 1 ]; then kill -KILL $$; fi; sleep 30'], env=remote_env())
    assert r.returncode == 137, r.stderr
    assert ("rank 1 (host 127.0.0.1) exited with status 137 (128+9: it probably died on SIGKILL)"
            in r.stderr)


def test_sigint_reaches_remote_ranks(piddir):
    p = subprocess.Popen([PY, KOLORUN, "-np", "2", "-H", "localhost:1,127.0.0.1:1"] +
                         worker("sigwait", "--dir", piddir),
                         env=remote_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    try:
        pids = read_pids(piddir, 2)
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, err
    for rank in range(2):
        with open(os.path.join(piddir, "sig.%d" % rank)) as f:
            assert f.read() == "SIGINT"
    assert_all_gone(pids, timeout=3)


def test_killed_launcher_leaves_no_remote_orphans(piddir):
    """Even kill -9 of kolorun stops remote ranks: their watcher sees the channel close."""
    p = subprocess.Popen([PY, KOLORUN, "-np", "2", "-H", "localhost:1,127.0.0.1:1"] +
                         worker("sigwait", "--dir", piddir),
                         env=remote_env(KOLO_LAUNCHER_KILL_GRACE_SECONDS="1"),
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        pids = read_pids(piddir, 2)
        p.kill()
        p.wait(10)
        assert_all_gone(pids, timeout=5)
        for rank in range(2):
            with open(os.path.join(piddir, "sig.%d" % rank)) as f:
                assert f.read() == "SIGTERM"
    finally:
        if p.poll() is None:
            p.kill()
        time.sleep(0.2)
