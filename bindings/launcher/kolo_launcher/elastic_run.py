# SPDX-License-Identifier: Apache-2.0
"""Elastic mode: kolorun's driver when workers may leave and join (--host-discovery-script or
--min-np; --max-np caps it). Gloo mode only.

The job is a set of workers, each a process with a fixed worker id (its output prefix
"[id]"), that the driver re-forms in rendezvous rounds. Round N is published in kolorun's store:

  elastic/round<N>/assign/<id>  JSON {rank, size, local_rank, local_size, cross_rank,
                                cross_size, host} for each member
  elastic/round<N>/members      JSON [worker id, ...]: the round's members (a worker compares
                                them with its last round's: only removals, no state sync)
  elastic/round                 N, set after every assignment of the round
  elastic/ready/<id>            set by a new worker waiting for its first round
  elastic/joining/<id>          set by a worker: the newest round it got its place in (a new
                                worker waits for the round's other members to get there before
                                its init: they reach it at their next commit, however far off)
  elastic/inited/<id>           set by a worker: the newest round it initialized in (the round
                                formed)
  elastic/want/<id>             set by a worker: the round it left and wants to leave (its
                                runtime lost a peer, or its init failed)
  elastic/round<N>/removed/<id> the reason, for each worker removed from the job that has not
                                left yet (graceful removal, below): it ends instead of joining
  elastic/abort                 set when the job fails: the reason; waiting workers raise it,
                                training ones at their next commit

A worker is started with the place it will have in the next round (KOLO_RANK, HOROVOD_RANK,
..., computed as that round will be, _placement), as horovodrun starts each worker with its
slot's variables; the round itself is formed only once the new workers are ready, so a worker
that died or joined meanwhile changes it. At init the worker (kolo.elastic, in Python) reads
its assignment of the newest round, sets KOLO_RANK, KOLO_SIZE, ... and KOLO_RENDEZVOUS_ROUND=N
and initializes: each round has its own keys in the store (round<N>/..., bootstrap/README.md),
and a worker still at an older round is refused by the runtime, so stale workers never join a
new round.

Before the loop, as horovodrun's launch_gloo_elastic (wait_for_available_slots(num_proc)), the
driver waits up to --elastic-timeout for -np usable slots (--min-np when -np is not given);
later rounds need only --min-np (horovodrun's resume).

The driver's loop, every 50 ms:
  1. exits: a worker that exits 0 puts the job in "finishing", as horovodrun's "if any process
     succeeded, shutdown all other processes": no new workers and no new rounds (workers that
     ask for one, or wait to join one that a member ended without joining, are stopped); the
     others finish by themselves (a rank 0 may still write the
     final checkpoint), or, with KOLO_ELASTIC_FINISH_GRACE_SECONDS set, are stopped that long
     after the success (SIGTERM, SIGKILL after the kill grace). kolorun exits 0,
     unless a member of the success's round failed before it or a worker failed by itself
     after it (not one the driver stopped): then with the first such failure's status (as
     horovodrun's result, the first non-zero exit of the last round). One that fails
     blacklists its host (discovery.HostHealth); one the
     driver stopped (unless as a member absent from a round, below), or that left after its
     removal, is just gone. As horovodrun: when every
     member of the current round failed (none finished, none was stopped by the driver), the
     job fails at once, with the first failure's exit status;
  2. discovery, every second (KOLO_ELASTIC_DISCOVERY_INTERVAL): the script runs beside the
     loop (discovery.py: its own process group, never waited for here, so signals and exits
     are seen while it runs); when a run ends, the workers of hosts no longer listed (or
     listing fewer slots, the newest first) are removed: a member of the current round
     gracefully, as horovodrun's (_retire: it trains on until the next round forms without
     it, every worker learns of that round at its next commit, the others join it without a
     rollback and the removed one ends; stopped after --elastic-timeout if it never gets
     there), one in no round yet at once (SIGTERM); new slots on usable hosts get new
     workers, up to --max-np (worker 0, when it runs here, reads kolorun's stdin: workers.py);
     a member that did not take its place in the current round (elastic/joining older) while
     another member's init in it failed (the round could not form: a frozen or hung worker) is
     stopped with SIGKILL and counts as a failed worker: at once when it is a stopped local
     process, else after --start-timeout more without a place in any round
     (_stop_absent_members);
  3. rounds: when the live workers (a new one once it is ready) differ from the current
     round's members, or a member asks for a new round, and things were quiet for
     SETTLE_SECONDS, publish round N+1 with every live worker: ranks host by host, hosts
     ordered by their oldest worker, the oldest worker first, so rank 0 is a worker that holds
     the committed state (it broadcasts it in State.sync). Fewer live workers than --min-np:
     wait for discovery up to --elastic-timeout, then fail the job; with a fixed host list
     (-H/--hostfile) whose blacklisted-for-good hosts leave too few slots ever to reach
     --min-np, fail it at once (nothing can come back), with the last failure's exit status.
     A round without any member of the current round fails the job (horovodrun's "No hosts
     from previous set remaining, unable to broadcast state": nobody could send the state).
     More than --reset-limit re-formings: fail the job (a round that only admits workers
     started before the current round formed, a failed worker's replacement, belongs to that
     re-forming, as horovodrun's replacements join the reset they were started for).
A failed job sets elastic/abort (the workers waiting for a round raise it and exit), gives the
workers --failure-grace-seconds (at most 10 s) to exit, then stops them as Gloo mode does
(gloo_run.py); a worker still starting (neither in a round nor waiting for one) is stopped at
once.
Nothing waits forever: every wait here is bounded by the elastic timeout or a grace period.
Signals are Gloo mode's (SIGQUIT as SIGTERM); the local workers and each run of the discovery
script are registered with the orphan guard (orphan_guard.py), so a kolorun killed -9 leaves
none of them (nor their children) behind. Before the first round, waiting for the discovery
script and for hosts is cut short by a signal too.
"""

import json
import math
import os
import re
import signal
import time

from . import hosts as hostlib
from .discovery import HostDiscovery, HostHealth
from .gloo_run import (POLL_SECONDS, Failure, GlooJob, LaunchError, _seconds, _span,
                       forwarded_signal, kill_grace, stop_message)
from .orphan_guard import OrphanGuard
from .hosts import HostSlots
from .output import OutputPump
from .store_server import StoreServer
from .topology import Slot, assign
from .workers import launcher_stdin_usable, process_group_stopped

SETTLE_SECONDS = 0.3  # deaths of one host's workers, seen a few polls apart, form one round


def _truthy(value):
    return str(value).strip().lower() in ("1", "true", "yes", "on")


class ElasticJob(GlooJob):
    """Owned by kolorun's main thread."""

    def __init__(self, opts, environ, console):  # pylint: disable=super-init-not-called
        self.opts = opts
        self.eopts = opts.elastic
        self.environ = dict(environ)
        self.console = console
        self.workers = []  # every worker ever started (for the final stop)
        self.live = {}  # id -> Worker still part of the job
        self.retiring = {}  # id -> [Worker, SIGKILL time]: stopped during the job, not yet gone
        # id -> _Leaving: members removed from the job (their host left the list) that leave at
        # their next commit (graceful removal), not yet gone
        self.leaving = {}
        self.server = None
        self.pump = None
        self._signals = []
        self._old_handlers = {}
        self.grace = kill_grace(self.environ)
        self.template = self.environ.get("KOLO_LAUNCHER_REMOTE_SHELL") or None
        self.force_remote = _truthy(self.environ.get("KOLO_LAUNCHER_FORCE_REMOTE", ""))
        self._names, self._addrs = hostlib.local_names(), hostlib.local_addresses()
        self.local = {}
        self.cpus = {}  # elastic workers are not bound to cores (their number changes)
        self.discovery = HostDiscovery(
            self.eopts.discovery_script, None if self.eopts.discovery_script else opts.hosts,
            self.eopts.slots_per_host)
        self.health = HostHealth(self.eopts.cooldown)
        self.next_id = 0
        self.round = -1
        self.members = set()
        # how each member of the current round that exited ended: "ok", "stopped" (by the
        # driver) or its Failure, in the order seen
        self.member_exits = {}
        self.last_failure = None  # the Failure of the last worker that failed
        self.ever = set()  # every worker that was a member of some round
        self.resets = 0
        self.published_at = None  # when the current round was published (monotonic)
        self.bind = None
        self._reach = {}
        self._discovery_error = None
        self.guard = None  # the OrphanGuard of the local workers, while the job runs
        # id -> _Absent: live members that did not take their place in a round that the others
        # could not form (their init in it failed): stopped as failed workers unless they take
        # a place in a round within the grace (_stop_absent_members)
        self.absent = {}

    # ---- hosts -----------------------------------------------------------------------------
    def _is_local(self, host):
        if host not in self.local:
            self.local[host] = (not self.force_remote
                                and hostlib.is_local(host, self._names, self._addrs))
        return self.local[host]

    def _reach_address(self, host):
        """The address a worker on host uses to reach the store."""
        if host in self._reach:
            return self._reach[host]
        iface = (self.opts.network_interface or "").split(",")[0]
        if iface:
            addr = self.bind
        elif self._is_local(host):
            addr = "127.0.0.1"
        else:
            addr = hostlib.route_address(host) or hostlib.first_external_ipv4()
            if not addr:
                raise LaunchError("cannot tell which address host %s should use to reach this "
                                  "machine; name one with --network-interface" % host)
        self._reach[host] = addr
        return addr

    def _bind_address(self, hosts):
        iface = (self.opts.network_interface or "").split(",")[0]
        if iface:
            addr = hostlib.interface_ipv4(iface)
            if not addr:
                raise LaunchError("--network-interface %s: no such interface, or it has no IPv4 "
                                  "address" % iface)
            return addr
        if (not self.eopts.discovery_script and hosts
                and all(self._is_local(h) for h, _ in hosts)):
            return "127.0.0.1"  # a fixed list of this machine's names only
        return "0.0.0.0"  # a discovery script may add other hosts later: they must reach it

    def _stopped(self):
        return bool(self._signals)

    def _discover(self):
        """Runs the discovery script once (a signal to kolorun cuts it short); the host list."""
        return self._discovered(self.discovery.poll(self._stopped))

    def _discovered(self, result):
        """The host list of a discovery run's (hosts, error); says a new error once."""
        hosts, error = result
        if error and error != self._discovery_error:
            self.console.message(error + ("; keeping the last host list" if self.discovery.ok
                                          else ""))
        self._discovery_error = error
        return hosts

    # ---- the environment of a worker -------------------------------------------------------
    def _rank_env(self, slot, addr, place=None):
        """slot.rank is the worker's id; place its place in the round it is started for."""
        env = GlooJob._rank_env(self, slot, addr, place)
        env.update({
            "KOLO_ELASTIC": "1", "HOROVOD_ELASTIC": "1",
            "KOLO_ELASTIC_WORKER_ID": str(slot.rank),
            # how long a worker waits for its next round (the driver aborts it sooner)
            "KOLO_ELASTIC_TIMEOUT": _seconds(self.eopts.elastic_timeout + 30),
        })
        return env

    def _start_workers(self, hosts, cap):
        """Starts a worker on every free slot of the usable hosts, up to --max-np (a stopped
        worker still there keeps its slot: its GPU, its memory). Each starts with the place it
        will have in the next round, as horovodrun's workers start with their slot's
        (create_slot_env_vars): the round the driver forms next holds the live workers and
        these, numbered by _placement, so the place is the round's unless the workers change
        before it forms; the worker takes its round's place at init (kolo.elastic). A Failure
        when one cannot be started, else None."""
        new = []  # the hosts of the workers to start, in order
        for host, slots in hosts:
            on_host = new.count(host) + sum(
                1 for w in list(self.live.values()) + [r[0] for r in self.retiring.values()]
                + [l.worker for l in self.leaving.values()] if w.host == host)
            while on_host < slots and len(self.live) + len(new) < cap and self.health.usable(host):
                new.append(host)
                on_host += 1
        if not new:
            return None
        host_of = {wid: w.host for wid, w in self.live.items()}
        host_of.update((self.next_id + i, host) for i, host in enumerate(new))
        places = self._placement(host_of)
        for host in new:
            failure = self._start_worker(host, places[self.next_id])
            if failure is not None:
                return failure
        return None

    def _start_worker(self, host, place):
        """Starts the next worker on host; a Failure when it cannot, else None."""
        wid = self.next_id
        self.next_id += 1
        # The worker's own slot is its id and host (its output prefix, its files); its place
        # in the job is in its environment.
        slot = Slot(rank=wid, size=1, host=host, local_rank=0, local_size=1, cross_rank=0,
                    cross_size=1)
        self._is_local(host)
        try:
            w = self._make_worker(slot, self._reach_address(host), place,
                                  stdin=wid == 0 and launcher_stdin_usable())
        except OSError as e:
            return Failure("cannot create the output files of worker %d in %s: %s"
                           % (wid, self.opts.output_dir, e.strerror), 1)
        self.workers.append(w)
        failure = self._start_worker_process(w, "worker %d" % wid)
        if failure is not None:
            return failure
        self.live[wid] = w
        w.started_at = time.monotonic()
        if self.opts.verbose:
            self.console.message("started worker %d on host %s (rank %d of %d for now)"
                                 % (wid, host, place.rank, place.size))
        return None

    # ---- the job ---------------------------------------------------------------------------
    def run(self):
        self._install_signals()
        # The guard first: it also stops the discovery script's runs if kolorun is killed -9.
        self.guard = OrphanGuard(self.grace, self.console).start()
        self.discovery.guard = self.guard
        try:
            hosts = self._wait_for_hosts()
            if isinstance(hosts, Failure):
                self.console.message("job failed: " + hosts.reason)
                return hosts.exit_status
            self.bind = self._bind_address(hosts)
            self.server = StoreServer(self.bind, 0).start()
            try:
                return self._run_started(hosts)
            except BaseException:
                self._kill_all()  # kolorun itself failed: leave no worker behind
                raise
            finally:
                self.server.stop()
        finally:
            self.discovery.close()  # a run still going: its whole process group
            self.guard.close()
            self._restore_signals()

    def _usable_slots(self, hosts):
        return sum(s for h, s in hosts if self.health.usable(h))

    def _first_discovery(self):
        """The first host list, or a Failure when the script's first run fails: as horovodrun,
        the job fails at once (a script that never worked is a mistake, not a lost host);
        later failures keep the last good list (HostDiscovery)."""
        hosts, self._discovery_error = self.discovery.poll(self._stopped)
        if self._discovery_error:
            return Failure("the host discovery script failed on its first run (%s); a script "
                           "that fails on its first run fails the job at once"
                           % self._discovery_error, 1)
        return hosts

    def _wait_for_hosts(self):
        """The first host list with -np usable slots (horovodrun's wait_for_available_slots
        before the first round; later rounds need only --min-np), or a Failure after
        --elastic-timeout (or at once when the discovery script's first run fails)."""
        e = self.eopts
        need = "%s %d" % (e.start_flag, e.start_np)
        deadline = time.monotonic() + e.elastic_timeout
        said = False
        hosts = self._first_discovery()
        while True:
            if isinstance(hosts, Failure):
                return hosts
            found = self._usable_slots(hosts)
            if found >= e.start_np:
                return hosts
            if self._signals:
                sig = self._signals[0]
                return Failure("kolorun was stopped by %s" % signal.Signals(sig).name, 128 + sig)
            if time.monotonic() >= deadline:
                return Failure("the hosts offer %d slot%s, fewer than %s (the slots the first "
                               "round needs), after --elastic-timeout %s s (hosts: %s)" % (
                                   found, "" if found == 1 else "s", need,
                                   _seconds(e.elastic_timeout), _host_list(hosts)), 1)
            if not said:
                self.console.message(
                    "waiting up to %s s (--elastic-timeout) for the %d slots of %s before the "
                    "first round (the hosts offer %d: %s)" % (
                        _seconds(e.elastic_timeout), e.start_np, need, found,
                        _host_list(hosts)))
                said = True
            wake = time.monotonic() + self.eopts.discovery_interval
            while not self._signals and time.monotonic() < wake:
                time.sleep(POLL_SECONDS)
            if not self._signals:
                hosts = self._discover()

    def _run_started(self, hosts):
        self.pump = OutputPump(self.console, timestamp=self.opts.prefix_timestamp)
        self.pump.start()
        if self.opts.verbose:
            self.console.message("elastic job: rendezvous store on %s:%d; hosts %s; workers "
                                 "are not bound to cores (their number on a host changes)" % (
                self.bind, self.server.port, ",".join("%s:%d" % h for h in hosts)))
        failure = self._drive(hosts)
        stop_signal = signal.SIGTERM
        if failure is not None and failure.signal is not None:
            stop_signal = forwarded_signal(failure.signal)
            self.console.message(stop_message(failure.signal, "worker"))
        elif failure is not None and self.live:
            # The workers waiting for a round read elastic/abort and exit by themselves; one
            # still starting up would only read it after its start-up: stopped now.
            for wid, w in sorted(self.live.items()):
                if wid not in self.ever and not self.server.has("elastic/ready/%d" % wid):
                    w.request_stop(signal.SIGTERM)
                    del self.live[wid]
            deadline = time.monotonic() + min(self.opts.failure_grace, 10.0)
            while (any(w.poll() is None for w in self.live.values()) and not self._signals
                   and time.monotonic() < deadline):
                time.sleep(POLL_SECONDS)
        self._stop_all(stop_signal)
        if not self.pump.finish(timeout=2.0):
            self.console.message("a worker's output stayed open after it was stopped")
        if failure is None:
            return 0
        self.console.message("job failed: " + failure.reason)
        return failure.exit_status

    def _abort(self, reason, status=1):
        self.server.set("elastic/abort", reason.encode())
        return Failure(reason, status)

    def _drive(self, hosts):
        e = self.eopts
        cap = e.max_np if e.max_np is not None else float("inf")
        finishing = False
        finish_by = None  # when the workers still running after a success are stopped
        finished = None  # the first worker that exited 0
        late_failure = None
        changed_at = None
        short_since = None
        said_short = False
        next_discovery = time.monotonic() + e.discovery_interval
        while True:
            if self._signals:
                sig = self._signals[0]
                return Failure("kolorun was stopped by %s" % signal.Signals(sig).name,
                               128 + sig, signal=sig)
            now = time.monotonic()
            # 1. exits
            for wid, w in sorted(list(self.live.items()) +
                                 [(wid, l.worker) for wid, l in self.leaving.items()]):
                status = w.poll()
                if status is None:
                    continue
                member = wid in self.members
                leaving = self.leaving.pop(wid, None)
                if leaving is None:
                    del self.live[wid]
                elif leaving.round is not None or w.stop_requested:
                    # told (or made) to leave: whatever its status, as horovodrun ignores the
                    # exit of a worker that has no place in the job any more
                    if member:
                        self.member_exits[wid] = "stopped"
                    if not w.stop_requested:
                        self.console.message("worker %d (host %s) left the job at its commit "
                                             "(%s)" % (wid, w.host, leaving.reason))
                    continue
                dropped = self.absent.pop(wid, None)
                if w.stop_requested and not (dropped and dropped.stopped):
                    if member:
                        self.member_exits[wid] = "stopped"
                    continue
                if status.ok and not (dropped and dropped.stopped):
                    if not finishing:
                        # A member of this round that failed before it fails the job.
                        late_failure = next((f for f in self.member_exits.values()
                                             if isinstance(f, Failure)), None)
                        finished, finish_by = w, now + e.finish_grace
                        limit = ("" if math.isinf(e.finish_grace) else
                                 ", or in %s s (KOLO_ELASTIC_FINISH_GRACE_SECONDS) when kolorun "
                                 "stops the others" % _seconds(e.finish_grace))
                        self.console.message(
                            "worker %d (host %s) finished; the job ends when every worker has%s"
                            % (wid, w.host, limit))
                    if member:
                        self.member_exits[wid] = "ok"
                    finishing = True
                    continue
                only_host = not any(h != w.host and s > 0 and self.health.usable(h)
                                    for h, s in hosts)
                period = self.health.record_failure(w.host, only_host)
                text = "worker %d (host %s) %s" % (wid, w.host, status.describe(w.remote))
                if dropped and dropped.stopped:
                    text += (" (stopped by kolorun: it did not take its place in elastic round "
                             "%d)" % dropped.round)
                if period == 0:
                    self.console.message("%s; host %s is the only host this job can use, so "
                                         "one failure does not blacklist it (a second one "
                                         "would)" % (text, w.host))
                else:
                    self.console.message("%s; host %s gets no new worker %s" % (
                        text, w.host, "in this job" if period == float("inf")
                        else "for %s s" % _seconds(period)))
                failure = Failure(text, status.shell_code(), worker=w)
                self.last_failure = failure
                if member:
                    self.member_exits[wid] = failure
                if finishing and late_failure is None:
                    late_failure = failure
            failure = self._round_failed()
            if failure is not None:
                return failure
            # 2. discovery (a run of the script goes on beside this loop) and new workers
            if self.discovery.running:
                result = self.discovery.result()
                if result is not None:
                    hosts = self._discovered(result)
                    self._retire(hosts)
            elif self.discovery.script is not None and now >= next_discovery:
                error = self.discovery.start()
                if error is not None:
                    self._discovered((hosts, error))
                next_discovery = now + e.discovery_interval
            self._reap_retiring()
            self._stop_overdue_leaving()
            if not finishing:
                self._stop_absent_members(now)
            if not finishing:
                failure = self._start_workers(hosts, cap)
                if failure is not None:
                    return self._abort(failure.reason, failure.exit_status)
            if finishing:
                for wid, w in sorted(self.live.items()):
                    if wid not in self.ever:  # started for a round that will not come
                        w.request_stop(signal.SIGTERM)
                        del self.live[wid]
                        continue
                    gone = self._round_cannot_form(wid)
                    if gone is not None:
                        # e.g. a worker added after the others' last commit: the round it
                        # waits for needs a member that finished without joining it
                        self.console.message(
                            "worker %d waits to join elastic round %d, which can no longer "
                            "form (worker %d ended without joining it): stopping it" % (
                                wid, self.round, gone))
                        w.request_stop(signal.SIGTERM)
                        del self.live[wid]
                for wid in sorted(self.leaving):
                    if self._wants_round(wid):  # a removed worker waiting for a round
                        self._stop_leaving(wid)
                if not self.live and not self.leaving:
                    return late_failure
                if now >= finish_by:
                    left = sorted(list(self.live) + list(self.leaving))
                    self.console.message(
                        "worker%s %s still running %s s after worker %d finished: stopping %s "
                        "(SIGTERM, then SIGKILL after %s s)" % (
                            "" if len(left) == 1 else "s", _span(left),
                            _seconds(e.finish_grace), finished.rank,
                            "it" if len(left) == 1 else "them", _seconds(self.grace)))
                    for w in list(self.live.values()) + [l.worker for l in
                                                         self.leaving.values()]:
                        w.request_stop(signal.SIGTERM)
                    self.live.clear()
                    self.leaving.clear()
                    return late_failure
            # 3. rounds: a new worker counts once it waits for its first round (it set
            # elastic/ready/<id>), so the others never wait for its start-up in a rendezvous
            live = {wid for wid in self.live
                    if self.round < 0 or wid in self.ever or self.server.has(
                        "elastic/ready/%d" % wid)}
            wanted = self._round_wanted(live)
            starting = [w for wid, w in self.live.items() if wid not in live]
            if (not wanted and self.members <= live and starting
                    and now - max(w.started_at for w in starting) < self.opts.start_timeout):
                # Only new workers to add, and more are starting up: add them all in one round.
                live = set(self.members)
            if (live != self.members and not finishing) or wanted:
                if changed_at is None:
                    changed_at = now
                if finishing:
                    # As horovodrun: once a worker finished, the job has succeeded, and the
                    # others are shut down: no new round (below --min-np it could not form
                    # anyway, a finishing job starts no workers); a failure seen since still
                    # fails the job.
                    self.console.message(
                        "a worker finished; the other %d asked for a new round: stopping them "
                        "(the job succeeded with the worker that finished)" % len(self.live))
                    for w in self.live.values():
                        w.request_stop(signal.SIGTERM)
                    self.live.clear()
                    return late_failure
                if len(live) < e.min_np:
                    most = self._most_workers_possible(hosts)
                    if most is not None and most < e.min_np:
                        last = self.last_failure
                        return self._abort(
                            "only %d worker%s left, fewer than --min-np %d, and the fixed host "
                            "list (-H/--hostfile) can never start enough (blacklisted for the "
                            "rest of the job: %s)%s" % (
                                len(live), "" if len(live) == 1 else "s", e.min_np,
                                ", ".join(h for h, _ in hosts
                                          if self.health.blacklisted_for_good(h)) or "none",
                                "; the last failure: " + last.reason if last else ""),
                            last.exit_status if last else 1)
                    if short_since is None:
                        short_since = now
                    if not said_short and len(live) + len(starting) < e.min_np:
                        # (not while enough workers are starting: a replacement, new hosts)
                        said_short = True
                        self.console.message(
                            "%d worker%s left, fewer than --min-np %d: waiting up to %s s "
                            "(--elastic-timeout) for hosts" % (
                                len(live), "" if len(live) == 1 else "s", e.min_np,
                                _seconds(e.elastic_timeout)))
                    if now - short_since >= e.elastic_timeout:
                        return self._abort(
                            "only %d worker%s, fewer than --min-np %d, and no host came within "
                            "--elastic-timeout %s s" % (
                                len(live), "" if len(live) == 1 else "s", e.min_np,
                                _seconds(e.elastic_timeout)))
                elif self.round < 0 or now - changed_at >= SETTLE_SECONDS:
                    short_since = None
                    said_short = False
                    if self.round >= 0 and not live & self.members:
                        # horovodrun's driver: "No hosts from previous set remaining, unable
                        # to broadcast state." New workers alone would start from scratch.
                        return self._abort(
                            "no worker of elastic round %d is left to send the training state "
                            "to the new worker%s %s (as under horovodrun: no hosts from the "
                            "previous set remaining, unable to broadcast state)" % (
                                self.round, "" if len(self.live) == 1 else "s",
                                _span(sorted(self.live))))
                    reset = self._is_reset(live)
                    if (reset and e.reset_limit is not None
                            and self.resets >= e.reset_limit):
                        return self._abort(
                            "the workers would be re-formed a %d%s time, past --reset-limit %d"
                            % (self.resets + 1, _nth(self.resets + 1), e.reset_limit))
                    self._publish(sorted(live), reset)
                    changed_at = None
            else:
                changed_at = None
                short_since = None
                said_short = False
            time.sleep(POLL_SECONDS)

    def _round_failed(self):
        """horovodrun's rule: when every member of the current round failed (none finished and
        none was stopped by the driver), the job fails: a Failure (elastic/abort set) with the
        first failure's exit status, else None."""
        if not self.members or not all(isinstance(self.member_exits.get(wid), Failure)
                                       for wid in self.members):
            return None
        first = next(iter(self.member_exits.values()))
        failures = [self.member_exits[wid].reason for wid in sorted(self.members)]
        if len(failures) > 4:
            failures = failures[:4] + ["and %d more" % (len(failures) - 4)]
        return self._abort("every worker of elastic round %d failed: %s" % (
            self.round, ", ".join(failures)), first.exit_status)

    def _most_workers_possible(self, hosts):
        """With a fixed host list: the most workers the job can ever have from now on (those
        running, and every slot of a host not blacklisted for good); None with a discovery
        script, which may list new hosts."""
        if self.eopts.discovery_script is not None:
            return None
        most = 0
        for host, slots in hosts:
            running = sum(1 for w in self.live.values() if w.host == host)
            most += running if self.health.blacklisted_for_good(host) else max(slots, running)
        return most

    def _retire(self, hosts):
        """Removes the workers on hosts the discovery no longer lists, and the newest ones of a
        host that lists fewer slots than it runs. Horovod's graceful removal for a member of
        the current round: it stays (leaving) until the next round forms without it, which the
        others join at their next commit or check_host_updates (HostsUpdatedInterrupt, no
        rollback); it then ends by itself when it would join that round (the round's
        removed/<id> key, kolo.elastic.WorkerRemoved), and its exit is no failure. A worker in
        no round yet is stopped at once (SIGTERM). A leaving worker whose host lists its slot
        again before that round formed stays in the job."""
        slots = dict(hosts)
        now = time.monotonic()
        for wid, l in sorted(self.leaving.items()):
            on_host = sum(1 for w in self.live.values() if w.host == l.worker.host)
            if l.round is None and on_host < slots.get(l.worker.host, 0):
                del self.leaving[wid]
                self.live[wid] = l.worker
                self.console.message("host %s lists worker %d's slot again: it stays in the "
                                     "job" % (l.worker.host, wid))
        by_host = {}
        for wid, w in sorted(self.live.items()):
            by_host.setdefault(w.host, []).append(w)
        for host, ws in by_host.items():
            keep = slots.get(host, 0)
            for w in ws[keep:]:
                why = "host %s %s" % (host, "is gone" if keep == 0 else "has %d slot%s now" % (
                    keep, "" if keep == 1 else "s"))
                del self.live[w.rank]
                if w.rank in self.members:
                    self.leaving[w.rank] = _Leaving(w, why, now)
                    self.console.message(
                        "%s: worker %d leaves the job at its next commit (graceful removal: "
                        "the others go on from there, without a rollback)" % (why, w.rank))
                    continue
                self.console.message("%s: stopping worker %d" % (why, w.rank))
                w.request_stop(signal.SIGTERM)
                self.retiring[w.rank] = [w, now + self.grace]

    def _stop_leaving(self, wid):
        """Stops a removed worker that is still running (SIGTERM, SIGKILL after the grace)."""
        w = self.leaving.pop(wid).worker
        w.request_stop(signal.SIGTERM)
        self.retiring[wid] = [w, time.monotonic() + self.grace]

    def _stop_overdue_leaving(self):
        """A removed worker that did not leave at a commit within --elastic-timeout (it never
        commits, or hangs) is stopped: the others then roll back to their last commit."""
        now = time.monotonic()
        for wid, l in sorted(self.leaving.items()):
            if now - l.since >= self.eopts.elastic_timeout:
                if l.round is None:
                    # it had nothing to leave for: no round without it formed (too few
                    # workers), not a worker that never commits
                    why = "no round without it could form"
                else:
                    why = "it did not leave the job at a commit"
                self.console.message(
                    "worker %d (host %s): %s within --elastic-timeout %s s of its removal "
                    "(%s): stopping it" % (wid, l.worker.host, why,
                                           _seconds(self.eopts.elastic_timeout), l.reason))
                self._stop_leaving(wid)

    def _reap_retiring(self):
        """SIGKILL for a stopped local worker still there after the kill grace (remote ones:
        their watcher does it); forgets those that are gone."""
        now = time.monotonic()
        for wid, entry in list(self.retiring.items()):
            w, kill_at = entry
            if w.poll() is not None:
                del self.retiring[wid]
            elif not w.remote and now >= kill_at:
                w.signal_group(signal.SIGKILL)
                entry[1] = float("inf")

    def _stop_absent_members(self, now):
        """A member of the current round that never took its place in it (elastic/joining older
        than the round) while another member's init in it failed (that member got its place,
        did not initialize and asks for a new round: the round could not form) is held
        responsible: unless it takes its place in some round within --start-timeout more (a
        worker busy between collectives gets there), or at once when it is a local process
        that is stopped (SIGSTOP: it never will), it is stopped with SIGKILL and counts as a
        failed worker (blacklisting, as one that died), so the next round forms without it.
        Without this a frozen worker was put in every new round, each failing after
        --start-timeout, until the others gave up. A round the others are still forming, or
        that waits for a member's next commit (a new worker waits for it without a bound),
        has no failed init: nobody is stopped then."""
        r = self.round
        if r >= 0 and any(self._init_failed_in(wid, r) for wid in self.members & set(self.live)):
            for wid in sorted(self.members):
                if (wid in self.live and wid not in self.absent
                        and self._key_round("joining", wid) < r):
                    self.absent[wid] = _Absent(r, now)
        for wid, a in sorted(self.absent.items()):
            w = self.live.get(wid)
            if w is None:  # gone (its exit was seen) or removed from the job
                del self.absent[wid]
                continue
            if a.stopped:
                continue
            if self._key_round("joining", wid) >= a.round:
                del self.absent[wid]  # it got there (slow, not stuck)
                continue
            frozen = not w.remote and process_group_stopped(w.pid)
            if not frozen and now - a.since < self.opts.start_timeout:
                continue
            self.console.message(
                "worker %d (host %s) did not take its place in elastic round %d, which the "
                "others could not form without it (their init timed out)%s: stopping it "
                "(SIGKILL; it counts as a failed worker, the next round forms without it)" % (
                    wid, w.host, a.round,
                    "; it is a stopped process (state T)" if frozen else
                    " nor within --start-timeout %s s more" % _seconds(self.opts.start_timeout)))
            a.stopped = True
            w.request_stop(signal.SIGKILL)

    def _init_failed_in(self, wid, r):
        """Whether worker wid got its place in round r, did not initialize in it and asks for a
        new round: its init in round r failed."""
        return (self._key_round("joining", wid) >= r and self._key_round("inited", wid) < r
                and self._wants_round(wid))

    def _key_round(self, kind, wid):
        """The round in elastic/<kind>/<wid> (joining: the newest round the worker got its place
        in; inited: the newest it initialized in), or -1."""
        value = self.server.get_nowait("elastic/%s/%d" % (kind, wid))
        try:
            return int(value) if value is not None else -1
        except ValueError:
            return -1

    def _formed(self):
        """Whether the current round formed: a member initialized in it."""
        return any(self._key_round("inited", wid) >= self.round for wid in self.members)

    def _round_cannot_form(self, wid):
        """When live worker wid waits to join the current round (it got its place, it is not
        in it yet) and a member of that round ended without joining it, so that the round will
        never form: that member's id; else None."""
        if (wid not in self.members or self._key_round("joining", wid) < self.round
                or self._key_round("inited", wid) >= self.round):
            return None
        for other in sorted(self.members):
            if (other != wid and other not in self.live and other not in self.leaving
                    and self._key_round("inited", other) < self.round):
                return other
        return None

    def _round_wanted(self, live):
        return any(self._wants_round(wid) for wid in live)

    def _wants_round(self, wid):
        """Whether worker wid left the current round and waits for a new one."""
        value = self.server.get_nowait("elastic/want/%d" % wid)
        try:
            return value is not None and int(value) >= self.round
        except ValueError:
            return False

    def _is_reset(self, ids):
        """Whether a round of `ids` counts against --reset-limit. horovodrun counts one reset
        per re-forming of the workers, and the workers it starts for it (a failed worker's
        replacement) join that same re-forming; here the others do not wait for their start-up,
        so a round that only adds workers already starting when the current round formed
        completes the current round's re-forming and is no new one; nor is one that only adds
        workers to a round that never formed (horovodrun resets once, when the workers reach
        the interrupt, with every host added until then)."""
        if self.round < 0:
            return False
        ids = set(ids)
        added = ids - self.members
        if self.members - ids or not added:
            return True
        if self.round > 0 and all(self.live[wid].started_at < self.published_at
                                  for wid in added):
            return False
        # Workers added again before the current round formed (its members had not reached
        # their commit yet): the same re-forming, as horovodrun's one reset when its workers
        # reach the interrupt, whatever the hosts added meanwhile.
        return self._formed()

    def _placement(self, host_of):
        """{worker id: Slot} for a round of the workers host_of maps to their hosts: ranks host
        by host, hosts ordered by their oldest worker, the current round's members first, so
        rank 0, whose state every worker receives, is the oldest worker that holds the training
        state, never one that has not joined a round."""
        ids = sorted(host_of, key=lambda wid: (wid not in self.members, wid))
        order = []  # hosts by their oldest worker
        on_host = {}
        for wid in ids:
            on_host.setdefault(host_of[wid], []).append(wid)
            if on_host[host_of[wid]] == [wid]:
                order.append(host_of[wid])
        slots = assign([HostSlots(h, len(on_host[h])) for h in order], len(ids))
        return dict(zip([wid for h in order for wid in on_host[h]], slots))

    def _publish(self, ids, reset=True):
        """Publishes round N+1 of the workers `ids`; `reset`: it counts against --reset-limit
        (_is_reset)."""
        n = self.round + 1
        placed = self._placement({wid: self.live[wid].host for wid in ids})
        for wid, slot in placed.items():
            place = {"rank": slot.rank, "size": slot.size, "local_rank": slot.local_rank,
                     "local_size": slot.local_size, "cross_rank": slot.cross_rank,
                     "cross_size": slot.cross_size, "host": slot.host}
            self.server.set("elastic/round%d/assign/%d" % (n, wid), json.dumps(place).encode())
        self.server.set("elastic/round%d/members" % n, json.dumps(sorted(ids)).encode())
        for wid, l in self.leaving.items():
            # removed workers still running: this round tells them to end (in every round
            # until they are gone: one may look at a newer round than the first)
            self.server.set("elastic/round%d/removed/%d" % (n, wid), l.reason.encode())
            if l.round is None:
                l.round = n
        self.server.set("elastic/round", str(n).encode())
        if n > 0:
            self.server.refuse_missing(_stale_round_rule(n))
        if self.round >= 0 and reset:
            self.resets += 1
        self.round = n
        self.published_at = time.monotonic()
        self.members = set(ids)
        self.member_exits = {}
        self.ever.update(ids)
        order = list(dict.fromkeys(slot.host for slot in placed.values()))  # rank order
        self.console.message("elastic round %d: %d worker%s (%s), rank 0 is worker %d" % (
            n, len(ids), "" if len(ids) == 1 else "s",
            ", ".join("%s: %s" % (h, _span([wid for wid, slot in placed.items()
                                             if slot.host == h])) for h in order),
            next(iter(placed))))


class _Absent:
    """A live member that did not take its place in elastic round `round`, which the others
    could not form; `since`: when that was seen; `stopped`: kolorun stopped it (SIGKILL)."""

    def __init__(self, rnd, since):
        self.round = rnd
        self.since = since
        self.stopped = False


class _Leaving:
    """A member removed from the job that has not left yet: `reason` (its host is gone or has
    fewer slots), `since` (when), `round` (the first round published without it, None before;
    until then its host may list its slot again)."""

    def __init__(self, worker, reason, since):
        self.worker = worker
        self.reason = reason
        self.since = since
        self.round = None


def _stale_round_rule(newest):
    """A rule for StoreServer.refuse_missing: keys of the runtime's rendezvous rounds older than
    `newest` (round 0 has no prefix, round k > 0 the prefix "round<k>/", bootstrap/README.md);
    the driver's own keys (elastic/) and the round record (kolo/) stay usable."""
    text = ("rendezvous round %%d was abandoned: kolorun's elastic driver formed round %d "
            "(a member left); this rank will join the newest round" % newest)

    def rule(key):
        k = key.decode("utf-8", "replace")
        if k.startswith("elastic/") or k.startswith("kolo/"):
            return None
        m = _ROUND_KEY.match(k)
        r = int(m.group(1)) if m else 0
        return text % r if r < newest else None

    return rule


_ROUND_KEY = re.compile(r"round([0-9]+)/")


def _host_list(hosts):
    return ",".join("%s:%d" % h for h in hosts) or "none"


def _nth(n):
    return "th" if 10 <= n % 100 < 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")


def run_elastic(opts, environ, console):
    try:
        return ElasticJob(opts, environ, console).run()
    except LaunchError as e:
        console.message(str(e))
        return 1
