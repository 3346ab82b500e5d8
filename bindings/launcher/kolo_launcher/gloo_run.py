# SPDX-License-Identifier: Apache-2.0
"""Gloo mode: serve the rendezvous store, start every rank, supervise the job, stop it cleanly.

Life of a job (GlooJob.run):
  1. place the ranks (topology.assign) and decide which hosts are this machine;
  2. serve the store on a free port: on --network-interface's address, else on 127.0.0.1 when
     every rank is local, else on 0.0.0.0; each rank is told the address it can reach;
  3. start local ranks directly and remote ones through ssh (ssh.remote_argv), each in its own
     process group, with its KOLO_* environment, bound to their cores (binding.plan, planned
     before anything starts, for a remote host from the CPUs and topology its shell reports,
     applied there by taskset: an explicit binding that does not fit fails the job);
     forward their output (and with --output-filename copy it to DIR/rank.N/, output.py); rank
     0, when it runs here, reads kolorun's stdin (workers.py says when), the others /dev/null;
  4. supervise, every 50 ms: a rank that exits non-zero or on a signal fails the job; a rank
     still running without its "host/<rank>" store key --start-timeout after the first rank
     published its key fails it (before any rank connected there is no limit: work before
     init, or a command that never calls it, runs as long as it likes); a signal to kolorun
     stops it;
  5. after a rank failed, the failure grace window (--failure-grace-seconds): the survivors'
     runtime has lost a peer and fails their collectives (KoloInternalError naming the rank),
     so they can log, save a checkpoint and exit by themselves; kolorun waits for that, up to
     the window (cut short by a signal to kolorun). No window after a start timeout or a
     signal: the ranks then have nothing to notice;
  6. stop: the signal (TERM on failure) to every rank's group still alive, SIGKILL to whatever
     is left after the kill grace (remote ranks get the remote watcher's grace first), reap,
     report.
Signals: SIGINT, SIGTERM and SIGHUP to kolorun are passed on to every rank; SIGQUIT is handled
as SIGTERM (the ranks get SIGTERM: a SIGQUIT would make them dump core). A kolorun killed by
SIGKILL cannot stop anything: its orphan guard (orphan_guard.py) stops the local ranks' groups,
the remote watchers (ssh.py) the remote ones.
Threading: GlooJob belongs to kolorun's main thread (the output pump and the store server run
their own threads). Blocking: every wait is bounded (start timeout once a rank connected,
grace windows, kill grace) except the job itself: kolorun waits for its ranks to exit.
Errors: a problem found before any rank started raises LaunchError; later ones end the job
with a Failure (its reason printed, its exit status returned).
"""

import os
import shlex
import signal
import subprocess
import threading
import time

from . import binding as bindlib
from . import hosts as hostlib
from .args import horovod_knob_environment
from . import ssh
from .orphan_guard import OrphanGuard
from .output import OutputPump
from .store_server import StoreServer
from .topology import assign, used_hosts
from .workers import Worker, launcher_stdin_usable, live_process_groups

POLL_SECONDS = 0.05
DEFAULT_GRACE_SECONDS = 5.0
PROBE_SECONDS = 30  # a remote host's answer about its CPUs (ssh login included)


def kill_grace(environ):
    """Seconds between SIGTERM and SIGKILL when workers are stopped
    (KOLO_LAUNCHER_KILL_GRACE_SECONDS; at least 0.1; DEFAULT_GRACE_SECONDS when unset or bad)."""
    grace = environ.get("KOLO_LAUNCHER_KILL_GRACE_SECONDS", "")
    try:
        return max(0.1, float(grace)) if grace else DEFAULT_GRACE_SECONDS
    except ValueError:
        return DEFAULT_GRACE_SECONDS
REMOTE_EXTRA_GRACE = 3.0  # local ssh clients wait for the remote watcher's own grace first


def forwarded_signal(sig):
    """The signal the ranks get when kolorun receives sig: SIGQUIT becomes SIGTERM."""
    return signal.SIGTERM if sig == signal.SIGQUIT else sig


def stop_message(sig, who):
    """What kolorun says when signal sig stops the job."""
    name, passed = signal.Signals(sig).name, signal.Signals(forwarded_signal(sig)).name
    if name == passed:
        return "received %s; passing it to every %s" % (name, who)
    return "received %s; sending %s to every %s" % (name, passed, who)


class LaunchError(Exception):
    """A problem found before any rank started (bad interface, unreachable host address)."""


def _truthy(value):
    return str(value).strip().lower() in ("1", "true", "yes", "on")


def _seconds(value):
    return ("%d" % value) if float(value).is_integer() else ("%g" % value)


class GlooJob:
    def __init__(self, opts, environ, console):
        self.opts = opts
        self.environ = dict(environ)
        self.console = console
        self.slots = assign(opts.hosts, opts.np)
        self.workers = []
        self.server = None
        self.pump = None
        self._signals = []
        self._old_handlers = {}
        self.grace = kill_grace(self.environ)
        self.template = self.environ.get("KOLO_LAUNCHER_REMOTE_SHELL") or None
        force_remote = _truthy(self.environ.get("KOLO_LAUNCHER_FORCE_REMOTE", ""))
        names, addrs = hostlib.local_names(), hostlib.local_addresses()
        self.local = {h: (not force_remote and hostlib.is_local(h, names, addrs))
                      for h, _ in used_hosts(self.slots)}
        self.cpus = {}  # rank -> the CPUs it is bound to (when binding)
        self.binding_notes = []  # [(host or None for this machine, sentence, ranks)]
        self.guard = None  # the OrphanGuard of the local ranks, while the job runs

    def _plan_binding(self):
        """Fills self.cpus (rank -> CPUs) and self.binding_notes ([(host or None, sentence,
        ranks)]) for every host of the job: this machine's ranks from kolorun's own affinity,
        a remote host's from what PROBE_SCRIPT reports there (its ranks then start under
        taskset). LaunchError when an explicit --binding-args cannot be given (as mpirun)."""
        spec = self.opts.binding
        local = [(s.rank, s.host) for s in self.slots if self.local[s.host]]
        remote = [h for h, _ in used_hosts(self.slots) if not self.local[h]]
        # Traffic crosses TCP when some rank is on another host or shared memory is off in the
        # ranks' environment (kolorun's own, with the -x variables over it).
        tcp = bool(remote) or self._shm_off()
        if local:
            available = bindlib.available_cpus()
            if available is None:
                self._note(None, "ranks are not bound to cores (no CPU affinity on this "
                           "platform)", local)
            else:
                self._plan_host(None, local, available, bindlib.SYSFS_CPU, tcp)
        if not remote or spec.bind == "none":
            return
        for host, probe in self._probe_hosts(remote).items():
            ranks = [(s.rank, s.host) for s in self.slots if s.host == host]
            if isinstance(probe, str):
                if spec.explicit:
                    raise LaunchError("--binding-args: cannot bind the ranks on host %s: %s"
                                      % (host, probe))
                self._note(host, "ranks are not bound to cores (%s)" % probe, ranks)
                continue
            cpus, topology, taskset = probe
            if not taskset:
                self._note(host, "ranks are not bound to cores (no taskset there to bind "
                           "them: it is in util-linux)", ranks)
                continue
            self._plan_host(host, ranks, cpus, topology, tcp)

    def _plan_host(self, host, ranks, cpus, sysfs, tcp):
        """Plans one host's ranks [(rank, host)] on its CPUs; see _plan_binding."""
        spec = self.opts.binding
        try:
            if spec.rankfile is not None:
                planned, note = bindlib.rankfile_plan(spec, ranks, cpus, self._host_matches,
                                                      sysfs)
                self.cpus.update(planned)
                self._note(host, note, ranks)
                return
            blocks, note = bindlib.plan(spec, len(ranks), cpus, sysfs, tcp=tcp)
        except bindlib.PlanError as e:
            raise LaunchError(str(e) if host is None else "host %s: %s" % (host, e)) from None
        if blocks is not None:
            self.cpus.update(zip([rank for rank, _ in ranks], blocks))
        self._note(host, note, ranks)

    def _note(self, host, sentence, ranks):
        self.binding_notes.append((host, sentence, [rank for rank, _ in ranks]))

    def _probe_hosts(self, hosts):
        """{host: (CPUs, topology, has taskset) or the reason it could not be read}, asked of
        all hosts at once through the ranks' remote shell (a few ms each over ssh)."""
        answers = {}

        def ask(host):
            argv = ssh.remote_shell_prefix(
                host, self.opts.ssh_port, self.opts.ssh_identity, self.template,
                self.environ.get("KOLO_SSH_OPTIONS", "")) + [
                    "sh -c " + shlex.quote(bindlib.PROBE_SCRIPT)]
            try:
                r = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True, timeout=PROBE_SECONDS)
                if r.returncode != 0:
                    raise ValueError("its shell exited with status %d: %s"
                                     % (r.returncode, r.stderr.strip()[-200:]))
                answers[host] = bindlib.parse_probe(r.stdout)
            except subprocess.TimeoutExpired:
                answers[host] = "no answer about its CPUs within %d s" % PROBE_SECONDS
            except (OSError, ValueError) as e:
                answers[host] = "cannot read its CPUs: %s" % e

        threads = [threading.Thread(target=ask, args=(h,), daemon=True) for h in hosts]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return {h: answers.get(h, "cannot read its CPUs") for h in hosts}

    def _shm_off(self):
        """Whether the ranks run with shared memory off: the first non-empty of KOLO_SHM and
        HOROVOD_SHM in their environment (as the runtime reads them) is "off"."""
        env = dict(self.environ)
        env.update(self.opts.extra_env)
        for name in ("KOLO_SHM", "HOROVOD_SHM"):
            if env.get(name):
                return env[name].lower() == "off"
        return False

    def _host_matches(self, host, named):
        """Whether a rankfile's host `named` is `host`: the same name, "+nK" for the K-th host
        of the job, or two names of this machine."""
        if named == host:
            return True
        hosts = [h for h, _ in used_hosts(self.slots)]
        if named.startswith("+n") and named[2:].isdigit():
            k = int(named[2:])
            return k < len(hosts) and hosts[k] == host
        return self.local.get(host, False) and hostlib.is_local(
            named, hostlib.local_names(), hostlib.local_addresses())

    # ---- setup -----------------------------------------------------------------------------
    def _addresses(self):
        """(bind address, {host: address its ranks use to reach the store})."""
        # Gloo, and so the store's address, uses the first of the interfaces given.
        iface = (self.opts.network_interface or "").split(",")[0]
        if iface:
            addr = hostlib.interface_ipv4(iface)
            if not addr:
                raise LaunchError("--network-interface %s: no such interface, or it has no IPv4 "
                                  "address (interfaces here: %s)"
                                  % (iface, ", ".join(hostlib.interface_names()) or "none"))
            return addr, {h: addr for h in self.local}
        if all(self.local.values()):
            return "127.0.0.1", {h: "127.0.0.1" for h in self.local}
        reach = {}
        for host, local in self.local.items():
            addr = "127.0.0.1" if local else (hostlib.route_address(host)
                                              or hostlib.first_external_ipv4())
            if not addr:
                raise LaunchError("cannot tell which address host %s should use to reach this "
                                  "machine; name one with --network-interface" % host)
            reach[host] = addr
        return "0.0.0.0", reach

    def _rank_env(self, slot, addr, place=None):
        """The variables a rank gets on top of kolorun's environment. slot: the rank kolorun
        starts; place: where it runs in the job (its rank, size, local and cross ranks, host),
        slot itself unless given (an elastic worker's place in the round it starts for)."""
        slot = slot if place is None else place
        env = dict(self.opts.extra_env)
        if self.opts.network_interface and "NCCL_SOCKET_IFNAME" not in self.environ:
            env["NCCL_SOCKET_IFNAME"] = self.opts.network_interface
        if "PYTHONUNBUFFERED" not in self.environ and "PYTHONUNBUFFERED" not in env:
            # As horovodrun: a Python rank's prints reach kolorun line by line, and the last
            # ones before a failure are not lost in a buffer when the rank is stopped.
            env["PYTHONUNBUFFERED"] = "1"
        env.update(self.opts.knob_env)
        env.update(horovod_knob_environment(self.opts.knob_env))
        place = {
            "RANK": str(slot.rank), "SIZE": str(slot.size),
            "LOCAL_RANK": str(slot.local_rank), "LOCAL_SIZE": str(slot.local_size),
            "CROSS_RANK": str(slot.cross_rank), "CROSS_SIZE": str(slot.cross_size),
            "HOSTNAME": slot.host, "CONTROLLER": "gloo",
        }
        env.update(("KOLO_" + k, v) for k, v in place.items())
        env.update({"KOLO_RENDEZVOUS_ADDR": addr, "KOLO_RENDEZVOUS_PORT": str(self.server.port)})
        # horovodrun's names for the same place (scripts read HOROVOD_RANK and friends); the
        # runtime reads the KOLO_* ones first.
        env.update(("HOROVOD_" + k, v) for k, v in place.items())
        env.update({"HOROVOD_GLOO_RENDEZVOUS_ADDR": addr,
                    "HOROVOD_GLOO_RENDEZVOUS_PORT": str(self.server.port),
                    "HOROVOD_CPU_OPERATIONS": "gloo"})
        return env

    def _output_files(self, slot):
        """With --output-filename: (stdout, stderr) files of the rank in DIR/rank.N/, which the
        output pump fills with what it prints (output.py); else (None, None). OSError."""
        if not self.opts.output_dir:
            return None, None
        # horovodrun pads the rank with zeros to the width of the largest one, so that the
        # folders sort in rank order (rank.0 .. rank.9, then rank.00 .. rank.10 ..).
        width = len(str(max(slot.size - 1, 0)))
        d = os.path.join(self.opts.output_dir, "rank.%0*d" % (width, slot.rank))
        os.makedirs(d, exist_ok=True)
        out = open(os.path.join(d, "stdout"), "wb")
        try:
            return out, open(os.path.join(d, "stderr"), "wb")
        except OSError:
            out.close()
            raise

    def _make_worker(self, slot, addr, place=None, stdin=False):
        """The rank's Worker, not started yet; its output files in w.files. OSError."""
        rank_env = self._rank_env(slot, addr, place)
        remote = not self.local[slot.host]
        files = self._output_files(slot)
        if remote:
            env = ssh.remote_environment(self.environ, rank_env, set(self.opts.extra_env))
            command = self.opts.command
            if slot.rank in self.cpus:
                command = bindlib.bound_command(self.cpus[slot.rank], command)
            argv = ssh.remote_argv(
                slot.host, env, command, self.grace, port=self.opts.ssh_port,
                identity=self.opts.ssh_identity, template=self.template,
                extra_options=self.environ.get("KOLO_SSH_OPTIONS", ""))
            if self.opts.verbose:
                self.console.message("rank %d on %s: %s" % (
                    slot.rank, slot.host, ssh.describe(argv, self.opts.command, len(env))))
            local_env = dict(self.environ)
        else:
            argv = list(self.opts.command)
            local_env = dict(self.environ)
            local_env.update(rank_env)
        w = Worker(slot, argv, local_env, remote, subprocess.PIPE, subprocess.PIPE,
                   cpus=None if remote else self.cpus.get(slot.rank),
                   guard=None if remote else self.guard,
                   stdin=stdin and not remote)
        w.files = list(files)
        return w

    def _start_worker_process(self, w, label):
        """Starts w and hands its pipes (and output files) to the pump; a Failure when it cannot
        be started (its files closed), else None. label: "rank 3" / "worker 3"."""
        try:
            w.start()
        except OSError as e:
            for f in w.files:
                if f is not None:
                    f.close()
            return Failure("cannot start %s on host %s: %s: %s"
                           % (label, w.host, w.argv[0], e.strerror),
                           127 if isinstance(e, FileNotFoundError) else 126)
        self.pump.add(w.proc.stdout, w.rank, to_err=False, copy=w.files[0])
        self.pump.add(w.proc.stderr, w.rank, to_err=True, copy=w.files[1])
        return None

    # ---- signals ---------------------------------------------------------------------------
    def _on_signal(self, signum, _frame):
        self._signals.append(signum)

    def _install_signals(self):
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
            if sig == signal.SIGHUP and signal.getsignal(sig) == signal.SIG_IGN:
                continue  # started under nohup: the job outlives the terminal, ranks included
            try:
                self._old_handlers[sig] = signal.signal(sig, self._on_signal)
            except (ValueError, OSError):
                pass  # not the main thread: the caller handles signals

    def _restore_signals(self):
        for sig, handler in self._old_handlers.items():
            signal.signal(sig, handler)

    # ---- the job ---------------------------------------------------------------------------
    def run(self):
        self._plan_binding()
        bind, reach = self._addresses()
        self.server = StoreServer(bind, 0).start()
        self._install_signals()
        self.guard = OrphanGuard(self.grace, self.console).start()
        try:
            return self._run_started(bind, reach)
        except BaseException:
            self._kill_all()  # kolorun itself failed: leave no rank behind
            raise
        finally:
            self.guard.close()
            self.server.stop()
            self._restore_signals()

    def _kill_all(self):
        for w in self.workers:
            w.signal_group(signal.SIGKILL)

    def _run_started(self, bind, reach):
        opts = self.opts
        if opts.verbose:
            layout = ", ".join("%s (%s) ranks %s" % (
                h, "local" if self.local[h] else "remote",
                _span([s.rank for s in self.slots if s.host == h]))
                for h, _ in used_hosts(self.slots))
            self.console.message("%d ranks on %d hosts: %s" % (
                len(self.slots), len(self.local), layout))
            self.console.message("rendezvous store listening on %s:%d; ranks connect to %s" % (
                bind, self.server.port, ", ".join(sorted(set(reach.values())))))
        for host, note, ranks in self.binding_notes:
            text = note if host is None else "host %s: %s" % (host, note)
            bound = [r for r in ranks if r in self.cpus]
            if opts.verbose or opts.binding.report:
                self.console.message(text + "".join(
                    "; rank %d: CPU %s" % (r, bindlib.cpu_list(self.cpus[r])) for r in bound))
            elif not bound and opts.binding.bind != "none":
                self.console.message(text)  # binding wanted but not possible
        self.pump = OutputPump(self.console, timestamp=self.opts.prefix_timestamp)
        failure = self._start_all(reach)
        self.pump.start()
        if failure is None:
            failure = self._supervise()
        if failure is None:
            stop_signal = signal.SIGTERM  # only leftovers of finished ranks receive it
        elif failure.signal is not None:
            stop_signal = forwarded_signal(failure.signal)
            self.console.message(stop_message(failure.signal, "rank"))
        else:
            stop_signal = signal.SIGTERM
            graced = self._failure_grace(failure)
            left = self._running()
            if self._signals:  # kolorun was signalled during the window: pass that on
                stop_signal = forwarded_signal(self._signals[0])
                self.console.message(stop_message(self._signals[0], "rank"))
            elif left and graced:
                self.console.message("rank%s %s still running after the grace window; sending "
                                     "SIGTERM, then SIGKILL after %s s" % (
                                         "" if len(left) == 1 else "s",
                                         _span([w.rank for w in left]), _seconds(self.grace)))
            elif left:
                self.console.message("%s; %s" % (failure.reason, _stopping(left, failure)))
        self._stop_all(stop_signal)
        if not self.pump.finish(timeout=2.0):
            self.console.message("a rank's output stayed open after it was stopped (a process "
                                 "that left its process group?)")
        if opts.verbose:
            for w in self.workers:
                if w.status is not None:
                    self.console.message("rank %d (host %s) %s" % (
                        w.rank, w.host, w.status.describe(w.remote)))
        if failure is None:
            return 0
        self.console.message("job failed: " + failure.reason)
        return failure.exit_status

    def _running(self):
        return [w for w in self.workers if w.proc is not None and w.poll() is None]

    def _failure_grace(self, failure):
        """Waits up to --failure-grace-seconds for the other ranks to exit by themselves (each
        should see the lost peer in its runtime and raise); returns early once none runs or
        kolorun got a signal. False when there was no window (not a rank's failure, none
        running, or a window of 0)."""
        left = self._running()
        if failure.worker is None or not left or self.opts.failure_grace <= 0:
            return False
        self.console.message("%s; the other %d rank%s may exit by themselves within %s s "
                             "(--failure-grace-seconds), then SIGTERM" % (
                                 failure.reason, len(left), "" if len(left) == 1 else "s",
                                 _seconds(self.opts.failure_grace)))
        deadline = time.monotonic() + self.opts.failure_grace
        while self._running() and not self._signals and time.monotonic() < deadline:
            time.sleep(POLL_SECONDS)
        return True

    def _start_all(self, reach):
        stdin = launcher_stdin_usable()
        for slot in self.slots:
            try:
                w = self._make_worker(slot, reach[slot.host], stdin=stdin and slot.rank == 0)
            except OSError as e:
                return Failure("cannot create the output files of rank %d in %s: %s"
                               % (slot.rank, self.opts.output_dir, e.strerror), 1)
            self.workers.append(w)
            failure = self._start_worker_process(w, "rank %d" % slot.rank)
            if failure is not None:
                return failure
        return None

    def _supervise(self):
        """The first failure, or None when every rank exited 0."""
        # --start-timeout bounds the skew between the ranks' connections, not the time a rank
        # may spend before init (as Horovod's: a script that prepares data for an hour before
        # hvd.init(), or a command that never calls it, runs freely): the clock starts when the
        # first rank connects.
        deadline = None
        connected = set()
        while True:
            if self._signals:
                sig = self._signals[0]
                return Failure("kolorun was stopped by %s" % signal.Signals(sig).name,
                               128 + sig, signal=sig)
            running = 0
            failed = []
            for w in self.workers:
                if w.status is not None:
                    continue
                status = w.poll()
                if status is None:
                    running += 1
                elif not status.ok:
                    failed.append((w, status))
            if failed:
                # Seen in one pass: a rank killed by a signal went first. A survivor exits (with
                # its own error) only after it noticed that death, and a pass finds them both
                # when the survivor is quick (shared memory notices a gone process at once).
                w, status = next((f for f in failed if f[1].signal is not None), failed[0])
                return Failure("rank %d (host %s) %s" % (w.rank, w.host, status.describe(w.remote)),
                               status.shell_code(), worker=w)
            if running == 0:
                return None
            for w in self.workers:
                if w.rank not in connected and self.server.has("host/%d" % w.rank):
                    if deadline is None:
                        deadline = time.monotonic() + self.opts.start_timeout
                        first = w.rank
                    connected.add(w.rank)
            if deadline is not None and time.monotonic() >= deadline:
                late = [w for w in self.workers if w.status is None and w.rank not in connected]
                if late:
                    text = "rank %d (host %s) did not connect within %s s of rank %d" % (
                        late[0].rank, late[0].host, _seconds(self.opts.start_timeout), first)
                    if len(late) > 1:
                        text += " (nor did rank%s %s)" % ("s" if len(late) > 2 else "",
                                                          _span([w.rank for w in late[1:]]))
                    return Failure(text, 1, ranks=[w.rank for w in late])
            time.sleep(POLL_SECONDS)

    def _stop_all(self, sig):
        """Stops every rank's process group: sig, then SIGKILL after the grace period (at once
        when kolorun gets another signal meanwhile), then reaps. Bounded in time."""
        started = [w for w in self.workers if w.proc is not None]
        # Only the signal that caused this stop (if one did) is not a second one: a second
        # Ctrl-C that arrived before the stop began escalates too, not only one that comes later.
        signals_before = min(len(self._signals), 1)
        for w in started:
            w.request_stop(sig)
        now = time.monotonic()
        deadline = {w.rank: now + self.grace + (REMOTE_EXTRA_GRACE if w.remote else 0.0)
                    for w in started}
        while True:
            live = live_process_groups()
            # A local rank is done when its whole group is gone; a remote one when its ssh
            # client exited (the remote watcher cleans up the far side).
            pending = [w for w in started
                       if w.poll() is None or (not w.remote and live is not None and w.pid in live)]
            waiting = [w for w in pending if deadline[w.rank] != float("inf")]
            if not waiting:
                break
            escalate = len(self._signals) > signals_before
            now = time.monotonic()
            for w in waiting:
                if escalate or now >= deadline[w.rank]:
                    w.signal_group(signal.SIGKILL)
                    deadline[w.rank] = float("inf")
            time.sleep(POLL_SECONDS)
        reap_deadline = time.monotonic() + 5.0
        for w in started:
            if not w.remote:
                w.signal_group(signal.SIGKILL)  # leftovers that ignored TERM; no-op otherwise
            while not w.reaped and time.monotonic() < reap_deadline:
                if w.poll() is None:
                    time.sleep(POLL_SECONDS)
                    continue
                w.reap()
            if not w.reaped:
                self.console.message("rank %d (pid %d) did not exit after SIGKILL"
                                     % (w.rank, w.pid))


class Failure:
    def __init__(self, reason, exit_status, signal=None, worker=None, ranks=()):
        self.reason = reason
        self.exit_status = exit_status
        self.signal = signal  # set when kolorun itself was signalled
        self.worker = worker  # the rank that failed, when one exited or died: the others then
                              # get the failure grace window
        self.ranks = tuple(ranks)  # ranks at fault that may still run (a start timeout's)


def _stopping(left, failure):
    """"stopping ..." for the ranks still running after `failure`: the ones at fault by rank,
    then how many others (a start timeout's late ranks are running, and are not "other")."""
    culprits = [w.rank for w in left if w.rank in failure.ranks]
    others = len(left) - len(culprits)
    parts = []
    if culprits:
        parts.append("rank%s %s" % ("" if len(culprits) == 1 else "s", _span(culprits)))
    if others:
        parts.append("the other %d rank%s" % (others, "" if others == 1 else "s"))
    return "stopping " + " and ".join(parts)


def _span(ranks):
    """[0,1,2,5] -> "0-2,5"."""
    parts = []
    start = prev = None
    for r in ranks:
        if start is None:
            start = prev = r
        elif r == prev + 1:
            prev = r
        else:
            parts.append(str(start) if start == prev else "%d-%d" % (start, prev))
            start = prev = r
    if start is not None:
        parts.append(str(start) if start == prev else "%d-%d" % (start, prev))
    return ",".join(parts)


def run_gloo(opts, environ, console):
    try:
        job = GlooJob(opts, environ, console)
        return job.run()
    except LaunchError as e:
        console.message(str(e))
        return 1
