# SPDX-License-Identifier: Apache-2.0
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


def test_mpirun_exports_the_whole_environment_as_horovodrun():
    # horovodrun's mpi_run: -x for every variable but those env.is_exportable skips.
    env = base_env(KOLO_LAUNCHER_MPIRUN="/bin/echo", MY_APP_SETTING="a b", OMP_NUM_THREADS="4",
                   LD_PRELOAD="/x.so", OLDPWD="/old", CUDA_VISIBLE_DEVICES="0,1",
                   MY_CUDA_VISIBLE_DEVICES_X="1", HOROVOD_SECRET_KEY="s", KOLO_RANK="7",
                   HOROVOD_RANK="7", TEST_KEEP="1")
    env["BASH_FUNC_f%%"] = "() {  echo; }"
    env["not-an-identifier"] = "1"
    r = kolorun(["--mpi", "-np", "2", "-x", "TEST_KEEP=2", "--cycle-time-ms", "5", "true"],
                env=env)
    assert r.returncode == 0, r.stderr
    words = r.stdout.split()
    exported = {words[i + 1] for i, w in enumerate(words[:-1]) if w == "-x"}
    for name in ("MY_APP_SETTING", "OMP_NUM_THREADS", "LD_PRELOAD", "PATH", "HOME",
                 "KOLO_CONTROLLER=mpi", "KOLO_CYCLE_TIME=5", "TEST_KEEP=2"):
        assert name in exported, (name, r.stdout)
    for name in ("OLDPWD", "CUDA_VISIBLE_DEVICES", "MY_CUDA_VISIBLE_DEVICES_X",
                 "HOROVOD_SECRET_KEY", "KOLO_RANK", "HOROVOD_RANK", "TEST_KEEP",
                 "not-an-identifier"):
        assert name not in exported, (name, r.stdout)
    assert not [w for w in exported if w.startswith("BASH_FUNC_")]
    assert r.stdout.rstrip().endswith(" true")


def test_tcp_disables_nccl_infiniband_in_both_modes():
    r = kolorun(["--mpi", "-np", "1", "--tcp", "true"],
                env=base_env(KOLO_LAUNCHER_MPIRUN="/bin/echo"))
    assert r.returncode == 0 and " -x NCCL_IB_DISABLE=1 " in r.stdout, r.stdout + r.stderr
    r = kolorun(["--mpi", "-np", "1", "true"], env=base_env(KOLO_LAUNCHER_MPIRUN="/bin/echo"))
    assert "NCCL_IB_DISABLE" not in r.stdout
    r = kolorun(["-np", "2", "--tcp"] + worker("env"))
    assert r.returncode == 0, r.stderr
    lines = re.findall(r"RESULT (\{.*\})", r.stdout)
    assert len(lines) == 2 and all('"NCCL_IB_DISABLE": "1"' in l for l in lines), r.stdout
    r = kolorun(["-np", "1"] + worker("env"))
    assert "NCCL_IB_DISABLE" not in r.stdout
