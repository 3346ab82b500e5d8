# SPDX-License-Identifier: Apache-2.0
"""kolo.run (bindings/python/kolo/runner.py) on this machine, as horovod.run: a SIGTERM to the
calling process stops its ranks and removes the temporary folder, then ends the process as
SIGTERM would; a SIGKILLed caller's ranks (and their children) kill themselves (the lifeline),
and a SIGKILLed caller of a hosts= job leaves no kolorun, rank or child either (PDEATHSIG);
horovod.run's disable_cache, mpi_args and slots keywords. Needs cloudpickle and the library
(KOLO_LIBRARY); skips with a message otherwise."""

import glob
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from conftest import PY, REPO, assert_all_gone, base_env, read_pids

PYTHON_DIR = os.path.join(REPO, "bindings", "python")
sys.path.insert(0, PYTHON_DIR)

DRIVER = textwrap.dedent("""\
    import os, sys, time
    import kolo

    def work(d):
        import os, subprocess, time
        child = subprocess.Popen(["sleep", "60"])
        r = os.environ["KOLO_RANK"]
        with open(os.path.join(d, "pid.%s.tmp" % r), "w") as f:
            f.write("%d %d" % (os.getpid(), child.pid))
        os.rename(os.path.join(d, "pid.%s.tmp" % r), os.path.join(d, "pid.%s" % r))
        time.sleep(60)

    print("WORKDIRS", os.environ["TMPDIR"], flush=True)
    kolo.run(work, args=(sys.argv[1],), np=2)
""")


def _env(tmp_path):
    try:
        import cloudpickle  # noqa: F401
    except ImportError:
        pytest.skip("kolo.run needs cloudpickle (python3-cloudpickle)")
    if not os.environ.get("KOLO_LIBRARY"):
        pytest.skip("kolo.run needs the library: set KOLO_LIBRARY")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    return base_env(PYTHONPATH=PYTHON_DIR, KOLO_LIBRARY=os.environ["KOLO_LIBRARY"],
                    TMPDIR=str(tmp))


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_signalled_caller_leaves_no_rank_nor_child(tmp_path, piddir, sig):
    env = _env(tmp_path)
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    p = subprocess.Popen([PY, str(driver), piddir], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    try:
        pids = read_pids(piddir, 2, timeout=60)
        assert glob.glob(os.path.join(env["TMPDIR"], "kolo-run-*"))
        p.send_signal(sig)
        _, err = p.communicate(timeout=30)
        assert_all_gone(pids, timeout=15)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == -sig, err.decode()  # died of the signal, as without kolo.run
    assert not glob.glob(os.path.join(env["TMPDIR"], "kolo-run-*"))  # no temporary folder left


def _descendants(pid):
    """Every process below pid, from /proc/PID/task/*/children."""
    found, todo = [], [pid]
    while todo:
        for path in glob.glob("/proc/%d/task/*/children" % todo.pop()):
            try:
                with open(path) as f:
                    kids = [int(k) for k in f.read().split()]
            except OSError:
                continue
            found += kids
            todo += kids
    return found


def test_sigkilled_caller_of_a_hosts_job_leaves_nothing(tmp_path, piddir):
    """kolo.run(hosts=...): kolorun is tied to the calling process (the kernel sends it SIGTERM
    when the caller dies), so kill -9 of the caller stops kolorun, which stops its ranks and
    what they started, as on SIGTERM. Two host names of this machine: no ssh."""
    env = _env(tmp_path)
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER.replace("np=2)", "np=2, hosts='localhost:1,127.0.0.1:1')"))
    with open(str(tmp_path / "driver.err"), "w") as err:
        p = subprocess.Popen([PY, str(driver), piddir], env=env, stdout=subprocess.DEVNULL,
                             stderr=err)
    tree = []
    try:
        pids = read_pids(piddir, 2, timeout=60)
        tree = _descendants(p.pid)  # kolorun, its orphan guard, the ranks, their sleeps
        assert set(pid for pair in pids for pid in pair) <= set(tree), tree
        p.kill()
        p.wait(timeout=30)
        assert_all_gone([(pid,) for pid in tree], timeout=20)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        for pid in tree:  # the failure case: leave nothing behind for the next test
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def test_previous_sigterm_handler_is_restored_and_runs(tmp_path):
    env = _env(tmp_path)
    script = tmp_path / "handler.py"
    script.write_text(textwrap.dedent("""\
        import os, signal, threading, time
        import kolo
        seen = []
        signal.signal(signal.SIGTERM, lambda *a: seen.append("mine"))

        def slow():
            import time
            time.sleep(60)

        threading.Timer(3.0, lambda: os.kill(os.getpid(), signal.SIGTERM)).start()
        try:
            kolo.run(slow, np=2, timeout=50)
        except RuntimeError as e:
            print("RAISED", e)
        print("SEEN", seen, signal.getsignal(signal.SIGTERM).__name__)
    """))
    r = subprocess.run([PY, str(script)], env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "RAISED kolo.run: stopped by SIGTERM" in r.stdout
    assert "SEEN ['mine'] <lambda>" in r.stdout


def test_horovod_run_keywords(tmp_path):
    env = _env(tmp_path)
    script = tmp_path / "kw.py"
    script.write_text(textwrap.dedent("""\
        import kolo
        from kolo.runner import _with_slots

        def rank():
            import os
            return int(os.environ["KOLO_RANK"])

        print("DC", kolo.run(rank, np=2, disable_cache=True))
        print("MA", kolo.run(rank, np=2, mpi_args="--map-by ppr:1:node"))
        print("SL", kolo.run(rank, np=2, slots=4))
        print("WS", _with_slots("a,b:3,[::1],[fe80::1]:2", 2))
        try:
            kolo.run(rank, np=2, hosts="a,b", slots=0)
        except ValueError as e:
            print("BAD", e)
    """))
    r = subprocess.run([PY, str(script)], env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    for line in ("DC [0, 1]", "MA [0, 1]", "SL [0, 1]", "WS a:2,b:3,[::1]:2,[fe80::1]:2",
                 "BAD slots must be a positive int; got 0"):
        assert line in r.stdout, r.stdout + r.stderr


def test_both_ways_of_starting_ranks_set_the_same_variables(tmp_path):
    """kolo.run's own local ranks and kolorun's (start_timeout= makes kolo.run use kolorun on
    this machine) see the same place variables, under kolo's and Horovod's names, and neither
    sees the caller's own (a caller that is itself a rank, elastic or not); only the
    rendezvous's variables differ (a file store, kolorun's TCP store)."""
    env = _env(tmp_path)
    env.update({"KOLO_ELASTIC": "1", "HOROVOD_ELASTIC": "1", "HOROVOD_RANK": "7",
                "KOLO_HOSTNAME": "caller", "KOLO_ELASTIC_WORKER_ID": "4"})
    script = tmp_path / "env.py"
    script.write_text(textwrap.dedent("""\
        import json
        import kolo

        def variables():
            import os
            return {k: v for k, v in os.environ.items()
                    if k.startswith(("KOLO_", "HOROVOD_")) or k == "PYTHONUNBUFFERED"}

        print("LOCAL", json.dumps(kolo.run(variables, np=2)))
        print("KOLORUN", json.dumps(kolo.run(variables, np=2, start_timeout=120)))
        # horovod.run: max_num_proc alone is not elastic (num_proc ranks, static)
        print("MAX", json.dumps(kolo.run(variables, np=2, max_num_proc=4)))
    """))
    r = subprocess.run([PY, str(script)], env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    import json
    got = {line.split(" ", 1)[0]: json.loads(line.split(" ", 1)[1])
           for line in r.stdout.splitlines() if line.startswith(("LOCAL ", "KOLORUN ", "MAX "))}
    rendezvous = {"KOLO_RENDEZVOUS_DIR", "KOLO_RENDEZVOUS_ADDR", "KOLO_RENDEZVOUS_PORT",
                  "HOROVOD_GLOO_RENDEZVOUS_ADDR", "HOROVOD_GLOO_RENDEZVOUS_PORT",
                  "KOLO_RUN_PORT", "KOLO_RUN_ELASTIC"}
    for rank in (0, 1):
        local, hosts = ({k: v for k, v in got[way][rank].items() if k not in rendezvous}
                        for way in ("LOCAL", "KOLORUN"))
        assert local == hosts, (local, hosts)
        for name in ("RANK", "LOCAL_RANK"):
            assert local["KOLO_" + name] == local["HOROVOD_" + name] == str(rank)
        assert local["HOROVOD_SIZE"] == "2" and local["HOROVOD_HOSTNAME"] == "localhost"
        assert local["KOLO_HOSTNAME"] == "localhost" and local["PYTHONUNBUFFERED"] == "1"
        assert "KOLO_ELASTIC" not in local and "HOROVOD_ELASTIC" not in local
        assert "KOLO_ELASTIC_WORKER_ID" not in local
        assert got["MAX"][rank]["KOLO_RANK"] == str(rank) and "KOLO_RUN_PORT" not in \
            got["MAX"][rank]  # kolo.run's own local ranks: not an elastic job under kolorun


def test_network_interface_as_a_string_or_a_list_of_names(tmp_path):
    """horovod.run documents network_interface as 'eth0,eth1' and keeps it as its set of NICs
    (Ray's HorovodConfig passes a set): kolo.run takes a list or set too; anything else is a
    ValueError before anything starts."""
    env = _env(tmp_path)
    script = tmp_path / "nic.py"
    script.write_text(textwrap.dedent("""\
        import kolo

        def iface():
            import os
            return os.environ.get("KOLO_GLOO_IFACE")

        print("STR", kolo.run(iface, np=1, network_interface="lo"))
        print("LIST", kolo.run(iface, np=1, network_interface=["lo"]))
        print("SET", kolo.run(iface, np=1, network_interface={"lo"}))
        for bad in ([], [3], 7):
            try:
                kolo.run(iface, np=1, network_interface=bad)
            except ValueError as e:
                print("BAD", e)
    """))
    r = subprocess.run([PY, str(script)], env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[:3] == ["STR ['lo']", "LIST ['lo']", "SET ['lo']"], r.stdout + r.stderr
    assert len(lines) == 6 and all(l.startswith("BAD kolo.run: network_interface must be")
                                   for l in lines[3:]), r.stdout


def test_horovod_run_positional_signature_maps_to_kolorun(tmp_path):
    """kolo.run takes horovod.run's (0.28) arguments positionally, in its order, up to
    network_interfaces, and each one becomes its kolorun flag (the command is captured, not run);
    the deprecated names warn and map the same way."""
    env = _env(tmp_path)
    script = tmp_path / "positional.py"
    script.write_text(textwrap.dedent("""\
        import inspect, pickle, warnings
        import kolo
        from kolo import _run_hosts

        def fn(x, k=0):
            return x + k

        def capture(payload, np, hosts, hostfile, env, timeout, python, base_env, options):
            cmd = _run_hosts.kolorun_command("KOLORUN", python, np, hosts, hostfile, [], options)
            func, args, kwargs = pickle.loads(payload)
            print("CALL", func(*args, **kwargs), args, kwargs)
            print("CMD", " ".join(cmd[2:cmd.index("--")]))
            return [None]

        _run_hosts.run_on_hosts = capture
        print("SIG", list(inspect.signature(kolo.run).parameters))
        # func, args, kwargs, num_proc, min_num_proc, max_num_proc, slots, reset_limit,
        # cooldown_range, hosts, hostfile, host_discovery_script, start_timeout, ssh_port,
        # ssh_identity_file, disable_cache, output_filename, verbose, use_gloo, use_mpi,
        # mpi_args, network_interface, network_interfaces
        kolo.run(fn, (5,), {"k": 1}, 4, 2, 6, 3, 7, (1, 30), None, None, "/bin/disc.sh", 45,
                 2222, "/id", True, "/tmp/out", True, True, False, "--x", None,
                 ["eth0", "eth1"])
        kolo.run(fn, (1,), None, 2, None, None, 3, None, None, "a,b:1", None, None, None,
                 None, None, None, None, None, None, None, None, None, {"eth1", "eth0"})
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            kolo.run(fn, (2,), hostfile="/hf", network_interface="eth0,eth1", np=3, min_np=1,
                     max_np=5)
        print("WARN", sorted(str(w.message) for w in caught
                             if issubclass(w.category, DeprecationWarning)))
        for bad in ({"use_mpi": True}, {"use_gloo": False}, {"hosts": "a", "hostfile": "/f"},
                    {"np": 2, "num_proc": 3},
                    {"network_interface": "eth0", "network_interfaces": ["eth1"]}):
            try:
                kolo.run(fn, (0,), **bad)
            except ValueError as e:
                print("BAD", sorted(bad), e)
    """))
    r = subprocess.run([PY, str(script)], env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    out = r.stdout.splitlines()
    assert out[0] == "SIG " + str([
        "func", "args", "kwargs", "num_proc", "min_num_proc", "max_num_proc", "slots",
        "reset_limit", "cooldown_range", "hosts", "hostfile", "host_discovery_script",
        "start_timeout", "ssh_port", "ssh_identity_file", "disable_cache", "output_filename",
        "verbose", "use_gloo", "use_mpi", "mpi_args", "network_interface", "network_interfaces",
        "executable", "np", "min_np", "max_np", "env", "timeout"]), r.stdout
    assert out[1:3] == ["CALL 6 (5,) {'k': 1}",
                        "CMD -np 4 --network-interface eth0,eth1 --ssh-port 2222 "
                        "--ssh-identity-file /id --start-timeout 45 --output-filename /tmp/out "
                        "--min-np 2 --max-np 6 --reset-limit 7 --host-discovery-script "
                        "/bin/disc.sh --slots-per-host 3 --blacklist-cooldown-range 1.0 30.0 "
                        "--verbose"], r.stdout
    assert out[3:5] == ["CALL 1 (1,) {}",
                        "CMD -np 2 -H a:3,b:1 --network-interface eth0,eth1"], r.stdout
    assert out[5:7] == ["CALL 2 (2,) {}",
                        "CMD -np 3 --hostfile /hf --network-interface eth0,eth1 --min-np 1 "
                        "--max-np 5"], r.stdout
    assert out[7] == "WARN " + str([
        "max_np is deprecated, use max_num_proc instead",
        "min_np is deprecated, use min_num_proc instead",
        "network_interface is deprecated, use network_interfaces instead",
        "np is deprecated, use num_proc instead"]), r.stdout
    bad = out[8:]
    assert len(bad) == 5 and all(line.startswith("BAD ") for line in bad), r.stdout
    for line, words in zip(bad, ("use_mpi", "use_gloo=False", "hosts or hostfile",
                                 "disagree", "disagree")):
        assert words in line, line
