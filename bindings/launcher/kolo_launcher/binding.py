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
The ranks counted are every rank kolorun starts on this machine, across host names that are
all this machine (-H localhost:2,127.0.0.1:2 is four ranks on one machine). Remote ranks are not
bound (their host's cores are not known here); mpirun in MPI mode binds remote ranks too.

MPI mode (mpi_placement): mpirun binds, kolorun only picks its flags. When every host of the job
is this machine, the same rule as "share": "-map-by slot:PE=k -bind-to core" with k = C // L
cores per rank, or "-bind-to none -map-by slot" when C < L; with remote hosts (their cores are
not known here) "-map-by slot -bind-to core", one core per rank, which mpirun refuses on a host
with more ranks than cores (use --no-bind or --binding-args there).

Applying a plan (workers.Worker.start): the launcher's thread narrows its own affinity to the
rank's CPUs around the fork, so the child and everything it starts inherit them from its first
instruction (no window in which the rank's early threads run elsewhere), and restores it.
Pure functions here; no state.
"""

import os
import shlex

MODES = ("share", "core", "socket", "none")
SYSFS_CPU = "/sys/devices/system/cpu"

GLOO_FORMS_HELP = "'--bind-to none', '--bind-to core' or '--bind-to socket'"


class BindingError(ValueError):
    pass


def binding_options(no_bind, binding_args, mpi):
    """(Gloo mode's binding mode, MPI mode's placement arguments or None) from --no-bind and
    --binding-args; BindingError for a bad combination or string."""
    if no_bind and binding_args is not None:
        raise BindingError("--no-bind and --binding-args exclude each other")
    if no_bind:
        return "none", ["-bind-to", "none", "-map-by", "slot"]
    if binding_args is None:
        return "share", None
    if not mpi:
        return parse_gloo_binding_args(binding_args), None
    try:
        words = shlex.split(binding_args)
    except ValueError as e:
        raise BindingError("--binding-args: %s" % e) from None
    if not words:
        raise BindingError("--binding-args: empty (use --no-bind for no binding)")
    return "share", words


def parse_gloo_binding_args(text):
    """The mode of a --binding-args string in Gloo mode; BindingError for anything else."""
    try:
        words = shlex.split(text or "")
    except ValueError as e:
        raise BindingError("--binding-args: %s" % e) from None
    if len(words) == 1 and "=" in words[0]:
        words = words[0].split("=", 1)
    if (len(words) == 2 and words[0] in ("--bind-to", "-bind-to")
            and words[1] in ("none", "core", "socket")):
        return words[1]
    raise BindingError(
        "--binding-args %r: in Gloo mode kolorun binds ranks itself and understands only %s "
        "(any mpirun placement arguments work with --mpi)" % (text, GLOO_FORMS_HELP))


def _read_int(path):
    try:
        with open(path) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def machine_cores(cpus, sysfs=SYSFS_CPU):
    """[(socket, [cpu, ...]), ...]: the cores that hold `cpus`, ordered by socket then CPU.
    Without topology files each CPU counts as one core of socket 0."""
    cores = {}
    for cpu in sorted(cpus):
        topo = os.path.join(sysfs, "cpu%d" % cpu, "topology")
        package = _read_int(os.path.join(topo, "physical_package_id"))
        core = _read_int(os.path.join(topo, "core_id"))
        key = (package or 0, ("core", core) if core is not None else ("cpu", cpu))
        cores.setdefault(key, []).append(cpu)
    return sorted(((key[0], group) for key, group in cores.items()),
                  key=lambda c: (c[0], c[1][0]))


def plan(mode, nranks, cpus, sysfs=SYSFS_CPU, tcp=False):
    """([set of CPUs per rank] or None, a sentence for --verbose). `tcp`: the ranks' traffic
    crosses TCP (see the module's note on "share")."""
    if mode == "none" or nranks <= 0:
        return None, "ranks are not bound to cores (--no-bind)"
    if mode == "share" and tcp and len(cpus) < 2 * nranks:
        return None, ("ranks are not bound to cores: over TCP each rank needs 2 CPUs (the "
                      "thread waiting in its socket and its coordinator thread), %d local ranks, "
                      "%d CPU%s available"
                      % (nranks, len(cpus), "" if len(cpus) == 1 else "s"))
    cores = machine_cores(cpus, sysfs)
    n = len(cores)
    if mode == "socket":
        sockets = []
        for socket, group in cores:
            if not sockets or sockets[-1][0] != socket:
                sockets.append((socket, []))
            sockets[-1][1].extend(group)
        s = len(sockets)
        return [set(sockets[i * s // nranks][1]) for i in range(nranks)], (
            "each rank bound to the cores of one of %d socket%s" % (s, "" if s == 1 else "s"))
    if n < nranks:
        return None, ("ranks are not bound to cores: %d local ranks, %d core%s available"
                      % (nranks, n, "" if n == 1 else "s"))
    if mode == "core":
        blocks = [cores[i:i + 1] for i in range(nranks)]
    else:
        blocks = [cores[i * n // nranks:(i + 1) * n // nranks] for i in range(nranks)]
    per = n // nranks
    what = "one core" if mode == "core" or per == 1 else "%d%s cores" % (
        per, "" if n % nranks == 0 else "-%d" % (per + 1))
    return [set(c for _, group in block for c in group) for block in blocks], (
        "each of the %d local ranks bound to %s of its own (%d core%s available)"
        % (nranks, what, n, "" if n == 1 else "s"))


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
