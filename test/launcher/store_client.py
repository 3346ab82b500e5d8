# SPDX-License-Identifier: Apache-2.0
"""A blocking client of the rendezvous store protocol (rendezvous/store.h), for the tests.

Test code (issue 13: test-only code lives under test/): kolorun serves the store and never
reads it this way, so this module is not installed with kolo_launcher. It takes the protocol's
constants from kolo_launcher.store_server: the importer puts bindings/launcher on sys.path
(conftest.py does).

Not thread-safe: use one StoreClient per thread. Every call has a deadline: the connection is
retried until connect_timeout passes, GET/WAIT wait at most their timeout, and each reply must
arrive within that timeout plus io_timeout. Errors raise StoreTimeout (status 1, or no reply in
time) or StoreError (status 2, a closed connection, a malformed reply).
"""

import socket
import struct
import time

from kolo_launcher.store_server import (CMD_ADD, CMD_CHECK, CMD_DEL, CMD_GET, CMD_SET, CMD_WAIT,
                                        STATUS_OK, STATUS_TIMEOUT)

_U32 = struct.Struct("<I")
_I64 = struct.Struct("<q")
_REPLY_HEAD = struct.Struct("<BQ")
_MAX_TIMEOUT_MS = 0xFFFFFFFF


class StoreError(Exception):
    """The server answered with an error, or the connection failed."""


class StoreTimeout(StoreError):
    """A GET/WAIT (or the connection) did not complete in time."""


def encode_request(cmd, key, value=b""):
    key = key.encode() if isinstance(key, str) else bytes(key)
    return struct.pack("<BI", cmd, len(key)) + key + struct.pack("<Q", len(value)) + value


class StoreClient:
    def __init__(self, host, port, connect_timeout=30.0, io_timeout=30.0):
        self._io_timeout = io_timeout
        deadline = time.monotonic() + connect_timeout
        last = None
        while True:
            try:
                self._sock = socket.create_connection(
                    (host, int(port)), timeout=max(0.1, deadline - time.monotonic()))
                break
            except OSError as e:
                last = e
                if time.monotonic() >= deadline:
                    raise StoreTimeout("cannot connect to the store at %s:%s within %g s: %s"
                                       % (host, port, connect_timeout, last)) from None
                time.sleep(0.05)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def close(self):
        self._sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def set(self, key, value):
        self._call(CMD_SET, key, _as_bytes(value))

    def get(self, key, timeout=30.0):
        return self._call(CMD_GET, key, _timeout_arg(timeout), wait=timeout)

    def add(self, key, delta):
        reply = self._call(CMD_ADD, key, _I64.pack(delta))
        if len(reply) != 8:
            raise StoreError("ADD reply of %d bytes (expected 8)" % len(reply))
        return _I64.unpack(reply)[0]

    def wait(self, keys, timeout=30.0):
        deadline = time.monotonic() + timeout
        for key in ([keys] if isinstance(keys, (str, bytes)) else keys):
            left = max(0.0, deadline - time.monotonic())
            self._call(CMD_WAIT, key, _timeout_arg(left), wait=left)

    def check(self, key):
        reply = self._call(CMD_CHECK, key)
        if len(reply) != 1:
            raise StoreError("CHECK reply of %d bytes (expected 1)" % len(reply))
        return reply == b"\x01"

    def delete(self, key):
        self._call(CMD_DEL, key)

    def get_int(self, key, timeout=30.0):
        """GET of a counter made by add(): 8 little-endian bytes."""
        data = self.get(key, timeout)
        if len(data) != 8:
            raise StoreError("key %r holds %d bytes, not an 8-byte counter" % (key, len(data)))
        return _I64.unpack(data)[0]

    def raw(self, request, wait=0.0):
        """Sends pre-encoded bytes; returns (status, payload). For protocol tests."""
        self._sock.settimeout(wait + self._io_timeout)
        try:
            self._sock.sendall(request)
            status, length = _REPLY_HEAD.unpack(self._recv(_REPLY_HEAD.size))
            return status, self._recv(length)
        except socket.timeout:
            raise StoreTimeout("no reply from the store within %g s"
                               % (wait + self._io_timeout)) from None

    def _call(self, cmd, key, value=b"", wait=0.0):
        status, payload = self.raw(encode_request(cmd, key, value), wait)
        if status == STATUS_OK:
            return payload
        text = payload.decode("utf-8", "replace")
        if status == STATUS_TIMEOUT:
            raise StoreTimeout(text)
        raise StoreError(text)

    def _recv(self, n):
        chunks = []
        while n > 0:
            chunk = self._sock.recv(min(n, 1 << 20))
            if not chunk:
                raise StoreError("the store closed the connection")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)


def _as_bytes(value):
    return value.encode() if isinstance(value, str) else bytes(value)


def _timeout_arg(seconds):
    return _U32.pack(max(0, min(_MAX_TIMEOUT_MS, int(round(seconds * 1000)))))
