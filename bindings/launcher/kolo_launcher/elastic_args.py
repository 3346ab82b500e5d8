# SPDX-License-Identifier: Apache-2.0
"""kolorun's elastic flags (horovodrun's names) and their validation: ElasticOptions.

A job is elastic when --host-discovery-script or --min-np is given (horovodrun's
launch._is_elastic). --max-np alone leaves the job static, with -np ranks, as under horovodrun
(kolorun notes that it has no effect there). The hosts then come from the discovery script,
re-run every few seconds, or from -H/--hostfile as a fixed list; -np is the default of
--min-np, and the number of slots the first round waits for (horovodrun's "number of processes
required before training can start"; later rounds need only --min-np). The other elastic flags
without --host-discovery-script or --min-np are a usage error, as is elastic mode with --mpi
(MPI cannot re-initialize).
Two environment variables tune the driver: KOLO_ELASTIC_DISCOVERY_INTERVAL (seconds between
runs of the discovery script, default 1) and KOLO_ELASTIC_FINISH_GRACE_SECONDS (once a worker
exited 0, how long the others may take to exit by themselves before kolorun stops them;
default: no limit, as horovodrun, which never stops a worker that is still running: a rank 0
that writes the final checkpoint after the others left must not be killed).
"""

import math
import os
import re
import shutil
from typing import NamedTuple, Optional, Tuple

DEFAULT_ELASTIC_TIMEOUT = 600.0  # horovodrun's default
DEFAULT_DISCOVERY_INTERVAL = 1.0
DEFAULT_FINISH_GRACE = math.inf  # no limit
COOLDOWN_MIN_SECONDS = 1  # horovodrun's bounds of --blacklist-cooldown-range
COOLDOWN_MAX_SECONDS = 3600

# (names, dest, kind, metavar, help); args.py turns them into its Opt rows.
ELASTIC_OPTIONS = [
    (("--min-np", "--min-num-proc"), "min_np", "value", "N",
     "elastic: the fewest workers training may continue with; below it the job waits up to "
     "--elastic-timeout for new hosts, then fails (default: -np)"),
    (("--max-np", "--max-num-proc"), "max_np", "value", "N",
     "elastic: the most workers started, whatever the hosts offer (default: every slot); "
     "alone it does not make the job elastic (as horovodrun: a static job of -np ranks)"),
    (("--host-discovery-script",), "discovery_script", "value", "SCRIPT",
     "elastic: an executable printing the available hosts, one 'host:slots' (or 'host', with "
     "--slots-per-host slots) a line; kolorun runs it every second and starts workers on new "
     "slots; those on hosts it no longer lists leave at their next commit (graceful removal, "
     "no rollback for the others). The job fails at once (exit status 1) "
     "when the script's first run fails (non-zero exit, time-out, a line that is not a host); "
     "a later failure keeps the last list, and the script is run again"),
    (("--slots-per-host", "--slots"), "slots_per_host", "value", "N",
     "elastic: slots of a host the discovery script lists without ':slots' (default 1)"),
    (("--elastic-timeout",), "elastic_timeout", "value", "SECONDS",
     "elastic: how long to wait for slots before the job fails: -np of them before the first "
     "round, --min-np after failures; also how long a removed worker may take to reach its "
     "next commit before it is stopped (default: $KOLO_ELASTIC_TIMEOUT, "
     "$HOROVOD_ELASTIC_TIMEOUT, $HOROVOD_ELASTIC_START_TIMEOUT, else 600)"),
    (("--reset-limit",), "reset_limit", "value", "N",
     "elastic: fail the job when the workers would be re-formed more than N times (a round "
     "after the first; one that only admits a failed worker's replacement belongs to the "
     "re-forming it was started for, and one that adds workers again before the workers "
     "reached their commit to that re-forming, as horovodrun's resets; default: no limit)"),
    (("--blacklist-cooldown-range",), "cooldown", "pair", ("MIN", "MAX"),
     "elastic: MIN MAX: a host whose worker failed gets no new workers for MIN*2^k + U(0, MIN) "
     "seconds at its k-th blacklisting, within [MIN, MAX], as horovodrun (1 <= MIN <= MAX <= "
     "3600); without it, never again (its other workers go on)"),
]


class ElasticOptions(NamedTuple):
    min_np: int
    max_np: Optional[int]
    discovery_script: Optional[str]
    slots_per_host: int
    elastic_timeout: float
    reset_limit: Optional[int]
    cooldown: Optional[Tuple[float, float]]
    discovery_interval: float = DEFAULT_DISCOVERY_INTERVAL
    finish_grace: float = DEFAULT_FINISH_GRACE
    # the slots the first round waits for: -np (horovodrun's "number of processes required
    # before training can start"), else --min-np; start_flag names it in messages
    start_np: int = 1
    start_flag: str = "-np"


def _int(text, flag, lo, error):
    if not str(text).isdigit() or int(text) < lo or int(text) > (1 << 20):
        raise error("%s: expected an integer from %d to %d, got %r" % (flag, lo, 1 << 20, text))
    return int(text)


def _seconds(text, flag, lo, error):
    try:
        v = float(text)
    except (TypeError, ValueError):
        v = math.nan
    if not (math.isfinite(v) and lo <= v <= 86400 * 30):
        raise error("%s: expected a number of seconds from %g to %d, got %r"
                    % (flag, lo, 86400 * 30, text))
    return v


def is_elastic(ns):
    """horovodrun's launch._is_elastic: a discovery script or --min-np (not --max-np)."""
    return ns.discovery_script is not None or ns.min_np is not None


def static_notes(ns, error):
    """What kolorun says about the elastic flags of a static job: --max-np alone is accepted and
    does nothing, as under horovodrun (its value is still checked). Raises `error` for the other
    elastic flags, which would silently change nothing."""
    for dest, flag in (("slots_per_host", "--slots-per-host"),
                       ("elastic_timeout", "--elastic-timeout"),
                       ("reset_limit", "--reset-limit"),
                       ("cooldown", "--blacklist-cooldown-range")):
        if getattr(ns, dest) is not None:
            raise error("%s is for elastic jobs: give --host-discovery-script or --min-np too"
                        % flag)
    if ns.max_np is None:
        return ()
    _int(ns.max_np, "--max-np", 1, error)
    return ("--max-np has no effect without --min-np or --host-discovery-script: the job is "
            "static, with -np ranks (or one per slot), as under horovodrun",)


def _script_command(script, error):
    """The shell command that runs --host-discovery-script: its first word checked as the
    shell will run it. A bare name the shell would not find on PATH but that names an
    executable file here is taken as ./NAME (the user's evident meaning; horovodrun would
    fail on its first run); one that is neither is refused now, not on the first run."""
    first = script.split()[0]
    if os.sep in first:
        if not (os.path.isfile(first) and os.access(first, os.X_OK)):
            raise error("--host-discovery-script: %s is not an executable file" % first)
        return script
    if shutil.which(first) is not None or not re.match(r"^[\w.+-]+$", first):
        return script  # on PATH, or shell syntax (VAR=value ..., a subshell): the shell's
    if os.path.isfile(first):
        if not os.access(first, os.X_OK):
            raise error("--host-discovery-script: %s is not an executable file" % first)
        return "." + os.sep + script.lstrip()
    raise error("--host-discovery-script: %s is neither an executable file nor a command on "
                "PATH (give a path, e.g. ./%s)" % (first, first))


def elastic_options(ns, hosts, environ, error):
    """ElasticOptions when the command line asks for an elastic job (is_elastic), else None.
    Raises `error` (args.UsageError) for a bad or contradictory value."""
    if not is_elastic(ns):
        return None
    if ns.mpi:
        raise error("elastic training needs Gloo mode (MPI cannot be initialized again in a "
                    "process): drop --mpi")
    script = ns.discovery_script
    if script is not None:
        if hosts is not None:
            raise error("give the hosts either with --host-discovery-script or with -H/--hostfile, "
                        "not both")
        if not script.strip():
            raise error("--host-discovery-script: empty")
        script = _script_command(script, error)
    elif hosts is None:
        raise error("an elastic job needs its hosts: --host-discovery-script, -H or --hostfile")
    np = _int(ns.np, "-np", 1, error) if ns.np is not None else None
    min_np = _int(ns.min_np, "--min-np", 1, error) if ns.min_np is not None else np
    if min_np is None:
        raise error("an elastic job needs -np or --min-np")
    max_np = _int(ns.max_np, "--max-np", 1, error) if ns.max_np is not None else None
    if max_np is not None and max_np < min_np:
        raise error("--max-np %d is less than --min-np %d" % (max_np, min_np))
    if np is not None and (np < min_np or (max_np is not None and np > max_np)):
        raise error("-np %d is outside --min-np %d .. --max-np %s"
                    % (np, min_np, max_np if max_np is not None else "unbounded"))
    start_np = np if np is not None else min_np
    if script is None and sum(h.slots for h in hosts) < start_np:
        # horovodrun would wait --elastic-timeout for slots that a fixed list never adds
        raise error("%s %d asks for more slots than the host list has (%d: %s): an elastic job "
                    "waits for %s slots before its first round, and a fixed host list "
                    "(-H/--hostfile) never offers more; give fewer, or a "
                    "--host-discovery-script" % (
                        "-np" if np is not None else "--min-np", start_np,
                        sum(h.slots for h in hosts),
                        ",".join("%s:%d" % (h.name, h.slots) for h in hosts),
                        "-np" if np is not None else "--min-np"))
    slots = _int(ns.slots_per_host, "--slots-per-host", 1, error) \
        if ns.slots_per_host is not None else 1
    timeout_text, flag = ns.elastic_timeout, "--elastic-timeout"
    # HOROVOD_ELASTIC_START_TIMEOUT: the name Horovod's elastic.rst documents (and its
    # earlier drivers read); HOROVOD_ELASTIC_TIMEOUT: the one horovodrun --help names
    for name in ("KOLO_ELASTIC_TIMEOUT", "HOROVOD_ELASTIC_TIMEOUT",
                 "HOROVOD_ELASTIC_START_TIMEOUT"):
        if timeout_text is None and name in environ:
            timeout_text, flag = environ[name], name
    timeout = (_seconds(timeout_text, flag, 0, error) if timeout_text is not None
               else DEFAULT_ELASTIC_TIMEOUT)
    limit = _int(ns.reset_limit, "--reset-limit", 0, error) if ns.reset_limit is not None else None
    cooldown = None
    if ns.cooldown is not None:
        lo = _seconds(ns.cooldown[0], "--blacklist-cooldown-range", 0, error)
        hi = _seconds(ns.cooldown[1], "--blacklist-cooldown-range", 0, error)
        # horovodrun's bounds (discovery.DEFAULT_COOLDOWN_LOWER/UPPER_LIMIT_SECONDS)
        if lo < COOLDOWN_MIN_SECONDS or hi > COOLDOWN_MAX_SECONDS:
            raise error("--blacklist-cooldown-range: MIN must be at least %d s and MAX at most "
                        "%d s, as in horovodrun; got %g %g"
                        % (COOLDOWN_MIN_SECONDS, COOLDOWN_MAX_SECONDS, lo, hi))
        if hi < lo:
            raise error("--blacklist-cooldown-range: MAX %g is less than MIN %g" % (hi, lo))
        cooldown = (lo, hi)
    interval = DEFAULT_DISCOVERY_INTERVAL
    if environ.get("KOLO_ELASTIC_DISCOVERY_INTERVAL"):
        interval = _seconds(environ["KOLO_ELASTIC_DISCOVERY_INTERVAL"],
                            "KOLO_ELASTIC_DISCOVERY_INTERVAL", 0.05, error)
    finish_grace = DEFAULT_FINISH_GRACE
    if environ.get("KOLO_ELASTIC_FINISH_GRACE_SECONDS"):
        finish_grace = _seconds(environ["KOLO_ELASTIC_FINISH_GRACE_SECONDS"],
                                "KOLO_ELASTIC_FINISH_GRACE_SECONDS", 0, error)
    return ElasticOptions(min_np=min_np, max_np=max_np, discovery_script=script,
                          slots_per_host=slots, elastic_timeout=timeout, reset_limit=limit,
                          cooldown=cooldown, discovery_interval=interval,
                          finish_grace=finish_grace, start_np=start_np,
                          start_flag="-np" if np is not None else "--min-np")
