# SPDX-License-Identifier: Apache-2.0
"""Which CPUs each rank on this machine may run on (Gloo mode's core binding).

kolorun binds the ranks it starts on this machine, as mpirun --bind-to core does, so that two
ranks do not compete for one core while another stays idle, and a rank's threads stay near
their memory. The CPUs it shares out are its own affinity (os.sched_getaffinity: a cgroup or
taskset around kolorun narrows them), grouped into cores by the kernel's topology files
(/sys/devices/system/cpu/cpuN/topology: hardware threads of one core stay together) and
ordered by socket, then CPU number. Modes:
  share  (default) every rank gets a disjoint block of whole cores, floor(i*C/L) up to
         floor((i+1)*C/L) for local rank i of L on C cores: all cores are used and the rank's
         threads (torch's intra-op pool, data loaders) keep several cores when there are
         several per rank. Needs C >= L; with fewer cores nothing is bound. When the ranks'
         traffic crosses TCP (a job over several hosts, or KOLO_SHM=off) a rank also needs
         two CPUs: the thread that waits in its socket and the rank's coordinator thread (and,
         for Gloo's own collectives, Gloo's I/O thread) take turns on a single CPU (a 4-byte
         runtime allreduce at 2 ranks: 133-166 us bound to one core each against 69-102 us
         unbound; 3.6 ms against 0.4 ms when kolo's messages went through Gloo's pairs);
         below that nothing is bound ('--bind-to core' still binds).
  core   one core per rank (mpirun --bind-to core): rank i gets core i; needs C >= L.
  socket every rank gets all the cores of one socket, the ranks spread over the sockets in
         order (rank i on socket floor(i*S/L)).
  none   no binding (--no-bind, --binding-args "--bind-to none").
--binding-args takes mpirun's words for these (parse_gloo_binding_args -> BindSpec):
"--bind-to core|hwthread|socket|none[:overload-allowed]", "--map-by slot|core|node|hwthread|
socket|ppr:N:socket|ppr:N:node|ppr:N:core[:PE=n]" (where each rank's cores come from: in
order, round robin over the sockets, or N ranks per socket/node/core; PE=n cores a rank),
"--rankfile FILE" (Open MPI's "rank R=HOST slot=SPEC" lines: SPEC logical cores "0-3,5" or
socket:cores "1:0-2") and "--report-bindings"; anything else is refused, naming the word.
Modes other than "share" are explicit requests: when this machine cannot give them (fewer
cores than the ranks need) kolorun refuses to start, as mpirun does, instead of running the
ranks unbound (PlanError); "share", the default, warns and runs them unbound.
The ranks counted are every rank kolorun starts on one host: on this machine across host names
that are all this machine (-H localhost:2,127.0.0.1:2 is four ranks on one machine). A remote
host's ranks are planned the same way from what its shell reports before they start
(PROBE_SCRIPT, parse_probe: its CPU affinity and each CPU's package and core) and started
under taskset (bound_command); a host that cannot answer, or has no taskset, runs its ranks
unbound with a note (an explicit --binding-args fails the job instead). A job with a remote
host always counts as TCP traffic for "share". Elastic workers are never bound (their number on
a host changes), and elastic mode refuses --binding-args other than "--bind-to none".

MPI mode (mpi_placement): mpirun binds, kolorun only picks its flags. When every host of the job
is this machine, the same rule as "share": "-map-by slot:PE=k -bind-to core" with k = C // L
cores per rank, or "-bind-to none -map-by slot" when C < L; with remote hosts (their cores are
not known here) "-map-by slot -bind-to core", one core per rank, which mpirun refuses on a host
with more ranks than cores (use --no-bind or --binding-args there).

Applying a plan (workers.Worker.start): the launcher's thread narrows its own affinity to the
rank's CPUs around the fork, so the child and everything it starts inherit them from its first
instruction (no window in which the rank's early threads run elsewhere), and restores it; on a
remote host taskset does the same before it runs the rank.
Pure functions here; no state.
"""

import os
import re
import shlex
from typing import Dict, NamedTuple, Optional, Tuple

MODES = ("share", "core", "hwthread", "socket", "none")
SYSFS_CPU = "/sys/devices/system/cpu"

GLOO_FORMS_HELP = ("--bind-to none|core|hwthread|socket[:overload-allowed], --map-by slot|core|"
                   "node|hwthread|socket|ppr:N:socket|ppr:N:node|ppr:N:core[:PE=n], "
                   "--rankfile FILE and --report-bindings")


class BindingError(ValueError):
    pass


class PlanError(BindingError):
    """An explicit binding this machine cannot give (mpirun refuses to start then too)."""


class RankfileLine(NamedTuple):
    host: str
    slots: Tuple[Tuple[Optional[int], int], ...]  # (socket or None for a logical core, core)
    line: int


class BindSpec(NamedTuple):
    """Gloo mode's binding request. text is the --binding-args string (None: the default)."""
    bind: str = "share"  # MODES
    map_by: str = "slot"  # slot (also core, node) | socket | hwthread | ppr
    ppr: Optional[Tuple[int, str]] = None  # map-by ppr:N:RESOURCE
    pe: int = 1  # cores (hardware threads with hwthread) per rank
    overload: bool = False  # bind-to ...:overload-allowed: ranks may share a core
    rankfile: Optional[Dict[int, RankfileLine]] = None
    rankfile_name: Optional[str] = None
    report: bool = False  # --report-bindings
    text: Optional[str] = None

    @property
    def explicit(self):
        return self.text is not None


def binding_options(no_bind, binding_args, mpi):
    """(Gloo mode's BindSpec, MPI mode's placement arguments or None) from --no-bind and
    --binding-args; BindingError for a bad combination or string."""
    if no_bind and binding_args is not None:
        raise BindingError("--no-bind and --binding-args exclude each other")
    if no_bind:
        return BindSpec(bind="none"), ["-bind-to", "none", "-map-by", "slot"]
    if binding_args is None:
        return BindSpec(), None
    if not mpi:
        return parse_gloo_binding_args(binding_args), None
    try:
        words = shlex.split(binding_args)
    except ValueError as e:
        raise BindingError("--binding-args: %s" % e) from None
    if not words:
        raise BindingError("--binding-args: empty (use --no-bind for no binding)")
    return BindSpec(), words


_VALUED = {"bind-to": "bind", "map-by": "map", "rankfile": "rankfile", "rf": "rankfile",
           "cpus-per-proc": "pe", "cpus-per-rank": "pe"}
_FLAGS = {"report-bindings": "report", "bind-to-core": "core", "bind-to-socket": "socket",
          "bind-to-none": "none"}


def parse_gloo_binding_args(text, read=None):
    """The BindSpec of a --binding-args string in Gloo mode (mpirun's words; see the module
    doc); BindingError naming the part that is not supported. `read(path)`: the rankfile's
    text (default: the file)."""
    try:
        words = shlex.split(text or "")
    except ValueError as e:
        raise BindingError("--binding-args: %s" % e) from None
    if not words:
        raise BindingError("--binding-args: empty (use --no-bind for no binding)")

    def refuse(what):
        return BindingError(
            "--binding-args %r: %s; in Gloo mode kolorun binds the ranks on this machine itself "
            "and understands %s (--mpi passes any mpirun arguments)" % (text, what,
                                                                       GLOO_FORMS_HELP))

    given = {}
    i = 0
    while i < len(words):
        word = words[i]
        name, eq, value = word.lstrip("-").partition("=")
        if not word.startswith("-") or not name:
            raise refuse("%r is not an option" % word)
        if name in _FLAGS and not eq:
            key, value = ("bind", _FLAGS[name]) if name != "report-bindings" else ("report", "")
            i += 1
        elif name in _VALUED:
            key = _VALUED[name]
            if not eq:
                if i + 1 >= len(words):
                    raise refuse("%s needs a value" % word)
                value = words[i + 1]
                i += 1
            i += 1
        else:
            raise refuse("%r is not supported" % word)
        if key in given:
            raise refuse("%s is given twice" % word)
        given[key] = value

    bind, overload, pe = given.get("bind"), False, 1
    if bind is not None:
        level, _, quals = bind.partition(":")
        level = level.lower()
        if level not in MODES or level == "share":
            raise refuse("--bind-to %s is not supported (numa and cache levels are mpirun's)"
                         % bind)
        for q in filter(None, quals.split(",")):
            if q.lower() == "overload-allowed":
                overload = True
            elif q.lower() != "if-supported":
                raise refuse("--bind-to qualifier %r is not supported" % q)
        bind = level
    map_by, ppr = "slot", None
    if "map" in given:
        obj, _, mods = given["map"].partition(":")
        obj = obj.lower()
        if obj == "ppr":
            m = re.fullmatch(r"([0-9]{1,6}):(socket|node|core)(?::(.*))?", mods, re.I)
            if not m or int(m.group(1)) < 1:
                raise refuse("--map-by %s is not supported (ppr:N:socket, ppr:N:node or "
                             "ppr:N:core with N >= 1)" % given["map"])
            ppr, mods = (int(m.group(1)), m.group(2).lower()), m.group(3) or ""
            map_by = "ppr"
        elif obj in ("slot", "core", "node"):
            map_by = "slot"
        elif obj in ("socket", "hwthread"):
            map_by = obj
        else:
            raise refuse("--map-by %s is not supported" % given["map"])
        for mod in filter(None, mods.split(",")):
            k, _, v = mod.partition("=")
            if k.lower() != "pe":
                raise refuse("--map-by modifier %r is not supported (only PE=n)" % mod)
            if "pe" in given:
                raise refuse("PE=n and --cpus-per-proc are given together")
            given["pe"] = v
    if "pe" in given:
        if not re.fullmatch(r"[0-9]{1,6}", given["pe"]) or int(given["pe"]) < 1:
            raise refuse("PE=%s: expected a number of cores >= 1" % given["pe"])
        pe = int(given["pe"])
    if "rankfile" in given:
        if bind is not None or "map" in given or "pe" in given:
            raise refuse("--rankfile gives every rank its cores itself; it does not combine "
                         "with --bind-to, --map-by or PE")
        name = given["rankfile"]
        try:
            content = read(name) if read else _read_text(name)
        except OSError as e:
            raise BindingError("--binding-args: cannot read the rankfile %s: %s"
                               % (name, e.strerror or e)) from None
        return BindSpec(bind="core", rankfile=parse_rankfile(content, name), rankfile_name=name,
                        report="report" in given, text=text)
    if bind is None:
        bind = "hwthread" if map_by == "hwthread" else "core"
    if ppr and ppr[1] == "core" and pe > 1:
        raise refuse("ppr:N:core puts N ranks on one core: PE=%d does not fit it" % pe)
    return BindSpec(bind=bind, map_by=map_by, ppr=ppr, pe=pe, overload=overload,
                    report="report" in given, text=text)


def _read_text(path):
    with open(path) as f:
        return f.read()


_RANK_LINE = re.compile(r"rank\s+([0-9]{1,9})\s*=\s*(\S+)\s+slot\s*=\s*(\S+)")


def parse_rankfile(text, name="rankfile"):
    """{rank: RankfileLine} from Open MPI rankfile text: "rank R=HOST slot=SPEC" lines, '#'
    comments. SPEC: logical cores "0-3,5", or socket:cores "1:0-2" ("0:0,1" continues socket
    0's list; "0:1,1:2" names two sockets). BindingError naming the file and line."""
    out = {}
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        m = _RANK_LINE.fullmatch(line)
        if not m:
            raise BindingError("%s:%d: expected 'rank R=HOST slot=SPEC', got %r"
                               % (name, n, raw.strip()))
        rank = int(m.group(1))
        if rank in out:
            raise BindingError("%s:%d: rank %d is listed twice (first on line %d)"
                               % (name, n, rank, out[rank].line))
        slots, socket = [], None
        for item in m.group(3).split(","):
            sock, colon, cores = item.rpartition(":")
            if colon:
                if not re.fullmatch(r"[0-9]{1,6}", sock):
                    raise BindingError("%s:%d: bad slot %r (expected cores like 0-3 or "
                                       "socket:cores like 1:0-2)" % (name, n, item))
                socket = int(sock)
            r = re.fullmatch(r"([0-9]{1,6})(?:-([0-9]{1,6}))?", cores)
            if not r or (r.group(2) and int(r.group(2)) < int(r.group(1))):
                raise BindingError("%s:%d: bad slot %r (expected cores like 0-3 or "
                                   "socket:cores like 1:0-2)" % (name, n, item))
            lo, hi = int(r.group(1)), int(r.group(2) or r.group(1))
            slots.extend((socket, c) for c in range(lo, hi + 1))
        out[rank] = RankfileLine(m.group(2), tuple(slots), n)
    if not out:
        raise BindingError("%s: no 'rank R=HOST slot=SPEC' lines" % name)
    return out


def _read_int(path):
    try:
        with open(path) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def machine_cores(cpus, sysfs=SYSFS_CPU):
    """[(socket, [cpu, ...]), ...]: the cores that hold `cpus`, ordered by socket then CPU.
    `sysfs`: the topology folder to read, or {cpu: (package, core)} as read on another host
    (parse_probe; None for an unknown value). Without topology each CPU counts as one core of
    socket 0."""
    cores = {}
    for cpu in sorted(cpus):
        if isinstance(sysfs, dict):
            package, core = sysfs.get(cpu, (None, None))
        else:
            topo = os.path.join(sysfs, "cpu%d" % cpu, "topology")
            package = _read_int(os.path.join(topo, "physical_package_id"))
            core = _read_int(os.path.join(topo, "core_id"))
        key = (package or 0, ("core", core) if core is not None else ("cpu", cpu))
        cores.setdefault(key, []).append(cpu)
    return sorted(((key[0], group) for key, group in cores.items()),
                  key=lambda c: (c[0], c[1][0]))


def _plural(n, word):
    return "%d %s%s" % (n, word, "" if n == 1 else "s")


def plan(mode, nranks, cpus, sysfs=SYSFS_CPU, tcp=False):
    """([set of CPUs per rank] or None, a sentence for --verbose). `mode`: a MODES name or a
    BindSpec (not a rankfile's: rankfile_plan). `tcp`: the ranks' traffic crosses TCP (see the
    module's note on "share"). PlanError when an explicit mode does not fit this machine."""
    spec = BindSpec(bind=mode) if isinstance(mode, str) else mode
    if spec.bind == "none" or nranks <= 0:
        return None, "ranks are not bound to cores (--no-bind)"
    if spec.bind == "share" and tcp and len(cpus) < 2 * nranks:
        return None, ("ranks are not bound to cores: over TCP each rank needs 2 CPUs (the "
                      "thread waiting in its socket and its coordinator thread), %d local ranks, "
                      "%s available" % (nranks, _plural(len(cpus), "CPU")))
    cores = machine_cores(cpus, sysfs)
    n = len(cores)
    if spec.bind == "socket" and spec.map_by == "slot" and spec.pe == 1 and spec.ppr is None:
        sockets = _sockets(cores)
        s = len(sockets)
        return [set(c for u in sockets[i * s // nranks][1] for c in cores[u][1])
                for i in range(nranks)], (
            "each rank bound to the cores of one of %s" % _plural(s, "socket"))
    if spec.bind == "share":
        if n < nranks:
            return None, ("ranks are not bound to cores: %d local ranks, %s available"
                          % (nranks, _plural(n, "core")))
        blocks = [cores[i * n // nranks:(i + 1) * n // nranks] for i in range(nranks)]
        per = n // nranks
        what = "one core" if per == 1 else "%d%s cores" % (
            per, "" if n % nranks == 0 else "-%d" % (per + 1))
        return [set(c for _, group in block for c in group) for block in blocks], (
            "each of the %d local ranks bound to %s of its own (%s available)"
            % (nranks, what, _plural(n, "core")))
    hw = spec.bind == "hwthread" or spec.map_by == "hwthread"
    units = [(sock, [c]) for sock, group in cores for c in group] if hw else cores
    placed = _map(spec, nranks, units, "hardware thread" if hw else "core")
    sockets = dict(_sockets(units))
    blocks = []
    for unit_ids in placed:
        if spec.bind == "socket":
            blocks.append(set(c for u in unit_ids for i in sockets[units[u][0]]
                              for c in units[i][1]))
        else:
            blocks.append(set(c for u in unit_ids for c in units[u][1]))
    if spec.bind == "core" and spec.map_by == "slot" and spec.pe == 1 and not spec.overload \
            and spec.ppr is None:
        return blocks, ("each of the %d local ranks bound to one core of its own (%s "
                        "available)" % (nranks, _plural(n, "core")))
    return blocks, ("the %d local ranks bound as --binding-args %r asks (%s, %s available)"
                    % (nranks, spec.text or spec.bind, _plural(n, "core"),
                       _plural(len(cpus), "CPU")))


def _sockets(units):
    """[(socket, [unit index, ...]), ...] in order."""
    out = []
    for i, (socket, _) in enumerate(units):
        if not out or out[-1][0] != socket:
            out.append((socket, []))
        out[-1][1].append(i)
    return out


def _map(spec, nranks, units, what):
    """[[unit index, ...] per rank] for an explicit BindSpec; PlanError when it does not fit."""
    n, pe = len(units), spec.pe
    args = "--binding-args %r" % (spec.text or "--bind-to " + spec.bind)
    hint = ("mpirun refuses this too: start fewer ranks, allow sharing with '--bind-to %s:"
            "overload-allowed', or use --no-bind" % spec.bind)

    def take(pool, k, count):
        """count units of pool for the k-th rank placed on it."""
        if (k + 1) * count > len(pool) and not spec.overload:
            return None
        return [pool[(k * count + j) % len(pool)] for j in range(count)]

    ppr = spec.ppr
    if ppr and ppr[1] == "node" and nranks > ppr[0]:
        raise PlanError("%s: ppr:%d:node places at most %d ranks on a host, and this machine "
                        "has %d local ranks" % (args, ppr[0], ppr[0], nranks))
    if ppr and ppr[1] == "core":
        if nranks > ppr[0] * n:
            raise PlanError("%s: ppr:%d:core places at most %d ranks on this machine's %s, "
                            "and it has %d local ranks" % (args, ppr[0], ppr[0] * n,
                                                           _plural(n, what), nranks))
        return [[i // ppr[0]] for i in range(nranks)]
    if spec.map_by in ("socket", "ppr") and not (ppr and ppr[1] == "node"):
        sockets = _sockets(units)
        s = len(sockets)
        if ppr and nranks > ppr[0] * s:
            raise PlanError("%s: ppr:%d:socket places at most %d ranks on this machine's %s, "
                            "and it has %d local ranks" % (args, ppr[0], ppr[0] * s,
                                                           _plural(s, "socket"), nranks))
        out, count = [], [0] * s
        for i in range(nranks):
            j = i // ppr[0] if ppr else i % s
            got = take(sockets[j][1], count[j], pe)
            if got is None:
                on = ppr[0] if ppr else len(range(j, nranks, s))
                raise PlanError("%s: the %s on socket %d need %s, it has %d available; %s"
                                % (args, _plural(on, "rank"), sockets[j][0],
                                   _plural(on * pe, what), len(sockets[j][1]), hint))
            count[j] += 1
            out.append(got)
        return out
    pool = list(range(n))
    out = []
    for i in range(nranks):
        got = take(pool, i, pe)
        if got is None:
            raise PlanError("%s: %d local ranks need %s, this machine has %d available "
                            "(kolorun's CPU affinity); %s" % (args, nranks,
                                                              _plural(nranks * pe, what), n,
                                                              hint))
        out.append(got)
    return out


def rankfile_plan(spec, local, cpus, host_matches, sysfs=SYSFS_CPU):
    """({rank: set of CPUs}, note) for the local ranks [(rank, host), ...] from spec.rankfile:
    logical core K is the K-th of kolorun's available cores (socket, then CPU order), socket S
    the S-th socket holding one. host_matches(rank's host, the file's host) -> bool. PlanError
    for a rank without a line, on another host, or naming a core that is not there."""
    cores = machine_cores(cpus, sysfs)
    sockets = _sockets(cores)
    name = spec.rankfile_name or "rankfile"
    out = {}
    for rank, host in local:
        entry = spec.rankfile.get(rank)
        if entry is None:
            raise PlanError("--binding-args: %s has no line for rank %d (host %s, this machine)"
                            % (name, rank, host))
        if not host_matches(host, entry.host):
            raise PlanError("%s:%d: rank %d runs on host %s (the host list places it there), "
                            "not on %s" % (name, entry.line, rank, host, entry.host))
        chosen = set()
        for socket, core in entry.slots:
            if socket is None:
                if core >= len(cores):
                    raise PlanError("%s:%d: rank %d: there is no core %d here (%s available)"
                                    % (name, entry.line, rank, core,
                                       _plural(len(cores), "core")))
                chosen.update(cores[core][1])
                continue
            if socket >= len(sockets):
                raise PlanError("%s:%d: rank %d: there is no socket %d here (%s available)"
                                % (name, entry.line, rank, socket,
                                   _plural(len(sockets), "socket")))
            group = sockets[socket][1]
            if core >= len(group):
                raise PlanError("%s:%d: rank %d: socket %d has no core %d (%s available)"
                                % (name, entry.line, rank, socket, core,
                                   _plural(len(group), "core")))
            chosen.update(cores[group[core]][1])
        out[rank] = chosen
    return out, "the %d local ranks bound as %s says" % (len(local), name)


def mpi_placement(nranks, all_local, cpus, sysfs=SYSFS_CPU):
    """(mpirun placement arguments, a note or None) for MPI mode's default binding. `cpus`:
    this machine's available CPUs (None when unknown), used only when all_local."""
    if not all_local or cpus is None:
        return ["-map-by", "slot", "-bind-to", "core"], None
    n = len(machine_cores(cpus, sysfs))
    if n < nranks:
        return ["-bind-to", "none", "-map-by", "slot"], (
            "ranks are not bound to cores: %d local ranks, %d core%s available"
            % (nranks, n, "" if n == 1 else "s"))
    return ["-map-by", "slot:PE=%d" % (n // nranks), "-bind-to", "core"], None


# What a remote host tells kolorun before its ranks start (remote ranks, Gloo mode): the shell's
# CPU affinity (which the rank would inherit), each CPU's package and core, and whether taskset
# (util-linux) is there to apply a plan. POSIX sh, sed and cat only.
PROBE_SCRIPT = (
    "sed -n 's/^Cpus_allowed_list:[[:space:]]*/allowed /p' /proc/self/status\n"
    "for d in /sys/devices/system/cpu/cpu[0-9]*; do\n"
    "  [ -d \"$d/topology\" ] || continue\n"
    "  echo \"cpu ${d##*/cpu} $(cat \"$d/topology/physical_package_id\" 2>/dev/null)"
    " $(cat \"$d/topology/core_id\" 2>/dev/null)\"\n"
    "done\n"
    "if command -v taskset >/dev/null 2>&1; then echo taskset; fi\n")


def parse_cpu_list(text):
    """"0-2,5" -> {0, 1, 2, 5}; ValueError when malformed."""
    out = set()
    for part in text.strip().split(","):
        lo, _, hi = part.partition("-")
        first, last = int(lo), int(hi) if hi else int(lo)
        if last < first:
            raise ValueError("bad CPU range %r" % part)
        out.update(range(first, last + 1))
    return out


def parse_probe(text):
    """(available CPUs, {cpu: (package, core)}, has taskset) from PROBE_SCRIPT's output.
    ValueError when it says nothing of the CPUs (no /proc there: not Linux)."""
    cpus, topology, taskset = None, {}, False
    for line in text.splitlines():
        words = line.split()
        if words[:1] == ["allowed"] and len(words) == 2:
            cpus = parse_cpu_list(words[1])
        elif words[:1] == ["cpu"] and len(words) >= 2 and words[1].isdigit():
            nums = [int(w) if w.lstrip("-").isdigit() else None for w in words[2:4]]
            nums += [None] * (2 - len(nums))
            topology[int(words[1])] = (nums[0], nums[1])
        elif words == ["taskset"]:
            taskset = True
    if not cpus:
        raise ValueError("no CPU affinity in its answer (%r)" % text.strip()[:200])
    return cpus, topology, taskset


def bound_command(cpus, command):
    """`command` (a list) run by taskset on `cpus` from its first instruction (remote ranks)."""
    return ["taskset", "-c", cpu_list(cpus)] + list(command)


def available_cpus():
    """This process's CPUs, or None where the platform cannot bind."""
    if not hasattr(os, "sched_getaffinity") or not hasattr(os, "sched_setaffinity"):
        return None
    try:
        return os.sched_getaffinity(0)
    except OSError:
        return None


def cpu_list(cpus):
    """{0,1,2,5} -> "0-2,5"."""
    out, run = [], []
    for c in sorted(cpus):
        if run and c == run[-1] + 1:
            run.append(c)
            continue
        if run:
            out.append(str(run[0]) if len(run) == 1 else "%d-%d" % (run[0], run[-1]))
        run = [c]
    if run:
        out.append(str(run[0]) if len(run) == 1 else "%d-%d" % (run[0], run[-1]))
    return ",".join(out)
