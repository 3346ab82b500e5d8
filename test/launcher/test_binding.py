"""Core binding: kolorun binds the ranks it starts on this machine to disjoint cores when there
are enough (binding.py), --no-bind / --binding-args change that, and MPI mode passes mpirun the
equivalent flags. The ranks report os.sched_getaffinity; kolorun's own affinity is narrowed
(preexec_fn) to make "fewer cores than ranks" happen on any machine."""

import json
import os
import re
import shutil

import pytest

from conftest import PY, kolorun, results
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
    r = kolorun(["-np", "1", "--binding-args", "--map-by slot:PE=2", "true"])
    assert r.returncode == 2 and "in Gloo mode kolorun binds ranks itself" in r.stderr
    r = kolorun(["-np", "1", "--no-bind", "--binding-args", "--bind-to core", "true"])
    assert r.returncode == 2 and "exclude each other" in r.stderr


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
