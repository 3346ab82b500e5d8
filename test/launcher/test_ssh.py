# SPDX-License-Identifier: Apache-2.0
"""The ssh path against a real sshd on this machine (Debian openssh-server), started by the test
on a free port with a temporary host key and a temporary authorized key. Skips when sshd or
ssh-keygen is missing. KOLO_LAUNCHER_FORCE_REMOTE=1 makes kolorun use ssh for localhost."""

import os
import shutil
import signal
import socket
import subprocess
import time

import pytest

from conftest import (KOLORUN, PY, assert_all_gone, base_env, kolorun, read_pids, results,
                      worker)

SSHD = "/usr/sbin/sshd"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    if not os.path.exists(SSHD) or not shutil.which("ssh") or not shutil.which("ssh-keygen"):
        pytest.skip("needs openssh-server (%s), ssh and ssh-keygen; the setup script installs "
                    "openssh-server" % SSHD)
    d = tmp_path_factory.mktemp("sshd")
    for name in ("host_key", "id"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / name)],
                       check=True, timeout=30)
    (d / "authorized_keys").write_text((d / "id.pub").read_text())
    os.chmod(d / "authorized_keys", 0o600)
    port = free_port()
    (d / "sshd_config").write_text("\n".join([
        "Port %d" % port, "ListenAddress 127.0.0.1", "HostKey %s" % (d / "host_key"),
        "AuthorizedKeysFile %s" % (d / "authorized_keys"), "PidFile %s" % (d / "sshd.pid"),
        "PubkeyAuthentication yes", "PasswordAuthentication no",
        "KbdInteractiveAuthentication no", "PermitRootLogin prohibit-password",
        "StrictModes no", "UsePAM no", "MaxStartups 50", "MaxSessions 50", ""]))
    if os.geteuid() == 0 and not os.path.isdir("/run/sshd"):
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privilege separation dir
    log = open(d / "sshd.log", "wb")
    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(d / "sshd_config")], stdout=log,
                            stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 10
    while True:
        if proc.poll() is not None:
            pytest.skip("sshd did not start: %s" % (d / "sshd.log").read_text()[-500:])
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if time.monotonic() > deadline:
                proc.kill()
                pytest.skip("sshd is not listening on port %d after 10 s" % port)
            time.sleep(0.05)
    probe = subprocess.run(
        ["ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
         "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "-o", "IdentitiesOnly=yes",
         "-i", str(d / "id"), "-p", str(port), "127.0.0.1", "true"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=30)
    if probe.returncode != 0:
        proc.kill()
        proc.wait()
        pytest.skip("key login to the test sshd fails: %s %s" % (
            probe.stderr.strip(), (d / "sshd.log").read_text()[-500:]))
    yield {"port": port, "identity": str(d / "id"), "log": d / "sshd.log"}
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    log.close()


def ssh_env(sshd, **extra):
    return base_env(KOLO_LAUNCHER_FORCE_REMOTE="1", KOLO_SSH_IDENTITY=sshd["identity"], **extra)


def test_ssh_ranks_topology_and_allreduce(sshd, tmp_path):
    r = kolorun(["-np", "4", "-H", "localhost:2,127.0.0.1:2", "-p", str(sshd["port"]),
                 "--fusion-threshold-mb", "1", "-x", "TEST_VIA=ssh"] + worker("topo", "--ring"),
                env=ssh_env(sshd), cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr + sshd["log"].read_text()[-1000:]
    res = results(r.stdout)
    assert [(res[i]["host"], res[i]["local_rank"], res[i]["local_size"], res[i]["cross_rank"],
             res[i]["cross_size"]) for i in range(4)] == [
        ("localhost", 0, 2, 0, 2), ("localhost", 1, 2, 0, 2),
        ("127.0.0.1", 0, 2, 1, 2), ("127.0.0.1", 1, 2, 1, 2)]
    assert all(res[i]["sum"] == 10 and res[i]["ring"] == [10, 100, 628] for i in range(4))
    r = kolorun(["-np", "2", "-H", "localhost:1,127.0.0.1:1", "--ssh-port", str(sshd["port"]),
                 "--fusion-threshold-mb", "1", "-x", "TEST_VIA=ssh"] + worker("env"),
                env=ssh_env(sshd), cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    for rank, env in results(r.stdout).items():
        assert env["KOLO_RANK"] == str(rank) and env["TEST_VIA"] == "ssh"
        assert env["KOLO_FUSION_THRESHOLD"] == "1048576"
        assert "SSH_CONNECTION" not in env  # the launcher's own session variables stay home


def test_ssh_failing_rank_and_sigint_leave_no_orphans(sshd, tmp_path):
    d1 = tmp_path / "fail"
    d1.mkdir()
    r = kolorun(["-np", "2", "-H", "localhost:1,127.0.0.1:1", "-p", str(sshd["port"])] +
                worker("fail", 1, 6, "--dir", str(d1)), env=ssh_env(sshd))
    assert r.returncode == 6, r.stderr
    assert "rank 1 (host 127.0.0.1) exited with status 6" in r.stderr
    assert_all_gone(read_pids(str(d1), 2, timeout=0), timeout=5)

    d2 = tmp_path / "sig"
    d2.mkdir()
    p = subprocess.Popen([PY, KOLORUN, "-np", "2", "-H", "localhost:1,127.0.0.1:1", "-p",
                          str(sshd["port"])] + worker("sigwait", "--dir", str(d2)),
                         env=ssh_env(sshd), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    try:
        pids = read_pids(str(d2), 2)
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, err
    for rank in range(2):
        assert (d2 / ("sig.%d" % rank)).read_text() == "SIGINT"
    assert_all_gone(pids, timeout=5)


def test_unreachable_ssh_host_fails_clearly(sshd):
    r = kolorun(["-np", "1", "-H", "127.0.0.1:1", "-p", str(free_port()), "true"],
                env=ssh_env(sshd, KOLO_SSH_OPTIONS="-o ConnectTimeout=5"))
    assert r.returncode == 255, r.stderr
    assert "rank 0 (host 127.0.0.1) exited with status 255" in r.stderr
    assert "Connection refused" in r.stderr
