# SPDX-License-Identifier: Apache-2.0
"""kolo.run(hosts=...): a function on ranks spread over several hosts, started by kolorun.

How the job runs (the driver is the process that calls kolo.run):
  1. the driver pickles (func, args, kwargs) with cloudpickle and serves it, and collects the
     results, on a small TCP server of its own (_JobServer: one thread, a thread per
     connection, bound to 0.0.0.0 on a free port);
  2. it runs kolorun as a child: `kolorun -np N -H hosts [options] -- python -c <worker>`.
     kolorun starts local ranks directly and remote ones over ssh, serves the rendezvous store
     and supervises the job (a failing rank stops the others). The ranks inherit the driver's
     environment through kolorun (remote ones too), plus KOLO_RUN_PORT and KOLO_RUN_SECRET.
     kolorun's life is tied to the driver's: it starts through a small exec wrapper (_TIED)
     that sets PR_SET_PDEATHSIG to SIGTERM, so when the driver dies without stopping it
     (kill -9, the OOM killer) the kernel sends kolorun SIGTERM, and kolorun stops every rank
     (and what the ranks started) as on any SIGTERM; a kolorun killed harder still leaves no
     rank, through its orphan guard (local ranks) and remote watchers;
  3. each rank (_worker) connects to KOLO_RENDEZVOUS_ADDR (the address at which kolorun told it
     to reach this machine) on KOLO_RUN_PORT, fetches the function, runs it, sends back
     (ok, return value or traceback, host, size) and exits (1 when the function raised);
  4. the driver waits for kolorun, then returns every rank's result in rank order, or raises
     RuntimeError naming the first failing rank, its host and its traceback (or kolorun's
     account of a rank that died without a word / never connected).
Elastic jobs (kolo.run's min_num_proc or host_discovery_script, with max_num_proc, reset_limit
and cooldown_range) run under kolorun's elastic mode (--min-np, --max-np, --reset-limit,
--blacklist-cooldown-range, --host-discovery-script, --slots-per-host). Workers come and go,
and take their rank and size when they join a round (kolo.elastic); each sends its result
under its fixed worker id, with the rank, size and round it had when the function returned.
When kolorun ends the job with status 0, the result is the return values of the workers of the
final round, by rank (horovod.run reads the value stored last under each rank, the final
workers' too, though only for ranks below min_num_proc): a worker that failed or was stopped
in an earlier round does not fail the job. Otherwise RuntimeError with kolorun's reason and
the traceback of the last worker that raised.

Authentication: KOLO_RUN_SECRET is a random 32-byte key (hex) that reaches the ranks in their
environment, as everything else kolorun passes (over ssh for remote ranks). Every message in
both directions carries an HMAC-SHA256 of its contents under that key, checked before anything
is unpickled, so nobody who can merely connect to the port can make the driver or a rank
unpickle data of their choosing. The key is removed from the rank's os.environ before the
user's function runs. Like the rest of the environment kolorun passes to remote ranks, the key
is visible in the hosts' process lists (kolorun's ssh command line): it keeps out other
machines on the network, not other users of the hosts.

Requirements are horovod.run's: the same Python, kolo and paths on every host (the ranks get
the driver's PYTHONPATH, KOLO_LIBRARY and working directory), ssh without a password, and the
driver reachable from the hosts (use network_interface= to choose the address).

Threads: the server's threads only read sockets and fill a dict under a lock; the caller's
thread runs kolorun and decides. Bounded: socket operations time out; kolorun stops a job
whose rank fails or lags the first rank's init by start_timeout; `timeout` bounds the whole job
(without it, ranks that never call init, like any function that never returns, run on).
"""

import collections
import hashlib
import hmac
import os
import pickle
import re
import secrets
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import traceback

_MAGIC = b"KOLO"
_HEADER = struct.Struct("!4scIQ")  # magic, op (F: fetch function, R: result), rank, body bytes
_LEN = struct.Struct("!Q")
_MAC_BYTES = 32
_SOCKET_TIMEOUT = 120.0  # per socket operation (a result may be large)
_STOP_GRACE = 30.0  # kolorun's own stop needs its grace + the remote watcher's; then SIGKILL
_WORKER_MAIN = "import sys; from kolo._run_hosts import _worker; sys.exit(_worker())"
# Runs as `python -I -S -c _TIED CALLER_PID kolorun-argv...`: asks the kernel for SIGTERM when
# the parent (the thread of the caller that started it, which waits for kolorun until it is
# gone) dies, checks that the caller is still its parent (it may have died before the prctl),
# then becomes kolorun: the request survives exec, and kolorun stops its ranks on SIGTERM.
_TIED = (
    "import ctypes, os, signal, sys\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "if libc.prctl(1, int(signal.SIGTERM), 0, 0, 0) != 0:  # PR_SET_PDEATHSIG\n"
    "    sys.exit('kolo.run: prctl(PR_SET_PDEATHSIG): %s' % os.strerror(ctypes.get_errno()))\n"
    "if os.getppid() != int(sys.argv[1]):\n"
    "    sys.exit('kolo.run: the calling process is gone; kolorun not started')\n"
    "os.execv(sys.argv[2], sys.argv[2:])\n")


def tied_to_caller(cmd):
    """cmd run so that kolorun gets SIGTERM when the calling process dies (see _TIED; Linux)."""
    if not sys.platform.startswith("linux"):
        return cmd
    return [sys.executable, "-I", "-S", "-c", _TIED, str(os.getpid())] + cmd


def _mac(key, data):
    return hmac.new(key, data, hashlib.sha256).digest()


def _recv_exact(conn, n):
    chunks, got = [], 0
    while got < n:
        chunk = conn.recv(min(n - got, 1 << 20))
        if not chunk:
            raise ConnectionError("connection closed after %d of %d bytes" % (got, n))
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


class _JobServer:
    """Serves the pickled function and collects the ranks' results (see the module doc)."""

    def __init__(self, payload, key):
        self._payload = payload
        self._key = key
        self._lock = threading.Lock()
        self.results = {}  # rank -> (arrival number, pickled (ok, value, host, size))
        self.rejected = 0  # messages with a wrong MAC
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("0.0.0.0", 0))
        self._sock.listen(256)
        self.port = self._sock.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, name="kolo.run server", daemon=True)
        self._thread.start()

    def close(self):
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()
        self._thread.join(5)

    def _serve(self):
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:  # closed
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn):
        try:
            conn.settimeout(_SOCKET_TIMEOUT)
            header = _recv_exact(conn, _HEADER.size)
            magic, op, rank, size = _HEADER.unpack(header)
            if magic != _MAGIC or op not in (b"F", b"R") or (op == b"F" and size):
                return
            body = _recv_exact(conn, size)
            if not hmac.compare_digest(_recv_exact(conn, _MAC_BYTES),
                                       _mac(self._key, header + body)):
                with self._lock:
                    self.rejected += 1
                return
            if op == b"F":
                conn.sendall(_LEN.pack(len(self._payload)) + self._payload +
                             _mac(self._key, b"F" + self._payload))
            else:
                with self._lock:
                    self.results.setdefault(rank, (len(self.results), body))
                conn.sendall(b"K")
        except (OSError, ValueError, struct.error):
            pass
        finally:
            conn.close()


def find_kolorun():
    """$KOLO_KOLORUN, the source tree's bindings/launcher/kolorun, or kolorun on PATH."""
    named = os.environ.get("KOLO_KOLORUN")
    if named:
        return named
    here = os.path.dirname(os.path.abspath(__file__))
    tree = os.path.normpath(os.path.join(here, os.pardir, os.pardir, "launcher", "kolorun"))
    if os.path.isfile(tree):
        return tree
    found = shutil.which("kolorun")
    if not found:
        raise RuntimeError("kolo.run(hosts=...) needs kolorun: not found in $KOLO_KOLORUN, %s "
                           "or on PATH" % tree)
    return found


def kolorun_command(kolorun, python, np, hosts, hostfile, env_names, options):
    cmd = [sys.executable, kolorun]
    if np is not None:
        cmd += ["-np", str(np)]
    if hosts:
        cmd += ["-H", hosts]
    elif hostfile:
        cmd += ["--hostfile", hostfile]
    flags = {"network_interface": "--network-interface", "ssh_port": "--ssh-port",
             "ssh_identity_file": "--ssh-identity-file", "start_timeout": "--start-timeout",
             "output_filename": "--output-filename"}
    for name, flag in flags.items():
        if options.get(name) is not None:
            cmd += [flag, str(options[name])]
    elastic = options.get("elastic") or {}
    flags = {"min_np": "--min-np", "max_np": "--max-np", "reset_limit": "--reset-limit",
             "host_discovery_script": "--host-discovery-script",
             "slots_per_host": "--slots-per-host"}
    for name, flag in flags.items():
        if elastic.get(name) is not None:
            cmd += [flag, str(elastic[name])]
    if elastic.get("cooldown_range") is not None:
        cmd += ["--blacklist-cooldown-range"] + [repr(v) for v in elastic["cooldown_range"]]
    if options.get("verbose"):
        cmd.append("--verbose")
    for name in env_names:
        cmd += ["-x", name]
    return cmd + ["--", python, "-c", _WORKER_MAIN]


class _StderrTee:
    """Copies kolorun's stderr to ours and keeps its own ("kolorun: ...") lines."""

    def __init__(self, stream):
        self.lines = collections.deque(maxlen=50)
        self._stream = stream
        self._thread = threading.Thread(target=self._run, name="kolo.run stderr", daemon=True)
        self._thread.start()

    def _run(self):
        out = getattr(sys.stderr, "buffer", None)
        for line in iter(self._stream.readline, b""):
            if line.startswith(b"kolorun: "):
                self.lines.append(line.decode("utf-8", "replace").rstrip())
            try:
                if out is not None:
                    out.write(line)
                    out.flush()
                else:
                    sys.stderr.write(line.decode("utf-8", "replace"))
            except (OSError, ValueError):
                pass

    def join(self):
        self._thread.join(5)


def run_on_hosts(payload, np, hosts, hostfile, env, timeout, python, base_env, options):
    """Runs the job; returns the results by rank or raises RuntimeError / TimeoutError."""
    key = secrets.token_bytes(32)
    server = _JobServer(payload, key)
    proc = tee = None
    try:
        child_env = dict(base_env)
        child_env.update({"KOLO_RUN_PORT": str(server.port), "KOLO_RUN_SECRET": key.hex(),
                          "KOLO_RUN_ELASTIC": "1" if options.get("elastic") else "0"})
        cmd = kolorun_command(find_kolorun(), python, np, hosts, hostfile, sorted(env or {}),
                              options)
        if options.get("verbose"):
            print("kolo.run: %s" % " ".join(cmd[:-1] + ["'<worker>'"]), file=sys.stderr)
        proc = subprocess.Popen(tied_to_caller(cmd), env=child_env, stdin=subprocess.DEVNULL,
                                stderr=subprocess.PIPE)
        tee = _StderrTee(proc.stderr)
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            _stop(proc)
            raise TimeoutError("kolo.run: the job did not finish within %s s; it was stopped"
                               % timeout) from None
        tee.join()
        if options.get("elastic"):
            return _collect_elastic(server, code, list(tee.lines))
        return _collect(server, np, code, list(tee.lines))
    finally:
        if proc is not None and proc.poll() is None:
            _stop(proc)
        server.close()


def _stop(proc):
    """kolorun passes SIGTERM to every rank and waits for them; SIGKILL if it takes too long."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(_STOP_GRACE)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _collect(server, np, code, kolorun_lines):
    outcomes = {}
    for rank, (arrival, body) in server.results.items():
        # (arrival, ok, value, host, size); the rank and round are the elastic mode's
        outcomes[rank] = ((arrival,) + tuple(pickle.loads(body)))[:5]
    size = np if np is not None else max([o[4] for o in outcomes.values()] or [0])
    failed = sorted((o[0], r) for r, o in outcomes.items() if not o[1])
    missing = [r for r in range(size) if r not in outcomes]
    if code == 0 and not failed and not missing and size:
        return [outcomes[r][2] for r in range(size)]
    # Which rank failed first. A rank that raised sends its traceback before it shuts down (which
    # is what fails the others' ops), so the order the tracebacks arrived in is causal. kolorun
    # names the rank that exited first: the cause when that rank died without sending anything.
    job_failed = [l.split("job failed: ", 1)[1] for l in kolorun_lines if "job failed: " in l]
    named = re.match(r"rank (\d+) \(host ([^)]*)\)", job_failed[0]) if job_failed else None
    silent = named is not None and int(named.group(1)) not in outcomes
    first = failed[0][1] if failed and not silent else None
    total = " of %d" % size if size else ""
    if first is not None:
        _, _, value, host, _ = outcomes[first]
        raise RuntimeError("kolo.run: rank %d (host %s) failed (%d%s ranks failed):\n%s"
                           % (first, host, len(failed), total, value))
    if job_failed:
        text = "kolo.run: %s" % job_failed[0]
    elif code != 0:
        text = "kolo.run: kolorun exited with status %d" % code
    else:
        text = "kolo.run: rank%s %s exited without a result" % (
            "s" if len(missing) > 1 else "", ",".join(map(str, missing)) or "?")
    if failed:
        _, _, value, host, _ = outcomes[failed[0][1]]
        text += "\nrank %d (host %s) also raised:\n%s" % (failed[0][1], host, value)
    elif kolorun_lines:
        text += "\n" + "\n".join(kolorun_lines[-10:])
    raise RuntimeError(text)


def _collect_elastic(server, code, kolorun_lines):
    """An elastic job's results: those of the workers of the final round, by their rank in it
    (horovod.run returns the results stored last under each rank: the final workers'). A
    worker that failed or left in an earlier round does not fail a job that kolorun finished
    (exit status 0), as under horovod.run."""
    done = []  # (arrival, worker id, ok, value, host, size, rank, round)
    for wid, (arrival, body) in server.results.items():
        done.append((arrival, wid) + tuple(pickle.loads(body)))
    ok = [d for d in done if d[2]]
    if code == 0 and ok:
        last = max(d[7] for d in ok)
        final = {d[6]: d for d in ok if d[7] == last}
        size = max(d[5] for d in final.values())
        if sorted(final) == list(range(size)):
            return [final[r][3] for r in range(size)]
        text = ("kolo.run: the elastic job ended, but not every rank of its final round "
                "(round %d, %d ranks) sent a result: ranks %s did" % (
                    last, size, ",".join(map(str, sorted(final)))))
    else:
        job_failed = [l.split("job failed: ", 1)[1] for l in kolorun_lines
                      if "job failed: " in l]
        text = "kolo.run: elastic job failed: %s" % (
            job_failed[0] if job_failed else "kolorun exited with status %d" % code)
    failed = sorted(d for d in done if not d[2])
    if failed:  # the last worker that raised: the likeliest cause
        _, wid, _, value, host, _, rank, rnd = failed[-1]
        text += "\nworker %d (rank %d of round %d, host %s) raised:\n%s" % (
            wid, rank, rnd, host, value)
    elif kolorun_lines:
        text += "\n" + "\n".join(kolorun_lines[-10:])
    raise RuntimeError(text)


# ---- the rank's side ---------------------------------------------------------------------------
def _request(addr, port, key, op, rank, body=b""):
    header = _HEADER.pack(_MAGIC, op, rank, len(body))
    conn = socket.create_connection((addr, port), timeout=_SOCKET_TIMEOUT)
    try:
        conn.settimeout(_SOCKET_TIMEOUT)
        conn.sendall(header + body + _mac(key, header + body))
        if op == b"R":
            if _recv_exact(conn, 1) != b"K":
                raise ConnectionError("the driver did not acknowledge the result")
            return None
        (size,) = _LEN.unpack(_recv_exact(conn, _LEN.size))
        payload = _recv_exact(conn, size)
        if not hmac.compare_digest(_recv_exact(conn, _MAC_BYTES), _mac(key, b"F" + payload)):
            raise ConnectionError("the function's HMAC does not match KOLO_RUN_SECRET")
        return payload
    finally:
        conn.close()


def _worker():
    """A rank of kolo.run(hosts=...): fetch the function, run it, send the outcome back."""
    from kolo.runner import _call, _pickler, _shutdown
    cloudpickle = _pickler()
    rank = int(os.environ["KOLO_RANK"])
    size = int(os.environ.get("KOLO_SIZE", "0"))
    # An elastic worker's rank comes with its round (kolo.elastic sets KOLO_RANK, KOLO_SIZE and
    # KOLO_RENDEZVOUS_ROUND at init): its results are filed under its fixed worker id.
    elastic = os.environ.get("KOLO_RUN_ELASTIC") == "1"
    wid = int(os.environ.get("KOLO_ELASTIC_WORKER_ID", rank)) if elastic else rank
    host = os.environ.get("KOLO_HOSTNAME") or socket.gethostname()
    addr, port = os.environ["KOLO_RENDEZVOUS_ADDR"], int(os.environ["KOLO_RUN_PORT"])
    key = bytes.fromhex(os.environ.pop("KOLO_RUN_SECRET"))
    try:
        payload = _request(addr, port, key, b"F", rank)
    except OSError as e:  # kolorun reports the exit; this says why
        print("kolo.run: rank %d (host %s) cannot fetch the function from the driver at %s:%d: "
              "%s" % (rank, host, addr, port, e), file=sys.stderr)
        return 1
    try:
        func, args, kwargs = pickle.loads(payload)
        ok, value = _call(func, args, kwargs)
    except BaseException:  # noqa: B902 - a function that cannot be loaded here is a failure too
        ok, value = False, "rank %d (host %s): cannot load the function:\n%s" % (
            rank, host, traceback.format_exc())
    if elastic:
        rank = int(os.environ.get("KOLO_RANK", rank))
        size = int(os.environ.get("KOLO_SIZE", size))
    rnd = int(os.environ.get("KOLO_RENDEZVOUS_ROUND") or -1) if elastic else 0
    try:
        body = cloudpickle.dumps((ok, value, host, size, rank, rnd))
    except Exception:  # an unpicklable return value
        ok = False
        body = cloudpickle.dumps((False, "rank %d: cannot pickle the result:\n%s"
                                  % (rank, traceback.format_exc()), host, size, rank, rnd))
    deadline = time.monotonic() + 30
    while True:
        try:
            _request(addr, port, key, b"R", wid, body)
            break
        except OSError as e:
            if time.monotonic() > deadline:
                print("kolo.run: rank %d cannot send its result to %s:%d: %s"
                      % (rank, addr, port, e), file=sys.stderr)
                ok = False
                break
            time.sleep(0.5)
    _shutdown(rank)
    return 0 if ok else 1
