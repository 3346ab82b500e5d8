# SPDX-License-Identifier: Apache-2.0
"""The orphan guard: stops the local ranks when kolorun dies without stopping them (kill -9, the
OOM killer), so that no rank and no process a rank started outlives the launcher.

Local ranks run in their own sessions (workers.py), so nothing of kolorun's reaches them when
it dies. The guard is a small helper process that kolorun starts (OrphanGuard) in a session of
its own (a signal to kolorun's process group, or the terminal's, does not reach it), with a pipe
on its stdin of which only kolorun holds the write end (close-on-exec, never passed to a rank).
kolorun writes one line per local rank it started ("+PID STARTTIME"; the rank's pid is its
process group's id) and one per rank it reaped ("-PID"), and "done" once it stopped the job
itself. End of file without "done" means that kolorun is gone, however it died (the same rule
as ssh.remote_script's watcher for remote ranks): the guard sends SIGTERM to every group it was
told about, SIGKILL after the kill grace to what is left, and exits.

A group's id is used only while its leader is the process kolorun registered (same start time
in /proc) or is gone with members left; a pid that a new process took is never signalled.

Threading: OrphanGuard belongs to kolorun's main thread. Blocking: writes to a pipe the guard
drains at once; close() waits at most 2 s for the guard to exit. Errors: a guard that cannot be
started or has died only costs that protection (start() says so once); it never fails the job.
"""

import os
import signal
import subprocess
import sys
import time

_PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_MAIN = ("import sys; sys.path.insert(0, sys.argv[1]); "
         "from kolo_launcher.orphan_guard import serve; serve(float(sys.argv[2]))")
POLL_SECONDS = 0.05


def start_time(pid):
    """The start time of process pid (clock ticks since boot, /proc/PID/stat field 22), or None
    when it does not exist (or /proc is missing)."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rfind(b")") + 2:].split()  # from field 3 (state) on
    return int(fields[19]) if len(fields) > 19 else None


class OrphanGuard:
    """kolorun's end of the guard (see the module doc)."""

    def __init__(self, grace, console):
        self._grace = grace
        self._console = console
        self._proc = None

    def start(self):
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-I", "-c", _MAIN, _PACKAGE_PARENT, repr(float(self._grace))],
                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, start_new_session=True,
                close_fds=True)
        except OSError as e:
            self._console.message("cannot start the orphan guard (%s): local ranks would outlive "
                                  "a killed kolorun" % e)
        return self

    def watch(self, pid):
        """Registers a local rank's process (and group) right after it started."""
        started = start_time(pid)
        if started is not None:
            self._send("+%d %d\n" % (pid, started))

    def forget(self, pid):
        """The rank was reaped: its pid (and group id) may be reused from now on."""
        self._send("-%d\n" % pid)

    def close(self):
        """kolorun stopped the job itself: the guard exits without signalling anything."""
        if self._proc is None:
            return
        self._send("done\n")
        try:
            self._proc.stdin.close()
        except OSError:
            pass
        try:
            self._proc.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._proc = None

    def _send(self, line):
        if self._proc is None or self._proc.stdin.closed:
            return
        try:
            self._proc.stdin.write(line.encode())
            self._proc.stdin.flush()
        except OSError:
            self._console.message("the orphan guard exited early: local ranks would outlive a "
                                  "killed kolorun")
            self._proc.stdin.close()


# ---- the guard process ---------------------------------------------------------------------
def serve(grace, stdin=None, launcher=None):
    """The guard's main loop: reads registrations until end of file; stops the registered
    groups unless "done" came first. Returns the pids it signalled (for tests)."""
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    stdin = sys.stdin.buffer if stdin is None else stdin
    launcher = os.getppid() if launcher is None else launcher
    watched = {}
    for raw in stdin:
        line = raw.decode("ascii", "replace").strip()
        if line == "done":
            return []
        if line.startswith("+"):
            pid, started = line[1:].split()
            watched[int(pid)] = int(started)
        elif line.startswith("-"):
            watched.pop(int(line[1:]), None)
    return stop_groups(watched, grace, launcher)


def _ours(pid, started):
    """Whether group pid is still the one registered: its leader is the same process (even a
    zombie), or the leader is gone (its group then lives on in its members only)."""
    now = start_time(pid)
    return now is None or now == started


def stop_groups(watched, grace, launcher):
    """SIGTERM to each registered group that is still ours, SIGKILL after `grace` seconds to
    those with a live member left. Returns the group ids signalled."""
    from .workers import live_process_groups  # pylint: disable=import-outside-toplevel
    groups = [pid for pid, started in sorted(watched.items()) if _ours(pid, started)]
    live = live_process_groups()
    groups = [g for g in groups if live is None or g in live]
    if not groups:
        return []
    _say("kolorun (pid %d) exited without stopping its local ranks; the orphan guard sends "
         "SIGTERM to %d process group%s, SIGKILL after %g s" % (
             launcher, len(groups), "" if len(groups) == 1 else "s", grace))
    _signal_all(groups, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        live = live_process_groups()
        if live is not None and not any(g in live for g in groups):
            return groups
        time.sleep(POLL_SECONDS)
    _signal_all(groups, signal.SIGKILL)
    return groups


def _signal_all(groups, sig):
    for g in groups:
        try:
            os.killpg(g, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _say(text):
    try:
        sys.stderr.write("kolorun: %s\n" % text)
        sys.stderr.flush()
    except (OSError, ValueError):
        pass  # nobody reads kolorun's stderr any more
