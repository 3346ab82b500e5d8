# SPDX-License-Identifier: Apache-2.0
"""kolorun's command line: the option table, the --help text, and flag -> KOLO_* variables.

The command to run starts at the first word that is not an option (or after "--"), so its own
options are never taken for kolorun's: `kolorun -np 2 python train.py -v` passes -v to train.py.
As with horovodrun's argparse parser, a long option may be abbreviated to any unambiguous prefix
(`--verb` is --verbose; an ambiguous one is an error naming the candidates).
parse() returns a LaunchOptions or raises UsageError (exit status 2, like argparse).
"""

import argparse
import math
import os
import re
import shlex
import shutil
import textwrap
from typing import Dict, List, NamedTuple, Optional, Tuple

from . import __version__
from .binding import BindingError, BindSpec, binding_options
from .check_build import print_report
from .config_file import apply_config
from .elastic_args import ELASTIC_OPTIONS, ElasticOptions, elastic_options, static_notes
from .hosts import HostListError, HostSlots, parse_hostfile, parse_hosts

DEFAULT_START_TIMEOUT = 120.0
DEFAULT_FAILURE_GRACE = 10.0

USAGE = """kolorun -np N [-H HOST:SLOTS,... | --hostfile FILE] [--gloo | --mpi] [options]
               COMMAND [ARGS...]"""

DESCRIPTION = """\
Start N copies of COMMAND as the ranks of one kolo job (a drop-in for horovodrun).

Gloo mode (the default) needs no MPI: kolorun serves the rendezvous store itself, gives every
rank its place (KOLO_RANK, KOLO_LOCAL_RANK, KOLO_CROSS_RANK, ... ), starts the ranks on this
machine directly and the others over ssh, prefixes each output line with "[rank]<stdout>:"
or "[rank]<stderr>:", binds the ranks of this machine to disjoint cores, and supervises the
job: when one rank fails, the others see the failure (their collectives raise), get a grace
window to exit by themselves, and are then stopped.
MPI mode (--mpi) builds the Open MPI mpirun command line and runs it instead.

Ranks fill the hosts in the order listed, each up to its slot count: with -H a:2,b:2 -np 4,
ranks 0,1 run on a and 2,3 on b; local_rank is the index on the host, cross_rank the index
among ranks with the same local_rank."""

EPILOG = """\
environment of every rank (Gloo mode):
  KOLO_RANK, KOLO_SIZE              global rank and number of ranks
  KOLO_LOCAL_RANK, KOLO_LOCAL_SIZE  index on its host, ranks on that host
  KOLO_CROSS_RANK, KOLO_CROSS_SIZE  index among ranks with its local rank, their number
  KOLO_HOSTNAME                     its host's name as written in the host list
  KOLO_CONTROLLER=gloo              (=mpi in MPI mode, where MPI supplies the ranks)
  KOLO_RENDEZVOUS_ADDR, KOLO_RENDEZVOUS_PORT   where kolorun serves the rendezvous store
  KOLO_START_TIMEOUT                --start-timeout
  HOROVOD_RANK, HOROVOD_SIZE, HOROVOD_LOCAL_RANK, ... the same values under horovodrun's names
                                    (HOROVOD_GLOO_RENDEZVOUS_ADDR/_PORT for the store,
                                    HOROVOD_CPU_OPERATIONS=gloo; HOROVOD_FUSION_THRESHOLD etc.
                                    for the tuning flags), for scripts that read them
  plus the launcher's own environment (remote ranks: all of it except per-session variables
  such as HOME, USER, SHELL, SSH_*), the -x variables, and the tuning flags above.

stdin:
  As under mpirun, rank 0 reads kolorun's stdin when it runs on this machine (elastic mode:
  worker 0), and every other rank reads /dev/null; a rank 0 on another host gets no stdin.
  A terminal is passed only when kolorun is its foreground job (mpirun's rule: a job started
  with & leaves the shell's input alone). Ranks run in sessions of their own, so reading the
  terminal never stops a rank (no SIGTTIN), also while kolorun is suspended.

environment read by kolorun itself:
  KOLO_START_TIMEOUT                default for --start-timeout (then HOROVOD_START_TIMEOUT;
                                    120 s when neither is set)
  KOLO_SSH_IDENTITY                 default for --ssh-identity-file
  KOLO_SSH_OPTIONS                  extra ssh options, e.g. "-o ConnectTimeout=10"
  KOLO_LAUNCHER_REMOTE_SHELL        replaces "ssh [opts] {host}" for remote ranks: a command
                                    template with {host} (and {port}); the remote shell
                                    command is appended as its last argument, e.g.
                                    "ip netns exec {host} sh -c" (used by the tests)
  KOLO_LAUNCHER_FORCE_REMOTE=1      start every rank through the remote shell, even on
                                    localhost (tests the ssh path on one machine)
  KOLO_LAUNCHER_FAILURE_GRACE_SECONDS  default for --failure-grace-seconds (then
                                    HOROVOD_LAUNCHER_FAILURE_GRACE_SECONDS; 10 s)
  KOLO_LAUNCHER_KILL_GRACE_SECONDS  how long ranks get between SIGTERM and SIGKILL (default 5)
  KOLO_LAUNCHER_MPIRUN              the mpirun program for --mpi (default: mpirun on PATH)

failures:
  When a rank exits with a non-zero status or dies on a signal, kolorun says which rank,
  host and status. The other ranks' runtime notices the lost peer (its connections reset;
  a silent peer after KOLO_TIMEOUT_SECONDS) and fails their pending and later collectives
  with KoloInternalError (HorovodInternalError) naming the lost rank, so `except` blocks can
  log or save a checkpoint. kolorun waits --failure-grace-seconds (default 10) for them to
  exit, then sends SIGTERM to every remaining rank's process group, SIGKILL after
  KOLO_LAUNCHER_KILL_GRACE_SECONDS, and exits with the first failed rank's status. A rank
  that has not published its "host/<rank>" key in the store (the kolo runtime does so
  during init) --start-timeout after the first rank did fails the job too, without the
  grace window; before any rank connected there is no limit (work before init may take
  as long as it needs), and a rank that exits 0 without ever connecting is fine. SIGINT,
  SIGTERM and SIGHUP sent to kolorun are passed to every rank at once, also during the
  grace window (a second one kills them); SIGQUIT is handled as SIGTERM (the ranks get
  SIGTERM). When kolorun itself is killed
  (kill -9, the OOM killer), its orphan guard stops every local rank's process group (TERM,
  then KILL after KOLO_LAUNCHER_KILL_GRACE_SECONDS) and the remote watchers the remote ranks.
  In MPI mode mpirun stops the job itself, at once (see mpirun's documentation).

core binding:
  The ranks kolorun starts on this machine get disjoint blocks of whole cores out of
  kolorun's own CPU affinity (local rank i of L on C cores: cores floor(i*C/L) to
  floor((i+1)*C/L)-1, hardware threads of a core together), when C >= L and, when their
  traffic crosses TCP (several hosts, or KOLO_SHM=off in the ranks' environment, -x included),
  2*L <= CPUs; otherwise nothing is bound and kolorun says so. --binding-args '--bind-to core'
  gives one core per rank, '--bind-to socket' one socket per rank, '--map-by ppr:2:socket',
  ':PE=n', '--rankfile FILE' place them as mpirun would, '--bind-to none' or --no-bind turns
  it off; an explicit binding that needs more cores than there are fails the job before any
  rank starts (exit status 1), as mpirun does. Ranks on other hosts are bound the same way with
  taskset, after kolorun asks each host's shell for its CPUs (a host that cannot answer runs its
  ranks unbound with a note; an explicit --binding-args fails the job instead); elastic workers
  are never bound (elastic mode refuses --binding-args). MPI mode passes mpirun the same choice:
  -map-by slot:PE=C/L -bind-to core when every host is this machine (-bind-to none when
  C < L), -map-by slot -bind-to core with remote hosts (mpirun refuses a host with more
  ranks than cores: use --no-bind or --binding-args there).

elastic training (Gloo mode; see docs/elastic.md):
  --host-discovery-script or --min-np makes the job elastic (--max-np alone does not, as
  with horovodrun): kolorun waits up to --elastic-timeout for -np slots, starts workers on the
  hosts the script (or -H) lists, each with the place (KOLO_RANK, HOROVOD_RANK, ...) of the
  round it is started for, re-numbers them at each rendezvous round when one dies or new
  slots appear (a later round needs only --min-np), and the job ends when the workers exit 0
  (elastic_run.py). Output lines
  carry the worker's id ("[id]", fixed for its life; ranks change at each round), and kolorun
  prints each round's members and the failures; exit status 1 when the job fails for want of
  workers (--min-np, --elastic-timeout) or at --reset-limit.

horovodrun flags kolorun refuses (exit status 2, with the reason): --jsrun. As with horovodrun,
a long option may be abbreviated to an unambiguous prefix (--verb for --verbose), and its
negations are accepted (--no-autotune, --stall-check, --no-timeline-mark-cycles, ...).

exit status:
  0 every rank exited 0; the first failing rank's exit status (128+N if it died on signal N);
  1 a rank did not connect in time (or no usable rendezvous address, or an explicit
  --binding-args this machine's cores cannot give); 2 bad usage;
  126/127 COMMAND (or mpirun) could not be executed / was not found;
  128+N when kolorun was stopped by signal N (130 for Ctrl-C).
  In MPI mode kolorun becomes mpirun, and the status is mpirun's.

examples:
  kolorun -np 4 python train.py
  kolorun -np 8 -H node1:4,node2:4 --network-interface eth0 python train.py --epochs 10
  kolorun -np 2 --timeline-filename /tmp/tl.json --fusion-threshold-mb 32 ./my_bench
  kolorun --mpi -np 4 -H node1:2,node2:2 -x NCCL_DEBUG=INFO --verbose python train.py"""


class UsageError(Exception):
    pass


class Opt(NamedTuple):
    names: Tuple[str, ...]
    dest: str
    kind: str  # "value" | "flag" | "append" | "pair" (two words)
    metavar: Optional[str]
    group: str
    help: str


G_PROC, G_ELASTIC, G_MODE, G_NET, G_ENV, G_OUT, G_TUNE, G_COMPAT = (
    "processes and hosts", "elastic training (Gloo mode)", "controller",
    "rendezvous and remote start", "environment",
    "output and information", "runtime tuning (each sets a KOLO_* variable in every rank)",
    "horovodrun flags accepted without effect (kolorun prints a note saying so)")

OPTIONS = [
    Opt(("-np", "-n", "--num-proc"), "np", "value", "N", G_PROC,
        "number of ranks to start (default: every slot of the host list; required without one)"),
    Opt(("-H", "--hosts"), "hosts", "value", "HOST:SLOTS,...", G_PROC,
        "hosts and their slot counts, comma-separated, in rank order; a host without :SLOTS "
        "has 1 slot; IPv6 as [addr]:SLOTS (default: localhost:N)"),
    Opt(("-hostfile", "--hostfile"), "hostfile", "value", "FILE", G_PROC,
        "read the host list from FILE: one host per line as 'host slots=N' (also 'slots = N'; "
        "'max_slots=N' alone gives N slots, as horovodrun reads it), 'host:N' or 'host'; '#' "
        "starts a comment"),
    Opt(("--failure-grace-seconds",), "failure_grace", "value", "SECONDS", G_PROC,
        "Gloo mode: when a rank fails, give the others SECONDS to notice it and exit by "
        "themselves (the runtime fails their pending ops: KoloInternalError/"
        "HorovodInternalError naming the lost rank) before kolorun sends SIGTERM, then SIGKILL "
        "(default: "
        "$KOLO_LAUNCHER_FAILURE_GRACE_SECONDS, $HOROVOD_LAUNCHER_FAILURE_GRACE_SECONDS, else "
        "10; 0 stops them at once)"),
    Opt(("--no-bind",), "no_bind", "flag", None, G_PROC,
        "do not bind ranks to cores (by default the ranks on this machine get disjoint cores "
        "when it has at least one core per rank); in MPI mode kolorun passes -bind-to none "
        "-map-by slot, horovodrun's placement"),
    Opt(("--binding-args",), "binding_args", "value", "'ARGS'", G_PROC,
        "change the binding with mpirun's words. Gloo mode understands --bind-to core (one "
        "core per rank), hwthread, socket (alone: ranks spread over the sockets in order) or "
        "none (as --no-bind), with :overload-allowed to let ranks share; --map-by slot, core, "
        "node, hwthread, socket (round robin), ppr:N:socket, ppr:N:node or ppr:N:core, with "
        ":PE=n cores per rank; --rankfile FILE (Open MPI's 'rank R=HOST slot=0-1' or "
        "'slot=SOCKET:CORES' lines); --report-bindings (print each rank's CPUs). It binds the "
        "ranks on this machine and refuses to start when they do not fit its cores, as mpirun; "
        "anything else is an error naming it. MPI mode passes ARGS to mpirun instead of "
        "kolorun's placement (e.g. '--map-by slot:PE=4 --bind-to core')"),
    Opt(("--gloo",), "gloo", "flag", None, G_MODE,
        "Gloo mode (default): kolorun serves the rendezvous store and starts the ranks; no MPI "
        "needed; sets KOLO_CONTROLLER=gloo"),
    Opt(("--mpi",), "mpi", "flag", None, G_MODE,
        "MPI mode: run Open MPI's mpirun (-np, -H, -map-by slot with -bind-to core unless "
        "--no-bind/--binding-args, --tag-output, --allow-run-as-root when run as root, and -x "
        "for every variable of kolorun's environment, as horovodrun: all but BASH_FUNC_*, "
        "OLDPWD, *CUDA_VISIBLE_DEVICES*, names that are not identifiers and an outer launcher's "
        "rank variables; the flags' variables and -x VAR=VAL as -x VAR=VAL); sets "
        "KOLO_CONTROLLER=mpi"),
    Opt(("--mpi-args",), "mpi_args", "value", "'ARGS'", G_MODE,
        "extra arguments for mpirun in MPI mode, as one shell-quoted string"),
    Opt(("--tcp",), "tcp", "flag", None, G_MODE,
        "only TCP between the ranks, as horovodrun --tcp: sets NCCL_IB_DISABLE=1 in every rank "
        "(NCCL leaves InfiniBand alone) in Gloo and MPI mode; kolo's own traffic is TCP (or "
        "shared memory on one host) anyway, and MPI mode passes -mca pml ob1 -mca btl ^openib"),
    Opt(("-p", "--ssh-port"), "ssh_port", "value", "PORT", G_NET,
        "ssh port of the remote hosts (default: ssh's own configuration)"),
    Opt(("-i", "--ssh-identity-file"), "ssh_identity", "value", "FILE", G_NET,
        "ssh private key for the remote hosts (default: $KOLO_SSH_IDENTITY, else ssh's own)"),
    Opt(("--network-interface", "--network-interfaces"), "network_interface", "append", "IF",
        G_NET,
        "network interface(s) for the job's traffic, comma-separated or repeated: kolorun "
        "serves the store on the first one's address and every rank gets KOLO_GLOO_IFACE=the "
        "first (Gloo uses one); NCCL_SOCKET_IFNAME and, in MPI mode, btl_tcp_if_include / "
        "oob_tcp_if_include get them all; default: the store listens on every address and "
        "ranks choose their own"),
    Opt(("--start-timeout",), "start_timeout", "value", "SECONDS", G_NET,
        "fail the job when a rank has not connected to the store SECONDS after the first "
        "rank did (the ranks' init waits as long for each other; default: "
        "$KOLO_START_TIMEOUT, else 120); sets KOLO_START_TIMEOUT"),
    Opt(("--gloo-timeout-seconds",), "gloo_timeout", "value", "SECONDS", G_NET,
        "horovodrun's timeout of Gloo's rendezvous and operations: in kolorun another name "
        "of --start-timeout (a silent peer fails kolo's operations after KOLO_TIMEOUT_SECONDS, "
        "default 30, as Gloo's); giving both is an error"),
    Opt(("-x",), "env", "append", "VAR[=VAL]", G_ENV,
        "set VAR=VAL in every rank, or pass the launcher's own VAR (repeatable); in MPI mode "
        "exported with mpirun -x"),
    Opt(("--output-filename",), "output_dir", "value", "DIR", G_OUT,
        "also write each rank's output to DIR/rank.N/stdout and DIR/rank.N/stderr: the lines "
        "the terminal shows, with their [rank] prefix, as horovodrun writes them to both (MPI "
        "mode: mpirun --output-filename DIR)"),
    Opt(("-prefix-timestamp", "--prefix-output-with-timestamp"), "prefix_timestamp", "flag",
        None, G_OUT,
        "put the local time before each forwarded output line, as horovodrun does: "
        "\"Mon Jan 13 10:00:00 2025[0]<stdout>:text\" (Python's time.asctime()), also in the "
        "--output-filename files; MPI mode passes mpirun --timestamp-output (the same format)"),
    Opt(("--verbose",), "verbose", "flag", None, G_OUT,
        "print what kolorun does: the host assignment, the store address, each remote command, "
        "the mpirun command line"),
    Opt(("-v", "--version"), "version", "flag", None, G_OUT,
        "print kolo's version and exit (as horovodrun -v: the bare version)"),
    Opt(("-cb", "--check-build"), "check_build", "flag", None, G_OUT,
        "print which frameworks, controllers and tensor operations this kolo was built with "
        "(horovodrun's layout; reads libkolo.so, see $KOLO_LIBRARY) and exit"),
    Opt(("-h", "--help"), "help", "flag", None, G_OUT, "show this help and exit"),
    Opt(("--config-file",), "config_file", "value", "FILE", G_TUNE,
        "read horovodrun's YAML configuration file: controller, and the sections params "
        "(fusion_threshold_mb, cycle_time_ms, cache_capacity, hierarchical_allreduce, ...), "
        "autotune (enabled, log_file, warmup_samples, ...), timeline (filename, mark_cycles), "
        "stall_check (enabled, warning_time_seconds, shutdown_time_seconds), library_options "
        "(gloo_timeout_seconds, ...) and logging (level); each key does what its flag does, a "
        "flag on the command line wins over the file, an unknown key or a value of the wrong "
        "type is an error naming it. Needs PyYAML (python3-yaml)"),
    Opt(("--fusion-threshold-mb",), "fusion_mb", "value", "MB", G_TUNE,
        "fuse small tensors into buffers of up to MB mebibytes, 0 turns fusion off; sets "
        "KOLO_FUSION_THRESHOLD to MB*1048576 bytes (runtime default 128 MB)"),
    Opt(("--cycle-time-ms",), "cycle_ms", "value", "MS", G_TUNE,
        "pacing of the coordinator's rounds: a round starts at once when an op is enqueued "
        "(nothing waits to gather requests); while other ranks still have ops pending, a rank "
        "with none runs a round every MS milliseconds (an idle job runs only heartbeat rounds); "
        "sets KOLO_CYCLE_TIME (runtime default 1 ms)"),
    Opt(("--cache-capacity",), "cache_capacity", "value", "N", G_TUNE,
        "number of negotiated responses the response cache keeps, 0 turns it off; sets "
        "KOLO_CACHE_CAPACITY (runtime default 1024)"),
    Opt(("--disable-cache",), "disable_cache", "flag", None, G_TUNE,
        "horovodrun's flag to re-run its cached start-up checks every time; kolorun caches "
        "none, so it has no effect (the response cache is --cache-capacity 0)"),
    Opt(("--hierarchical-allreduce",), "hierarchical", "flag", None, G_TUNE,
        "force the hierarchical allreduce where the hosts hold equal numbers (> 1) of a process "
        "set's ranks: reduce-scatter among the ranks of each host (shared memory for CPU "
        "tensors, NCCL for CUDA tensors), allreduce of each rank's shard across hosts, allgather "
        "within the host. Without either flag CPU tensors take it by themselves on such "
        "topologies (docs/algorithms.md) and CUDA tensors do not; other topologies "
        "keep the flat allreduce; sets KOLO_HIERARCHICAL_ALLREDUCE=1"),
    Opt(("--no-hierarchical-allreduce",), "no_hierarchical", "flag", None, G_TUNE,
        "one flat allreduce over every rank of the set, for CPU and CUDA tensors, even where the "
        "topology has hosts with several ranks; sets KOLO_HIERARCHICAL_ALLREDUCE=0"),
    Opt(("--timeline-filename",), "timeline", "value", "FILE", G_TUNE,
        "record a Chrome trace (chrome://tracing, Perfetto) of every collective to FILE, "
        "written by rank 0 (KOLO_TIMELINE_ALL_RANKS=1: every rank, t.json becoming "
        "t.<rank>.json); sets KOLO_TIMELINE"),
    Opt(("--timeline-mark-cycles",), "timeline_cycles", "flag", None, G_TUNE,
        "also mark each coordinator cycle in the timeline; sets KOLO_TIMELINE_MARK_CYCLES=1"),
    Opt(("--no-timeline-mark-cycles",), "no_timeline_cycles", "flag", None, G_TUNE,
        "do not mark the cycles (the default; horovodrun's negation); sets "
        "KOLO_TIMELINE_MARK_CYCLES=0"),
    Opt(("--no-stall-check",), "no_stall_check", "flag", None, G_TUNE,
        "turn the stall inspector's warnings off (tensors some ranks submitted and others did "
        "not); the stall shutdown still fails such ops after "
        "--stall-check-shutdown-time-seconds (0 = never); sets KOLO_STALL_CHECK_DISABLE=1"),
    Opt(("--stall-check",), "stall_check", "flag", None, G_TUNE,
        "keep the stall inspector on (the default; horovodrun's negation of --no-stall-check); "
        "sets KOLO_STALL_CHECK_DISABLE=0"),
    Opt(("--stall-check-warning-time-seconds",), "stall_warn", "value", "SECONDS", G_TUNE,
        "warn after a tensor waited this long for other ranks; sets "
        "KOLO_STALL_CHECK_TIME_SECONDS (runtime default 60)"),
    Opt(("--stall-check-shutdown-time-seconds",), "stall_shutdown", "value", "SECONDS", G_TUNE,
        "fail a tensor on every rank (an error naming the ranks that did not submit it) after "
        "it waited this long, 0 never (the runtime keeps working); sets "
        "KOLO_STALL_SHUTDOWN_TIME_SECONDS (runtime default 1800)"),
    Opt(("--autotune",), "autotune", "flag", None, G_TUNE,
        "tune the fusion threshold, the cycle time, the allreduce algorithm crossovers and, where "
        "the hosts make it a choice, hierarchical allreduce while the job runs (rank 0 scores allreduce throughput, every rank switches at the same "
        "round), then keep the best; knobs set by flags or KOLO_* variables stay as set; sets "
        "KOLO_AUTOTUNE=1"),
    Opt(("--no-autotune",), "no_autotune", "flag", None, G_TUNE,
        "no autotuning (the default; horovodrun's negation of --autotune): sets no variable, "
        "and passes none of the autotune settings below on (as horovodrun); wins over "
        "--config-file's autotune.enabled: true, excludes --autotune"),
    Opt(("--autotune-log-file",), "autotune_log", "value", "FILE", G_TUNE,
        "rank 0 writes one CSV line per autotune sample (Horovod's columns plus the "
        "crossovers), the best last; sets KOLO_AUTOTUNE_LOG"),
    Opt(("--autotune-warmup-samples",), "autotune_warmup", "value", "N", G_TUNE,
        "samples discarded at the start; sets KOLO_AUTOTUNE_WARMUP_SAMPLES (default 3)"),
    Opt(("--autotune-steps-per-sample",), "autotune_steps", "value", "N", G_TUNE,
        "steps (executions of one allreduce) per sub-sample, five sub-samples a sample; sets "
        "KOLO_AUTOTUNE_STEPS_PER_SAMPLE (default 10)"),
    Opt(("--autotune-bayes-opt-max-samples",), "autotune_max", "value", "N", G_TUNE,
        "scored samples before the best set is fixed (fewer when the search converges); sets "
        "KOLO_AUTOTUNE_BAYES_OPT_MAX_SAMPLES (default 20)"),
    Opt(("--autotune-gaussian-process-noise",), "autotune_noise", "value", "X", G_TUNE,
        "accepted for horovodrun's scripts, from 0 to 1 as there; kolo's search (a compass "
        "search, not a Gaussian process) does not use it; sets "
        "KOLO_AUTOTUNE_GAUSSIAN_PROCESS_NOISE"),
    Opt(("--log-level",), "log_level", "value", "LEVEL", G_TUNE,
        "runtime log level: trace, debug, info, warning, error, fatal or off; sets "
        "KOLO_LOG_LEVEL (runtime default warning)"),
]


OPTIONS += [Opt(names, dest, kind, metavar, G_ELASTIC, text)
            for names, dest, kind, metavar, text in ELASTIC_OPTIONS]


def _ignored(names, kind, metavar, why):
    dest = "ignored_" + names[-1].lstrip("-").replace("-", "_")
    return Opt(names, dest, kind, metavar, G_COMPAT, why)


OPTIONS += [
    _ignored(("--hierarchical-allgather",), "flag", None,
             "kolo's allgather is always flat (Bruck or ring, by size)"),
    _ignored(("--no-hierarchical-allgather",), "flag", None,
             "kolo's allgather is always flat (what this asks for)"),
    _ignored(("--mpi-threads-disable",), "flag", None,
             "kolo calls MPI from its coordinator thread only, whatever the thread level"),
    _ignored(("--no-mpi-threads-disable",), "flag", None,
             "kolo calls MPI from its coordinator thread only, whatever the thread level"),
    _ignored(("--num-nccl-streams",), "value", "N", "kolo uses one NCCL stream per device"),
    _ignored(("--thread-affinity",), "value", "CPU", "kolo does not pin its threads"),
    _ignored(("--log-hide-timestamp", "--log-without-timestamp"), "flag", None,
             "kolo's log lines always carry a timestamp"),
    _ignored(("--no-log-hide-timestamp", "--log-with-timestamp"), "flag", None,
             "kolo's log lines always carry a timestamp (what this asks for)"),
]

# horovodrun flags with no kolo equivalent: refused with the reason (exit status 2).
UNSUPPORTED = {
    "--jsrun": "jsrun (LSF) mode (use --mpi or the default Gloo mode)",
}

_BY_NAME = {name: opt for opt in OPTIONS for name in opt.names}
_DEST_FLAG = {opt.dest: opt.names[-1] for opt in OPTIONS}
_LONG_NAMES = sorted(n for n in list(_BY_NAME) + list(UNSUPPORTED) if n.startswith("--"))
LOG_LEVELS = ("trace", "debug", "info", "warning", "warn", "error", "fatal", "off")
_VAR_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_INT_RE = re.compile(r"[0-9]{1,12}")


class LaunchOptions(NamedTuple):
    np: int
    hosts: List[HostSlots]
    hosts_given: bool
    controller: str  # "gloo" | "mpi"
    mpi_args: List[str]
    ssh_port: Optional[int]
    ssh_identity: Optional[str]
    network_interface: Optional[str]
    start_timeout: float
    output_dir: Optional[str]
    verbose: bool
    knob_env: Dict[str, str]  # KOLO_* set by tuning flags (and KOLO_START_TIMEOUT, _GLOO_IFACE;
                              # NCCL_IB_DISABLE for --tcp)
    extra_env: Dict[str, str]  # -x variables, resolved
    command: List[str]
    notes: Tuple[str, ...] = ()  # what kolorun says before it starts (flags without effect)
    elastic: Optional[ElasticOptions] = None  # set when the job is elastic (elastic_args.py)
    failure_grace: float = DEFAULT_FAILURE_GRACE  # seconds survivors get after a rank failed
    binding: BindSpec = BindSpec()  # Gloo mode's binding request (binding.py)
    binding_args: Optional[List[str]] = None  # MPI mode: replaces the placement when set
    prefix_timestamp: bool = False  # -prefix-timestamp: the time before each output line


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Wider than argparse's default (up to 100 columns), option help aligned at column 32."""

    def __init__(self, prog):
        width = min(100, shutil.get_terminal_size((100, 24)).columns) - 2
        super().__init__(prog, max_help_position=32, width=width)

    def _split_lines(self, text, width):
        # Never break inside an option name such as -map-by.
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)


def build_parser():
    parser = argparse.ArgumentParser(
        prog="kolorun", usage=USAGE, description=DESCRIPTION, epilog=EPILOG, add_help=False,
        allow_abbrev=False, formatter_class=_HelpFormatter)
    groups = {}
    for opt in OPTIONS:
        if opt.group not in groups:
            groups[opt.group] = parser.add_argument_group(opt.group)
        kwargs = {"dest": opt.dest, "help": opt.help}
        if opt.kind == "flag":
            kwargs["action"] = "store_true"
        else:
            kwargs["metavar"] = opt.metavar
            if opt.kind == "append":
                kwargs["action"] = "append"
            if opt.kind == "pair":
                kwargs["nargs"] = 2
        groups[opt.group].add_argument(*opt.names, **kwargs)
    parser.add_argument_group("command").add_argument(
        "command", nargs="*", metavar="COMMAND [ARGS...]",
        help="the program every rank runs, with its arguments (after '--' if it starts with '-')")
    return parser


def resolve_abbreviation(name):
    """The full name of a long option given as an unambiguous prefix (argparse's rule), else
    name unchanged; UsageError when the prefix fits several options."""
    if name in _BY_NAME or name in UNSUPPORTED or not name.startswith("--") or name == "--":
        return name
    matches = [n for n in _LONG_NAMES if n.startswith(name)]
    if len({id(_BY_NAME.get(n, n)) for n in matches}) > 1:
        raise UsageError("ambiguous option: %s could match %s" % (name, ", ".join(matches)))
    return matches[0] if matches else name


def split_command(argv):
    """Splits argv into (kolorun's options, the command) at the first non-option word; long
    options given as unambiguous prefixes come back with their full names."""
    argv = list(argv)
    i = 0
    while i < len(argv):
        word = argv[i]
        if word == "--":
            return argv[:i], argv[i + 1:]
        if not word.startswith("-") or word == "-":
            return argv[:i], argv[i:]
        name, eq, value = word.partition("=")
        full = resolve_abbreviation(name)
        if full != name:
            argv[i] = full + eq + value
            name = full
        opt = _BY_NAME.get(name)
        if opt is None and name in UNSUPPORTED:
            raise UsageError("%s: %s is not supported by kolorun" % (name, UNSUPPORTED[name]))
        if opt is None and _attached_value(word):
            i += 1  # -Hlocalhost:2: argparse splits it as it does for any one-letter option
            continue
        if opt is None and _attached_hint(word):
            raise UsageError("unrecognized option %r: %s" % (word, _attached_hint(word)))
        if opt is None:
            raise UsageError("unrecognized option %r (the command comes after kolorun's "
                             "options; put '--' before it if it starts with '-')" % word)
        i += 1 if opt.kind == "flag" or "=" in word else (3 if opt.kind == "pair" else 2)
    return argv, []


def _attached_value(word):
    """Whether word is a one-letter option with its value attached (-Hlocalhost:2, -p2222,
    -ikey, -xVAR=1), which argparse (and so horovodrun) accepts. A word that begins with a
    longer single-dash name (-np2, -cb1) is not: argparse would read -np2 as -n with the value
    'p2', so it is refused with a hint instead (_attached_hint)."""
    if word.startswith("--") or len(word) < 3:
        return False
    opt = _BY_NAME.get(word[:2])
    longer = [n for n in _BY_NAME if not n.startswith("--") and len(n) > 2
              and word.startswith(n)]
    return opt is not None and opt.kind in ("value", "append") and not longer


def _attached_hint(word):
    """"write '-np 2' (...)" for a longer single-dash option glued to its value, else ""."""
    for name in sorted(_BY_NAME, key=len, reverse=True):
        opt = _BY_NAME[name]
        if (not name.startswith("--") and len(name) > 2 and word.startswith(name)
                and opt.kind != "flag"):
            return ("write '%s %s' (only one-letter options such as -H take their value "
                    "attached)" % (name, word[len(name):]))
    return ""


def format_help():
    return build_parser().format_help()


def _number(text, flag, lo, hi):
    try:
        v = float(text)
    except (TypeError, ValueError):
        v = math.nan
    if not (math.isfinite(v) and lo <= v <= hi) or "_" in str(text):
        raise UsageError("%s: expected a number from %s to %s, got %r"
                         % (flag, env_number(lo), env_number(hi), text))
    return v


def _integer(text, flag, lo, hi):
    if not _INT_RE.fullmatch(str(text)) or not lo <= int(text) <= hi:
        raise UsageError("%s: expected an integer from %d to %d, got %r" % (flag, lo, hi, text))
    return int(text)


def env_number(v):
    """How a validated number is written into the environment (1.0 -> "1", 0.5 -> "0.5")."""
    return str(int(v)) if float(v).is_integer() else repr(float(v))


def _source(ns, dest, flag):
    """Where a value came from, for messages: the flag, or the --config-file key that set it."""
    return getattr(ns, "config_origin", {}).get(dest, flag)


def knob_environment(ns, start_timeout):
    env = {"KOLO_START_TIMEOUT": env_number(start_timeout)}
    src = lambda dest, flag: _source(ns, dest, flag)  # noqa: E731
    if ns.fusion_mb is not None:
        mb = _number(ns.fusion_mb, src("fusion_mb", "--fusion-threshold-mb"), 0, 1 << 20)
        env["KOLO_FUSION_THRESHOLD"] = str(int(round(mb * 1048576)))
    if ns.cycle_ms is not None:
        env["KOLO_CYCLE_TIME"] = env_number(
            _number(ns.cycle_ms, src("cycle_ms", "--cycle-time-ms"), 0, 60000))
    if ns.cache_capacity is not None:
        cap = _integer(ns.cache_capacity, src("cache_capacity", "--cache-capacity"), 0, 1 << 20)
        env["KOLO_CACHE_CAPACITY"] = str(cap)
    if ns.hierarchical and ns.no_hierarchical:
        raise UsageError("--hierarchical-allreduce and --no-hierarchical-allreduce exclude each "
                         "other")
    if ns.hierarchical:
        env["KOLO_HIERARCHICAL_ALLREDUCE"] = "1"
    if ns.no_hierarchical:
        env["KOLO_HIERARCHICAL_ALLREDUCE"] = "0"
    if ns.timeline is not None:
        if not ns.timeline:
            raise UsageError("%s: empty file name" % src("timeline", "--timeline-filename"))
        env["KOLO_TIMELINE"] = ns.timeline
    _exclusive(ns, "timeline_cycles", "no_timeline_cycles")
    if ns.timeline_cycles or ns.no_timeline_cycles:
        env["KOLO_TIMELINE_MARK_CYCLES"] = "1" if ns.timeline_cycles else "0"
    _exclusive(ns, "no_stall_check", "stall_check")
    if ns.no_stall_check or ns.stall_check:
        env["KOLO_STALL_CHECK_DISABLE"] = "1" if ns.no_stall_check else "0"
    if ns.stall_warn is not None:
        env["KOLO_STALL_CHECK_TIME_SECONDS"] = env_number(_number(
            ns.stall_warn, src("stall_warn", "--stall-check-warning-time-seconds"), 0.001, 1e7))
    if ns.stall_shutdown is not None:
        env["KOLO_STALL_SHUTDOWN_TIME_SECONDS"] = env_number(_number(
            ns.stall_shutdown, src("stall_shutdown", "--stall-check-shutdown-time-seconds"), 0,
            1e7))
    env.update(_autotune_environment(ns))
    if ns.log_level is not None:
        level = ns.log_level.lower()
        if level not in LOG_LEVELS:
            raise UsageError("%s: expected one of %s, got %r"
                             % (src("log_level", "--log-level"), ", ".join(LOG_LEVELS),
                                ns.log_level))
        env["KOLO_LOG_LEVEL"] = level
    if ns.network_interface is not None:
        env["KOLO_GLOO_IFACE"] = ns.network_interface.split(",")[0]
    if ns.tcp:
        env["NCCL_IB_DISABLE"] = "1"  # horovodrun's config_parser does the same for --tcp
    return env


def _autotune_environment(ns):
    """KOLO_AUTOTUNE and its settings' variables. The settings are checked whatever the switch
    says (horovodrun's validate_config_args), but with autotuning turned off (--no-autotune,
    or the config file's autotune.enabled: false) none of them is passed on: horovodrun exports
    them only when autotuning is on, and a rank must not find a log file name or sample counts
    that --no-autotune meant to drop. Without either switch they are passed (a KOLO_AUTOTUNE=1
    of the ranks' own environment turns autotuning on there)."""
    src = lambda dest, flag: _source(ns, dest, flag)  # noqa: E731
    _exclusive(ns, "autotune", "no_autotune")
    env = {}
    if ns.autotune:
        env["KOLO_AUTOTUNE"] = "1"
    if ns.autotune_log is not None:
        if not ns.autotune_log:
            raise UsageError("%s: empty file name" % src("autotune_log", "--autotune-log-file"))
        env["KOLO_AUTOTUNE_LOG"] = ns.autotune_log
    for dest, flag, var, lo in (
            ("autotune_warmup", "--autotune-warmup-samples", "WARMUP_SAMPLES", 0),
            ("autotune_steps", "--autotune-steps-per-sample", "STEPS_PER_SAMPLE", 1),
            ("autotune_max", "--autotune-bayes-opt-max-samples", "BAYES_OPT_MAX_SAMPLES", 1)):
        value = getattr(ns, dest)
        if value is not None:
            env["KOLO_AUTOTUNE_" + var] = str(_integer(value, src(dest, flag), lo, 1 << 20))
    if ns.autotune_noise is not None:
        # horovodrun: "autotune_gaussian_process_noise=X must be in [0, 1]"
        env["KOLO_AUTOTUNE_GAUSSIAN_PROCESS_NOISE"] = env_number(_number(
            ns.autotune_noise, src("autotune_noise", "--autotune-gaussian-process-noise"), 0,
            1))
    return {} if ns.no_autotune else env


def _exclusive(ns, dest, negation):
    """A flag and its negation given together (horovodrun's mutually exclusive groups)."""
    if getattr(ns, dest) and getattr(ns, negation):
        raise UsageError("%s and %s exclude each other" % (
            _source(ns, dest, _DEST_FLAG[dest]), _source(ns, negation, _DEST_FLAG[negation])))


def _extra_environment(items, environ):
    env = {}
    for item in items or []:
        name, eq, value = item.partition("=")
        if not _VAR_RE.fullmatch(name):
            raise UsageError("-x %s: %r is not a valid variable name" % (item, name))
        if not eq:
            if name not in environ:
                raise UsageError("-x %s: %s is not set in kolorun's environment (use -x %s=VALUE)"
                                 % (item, name, name))
            value = environ[name]
        env[name] = value
    return env


def parse(argv, environ=None):
    """Returns LaunchOptions, or None after printing --help/--version. Raises UsageError."""
    environ = os.environ if environ is None else environ
    own, command = split_command(list(argv))
    parser = build_parser()
    parser.error = _raise_usage  # type: ignore[method-assign]
    ns = parser.parse_args(own)
    if ns.help:
        print(parser.format_help(), end="")
        return None
    if ns.version:
        print(__version__)
        return None
    if ns.check_build:
        print_report(verbose=bool(ns.verbose), environ=environ)
        return None
    start_flag = "--start-timeout"
    if ns.gloo_timeout is not None:  # before the file, whose gloo_timeout_seconds it overrides
        if ns.start_timeout is not None:
            raise UsageError("--start-timeout and --gloo-timeout-seconds are one setting in "
                             "kolorun (how long ranks may take to connect); give one of them "
                             "(kolo's operations time out after KOLO_TIMEOUT_SECONDS)")
        ns.start_timeout, start_flag = ns.gloo_timeout, "--gloo-timeout-seconds"
    config_notes = ()
    if ns.config_file is not None:
        config_notes, ns.config_origin = apply_config(ns, ns.config_file, UsageError)
    if not command:
        raise UsageError("no command to run (usage: kolorun -np N COMMAND [ARGS...])")
    if ns.gloo and ns.mpi:
        raise UsageError("--gloo and --mpi exclude each other")
    if ns.hosts is not None and ns.hostfile is not None:
        raise UsageError("give the hosts either with -H or with --hostfile, not both")
    try:
        if ns.hosts is not None:
            hosts = parse_hosts(ns.hosts)
        elif ns.hostfile is not None:
            hosts = parse_hostfile(ns.hostfile)
        else:
            hosts = None
    except HostListError as e:
        raise UsageError(str(e)) from None
    elastic = elastic_options(ns, hosts, environ, UsageError)
    if elastic is None:
        config_notes += static_notes(ns, UsageError)
    if ns.np is not None:
        np = _integer(ns.np, "-np", 1, 1 << 20)
    elif elastic is not None:
        np = elastic.min_np
    elif hosts is not None:
        np = sum(h.slots for h in hosts)
    else:
        raise UsageError("-np is required (or give -H/--hostfile to start one rank per slot)")
    hosts_given = hosts is not None
    if hosts is None:
        hosts = [HostSlots("localhost", np)]
    if ns.network_interface is not None:
        # horovodrun: a comma-separated list, or the flag repeated; kept in order, once each.
        names = []
        for given in ns.network_interface:
            for name in given.split(","):
                if not re.fullmatch(r"[^\s,/]{1,15}", name):
                    raise UsageError("--network-interface: expected interface names like eth0 "
                                     "(comma-separated), got %r" % given)
                if name not in names:
                    names.append(name)
        ns.network_interface = ",".join(names)
    start_timeout = _flag_or_env(ns.start_timeout,
                                 _source(ns, "start_timeout", start_flag), environ,
                                 ("KOLO_START_TIMEOUT", "HOROVOD_START_TIMEOUT"),
                                 DEFAULT_START_TIMEOUT, 1)
    ssh_port = _integer(ns.ssh_port, "--ssh-port", 1, 65535) if ns.ssh_port is not None else None
    identity = ns.ssh_identity or environ.get("KOLO_SSH_IDENTITY") or None
    try:
        mpi_args = shlex.split(ns.mpi_args) if ns.mpi_args else []
    except ValueError as e:
        raise UsageError("--mpi-args: %s" % e) from None
    failure_grace = _flag_or_env(ns.failure_grace, "--failure-grace-seconds", environ,
                                 ("KOLO_LAUNCHER_FAILURE_GRACE_SECONDS",
                                  "HOROVOD_LAUNCHER_FAILURE_GRACE_SECONDS"),
                                 DEFAULT_FAILURE_GRACE, 0)
    binding, binding_args = _binding(ns)
    if elastic is not None and binding.explicit and binding.bind != "none":
        raise UsageError(
            "--binding-args %r: elastic workers are not bound to cores (how many run on a host "
            "changes as hosts come and go, so kolorun has no fixed share of the cores to give "
            "them); leave --binding-args out, or use --no-bind" % ns.binding_args)
    return LaunchOptions(
        np=np, hosts=hosts, hosts_given=hosts_given, controller="mpi" if ns.mpi else "gloo",
        mpi_args=mpi_args, ssh_port=ssh_port, ssh_identity=identity,
        network_interface=ns.network_interface, start_timeout=start_timeout,
        output_dir=ns.output_dir, verbose=bool(ns.verbose),
        knob_env=knob_environment(ns, start_timeout),
        extra_env=_extra_environment(ns.env, environ), command=command,
        notes=_ignored_notes(ns) + config_notes, failure_grace=failure_grace, binding=binding,
        binding_args=binding_args, elastic=elastic,
        prefix_timestamp=bool(ns.prefix_timestamp))


def _flag_or_env(text, flag, environ, names, default, low):
    """A number of seconds (low..86400): the flag's value, else the first of the variables
    `names` that is set, else default; UsageError naming where a bad value came from."""
    for name in names:
        if text is None and name in environ:
            text, flag = environ[name], name
    return default if text is None else _number(text, flag, low, 86400)


def _binding(ns):
    try:
        return binding_options(bool(ns.no_bind), ns.binding_args, bool(ns.mpi))
    except BindingError as e:
        raise UsageError(str(e)) from None


def _ignored_notes(ns):
    """One note per flag kolo accepts without effect, naming the --config-file key instead of
    the flag when the file set it; and for --mpi-args in Gloo mode (horovodrun passes them to
    mpirun only, so they change nothing there either, but a user who gave them expects an
    effect)."""
    notes = []
    for opt in OPTIONS:
        if opt.group == G_COMPAT and getattr(ns, opt.dest) not in (None, False):
            notes.append("%s has no effect in kolo (%s)"
                         % (_source(ns, opt.dest, "/".join(opt.names)), opt.help))
    if ns.mpi_args and not ns.mpi:
        notes.append("--mpi-args has no effect in Gloo mode (they are arguments for mpirun, "
                     "which only --mpi runs)")
    return tuple(notes)


# Tuning variables that horovodrun sets under the same name with HOROVOD_ instead of KOLO_.
_MIRRORED = ("START_TIMEOUT", "FUSION_THRESHOLD", "CYCLE_TIME", "CACHE_CAPACITY",
             "HIERARCHICAL_ALLREDUCE", "TIMELINE", "TIMELINE_MARK_CYCLES", "STALL_CHECK_DISABLE",
             "STALL_CHECK_TIME_SECONDS", "STALL_SHUTDOWN_TIME_SECONDS", "LOG_LEVEL", "GLOO_IFACE",
             "AUTOTUNE", "AUTOTUNE_LOG", "AUTOTUNE_WARMUP_SAMPLES", "AUTOTUNE_STEPS_PER_SAMPLE",
             "AUTOTUNE_BAYES_OPT_MAX_SAMPLES", "AUTOTUNE_GAUSSIAN_PROCESS_NOISE")


def horovod_knob_environment(knob_env):
    """horovodrun's names for the KOLO_* variables the tuning flags set (same values; the log
    level upper-case, as horovodrun's choices are), for scripts that read HOROVOD_*. The
    runtime reads KOLO_* first, so these never change what kolo does."""
    env = {}
    for key in _MIRRORED:
        value = knob_env.get("KOLO_" + key)
        if value is not None:
            env["HOROVOD_" + key] = value.upper() if key == "LOG_LEVEL" else value
    return env


def _raise_usage(message):
    raise UsageError(message)
