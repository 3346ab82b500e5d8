# SPDX-License-Identifier: Apache-2.0
"""Elastic training over two network-namespace hosts (test_netns.py's topology: hosts A and B
with one address each, kolorun in namespace L serving the store on the bridge). Four workers,
two per host, train with kolo.torch.elastic (elastic_worker.py):

  - host B's two workers die at the same step (a host lost): the two on A go on alone
    (min-np 2); B comes back after its cool-down, gets two new workers, and the job ends on 4
    ranks with bitwise-equal parameters;
  - the job starts on A alone and the discovery script adds B: B's workers join.

Needs root and ip (skips otherwise); every namespace is deleted afterwards."""

import os
import subprocess

import pytest

from conftest import KOLORUN, PY, REPO, base_env
from test_elastic import LIB
from test_elastic import (TORCH_PY, WORKER, Hosts, check_trained, pytestmark,  # noqa: F401
                          run_changing_hosts)
from test_netns import IP, netns  # noqa: F401 - the fixture


def ns_env():
    return base_env(KOLO_LIBRARY=LIB, PYTHONPATH=os.path.join(REPO, "bindings", "python"),
                    KOLO_ELASTIC_DISCOVERY_INTERVAL="0.2", KOLO_LAUNCHER_KILL_GRACE_SECONDS="2",
                    KOLO_LAUNCHER_FAILURE_GRACE_SECONDS="10",
                    KOLO_LAUNCHER_REMOTE_SHELL="%s netns exec {host} sh -c" % IP,
                    KOLO_LAUNCHER_FORCE_REMOTE="1")


def prefix(netns_names):
    return [IP, "netns", "exec", netns_names["L"], PY, KOLORUN]


def test_host_lost_then_back_four_ranks_over_two_hosts(netns, tmp_path):  # noqa: F811
    a, b = netns["A"], netns["B"]
    hosts = Hosts(tmp_path, "%s:2\n%s:2" % (a, b))
    argv = prefix(netns) + [
        "-np", "4", "--min-np", "2", "--host-discovery-script", str(hosts.script),
        "--network-interface", "kolo0", "--blacklist-cooldown-range", "1", "2",
        "--start-timeout", "30", TORCH_PY, WORKER, "--die", "0:2:5", "--die", "0:3:5",
        "--epochs", "2", "--until-sizes", "4,2,4", "--step-sleep", "0.02"]
    r = subprocess.run(argv, env=ns_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=150)
    res = check_trained(r, 4)
    assert res[0]["sizes"][:3] == [4, 2, 4], res[0]["sizes"]
    assert "elastic round 1: 2 workers (%s: 0-1)" % a in r.stderr, r.stderr[-3000:]
    assert "elastic round 2: 4 workers (%s: 0-1, %s: 4-5)" % (a, b) in r.stderr
    assert {res[k]["wid"] for k in res} == {"0", "1", "4", "5"}


def test_discovery_adds_a_host(netns, tmp_path):  # noqa: F811
    a, b = netns["A"], netns["B"]
    hosts = Hosts(tmp_path, "%s:2" % a)
    flags = ["-np", "2", "--min-np", "2", "--max-np", "4", "--host-discovery-script",
             str(hosts.script), "--network-interface", "kolo0"]
    r = run_changing_hosts(flags, ["--epochs", "2", "--until-sizes", "2,4", "--step-sleep",
                                   "0.02"], hosts, ["%s:2\n%s:2" % (a, b)],
                           prefix=prefix(netns), env=ns_env())
    res = check_trained(r, 4)
    assert res[0]["sizes"][:2] == [2, 4]
    assert "elastic round 1: 4 workers (%s: 0-1, %s: 2-3)" % (a, b) in r.stderr
