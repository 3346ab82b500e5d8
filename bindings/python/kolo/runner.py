# SPDX-License-Identifier: Apache-2.0
"""kolo.run and KoloRunner: run a Python function as the ranks of a kolo job.

kolo.run(func, args, kwargs, num_proc, ..., hosts=...) is horovod.run, with its arguments (in
its order, np/min_np/max_np included): `func`, `args` and `kwargs` are pickled with
cloudpickle, every rank unpickles and calls func(*args, **kwargs) with KOLO_RANK/KOLO_SIZE/...
set, so the function just calls kolo.init() (or hvd.init()). The result is the list of return
values in rank order; when a rank raises (or dies), kolo.run raises RuntimeError naming the
first failing rank, its host, and its traceback.

Two ways to start the ranks:
  - local (no `hosts`, or hosts="localhost:N" with np=N; "localhost" alone is one slot, as
    for horovod.run, and np beyond a host list's slots is a ValueError): np copies of this
    interpreter, with a file-store rendezvous in a private temporary folder; the function and
    the results travel through files there. The ranks get the variables kolorun gives its
    ranks (KOLO_RANK, ..., KOLO_HOSTNAME, their HOROVOD_* names, HOROVOD_CPU_OPERATIONS,
    KOLO_START_TIMEOUT, PYTHONUNBUFFERED=1 unless set: _place_environment), so a function sees
    the same environment both ways, but for the rendezvous's own variables. If a rank fails,
    the others get the failure grace window to notice and exit by themselves (kolorun's:
    KOLO_LAUNCHER_FAILURE_GRACE_SECONDS, default 10 s; the runtime aborts their pending ops,
    bounded by KOLO_TIMEOUT_SECONDS) and are then terminated;
  - hosts ("a:2,b:2", or hostfile=): kolorun starts the ranks (remote ones over ssh) and
    supervises them; the function and the results travel through a small authenticated TCP
    server of the calling process (kolo/_run_hosts.py describes it). Elastic jobs
    (min_num_proc or host_discovery_script, as horovod.run: max_num_proc alone leaves the job
    static) always run this way, on "localhost:num_proc" without hosts (horovod.run's
    default), with kolorun's elastic mode: the result is then the list of the final round's
    workers' return values, by rank.
Both ways remove the caller's own rank variables (KOLO_RANK, KOLO_ELASTIC, ...: kolo.run called
from a rank of another job) before they set the job's (_CALLER_PLACE).

Stopping: while kolo.run waits in the main thread, a SIGTERM to the calling process stops the
ranks (SIGTERM to each rank's process group, SIGKILL after 5 s), removes the temporary folder,
restores the previous SIGTERM handler and delivers the signal again, so the process then ends
(or the previous handler runs) as SIGTERM would have made it; kolo.run raises RuntimeError when
it returns. When the calling process dies without stopping them (kill -9, the OOM killer), the
local ranks notice: each one holds the read end of a pipe (its "lifeline") whose write end only
the calling process holds, and a thread of the rank removes the temporary folder and kills the
rank's process group (the rank and everything it started: each rank runs in its own session)
with SIGKILL once the pipe reports end of file.
A process fork()ed from the caller (without exec) shares the write end and delays that. With
hosts, kolorun is tied to the caller instead: it runs with PR_SET_PDEATHSIG (SIGTERM), so the
kernel sends it SIGTERM when the caller dies, and kolorun stops its ranks (local and remote)
as on any SIGTERM; its orphan guard and remote watchers cover a kolorun killed harder
(_run_hosts.tied_to_caller).

Threading: run() blocks its calling thread until the job ends; the SIGTERM handler is only
installed when that is the main thread (elsewhere Python cannot), and not when SIGTERM is ignored.
Errors: ValueError for bad arguments, RuntimeError naming the failing rank, TimeoutError.

KoloRunner is sparkdl.HorovodRunner's interface: KoloRunner(np=-n).run(main, **kwargs) runs n
local processes, KoloRunner(np=n, hosts=...) runs n ranks on the hosts (the "workers"); both
return rank 0's result, as HorovodRunner does.
"""

import contextlib
import os
import pickle
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import warnings

_GRACE_SECONDS = 10.0  # kolorun's --failure-grace-seconds default


def _grace_seconds():
    """The failure grace window: KOLO_LAUNCHER_FAILURE_GRACE_SECONDS (then the HOROVOD_ name),
    else kolorun's default; a bad value is an error, as in kolorun."""
    for name in ("KOLO_LAUNCHER_FAILURE_GRACE_SECONDS", "HOROVOD_LAUNCHER_FAILURE_GRACE_SECONDS"):
        text = os.environ.get(name)
        if text is not None and text.strip():
            try:
                value = float(text)
            except ValueError:
                value = -1.0
            if not value >= 0:
                raise ValueError("%s=%r: expected a number of seconds >= 0" % (name, text))
            return value
    return _GRACE_SECONDS
# Not `python -m kolo.runner`: kolo/__init__ imports this module, and -m would run a 2nd copy.
_WORKER_MAIN = "import sys; from kolo.runner import _worker; sys.exit(_worker(sys.argv[1], " \
    "int(sys.argv[2]), int(sys.argv[3])))"
_STOP_GRACE = 5.0  # SIGTERM to SIGKILL when kolo.run stops ranks that are still running
_LOCAL_HOSTS = ("localhost", "127.0.0.1")
_VERBOSITIES = ("log_callback_only", "all")


def _pickler():
    try:
        import cloudpickle
    except ImportError as e:
        raise ImportError("kolo.run needs cloudpickle (Debian: apt install "
                          "python3-cloudpickle): %s" % e) from None
    return cloudpickle


def _package_root():
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _host_slots(hosts):
    """[(name, slots)] of a kolorun -H list ("a:2,b,[::1]:4"); an entry without a count has 1
    slot, as for kolorun and horovod.run. None when the list does not parse (kolorun then says
    why)."""
    parsed = []
    for entry in hosts.split(","):
        entry = entry.strip()
        if entry.startswith("["):
            name, _, rest = entry[1:].partition("]")
            if rest and not rest.startswith(":"):
                return None
            count = rest[1:]
        else:
            name, sep, count = entry.rpartition(":")
            if not sep:
                name, count = entry, ""
        if not name or (count and not count.isdigit()):
            return None
        parsed.append((name, int(count) if count else 1))
    return parsed


def _is_local(hosts, np):
    """True for no host list, or one that names only this machine with exactly np slots
    ("localhost" alone is 1 slot)."""
    if not hosts:
        return True
    parsed = _host_slots(hosts)
    return (parsed is not None and len(parsed) == 1 and parsed[0][0] in _LOCAL_HOSTS
            and np == parsed[0][1])


def _check_slots(hosts, np):
    """ValueError when np asks for more ranks than the -H list has slots (horovod.run's error;
    kolorun would refuse the job too)."""
    parsed = _host_slots(hosts) if hosts else None
    if parsed is None or np is None:
        return
    total = sum(slots for _, slots in parsed)
    if np > total:
        raise ValueError("kolo.run: requested more processes (%d) than there are available "
                         "slots (%d) in hosts=%r (a host without ':N' has 1 slot)"
                         % (np, total, hosts))


def _with_slots(hosts, slots):
    """hosts with `slots` given to every entry written without a count ("a,b:4" -> "a:2,b:4")."""
    if slots is None or not hosts:
        return hosts
    if isinstance(slots, bool) or not isinstance(slots, int) or slots < 1:
        raise ValueError("slots must be a positive int; got %r" % (slots,))
    entries = []
    for entry in hosts.split(","):
        entry = entry.strip()
        counted = entry.rpartition("]")[2].startswith(":") if entry.startswith("[") \
            else ":" in entry
        entries.append(entry if counted or not entry else "%s:%d" % (entry, slots))
    return ",".join(entries)


def _interfaces(value, name="network_interface"):
    """network_interfaces (or the deprecated network_interface) as kolorun's
    --network-interface text: horovod.run takes names (["eth0", "eth1"], network_interfaces)
    or a comma-separated string ("eth0,eth1", network_interface) and keeps them as its set of
    NICs; either argument takes either form here: a list in its order, a set sorted."""
    if value is None or isinstance(value, str):
        if isinstance(value, str) and not all(value.split(",")):
            raise ValueError("kolo.run: %s must be interface names, as 'eth0,eth1' or a list "
                             "of names; got %r" % (name, value))
        return value
    if isinstance(value, (set, frozenset)):
        value = sorted(value, key=str)
    if not isinstance(value, (list, tuple)) or not value or \
            not all(isinstance(v, str) and v for v in value):
        raise ValueError("kolo.run: %s must be interface names, as 'eth0,eth1' or a list of "
                         "names; got %r" % (name, value))
    return ",".join(value)


class _NotGiven:
    """The default of num_proc / np: 1 rank (with hosts too); None takes every slot."""

    def __repr__(self):
        return "1"


_NOT_GIVEN = _NotGiven()


def _alias(new, old, new_name, old_name, unset=None):
    """horovod.run's deprecated alias (np, min_np, max_np, network_interface) of an argument:
    a DeprecationWarning, as horovod.run gives; both names given must agree."""
    if old is unset:
        return new
    warnings.warn("%s is deprecated, use %s instead" % (old_name, new_name), DeprecationWarning)
    if new is not unset and new != old:
        raise ValueError("kolo.run: %s=%r and %s=%r disagree (%s is horovod.run's older name "
                         "of %s): give one of them" % (new_name, new, old_name, old, old_name,
                                                       new_name))
    return old


def _count(value, name, lowest=1):
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                              or value < lowest):
        raise ValueError("kolo.run: %s must be an int >= %d; got %r" % (name, lowest, value))
    return value


def _elastic_options(np, min_np, max_np, reset_limit, cooldown_range, discovery_script):
    """kolorun's elastic options for min/max_num_proc, reset_limit, cooldown_range and
    host_discovery_script, or None for a static job. As horovod.run (launch._is_elastic) and
    kolorun: the job is elastic when min_num_proc or host_discovery_script is given;
    max_num_proc alone is accepted and leaves the job static (num_proc ranks), as there;
    reset_limit and cooldown_range alone are a ValueError, never ignored."""
    _count(min_np, "min_num_proc")
    _count(max_np, "max_num_proc")
    _count(reset_limit, "reset_limit", lowest=0)
    if min_np is None and discovery_script is None:
        for value, name in ((reset_limit, "reset_limit"), (cooldown_range, "cooldown_range")):
            if value is not None:
                raise ValueError("kolo.run: %s is an elastic argument: give min_num_proc (or "
                                 "host_discovery_script) too, for an elastic job" % name)
        return None
    lowest = min_np if min_np is not None else np
    if lowest is None:
        raise ValueError("kolo.run: an elastic job needs num_proc or min_num_proc")
    if max_np is not None and max_np < lowest:
        raise ValueError("kolo.run: max_num_proc %d is less than %s %d" % (
            max_np, "min_num_proc" if min_np is not None else "num_proc", lowest))
    if np is not None and min_np is not None and np < min_np:
        raise ValueError("kolo.run: num_proc %d is less than min_num_proc %d" % (np, min_np))
    cooldown = None
    if cooldown_range is not None:
        try:
            lo, hi = (float(v) for v in cooldown_range)
        except (TypeError, ValueError):
            raise ValueError("kolo.run: cooldown_range must be (min seconds, max seconds); got "
                             "%r" % (cooldown_range,)) from None
        if not 1 <= lo <= hi <= 3600:  # horovod.run's bounds (HostState)
            raise ValueError("kolo.run: cooldown_range must be (min, max) seconds with "
                             "1 <= min <= max <= 3600, as in horovod.run; got %r"
                             % (cooldown_range,))
        cooldown = (lo, hi)
    return {"min_np": min_np, "max_np": max_np, "reset_limit": reset_limit,
            "cooldown_range": cooldown, "host_discovery_script": discovery_script}


def run(func, args=(), kwargs=None, num_proc=_NOT_GIVEN, min_num_proc=None, max_num_proc=None,
        slots=None, reset_limit=None, cooldown_range=None, hosts=None, hostfile=None,
        host_discovery_script=None, start_timeout=None, ssh_port=None, ssh_identity_file=None,
        disable_cache=None, output_filename=None, verbose=None, use_gloo=None, use_mpi=None,
        mpi_args=None, network_interface=None, network_interfaces=None, executable=None,
        np=_NOT_GIVEN, min_np=None, max_np=None, *, env=None, timeout=None):
    """Runs func(*args, **kwargs) on `num_proc` ranks; returns their results in rank order.

    horovod.run's arguments (Horovod 0.28), in its order, with its meaning; np, min_np, max_np
    and network_interface are its deprecated names of num_proc, min_num_proc, max_num_proc and
    network_interfaces: they warn (DeprecationWarning, as there) and, when both names of one
    argument are given, they must agree. kolo's own arguments are keyword-only: env, timeout.

    num_proc (np): the number of ranks, 1 by default; with hosts, None takes every slot.
    hosts: "host:slots,..." as kolorun -H (or hostfile: a kolorun --hostfile), ranks fill the
      hosts in order (an entry without ":N" has 1 slot; num_proc beyond the slots is a
      ValueError, as in horovod.run); without either (or with "localhost:N" and num_proc=N)
      the ranks run on this machine without kolorun, unless one of kolorun's options below is
      given, or the job is elastic.
    min_num_proc, max_num_proc, reset_limit, cooldown_range (elastic, horovod.run's meaning):
      min_num_proc (or host_discovery_script) makes the job elastic, as in horovod.run
      (max_num_proc alone does not: the job stays static, with num_proc ranks): kolorun runs
      it with --min-np (default: num_proc), --max-np, --reset-limit and
      --blacklist-cooldown-range on the hosts (default: "localhost:num_proc"), and waits for
      num_proc slots before it starts; the function uses kolo.elastic / kolo.torch.elastic
      (hvd.elastic.run) to survive changes. The result is the list of the return values of
      the workers of the final round, by their final rank. reset_limit or cooldown_range
      without an elastic job is a ValueError.
    host_discovery_script: kolorun's --host-discovery-script (instead of hosts/hostfile): an
      elastic job on the hosts it prints; slots is then its --slots-per-host.
    env: extra environment variables for the ranks (KOLO_* knobs, for instance).
    timeout: seconds before the whole job is stopped with TimeoutError (None: no limit of its
      own; a failing rank, one that lags the first rank's init by start_timeout, and the
      runtime's timeouts still end a broken job, but a function that never returns runs on).
    network_interfaces (or network_interface, "eth0,eth1"), ssh_port, ssh_identity_file,
      start_timeout, output_filename, verbose: kolorun's --network-interface, --ssh-port,
      --ssh-identity-file, --start-timeout, --output-filename and --verbose
      (network_interfaces: names, as ["eth0", "eth1"]; a set is sorted); output_filename also writes each rank's output, with its "[rank]<stdout>:"
      prefix, to DIR/rank.N/, as horovod.run); any of them but verbose makes even a local job
      run under kolorun.
    slots: the slot count of every `hosts` entry written without one ("a,b" with slots=2 is
      "a:2,b:2"), horovod.run's slots per host; no effect on entries with a count, on a
      hostfile's lines (each gives its slots=) or without hosts (np ranks on this machine).
    disable_cache: accepted, no effect (horovodrun caches its start-up checks; kolo has none).
    mpi_args: accepted, no effect: horovod.run passes them to mpirun with use_mpi=True only,
      and kolo.run starts Gloo jobs (use_mpi=True is a ValueError).
    use_mpi is accepted for horovod.run compatibility: kolo.run starts Gloo jobs only.
    """
    if not callable(func):
        raise ValueError("kolo.run needs a callable; got %r" % (func,))
    if hosts and hostfile:
        raise ValueError("kolo.run: give hosts or hostfile, not both")
    if host_discovery_script and (hosts or hostfile):
        raise ValueError("kolo.run: give host_discovery_script or hosts/hostfile, not both")
    np = _alias(num_proc, np, "num_proc", "np", unset=_NOT_GIVEN)
    min_num_proc = _alias(min_num_proc, min_np, "min_num_proc", "min_np")
    max_num_proc = _alias(max_num_proc, max_np, "max_num_proc", "max_np")
    network_interface = _alias(_interfaces(network_interfaces, "network_interfaces"),
                               _interfaces(network_interface, "network_interface"),
                               "network_interfaces", "network_interface")
    np_given = np is not _NOT_GIVEN
    if not np_given:
        np = 1
    if np is not None and (isinstance(np, bool) or not isinstance(np, int) or np < 1):
        raise ValueError("np must be a positive int; got %r" % (np,))
    if not np_given and min_num_proc is not None:
        np = None  # kolorun's -np defaults to --min-np
    elastic = _elastic_options(np, min_num_proc, max_num_proc, reset_limit, cooldown_range,
                               host_discovery_script)
    if elastic is not None and host_discovery_script:
        if slots is not None:
            elastic["slots_per_host"] = _count(slots, "slots")
    else:
        hosts = _with_slots(hosts, slots)
    if elastic is not None and not (hosts or hostfile or host_discovery_script):
        # horovod.run's default host list; only kolorun runs elastic jobs
        hosts = "localhost:%d" % (np or max_num_proc or min_num_proc)
    remote = elastic is not None or bool(hostfile) or not _is_local(hosts, np)
    if np is None and not remote:
        raise ValueError("np=None (every slot) needs hosts or a hostfile")
    if elastic is None:
        _check_slots(hosts, np)
    kolorun_options = (network_interface, ssh_port, ssh_identity_file, start_timeout,
                       output_filename)
    if not remote and any(o is not None for o in kolorun_options):
        remote, hosts = True, "localhost:%d" % np  # only kolorun knows what they mean
    if use_mpi:
        raise ValueError("kolo.run starts Gloo jobs; use kolorun (or mpirun) for MPI")
    if use_gloo is False:
        raise ValueError("kolo.run starts Gloo jobs; use_gloo=False is not supported")
    kwargs = dict(kwargs or {})
    cloudpickle = _pickler()
    base = _job_environment(env)
    python = executable or sys.executable
    if remote:
        from kolo import _run_hosts
        payload = cloudpickle.dumps((func, tuple(args), kwargs))
        options = {"network_interface": network_interface, "ssh_port": ssh_port,
                   "ssh_identity_file": ssh_identity_file, "start_timeout": start_timeout,
                   "output_filename": output_filename, "verbose": verbose,
                   "elastic": elastic}
        with _sigterm_stops_the_job():
            return _run_hosts.run_on_hosts(payload, np, hosts, hostfile, env, timeout, python,
                                           base, options)
    host = _host_slots(hosts)[0][0] if hosts else "localhost"  # horovod.run's default host
    with _sigterm_stops_the_job():
        return _run_local(cloudpickle, func, args, kwargs, np, base, timeout, verbose, python,
                          host)


class _Terminated(BaseException):
    """Raised in the main thread by the SIGTERM handler of _sigterm_stops_the_job."""


@contextlib.contextmanager
def _sigterm_stops_the_job():
    """While the job runs, SIGTERM raises _Terminated (so the job's `finally` stops the ranks and
    cleans up); afterwards the previous handler is back and the signal is delivered again. A
    no-op outside the main thread or when SIGTERM is ignored."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGTERM)
    if previous in (signal.SIG_IGN, None):
        yield
        return
    fired = []

    def on_sigterm(_signum, _frame):
        if not fired:  # a second SIGTERM must not interrupt the clean-up of the first
            fired.append(True)
            raise _Terminated()

    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield
    except _Terminated:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
    if fired:
        signal.raise_signal(signal.SIGTERM)  # the process ends here under the default action
        raise RuntimeError("kolo.run: stopped by SIGTERM (the ranks were stopped)")


# A rank's place and rendezvous that the calling process may have (kolo.run called from a
# rank of another job, or from a shell that exported them): never passed on, in either way of
# starting the ranks; each sets the job's own. KOLO_ELASTIC and friends would make a static
# job's ranks act as elastic workers.
_CALLER_PLACE = tuple(
    prefix + name for prefix in ("KOLO_", "HOROVOD_")
    for name in ("RANK", "SIZE", "LOCAL_RANK", "LOCAL_SIZE", "CROSS_RANK", "CROSS_SIZE",
                 "HOSTNAME", "CONTROLLER", "ELASTIC")) + (
    "KOLO_RENDEZVOUS_DIR", "KOLO_RENDEZVOUS_ADDR", "KOLO_RENDEZVOUS_PORT",
    "KOLO_RENDEZVOUS_ROUND", "HOROVOD_GLOO_RENDEZVOUS_ADDR", "HOROVOD_GLOO_RENDEZVOUS_PORT",
    "KOLO_ELASTIC_WORKER_ID")


def _job_environment(env):
    """This process's environment for the ranks: `env` on top, kolo found as here, without the
    caller's own place (_CALLER_PLACE)."""
    from kolo import _lib  # the ranks load the very library this process loaded
    base = dict(os.environ)
    base.update({k: str(v) for k, v in (env or {}).items()})
    base["KOLO_LIBRARY"] = os.path.abspath(_lib.path)
    for var in _CALLER_PLACE:
        base.pop(var, None)
    # The ranks see this process's import path, so functions that cloudpickle stores by
    # reference (those of importable modules) load there too.
    paths = [_package_root()] + [p for p in sys.path if p and os.path.isdir(p)]
    if base.get("PYTHONPATH"):
        paths.append(base["PYTHONPATH"])
    base["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    return base


def _place_environment(base, rank, size, host):
    """What a local rank gets on top of `base`: the variables kolorun gives a rank of a job on
    one host (bindings/launcher's gloo_run.GlooJob._rank_env, which this package may not import,
    scripts/check_layers.py), but for the rendezvous's (a file store here, KOLO_RENDEZVOUS_DIR).
    kolo.run(hosts=...) ranks get the same from kolorun."""
    env = {}
    place = {"RANK": rank, "SIZE": size, "LOCAL_RANK": rank, "LOCAL_SIZE": size,
             "CROSS_RANK": 0, "CROSS_SIZE": 1, "HOSTNAME": host, "CONTROLLER": "gloo"}
    for name, value in place.items():
        env["KOLO_" + name] = env["HOROVOD_" + name] = str(value)
    env["HOROVOD_CPU_OPERATIONS"] = "gloo"
    # kolorun's --start-timeout default, under both names, as kolorun passes it
    start = base.get("KOLO_START_TIMEOUT") or base.get("HOROVOD_START_TIMEOUT") or "120"
    env["KOLO_START_TIMEOUT"] = env["HOROVOD_START_TIMEOUT"] = start
    if "PYTHONUNBUFFERED" not in base:
        env["PYTHONUNBUFFERED"] = "1"  # as horovodrun: prints arrive line by line
    return env


def _run_local(cloudpickle, func, args, kwargs, np, base, timeout, verbose, python,
               host="localhost"):
    workdir = tempfile.mkdtemp(prefix="kolo-run-")
    procs = []
    lifeline_r, lifeline_w = os.pipe()  # see the module doc; both ends close-on-exec
    try:
        with open(os.path.join(workdir, "func.pkl"), "wb") as f:
            cloudpickle.dump((func, tuple(args), kwargs), f)
        rendezvous = os.path.join(workdir, "rendezvous")
        os.mkdir(rendezvous)
        base = dict(base, KOLO_RENDEZVOUS_DIR=rendezvous)
        for r in range(np):
            e = dict(base)
            e.update(_place_environment(base, r, np, host))
            if verbose:
                print("kolo.run: starting rank %d with %s" % (r, python), file=sys.stderr)
            procs.append(subprocess.Popen(
                [python, "-c", _WORKER_MAIN, workdir, str(r), str(lifeline_r)], env=e,
                pass_fds=(lifeline_r,), start_new_session=True))
        os.close(lifeline_r)
        lifeline_r = None
        codes, seen = _wait_all(procs, timeout)
        return _collect(workdir, codes, seen)
    finally:
        _stop(procs)
        for fd in (lifeline_r, lifeline_w):
            if fd is not None:
                os.close(fd)
        shutil.rmtree(workdir, ignore_errors=True)


def _exited(p):
    """Whether worker p exited, without reaping it: while it is not reaped, its pid (the id of
    its process group) cannot be taken by another process."""
    if p.returncode is not None:
        return True
    try:
        info = os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return info is not None and info.si_pid != 0


def _stop(procs):
    """Stops the workers not reaped yet, with what they started (each leads a process group):
    SIGTERM to their groups, SIGKILL after _STOP_GRACE seconds (at once to what a worker that
    exited left behind), then reaps them."""
    live = [p for p in procs if p.returncode is None]
    _signal_groups(live, signal.SIGTERM)
    deadline = time.monotonic() + _STOP_GRACE
    while not all(_exited(p) for p in live) and time.monotonic() < deadline:
        time.sleep(0.05)
    _signal_groups(live, signal.SIGKILL)
    for p in live:
        p.wait()


def _signal_groups(procs, sig):
    for p in procs:
        try:
            os.killpg(p.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _wait_all(procs, timeout):
    """Waits for every worker; after the first failure waits _grace_seconds() more, then
    terminates the rest. Returns the exit codes (negative for a terminated worker) and, for
    each worker that exited non-zero by itself, the wall-clock time it was seen exiting."""
    start = time.monotonic()
    grace = _grace_seconds()
    failed_at = None
    seen = {}
    while True:
        codes = [p.poll() for p in procs]
        for r, c in enumerate(codes):
            if c not in (None, 0):
                seen.setdefault(r, time.time())
        if all(c is not None for c in codes):
            return codes, seen
        now = time.monotonic()
        if failed_at is None and seen:
            failed_at = now
        expired = timeout is not None and now - start > timeout
        if expired or (failed_at is not None and now - failed_at > grace):
            _stop(procs)
            codes = [p.returncode for p in procs]
            if expired:
                raise TimeoutError("kolo.run: the job did not finish within %s s (exit codes "
                                   "%s)" % (timeout, codes))
            return codes, seen
        time.sleep(0.05)


def _collect(workdir, codes, seen):
    """The results by rank, or RuntimeError naming the rank that failed first."""
    results, errors = [], {}
    failed_when = dict(seen)  # rank -> when it failed (the time in its result when it has one)
    host = socket.gethostname()
    for r, code in enumerate(codes):
        path = os.path.join(workdir, "result.%d.pkl" % r)
        if not os.path.exists(path):
            errors[r] = "rank %d exited with code %s without a result" % (r, code)
            results.append(None)
            continue
        with open(path, "rb") as f:
            ok, value, when = pickle.load(f)
        if ok:
            results.append(value)
        else:
            errors[r] = value
            failed_when[r] = when
            results.append(None)
    if errors:
        # The rank that failed first is the cause; the others usually lost it as a peer. A rank
        # that raised notes when, before it shuts down (which fails the others' ops), so these
        # times order the failures causally; exit times order the ranks that died silently.
        first = min(errors, key=lambda r: (failed_when.get(r, float("inf")), r))
        raise RuntimeError("kolo.run: rank %d (host %s) failed (%d of %d ranks failed):\n%s"
                           % (first, host, len(errors), len(codes), errors[first]))
    return results


def _call(func, args, kwargs):
    """(True, func's result) or (False, the traceback text)."""
    try:
        return True, func(*args, **kwargs)
    except BaseException:  # noqa: B902 - report everything, including SystemExit
        return False, traceback.format_exc()


def _shutdown(rank):
    try:
        from kolo import basics
        basics.shutdown()
    except Exception as e:  # the result is already safe; report and move on
        print("kolo.run: rank %d: shutdown failed: %s" % (rank, e), file=sys.stderr)


def _watch_lifeline(fd, workdir):
    """In a rank: removes the job's temporary folder and kills the rank's process group once the
    lifeline pipe reports end of file, i.e. once the process that ran kolo.run is gone."""
    os.set_inheritable(fd, False)

    def watch():
        while True:
            try:
                if not os.read(fd, 64):
                    break
            except InterruptedError:
                continue
            except OSError:
                return
        shutil.rmtree(workdir, ignore_errors=True)
        os.killpg(os.getpgid(0), signal.SIGKILL)

    threading.Thread(target=watch, name="kolo-run-lifeline", daemon=True).start()


def _worker(workdir, rank, lifeline=None):
    if lifeline is not None:
        _watch_lifeline(lifeline, workdir)
    cloudpickle = _pickler()
    with open(os.path.join(workdir, "func.pkl"), "rb") as f:
        func, args, kwargs = pickle.load(f)
    outcome = _call(func, args, kwargs) + (time.time(),)
    code = 0 if outcome[0] else 1
    tmp = os.path.join(workdir, "result.%d.tmp" % rank)
    try:
        with open(tmp, "wb") as f:
            cloudpickle.dump(outcome, f)
    except Exception:  # an unpicklable return value
        with open(tmp, "wb") as f:
            cloudpickle.dump((False, "rank %d: cannot pickle the result:\n%s"
                              % (rank, traceback.format_exc()), time.time()), f)
        code = 1
    os.replace(tmp, os.path.join(workdir, "result.%d.pkl" % rank))
    _shutdown(rank)
    return code


class KoloRunner:
    """sparkdl.HorovodRunner's interface: KoloRunner(np=...).run(main, **kwargs).

    np < 0: -np processes on this machine (HorovodRunner's driver-local mode).
    np > 0: np ranks on the cluster's hosts, the "workers": `hosts` ("a:4,b:4", kolorun -H),
      else `hostfile` (kolorun --hostfile), else $KOLO_RUNNER_HOSTS (-H syntax). Without any
      of them ValueError: kolo has no cluster manager to ask, and running on this machine
      when a cluster was meant would hide the mistake (use a negative np for that).
    np == 0: every slot of those hosts (HorovodRunner: "all task slots"; deprecated there).
    driver_log_verbosity: HorovodRunner's "log_callback_only" or "all"; accepted for
      compatibility. kolo has no log callback: the ranks' output always reaches this
      process's stdout/stderr ("[rank]<stdout>:" prefixed on hosts, as kolorun prints it).
    run_options: further kolo.run options (env, timeout, network_interface, ssh_port,
      ssh_identity_file, start_timeout, output_filename, verbose, executable).
    """

    def __init__(self, *, np, driver_log_verbosity="log_callback_only", hosts=None,
                 hostfile=None, **run_options):
        if isinstance(np, bool) or not isinstance(np, int):
            raise ValueError("KoloRunner: np must be an int; got %r" % (np,))
        if driver_log_verbosity not in _VERBOSITIES:
            raise ValueError("KoloRunner: driver_log_verbosity must be one of %s; got %r"
                             % (", ".join(_VERBOSITIES), driver_log_verbosity))
        self.num_processor = np
        self.driver_log_verbosity = driver_log_verbosity
        self.hosts, self.hostfile = None, None
        if np >= 0:
            self.hostfile = hostfile
            self.hosts = hosts or (None if hostfile else os.environ.get("KOLO_RUNNER_HOSTS"))
            if not self.hosts and not self.hostfile:
                raise ValueError(
                    "KoloRunner(np=%d) runs on the cluster's hosts: pass hosts='host1:slots,"
                    "host2:slots' or hostfile=, or set KOLO_RUNNER_HOSTS; KoloRunner(np=-%d) "
                    "runs %d processes on this machine" % (np, max(np, 1), max(np, 1)))
        elif hosts or hostfile:
            raise ValueError("KoloRunner(np=%d) runs on this machine; hosts need np > 0" % np)
        self._options = run_options

    def run(self, main, **kwargs):
        """Runs main(**kwargs) on every rank; returns rank 0's return value."""
        if self.num_processor < 0:
            results = run(main, kwargs=kwargs, num_proc=-self.num_processor, **self._options)
        else:
            results = run(main, kwargs=kwargs, num_proc=self.num_processor or None,
                          hosts=self.hosts,
                          hostfile=self.hostfile, **self._options)
        return results[0]
