# SPDX-License-Identifier: Apache-2.0
"""The rendezvous key-value store that kolorun serves to its workers over TCP.

The wire protocol is the one documented in rendezvous/store.h (the C++ client in rendezvous/tcp_store.cc
talks to this server; test/support/tcp_store_server.cc is the C++ twin of this file):

  request : u8 cmd | u32 keyLen | key | u64 valLen | value          (little-endian)
  response: u8 status (0 ok, 1 timeout, 2 error) | u64 len | payload
  SET=1 value=data; GET=2 value=u32 timeoutMs -> data; ADD=3 value=i64 delta -> i64 new value;
  WAIT=4 value=u32 timeoutMs; CHECK=5 -> u8 0/1; DEL=6. Error payloads are UTF-8 text.

Counters are kept as exactly 8 bytes (little-endian int64, wrapping on overflow) so that GET of
a counter returns the same bytes as every C++ store; ADD on any other value is an error.

Design: one accept thread (selectors over the listening socket and a wake-up pipe, so stop()
never waits for a timeout) and one thread per connection. A connection thread serves its
requests in order; a GET/WAIT for a missing key parks that thread on the shared Condition until
a SET/ADD creates the key, the request's own deadline passes, or the server stops. Workers keep
few connections (one per rank, plus a handful), so a thread each is cheap and keeps every
request's handling straight-line code. stop() closes every socket: a parked peer sees EOF.
"""

import selectors
import socket
import struct
import threading
import time

CMD_SET, CMD_GET, CMD_ADD, CMD_WAIT, CMD_CHECK, CMD_DEL = 1, 2, 3, 4, 5, 6
STATUS_OK, STATUS_TIMEOUT, STATUS_ERROR = 0, 1, 2
CMD_NAMES = {CMD_SET: "SET", CMD_GET: "GET", CMD_ADD: "ADD", CMD_WAIT: "WAIT",
             CMD_CHECK: "CHECK", CMD_DEL: "DEL"}

# Same limits as rendezvous/store_wire.h: past them the stream cannot be trusted, so the server
# answers with an error and closes the connection.
MAX_KEY_BYTES = 1 << 20
MAX_VALUE_BYTES = 1 << 32

_REQ_HEAD = struct.Struct("<BI")
_U64 = struct.Struct("<Q")
_REPLY_HEAD = struct.Struct("<BQ")
_I64 = struct.Struct("<q")
_U32 = struct.Struct("<I")


class _Closed(Exception):
    """The peer closed the connection (or the server is stopping)."""


def _recv_exact(sock, n):
    chunks = []
    while n > 0:
        chunk = sock.recv(min(n, 1 << 20))
        if not chunk:
            raise _Closed()
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def encode_reply(status, payload=b""):
    return _REPLY_HEAD.pack(status, len(payload)) + payload


class StoreServer:
    """Serves the store on (host, port); port 0 picks a free port. Thread-safe.

    start() binds and returns at once; stop() closes everything and joins the threads (bounded).
    The launcher reads the same map in-process with has()/get_nowait()/keys().
    """

    def __init__(self, host="0.0.0.0", port=0):
        self._data = {}
        self._cond = threading.Condition()
        self._refuse = None  # key -> error text or None: GET/WAIT of such a missing key fails
        self._stopping = False
        self._conns = set()
        self._threads = []
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._listen = socket.socket(family, socket.SOCK_STREAM)
        self._listen.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listen.bind((host, port))
        self._listen.listen(socket.SOMAXCONN)
        self._listen.setblocking(False)
        self.host = host
        self.port = self._listen.getsockname()[1]
        self._wake_r, self._wake_w = socket.socketpair()
        self._accept_thread = threading.Thread(target=self._accept_loop,
                                               name="kolo-store-accept", daemon=True)

    def start(self):
        self._accept_thread.start()
        return self

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # ---- in-process access for the launcher -------------------------------------------------
    def has(self, key):
        with self._cond:
            return _key_bytes(key) in self._data

    def get_nowait(self, key):
        with self._cond:
            return self._data.get(_key_bytes(key))

    def keys(self):
        with self._cond:
            return sorted(self._data)

    def set(self, key, value):
        with self._cond:
            self._data[_key_bytes(key)] = bytes(value)
            self._cond.notify_all()

    def refuse_missing(self, rule):
        """From now on a GET/WAIT of a missing key for which rule(key: bytes) returns a text
        fails at once with that text (STATUS_ERROR), also one already waiting. Elastic mode
        uses it for the keys of abandoned rendezvous rounds, so ranks still waiting in such a
        round learn it at once instead of at their start timeout. None removes the rule."""
        with self._cond:
            self._refuse = rule
            self._cond.notify_all()

    # ---- lifecycle -------------------------------------------------------------------------
    def stop(self, join_timeout=2.0):
        with self._cond:
            if self._stopping:
                return
            self._stopping = True
            self._cond.notify_all()
            conns = list(self._conns)
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        deadline = time.monotonic() + join_timeout
        if self._accept_thread.is_alive():
            self._accept_thread.join(max(0.0, deadline - time.monotonic()))
        for t in list(self._threads):
            t.join(max(0.0, deadline - time.monotonic()))
        self._listen.close()
        self._wake_r.close()
        self._wake_w.close()

    def _accept_loop(self):
        sel = selectors.DefaultSelector()
        sel.register(self._listen, selectors.EVENT_READ)
        sel.register(self._wake_r, selectors.EVENT_READ)
        try:
            while True:
                with self._cond:
                    if self._stopping:
                        return
                for key, _ in sel.select(timeout=1.0):
                    if key.fileobj is self._wake_r:
                        return
                    try:
                        conn, _addr = self._listen.accept()
                    except (BlockingIOError, InterruptedError):
                        continue
                    except OSError:
                        return
                    conn.setblocking(True)
                    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    with self._cond:
                        if self._stopping:
                            conn.close()
                            return
                        self._conns.add(conn)
                    t = threading.Thread(target=self._serve, args=(conn,),
                                         name="kolo-store-conn", daemon=True)
                    self._threads = [x for x in self._threads if x.is_alive()] + [t]
                    t.start()
        finally:
            sel.close()

    # ---- one connection --------------------------------------------------------------------
    def _serve(self, conn):
        try:
            while True:
                cmd, key_len = _REQ_HEAD.unpack(_recv_exact(conn, _REQ_HEAD.size))
                if key_len > MAX_KEY_BYTES:
                    conn.sendall(encode_reply(
                        STATUS_ERROR, b"key longer than %d bytes" % MAX_KEY_BYTES))
                    return
                key = _recv_exact(conn, key_len)
                (val_len,) = _U64.unpack(_recv_exact(conn, _U64.size))
                if val_len > MAX_VALUE_BYTES:
                    conn.sendall(encode_reply(STATUS_ERROR, b"value larger than 4 GiB"))
                    return
                value = _recv_exact(conn, val_len)
                conn.sendall(self.handle(cmd, key, value))
        except (_Closed, OSError):
            pass
        finally:
            with self._cond:
                self._conns.discard(conn)
            conn.close()

    def handle(self, cmd, key, value):
        """Executes one request and returns the encoded reply (may block for GET/WAIT)."""
        if cmd == CMD_SET:
            with self._cond:
                self._data[key] = value
                self._cond.notify_all()
            return encode_reply(STATUS_OK)
        if cmd in (CMD_GET, CMD_WAIT):
            if len(value) != 4:
                return _error("%s expects a 4-byte timeout" % CMD_NAMES[cmd])
            (timeout_ms,) = _U32.unpack(value)
            return self._wait_for(cmd, key, timeout_ms)
        if cmd == CMD_ADD:
            if len(value) != 8:
                return _error("ADD expects an 8-byte delta")
            (delta,) = _I64.unpack(value)
            with self._cond:
                old = self._data.get(key)
                if old is not None and len(old) != 8:
                    return _error("key '%s' holds a %d-byte value, not an 8-byte counter"
                                  % (_show(key), len(old)))
                current = _I64.unpack(old)[0] if old is not None else 0
                new = (current + delta + (1 << 63)) % (1 << 64) - (1 << 63)  # wrap like int64
                encoded = _I64.pack(new)
                self._data[key] = encoded
                self._cond.notify_all()
            return encode_reply(STATUS_OK, encoded)
        if cmd == CMD_CHECK:
            with self._cond:
                exists = key in self._data
            return encode_reply(STATUS_OK, b"\x01" if exists else b"\x00")
        if cmd == CMD_DEL:
            with self._cond:
                self._data.pop(key, None)
            return encode_reply(STATUS_OK)
        return _error("unknown command %d" % cmd)

    def _wait_for(self, cmd, key, timeout_ms):
        deadline = time.monotonic() + timeout_ms / 1000.0
        with self._cond:
            while key not in self._data:
                left = deadline - time.monotonic()
                if self._stopping:
                    raise _Closed()
                refused = self._refuse(key) if self._refuse is not None else None
                if refused:
                    return _error(refused)
                if timeout_ms == 0:
                    return encode_reply(STATUS_TIMEOUT,
                                        ("key '%s' is not set" % _show(key)).encode())
                if left <= 0:
                    return encode_reply(STATUS_TIMEOUT, (
                        "timed out after %d ms waiting for key '%s'" % (timeout_ms, _show(key))
                    ).encode())
                self._cond.wait(left)
            data = self._data[key]
        return encode_reply(STATUS_OK, data if cmd == CMD_GET else b"")


def _key_bytes(key):
    return key.encode() if isinstance(key, str) else bytes(key)


def _show(key):
    return key.decode("utf-8", "replace")


def _error(text):
    return encode_reply(STATUS_ERROR, text.encode())
