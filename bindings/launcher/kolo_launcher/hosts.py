# SPDX-License-Identifier: Apache-2.0
"""Host lists: parsing -H / --hostfile, deciding which hosts are this machine, addresses.

A host list is an ordered list of HostSlots; order matters (ranks fill hosts in list order).
Parsing raises HostListError (a ValueError) with a message fit for the user, and nothing else,
for any input text (the parsers are fuzzed).
"""

import fcntl
import ipaddress
import os
import re
import socket
import struct
from typing import List, NamedTuple, Optional


class HostListError(ValueError):
    pass


class HostSlots(NamedTuple):
    name: str
    slots: int


# Host names go to ssh as an argument: allow names, IPv4, user@host, and IPv6 (bracketed in
# "-H", bare in a hostfile); never a leading '-', which ssh would read as an option.
_NAME_RE = re.compile(r"[A-Za-z0-9_:][A-Za-z0-9_.%@:-]*")
_SLOTS_RE = re.compile(r"[0-9]{1,9}")
_MAX_SLOTS = 1 << 20


def _check_name(name, where):
    if not _NAME_RE.fullmatch(name):
        raise HostListError("%s: invalid host name %r (letters, digits and . _ - @ : %% only, "
                            "not starting with '-')" % (where, name))
    return name


def _parse_slots(text, where):
    if not _SLOTS_RE.fullmatch(text):
        raise HostListError("%s: slot count %r is not a positive integer" % (where, text))
    slots = int(text)
    if not 1 <= slots <= _MAX_SLOTS:
        raise HostListError("%s: slot count %d is out of range 1..%d" % (where, slots, _MAX_SLOTS))
    return slots


def parse_host_entry(entry, where="-H"):
    """One "host[:slots]" item; IPv6 addresses are written "[addr]:slots"."""
    entry = entry.strip()
    if not entry:
        raise HostListError("%s: empty host entry" % where)
    if entry.startswith("["):
        close = entry.find("]")
        if close < 0:
            raise HostListError("%s: unclosed '[' in %r" % (where, entry))
        name, rest = entry[1:close], entry[close + 1:]
        if rest and not rest.startswith(":"):
            raise HostListError("%s: unexpected %r after ']' in %r" % (where, rest, entry))
        slots = _parse_slots(rest[1:], where) if rest else 1
        return HostSlots(_check_name(name, where), slots)
    name, sep, count = entry.rpartition(":")
    if not sep:
        return HostSlots(_check_name(entry, where), 1)
    if ":" in name:
        raise HostListError("%s: write IPv6 hosts as [address]:slots, not %r" % (where, entry))
    return HostSlots(_check_name(name, where), _parse_slots(count, where))


def parse_hosts(text):
    """"-H a:2,b:4,c" -> [HostSlots('a', 2), HostSlots('b', 4), HostSlots('c', 1)]."""
    if not text or not text.strip():
        raise HostListError("-H: empty host list")
    hosts = [parse_host_entry(e, "-H") for e in text.split(",")]
    check_unique(hosts, "-H")
    return hosts


def parse_hostfile_text(text, source="hostfile"):
    """Lines "host slots=N" (Open MPI style, spaces around '=' allowed as Open MPI allows
    them; without slots=, max_slots=N gives N slots, as horovodrun reads such a line; other
    key=value words ignored), "host:N" or "host"; '#' starts a comment; blank lines are
    skipped."""
    hosts = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        where = "%s:%d" % (source, lineno)
        line = re.sub(r"\s*=\s*", "=", raw.split("#", 1)[0].strip())
        if not line:
            continue
        words = line.split()
        if len(words) == 1:
            hosts.append(parse_host_entry(words[0], where))
            continue
        name = _check_name(words[0].strip("[]"), where)
        counts = {}
        for word in words[1:]:
            key, eq, value = word.partition("=")
            if not eq:
                raise HostListError("%s: expected 'host slots=N', got %r" % (where, line))
            if key in ("slots", "slot", "max_slots", "max-slots"):
                counts.setdefault(key.startswith("max"), _parse_slots(value, where))
        hosts.append(HostSlots(name, counts.get(False, counts.get(True, 1))))
    if not hosts:
        raise HostListError("%s: no hosts listed" % source)
    check_unique(hosts, source)
    return hosts


def parse_hostfile(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError as e:
        raise HostListError("--hostfile: cannot read %s: %s" % (path, e.strerror)) from None
    return parse_hostfile_text(text, path)


def check_unique(hosts, where):
    seen = set()
    for h in hosts:
        if h.name in seen:
            raise HostListError("%s: host %r is listed twice (give it once with all its slots)"
                                % (where, h.name))
        seen.add(h.name)


# ---- this machine ------------------------------------------------------------------------------
_SIOCGIFADDR = 0x8915


def interface_ipv4(ifname) -> Optional[str]:
    """The IPv4 address of a network interface, or None when it has none (Linux)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            packed = fcntl.ioctl(s.fileno(), _SIOCGIFADDR,
                                 struct.pack("256s", ifname.encode()[:15]))
        except OSError:
            return None
    return socket.inet_ntoa(packed[20:24])


def interface_names() -> List[str]:
    try:
        return [name for _, name in socket.if_nameindex()]
    except OSError:
        return []


def local_addresses():
    addrs = {"127.0.0.1", "::1"}
    for name in interface_names():
        a = interface_ipv4(name)
        if a:
            addrs.add(a)
    return addrs


def local_names():
    names = {"localhost", "localhost.localdomain", "127.0.0.1", "::1"}
    host = socket.gethostname()
    names.add(host)
    names.add(host.split(".")[0])
    return names


def is_local(host, names=None, addrs=None) -> bool:
    """True when `host` (a host-list name) is this machine: a loopback or local name, or a name
    that resolves to a loopback address or an address of one of our interfaces."""
    names = local_names() if names is None else names
    addrs = local_addresses() if addrs is None else addrs
    bare = host.rsplit("@", 1)[-1]
    if bare in names:
        return True
    try:
        infos = socket.getaddrinfo(bare, None)
    except (socket.gaierror, UnicodeError, OSError):
        return False
    for info in infos:
        addr = info[4][0].split("%")[0]
        try:
            if ipaddress.ip_address(addr).is_loopback or addr in addrs:
                return True
        except ValueError:
            continue
    return False


def route_address(host) -> Optional[str]:
    """The local address this machine would use to reach `host` (UDP connect sends nothing),
    or None when the host does not resolve or is unreachable."""
    bare = host.rsplit("@", 1)[-1]
    try:
        infos = socket.getaddrinfo(bare, 9, socket.AF_INET, socket.SOCK_DGRAM)
    except (socket.gaierror, UnicodeError, OSError):
        return None
    for family, kind, proto, _, sockaddr in infos:
        try:
            with socket.socket(family, kind, proto) as s:
                s.connect(sockaddr)
                return s.getsockname()[0]
        except OSError:
            continue
    return None


def first_external_ipv4() -> Optional[str]:
    for name in interface_names():
        a = interface_ipv4(name)
        if a and not a.startswith("127."):
            return a
    return None


def cwd_for_remote():
    """The directory remote ranks start in: the launcher's, as the user typed it (PWD keeps
    symlinked paths that are usually what is mounted on every node)."""
    pwd = os.environ.get("PWD")
    cwd = os.getcwd()
    try:
        if pwd and os.path.samefile(pwd, cwd):
            return pwd
    except OSError:
        pass
    return cwd
