# SPDX-License-Identifier: Apache-2.0
"""The Python store (kolorun's server, store_client) against the C++ one (rendezvous/tcp_store.cc,
test/support/tcp_store_server.cc), both directions. CMake passes the binaries' paths; without them the
tests skip."""

import os
import subprocess
import threading

import pytest

from conftest import kolorun
from store_client import StoreClient, StoreTimeout
from kolo_launcher.store_server import StoreServer

CLIENT = os.environ.get("KOLO_STORE_INTEROP_BIN", "")
SERVER = os.environ.get("KOLO_STORE_SERVER_BIN", "")


@pytest.mark.skipif(not os.path.exists(CLIENT), reason="KOLO_STORE_INTEROP_BIN is not built")
def test_cpp_clients_against_the_python_server():
    with StoreServer("127.0.0.1", 0) as server:
        procs = [subprocess.Popen([CLIENT, "127.0.0.1", str(server.port), str(r), "3"],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                 for r in range(3)]
        outs = [p.communicate(timeout=60)[0] for p in procs]
        for r, (p, out) in enumerate(zip(procs, outs)):
            assert p.returncode == 0 and out.strip() == "ok rank %d" % r, out
        assert server.get_nowait("count") == (3).to_bytes(8, "little")
        assert all(server.has("done/%d" % r) for r in range(3))


@pytest.mark.skipif(not os.path.exists(CLIENT), reason="KOLO_STORE_INTEROP_BIN is not built")
def test_cpp_clients_under_kolorun():
    """kolorun's environment is enough for the C++ client to find the store."""
    r = kolorun(["-np", "3", "sh", "-c", 'exec "$0" "$KOLO_RENDEZVOUS_ADDR" '
                 '"$KOLO_RENDEZVOUS_PORT" "$KOLO_RANK" "$KOLO_SIZE"', CLIENT])
    assert r.returncode == 0, r.stdout + r.stderr
    for rank in range(3):
        assert "[%d]<stdout>:ok rank %d" % (rank, rank) in r.stdout


@pytest.mark.skipif(not os.path.exists(SERVER), reason="KOLO_STORE_SERVER_BIN is not built")
def test_python_client_against_the_cpp_server():
    p = subprocess.Popen([SERVER, "--host", "127.0.0.1", "--port", "0", "--max-seconds", "60"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        port = int(p.stdout.readline())
        with StoreClient("127.0.0.1", port, connect_timeout=10) as c:
            c.set("a", b"\x00\x01")
            assert c.get("a", 1) == b"\x00\x01"
            assert c.add("n", 7) == 7 and c.add("n", -10) == -3
            assert c.get("n", 1) == (-3).to_bytes(8, "little", signed=True)
            assert c.check("a") and not c.check("b")
            c.delete("a")
            assert not c.check("a")
            with pytest.raises(StoreTimeout):
                c.get("missing", 0.1)
            got = {}

            def late_reader():
                with StoreClient("127.0.0.1", port, connect_timeout=10) as c2:
                    got["v"] = c2.get("late", 10)

            t = threading.Thread(target=late_reader)
            t.start()
            c.set("late", b"x")
            t.join(10)
            assert got == {"v": b"x"}
    finally:
        p.stdin.close()
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
