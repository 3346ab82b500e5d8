# SPDX-License-Identifier: Apache-2.0
"""Command line, host lists, topology, the mpirun line and the remote script (no processes)."""

import random
import string

import pytest

from conftest import kolorun
from kolo_launcher import args, mpi_run, ssh
from kolo_launcher.hosts import (HostListError, HostSlots, parse_host_entry, parse_hostfile_text,
                                 parse_hosts)
from kolo_launcher.topology import TopologyError, assign

ENV = {"PATH": "/usr/bin", "HOME": "/root"}


def parse(*argv, env=None):
    return args.parse(list(argv), ENV if env is None else env)


# ---- host lists -------------------------------------------------------------------------------
def test_parse_hosts():
    assert parse_hosts("a:2,b:4,c") == [HostSlots("a", 2), HostSlots("b", 4), HostSlots("c", 1)]
    assert parse_hosts("[::1]:3,10.0.0.1:2") == [HostSlots("::1", 3), HostSlots("10.0.0.1", 2)]
    assert parse_hosts("user@node-1.example.com:8") == [HostSlots("user@node-1.example.com", 8)]


@pytest.mark.parametrize("bad,message", [
    ("", "empty host list"), ("a:2,,b", "empty host entry"), ("a:0", "out of range"),
    ("a:x", "not a positive integer"), ("a:-1", "not a positive integer"),
    ("-oProxyCommand=x:1", "invalid host name"), ("a b:1", "invalid host name"),
    ("a:1,a:2", "listed twice"), ("fe80::1:2", "IPv6"), ("[::1", "unclosed"),
    ("a:\u00b2", "not a positive integer"), ("a\n:1", "invalid host name"),
])
def test_parse_hosts_errors(bad, message):
    with pytest.raises(HostListError, match=message):
        parse_hosts(bad)


def test_parse_hostfile():
    text = "# cluster\nnode1 slots=4\nnode2:2   # two GPUs\n\nnode3\n[::1] slots=2 max_slots=8\n"
    assert parse_hostfile_text(text) == [HostSlots("node1", 4), HostSlots("node2", 2),
                                         HostSlots("node3", 1), HostSlots("::1", 2)]
    with pytest.raises(HostListError, match=r"hf:2: expected 'host slots=N'"):
        parse_hostfile_text("a\nb c\n", "hf")
    with pytest.raises(HostListError, match="no hosts"):
        parse_hostfile_text("# nothing\n", "hf")


def test_hostfile_max_slots_and_spaces_around_equals():
    # horovodrun reads "host max_slots=2" as 2 slots (the value after '='); Open MPI accepts
    # spaces around '='. slots= wins over max_slots= on one line.
    text = "localhost max_slots=2\nb slots = 3\nc slots=1 max_slots=4\nd max-slots =5\n"
    assert parse_hostfile_text(text) == [HostSlots("localhost", 2), HostSlots("b", 3),
                                         HostSlots("c", 1), HostSlots("d", 5)]
    with pytest.raises(HostListError, match="slot count 'x'"):
        parse_hostfile_text("a slots = x\n", "hf")


def test_host_parsers_only_raise_host_list_errors():
    rng = random.Random(1234)
    alphabet = string.printable + "[]:,=\u00e9\u0660"
    for _ in range(3000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 24)))
        for fn in (parse_hosts, parse_hostfile_text, parse_host_entry):
            try:
                hosts = fn(text)
            except HostListError:
                continue
            for h in (hosts if isinstance(hosts, list) else [hosts]):
                assert h.slots >= 1 and h.name and not h.name.startswith("-")


# ---- topology ---------------------------------------------------------------------------------
def topo(hosts, np):
    return [(s.host, s.local_rank, s.local_size, s.cross_rank, s.cross_size)
            for s in assign(parse_hosts(hosts), np)]


def test_topology_two_by_two():
    assert topo("a:2,b:2", 4) == [("a", 0, 2, 0, 2), ("a", 1, 2, 0, 2),
                                  ("b", 0, 2, 1, 2), ("b", 1, 2, 1, 2)]


def test_topology_uneven_and_partial():
    assert topo("a:2,b:1", 3) == [("a", 0, 2, 0, 2), ("a", 1, 2, 0, 1), ("b", 0, 1, 1, 2)]
    # -np smaller than the slots: fill in order, later hosts get nothing
    assert topo("a:4,b:4", 3) == [("a", 0, 3, 0, 1), ("a", 1, 3, 0, 1), ("a", 2, 3, 0, 1)]
    assert topo("a:1,b:3,c:2", 6) == [("a", 0, 1, 0, 3), ("b", 0, 3, 1, 3), ("b", 1, 3, 0, 2),
                                      ("b", 2, 3, 0, 1), ("c", 0, 2, 2, 3), ("c", 1, 2, 1, 2)]
    assert topo("a:1,b:3,c:2", 5)[2:] == [("b", 1, 3, 0, 1), ("b", 2, 3, 0, 1),
                                          ("c", 0, 1, 2, 3)]
    assert [s.rank for s in assign(parse_hosts("a:2,b:2"), 4)] == [0, 1, 2, 3]


def test_topology_too_many_processes():
    with pytest.raises(TopologyError, match=r"-np 5 .* slots \(4: a:2,b:2\)"):
        assign(parse_hosts("a:2,b:2"), 5)


# ---- options ----------------------------------------------------------------------------------
def test_defaults():
    o = parse("-np", "3", "python", "train.py")
    assert o.np == 3 and o.hosts == [HostSlots("localhost", 3)] and o.controller == "gloo"
    assert o.command == ["python", "train.py"] and o.start_timeout == 120
    assert o.knob_env == {"KOLO_START_TIMEOUT": "120"}


def test_every_flag_maps_to_its_variable():
    o = parse("-np", "2", "--fusion-threshold-mb", "32", "--cycle-time-ms", "2.5",
              "--cache-capacity", "64", "--timeline-filename", "/tmp/t.json",
              "--timeline-mark-cycles", "--no-stall-check",
              "--stall-check-warning-time-seconds", "30",
              "--stall-check-shutdown-time-seconds", "90", "--log-level", "DEBUG",
              "--network-interface", "eth0", "--start-timeout", "30", "--hierarchical-allreduce",
              "--autotune", "--autotune-log-file", "/tmp/a.csv", "--autotune-warmup-samples",
              "0", "--autotune-steps-per-sample", "5", "--autotune-bayes-opt-max-samples", "40",
              "--autotune-gaussian-process-noise", "0.75", "cmd")
    assert o.knob_env == {
        "KOLO_FUSION_THRESHOLD": str(32 * 1048576), "KOLO_CYCLE_TIME": "2.5",
        "KOLO_CACHE_CAPACITY": "64", "KOLO_TIMELINE": "/tmp/t.json",
        "KOLO_TIMELINE_MARK_CYCLES": "1", "KOLO_STALL_CHECK_DISABLE": "1",
        "KOLO_STALL_CHECK_TIME_SECONDS": "30", "KOLO_STALL_SHUTDOWN_TIME_SECONDS": "90",
        "KOLO_LOG_LEVEL": "debug", "KOLO_GLOO_IFACE": "eth0", "KOLO_START_TIMEOUT": "30",
        "KOLO_HIERARCHICAL_ALLREDUCE": "1", "KOLO_AUTOTUNE": "1",
        "KOLO_AUTOTUNE_LOG": "/tmp/a.csv", "KOLO_AUTOTUNE_WARMUP_SAMPLES": "0",
        "KOLO_AUTOTUNE_STEPS_PER_SAMPLE": "5", "KOLO_AUTOTUNE_BAYES_OPT_MAX_SAMPLES": "40",
        "KOLO_AUTOTUNE_GAUSSIAN_PROCESS_NOISE": "0.75"}
    # horovodrun's --disable-cache concerns its start-up check cache, not the response cache.
    assert "KOLO_CACHE_CAPACITY" not in parse("-np", "1", "--disable-cache", "c").knob_env
    assert parse("-np", "1", "--disable-cache", "--cache-capacity", "5", "c").knob_env[
        "KOLO_CACHE_CAPACITY"] == "5"
    assert parse("-np", "1", "--fusion-threshold-mb", "0.5", "c").knob_env[
        "KOLO_FUSION_THRESHOLD"] == "524288"


def test_horovodrun_spellings():
    o = parse("--num-proc", "4", "--hosts", "a:2,b:2", "--ssh-port", "2222",
              "--gloo-timeout-seconds", "45", "--disable-cache", "--verbose", "--gloo", "cmd")
    assert (o.np, o.ssh_port, o.start_timeout, o.verbose) == (4, 2222, 45, True)
    assert o.hosts == [HostSlots("a", 2), HostSlots("b", 2)]
    # --network-interfaces takes a comma list, --network-interface repeats; Gloo uses the first.
    o = parse("-np", "1", "--network-interfaces", "eth0,eth1", "--network-interface", "eth2",
              "--network-interface", "eth0", "c")
    assert o.network_interface == "eth0,eth1,eth2"
    assert o.knob_env["KOLO_GLOO_IFACE"] == "eth0"
    assert parse("-n", "2", "--verbose", "-p", "22", "c").ssh_port == 22
    assert parse("-np=2", "--hosts=a:2", "c").np == 2


def test_command_options_stay_with_the_command():
    o = parse("-np", "2", "python", "train.py", "-np", "7", "-v", "--help")
    assert o.command == ["python", "train.py", "-np", "7", "-v", "--help"] and not o.verbose
    assert parse("-np", "1", "--", "-weird", "x").command == ["-weird", "x"]


def test_np_defaults_to_all_slots_and_hostfile(tmp_path):
    assert parse("-H", "a:2,b:3", "c").np == 5
    hf = tmp_path / "hosts"
    hf.write_text("a slots=2\nb slots=2\n")
    o = parse("--hostfile", str(hf), "c")
    assert o.np == 4 and o.hosts_given


def test_x_variables():
    o = parse("-np", "1", "-x", "A=1", "-x", "PATH", "-x", "B=x=y", "c")
    assert o.extra_env == {"A": "1", "PATH": "/usr/bin", "B": "x=y"}
    with pytest.raises(args.UsageError, match="NOPE is not set"):
        parse("-np", "1", "-x", "NOPE", "c")
    with pytest.raises(args.UsageError, match="not a valid variable name"):
        parse("-np", "1", "-x", "1A=2", "c")


def test_start_timeout_from_environment():
    assert parse("-np", "1", "c", env={"KOLO_START_TIMEOUT": "7"}).start_timeout == 7
    with pytest.raises(args.UsageError, match="KOLO_START_TIMEOUT"):
        parse("-np", "1", "c", env={"KOLO_START_TIMEOUT": "soon"})


@pytest.mark.parametrize("argv,message", [
    (["c"], "-np is required"),
    (["-np", "2"], "no command"),
    (["-np", "0", "c"], "-np: expected an integer"),
    (["-np", "x", "c"], "-np: expected an integer"),
    (["-np", "2", "--gloo", "--mpi", "c"], "exclude each other"),
    (["-np", "2", "-H", "a:2", "--hostfile", "f", "c"], "not both"),
    (["-np", "2", "--cycle-time-ms", "fast", "c"], "--cycle-time-ms: expected a number"),
    (["-np", "2", "--cycle-time-ms", "nan", "c"], "--cycle-time-ms"),
    (["-np", "2", "--fusion-threshold-mb", "-1", "c"], "--fusion-threshold-mb"),
    (["-np", "2", "--cache-capacity", "1_0", "c"], "--cache-capacity"),
    (["-np", "2", "--log-level", "loud", "c"], "--log-level: expected one of"),
    (["-np", "2", "--autotune-steps-per-sample", "0", "c"], "--autotune-steps-per-sample"),
    (["-np", "2", "--autotune-bayes-opt-max-samples", "x", "c"],
     "--autotune-bayes-opt-max-samples"),
    (["-np", "2", "--autotune-warmup-samples", "-1", "c"], "--autotune-warmup-samples"),
    (["-np", "2", "--autotune-gaussian-process-noise", "inf", "c"],
     "--autotune-gaussian-process-noise"),
    # horovodrun's validate_config_args: "must be in [0, 1]"
    (["-np", "2", "--autotune-gaussian-process-noise", "1.5", "c"],
     "--autotune-gaussian-process-noise: expected a number from 0 to 1, got '1.5'"),
    (["-np", "2", "--autotune-log-file", "", "c"], "--autotune-log-file: empty"),
    (["-np", "2", "--start-timeout", "0", "c"], "--start-timeout"),
    (["-np", "2", "--ssh-port", "70000", "c"], "--ssh-port"),
    (["-np", "2", "--network-interface", "eth0,,eth1", "c"], "interface names"),
    (["-np", "2", "--network-interface", "a b", "c"], "interface names"),
    (["-np", "2", "--bogus", "c"], "unrecognized option '--bogus'"),
    (["-np", "2", "-H", "a:0", "c"], "out of range"),
    (["-np", "2", "--hostfile", "/nonexistent/hosts", "c"], "cannot read"),
])
def test_usage_errors(argv, message):
    with pytest.raises(args.UsageError, match=message):
        parse(*argv)


def test_help_documents_every_flag_and_variable(capsys):
    assert args.parse(["--help"], ENV) is None
    text = capsys.readouterr().out
    for opt in args.OPTIONS:
        for name in opt.names:
            assert name in text, name
    for var in ["KOLO_RANK", "KOLO_SIZE", "KOLO_LOCAL_RANK", "KOLO_LOCAL_SIZE", "KOLO_CROSS_RANK",
                "KOLO_CROSS_SIZE", "KOLO_HOSTNAME", "KOLO_CONTROLLER", "KOLO_RENDEZVOUS_ADDR",
                "KOLO_RENDEZVOUS_PORT", "KOLO_START_TIMEOUT", "KOLO_FUSION_THRESHOLD",
                "KOLO_CYCLE_TIME", "KOLO_CACHE_CAPACITY", "KOLO_TIMELINE",
                "KOLO_TIMELINE_MARK_CYCLES", "KOLO_STALL_CHECK_DISABLE",
                "KOLO_STALL_CHECK_TIME_SECONDS", "KOLO_STALL_SHUTDOWN_TIME_SECONDS",
                "KOLO_LOG_LEVEL", "KOLO_GLOO_IFACE", "KOLO_SSH_IDENTITY", "KOLO_AUTOTUNE",
                "KOLO_AUTOTUNE_LOG", "KOLO_AUTOTUNE_WARMUP_SAMPLES",
                "KOLO_AUTOTUNE_STEPS_PER_SAMPLE", "KOLO_AUTOTUNE_BAYES_OPT_MAX_SAMPLES",
                "KOLO_AUTOTUNE_GAUSSIAN_PROCESS_NOISE",
                "KOLO_LAUNCHER_REMOTE_SHELL", "KOLO_LAUNCHER_FORCE_REMOTE",
                "KOLO_LAUNCHER_KILL_GRACE_SECONDS", "KOLO_LAUNCHER_MPIRUN",
                "KOLO_LAUNCHER_FAILURE_GRACE_SECONDS"]:
        assert var in text, var
    assert max(len(line) for line in text.splitlines()) <= 100


def _help_of(flag):
    return " ".join(next(o.help for o in args.OPTIONS if flag in o.names).split())


def test_help_describes_what_the_runtime_does():
    # Rounds start when an op is enqueued (core/coordinator.h "Pacing"); nothing gathers.
    cycle = _help_of("--cycle-time-ms")
    assert "gather" not in cycle.replace("nothing waits to gather", "")
    assert "starts at once when an op is enqueued" in cycle
    # The hierarchical allreduce is reduce-scatter / cross allreduce / allgather, for CPU tensors
    # (shared memory, on by default where the topology has it) and CUDA tensors (NCCL, forced).
    hier = _help_of("--hierarchical-allreduce")
    assert "broadcast" not in hier and "reduce-scatter" in hier and "allgather" in hier
    assert "shared memory for CPU tensors" in hier and "CPU tensors take it by themselves" in hier
    assert "CPU tensors are not affected" not in hier
    no_hier = _help_of("--no-hierarchical-allreduce")
    assert "CPU and CUDA tensors" in no_hier and "KOLO_HIERARCHICAL_ALLREDUCE=0" in no_hier
    stall = _help_of("--stall-check-shutdown-time-seconds")
    assert "runtime default 1800" in stall and "default 0" not in stall


def test_failure_grace_from_flag_and_both_environment_spellings():
    assert parse("-np", "1", "true").failure_grace == 10
    assert parse("-np", "1", "--failure-grace-seconds", "2.5", "true").failure_grace == 2.5
    env = {"HOROVOD_LAUNCHER_FAILURE_GRACE_SECONDS": "4"}
    assert parse("-np", "1", "true", env=env).failure_grace == 4
    env["KOLO_LAUNCHER_FAILURE_GRACE_SECONDS"] = "3"
    assert parse("-np", "1", "true", env=env).failure_grace == 3
    with pytest.raises(args.UsageError, match="HOROVOD_LAUNCHER_FAILURE_GRACE_SECONDS"):
        parse("-np", "1", "true", env={"HOROVOD_LAUNCHER_FAILURE_GRACE_SECONDS": "-1"})


def test_script_usage_error_exit_status():
    r = kolorun(["-np", "5", "-H", "a:2,b:2", "true"])
    assert r.returncode == 2
    assert "-np 5 asks for more processes than the host list has slots" in r.stderr
    for flag in ("--version", "-v"):  # horovodrun -v: the bare version
        r = kolorun([flag])
        assert r.returncode == 0 and r.stdout.strip() == args.__version__


# ---- MPI mode ---------------------------------------------------------------------------------
def test_mpirun_command_line():
    o = parse("--mpi", "-np", "4", "-H", "a:2,b:2", "-p", "2222", "--network-interface", "eth1",
              "--output-filename", "/tmp/out", "-x", "FOO=bar", "--cycle-time-ms", "3",
              "--mpi-args", "--report-bindings -mca x 'y z'", "python", "t.py",
              env={"PATH": "/bin", "KOLO_LOG_LEVEL": "info", "KOLO_RANK": "9", "HOME": "/r"})
    cmd = mpi_run.build_command(o, {"PATH": "/bin", "KOLO_LOG_LEVEL": "info", "KOLO_RANK": "9"},
                                is_root=True)
    line = " ".join(cmd)
    assert cmd[:2] == ["mpirun", "--allow-run-as-root"]
    assert "-np 4 -H a:2,b:2 -map-by slot -bind-to core --tag-output" in line  # remote hosts
    assert ["-mca", "plm_rsh_args", "-p 2222"] == cmd[cmd.index("plm_rsh_args") - 1:][:3]
    assert "-mca btl_tcp_if_include eth1 -mca oob_tcp_if_include eth1" in line
    assert "--output-filename /tmp/out" in line
    for x in ["KOLO_CONTROLLER=mpi", "KOLO_CYCLE_TIME=3", "FOO=bar", "KOLO_GLOO_IFACE=eth1",
              "NCCL_SOCKET_IFNAME=eth1", "PATH", "KOLO_LOG_LEVEL", "KOLO_START_TIMEOUT=120"]:
        assert cmd[cmd.index(x) - 1] == "-x", x
    assert "KOLO_RANK" not in cmd  # an outer launcher's rank is wrong for every MPI rank
    assert cmd[-6:] == ["--report-bindings", "-mca", "x", "y z", "python", "t.py"]
    assert "--allow-run-as-root" not in mpi_run.build_command(o, {}, is_root=False)


# ---- remote script ----------------------------------------------------------------------------
def test_remote_environment_filters_session_variables():
    env = ssh.remote_environment(
        {"PATH": "/bin", "HOME": "/root", "SSH_AUTH_SOCK": "/s", "BASH_FUNC_x%%": "()",
         "CUDA_VISIBLE_DEVICES": "0", "TERM": "xterm", "bad name": "1"},
        {"KOLO_RANK": "1"}, forced_names={"TERM"})
    assert env == {"PATH": "/bin", "CUDA_VISIBLE_DEVICES": "0", "TERM": "xterm", "KOLO_RANK": "1"}


def test_remote_argv_ssh_and_template():
    argv = ssh.remote_argv("node1", {"A": "it's"}, ["python", "a b.py"], 5, port=2222,
                           identity="/k/id", extra_options="-o ConnectTimeout=3", cwd="/w d")
    assert argv[:1] == ["ssh"] and argv[-2] == "node1"
    for opt in ["BatchMode=yes", "StrictHostKeyChecking=no", "UserKnownHostsFile=/dev/null",
                "ConnectTimeout=3"]:
        assert argv[argv.index(opt) - 1] == "-o"
    assert argv[argv.index("-p") + 1] == "2222" and argv[argv.index("-i") + 1] == "/k/id"
    assert argv[-1].startswith("sh -c ")
    script = ssh.remote_script({"A": "it's"}, ["python", "a b.py"], 5, cwd="/w d")
    assert "cd '/w d'" in script and "export A='it'\"'\"'s'" in script
    assert "python 'a b.py'" in script
    t = ssh.remote_argv("ns1", {}, ["true"], 1, template="ip netns exec {host} sh -c")
    assert t[:5] == ["ip", "netns", "exec", "ns1", "sh"] and t[5] == "-c"


def test_exit_status_255_of_a_remote_rank_points_at_ssh():
    # horovodrun checks ssh to every host before it starts ("could not connect to some hosts
    # via ssh"); kolorun starts the ranks at once, so a remote rank's 255 says what it means
    from kolo_launcher.workers import ExitStatus
    remote = ExitStatus(code=255, signal=None).describe(remote=True)
    assert remote.startswith("exited with status 255 (255 is ssh's status") and "log in" in remote
    assert ExitStatus(code=255, signal=None).describe(remote=False) == "exited with status 255"
    assert "ssh" not in ExitStatus(code=3, signal=None).describe(remote=True)
