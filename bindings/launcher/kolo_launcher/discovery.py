"""Elastic mode's view of the hosts: what the discovery script offers, and which hosts failed.

HostDiscovery runs --host-discovery-script (through the shell, with a time limit) and parses
its output: one host a line, "host:slots" or "host" (then --slots-per-host slots); blank lines
and '#' comments are skipped. A script that fails, times out or prints a bad line keeps the
last good list (the error is returned once, for the launcher to print); `ok` says whether any
run succeeded (the launcher fails the job when the first run fails: elastic_run.py). With
-H/--hostfile instead, the list is fixed.

HostHealth is the blacklist. A worker that fails blacklists its host: no new worker starts
there, for the cool-down when --blacklist-cooldown-range MIN MAX is given (MIN, doubled at each
further blacklisting of that host, at most MAX), else for the rest of the job (horovodrun's
rule). Unlike horovodrun, one death never blacklists the only host the job can use: its first
failure is forgiven (a replacement may start there at once), a second one blacklists it as any
other (a host that keeps failing is still shut out). And the host's other workers are never
removed: they are healthy processes (scenario 0 of issue 14).

Both are owned by the launcher's main thread; nothing here is thread-safe or blocks longer
than the script's time limit.
"""

import random
import subprocess
import time

from .hosts import HostListError, parse_host_entry

SCRIPT_TIMEOUT = 30.0


def parse_discovery_output(text, slots_per_host):
    """[(host, slots)] in the order printed; a host listed twice keeps its first line. Raises
    HostListError naming the bad line."""
    hosts = []
    seen = set()
    for number, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        where = "discovery script line %d" % number
        entry = parse_host_entry(line, where)
        has_slots = ("]:" in line) if line.startswith("[") else (":" in line)
        slots = entry.slots if has_slots else slots_per_host
        if entry.name not in seen:
            seen.add(entry.name)
            hosts.append((entry.name, slots))
    return hosts


class HostDiscovery:
    def __init__(self, script=None, fixed=None, slots_per_host=1, env=None):
        self.script = script
        self.fixed = [(h.name, h.slots) for h in (fixed or [])]
        self.slots_per_host = slots_per_host
        self.env = env
        self.hosts = list(self.fixed) if script is None else []
        self.ok = script is None  # whether some run succeeded

    def poll(self):
        """Runs the script once; returns (hosts, error text or None)."""
        if self.script is None:
            return self.hosts, None
        try:
            r = subprocess.run(self.script, shell=True, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, timeout=SCRIPT_TIMEOUT, env=self.env,
                               stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return self.hosts, "host discovery script timed out after %g s" % SCRIPT_TIMEOUT
        except OSError as e:
            return self.hosts, "cannot run the host discovery script: %s" % e
        if r.returncode != 0:
            err = r.stderr.decode("utf-8", "replace").strip().splitlines()
            return self.hosts, "host discovery script exited with status %d%s" % (
                r.returncode, (": " + err[-1]) if err else "")
        try:
            self.hosts = parse_discovery_output(r.stdout.decode("utf-8", "replace"),
                                                self.slots_per_host)
        except HostListError as e:
            return self.hosts, str(e)
        self.ok = True
        return self.hosts, None


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
        seconds: 0 (forgiven), a period, or inf (for the rest of the job)."""
        n = self.failures.get(host, 0) + 1
        self.failures[host] = n
        if only_host and n == 1:
            return 0.0
        k = self.blacklistings.get(host, 0) + 1
        self.blacklistings[host] = k
        if self.cooldown is None:
            period = float("inf")
        else:
            lo, hi = self.cooldown
            period = min(hi, lo * (2 ** (k - 1)))
        self.until[host] = max(self.until.get(host, 0.0), self.clock() + period)
        return period

    def usable(self, host):
        """Whether a new worker may start on host now."""
        return self.clock() >= self.until.get(host, 0.0)

    def blacklisted(self):
        now = self.clock()
        return sorted(h for h, t in self.until.items() if now < t)
