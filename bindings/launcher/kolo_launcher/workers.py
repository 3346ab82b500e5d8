# SPDX-License-Identifier: Apache-2.0
"""One rank's process as kolorun sees it.

Every rank starts in its own session (start_new_session), so its process id is also the id of
a process group holding everything it spawns; signals go to the whole group, which is how
grandchildren (data loader workers, shells' children) are stopped too. Terminal Ctrl-C reaches
only kolorun, which forwards it.

Exit detection uses waitid(WNOWAIT): it reports the exit without reaping, so the group id
cannot be reused by an unrelated process while kolorun may still signal the group. The
process is reaped once, in reap(), after the last group signal.

A local rank bound to cores (binding.py) is started while the launcher's thread runs on those
CPUs only: the child inherits the affinity at fork, before it executes anything.

A local rank is registered with kolorun's orphan guard (orphan_guard.py) once started and
forgotten once reaped, so that its group is stopped even when kolorun is killed -9.

A remote rank's local process is the ssh client (or the remote-shell template). Its stdin is
the watcher channel of ssh.remote_script: request_stop() writes the signal name and closes it,
and the remote side stops the rank; the local group is only killed when that takes too long.

stdin: as under mpirun, rank 0 (when it runs on this machine) reads kolorun's own stdin, shared
(not copied: the rank reads the same file description), and every other rank reads /dev/null
(launcher_stdin_usable says when kolorun passes it). A rank runs in a session of its own, with
no controlling terminal, so reading a terminal never stops it with SIGTTIN (job control applies
only to a process of the terminal's session); this is why kolorun passes a terminal only when
it is the terminal's foreground job, as mpirun reads it only then: a job started in the
background (`kolorun ... &`) must not take the shell's input.
"""

import collections
import os
import signal
import subprocess
from typing import NamedTuple, Optional


class ExitStatus(NamedTuple):
    code: Optional[int]  # exit code, or None when killed by a signal
    signal: Optional[int]

    @property
    def ok(self):
        return self.code == 0

    def describe(self, remote=False):
        if self.signal is not None:
            return "was killed by signal %d (%s)" % (self.signal, _signame(self.signal))
        text = "exited with status %d" % self.code
        if remote and 128 < self.code < 128 + 65:
            text += " (128+%d: it probably died on %s)" % (self.code - 128,
                                                           _signame(self.code - 128))
        if remote and self.code == 255:
            # horovodrun checks ssh to every host first ("could not connect to some hosts via
            # ssh"); kolorun starts the rank at once, so it says what 255 usually means
            text += (" (255 is ssh's status when it cannot reach the host or log in without a "
                     "prompt: see ssh's message above)")
        return text

    def shell_code(self):
        """The conventional shell status: the exit code, or 128+N for signal N."""
        return self.code if self.signal is None else 128 + self.signal


def _signame(num):
    try:
        return signal.Signals(num).name
    except ValueError:
        return "signal %d" % num


class Worker:
    """Not thread-safe: the launcher's main thread owns every Worker."""

    def __init__(self, slot, argv, env, remote, stdout, stderr, cpus=None, guard=None,
                 stdin=False):
        self.slot = slot
        self.argv = argv
        self.env = env
        self.remote = remote
        self._stdout = stdout
        self._stderr = stderr
        self.proc = None
        self.status = None  # ExitStatus once exited
        self.reaped = False
        self.stop_requested = False
        self.files = []  # output files kolorun opened for the rank (closed once it started)
        self.cpus = cpus  # the CPUs the rank is bound to, or None
        self.guard = guard  # the OrphanGuard that stops the rank if kolorun dies (local ranks)
        self.stdin = stdin  # a local rank: True reads kolorun's stdin, False /dev/null

    @property
    def rank(self):
        return self.slot.rank

    @property
    def host(self):
        return self.slot.host

    def start(self):
        """Starts the process; raises OSError (e.g. the program does not exist)."""
        own = None
        if self.cpus:
            own = os.sched_getaffinity(0)
            os.sched_setaffinity(0, self.cpus)  # this thread only; the child inherits it
        if self.remote:
            stdin = subprocess.PIPE  # the watcher channel
        else:
            stdin = None if self.stdin else subprocess.DEVNULL  # None: kolorun's own
        try:
            self.proc = subprocess.Popen(
                self.argv, env=self.env, stdin=stdin, stdout=self._stdout, stderr=self._stderr,
                start_new_session=True, close_fds=True)
        finally:
            if own is not None:
                os.sched_setaffinity(0, own)
        if self.guard is not None:
            self.guard.watch(self.proc.pid)

    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    def poll(self):
        """The ExitStatus once the process has exited (without reaping it), else None."""
        if self.status is not None or self.proc is None:
            return self.status
        try:
            info = os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            info = None
            self._reaped()
            self.status = ExitStatus(code=255, signal=None)
            return self.status
        if info is None or info.si_pid == 0:
            return None
        if info.si_code == os.CLD_EXITED:
            self.status = ExitStatus(code=info.si_status, signal=None)
        else:
            self.status = ExitStatus(code=None, signal=info.si_status)
        return self.status

    def signal_group(self, sig):
        """Sends sig to the rank's process group (also after it exited, for leftovers), until
        it is reaped. Returns False when nothing received it."""
        if self.proc is None or self.reaped:
            return False
        try:
            os.killpg(self.proc.pid, sig)
            return True
        except (ProcessLookupError, PermissionError):
            return False

    def request_stop(self, sig):
        """Asks the rank to stop with sig: remote ranks through the watcher channel (and the
        local ssh client is left to finish), local ranks by signalling their group."""
        self.stop_requested = True
        if self.remote:
            self._close_stdin(_signame(sig).replace("SIG", ""))
            if self.poll() is not None:
                self.signal_group(sig)
        else:
            self.signal_group(sig)

    def _close_stdin(self, word=None):
        stdin = self.proc.stdin if self.proc else None
        if stdin is None or stdin.closed:
            return
        try:
            if word:
                stdin.write(word.encode() + b"\n")
            stdin.close()
        except (BrokenPipeError, OSError):
            pass

    def reap(self):
        if self.proc is None or self.reaped:
            return
        self._close_stdin()
        try:
            self.proc.wait(timeout=0)
        except subprocess.TimeoutExpired:
            return
        self._reaped()

    def _reaped(self):
        self.reaped = True
        if self.guard is not None:
            self.guard.forget(self.proc.pid)


def launcher_stdin_usable(fd=0):
    """Whether rank 0 gets kolorun's stdin: it is open, and when it is a terminal kolorun is
    its foreground job (mpirun's rule: a background job must not read the shell's input)."""
    try:
        os.fstat(fd)
    except OSError:
        return False  # closed: the rank gets /dev/null instead of no stdin at all
    if not os.isatty(fd):
        return True
    try:
        return os.tcgetpgrp(fd) == os.getpgrp()
    except OSError:
        return False


def _process_states():
    """(state, process group id) of every process, from one scan of /proc (Linux), or None
    where /proc is not available."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return None
    out = []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry, "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # "pid (comm) state ppid pgrp ..."; comm may contain spaces and parentheses.
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) >= 3:
            out.append((fields[0], int(fields[2])))
    return out


def live_process_groups():
    """The process groups that have a member other than a zombie, from one scan of /proc
    (Linux): a Counter of live members by group id (`pgid in groups` asks whether one is
    alive), or None where /proc is not available."""
    states = _process_states()
    if states is None:
        return None
    return collections.Counter(pgid for state, pgid in states if state != b"Z")


def process_group_stopped(pgid):
    """Whether a process of the process group `pgid` (a local worker's) is stopped (state T:
    SIGSTOP, SIGTSTP), so it cannot take part in a round."""
    if pgid is None:
        return False
    return any(state == b"T" and group == pgid for state, group in _process_states() or ())
