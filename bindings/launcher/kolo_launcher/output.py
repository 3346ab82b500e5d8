# SPDX-License-Identifier: Apache-2.0
"""Forwarding worker output to kolorun's terminal, one whole line at a time, with a rank prefix.

"[3]<stdout>:text" goes to kolorun's stdout and "[3]<stderr>:text" to its stderr (horovodrun's
format, so log scrapers keep working). One thread multiplexes every pipe with selectors and
writes complete lines only, so lines of different ranks never interleave mid-line. A line ends
at "\n", "\r\n" or a lone "\r" (a progress bar's update, forwarded with its prefix and its
"\r" as horovodrun's forward_stream does, not held until the next "\n"); a line is forwarded
whole up to 16 MiB (_MAX_LINE: a longer one is cut there, each piece on a line of its own, so a
rank that never prints a newline cannot make kolorun hold unbounded memory), and a last line
without a newline gets one at EOF. kolorun's own messages go through the same Console lock.

-prefix-timestamp (OutputPump(timestamp=True)): each line gets the local time in front of its
prefix, "Mon Jan  6 10:00:00 2025[3]<stdout>:text", horovodrun's format (time.asctime() of when
the line is forwarded, as its prefix_stream adds it), on the terminal and in the files alike.

--output-filename (a pipe's `copy`): as horovodrun's gloo_run, which writes each rank's output
to MultiFile([sys.stdout, file]), every line goes to the terminal and to the rank's file, the
same prefixed text in both (horovodrun's forward_stream adds the prefix before either write); a
last line without a newline is written to the file as it is. The pump owns the file and closes
it at the pipe's end; a file that cannot be written is said once and dropped (the terminal copy
goes on).

Threading: the pump thread owns the pipes and their buffers; Console is shared (one lock).
Blocking: the pump blocks in select() only; writes to kolorun's own stdout/stderr may block
when nobody reads them (as any program's). Errors: a closed terminal is ignored (Console).
"""

import os
import re
import selectors
import sys
import threading
import time

_MAX_LINE = 16 * 1024 * 1024
_DRAIN_LIMIT = 60.0  # finish(): the longest it drains output that is still moving
_LINE_END = re.compile(b"(\r\n|\r|\n)")


class Console:
    """kolorun's stdout/stderr, shared by the pump thread and the main thread."""

    def __init__(self, out=None, err=None):
        self._out = out if out is not None else sys.stdout.buffer
        self._err = err if err is not None else sys.stderr.buffer
        self._lock = threading.Lock()

    def write(self, data, to_err=False):
        stream = self._err if to_err else self._out
        with self._lock:
            try:
                stream.write(data)
                stream.flush()
            except (BrokenPipeError, ValueError, OSError):
                pass  # nobody reads kolorun's output any more; the job goes on

    def message(self, text):
        """A line from kolorun itself, on stderr."""
        self.write(("kolorun: %s\n" % text).encode("utf-8", "replace"), to_err=True)


def split_lines(buf):
    """([complete lines, each with its end], the rest). A "\r" at the very end stays in the
    rest (a "\n" may follow); an empty segment before a "\r" is dropped (a progress bar's
    leading "\r"); a rest longer than _MAX_LINE is cut into lines of _MAX_LINE bytes."""
    parts = _LINE_END.split(buf)
    rest = parts.pop()
    if parts and parts[-1] == b"\r" and not rest:
        rest = parts.pop(-2) + parts.pop()
    lines = [seg + end for seg, end in zip(parts[0::2], parts[1::2]) if seg or end != b"\r"]
    while len(rest) > _MAX_LINE:
        lines.append(rest[:_MAX_LINE] + b"\n")
        rest = rest[_MAX_LINE:]
    return lines, rest


def stamp():
    """horovodrun's -prefix-timestamp text: the local time as time.asctime() writes it."""
    return time.asctime(time.localtime()).encode()


class OutputPump:
    def __init__(self, console, timestamp=False):
        self._console = console
        self._timestamp = timestamp
        self._sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        self._sel.register(self._wake_r, selectors.EVENT_READ, None)
        self._open = 0
        self._lock = threading.Lock()
        self._stop = False
        self._moved = time.monotonic()  # when output last moved (read or written), for finish()
        self._writing = False  # the pump thread is inside a write to kolorun's output
        self._thread = threading.Thread(target=self._run, name="kolo-output", daemon=True)

    def add(self, fileobj, rank, to_err, copy=None):
        """Takes ownership of a pipe's read end (a file object from Popen) and of `copy`, a file
        opened for writing (binary) that gets the same lines (--output-filename), or None."""
        fd = fileobj.fileno()
        os.set_blocking(fd, False)
        prefix = ("[%d]<%s>:" % (rank, "stderr" if to_err else "stdout")).encode()
        with self._lock:
            self._open += 1
        self._sel.register(fd, selectors.EVENT_READ, [fileobj, prefix, to_err, b"", copy])

    def start(self):
        self._thread.start()

    def finish(self, timeout):
        """Waits until every pipe reached EOF, then stops. The wait ends early only after
        `timeout` seconds in which no output moved and no write was under way (a process that
        escaped its group and holds a pipe open, silent): output that still flows to a slow
        reader of kolorun's own output (a pipe into a pager, a slow log shipper) is drained,
        for up to _DRAIN_LIMIT seconds. Returns False when some pipe was still open at the end."""
        start = time.monotonic()
        while True:
            with self._lock:
                if self._open == 0:
                    break
            now = time.monotonic()
            if now - start >= max(timeout, _DRAIN_LIMIT):
                break
            if now - start >= timeout and not self._writing and now - self._moved >= timeout:
                break
            time.sleep(0.02)
        with self._lock:
            clean = self._open == 0
            self._stop = True
        os.write(self._wake_w, b"x")
        self._thread.join(0.5)
        return clean

    def _run(self):
        try:
            while True:
                with self._lock:
                    if self._stop:
                        break
                for key, _ in self._sel.select(timeout=0.5):
                    if key.data is None:
                        try:
                            os.read(self._wake_r, 64)
                        except BlockingIOError:
                            pass
                        continue
                    self._read(key)
        finally:
            for key in list(self._sel.get_map().values()):
                if key.data is not None:
                    self._flush_rest(key.data)
                    key.data[0].close()
                    self._close_copy(key.data)
            self._sel.close()
            os.close(self._wake_r)
            os.close(self._wake_w)

    def _read(self, key):
        state = key.data
        try:
            chunk = os.read(key.fd, 65536)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            self._flush_rest(state)
            self._sel.unregister(key.fd)
            state[0].close()
            self._close_copy(state)
            with self._lock:
                self._open -= 1
            return
        self._moved = time.monotonic()
        lines, state[3] = split_lines(state[3] + chunk)
        if lines:
            prefix, to_err = state[1], state[2]
            self._writing = True  # a write that a slow reader holds up is progress too
            try:
                if self._timestamp:
                    prefix = stamp() + prefix
                text = b"".join(prefix + line for line in lines)
                self._console.write(text, to_err)
                self._write_copy(state, text)
            finally:
                self._moved = time.monotonic()  # first: finish() must never see neither
                self._writing = False

    def _flush_rest(self, state):
        if state[3]:
            prefix = (stamp() if self._timestamp else b"") + state[1]
            self._console.write(prefix + state[3] + b"\n", state[2])
            self._write_copy(state, prefix + state[3])
            state[3] = b""

    def _write_copy(self, state, data):
        copy = state[4]
        if copy is None:
            return
        try:
            copy.write(data)
            copy.flush()  # the file follows the terminal (tail -f), as horovodrun's MultiFile
        except (OSError, ValueError) as e:
            state[4] = None
            self._console.message("cannot write %s: %s; its output goes to the terminal only"
                                  % (getattr(copy, "name", "an output file"),
                                     getattr(e, "strerror", None) or e))
            try:
                copy.close()
            except OSError:
                pass

    @staticmethod
    def _close_copy(state):
        copy, state[4] = state[4], None
        if copy is not None:
            try:
                copy.close()
            except OSError:
                pass
