"""kolo.run: run a Python function on N local ranks and return every rank's result.

Like horovod.run (and HorovodRunner's local mode): `func`, `args` and `kwargs` are pickled
with cloudpickle, N copies of this interpreter each
unpickle and call func(*args, **kwargs) with KOLO_RANK/KOLO_SIZE/... set and a file-store
rendezvous in a private temporary folder, so the function just calls kolo.init() (or
hvd.init()). The result is the list of return values in rank order. If a rank raises, the
others get KOLO_TIMEOUT_SECONDS-bounded time to notice (the runtime aborts their pending ops)
and are then terminated; kolo.run raises RuntimeError carrying the first failing rank's
traceback. Only local ranks are supported (use kolorun for several hosts).
"""

import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import time
import traceback

_GRACE_SECONDS = 30.0
# Not `python -m kolo.runner`: kolo/__init__ imports this module, and -m would run a 2nd copy.
_WORKER_MAIN = "import sys; from kolo.runner import _worker; sys.exit(_worker(sys.argv[1], " \
    "int(sys.argv[2])))"


def _pickler():
    try:
        import cloudpickle
    except ImportError as e:
        raise ImportError("kolo.run needs cloudpickle (Debian: apt install "
                          "python3-cloudpickle): %s" % e) from None
    return cloudpickle


def _package_root():
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(func, args=(), kwargs=None, np=1, env=None, hosts=None, use_gloo=None, use_mpi=None,
        timeout=None, verbose=None, executable=None):
    """Runs func(*args, **kwargs) on `np` local processes; returns their results by rank.

    env: extra environment variables for the workers (KOLO_* knobs, for instance).
    timeout: seconds before the whole job is terminated (None: no limit of its own; the
    runtime's timeouts still bound a job whose ranks wait for a dead peer).
    hosts and use_mpi are accepted for horovod.run compatibility: only local Gloo jobs run here.
    """
    if not callable(func):
        raise ValueError("kolo.run needs a callable; got %r" % (func,))
    if isinstance(np, bool) or not isinstance(np, int) or np < 1:
        raise ValueError("np must be a positive int; got %r" % (np,))
    if hosts not in (None, "", "localhost", "localhost:%d" % np, "127.0.0.1:%d" % np):
        raise ValueError("kolo.run runs local ranks only; use kolorun -H for hosts=%r" % hosts)
    if use_mpi:
        raise ValueError("kolo.run starts Gloo jobs; use kolorun (or mpirun) for MPI")
    if use_gloo is False:
        raise ValueError("kolo.run starts Gloo jobs; use_gloo=False is not supported")
    kwargs = dict(kwargs or {})
    cloudpickle = _pickler()
    from kolo import _lib  # the workers load the very library this process loaded

    workdir = tempfile.mkdtemp(prefix="kolo-run-")
    procs = []
    try:
        with open(os.path.join(workdir, "func.pkl"), "wb") as f:
            cloudpickle.dump((func, tuple(args), kwargs), f)
        rendezvous = os.path.join(workdir, "rendezvous")
        os.mkdir(rendezvous)
        base = dict(os.environ)
        base.update({k: str(v) for k, v in (env or {}).items()})
        base.update({
            "KOLO_CONTROLLER": "gloo", "KOLO_SIZE": str(np), "KOLO_LOCAL_SIZE": str(np),
            "KOLO_CROSS_RANK": "0", "KOLO_CROSS_SIZE": "1", "KOLO_RENDEZVOUS_DIR": rendezvous,
            "KOLO_LIBRARY": os.path.abspath(_lib.path),
        })
        for var in ("KOLO_RENDEZVOUS_ADDR", "KOLO_RENDEZVOUS_PORT",
                    "HOROVOD_GLOO_RENDEZVOUS_ADDR", "HOROVOD_GLOO_RENDEZVOUS_PORT"):
            base.pop(var, None)
        # The workers see this process's import path, so functions that cloudpickle stores by
        # reference (those of importable modules) load there too.
        paths = [_package_root()] + [p for p in sys.path if p and os.path.isdir(p)]
        if base.get("PYTHONPATH"):
            paths.append(base["PYTHONPATH"])
        base["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
        python = executable or sys.executable
        for r in range(np):
            e = dict(base, KOLO_RANK=str(r), KOLO_LOCAL_RANK=str(r))
            if verbose:
                print("kolo.run: starting rank %d with %s" % (r, python), file=sys.stderr)
            procs.append(subprocess.Popen([python, "-c", _WORKER_MAIN, workdir, str(r)],
                                          env=e))
        codes = _wait_all(procs, timeout)
        return _collect(workdir, codes)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        shutil.rmtree(workdir, ignore_errors=True)


def _wait_all(procs, timeout):
    """Waits for every worker; after the first failure waits _GRACE_SECONDS more, then
    terminates the rest. Returns the exit codes (None for a terminated worker)."""
    start = time.monotonic()
    failed_at = None
    while True:
        codes = [p.poll() for p in procs]
        if all(c is not None for c in codes):
            return codes
        now = time.monotonic()
        if failed_at is None and any(c not in (None, 0) for c in codes):
            failed_at = now
        expired = timeout is not None and now - start > timeout
        if expired or (failed_at is not None and now - failed_at > _GRACE_SECONDS):
            for p in procs:
                if p.poll() is None:
                    p.terminate()
            for p in procs:
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
            codes = [p.returncode for p in procs]
            if expired:
                raise TimeoutError("kolo.run: the job did not finish within %s s (exit codes "
                                   "%s)" % (timeout, codes))
            return codes
        time.sleep(0.05)


def _collect(workdir, codes):
    results, errors = [], []
    for r, code in enumerate(codes):
        path = os.path.join(workdir, "result.%d.pkl" % r)
        if not os.path.exists(path):
            errors.append((r, "rank %d exited with code %s without a result" % (r, code)))
            results.append(None)
            continue
        with open(path, "rb") as f:
            ok, value = pickle.load(f)
        if ok:
            results.append(value)
        else:
            errors.append((r, value))
            results.append(None)
    if errors:
        first = errors[0]
        raise RuntimeError("kolo.run: %d of %d ranks failed; rank %d:\n%s"
                           % (len(errors), len(codes), first[0], first[1]))
    return results


def _worker(workdir, rank):
    cloudpickle = _pickler()
    with open(os.path.join(workdir, "func.pkl"), "rb") as f:
        func, args, kwargs = pickle.load(f)
    try:
        outcome = (True, func(*args, **kwargs))
        code = 0
    except BaseException:  # noqa: B902 - report everything, including SystemExit
        outcome = (False, traceback.format_exc())
        code = 1
    tmp = os.path.join(workdir, "result.%d.tmp" % rank)
    try:
        with open(tmp, "wb") as f:
            cloudpickle.dump(outcome, f)
    except Exception:  # an unpicklable return value
        with open(tmp, "wb") as f:
            cloudpickle.dump((False, "rank %d: cannot pickle the result:\n%s"
                              % (rank, traceback.format_exc())), f)
        code = 1
    os.replace(tmp, os.path.join(workdir, "result.%d.pkl" % rank))
    try:
        from kolo import basics
        basics.shutdown()
    except Exception as e:  # the result is already safe; report and move on
        print("kolo.run: rank %d: shutdown failed: %s" % (rank, e), file=sys.stderr)
    return code
