# SPDX-License-Identifier: Apache-2.0
"""kolo.run(hosts=...) and KoloRunner(np>0) across two network-namespace hosts (test_netns.py's
topology): the driver (run_hosts_driver.py) runs in the launcher namespace L, kolorun starts
the ranks in A and B through its remote-shell path (KOLO_LAUNCHER_REMOTE_SHELL="ip netns exec
{host} sh -c", the same watcher script ssh runs), and the ranks fetch the function from the
driver and send their results back across the bridge. Needs root, ip and cloudpickle; skips
with a message otherwise."""

import json
import os
import subprocess

import pytest

from conftest import HERE, KOLORUN, PY, REPO, base_env
from test_netns import IP, netns  # noqa: F401 - the fixture

DRIVER = os.path.join(HERE, "run_hosts_driver.py")
LIBRARY = os.environ.get("KOLO_LIBRARY")


def drive(netns, case, timeout=150):
    try:
        import cloudpickle  # noqa: F401
    except ImportError:
        pytest.skip("kolo.run needs cloudpickle (python3-cloudpickle)")
    env = base_env(KOLO_LAUNCHER_REMOTE_SHELL="%s netns exec {host} sh -c" % IP,
                   KOLO_LAUNCHER_FORCE_REMOTE="1", KOLO_LAUNCHER_KILL_GRACE_SECONDS="1",
                   KOLO_KOLORUN=KOLORUN, PYTHONPATH=os.path.join(REPO, "bindings", "python"))
    if LIBRARY:
        env["KOLO_LIBRARY"] = LIBRARY
    r = subprocess.run([IP, "netns", "exec", netns["L"], PY, DRIVER, case, netns["A"],
                        netns["B"]], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=timeout)
    lines = [l for l in r.stdout.splitlines() if l.startswith("OUTCOME ")]
    assert r.returncode == 0 and len(lines) == 1, r.stdout + r.stderr
    for ns in (netns["A"], netns["B"]):  # nothing left behind on the hosts
        left = subprocess.run([IP, "netns", "pids", ns], stdout=subprocess.PIPE, text=True,
                              timeout=30).stdout.split()
        assert not left, "processes left in %s: %s" % (ns, left)
    return json.loads(lines[0][len("OUTCOME "):]), r.stderr


def netns_inode(name):
    return os.stat("/run/netns/" + name).st_ino


def test_run_on_two_hosts_returns_every_rank(netns):
    out, err = drive(netns, "ok")
    assert out["ok"], out.get("error", "") + err
    a, b = netns["A"], netns["B"]
    assert [(v["rank"], v["size"], v["host"]) for v in out["value"]] == [
        (0, 4, a), (1, 4, a), (2, 4, b), (3, 4, b)]
    for v in out["value"]:
        assert v["netns"] == netns_inode(v["host"])  # the rank really ran in that "host"
        assert v["sum"] == 20.0 and v["secret_hidden"]


def test_kolo_runner_np0_returns_rank0(netns):
    out, err = drive(netns, "runner")
    assert out["ok"], out.get("error", "") + err
    assert (out["value"]["rank"], out["value"]["size"], out["value"]["host"],
            out["value"]["sum"]) == (0, 2, netns["A"], 3.0)


def test_remote_failure_names_rank_host_and_traceback(netns):
    out, err = drive(netns, "raise")
    assert not out["ok"] and out["type"] == "RuntimeError", out
    assert "rank 3 (host %s) failed" % netns["B"] in out["error"], out["error"]
    assert "ValueError: rank 3 is unhappy" in out["error"] and "Traceback" in out["error"]


def test_remote_rank_that_dies_is_reported(netns):
    out, err = drive(netns, "exit")
    assert not out["ok"] and out["type"] == "RuntimeError", out
    assert "rank 3 (host %s) exited with status 3" % netns["B"] in out["error"], out["error"]
