# SPDX-License-Identifier: Apache-2.0
"""The worker's side of kolorun's elastic driver (bindings/launcher/kolo_launcher/elastic_run.py).

kolorun starts each elastic worker with KOLO_ELASTIC_WORKER_ID, the store's address
(KOLO_RENDEZVOUS_ADDR/_PORT) and KOLO_ELASTIC_TIMEOUT. The driver publishes rendezvous rounds in
its store (elastic/round, elastic/round<N>/assign/<id>); a worker joins the newest round that
assigns it a place: it sets KOLO_RANK, KOLO_SIZE, KOLO_LOCAL_*, KOLO_CROSS_*, KOLO_HOSTNAME and
KOLO_RENDEZVOUS_ROUND=N in its environment and initializes the runtime, which reads them again
at each init (a round has its own store keys; a stale round is refused, bootstrap/README.md).
A worker that leaves a round (its runtime lost a peer, its init failed) says so in
elastic/want/<id>, and the driver forms a new round. A worker the driver removed from the job
(its host is no longer listed, or lists fewer slots: Horovod's graceful removal) finds
elastic/round<N>/removed/<id> instead of a place in the round it would join: it ends there
(WorkerRemoved, exit status 0), as Horovod's removed worker ends at its next init.

A worker records the newest round it got its place in (elastic/joining/<id>) and initialized in
(elastic/inited/<id>); a new worker waits, before its init, until the round's other members got
their place in it (they leave their last round at a commit, which may be far off: that wait is
not bounded by the runtime's start timeout, the driver replaces the round if a member fails).
A commit reads elastic/abort too: the driver's abort ends the training workers there.

Module state (the worker's id, its round, one store connection) is per process: a worker is
one process. Not thread-safe: the training thread calls it (init, commit, reset). Every wait is
bounded: joining a round by KOLO_ELASTIC_TIMEOUT (the driver aborts sooner, with a reason in
elastic/abort that the worker raises), a new worker's wait for the others' commit by the
driver (a new round or an abort), each store request by a socket timeout.
"""

import json
import os
import socket
import struct
import sys
import time

from kolo import common

_CMD_SET, _CMD_GET, _CMD_CHECK = 1, 2, 5
_STATUS_OK = 0
POLL_SECONDS = 0.05
DEFAULT_TIMEOUT = 600.0
MAX_INIT_ATTEMPTS = 10  # inits failing in this many rounds in a row end the worker

_state = {"round": -1, "conn": None}


class ElasticJobError(common.KoloInternalError):
    """The worker cannot go on: kolorun aborted the job (the reason is the message), no round
    came in time, or kolorun's store is gone. @run lets it propagate."""

    __module__ = "kolo.elastic"  # how tracebacks name it: kolo.elastic.ElasticJobError


class WorkerRemoved(SystemExit):
    """Ends a worker that kolorun removed from the job, when it leaves its round at a commit
    (HostsUpdatedInterrupt) to join the next one: the others go on without it and without a
    rollback. A SystemExit with status 0 (kolorun does not count it as a failure), so that an
    `except Exception` around the training does not keep the process in the job."""

    __module__ = "kolo.elastic"

    def __init__(self, reason):
        super().__init__(0)
        self.reason = reason

    def __str__(self):
        return self.reason


def enabled():
    """Whether this process is a worker of kolorun's elastic mode."""
    return bool(os.environ.get("KOLO_ELASTIC_WORKER_ID"))


def worker_id():
    return os.environ.get("KOLO_ELASTIC_WORKER_ID", "")


def current_round():
    """The round this worker last initialized in (-1 before the first)."""
    return _state["round"]


class _Conn:
    """A minimal blocking client of the store protocol (core/store.h): SET, GET, CHECK."""

    def __init__(self, host, port):
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def _call(self, cmd, key, value=b""):
        key = key.encode()
        self.sock.sendall(struct.pack("<BI", cmd, len(key)) + key +
                          struct.pack("<Q", len(value)) + value)
        head = self._recv(9)
        status, n = struct.unpack("<BQ", head)
        return status, self._recv(n)

    def _recv(self, n):
        chunks = []
        while n > 0:
            chunk = self.sock.recv(min(n, 1 << 20))
            if not chunk:
                raise OSError("the store closed the connection")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def get(self, key):
        """The value, or None when the key is not set (never waits)."""
        status, data = self._call(_CMD_GET, key, struct.pack("<I", 0))
        return data if status == _STATUS_OK else None

    def set(self, key, value):
        status, data = self._call(_CMD_SET, key, value)
        if status != _STATUS_OK:
            raise OSError(data.decode("utf-8", "replace"))


def _conn():
    if _state["conn"] is None:
        addr = os.environ.get("KOLO_RENDEZVOUS_ADDR")
        port = os.environ.get("KOLO_RENDEZVOUS_PORT")
        if not addr or not port:
            raise ElasticJobError(
                "elastic worker %s: KOLO_RENDEZVOUS_ADDR/_PORT are not set (start elastic jobs "
                "with kolorun --host-discovery-script/--min-np)" % worker_id())
        _state["conn"] = _Conn(addr, port)
    return _state["conn"]


def _request(fn):
    """Runs fn(conn), reconnecting once after a broken connection."""
    try:
        return fn(_conn())
    except OSError:
        _state["conn"] = None
        try:
            return fn(_conn())
        except OSError as e:
            raise ElasticJobError("elastic worker %s: cannot reach kolorun's store: %s"
                                           % (worker_id(), e))


def newest_round():
    """The newest round the driver published (-1: none yet)."""
    value = _request(lambda c: c.get("elastic/round"))
    return int(value) if value else -1


def driver_news():
    """(abort, newest): kolorun's reason when it aborted the job (elastic/abort), else None; and
    the newest round it published (-1: none yet). What a commit asks the driver."""
    def look(c):
        return c.get("elastic/abort"), c.get("elastic/round")
    abort, value = _request(look)
    return (None if abort is None else abort.decode("utf-8", "replace"),
            int(value) if value else -1)


def aborted_error(reason):
    """The ElasticJobError a worker raises when kolorun aborted the job."""
    return ElasticJobError("elastic job aborted by kolorun: %s" % reason)


def _members(c, n):
    value = c.get("elastic/round%d/members" % n)
    return None if value is None else frozenset(json.loads(value.decode()))


def round_only_removes(n):
    """Whether round n (one the driver published) holds only members of the round this worker
    runs in (workers were removed, none added): Horovod's skip_sync."""
    current = _state.get("members")
    later = _request(lambda c: _members(c, n))
    return current is not None and later is not None and later <= current


def only_members_left():
    """Whether the round this worker last initialized in holds only workers of the round it
    ran in before (some were removed, none added): they all committed the same state, so no
    sync is needed. The same answer on every member of the round: each ran in that round
    before, or the round has a member that did not (then every member sees one)."""
    before, now = _state.get("members_before"), _state.get("members")
    return before is not None and now is not None and now <= before


def request_round():
    """Tells the driver this worker left its round and needs a new one."""
    left = str(_state["round"]).encode()
    _request(lambda c: c.set("elastic/want/%s" % worker_id(), left))


def _timeout():
    try:
        return float(os.environ.get("KOLO_ELASTIC_TIMEOUT", DEFAULT_TIMEOUT))
    except ValueError:
        return DEFAULT_TIMEOUT


def join(min_round):
    """Waits for the newest round >= min_round that gives this worker a place, puts that place in
    the environment and returns (round, place). Raises KoloInternalError with the driver's reason
    when the job was aborted, or after KOLO_ELASTIC_TIMEOUT; WorkerRemoved when the newest round
    removes this worker from the job."""
    deadline = time.monotonic() + _timeout()
    if _state["round"] < 0 and not _state.get("ready"):
        # A new worker: the driver adds it to a round only now that it is started up.
        _request(lambda c: c.set("elastic/ready/%s" % worker_id(), b"1"))
        _state["ready"] = True
    while True:
        def look(c):
            abort = c.get("elastic/abort")
            if abort is not None:
                return abort, None, None, None
            value = c.get("elastic/round")
            n = int(value) if value else -1
            if n < 0:
                return None, n, None, None
            place = c.get("elastic/round%d/assign/%s" % (n, worker_id())) \
                if n >= min_round else None
            removed = c.get("elastic/round%d/removed/%s" % (n, worker_id())) \
                if place is None else None
            return None, n, place, removed
        abort, n, place, removed = _request(look)
        if abort is not None:
            raise aborted_error(abort.decode("utf-8", "replace"))
        if removed is not None:
            reason = ("worker %s was removed from the job by kolorun (%s); it ends here, "
                      "the others go on without it" % (worker_id(),
                                                       removed.decode("utf-8", "replace")))
            print("kolo elastic: " + reason, file=sys.stderr, flush=True)
            raise WorkerRemoved(reason)
        if place is not None:
            if not _state.get("joining") == n:
                _request(lambda c: c.set("elastic/joining/%s" % worker_id(), str(n).encode()))
                _state["joining"] = n
            if _state.get("inited") is None and not _request(lambda c: _arrived(c, n)):
                # A new worker waits for the round's other members to leave their last round
                # (at their next commit, which may be far off: not bounded by the runtime's
                # --start-timeout, nor by KOLO_ELASTIC_TIMEOUT: the driver replaces the round
                # when a member fails, or aborts the job), as horovodrun starts new workers
                # only once the others reached the interrupt.
                deadline = time.monotonic() + _timeout()
                time.sleep(POLL_SECONDS)
                continue
            place = json.loads(place.decode())
            _export(n, place)
            return n, place
        if time.monotonic() >= deadline:
            raise ElasticJobError(
                "elastic worker %s: no rendezvous round after round %d within %g s "
                "(KOLO_ELASTIC_TIMEOUT)" % (worker_id(), min_round - 1, _timeout()))
        time.sleep(POLL_SECONDS)


def _arrived(c, n):
    """Whether every other member of round n got its place in it (elastic/joining/<id> >= n):
    it left the round it trained in, so the round's rendezvous will not wait for its commit."""
    members = _members(c, n) or ()
    for wid in members:
        if str(wid) == worker_id():
            continue
        value = c.get("elastic/joining/%s" % wid)
        if value is None or int(value) < n:
            return False
    return True


def _export(n, place):
    env = {"RANK": place["rank"], "SIZE": place["size"], "LOCAL_RANK": place["local_rank"],
           "LOCAL_SIZE": place["local_size"], "CROSS_RANK": place["cross_rank"],
           "CROSS_SIZE": place["cross_size"], "HOSTNAME": place["host"]}
    for k, v in env.items():
        os.environ["KOLO_" + k] = str(v)
        os.environ["HOROVOD_" + k] = str(v)
    os.environ["KOLO_RENDEZVOUS_ROUND"] = str(n)


def init_in_round(c_init, c_shutdown):
    """The elastic init: join the newest round after the current one and initialize in it; an
    init that fails (a member died during the rendezvous, the round went stale) asks for a new
    round and tries again, at most MAX_INIT_ATTEMPTS times in a row and until
    KOLO_ELASTIC_TIMEOUT."""
    deadline = None
    failures = 0
    before = _state.get("members")
    while True:
        n, _place = join(_state["round"] + 1)
        if deadline is None:  # from the first round joined (a new worker may wait long in join)
            deadline = time.monotonic() + _timeout()
        try:
            members = _request(lambda c: _members(c, n))
            c_init()
        except (common.KoloInternalError, ValueError) as e:
            # ValueError: the store refused a key of this round, which the driver abandoned
            # (its error reaches Python as INVALID_ARGUMENT); other ValueErrors are the user's.
            if not isinstance(e, common.KoloInternalError) and "was abandoned" not in str(e):
                raise
            _state["round"] = n
            try:
                c_shutdown()
            except Exception:  # noqa: BLE001 - the runtime is already gone; nothing to add
                pass
            failures += 1
            if failures >= MAX_INIT_ATTEMPTS:
                raise ElasticJobError("elastic worker %s: init failed in %d rounds in a row; "
                                      "last (round %d): %s" % (worker_id(), failures, n, e))
            if time.monotonic() >= deadline:
                raise ElasticJobError("elastic worker %s: no round could be joined within %g s "
                                      "(KOLO_ELASTIC_TIMEOUT); last: %s" % (worker_id(),
                                                                            _timeout(), e))
            print("kolo elastic: worker %s could not join round %d (%s); asking for a new round"
                  % (worker_id(), n, e), file=sys.stderr, flush=True)
            request_round()
            continue
        _state["round"] = _state["inited"] = n
        _state["members_before"], _state["members"] = before, members
        # tells the driver that round n formed with this worker in it
        _request(lambda c: c.set("elastic/inited/%s" % worker_id(), str(n).encode()))
        return n
