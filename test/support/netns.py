# SPDX-License-Identifier: Apache-2.0
"""Two "hosts" in network namespaces for multi-host tests: hosts A and B (one address each) and a
launcher namespace L, joined by veth pairs to a bridge in L:

    L: bridge kolo0 <subnet>.254/24 ── veth ── A: kolo0 <subnet>.1/24
                                    └─ veth ── B: kolo0 <subnet>.2/24

Every address and link lives in namespaces made here (nothing in the root namespace is touched),
and on leaving the context, whatever happens, the processes still inside them are killed and they
are deleted; no traffic leaves them. Used by test/launcher/test_netns.py and
test/fault/test_probes.py (their pytest fixtures skip on Unavailable) and by bench/scaling.py.
Needs root and iproute2's `ip`."""

import contextlib
import os
import shutil
import signal
import subprocess

IP = shutil.which("ip") or "/usr/sbin/ip"


class Unavailable(Exception):
    """The network cannot be built here (not root, no ip, a failed ip command): skip."""


def ip(*argv):
    r = subprocess.run([IP] + list(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=30)
    if r.returncode != 0:
        raise RuntimeError("ip %s: %s" % (" ".join(argv), r.stderr.strip()))


@contextlib.contextmanager
def two_hosts(tag, subnet):
    """Yields {"L": ..., "A": ..., "B": ...}, the namespaces' names ("<tag>l" ...), with the
    addresses above on `subnet` ("10.99.0"). Raises Unavailable when they cannot be made."""
    if os.geteuid() != 0:
        raise Unavailable("network namespaces need root")
    if not os.path.exists(IP):
        raise Unavailable("needs iproute2's ip")
    names = {"L": tag + "l", "A": tag + "a", "B": tag + "b"}
    created = []

    def delete():
        # A rank or launcher left inside (a job that timed out) would keep its namespace's
        # network alive after the name is gone: stop them first.
        for n in created:
            r = subprocess.run([IP, "netns", "pids", n], stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, text=True, timeout=30)
            for pid in r.stdout.split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (OSError, ValueError):
                    pass
        for n in created:
            subprocess.run([IP, "netns", "del", n], timeout=30)

    try:
        for n in names.values():
            # A namespace left by an earlier run under the same pid-derived tag goes first.
            subprocess.run([IP, "netns", "del", n], stderr=subprocess.DEVNULL, timeout=30)
            ip("netns", "add", n)
            created.append(n)
        L = names["L"]
        ip("-n", L, "link", "set", "lo", "up")
        ip("-n", L, "link", "add", "kolo0", "type", "bridge")
        ip("-n", L, "addr", "add", subnet + ".254/24", "dev", "kolo0")
        ip("-n", L, "link", "set", "kolo0", "up")
        for host, last in (("A", 1), ("B", 2)):
            ns, veth = names[host], "v" + host.lower()
            ip("-n", L, "link", "add", veth, "type", "veth", "peer", "name", "kolo0", "netns", ns)
            ip("-n", L, "link", "set", veth, "master", "kolo0")
            ip("-n", L, "link", "set", veth, "up")
            ip("-n", ns, "addr", "add", "%s.%d/24" % (subnet, last), "dev", "kolo0")
            ip("-n", ns, "link", "set", "kolo0", "up")
            ip("-n", ns, "link", "set", "lo", "up")
    except RuntimeError as e:
        delete()
        raise Unavailable("cannot build the test network (%s)" % e)
    try:
        yield names
    finally:
        delete()


def fixture_body(tag, subnet, skip):
    """A pytest fixture's generator body over two_hosts: `skip` (pytest.skip) on Unavailable."""
    hosts = two_hosts(tag, subnet)
    try:
        names = hosts.__enter__()
    except Unavailable as e:
        skip(str(e))
    try:
        yield names
    finally:
        hosts.__exit__(None, None, None)
