# SPDX-License-Identifier: Apache-2.0
"""kolorun's elastic parts without a kolo runtime: the flags, the discovery script's output, the
blacklist's cool-down, and the driver with stand-in workers (standard-library Python that read
their round's assignment from kolorun's store, as kolo.elastic does)."""

import json
import os
import sys
import textwrap

import pytest

from conftest import PY, REPO, base_env, kolorun
from kolo_launcher.args import UsageError, parse
from kolo_launcher.discovery import HostHealth, parse_discovery_output
from kolo_launcher.hosts import HostListError


LAUNCHER = os.path.join(REPO, "bindings", "launcher")  # kolo_launcher, for stand-in workers
# What a stand-in worker puts on sys.path: kolo_launcher, and this folder (store_client).
STANDIN_PATH = [LAUNCHER, os.path.dirname(os.path.abspath(__file__))]


def opts(*argv):
    return parse(list(argv) + ["prog"], {})


def test_elastic_flags_parse_with_horovodrun_names():
    o = opts("-np", "3", "--min-np", "2", "--max-np", "4", "--host-discovery-script", "/bin/true",
             "--slots-per-host", "2", "--elastic-timeout", "30", "--reset-limit", "5",
             "--blacklist-cooldown-range", "10", "100")
    e = o.elastic
    assert (e.min_np, e.max_np, e.slots_per_host, e.elastic_timeout, e.reset_limit,
            e.cooldown) == (2, 4, 2, 30.0, 5, (10.0, 100.0))
    assert e.discovery_script == "/bin/true"
    assert o.command == ["prog"]
    assert opts("-np", "2").elastic is None
    # min-np defaults to -np, max-np to unbounded, -H as a fixed host list
    e = opts("-np", "2", "--min-np", "2", "--max-np", "3", "-H", "localhost:3").elastic
    assert (e.min_np, e.max_np, e.discovery_script, e.cooldown) == (2, 3, None, None)
    e = opts("-np", "3", "--host-discovery-script", "/bin/true").elastic
    assert (e.min_np, e.max_np, e.start_np, e.start_flag) == (3, None, 3, "-np")
    assert opts("--min-np", "2", "-H", "a:2").elastic.start_flag == "--min-np"
    assert parse(["--min-np", "2", "-H", "a:2", "p"], {"KOLO_ELASTIC_TIMEOUT": "7"}) \
        .elastic.elastic_timeout == 7.0
    assert e.finish_grace == float("inf")  # no limit by default, as horovodrun
    assert parse(["--min-np", "2", "-H", "a:2", "p"],
                 {"KOLO_ELASTIC_FINISH_GRACE_SECONDS": "2.5"}).elastic.finish_grace == 2.5


@pytest.mark.parametrize("argv,text", [
    (["-np", "2", "--reset-limit", "3"], "--reset-limit is for elastic jobs"),
    (["-np", "2", "--min-np", "3", "-H", "a:4"], "-np 2 is outside --min-np 3"),
    (["--min-np", "3", "--max-np", "2", "-H", "a:4"], "--max-np 2 is less than --min-np 3"),
    (["--min-np", "2", "--mpi", "-H", "a:4"], "elastic training needs Gloo mode"),
    (["--min-np", "2"], "needs its hosts"),
    (["--host-discovery-script", "/bin/true", "-H", "a:2", "-np", "2"], "not both"),
    (["--host-discovery-script", "/bin/true"], "needs -np or --min-np"),
    (["--min-np", "2", "-H", "a:2", "--blacklist-cooldown-range", "5", "1"], "less than MIN"),
    (["--min-np", "x", "-H", "a:2"], "--min-np: expected an integer"),
    (["--min-np", "2", "-H", "a:2", "--elastic-timeout", "-1"], "--elastic-timeout"),
    (["-np", "2", "--max-np", "4", "--reset-limit", "1"], "--reset-limit is for elastic jobs"),
    (["-np", "2", "--max-np", "x"], "--max-np: expected an integer"),
    # a fixed host list never grows: -np slots it lacks would be waited for in vain
    (["-np", "3", "--min-np", "1", "-H", "localhost:2"],
     "-np 3 asks for more slots than the host list has (2: localhost:2)"),
    (["--min-np", "3", "-H", "a:1,b:1"],
     "--min-np 3 asks for more slots than the host list has (2: a:1,b:1)"),
])
def test_elastic_flag_errors(argv, text):
    with pytest.raises(UsageError) as e:
        parse(argv + ["prog"], {})
    assert text in str(e.value)


def test_elastic_finish_grace_must_be_seconds():
    with pytest.raises(UsageError) as e:
        parse(["--min-np", "2", "-H", "a:2", "prog"], {"KOLO_ELASTIC_FINISH_GRACE_SECONDS": "x"})
    assert "KOLO_ELASTIC_FINISH_GRACE_SECONDS: expected a number of seconds" in str(e.value)


def test_discovery_output():
    out = "a:2\n# comment\n\nb\n[fe80::1]:3\na:2\nc:4  # trailing\nb:2\n"
    assert parse_discovery_output(out, 2) == [("a", 2), ("b", 2), ("fe80::1", 3), ("c", 4)]
    with pytest.raises(HostListError) as e:
        parse_discovery_output("a:2\nbad host\n", 1)
    assert "discovery script line 2" in str(e.value)


def test_discovery_output_a_host_twice_with_other_slots_is_an_error():
    # horovodrun keeps one of the two lines at random; the first line used to win silently
    with pytest.raises(HostListError) as e:
        parse_discovery_output("a:2\nb:1\na:5\n", 1)
    assert str(e.value) == ("discovery script line 3: host a is listed again with 5 slots "
                            "(line 1 gave it 2); list each host once")


def test_discovery_output_host_with_zero_slots_is_drained():
    # "host:0" is no error (horovodrun reads it as a host without slots): no worker there
    assert parse_discovery_output("a:0\nb:2\n[fe80::1]:00\n", 1) == [("b", 2)]
    assert parse_discovery_output("a:0\n", 1) == []
    for bad, text in (("-x:0", "invalid host name '-x'"),
                      ("fe80::0", "write IPv6 hosts as [address]:slots, not 'fe80::0'")):
        with pytest.raises(HostListError) as e:
            parse_discovery_output(bad, 1)
        assert text in str(e.value)


def test_discovery_script_printing_without_end_is_stopped(tmp_path, monkeypatch):
    # A runaway loop would fill the disk through the output file long before the 30 s limit.
    from kolo_launcher import discovery
    monkeypatch.setattr(discovery, "MAX_OUTPUT", 1 << 20)
    d = discovery.HostDiscovery("yes localhost:1")
    hosts, error = d.poll()
    assert hosts == [] and error == "host discovery script printed more than 1 MiB; it was " \
        "stopped", error
    assert not d.running


class _Uniform:
    """A stand-in for random.Random: uniform(a, b) returns a + frac * (b - a)."""

    def __init__(self, frac):
        self.frac = frac

    def uniform(self, a, b):
        return a + self.frac * (b - a)


def test_blacklist_cooldown_is_horovodruns_with_jitter():
    # horovodrun's HostState: MIN * 2**k + U(0, MIN) at the k-th blacklisting, in [MIN, MAX]
    now = [100.0]
    h = HostHealth((10.0, 100.0), clock=lambda: now[0], rng=_Uniform(0.5))
    assert h.usable("a")
    assert h.record_failure("a") == 25.0  # 10 * 2 + 5
    assert not h.usable("a") and h.usable("b")
    now[0] += 5.0
    assert h.record_failure("a") == 20.0  # while it cools down: no count, no extension
    now[0] += 20.0
    assert h.usable("a")
    assert h.record_failure("a") == 45.0  # 10 * 4 + 5
    now[0] += 45.0
    assert h.record_failure("a") == 85.0  # 10 * 8 + 5
    now[0] += 85.0
    assert h.record_failure("a") == 100.0  # capped at MAX
    assert h.blacklisted() == ["a"]
    jitter = [HostHealth((10.0, 100.0), rng=_Uniform(f)).record_failure("a")
              for f in (0.0, 0.99)]
    assert jitter == [20.0, pytest.approx(29.9)]
    assert HostHealth((10.0, 12.0), rng=_Uniform(0.5)).record_failure("a") == 12.0
    periods = {HostHealth((1.0, 3600.0)).record_failure("a") for _ in range(20)}
    assert len(periods) > 1 and all(2.0 <= p < 3.0 for p in periods), periods
    forever = HostHealth(None, clock=lambda: now[0])
    assert forever.record_failure("a") == float("inf")
    now[0] += 1e9
    assert not forever.usable("a")


@pytest.mark.parametrize("pair", [("0.5", "2"), ("1", "3601"), ("0", "0")])
def test_blacklist_cooldown_range_has_horovodruns_bounds(pair):
    with pytest.raises(UsageError, match="MIN must be at least 1 s and MAX at most 3600 s"):
        opts("--min-np", "2", "-H", "a:2", "--blacklist-cooldown-range", *pair)
    assert opts("--min-np", "2", "-H", "a:2", "--blacklist-cooldown-range", "1",
                "3600").elastic.cooldown == (1.0, 3600.0)


def test_the_only_host_is_forgiven_its_first_failure_not_its_second():
    now = [0.0]
    h = HostHealth((10.0, 25.0), clock=lambda: now[0], rng=_Uniform(0.0))
    assert h.record_failure("a", only_host=True) == 0.0
    assert h.usable("a") and h.blacklisted() == []
    # the second failure blacklists it; the cool-down counts blacklistings
    assert h.record_failure("a", only_host=True) == 20.0
    assert not h.usable("a")
    now[0] += 20.0
    assert h.record_failure("a", only_host=True) == 25.0
    # a host with others beside it is blacklisted at its first failure, as before
    assert h.record_failure("b", only_host=False) == 20.0
    forever = HostHealth(None, clock=lambda: now[0])
    assert forever.record_failure("a", only_host=True) == 0.0
    assert forever.record_failure("a", only_host=True) == float("inf")


STANDIN = textwrap.dedent("""\
    import json, os, sys, time
    sys.path[:0] = %r
    from store_client import StoreClient
    c = StoreClient(os.environ["KOLO_RENDEZVOUS_ADDR"], os.environ["KOLO_RENDEZVOUS_PORT"])
    wid = os.environ["KOLO_ELASTIC_WORKER_ID"]
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if c.check("elastic/round"):
            n = int(c.get("elastic/round", 1))
            key = "elastic/round%%d/assign/%%s" %% (n, wid)
            if c.check(key):
                print("PLACE " + json.dumps([n, wid, json.loads(c.get(key, 1))]), flush=True)
                sys.exit(int(sys.argv[1]) if wid == "0" else 0)
        time.sleep(0.05)
    sys.exit(3)
""")


def standin(tmp_path):
    path = tmp_path / "standin.py"
    path.write_text(STANDIN % (STANDIN_PATH,))
    return str(path)


def places(stdout):
    out = []
    for line in stdout.splitlines():
        if "]<stdout>:PLACE " in line:
            out.append(json.loads(line.split("PLACE ", 1)[1]))
    return out


def test_driver_assigns_ranks_host_by_host_and_exits_0(tmp_path):
    r = kolorun(["--min-np", "3", "-H", "localhost:3", PY, standin(tmp_path), "0"])
    assert r.returncode == 0, r.stderr
    got = sorted((p[2]["rank"], p[1], p[2]["size"], p[2]["local_rank"]) for p in places(r.stdout))
    assert got == [(0, "0", 3, 0), (1, "1", 3, 1), (2, "2", 3, 2)]
    assert "elastic round 0: 3 workers (localhost: 0-2), rank 0 is worker 0" in r.stderr


def test_driver_waits_for_min_np_slots_then_fails(tmp_path):
    script = tmp_path / "none.sh"
    script.write_text("#!/bin/sh\necho localhost:1\n")
    script.chmod(0o755)
    env = base_env(KOLO_ELASTIC_DISCOVERY_INTERVAL="0.1")
    r = kolorun(["--min-np", "2", "--host-discovery-script", str(script), "--elastic-timeout",
                 "1", PY, standin(tmp_path), "0"], env=env)
    assert r.returncode == 1
    assert "job failed: the hosts offer 1 slot, fewer than --min-np 2 (the slots the first " \
           "round needs), after --elastic-timeout 1 s (hosts: localhost:1)" in r.stderr


def test_max_np_alone_is_a_static_job_as_under_horovodrun():
    # horovodrun's launch._is_elastic looks at --host-discovery-script and --min-np only
    o = opts("-np", "2", "--max-np", "4", "-H", "localhost:4")
    assert o.elastic is None and o.np == 2
    assert o.notes == ("--max-np has no effect without --min-np or --host-discovery-script: "
                       "the job is static, with -np ranks (or one per slot), as under "
                       "horovodrun",)
    r = kolorun(["-np", "2", "--max-np", "4", "-H", "localhost:4", PY, "-c",
                 "import os; print('W', os.environ.get('KOLO_ELASTIC'), "
                 "os.environ['KOLO_SIZE'])"])
    assert r.returncode == 0, r.stderr
    assert sorted(l for l in r.stdout.splitlines() if ":W " in l) == [
        "[0]<stdout>:W None 2", "[1]<stdout>:W None 2"]
    assert "--max-np has no effect" in r.stderr


def counting_script(tmp_path, before, after, runs):
    """A discovery script printing `before` for its first `runs` runs, then `after`."""
    count = tmp_path / "runs"
    script = tmp_path / "grow.sh"
    script.write_text("#!/bin/sh\nn=$(cat %s 2>/dev/null || echo 0)\necho $((n + 1)) > %s\n"
                      "if [ $n -lt %d ]; then echo %s; else echo %s; fi\n"
                      % (count, count, runs, before, after))
    script.chmod(0o755)
    return str(script)


def test_the_first_round_waits_for_np_slots_not_min_np(tmp_path):
    # horovodrun: -np is "in elastic mode, number of processes required before training can
    # start" (gloo_run waits for num_proc slots before driver.start): with one slot offered
    # for a while and --min-np 1, the job must wait for the second slot and start on 2.
    script = counting_script(tmp_path, "localhost:1", "localhost:2", 5)
    env = base_env(KOLO_ELASTIC_DISCOVERY_INTERVAL="0.1")
    r = kolorun(["-np", "2", "--min-np", "1", "--host-discovery-script", script,
                 "--elastic-timeout", "20", PY, standin(tmp_path), "0"], env=env)
    assert r.returncode == 0, r.stderr
    assert "waiting up to 20 s (--elastic-timeout) for the 2 slots of -np 2 before the first " \
        "round (the hosts offer 1: localhost:1)" in r.stderr, r.stderr
    got = sorted((p[0], p[2]["rank"], p[2]["size"]) for p in places(r.stdout))
    assert got == [(0, 0, 2), (0, 1, 2)], r.stdout


def test_the_first_round_fails_after_the_timeout_naming_np(tmp_path):
    script = tmp_path / "one.sh"
    script.write_text("#!/bin/sh\necho localhost:2\n")
    script.chmod(0o755)
    env = base_env(KOLO_ELASTIC_DISCOVERY_INTERVAL="0.1")
    r = kolorun(["-np", "3", "--min-np", "1", "--host-discovery-script", str(script),
                 "--elastic-timeout", "1", PY, standin(tmp_path), "0"], env=env)
    assert r.returncode == 1, r.stderr
    assert "job failed: the hosts offer 2 slots, fewer than -np 3 (the slots the first round " \
        "needs), after --elastic-timeout 1 s (hosts: localhost:2)" in r.stderr, r.stderr
    assert "<stdout>" not in r.stdout  # no worker started


# A worker that prints the place it was started with (before any init) and the place its
# round gives it, once the round it waits for (argv[1]) has formed.
SPAWN = textwrap.dedent("""\
    import json, os, sys, time
    sys.path[:0] = %r
    from store_client import StoreClient
    names = ("RANK", "SIZE", "LOCAL_RANK", "LOCAL_SIZE", "CROSS_RANK", "CROSS_SIZE", "HOSTNAME")
    spawn = {n.lower().replace("hostname", "host"): os.environ["KOLO_" + n] for n in names}
    assert all(os.environ["HOROVOD_" + n] == os.environ["KOLO_" + n] for n in names)
    c = StoreClient(os.environ["KOLO_RENDEZVOUS_ADDR"], os.environ["KOLO_RENDEZVOUS_PORT"])
    wid = os.environ["KOLO_ELASTIC_WORKER_ID"]
    c.set("elastic/ready/" + wid, b"1")
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        n = int(c.get("elastic/round", 1)) if c.check("elastic/round") else -1
        key = "elastic/round%%d/assign/%%s" %% (n, wid)
        if n >= int(sys.argv[1]) and c.check(key):
            place = {k: str(v) for k, v in json.loads(c.get(key, 1)).items()}
            print("SPAWN " + json.dumps([wid, n, spawn, place]), flush=True)
            sys.exit(0)
        time.sleep(0.05)
    sys.exit(3)
""")


def spawned(stdout):
    return {s[0]: s[1:] for s in (json.loads(l.split("SPAWN ", 1)[1])
                                  for l in stdout.splitlines() if "]<stdout>:SPAWN " in l)}


def test_workers_start_with_the_place_of_their_first_round(tmp_path):
    # horovodrun builds a worker's environment from its slot (create_slot_env_vars): rank,
    # size, local and cross ranks are the round's from the start, not placeholders until init.
    prog = tmp_path / "spawn.py"
    prog.write_text(SPAWN % (STANDIN_PATH,))
    r = kolorun(["--min-np", "4", "-H", "localhost:2,127.0.0.1:2", PY, str(prog), "0"])
    assert r.returncode == 0, r.stderr
    got = spawned(r.stdout)
    assert sorted(got) == ["0", "1", "2", "3"], r.stdout
    for wid, (n, spawn, place) in got.items():
        assert n == 0 and spawn == place, (wid, spawn, place)
    assert got["3"][1] == {"rank": "3", "size": "4", "local_rank": "1", "local_size": "2",
                           "cross_rank": "1", "cross_size": "2", "host": "127.0.0.1"}


def test_a_worker_added_later_starts_with_its_place_in_the_next_round(tmp_path):
    # 2 slots, then 3: worker 2 starts as rank 2 of 3, its place in round 1, while workers 0
    # and 1 (started as ranks 0 and 1 of 2) wait for round 1 to form.
    prog = tmp_path / "spawn.py"
    prog.write_text(SPAWN % (STANDIN_PATH,))
    script = counting_script(tmp_path, "localhost:2", "localhost:3", 3)
    env = base_env(KOLO_ELASTIC_DISCOVERY_INTERVAL="0.1")
    r = kolorun(["-np", "2", "--min-np", "2", "--max-np", "3", "--host-discovery-script",
                 script, PY, str(prog), "1"], env=env)
    assert r.returncode == 0, r.stderr
    got = spawned(r.stdout)
    assert sorted(got) == ["0", "1", "2"], r.stdout + r.stderr
    assert got["0"][1]["size"] == got["1"][1]["size"] == "2"
    n, spawn, place = got["2"]
    assert n == 1 and spawn == place, (spawn, place)
    assert (place["rank"], place["size"], place["local_rank"]) == ("2", "3", "2")


def test_elastic_worker_0_reads_kolorun_stdin(tmp_path):
    prog = tmp_path / "read.py"
    prog.write_text("import os, sys\nprint('GOT', os.environ['KOLO_ELASTIC_WORKER_ID'], "
                    "repr(sys.stdin.readline()))\n")
    r = kolorun(["--min-np", "2", "-H", "localhost:2", PY, str(prog)], input="hi\n")
    assert r.returncode == 0, r.stderr
    assert "[0]<stdout>:GOT 0 'hi\\n'" in r.stdout and "[1]<stdout>:GOT 1 ''" in r.stdout


def test_driver_failed_script_keeps_last_list_and_says_so(tmp_path):
    script = tmp_path / "flaky.sh"
    flag = tmp_path / "ran"
    script.write_text("#!/bin/sh\nif [ -e %s ]; then echo broken >&2; exit 3; fi\n"
                      "touch %s\necho localhost:2\n" % (flag, flag))
    script.chmod(0o755)
    env = base_env(KOLO_ELASTIC_DISCOVERY_INTERVAL="0.1")
    slow = tmp_path / "slow.py"
    slow.write_text("import time; time.sleep(1.0)\n")
    r = kolorun(["--min-np", "2", "--host-discovery-script", str(script), PY, str(slow)],
                env=env)
    assert r.returncode == 0, r.stderr
    assert "host discovery script exited with status 3: broken; keeping the last host list" \
        in r.stderr


def test_driver_worker_failure_after_success_fails_the_job(tmp_path):
    # worker 0 exits 0 (the job is finishing); worker 1 fails afterwards: its status wins.
    prog = tmp_path / "p.py"
    prog.write_text("import os, sys, time\nw = os.environ['KOLO_ELASTIC_WORKER_ID']\n"
                    "time.sleep(0.2 if w == '0' else 1.5)\nsys.exit(0 if w == '0' else 5)\n")
    r = kolorun(["--min-np", "2", "-H", "localhost:2", PY, str(prog)])
    assert r.returncode == 5, r.stderr
    assert "worker 0 (host localhost) finished" in r.stderr
    assert "job failed: worker 1 (host localhost) exited with status 5" in r.stderr


def test_driver_does_not_wait_for_hosts_once_the_job_is_finishing(tmp_path):
    # Worker 0 finishes; workers 1 and 2 then ask for a new round (as after losing a peer):
    # 2 < --min-np 3, and a finishing job starts no workers. As horovodrun, the job succeeded
    # with worker 0: the others are stopped at once (not after --elastic-timeout, then failed).
    import time
    prog = tmp_path / "p.py"
    prog.write_text(textwrap.dedent("""\
        import os, sys, time
        sys.path[:0] = %r
        from store_client import StoreClient
        w = os.environ["KOLO_ELASTIC_WORKER_ID"]
        if w == "0":
            time.sleep(0.3)
            sys.exit(0)
        c = StoreClient(os.environ["KOLO_RENDEZVOUS_ADDR"], os.environ["KOLO_RENDEZVOUS_PORT"])
        time.sleep(1.0)
        c.set("elastic/want/" + w, b"0")
        time.sleep(60)
        sys.exit(7)
        """) % (STANDIN_PATH,))
    t0 = time.monotonic()
    r = kolorun(["-np", "3", "--min-np", "3", "-H", "localhost:3", "--elastic-timeout", "60",
                 PY, str(prog)])
    assert r.returncode == 0, r.stderr
    assert "a worker finished; the other 2 asked for a new round: stopping them" in r.stderr, \
        r.stderr
    assert time.monotonic() - t0 < 30


def test_a_worker_stopped_during_the_job_gets_sigkill_after_the_grace(tmp_path):
    # The host list shrinks 3 -> 2 slots: worker 2, a member of round 0, should leave at its
    # next commit (graceful removal), never does, and is stopped after --elastic-timeout (1 s);
    # it ignores SIGTERM and must be killed after KOLO_LAUNCHER_KILL_GRACE_SECONDS (1 s) while
    # the job goes on, not when it ends; until it is gone, no new worker takes its slot.
    import signal
    import subprocess
    import time
    from conftest import KOLORUN, process_alive
    hosts = tmp_path / "hosts"
    hosts.write_text("localhost:3\n")
    script = tmp_path / "discover.sh"
    script.write_text("#!/bin/sh\ncat %s\n" % hosts)
    script.chmod(0o755)
    prog = tmp_path / "p.py"
    prog.write_text("import os, signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                    "f = os.path.join(%r, 'pid.' + os.environ['KOLO_ELASTIC_WORKER_ID'])\n"
                    "open(f + '.tmp', 'w').write(str(os.getpid()))\nos.rename(f + '.tmp', f)\n"
                    "time.sleep(60)\n" % str(tmp_path))
    env = base_env(KOLO_ELASTIC_DISCOVERY_INTERVAL="0.1", KOLO_LAUNCHER_KILL_GRACE_SECONDS="1")
    p = subprocess.Popen([PY, KOLORUN, "-np", "3", "--min-np", "2", "--host-discovery-script",
                          str(script), "--elastic-timeout", "1", PY, str(prog)], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        while not all((tmp_path / ("pid.%d" % i)).exists() for i in range(3)):
            assert time.monotonic() < deadline, "workers did not start"
            time.sleep(0.05)
        victim = int((tmp_path / "pid.2").read_text())
        hosts.write_text("localhost:2\n")
        deadline = time.monotonic() + 12
        while process_alive(victim):
            assert time.monotonic() < deadline, "the stopped worker was not killed"
            time.sleep(0.05)
        assert p.poll() is None  # the job goes on
        assert not (tmp_path / "pid.3").exists()
    finally:
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=30)
    assert "worker 2 leaves the job at its next commit" in err, err
    assert ("worker 2 (host localhost): it did not leave the job at a commit within "
            "--elastic-timeout 1 s of its removal (host localhost has 2 slots now): stopping "
            "it") in err, err


def test_every_host_gone_stops_the_workers_saying_no_round_could_form(tmp_path):
    # The discovery script lists no host any more: the removed workers have no round to leave
    # for (fewer than --min-np), so after --elastic-timeout they are stopped, and the job fails,
    # with a message that does not blame them for never reaching a commit.
    hosts = tmp_path / "hosts"
    hosts.write_text("localhost:2\n")
    script = tmp_path / "discover.sh"
    script.write_text("#!/bin/sh\ncat %s\n" % hosts)
    script.chmod(0o755)
    prog = tmp_path / "p.py"
    prog.write_text("import os, time\nopen(os.path.join(%r, 'up.' + "
                    "os.environ['KOLO_ELASTIC_WORKER_ID']), 'w').close()\ntime.sleep(60)\n"
                    % str(tmp_path))
    env = base_env(KOLO_ELASTIC_DISCOVERY_INTERVAL="0.1", KOLO_LAUNCHER_KILL_GRACE_SECONDS="1")
    import subprocess
    import time
    from conftest import KOLORUN
    p = subprocess.Popen([PY, KOLORUN, "-np", "2", "--min-np", "1", "--host-discovery-script",
                          str(script), "--elastic-timeout", "1", PY, str(prog)], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        while not all((tmp_path / ("up.%d" % i)).exists() for i in range(2)):
            assert time.monotonic() < deadline, "workers did not start"
            time.sleep(0.05)
        hosts.write_text("")
        _, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    assert p.returncode == 1, err
    for wid in (0, 1):
        assert ("worker %d (host localhost): no round without it could form within "
                "--elastic-timeout 1 s of its removal (host localhost is gone): stopping it"
                % wid) in err, err
    assert ("job failed: only 0 workers, fewer than --min-np 1, and no host came within "
            "--elastic-timeout 1 s") in err, err


def test_driver_passes_a_signal_and_stops_every_worker(tmp_path):
    import signal
    import subprocess
    import time
    from conftest import KOLORUN, assert_all_gone
    prog = tmp_path / "sleep.py"
    prog.write_text("import os, time\nf = os.path.join(%r, 'pid.' + "
                    "os.environ['KOLO_ELASTIC_WORKER_ID'])\n"
                    "open(f + '.tmp', 'w').write(str(os.getpid()))\nos.rename(f + '.tmp', f)\n"
                    "time.sleep(60)\n" % str(tmp_path))
    p = subprocess.Popen([PY, KOLORUN, "--min-np", "2", "-H", "localhost:2", PY, str(prog)],
                         env=base_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    deadline = time.monotonic() + 20
    while not all((tmp_path / ("pid.%d" % i)).exists() for i in range(2)):
        assert time.monotonic() < deadline, "workers did not start"
        time.sleep(0.05)
    pids = [(int((tmp_path / ("pid.%d" % i)).read_text()),) for i in range(2)]
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=30)
    assert p.returncode == 128 + signal.SIGTERM, err
    assert "received SIGTERM; passing it to every worker" in err
    assert_all_gone(pids, timeout=5)


def test_elastic_worker_environment(tmp_path):
    prog = tmp_path / "env.py"
    prog.write_text("import os\nprint('ENV', os.environ['KOLO_ELASTIC'], "
                    "os.environ['KOLO_ELASTIC_WORKER_ID'], os.environ['HOROVOD_ELASTIC'])\n")
    r = kolorun(["--min-np", "1", "-H", "localhost:1", PY, str(prog)])
    assert r.returncode == 0, r.stderr
    assert "[0]<stdout>:ENV 1 0 1" in r.stdout


class _Console:
    def __init__(self):
        self.lines = []

    def message(self, text):
        self.lines.append(text)


def _job(*argv):
    from kolo_launcher.elastic_run import ElasticJob
    return ElasticJob(opts(*argv), {}, _Console())


def test_store_binds_where_hosts_added_later_can_reach_it(tmp_path):
    script = tmp_path / "discover.sh"
    script.write_text("#!/bin/sh\necho localhost:2\n")
    script.chmod(0o755)
    # A discovery script that lists only this machine now may list other hosts later.
    job = _job("--min-np", "1", "--host-discovery-script", str(script))
    assert job._bind_address([("localhost", 2)]) == "0.0.0.0"
    # A fixed list of this machine's names never changes: loopback is enough.
    job = _job("--min-np", "1", "-H", "localhost:2")
    assert job._bind_address([("localhost", 2)]) == "127.0.0.1"


def test_rank_0_of_a_new_round_is_a_member_of_the_last_one():
    # Worker 2 started early but joined no round (slow start-up); worker 3 was in round 0 and
    # holds the training state. Round 1 = {2, 3}: rank 0 must be worker 3, the state's sender.
    from types import SimpleNamespace
    from kolo_launcher.store_server import StoreServer
    job = _job("--min-np", "1", "-H", "a:2,b:2")
    job.server = StoreServer("127.0.0.1", 0).start()
    try:
        job.live = {2: SimpleNamespace(host="a"), 3: SimpleNamespace(host="b")}
        job.round, job.members = 0, {3}
        job._publish([2, 3])
        place = {w: json.loads(job.server.get_nowait("elastic/round1/assign/%d" % w))
                 for w in (2, 3)}
        assert place[3]["rank"] == 0 and place[2]["rank"] == 1, place
        assert job.console.lines[-1].endswith("rank 0 is worker 3"), job.console.lines
    finally:
        job.server.stop()


# A stand-in for a training worker under graceful removal: it "trains" in its round, and at
# each "commit" (every 0.1 s) it leaves the round when kolorun published a newer one, as
# kolo.elastic does (HostsUpdatedInterrupt): it asks for a round and joins the newest round
# that places it, or ends (exit 0) when that round removes it. It prints each round it joins
# (JOINED round rank size) and ends once it joined round argv[1], or at elastic/abort.
GRACEFUL = textwrap.dedent("""\
    import json, os, sys, time
    sys.path[:0] = %r
    from store_client import StoreClient
    c = StoreClient(os.environ["KOLO_RENDEZVOUS_ADDR"], os.environ["KOLO_RENDEZVOUS_PORT"])
    wid = os.environ["KOLO_ELASTIC_WORKER_ID"]
    c.set("elastic/ready/" + wid, b"1")
    mine, last = -1, int(sys.argv[1])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if c.check("elastic/abort"):
            print("ABORTED " + c.get("elastic/abort", 1).decode(), flush=True)
            sys.exit(1)
        n = int(c.get("elastic/round", 1)) if c.check("elastic/round") else -1
        if n > mine:
            if mine >= 0:
                c.set("elastic/want/" + wid, str(mine).encode())
            key = "elastic/round%%d/%%s/%%s"
            if c.check(key %% (n, "removed", wid)):
                print("REMOVED %%d %%s" %% (n, c.get(key %% (n, "removed", wid), 1).decode()),
                      flush=True)
                sys.exit(0)
            if c.check(key %% (n, "assign", wid)):
                mine = n
                place = json.loads(c.get(key %% (n, "assign", wid), 1))
                print("JOINED %%d %%d %%d" %% (n, place["rank"], place["size"]), flush=True)
                if n >= last:
                    time.sleep(0.5)
                    sys.exit(0)
        time.sleep(0.1)
    sys.exit(3)
""")


def graceful(tmp_path):
    path = tmp_path / "graceful.py"
    path.write_text(GRACEFUL % (STANDIN_PATH,))
    return str(path)


def lines(stdout, word):
    return sorted(l.split("]<stdout>:", 1)[0].lstrip("[") + " " + l.split(word + " ", 1)[1]
                  for l in stdout.splitlines() if "]<stdout>:%s " % word in l)


def changing_hosts(tmp_path, first):
    hosts = tmp_path / "hosts"
    hosts.write_text(first + "\n")
    script = tmp_path / "discover.sh"
    script.write_text("#!/bin/sh\ncat %s\n" % hosts)
    script.chmod(0o755)
    return hosts, str(script)


def run_until(argv, tmp_path, steps, timeout=60):
    """Runs kolorun; steps: [(text in its stdout or stderr so far, action)], in order."""
    import subprocess
    import threading
    import time
    from conftest import KOLORUN
    env = base_env(KOLO_ELASTIC_DISCOVERY_INTERVAL="0.1", KOLO_LAUNCHER_KILL_GRACE_SECONDS="1")
    p = subprocess.Popen([PY, KOLORUN] + argv, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    seen = []
    readers = [threading.Thread(target=lambda f=f: seen.extend(f), daemon=True)
               for f in (p.stdout, p.stderr)]
    for t in readers:
        t.start()
    deadline = time.monotonic() + timeout
    try:
        for text, action in steps:
            while not any(text in l for l in list(seen)):
                assert time.monotonic() < deadline and p.poll() is None, (text, "".join(seen))
                time.sleep(0.05)
            action()
        p.wait(max(1, deadline - time.monotonic()))
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    for t in readers:
        t.join(5)
    out = "".join(l for l in seen if "]<std" in l)
    err = "".join(l for l in seen if "]<std" not in l)
    return p.returncode, out, err


def test_graceful_removal_the_others_go_on_at_their_commit_without_the_removed(tmp_path):
    # horovodrun's graceful removal: the host list shrinks 3 -> 2; worker 2 is not stopped:
    # round 1 forms without it, the workers learn of it at their next commit, workers 0 and 1
    # join it, and worker 2 ends by itself when it would join it (exit 0, no failure).
    hosts, script = changing_hosts(tmp_path, "localhost:3")
    code, out, err = run_until(
        ["-np", "3", "--min-np", "2", "--host-discovery-script", script, PY, graceful(tmp_path),
         "1"], tmp_path,
        [("elastic round 0: 3 workers", lambda: hosts.write_text("localhost:2\n"))])
    assert code == 0, err
    assert "host localhost has 2 slots now: worker 2 leaves the job at its next commit" in err
    assert lines(out, "JOINED") == ["0 0 0 3", "0 1 0 2", "1 0 1 3", "1 1 1 2", "2 0 2 3"], out
    assert lines(out, "REMOVED") == ["2 1 host localhost has 2 slots now"], out
    assert "worker 2 (host localhost) left the job at its commit" in err, err
    assert "stopping worker" not in err and "SIGTERM" not in err, err


def test_a_removed_worker_whose_host_returns_before_the_next_round_stays(tmp_path):
    # The host list empties for a moment, then lists the same slots again: the workers never
    # left (no round formed without them: fewer than --min-np), so they stay, with no new round
    # and no new workers, as under horovodrun, where the same host keeps its workers.
    hosts, script = changing_hosts(tmp_path, "localhost:2")
    code, out, err = run_until(
        ["-np", "2", "--min-np", "2", "--host-discovery-script", script, PY,
         graceful(tmp_path), "1"], tmp_path,
        [("elastic round 0: 2 workers", lambda: hosts.write_text("")),
         ("fewer than --min-np 2: waiting", lambda: hosts.write_text("localhost:2\n")),
         ("lists worker 1's slot again", lambda: hosts.write_text("localhost:3\n"))])
    assert code == 0, err
    assert "host localhost lists worker 0's slot again: it stays in the job" in err, err
    assert "REMOVED" not in out
    # the third slot brings worker 2 (not 3: no replacement was ever started) in round 1
    assert "elastic round 1: 3 workers (localhost: 0-2), rank 0 is worker 0" in err, err


def test_no_worker_of_the_last_round_left_fails_the_job(tmp_path):
    # horovodrun's driver: "No hosts from previous set remaining, unable to broadcast state."
    # Every host of round 0 leaves the list, then another host comes: its new workers alone
    # would start the training from scratch, so the job fails instead, with a clear reason.
    hosts, script = changing_hosts(tmp_path, "localhost:2")
    code, out, err = run_until(
        ["-np", "2", "--min-np", "2", "--host-discovery-script", script, "--elastic-timeout",
         "20", PY, graceful(tmp_path), "5"], tmp_path,
        [("elastic round 0: 2 workers", lambda: hosts.write_text("")),
         ("fewer than --min-np 2: waiting", lambda: hosts.write_text("127.0.0.1:2\n"))])
    assert code == 1, err
    assert ("job failed: no worker of elastic round 0 is left to send the training state to "
            "the new workers 2-3 (as under horovodrun: no hosts from the previous set "
            "remaining, unable to broadcast state)") in err, err
    assert "elastic round 1" not in err


def test_a_replacement_joins_the_re_forming_it_was_started_for():
    # --reset-limit counts re-formings as horovodrun's resets: a round that only adds workers
    # started before the current round formed (a failed worker's replacement, slower to start
    # than the survivors' new round) completes that re-forming, and is no new one.
    from types import SimpleNamespace
    job = _job("--min-np", "1", "-H", "a:4")
    job.live = {w: SimpleNamespace(host="a", started_at=t)
                for w, t in ((0, 0.0), (1, 0.0), (3, 9.0), (4, 11.0))}
    job.round, job.members, job.published_at = 1, {0, 1}, 10.0
    inited = {"elastic/inited/0": b"1", "elastic/inited/1": b"1"}  # round 1 formed
    job.server = SimpleNamespace(get_nowait=inited.get)
    assert not job._is_reset({0, 1, 3})  # worker 3 was starting when round 1 formed
    assert job._is_reset({0, 1, 4})  # worker 4 came after: a new re-forming
    assert job._is_reset({0, 3})  # a member is gone
    assert job._is_reset({0, 1})  # the same workers, asking for a new round
    job.round = 0
    assert job._is_reset({0, 1, 3})  # the first round took every worker started before it
    job.round = -1
    assert not job._is_reset({0, 1})  # the first round is no re-forming


def test_workers_added_again_before_the_round_formed_are_the_same_reset():
    # horovodrun resets once its workers reach the interrupt, with whatever hosts were added
    # meanwhile: a round that only adds workers to a round that never formed (its members had
    # not reached their commit) is the same re-forming.
    from types import SimpleNamespace
    job = _job("--min-np", "1", "-H", "a:4")
    job.live = {w: SimpleNamespace(host="a", started_at=t)
                for w, t in ((0, 0.0), (1, 0.0), (2, 11.0), (3, 12.0))}
    job.round, job.members, job.published_at = 1, {0, 1, 2}, 11.5
    inited = {"elastic/inited/0": b"0", "elastic/inited/1": b"0"}  # still in round 0
    job.server = SimpleNamespace(get_nowait=inited.get)
    assert not job._is_reset({0, 1, 2, 3})
    assert job._is_reset({0, 1, 3})  # a member is gone
    inited["elastic/inited/1"] = b"1"  # round 1 formed
    assert job._is_reset({0, 1, 2, 3})


if __name__ == "__main__":
    sys.exit(pytest.main([__file__]))


def test_driver_fails_at_once_when_the_script_fails_on_its_first_run(tmp_path):
    # horovodrun: "The job will fail immediately if execution of the script returns a non-zero
    # exit code on the first call"; a later failure keeps the last list (test above).
    import time
    script = tmp_path / "broken.sh"
    script.write_text("#!/bin/sh\necho 'no such cluster' >&2\nexit 3\n")
    script.chmod(0o755)
    t0 = time.monotonic()
    r = kolorun(["--min-np", "2", "--host-discovery-script", str(script), "--elastic-timeout",
                 "60", PY, standin(tmp_path), "0"], env=base_env())
    assert time.monotonic() - t0 < 20  # not after --elastic-timeout
    assert r.returncode == 1, r.stderr
    assert "job failed: the host discovery script failed on its first run (host discovery " \
           "script exited with status 3: no such cluster)" in r.stderr
    assert "<stdout>" not in r.stdout  # no worker started


# ---- stand-in workers that act by their worker id ------------------------------------------
# ACTOR: a stand-in worker that acts as its argv says for its worker id ("ID=ACTION", "new=" for
# ids not named): "N" joins its round then exits N; "now:N" exits N at once (no round);
# "N@S" joins, sleeps S seconds, exits N; "hang" joins then sleeps 60 s. Each writes its pid to
# pid.<id> next to the script first.
ACTOR = textwrap.dedent("""\
    import os, sys, time
    sys.path[:0] = %r
    from store_client import StoreClient
    wid = os.environ["KOLO_ELASTIC_WORKER_ID"]
    acts = dict(a.split("=", 1) for a in sys.argv[1:])
    act = acts.get(wid, acts.get("new", "0"))
    f = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pid." + wid)
    open(f + ".tmp", "w").write(str(os.getpid()))
    os.rename(f + ".tmp", f)
    if act.startswith("now:"):
        sys.exit(int(act[4:]))
    c = StoreClient(os.environ["KOLO_RENDEZVOUS_ADDR"], os.environ["KOLO_RENDEZVOUS_PORT"])
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if c.check("elastic/round"):
            n = int(c.get("elastic/round", 1))
            if c.check("elastic/round%%d/assign/%%s" %% (n, wid)):
                break
        time.sleep(0.05)
    else:
        sys.exit(3)
    if act == "hang":
        time.sleep(60)
        sys.exit(9)
    code, _, delay = act.partition("@")
    time.sleep(float(delay or 0))
    sys.exit(int(code))
""")


def actor(tmp_path, *acts):
    path = tmp_path / "actor.py"
    path.write_text(ACTOR % (STANDIN_PATH,))
    return [PY, str(path)] + list(acts)


def _timed_kolorun(args, env=None, timeout=40):
    import time
    t0 = time.monotonic()
    r = kolorun(args, env=env, timeout=timeout)
    return r, time.monotonic() - t0


# ---- the discovery script runs beside the driver, in a process group of its own ------------
def _hanging_discovery(tmp_path):
    """A discovery script: its first run lists localhost:2; every later one writes "SHELL_PID
    SLEEP_PID" to hang.pids and hangs in a child (sleep 60)."""
    script = tmp_path / "discover.sh"
    script.write_text("#!/bin/sh\nif [ -e %(d)s/ran ]; then\n  sleep 60 &\n"
                      "  echo \"$$ $!\" > %(d)s/hang.tmp; mv %(d)s/hang.tmp %(d)s/hang.pids\n"
                      "  wait\nfi\ntouch %(d)s/ran\necho localhost:2\n" % {"d": tmp_path})
    script.chmod(0o755)
    return str(script)


def _wait_for_file(path, timeout=20):
    import time
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, "%s did not appear" % path
        time.sleep(0.05)
    return [int(x) for x in path.read_text().split()]


def test_discovery_script_timeout_kills_its_children(tmp_path, monkeypatch):
    from conftest import assert_all_gone
    from kolo_launcher import discovery
    # 3 s: the script must start sh, fork its sleep and record both pids first, on a loaded
    # machine too (its kill must not come before the pids it is checked against exist)
    monkeypatch.setattr(discovery, "SCRIPT_TIMEOUT", 3)
    (tmp_path / "ran").write_text("")
    d = discovery.HostDiscovery(_hanging_discovery(tmp_path))
    hosts, error = d.poll()
    assert hosts == [] and error == "host discovery script timed out after 3 s", error
    assert_all_gone([tuple(_wait_for_file(tmp_path / "hang.pids"))], timeout=2)


def test_a_hung_discovery_script_does_not_hold_up_the_driver(tmp_path):
    # The workers finish while the script's second run hangs: kolorun ends the job at once
    # (it used to wait for the script's 30 s limit) and leaves none of the script's processes.
    from conftest import assert_all_gone
    env = base_env(KOLO_ELASTIC_DISCOVERY_INTERVAL="0.1")
    r, took = _timed_kolorun(["-np", "2", "--min-np", "2", "--host-discovery-script",
                              _hanging_discovery(tmp_path)] + actor(tmp_path, "0=0@1", "1=0@1"),
                             env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    assert took < 15, took
    assert_all_gone([tuple(_wait_for_file(tmp_path / "hang.pids"))], timeout=2)


@pytest.mark.parametrize("sig", ["SIGINT", "SIGKILL"])
def test_a_signal_stops_kolorun_during_a_hung_discovery_script(tmp_path, sig):
    # SIGINT is acted on at once (not after the script's limit); after a SIGKILL, the orphan
    # guard stops the script's group as it stops the workers'. Nothing is left either way.
    import signal
    import subprocess
    import time
    from conftest import KOLORUN, assert_all_gone
    env = base_env(KOLO_ELASTIC_DISCOVERY_INTERVAL="0.1", KOLO_LAUNCHER_KILL_GRACE_SECONDS="1")
    p = subprocess.Popen([PY, KOLORUN, "-np", "2", "--min-np", "2", "--host-discovery-script",
                          _hanging_discovery(tmp_path)] + actor(tmp_path, "0=hang", "1=hang"),
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        script_pids = _wait_for_file(tmp_path / "hang.pids")
        workers = [_wait_for_file(tmp_path / ("pid.%d" % i))[0] for i in range(2)]
        t0 = time.monotonic()
        p.send_signal(getattr(signal, sig))
        _, err = p.communicate(timeout=30)
        if sig == "SIGINT":
            assert p.returncode == 128 + signal.SIGINT, err
            assert time.monotonic() - t0 < 10, err
        assert_all_gone([tuple(script_pids), tuple(workers)], timeout=5)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()


# ---- how an elastic job ends: every worker of the round failed, or no host is left ---------
@pytest.mark.parametrize("cooldown", [[], ["--blacklist-cooldown-range", "1", "2"]])
def test_driver_fails_at_once_when_every_worker_of_the_round_fails(tmp_path, cooldown):
    # horovodrun: every worker of the round failed -> the job fails. Before, kolorun forgave
    # the first failure, blacklisted localhost at the second and waited --elastic-timeout for
    # hosts (a fixed list: none can come), or restarted both forever with a cool-down.
    r, took = _timed_kolorun(["-np", "2", "--min-np", "2", "-H", "localhost:2",
                              "--elastic-timeout", "60"] + cooldown
                             + actor(tmp_path, "0=1", "1=1"))
    assert r.returncode == 1, r.stderr
    assert "job failed: every worker of elastic round 0 failed: worker 0 (host localhost) " \
        "exited with status 1, worker 1 (host localhost) exited with status 1" in r.stderr, \
        r.stderr
    # (when the two exits are seen in separate polls, "1 worker left ... waiting" may come
    # first: it is true until the second one is seen)
    assert "elastic round 1" not in r.stderr
    assert took < 20, took


def test_driver_fails_at_once_when_no_host_of_a_fixed_list_can_start_a_worker(tmp_path):
    # Worker 0 fails (the only host: forgiven), its replacement 2 fails too: localhost is
    # blacklisted for good, and worker 1 alone is below --min-np 2. With -H nothing can come
    # back: the job fails now with the last failure's status, not after --elastic-timeout.
    r, took = _timed_kolorun(["-np", "2", "--min-np", "2", "-H", "localhost:2",
                              "--elastic-timeout", "60"]
                             + actor(tmp_path, "0=3", "1=hang", "new=now:4"))
    assert r.returncode == 4, r.stderr
    assert "job failed: only 1 worker left, fewer than --min-np 2, and the fixed host list " \
        "(-H/--hostfile) can never start enough (blacklisted for the rest of the job: " \
        "localhost); the last failure: worker 2 (host localhost) exited with status 4" \
        in r.stderr, r.stderr
    assert took < 20, took


# ---- how an elastic job ends: a worker finished ----------------------------------------------
def test_driver_stops_the_others_once_a_worker_finished_and_the_grace_ran_out(tmp_path):
    # With KOLO_ELASTIC_FINISH_GRACE_SECONDS set, the workers still running that long after a
    # success are stopped (by default they finish by themselves, as under horovodrun). Worker 1
    # never exits (it left the runtime and sleeps): SIGTERM after 1 s; the job succeeds with
    # worker 0.
    from conftest import process_alive
    env = base_env(KOLO_ELASTIC_FINISH_GRACE_SECONDS="1")
    r, took = _timed_kolorun(["-np", "2", "--min-np", "2", "-H", "localhost:2"]
                             + actor(tmp_path, "0=0", "1=hang"), env=env)
    assert r.returncode == 0, r.stderr
    assert "worker 0 (host localhost) finished; the job ends when every worker has, or in 1 s " \
        "(KOLO_ELASTIC_FINISH_GRACE_SECONDS) when kolorun stops the others" in r.stderr, r.stderr
    assert "worker 1 still running 1 s after worker 0 finished: stopping it" in r.stderr, \
        r.stderr
    assert not process_alive(int((tmp_path / "pid.1").read_text()))
    assert took < 20, took


def test_driver_a_failure_before_the_success_in_the_same_round_fails_the_job(tmp_path):
    # Horovod's result is the first non-zero exit of the last round: worker 1 fails, then
    # worker 0 (same round) finishes: the job fails with worker 1's status.
    r, took = _timed_kolorun(["-np", "2", "--min-np", "2", "-H", "localhost:2",
                              "--elastic-timeout", "60"]
                             + actor(tmp_path, "0=0@1", "1=6", "new=hang"))
    assert r.returncode == 6, r.stderr
    assert "job failed: worker 1 (host localhost) exited with status 6" in r.stderr, r.stderr
    assert took < 20, took


def test_a_discovery_script_named_bare_is_run_from_the_current_folder(tmp_path, monkeypatch):
    # The shell looks a bare name up on PATH: "d.sh" in the current folder would fail at its
    # first run. kolorun takes it as ./d.sh, and refuses a name that is neither there nor on
    # PATH, or not executable, at once.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "d.sh").write_text("#!/bin/sh\necho localhost:2\n")
    (tmp_path / "d.sh").chmod(0o755)
    (tmp_path / "noexec.sh").write_text("echo localhost:2\n")
    assert opts("--min-np", "1", "--host-discovery-script", "d.sh").elastic.discovery_script \
        == "./d.sh"
    assert opts("--min-np", "1", "--host-discovery-script", "d.sh --all") \
        .elastic.discovery_script == "./d.sh --all"
    for script in ("echo localhost:2", "X=1 ./d.sh", "./d.sh"):
        assert opts("--min-np", "1", "--host-discovery-script", script) \
            .elastic.discovery_script == script
    for script, text in (("noexec.sh", "noexec.sh is not an executable file"),
                         ("./noexec.sh", "./noexec.sh is not an executable file"),
                         ("missing.sh", "missing.sh is neither an executable file nor a command "
                                        "on PATH (give a path, e.g. ./missing.sh)")):
        with pytest.raises(UsageError) as e:
            opts("--min-np", "1", "--host-discovery-script", script)
        assert text in str(e.value)
    r = kolorun(["--min-np", "1", "--host-discovery-script", "d.sh", PY, "-c", "print('ran')"],
                cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "[0]<stdout>:ran" in r.stdout


def test_no_waiting_for_hosts_message_while_a_replacement_starts(tmp_path):
    # Worker 1 fails; localhost, the only host, is forgiven and a replacement starts at once:
    # worker 0 alone is below --min-np 2 only until it is ready, so kolorun does not say it waits
    # for hosts. (The replacement never gets ready; worker 0 finishes, and the job ends with
    # worker 1's status: a member of the round failed before the success.)
    r, took = _timed_kolorun(["-np", "2", "--min-np", "2", "-H", "localhost:2"]
                             + actor(tmp_path, "0=0@2", "1=3", "new=hang"))
    assert r.returncode == 3, r.stderr
    assert "worker 1 (host localhost) exited with status 3" in r.stderr, r.stderr
    assert "fewer than --min-np" not in r.stderr, r.stderr
    assert took < 20, took


def test_a_member_absent_from_a_round_the_others_could_not_form_is_stopped():
    # Round 1 = {0, 1, 2}. Worker 2 never took its place in it (elastic/joining/2 is 0).
    import signal
    import subprocess
    import time
    from types import SimpleNamespace
    from kolo_launcher.store_server import StoreServer
    job = _job("--min-np", "1", "-H", "localhost:3", "--start-timeout", "5")
    job.server = StoreServer("127.0.0.1", 0).start()
    stops = {}

    def worker(wid, remote=True, pid=None):
        return SimpleNamespace(host="localhost", remote=remote, pid=pid,
                               request_stop=lambda sig: stops.setdefault(wid, sig))

    def key(kind, wid, n):
        job.server.set("elastic/%s/%d" % (kind, wid), str(n).encode())

    sleeper = None
    try:
        job.live = {w: worker(w) for w in (0, 1, 2)}
        job.round, job.members = 1, {0, 1, 2}
        for w in (0, 1):
            key("joining", w, 1)
            key("inited", w, 0)
        key("joining", 2, 0)
        # The others wait in the rendezvous, or for worker 2's next commit: no init failed,
        # however long it takes (a busy worker is not stopped).
        job._stop_absent_members(100.0)
        assert not job.absent and not stops
        # Their init in round 1 failed (they ask for a new round): worker 2 gets --start-timeout
        # more to take a place in some round, then it is stopped with SIGKILL.
        key("want", 0, 1)
        job._stop_absent_members(100.0)
        assert sorted(job.absent) == [2] and not stops
        job._stop_absent_members(104.9)
        assert not stops
        job._stop_absent_members(105.0)
        assert stops == {2: signal.SIGKILL}, stops
        assert "worker 2 (host localhost) did not take its place in elastic round 1, which " \
            "the others could not form without it" in job.console.lines[-1], job.console.lines
        assert job.absent[2].stopped
        # One that gets a place in time (slow, not stuck) is not stopped.
        stops.clear()
        job.absent.clear()
        job._stop_absent_members(200.0)
        key("joining", 2, 2)
        job._stop_absent_members(300.0)
        assert not job.absent and not stops
        # A stopped local process (SIGSTOP) is stopped at once.
        sleeper = subprocess.Popen(["sleep", "30"], start_new_session=True)
        sleeper.send_signal(signal.SIGSTOP)
        time.sleep(0.2)
        key("joining", 2, 0)
        job.live[2] = worker(2, remote=False, pid=sleeper.pid)
        job._stop_absent_members(400.0)
        assert stops == {2: signal.SIGKILL}, stops
        assert "it is a stopped process (state T)" in job.console.lines[-1]
    finally:
        job.server.stop()
        if sleeper is not None:
            sleeper.kill()
            sleeper.wait()
