# SPDX-License-Identifier: Apache-2.0
"""Core binding: kolorun binds the ranks it starts on this machine to disjoint cores when there
are enough (binding.py), --no-bind / --binding-args change that, and MPI mode passes mpirun the
equivalent flags. The ranks report os.sched_getaffinity; kolorun's own affinity is narrowed
(preexec_fn) to make "fewer cores than ranks" happen on any machine."""

import json
import os
import re
import shutil

import pytest

from conftest import PY, base_env, kolorun, results
from kolo_launcher import binding
from kolo_launcher.args import parse
from kolo_launcher.mpi_run import build_command

CPUS = sorted(os.sched_getaffinity(0))
REPORT = [PY, "-c", "import json, os; print('RESULT ' + json.dumps("
          "{'cpus': sorted(os.sched_getaffinity(0))}))"]


def cores():
    return binding.machine_cores(set(CPUS))


def affinities(r, n):
    assert r.returncode == 0, r.stderr
    res = results(r.stdout)
    assert sorted(res) == list(range(n)), r.stdout
    return [set(res[i]["cpus"]) for i in range(n)]


def narrowed(cpus):
    return lambda: os.sched_setaffinity(0, cpus)


needs_two_cores = pytest.mark.skipif(len(cores()) < 2, reason="needs 2 cores")


@needs_two_cores
def test_default_binds_local_ranks_to_disjoint_cores():
    r = kolorun(["-np", "2", "--verbose"] + REPORT)
    a, b = affinities(r, 2)
    assert a and b and not (a & b), (a, b)
    assert a | b == set(CPUS)  # "share": every core is used
    assert "each of the 2 local ranks bound to" in r.stderr, r.stderr
    assert "rank 0: CPU %s" % binding.cpu_list(a) in r.stderr


@needs_two_cores
@pytest.mark.parametrize("how", [["--no-bind"], ["--binding-args", "--bind-to none"]])
def test_no_bind_leaves_affinity_alone(how):
    r = kolorun(["-np", "2"] + how + REPORT)
    assert affinities(r, 2) == [set(CPUS)] * 2
    assert "not bound" not in r.stderr


@needs_two_cores
def test_bind_to_core_gives_one_core_per_rank():
    first = set(cores()[0][1])
    r = kolorun(["-np", "1", "--binding-args", "--bind-to core"] + REPORT)
    assert affinities(r, 1) == [first]
    r = kolorun(["-np", "1"] + REPORT)  # the default gives the only rank every core
    assert affinities(r, 1) == [set(CPUS)]


def test_fewer_cores_than_ranks_binds_nothing_and_says_so():
    one = set(cores()[0][1])
    r = kolorun(["-np", "2"] + REPORT, preexec_fn=narrowed(one))
    assert affinities(r, 2) == [one, one]
    assert "kolorun: ranks are not bound to cores: 2 local ranks, 1 core available" \
        in r.stderr, r.stderr


def test_binding_args_errors_are_usage_errors():
    r = kolorun(["-np", "1", "--binding-args", "--bind-to numa", "true"])
    assert r.returncode == 2 and "--bind-to numa is not supported" in r.stderr, r.stderr
    assert "in Gloo mode kolorun binds the ranks on this machine itself" in r.stderr
    r = kolorun(["-np", "1", "--no-bind", "--binding-args", "--bind-to core", "true"])
    assert r.returncode == 2 and "exclude each other" in r.stderr


def two_cpus_of_two_cores():
    return {cores()[0][1][0], cores()[1][1][0]}


@needs_two_cores
@pytest.mark.parametrize("how,bound", [
    (["-x", "KOLO_SHM=off"], False),  # a -x variable: what the ranks run with
    (["-x", "HOROVOD_SHM=off"], False),
    (["-x", "KOLO_SHM=auto"], True),  # over the launcher's own KOLO_SHM=off (env below)
])
def test_tcp_rule_reads_the_ranks_environment(how, bound):
    # 2 ranks on 2 CPUs of 2 cores: bound over shared memory, not over TCP (2 CPUs a rank).
    two = two_cpus_of_two_cores()
    env = base_env(KOLO_SHM="off") if how[1] == "KOLO_SHM=auto" else base_env()
    r = kolorun(["-np", "2"] + how + REPORT, env=env, preexec_fn=narrowed(two))
    a, b = affinities(r, 2)
    if bound:
        assert len(a) == len(b) == 1 and a | b == two, (a, b)
        assert "not bound" not in r.stderr, r.stderr
    else:
        assert a == b == two, (a, b)
        assert "over TCP each rank needs 2 CPUs" in r.stderr, r.stderr


def test_explicit_bind_to_core_needs_a_core_per_rank():
    # As mpirun: an explicit request that does not fit fails before any rank starts; the
    # default (test_fewer_cores_than_ranks_binds_nothing_and_says_so) warns and runs unbound.
    one = set(cores()[0][1])
    r = kolorun(["-np", "2", "--binding-args", "--bind-to core"] + REPORT,
                preexec_fn=narrowed(one))
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert ("kolorun: --binding-args '--bind-to core': 2 local ranks need 2 cores, this machine "
            "has 1 available") in r.stderr, r.stderr
    assert "overload-allowed" in r.stderr and "RESULT" not in r.stdout
    r = kolorun(["-np", "2", "--binding-args", "--bind-to core:overload-allowed"] + REPORT,
                preexec_fn=narrowed(one))
    assert affinities(r, 2) == [one, one]


@needs_two_cores
def test_horovodrun_style_binding_args_and_report_bindings():
    first, second = set(cores()[0][1]), set(cores()[1][1])
    socket0 = [set(g) for s, g in cores() if s == cores()[0][0]]
    if len(socket0) >= 2:
        r = kolorun(["-np", "2", "--binding-args",
                     "--bind-to core --map-by ppr:2:socket --report-bindings"] + REPORT)
        assert affinities(r, 2) == socket0[:2]
        assert "rank 0: CPU %s" % binding.cpu_list(socket0[0]) in r.stderr, r.stderr
    r = kolorun(["-np", "1", "--binding-args", "--map-by slot:PE=2"] + REPORT)
    assert affinities(r, 1) == [first | second]


@needs_two_cores
def test_rankfile_binds_the_named_cores(tmp_path):
    rf = tmp_path / "rankfile"
    rf.write_text("# Open MPI's format\nrank 0=localhost slot=1\nrank 1=+n0 slot=0\n")
    r = kolorun(["-np", "2", "--binding-args", "--rankfile %s" % rf] + REPORT)
    assert affinities(r, 2) == [set(cores()[1][1]), set(cores()[0][1])]
    rf.write_text("rank 0=localhost slot=0\n")
    r = kolorun(["-np", "2", "--binding-args", "-rf %s" % rf] + REPORT)
    assert r.returncode == 1 and "has no line for rank 1" in r.stderr, r.stderr
    rf.write_text("rank 0=elsewhere slot=0\nrank 1=localhost slot=1\n")
    r = kolorun(["-np", "2", "--binding-args=--rankfile=%s" % rf] + REPORT)
    assert r.returncode == 1 and "rank 0 runs on host localhost" in r.stderr, r.stderr


@needs_two_cores
def test_remote_ranks_are_bound_on_their_host_from_what_it_reports():
    # Every host is "remote" here (kolorun starts the ranks through the remote-shell template),
    # so kolorun asks the host for its CPUs and starts each rank under taskset.
    env = base_env(KOLO_LAUNCHER_FORCE_REMOTE="1", KOLO_LAUNCHER_REMOTE_SHELL="sh -c")
    r = kolorun(["-np", "2", "--binding-args", "--bind-to core --report-bindings"] + REPORT,
                env=env)
    assert affinities(r, 2) == [set(cores()[0][1]), set(cores()[1][1])]
    assert "host localhost: each of the 2 local ranks bound to one core of its own" in r.stderr
    assert "; rank 1: CPU %s" % binding.cpu_list(cores()[1][1]) in r.stderr, r.stderr
    # The default: a remote host's traffic crosses TCP, so a rank needs 2 CPUs: 2 ranks on this
    # machine's 2 CPUs stay unbound, with the reason.
    r = kolorun(["-np", "2"] + REPORT, env=env)
    assert affinities(r, 2) == [set(CPUS)] * 2
    assert ("host localhost: ranks are not bound to cores: over TCP each rank needs 2 CPUs"
            in r.stderr), r.stderr
    r = kolorun(["-np", "1", "--verbose"] + REPORT, env=env)
    assert affinities(r, 1) == [set(CPUS)]
    assert "host localhost: each of the 1 local ranks bound to" in r.stderr, r.stderr
    r = kolorun(["-np", "2", "--no-bind", "--verbose"] + REPORT, env=env)
    assert affinities(r, 2) == [set(CPUS)] * 2 and "host localhost:" not in r.stderr


def test_a_remote_host_that_cannot_tell_its_cpus(tmp_path):
    # A remote shell whose "sed" says nothing: the default runs the ranks unbound with the
    # reason; an explicit --binding-args fails the job before any rank starts.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sed").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "sed").chmod(0o755)
    env = base_env(KOLO_LAUNCHER_FORCE_REMOTE="1",
                   KOLO_LAUNCHER_REMOTE_SHELL="env PATH=%s:/usr/bin:/bin sh -c" % bin_dir)
    r = kolorun(["-np", "1"] + REPORT, env=env)
    assert affinities(r, 1) == [set(CPUS)]
    assert ("host localhost: ranks are not bound to cores (cannot read its CPUs: no CPU "
            "affinity in its answer") in r.stderr, r.stderr
    r = kolorun(["-np", "1", "--binding-args", "--bind-to core"] + REPORT, env=env)
    assert r.returncode != 0 and "RESULT" not in r.stdout
    assert "--binding-args: cannot bind the ranks on host localhost: cannot read its CPUs" \
        in r.stderr, r.stderr


def test_probe_answers_are_parsed():
    cpus, topology, taskset = binding.parse_probe(
        "allowed 0-2,5\ncpu 0 0 0\ncpu 1 0 0\ncpu 2 1 4\ncpu 5  \ntaskset\n")
    assert cpus == {0, 1, 2, 5} and taskset
    assert topology == {0: (0, 0), 1: (0, 0), 2: (1, 4), 5: (None, None)}
    # hardware threads of one core stay together; an unknown CPU is a core of its own
    assert binding.machine_cores(cpus, topology) == [(0, [0, 1]), (0, [5]), (1, [2])]
    assert binding.parse_probe("allowed 3\n")[2] is False
    for bad in ("", "cpu 0 0 0\n", "allowed 3-1\n", "allowed x\n"):
        with pytest.raises(ValueError):
            binding.parse_probe(bad)
    assert binding.bound_command({0, 1, 3}, ["python3", "x.py"]) == [
        "taskset", "-c", "0-1,3", "python3", "x.py"]


def test_elastic_mode_refuses_binding_args():
    r = kolorun(["-np", "2", "--min-np", "1", "-H", "localhost:2", "--binding-args",
                 "--bind-to core", "true"])
    assert r.returncode == 2, r.stderr
    assert "--binding-args '--bind-to core': elastic workers are not bound to cores" in r.stderr
    for ok in (["--no-bind"], ["--binding-args", "--bind-to none"], []):
        o = parse(["-np", "2", "--min-np", "1", "-H", "localhost:2"] + ok + ["true"])
        assert o.elastic is not None


def test_gloo_binding_args_forms():
    p = binding.parse_gloo_binding_args
    assert p("--bind-to core") == binding.BindSpec(bind="core", text="--bind-to core")
    s = p("--bind-to core --map-by ppr:2:socket")
    assert (s.bind, s.map_by, s.ppr, s.pe) == ("core", "ppr", (2, "socket"), 1)
    s = p("-map-by socket:PE=4 -bind-to=socket:overload-allowed --report-bindings")
    assert (s.bind, s.map_by, s.pe, s.overload, s.report) == ("socket", "socket", 4, True, True)
    assert p("--map-by hwthread").bind == "hwthread" and p("--map-by node").bind == "core"
    assert p("--cpus-per-proc 2").pe == 2 and p("--bind-to-socket").bind == "socket"
    s = p("--rankfile rf", read=lambda _: "rank 0=a slot=1:0-1\nrank 1=b slot=0-1,3 # x\n")
    assert s.rankfile == {0: binding.RankfileLine("a", ((1, 0), (1, 1)), 1),
                          1: binding.RankfileLine("b", ((None, 0), (None, 1), (None, 3)), 2)}
    for bad, part in [("--bind-to numa", "--bind-to numa is not supported"),
                      ("--bind-to core --map-by l3cache", "--map-by l3cache is not supported"),
                      ("--map-by slot:span", "modifier 'span' is not supported"),
                      ("--rank-by core", "'--rank-by' is not supported"),
                      ("--bind-to core --bind-to socket", "--bind-to is given twice"),
                      ("--map-by ppr:0:socket", "--map-by ppr:0:socket is not supported"),
                      ("--map-by", "--map-by needs a value"), ("core", "'core' is not an option"),
                      ("--rankfile rf --bind-to core", "does not combine")]:
        with pytest.raises(binding.BindingError, match=re.escape(part)):
            p(bad, read=lambda _: "rank 0=a slot=0\n")
    for text, where in [("rank 0=a\n", "rf:1: expected 'rank R=HOST slot=SPEC'"),
                        ("rank 0=a slot=0\nrank 0=a slot=1\n", "rf:2: rank 0 is listed twice"),
                        ("rank 0=a slot=x:1\n", "rf:1: bad slot 'x:1'"), ("# none\n", "no 'rank")]:
        with pytest.raises(binding.BindingError, match=re.escape(where)):
            p("--rankfile rf", read=lambda _, t=text: t)


def test_explicit_plans_place_like_mpirun(tmp_path):
    # 2 sockets x 2 cores x 2 threads; CPU n and n+4 are one core's threads.
    sysfs = _fake_sysfs(tmp_path, {c: (c // 2 % 2, c % 2) for c in range(8)})
    cpus = set(range(8))

    def plan(text, n):
        return binding.plan(binding.parse_gloo_binding_args(text), n, cpus, sysfs)[0]

    assert plan("--bind-to core --map-by ppr:2:socket", 4) == [{0, 4}, {1, 5}, {2, 6}, {3, 7}]
    assert plan("--bind-to core --map-by ppr:1:socket", 2) == [{0, 4}, {2, 6}]
    assert plan("--map-by socket", 3) == [{0, 4}, {2, 6}, {1, 5}]  # round robin
    assert plan("--map-by slot:PE=2", 2) == [{0, 1, 4, 5}, {2, 3, 6, 7}]
    assert plan("--bind-to socket --map-by ppr:1:socket", 2) == [{0, 1, 4, 5}, {2, 3, 6, 7}]
    assert plan("--bind-to hwthread", 3) == [{0}, {4}, {1}]
    assert plan("--map-by ppr:2:core", 3) == [{0, 4}, {0, 4}, {1, 5}]
    assert plan("--bind-to core:overload-allowed", 5)[4] == {0, 4}
    for text, n, message in [
            ("--bind-to core", 5, "5 local ranks need 5 cores, this machine has 4 available"),
            ("--bind-to hwthread", 9, "9 local ranks need 9 hardware threads"),
            ("--map-by ppr:1:socket", 3, "ppr:1:socket places at most 2 ranks"),
            ("--map-by ppr:2:node", 3, "ppr:2:node places at most 2 ranks on a host"),
            ("--map-by socket:PE=2", 3, "the 2 ranks on socket 0 need 4 cores, it has 2")]:
        with pytest.raises(binding.PlanError, match=re.escape(message)):
            plan(text, n)
    spec = binding.parse_gloo_binding_args(
        "--rankfile rf", read=lambda _: "rank 0=h slot=1:1\nrank 1=h slot=0,3\n")
    got, _ = binding.rankfile_plan(spec, [(0, "h"), (1, "h")], cpus, lambda a, b: a == b, sysfs)
    assert got == {0: {3, 7}, 1: {0, 4, 3, 7}}
    with pytest.raises(binding.PlanError, match=re.escape("rf:1: rank 0: there is no socket 2")):
        spec = binding.parse_gloo_binding_args("--rankfile rf",
                                               read=lambda _: "rank 0=h slot=2:0\n")
        binding.rankfile_plan(spec, [(0, "h")], cpus, lambda a, b: True, sysfs)


def _fake_sysfs(tmp_path, topo):
    """topo: {cpu: (socket, core)}."""
    for cpu, (socket, core) in topo.items():
        d = tmp_path / ("cpu%d" % cpu) / "topology"
        d.mkdir(parents=True)
        (d / "physical_package_id").write_text("%d\n" % socket)
        (d / "core_id").write_text("%d\n" % core)
    return str(tmp_path)


def test_plan_keeps_hardware_threads_together_and_splits_sockets(tmp_path):
    # 2 sockets x 2 cores x 2 threads; CPU n and n+4 are one core's threads.
    topo = {c: (c // 2 % 2, c % 2) for c in range(8)}
    sysfs = _fake_sysfs(tmp_path, topo)
    cpus = set(range(8))
    blocks, note = binding.plan("share", 2, cpus, sysfs)
    assert blocks == [{0, 1, 4, 5}, {2, 3, 6, 7}], note
    blocks, _ = binding.plan("share", 3, cpus, sysfs)
    assert blocks == [{0, 4}, {1, 5}, {2, 3, 6, 7}]
    blocks, _ = binding.plan("core", 3, cpus, sysfs)
    assert blocks == [{0, 4}, {1, 5}, {2, 6}]
    blocks, _ = binding.plan("socket", 4, cpus, sysfs)
    assert blocks == [{0, 1, 4, 5}, {0, 1, 4, 5}, {2, 3, 6, 7}, {2, 3, 6, 7}]
    blocks, note = binding.plan("share", 5, cpus, sysfs)
    assert blocks is None and note.endswith("5 local ranks, 4 cores available")
    assert binding.plan("none", 2, cpus, sysfs)[0] is None
    # Over TCP a rank needs 2 CPUs: 4 ranks on 8 CPUs are bound, 5 are not; '--bind-to core'
    # binds anyway.
    assert binding.plan("share", 4, cpus, sysfs, tcp=True)[0] == [{0, 4}, {1, 5}, {2, 6}, {3, 7}]
    blocks, note = binding.plan("share", 5, cpus, sysfs, tcp=True)
    assert blocks is None and "over TCP each rank needs 2 CPUs" in note, note
    assert binding.plan("core", 3, set(range(4)), sysfs, tcp=True)[0] is not None
    assert binding.cpu_list({0, 1, 2, 5, 7, 8}) == "0-2,5,7-8"


def test_mpi_placement_flags(tmp_path):
    sysfs = _fake_sysfs(tmp_path, {c: (0, c) for c in range(4)})
    assert binding.mpi_placement(2, True, set(range(4)), sysfs) == (
        ["-map-by", "slot:PE=2", "-bind-to", "core"], None)
    args, note = binding.mpi_placement(5, True, set(range(4)), sysfs)
    assert args == ["-bind-to", "none", "-map-by", "slot"] and "5 local ranks" in note
    assert binding.mpi_placement(8, False, None) == (
        ["-map-by", "slot", "-bind-to", "core"], None)

    def cmd(*argv, placement=None):
        return " ".join(build_command(parse(list(argv)), {}, False, placement=placement))

    assert " -H a:2,b:2 -map-by slot -bind-to core --tag-output" in cmd(
        "--mpi", "-np", "4", "-H", "a:2,b:2", "true")
    assert " -H a:2,b:2 -bind-to none -map-by slot --tag-output" in cmd(
        "--mpi", "--no-bind", "-np", "4", "-H", "a:2,b:2", "true")
    assert " -H a:2,b:2 --map-by ppr:1:socket --bind-to socket --tag-output" in cmd(
        "--mpi", "--binding-args", "--map-by ppr:1:socket --bind-to socket", "-np", "4",
        "-H", "a:2,b:2", "true", placement=["ignored"])


def mpi_affinities(r):
    """Every rank's CPUs from mpirun's output (--tag-output may interleave lines)."""
    assert r.returncode == 0, r.stdout + r.stderr
    found = [set(json.loads(m)["cpus"]) for m in re.findall(r"RESULT (\{[^{}]*\})", r.stdout)]
    assert len(found) == 2, r.stdout
    return found


@needs_two_cores
@pytest.mark.skipif(not shutil.which("mpirun"), reason="needs Open MPI's mpirun")
def test_mpirun_binds_local_ranks_and_no_bind_does_not():
    r = kolorun(["--mpi", "-np", "2", "--verbose"] + REPORT, timeout=120)
    assert " -map-by slot:PE=%d -bind-to core " % (len(cores()) // 2) in r.stderr, r.stderr
    a, b = mpi_affinities(r)
    assert a and b and not (a & b), (a, b)
    r = kolorun(["--mpi", "-np", "2", "--no-bind"] + REPORT, timeout=120)
    assert mpi_affinities(r) == [set(CPUS)] * 2
