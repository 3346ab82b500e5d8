# SPDX-License-Identifier: Apache-2.0
"""Elastic mode's view of the hosts: what the discovery script offers, and which hosts failed.

HostDiscovery runs --host-discovery-script (through the shell, with a time limit) and parses
its output: one host a line, "host:slots" or "host" (then --slots-per-host slots; "host:0": no
slots there); blank lines and '#' comments are skipped; a host printed twice must have the
same slots both times. A script that fails, times out or prints a bad line keeps the
last good list (the error is returned once, for the launcher to print); `ok` says whether any
run succeeded (the launcher fails the job when the first run fails: elastic_run.py). With
-H/--hostfile instead, the list is fixed.

The script runs beside the driver, never blocking it: start() starts a run, result() says
(without waiting) whether it ended, and poll() waits for one while a caller's check (a signal to
kolorun) may cut it short. Each run is in a session (and process group) of its own, its output
goes to temporary files (nothing to drain while it runs), and it is registered with kolorun's
orphan guard when one is given. A run past SCRIPT_TIMEOUT, a run that prints more than
MAX_OUTPUT (a runaway loop would fill the disk first), a run cut short and a run still going
when kolorun stops (close()) have their whole group killed (SIGKILL), as has a run that
ended (what it left running), so no child of the script (a `sleep`, an ssh) outlives it; when
kolorun is killed -9, the orphan guard stops the group (TERM, then KILL after the kill grace).

HostHealth is the blacklist. A worker that fails blacklists its host: no new worker starts
there, for the cool-down when --blacklist-cooldown-range MIN MAX is given, else for the rest of
the job (horovodrun's rule). The cool-down is horovodrun's (HostState._set_cooldown_period):
MIN * 2**k + U(0, MIN) seconds at the host's k-th blacklisting, kept within [MIN, MAX]; a
failure while the host cools down neither counts nor extends it. Unlike horovodrun, one death never blacklists the only host the job can use: its first
failure is forgiven (a replacement may start there at once), a second one blacklists it as any
other (a host that keeps failing is still shut out). And the host's other workers are never
removed: they are healthy processes (scenario 0 of issue 14).

Both are owned by the launcher's main thread; nothing here is thread-safe. Only poll() blocks,
at most the script's time limit (less when its caller's check says to stop).
"""

import os
import random
import re
import signal
import subprocess
import tempfile
import time

from .hosts import HostListError, parse_host_entry

SCRIPT_TIMEOUT = 30.0
MAX_OUTPUT = 4 << 20  # bytes a run may print (stdout or stderr): 100000 hosts' lines


def parse_discovery_output(text, slots_per_host):
    """[(host, slots)] in the order printed. A host printed again with the same slots counts
    once (horovodrun drops repeated lines); printed with other slots it is an error, as the
    script's meaning is unclear (horovodrun keeps either line, at random). "host:0" lists a
    host without slots, as horovodrun reads it: no worker there (a way to drain a host); it
    is left out of the list. Raises HostListError naming the bad line."""
    hosts = []
    seen = {}  # name -> (slots, line number)
    for number, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        where = "discovery script line %d" % number
        drained = _NO_SLOTS.match(line)
        if drained:
            # the name is checked as with one slot; the host gets none
            try:
                entry = parse_host_entry(drained.group(1) + ":1", where)
            except HostListError:
                parse_host_entry(line, where)  # the error about the line as printed
                raise
            slots = 0
        else:
            entry = parse_host_entry(line, where)
            has_slots = ("]:" in line) if line.startswith("[") else (":" in line)
            slots = entry.slots if has_slots else slots_per_host
        if entry.name in seen:
            if seen[entry.name][0] != slots:
                raise HostListError(
                    "%s: host %s is listed again with %d slot%s (line %d gave it %d); list "
                    "each host once" % (where, entry.name, slots, "" if slots == 1 else "s",
                                        seen[entry.name][1], seen[entry.name][0]))
            continue
        seen[entry.name] = (slots, number)
        if slots > 0:
            hosts.append((entry.name, slots))
    return hosts


_NO_SLOTS = re.compile(r"^(.+):0+$")


class HostDiscovery:
    def __init__(self, script=None, fixed=None, slots_per_host=1, env=None, guard=None):
        self.script = script
        self.fixed = [(h.name, h.slots) for h in (fixed or [])]
        self.slots_per_host = slots_per_host
        self.env = env
        self.guard = guard  # an OrphanGuard (orphan_guard.py), or None
        self.hosts = list(self.fixed) if script is None else []
        self.ok = script is None  # whether some run succeeded
        self._run = None  # the running script: (Popen, stdout file, stderr file, deadline)

    @property
    def running(self):
        return self._run is not None

    def start(self):
        """Starts a run of the script unless one is running (or the list is fixed). Returns the
        error text when the script cannot be started (then no run is going on), else None."""
        if self.script is None or self._run is not None:
            return None
        out = err = None
        try:
            out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
            proc = subprocess.Popen(self.script, shell=True, stdout=out, stderr=err,
                                    stdin=subprocess.DEVNULL, env=self.env,
                                    start_new_session=True, close_fds=True)
        except OSError as e:
            for f in (out, err):
                if f is not None:
                    f.close()
            return "cannot run the host discovery script: %s" % e
        if self.guard is not None:
            self.guard.watch(proc.pid)
        self._run = (proc, out, err, time.monotonic() + SCRIPT_TIMEOUT)
        return None

    def result(self):
        """Without waiting: None while the run goes on (or when none was started), else
        (hosts, error text or None) of the run that ended, or that ran past SCRIPT_TIMEOUT
        (its process group is then killed)."""
        if self._run is None:
            return None
        proc, out, err, deadline = self._run
        exited = _exited(proc.pid)
        printed = max(os.fstat(f.fileno()).st_size for f in (out, err))
        if printed > MAX_OUTPUT:
            # a runaway loop: its output would fill the disk before the time limit
            self._end()
            return self.hosts, ("host discovery script printed more than %d MiB; it was "
                                "stopped" % (MAX_OUTPUT >> 20))
        if not exited:
            if time.monotonic() < deadline:
                return None
            self._end()
            return self.hosts, "host discovery script timed out after %g s" % SCRIPT_TIMEOUT
        code, stdout, stderr = self._end(read=True)
        if code != 0:
            lines = stderr.decode("utf-8", "replace").strip().splitlines()
            what = ("exited with status %d" % code if code > 0
                    else "was killed by signal %d" % -code)
            return self.hosts, "host discovery script %s%s" % (
                what, (": " + lines[-1]) if lines else "")
        try:
            self.hosts = parse_discovery_output(stdout.decode("utf-8", "replace"),
                                                self.slots_per_host)
        except HostListError as e:
            return self.hosts, str(e)
        self.ok = True
        return self.hosts, None

    def poll(self, stop=None):
        """Runs the script once and waits for it: (hosts, error text or None). `stop()`, asked
        every 50 ms, cuts the wait short: the run is killed and (the last hosts, None)
        returned."""
        if self.script is None:
            return self.hosts, None
        error = self.start()
        if error is not None:
            return self.hosts, error
        while True:
            done = self.result()
            if done is not None:
                return done
            if stop is not None and stop():
                self.close()
                return self.hosts, None
            time.sleep(_POLL_SECONDS)

    def close(self):
        """Kills a run still going (its whole process group) and reaps it."""
        if self._run is not None:
            self._end()

    def _end(self, read=False):
        """SIGKILL to the run's process group (its leader is not reaped yet, so the group id is
        still its own; leftovers of a leader that exited are killed too), then reaps it and
        closes its output files. Returns (exit code (negative: killed by that signal), stdout,
        stderr); the output is read only with `read` (else empty)."""
        proc, out, err, _ = self._run
        self._run = None
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        code = proc.wait()
        if self.guard is not None:
            self.guard.forget(proc.pid)
        try:
            if not read:
                return code, b"", b""
            out.seek(0)
            err.seek(0)
            return code, out.read(), err.read()
        finally:
            out.close()
            err.close()


_POLL_SECONDS = 0.05


def _exited(pid):
    """Whether child pid has exited, without reaping it (waitid WNOWAIT)."""
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return info is not None and info.si_pid != 0


class HostHealth:
    def __init__(self, cooldown=None, clock=time.monotonic, rng=None):
        self.cooldown = cooldown  # (min, max) seconds, or None: blacklisted for good
        self.clock = clock
        self.rng = rng or random.Random()
        self.failures = {}  # host -> number of failed workers
        self.blacklistings = {}  # host -> how often it was blacklisted
        self.until = {}  # host -> clock time its blacklisting ends (inf: never)

    def record_failure(self, host, only_host=False):
        """Counts a failed worker of host and blacklists the host, unless only_host (no other
        host the job could use now) and this is its first failure. Returns the cool-down in
        seconds: 0 (forgiven), a period, or inf (for the rest of the job). A failure while the
        host cools down changes nothing, as in horovodrun: it returns what is left of the
        period."""
        n = self.failures.get(host, 0) + 1
        self.failures[host] = n
        if only_host and n == 1:
            return 0.0
        left = self.until.get(host, 0.0) - self.clock()
        if left > 0:
            return left
        k = self.blacklistings.get(host, 0) + 1
        self.blacklistings[host] = k
        if self.cooldown is None:
            period = float("inf")
        else:
            lo, hi = self.cooldown
            period = max(lo, min(hi, lo * 2 ** k + self.rng.uniform(0, lo)))
        self.until[host] = self.clock() + period
        return period

    def usable(self, host):
        """Whether a new worker may start on host now."""
        return self.clock() >= self.until.get(host, 0.0)

    def blacklisted_for_good(self, host):
        """Whether host gets no new worker for the rest of the job."""
        return self.until.get(host, 0.0) == float("inf")

    def blacklisted(self):
        now = self.clock()
        return sorted(h for h, t in self.until.items() if now < t)
