# SPDX-License-Identifier: Apache-2.0
"""MPI mode: the Open MPI mpirun command line that runs the job, and running it.

mpirun supplies ranks, placement and process control here; kolo's runtime learns that it is
under MPI from KOLO_CONTROLLER=mpi and takes rank/size from MPI itself, so no rank variables
are set. The line follows horovodrun's:

  mpirun [--allow-run-as-root] -np N -H h1:s1,h2:s2 PLACEMENT --tag-output
         -mca pml ob1 -mca btl ^openib [--timestamp-output] [-mca plm_rsh_args "-p PORT [-i KEY]"]
         [-mca btl_tcp_if_include IF -mca oob_tcp_if_include IF] [--output-filename DIR]
         -x KOLO_CONTROLLER=mpi -x KOLO_...=... -x VAR ... [--mpi-args] COMMAND ARGS

The environment: the values kolorun sets (KOLO_CONTROLLER, the flags' KOLO_*/HOROVOD_*
variables, NCCL_SOCKET_IFNAME, NCCL_IB_DISABLE for --tcp, the -x ones) as -x NAME=VALUE, then
every other variable of kolorun's environment by name (-x NAME, mpirun copies the value), as
horovodrun's mpi_run exports its whole environment: all but the names Horovod's is_exportable
skips (BASH_FUNC_* shell functions, OLDPWD, anything with CUDA_VISIBLE_DEVICES in its name,
HOROVOD_SECRET_KEY), names that are not identifiers, and an outer launcher's rank variables.

PLACEMENT maps the ranks by slot (they fill the hosts in order, as in Gloo mode) and binds them
to cores (binding.mpi_placement): "-map-by slot:PE=k -bind-to core" when every host is this
machine and it has C >= L cores for its L ranks (k = C // L), "-bind-to none -map-by slot"
when it has fewer (kolorun says so), "-map-by slot -bind-to core" with remote hosts. --no-bind
makes it "-bind-to none -map-by slot" (horovodrun's default), --binding-args replaces it
entirely (as horovodrun's --binding-args does).
"""

import os
import shlex

from . import binding as bindlib
from . import hosts as hostlib
from .args import horovod_knob_environment

# Rank-specific variables of an outer launcher would be wrong for every MPI rank.
_RANK_VARS = {"KOLO_RANK", "KOLO_SIZE", "KOLO_LOCAL_RANK", "KOLO_LOCAL_SIZE", "KOLO_CROSS_RANK",
              "KOLO_CROSS_SIZE", "KOLO_HOSTNAME", "KOLO_RENDEZVOUS_ADDR", "KOLO_RENDEZVOUS_PORT",
              "KOLO_RENDEZVOUS_DIR", "KOLO_CONTROLLER",
              "HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE",
              "HOROVOD_CROSS_RANK", "HOROVOD_CROSS_SIZE", "HOROVOD_HOSTNAME",
              "HOROVOD_GLOO_RENDEZVOUS_ADDR", "HOROVOD_GLOO_RENDEZVOUS_PORT", "HOROVOD_CONTROLLER",
              "HOROVOD_CPU_OPERATIONS"}
# Not exported (Horovod's horovod/runner/common/util/env.py IGNORE_REGEXES, as prefixes or parts).
_NOT_EXPORTED_PREFIXES = ("BASH_FUNC_",)
_NOT_EXPORTED_NAMES = {"OLDPWD", "HOROVOD_SECRET_KEY"}
_NOT_EXPORTED_PARTS = ("CUDA_VISIBLE_DEVICES",)


def exportable(name):
    """Whether mpirun -x NAME passes kolorun's variable NAME to the ranks."""
    return (name.isidentifier() and name.isascii() and name not in _RANK_VARS
            and name not in _NOT_EXPORTED_NAMES and not name.startswith(_NOT_EXPORTED_PREFIXES)
            and not any(part in name for part in _NOT_EXPORTED_PARTS))


def mpi_environment(opts, environ):
    """(assignments, names): variables set to a value, and variables passed by name."""
    assign = {"KOLO_CONTROLLER": "mpi"}
    assign.update(opts.knob_env)
    assign.update(horovod_knob_environment(opts.knob_env))
    if opts.network_interface and "NCCL_SOCKET_IFNAME" not in environ:
        assign["NCCL_SOCKET_IFNAME"] = opts.network_interface
    assign.update(opts.extra_env)
    names = sorted(n for n in environ if exportable(n) and n not in assign)
    return assign, names


def used_host_names(opts):
    """The hosts that get at least one of the np ranks (they fill the hosts in order)."""
    names, left = [], opts.np
    for h in opts.hosts:
        if left <= 0:
            break
        names.append(h.name)
        left -= h.slots
    return names


def default_placement(opts):
    """(placement arguments, note or None) when neither --no-bind nor --binding-args."""
    names, addrs = hostlib.local_names(), hostlib.local_addresses()
    all_local = all(hostlib.is_local(h, names, addrs) for h in used_host_names(opts))
    return bindlib.mpi_placement(opts.np, all_local, bindlib.available_cpus())


def build_command(opts, environ, is_root, mpirun="mpirun", placement=None):
    """mpirun's argv. `placement`: the default binding's arguments (default_placement; used
    only without --no-bind / --binding-args), "-map-by slot -bind-to core" when None."""
    cmd = [mpirun]
    if is_root:
        cmd.append("--allow-run-as-root")
    hosts = ",".join("%s:%d" % (h.name, h.slots) for h in opts.hosts)
    if opts.binding_args is not None:
        placement = opts.binding_args
    elif placement is None:
        placement = ["-map-by", "slot", "-bind-to", "core"]
    cmd += ["-np", str(opts.np), "-H", hosts] + list(placement)
    cmd += ["--tag-output", "-mca", "pml", "ob1", "-mca", "btl", "^openib"]
    if opts.prefix_timestamp:
        cmd.append("--timestamp-output")  # horovodrun's mpi_run does the same
    rsh = []
    if opts.ssh_port:
        rsh += ["-p", str(opts.ssh_port)]
    if opts.ssh_identity:
        rsh += ["-i", opts.ssh_identity]
    if rsh:
        cmd += ["-mca", "plm_rsh_args", " ".join(shlex.quote(a) for a in rsh)]
    if opts.network_interface:
        cmd += ["-mca", "btl_tcp_if_include", opts.network_interface,
                "-mca", "oob_tcp_if_include", opts.network_interface]
    if opts.output_dir:
        cmd += ["--output-filename", opts.output_dir]
    assign, names = mpi_environment(opts, environ)
    for name, value in assign.items():
        cmd += ["-x", "%s=%s" % (name, value)]
    for name in names:
        cmd += ["-x", name]
    return cmd + list(opts.mpi_args) + list(opts.command)


def run_mpi(opts, environ, console):
    """Replaces kolorun with mpirun (signals and the exit status are mpirun's own). Returns
    only when mpirun cannot be started."""
    mpirun = environ.get("KOLO_LAUNCHER_MPIRUN") or "mpirun"
    placement = None
    if opts.binding_args is None:
        placement, note = default_placement(opts)
        if note:
            console.message(note)
    cmd = build_command(opts, environ, is_root=os.geteuid() == 0, mpirun=mpirun,
                        placement=placement)
    if opts.verbose:
        console.message("running: " + " ".join(shlex.quote(c) for c in cmd))
    try:
        os.execvpe(cmd[0], cmd, dict(environ))
    except OSError as e:
        console.message("cannot run %s: %s (is Open MPI installed? Gloo mode, the default, "
                        "needs no MPI)" % (cmd[0], e.strerror))
        return 127 if isinstance(e, FileNotFoundError) else 126
