# SPDX-License-Identifier: Apache-2.0
"""The rendezvous store server: the wire protocol of rendezvous/store.h, byte for byte."""

import socket
import struct
import threading
import time

import pytest

from store_client import StoreClient, StoreError, StoreTimeout, encode_request
from kolo_launcher.store_server import StoreServer


@pytest.fixture
def server():
    s = StoreServer("127.0.0.1", 0).start()
    yield s
    s.stop()


def client(server, **kw):
    return StoreClient("127.0.0.1", server.port, connect_timeout=5, **kw)


def raw_exchange(port, request):
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(request)
        head = b""
        while len(head) < 9:
            chunk = s.recv(9 - len(head))
            assert chunk, "server closed the connection"
            head += chunk
        status, length = struct.unpack("<BQ", head)
        body = b""
        while len(body) < length:
            body += s.recv(length - len(body))
        return status, body


def test_wire_format_set_get_bytes(server):
    # SET "ab" = "xyz": 01 | 02000000 | "ab" | 0300000000000000 | "xyz"
    req = b"\x01" + b"\x02\x00\x00\x00" + b"ab" + b"\x03" + b"\x00" * 7 + b"xyz"
    assert raw_exchange(server.port, req) == (0, b"")
    # GET "ab" with timeoutMs=0 (u32) -> payload "xyz"
    req = b"\x02" + b"\x02\x00\x00\x00" + b"ab" + b"\x04" + b"\x00" * 7 + b"\x00\x00\x00\x00"
    assert raw_exchange(server.port, req) == (0, b"xyz")
    assert server.get_nowait("ab") == b"xyz"


def test_add_counter_is_8_le_bytes(server):
    with client(server) as c:
        assert c.add("n", 5) == 5
        assert c.add("n", -7) == -2
        assert c.get("n", 1) == struct.pack("<q", -2)
        assert c.add("n", 0) == -2
        # int64 wraps like the C++ stores
        c.set("big", struct.pack("<q", 2**63 - 1))
        assert c.add("big", 1) == -2**63
        c.set("text", b"abc")
        with pytest.raises(StoreError, match="not an 8-byte counter"):
            c.add("text", 1)
        assert c.get("text", 1) == b"abc"  # untouched, and the connection still works


def test_check_delete_and_empty_values(server):
    with client(server) as c:
        assert c.check("k") is False
        c.set("k", b"")
        assert c.check("k") is True
        assert c.get("k", 1) == b""
        c.delete("k")
        assert c.check("k") is False
        c.delete("never-set")  # deleting a missing key is fine


def test_get_timeout_status_and_message(server):
    with client(server) as c:
        t0 = time.monotonic()
        with pytest.raises(StoreTimeout, match="timed out after 200 ms waiting for key 'missing'"):
            c.get("missing", 0.2)
        assert 0.15 < time.monotonic() - t0 < 3
        with pytest.raises(StoreTimeout, match="is not set"):
            c.get("missing", 0)
        with pytest.raises(StoreTimeout):
            c.wait(["missing"], 0.1)
        c.set("after", b"1")  # the connection survives timeouts
        assert c.get("after", 1) == b"1"


def test_get_parks_until_another_client_sets(server):
    got = {}

    def reader():
        with client(server) as c:
            got["value"] = c.get("late", 10)
            c.wait(["late", "late2"], 10)
            got["waited"] = True

    t = threading.Thread(target=reader)
    t.start()
    time.sleep(0.2)
    assert "value" not in got
    with client(server) as c:
        c.set("late", b"hello")
        time.sleep(0.1)
        c.add("late2", 1)
    t.join(10)
    assert got == {"value": b"hello", "waited": True}


def test_errors_keep_the_connection_usable(server):
    with client(server) as c:
        assert c.raw(encode_request(9, "k")) == (2, b"unknown command 9")
        status, text = c.raw(encode_request(2, "k", b"\x01\x02"))
        assert status == 2 and b"4-byte timeout" in text
        status, text = c.raw(encode_request(3, "k", b"\x01"))
        assert status == 2 and b"8-byte delta" in text
        c.set("ok", b"v")
        assert c.get("ok", 1) == b"v"


def test_oversized_key_is_refused_and_closed(server):
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as s:
        s.sendall(struct.pack("<BI", 1, (1 << 20) + 1))
        status, length = struct.unpack("<BQ", s.recv(9))
        assert status == 2
        assert b"key longer than" in s.recv(length)
        assert s.recv(1) == b""  # closed: the stream cannot be resynchronized


def test_many_clients_count_together(server):
    def bump():
        with client(server) as c:
            for _ in range(50):
                c.add("count", 1)

    threads = [threading.Thread(target=bump) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    with client(server) as c:
        assert c.get_int("count", 1) == 400


def test_stop_releases_parked_clients():
    s = StoreServer("127.0.0.1", 0).start()
    errors = []

    def parked():
        try:
            with StoreClient("127.0.0.1", s.port, connect_timeout=5) as c:
                c.get("never", 30)
        except StoreError as e:
            errors.append(str(e))

    # The server asks the refusal rule each time a waiter finds its key missing, holding its
    # lock until it parks: once the rule has seen "never", the GET is parked (not still
    # connecting, which a fixed sleep could not tell on a loaded machine).
    asked = threading.Event()
    s.refuse_missing(lambda key: asked.set() if bytes(key).endswith(b"never") else None)
    t = threading.Thread(target=parked)
    t.start()
    assert asked.wait(20)
    t0 = time.monotonic()
    s.stop()
    t.join(5)
    assert not t.is_alive()
    assert time.monotonic() - t0 < 3
    assert errors and "closed" in errors[0]


def test_connect_timeout_is_bounded():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # bound, not listening: connections are refused
        t0 = time.monotonic()
        with pytest.raises(StoreTimeout, match="cannot connect"):
            StoreClient("127.0.0.1", port, connect_timeout=0.3)
        assert time.monotonic() - t0 < 3
