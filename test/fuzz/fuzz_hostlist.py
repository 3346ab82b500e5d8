#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Coverage-guided mutation fuzzer for kolorun's host-list parsers (not libFuzzer).

Debian packages no atheris, so this is a small fuzzer in the standard library: it replays the
seed corpus, then mutates corpus entries (character edits, tokens from a dictionary, splices),
keeping a mutant when it reaches a new line-to-line edge in kolo_launcher/hosts.py or
topology.py (measured with sys.settrace). The random generator is seeded, so --runs N is fully
reproducible; --seconds N stops after a time budget instead.

Every input goes to parse_hosts (-H) and parse_hostfile_text (--hostfile). Each must either raise
HostListError (a ValueError with the user's message) or return a host list such that:
  - it is non-empty, names are unique, match the documented name syntax and never start with
    '-' (they reach ssh as an argument), slots are ints in 1..2^20;
  - printing it back as "-H" text ("[v6]:n" for names with ':') and as a hostfile ("name slots=n")
    and parsing again gives the same list;
  - rank placement agrees with the slots: topology.assign(hosts, sum of slots) puts exactly
    `slots` ranks on every host with local ranks 0..slots-1, cross ranks count the hosts having
    that local rank, and one process more than the slots raises TopologyError.
Anything else is a finding: the input is written to --artifacts (crash-<sha1>) and the exit
status is 1. Usage:
  fuzz_hostlist.py [--seconds S | --runs N] [--seed K] [--artifacts DIR] CORPUS_DIR...
"""

import argparse
import hashlib
import os
import random
import re
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bindings", "launcher"))

from kolo_launcher import hosts as hosts_mod  # noqa: E402
from kolo_launcher import topology  # noqa: E402
from kolo_launcher.hosts import HostListError, HostSlots  # noqa: E402

NAME = re.compile(r"[A-Za-z0-9_:][A-Za-z0-9_.%@:-]*")
MAX_SLOTS = 1 << 20
# Placing more ranks than this would make one check slow; bigger lists check a prefix only.
MAX_PLACED = 512

TOKENS = [",", ":", "[", "]", "slots=", "slot=", "max_slots=4", "#", "\n", "\r\n", " ", "\t",
          "@", "%", "-", ".", "_", "::1", "fe80::1%eth0", "localhost", "user@", "0", "1", "2",
          "1048576", "1048577", "999999999", "0000000001", "\u0661", "\uff11", "\u00b2",
          "\u2028", "\x85", "\x0b", "\x1c", "\u00a0", "\u00e9", "\x00", "=", "==", "[::1]:2"]


class Finding(Exception):
    pass


def require(cond, what):
    if not cond:
        raise Finding(what)


def format_dash_h(hosts):
    return ",".join(("[%s]:%d" if ":" in h.name else "%s:%d") % (h.name, h.slots) for h in hosts)


def format_hostfile(hosts):
    return "".join("%s slots=%d\n" % (h.name, h.slots) for h in hosts)


def check_placement(hosts):
    total = sum(h.slots for h in hosts)
    np = min(total, MAX_PLACED)
    slots = topology.assign(hosts, np)
    require(len(slots) == np, "assign placed %d ranks, asked for %d" % (len(slots), np))
    require([s.rank for s in slots] == list(range(np)), "ranks are not 0..np-1")
    expected_on = {}
    left = np
    for h in hosts:  # ranks fill hosts in list order
        take = min(h.slots, left)
        if take > 0:
            expected_on[h.name] = take
        left -= take
    with_local = {}  # local rank -> the hosts that received it, in list order
    for h in hosts:
        for i in range(expected_on.get(h.name, 0)):
            with_local.setdefault(i, []).append(h.name)
    placed_on = {}
    for s in slots:
        placed_on[s.host] = placed_on.get(s.host, 0) + 1
        require(s.size == np, "size %d != np %d" % (s.size, np))
        require(s.local_size == expected_on.get(s.host), "local_size of %r" % s.host)
        require(0 <= s.local_rank < s.local_size, "local_rank out of range")
        have_local = with_local.get(s.local_rank, [])
        require(s.cross_size == len(have_local), "cross_size for local rank %d" % s.local_rank)
        require(0 <= s.cross_rank < len(have_local) and have_local[s.cross_rank] == s.host,
                "cross_rank of rank %d" % s.rank)
    require(placed_on == expected_on, "placement %r != %r" % (placed_on, expected_on))
    if np == total:
        require(all(placed_on[h.name] == h.slots for h in hosts), "a host's slots are not used")
        try:
            topology.assign(hosts, total + 1)
        except topology.TopologyError:
            pass
        else:
            raise Finding("assign accepted more processes than slots")


def check_hosts(result, parse_again, fmt, what):
    require(isinstance(result, list) and result, "%s returned %r" % (what, result))
    names = set()
    for h in result:
        require(isinstance(h, HostSlots), "%s: %r is not HostSlots" % (what, h))
        require(isinstance(h.name, str) and NAME.fullmatch(h.name), "%s: name %r" % (what, h.name))
        require(type(h.slots) is int and 1 <= h.slots <= MAX_SLOTS,
                "%s: slots %r" % (what, h.slots))
        require(h.name not in names, "%s: %r listed twice" % (what, h.name))
        names.add(h.name)
    text = fmt(result)
    try:
        again = parse_again(text)
    except HostListError as e:
        raise Finding("%s: printed list %r does not parse: %s" % (what, text, e)) from None
    require(again == result, "%s: %r reparsed as %r" % (what, text, again))
    check_placement(result)


def run_one(text):
    """Raises Finding (or any unexpected exception) for a bad outcome."""
    for what, parse in (("-H", hosts_mod.parse_hosts),
                        ("hostfile", lambda t: hosts_mod.parse_hostfile_text(t, "fuzz"))):
        try:
            result = parse(text)
        except HostListError as e:
            require(isinstance(e, ValueError) and str(e), "%s: empty error" % what)
            continue
        check_hosts(result, hosts_mod.parse_hosts, format_dash_h, what + " (as -H)")
        check_hosts(result, lambda t: hosts_mod.parse_hostfile_text(t, "fuzz"), format_hostfile,
                    what + " (as hostfile)")


class Coverage:
    """Line-to-line edges executed in the parser modules."""

    def __init__(self):
        self.files = {os.path.abspath(hosts_mod.__file__), os.path.abspath(topology.__file__)}
        self.edges = set()
        self.current = set()

    def _local(self, frame, event, arg):
        if event == "line":
            key = (frame.f_code, frame.f_lineno)
            self.current.add((self._prev.get(frame), key))
            self._prev[frame] = key
        return self._local

    def _global(self, frame, event, arg):
        if os.path.abspath(frame.f_code.co_filename) in self._files_seen:
            return self._local
        return None

    def run(self, fn, arg):
        self.current = set()
        self._prev = {}
        self._files_seen = self.files
        sys.settrace(self._global)
        try:
            fn(arg)
        finally:
            sys.settrace(None)
        new = self.current - self.edges
        self.edges |= new
        return bool(new)


def mutate(rng, text, corpus):
    s = list(text)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(7)
        pos = rng.randint(0, len(s))
        if op == 0 and s:  # delete a range
            del s[pos:pos + rng.randint(1, 4)]
        elif op == 1:  # insert a token
            s[pos:pos] = list(rng.choice(TOKENS))
        elif op == 2 and s:  # replace a character
            s[min(pos, len(s) - 1)] = chr(rng.choice([rng.randrange(32, 127), rng.randrange(0, 32),
                                                      rng.randrange(128, 0x3000)]))
        elif op == 3 and s:  # duplicate a slice
            a = rng.randrange(len(s))
            s[pos:pos] = s[a:a + rng.randint(1, 8)]
        elif op == 4:  # splice another entry
            other = rng.choice(corpus)
            a = rng.randint(0, len(other))
            s[pos:] = list(other[a:])
        elif op == 5:  # a digit run (slot counts around the limits)
            s[pos:pos] = list(str(rng.choice([0, 1, 2, 9, MAX_SLOTS, MAX_SLOTS + 1,
                                              rng.randrange(10 ** 10)])))
        else:  # swap two characters
            if len(s) > 1:
                a, b = rng.randrange(len(s)), rng.randrange(len(s))
                s[a], s[b] = s[b], s[a]
    return "".join(s)[:512]


def load(dirs):
    corpus = []
    for d in dirs:
        for name in sorted(os.listdir(d)):
            with open(os.path.join(d, name), "rb") as f:
                corpus.append((name, f.read().decode("utf-8", errors="replace")))
    return corpus


def report(text, error, artifacts):
    digest = hashlib.sha1(text.encode("utf-8", errors="surrogatepass")).hexdigest()
    path = os.path.join(artifacts, "crash-" + digest)
    os.makedirs(artifacts, exist_ok=True)
    with open(path, "wb") as f:
        f.write(text.encode("utf-8", errors="surrogatepass"))
    print("fuzz_hostlist: FINDING on input %r (saved as %s):\n%s" % (text, path, error),
          file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=None)
    ap.add_argument("--runs", type=int, default=None)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--artifacts", default=".")
    ap.add_argument("corpus", nargs="+")
    a = ap.parse_args()
    if a.seconds is None and a.runs is None:
        a.runs = 1000
    rng = random.Random(a.seed)
    cov = Coverage()
    seeds = load(a.corpus)
    corpus = []
    start = time.monotonic()
    execs = 0

    def execute(text):
        nonlocal execs
        execs += 1
        try:
            return cov.run(run_one, text)
        except Exception:  # Finding, or any exception the parsers were not allowed to raise
            report(text, traceback.format_exc(), a.artifacts)
            sys.exit(1)

    for _, text in seeds:
        execute(text)
        corpus.append(text)
    if not corpus:
        corpus.append("")
    print("fuzz_hostlist: replayed %d seeds, %d edges" % (len(seeds), len(cov.edges)))
    while True:
        if a.runs is not None and execs >= len(seeds) + a.runs:
            break
        if a.seconds is not None and time.monotonic() - start >= a.seconds:
            break
        text = mutate(rng, rng.choice(corpus), corpus)
        if execute(text):
            corpus.append(text)
    elapsed = time.monotonic() - start
    print("fuzz_hostlist: %d executions in %.1f s (%.0f/s), corpus %d (+%d new), %d edges, "
          "no findings" % (execs, elapsed, execs / max(elapsed, 1e-9), len(corpus),
                           len(corpus) - len(seeds), len(cov.edges)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
