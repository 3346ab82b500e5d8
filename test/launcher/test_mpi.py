"""MPI mode: kolorun becomes Open MPI's mpirun (skips without mpirun)."""

import os
import re
import shutil
import stat

import pytest

from conftest import base_env, kolorun, worker


@pytest.mark.skipif(not shutil.which("mpirun"), reason="needs Open MPI's mpirun")
def test_mpirun_runs_two_ranks_with_the_environment():
    r = kolorun(["--mpi", "-np", "2", "--verbose", "--cycle-time-ms", "7", "-x", "TEST_M=1"] +
                worker("env"), timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "kolorun: running: mpirun " in r.stderr
    assert " -np 2 -H localhost:2 " in r.stderr
    assert re.search(r" -map-by slot(:PE=\d+)? -bind-to core | -bind-to none -map-by slot ",
                     r.stderr), r.stderr  # test_binding.py checks which
    if os.geteuid() == 0:
        assert "--allow-run-as-root" in r.stderr
    # mpirun --tag-output does not always keep two ranks' lines apart; find the JSON objects
    lines = re.findall(r"RESULT (\{[^{}]*\})", r.stdout)
    assert len(lines) == 2, r.stdout
    assert "[1,0]<stdout>:" in r.stdout and "[1,1]<stdout>:" in r.stdout
    for line in lines:
        for want in ('"KOLO_CONTROLLER": "mpi"', '"KOLO_CYCLE_TIME": "7"', '"TEST_M": "1"',
                     '"KOLO_START_TIMEOUT": "120"'):
            assert want in line
        assert '"KOLO_RANK"' not in line  # MPI gives the ranks


def test_mpirun_exit_status_and_missing_mpirun(tmp_path):
    fake = tmp_path / "fake-mpirun"
    fake.write_text("#!/bin/sh\necho \"fake: $*\"\nexit 9\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    r = kolorun(["--mpi", "-np", "3", "-H", "a:2,b:1", "echo", "x"],
                env=base_env(KOLO_LAUNCHER_MPIRUN=str(fake)))
    assert r.returncode == 9
    assert " -np 3 -H a:2,b:1 " in r.stdout and r.stdout.rstrip().endswith("echo x")
    r = kolorun(["--mpi", "-np", "1", "true"],
                env=base_env(KOLO_LAUNCHER_MPIRUN=str(tmp_path / "missing")))
    assert r.returncode == 127
    assert "cannot run" in r.stderr and "Gloo mode" in r.stderr
