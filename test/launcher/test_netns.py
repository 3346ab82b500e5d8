# SPDX-License-Identifier: Apache-2.0
"""Multi-host topology with network namespaces: two "hosts" A and B (one address each) and a
launcher namespace L, joined by veth pairs to a bridge in L:

    L: bridge kolo0 10.99.0.254/24 ── veth ── A: kolo0 10.99.0.1/24
                                   └─ veth ── B: kolo0 10.99.0.2/24

Every address and link lives in namespaces this test creates (nothing in the root namespace is
touched) and they are deleted afterwards, whatever happens. kolorun runs in L with
--network-interface kolo0 and starts the ranks with KOLO_LAUNCHER_REMOTE_SHELL="ip netns exec
{host} sh -c"; ranks reach the store in L and each other across the bridge. Needs root and ip;
skips with a message otherwise."""

import os
import subprocess
import sys

import pytest

from conftest import KOLORUN, PY, assert_all_gone, base_env, read_pids, results, worker

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from netns import IP, fixture_body  # noqa: E402


@pytest.fixture(scope="module")
def netns():
    yield from fixture_body("kolo%d" % (os.getpid() % 100000), "10.99.0", pytest.skip)


def run_in_launcher_ns(netns, argv, timeout=60):
    env = base_env(KOLO_LAUNCHER_REMOTE_SHELL="%s netns exec {host} sh -c" % IP,
                   KOLO_LAUNCHER_FORCE_REMOTE="1", KOLO_LAUNCHER_KILL_GRACE_SECONDS="1")
    return subprocess.run([IP, "netns", "exec", netns["L"], PY, KOLORUN] + argv, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=timeout)


def test_two_hosts_two_slots_topology_and_cross_host_allreduce(netns):
    a, b = netns["A"], netns["B"]
    r = run_in_launcher_ns(netns, ["-np", "4", "-H", "%s:2,%s:2" % (a, b), "--verbose",
                                   "--network-interface", "kolo0"] + worker("topo", "--ring"))
    assert r.returncode == 0, r.stderr
    assert "ranks connect to 10.99.0.254" in r.stderr
    res = results(r.stdout)
    assert sorted(res) == [0, 1, 2, 3]
    want = [(a, 0, 2, 0, 2), (a, 1, 2, 0, 2), (b, 0, 2, 1, 2), (b, 1, 2, 1, 2)]
    for rank, (host, lr, ls, cr, cs) in enumerate(want):
        t = res[rank]
        assert (t["rank"], t["size"]) == (rank, 4)
        assert (t["host"], t["local_rank"], t["local_size"], t["cross_rank"],
                t["cross_size"]) == (host, lr, ls, cr, cs)
        assert t["hosts"] == [a, a, b, b]
        assert t["sum"] == 10
        # each rank's vector is [r+1, 10(r+1), 100r+7]; the ring crosses between A and B
        assert t["ring"] == [10, 100, 628]
        assert t["addr"].startswith("10.99.0.%d:" % (1 if host == a else 2))


def test_failure_on_second_host_stops_the_first(netns, tmp_path):
    a, b = netns["A"], netns["B"]
    piddir = str(tmp_path)
    r = run_in_launcher_ns(netns, ["-np", "4", "-H", "%s:2,%s:2" % (a, b),
                                   "--network-interface", "kolo0"] +
                           worker("fail", 3, 7, "--dir", piddir))
    assert r.returncode == 7, r.stderr
    assert "rank 3 (host %s) exited with status 7" % b in r.stderr
    assert_all_gone(read_pids(piddir, 4, timeout=0), timeout=5)


def test_hierarchical_allreduce_across_namespace_hosts(netns):
    # test/mp/hierarchical_mp_test.cc over real (namespace) hosts: shared memory inside A and B,
    # Gloo over the bridge between them; auto, forced on and forced off, the path checked in the
    # timeline. CTest passes the program (test/launcher/CMakeLists.txt).
    prog = os.environ.get("KOLO_HIERARCHICAL_TEST_BIN")
    if not prog or not os.path.exists(prog):
        pytest.skip("KOLO_HIERARCHICAL_TEST_BIN is not set (run it through CTest)")
    a, b = netns["A"], netns["B"]
    r = run_in_launcher_ns(netns, ["-np", "4", "-H", "%s:2,%s:2" % (a, b), "--no-bind",
                                   "--network-interface", "kolo0", "-x", "KOLO_TIMEOUT_SECONDS=60",
                                   prog], timeout=180)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert r.stdout.count("All tests passed") == 4, r.stdout[-4000:]


def test_ranks_on_each_namespace_host_are_bound_on_that_host(netns):
    # kolorun asks each host for its CPUs through the remote shell and starts the ranks there
    # under taskset: A's two ranks take one core each, and so do B's.
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("needs 2 CPUs")
    a, b = netns["A"], netns["B"]
    report = [PY, "-c", "import json, os; print('RESULT ' + json.dumps({'rank': "
              "int(os.environ['KOLO_RANK']), 'cpus': sorted(os.sched_getaffinity(0))}))"]
    r = run_in_launcher_ns(netns, ["-np", "4", "-H", "%s:2,%s:2" % (a, b),
                                   "--binding-args", "--bind-to core --report-bindings",
                                   "--network-interface", "kolo0"] + report)
    assert r.returncode == 0, r.stderr
    res = results(r.stdout)
    got = [res[k]["cpus"] for k in range(4)]
    assert len(got[0]) == len(got[1]) == 1 and got[0] != got[1], got
    assert got[2:] == got[:2], got
    for host in (a, b):
        assert "host %s: each of the 2 local ranks bound to one core of its own" % host \
            in r.stderr, r.stderr
