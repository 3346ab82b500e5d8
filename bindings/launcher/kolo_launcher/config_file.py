# SPDX-License-Identifier: Apache-2.0
"""--config-file: horovodrun's YAML configuration file, applied to kolorun's parsed flags.

The keys and their nesting are Horovod's (horovod/runner/common/util/config_parser.py):

  controller: gloo | mpi
  params:          fusion_threshold_mb, cycle_time_ms, cache_capacity, hierarchical_allreduce,
                   hierarchical_allgather
  autotune:        enabled, log_file, warmup_samples, steps_per_sample, bayes_opt_max_samples,
                   gaussian_process_noise
  timeline:        filename, mark_cycles
  stall_check:     enabled, warning_time_seconds, shutdown_time_seconds
  library_options: mpi_threads_disable, num_nccl_streams, ccl_bgt_affinity (mlsl_bgt_affinity,
                   its name in older Horovod releases), gloo_timeout_seconds
  logging:         level, with_timestamp, hide_timestamp

Each key sets what its flag sets (CONFIG_KEYS names the flag), so the values are checked as the
flag's are and end up in the same KOLO_* / HOROVOD_* variables. A flag given on the command
line wins over the file wherever it stands (as horovodrun's override_args). Differences from
horovodrun: a key it does not know is an error naming the key (horovodrun ignores it, so a typo
silently changed nothing), and so is a value of the wrong type (a string where a number or
true/false belongs). A null value counts as absent, as in horovodrun. Keys for horovodrun knobs
kolo has no use for (hierarchical_allgather, mpi_threads_disable, num_nccl_streams,
ccl_bgt_affinity, mlsl_bgt_affinity, with_timestamp / hide_timestamp) are accepted with a one-line
note (their flags' note, or Key.note for the keys without a flag), so Horovod's own sample file
(test/data/config.test.yaml, which has mlsl_bgt_affinity) runs as it is.

The file is read with PyYAML (python3-yaml on Debian/Ubuntu, pip's pyyaml), imported only when
--config-file is given: kolorun itself needs nothing but the standard library, and says how to
install PyYAML when this Python cannot import it.
"""

import math
import sys
from typing import NamedTuple, Optional

# kinds: "number" (int or float, given to the flag as text), "text" (a string), "bool"
# (true/false), "controller".


class Key(NamedTuple):
    kind: str
    dest: Optional[str]  # the flag's destination in the parsed namespace
    flag: str  # the flag it stands for (for messages)
    off_dest: Optional[str] = None  # bool keys: the destination that false sets
    note: Optional[str] = None  # keys without a kolo flag (dest None): what kolorun says


CONFIG_KEYS = {
    "controller": Key("controller", None, "--gloo/--mpi"),
    "params": {
        "fusion_threshold_mb": Key("number", "fusion_mb", "--fusion-threshold-mb"),
        "cycle_time_ms": Key("number", "cycle_ms", "--cycle-time-ms"),
        "cache_capacity": Key("number", "cache_capacity", "--cache-capacity"),
        "hierarchical_allreduce": Key("bool", "hierarchical", "--hierarchical-allreduce",
                                      "no_hierarchical"),
        "hierarchical_allgather": Key("bool", "ignored_hierarchical_allgather",
                                      "--hierarchical-allgather",
                                      "ignored_no_hierarchical_allgather"),
    },
    "autotune": {
        "enabled": Key("bool", "autotune", "--autotune", "no_autotune"),
        "log_file": Key("text", "autotune_log", "--autotune-log-file"),
        "warmup_samples": Key("number", "autotune_warmup", "--autotune-warmup-samples"),
        "steps_per_sample": Key("number", "autotune_steps", "--autotune-steps-per-sample"),
        "bayes_opt_max_samples": Key("number", "autotune_max",
                                     "--autotune-bayes-opt-max-samples"),
        "gaussian_process_noise": Key("number", "autotune_noise",
                                      "--autotune-gaussian-process-noise"),
    },
    "timeline": {
        "filename": Key("text", "timeline", "--timeline-filename"),
        "mark_cycles": Key("bool", "timeline_cycles", "--timeline-mark-cycles",
                           "no_timeline_cycles"),
    },
    "stall_check": {
        # enabled: false is --no-stall-check, true --stall-check (the default, said explicitly).
        "enabled": Key("bool", "stall_check", "--stall-check", "no_stall_check"),
        "warning_time_seconds": Key("number", "stall_warn", "--stall-check-warning-time-seconds"),
        "shutdown_time_seconds": Key("number", "stall_shutdown",
                                     "--stall-check-shutdown-time-seconds"),
    },
    "library_options": {
        "mpi_threads_disable": Key("bool", "ignored_mpi_threads_disable",
                                   "--mpi-threads-disable", "ignored_no_mpi_threads_disable"),
        "num_nccl_streams": Key("number", "ignored_num_nccl_streams", "--num-nccl-streams"),
        "ccl_bgt_affinity": Key("number", None, "--ccl-bgt-affinity", note=(
            "library_options.ccl_bgt_affinity has no effect in kolo (kolo has no oneCCL "
            "backend)")),
        # Horovod before oneCCL (its sample config file still has it)
        "mlsl_bgt_affinity": Key("number", None, "--mlsl-bgt-affinity", note=(
            "library_options.mlsl_bgt_affinity (older Horovod's name of ccl_bgt_affinity) has "
            "no effect in kolo (kolo has no MLSL or oneCCL backend)")),
        "gloo_timeout_seconds": Key("number", "start_timeout", "--gloo-timeout-seconds"),
    },
    "logging": {
        "level": Key("text", "log_level", "--log-level"),
        "with_timestamp": Key("bool", "ignored_log_with_timestamp", "--log-with-timestamp",
                              "ignored_log_without_timestamp"),
        "hide_timestamp": Key("bool", "ignored_log_without_timestamp", "--log-hide-timestamp",
                              "ignored_log_with_timestamp"),
    },
}

def load_yaml(path, error):
    """The parsed file; error(message) (an exception class) when PyYAML is missing, the file
    cannot be read or is not YAML."""
    try:
        import yaml  # pylint: disable=import-outside-toplevel
    except ImportError:
        raise error("--config-file %s: reading it needs PyYAML, which this Python (%s) cannot "
                    "import: install python3-yaml (Debian, Ubuntu) or 'pip install pyyaml', or "
                    "give the settings as flags" % (path, sys.executable)) from None
    try:
        with open(path) as f:
            text = f.read()
    except OSError as e:
        raise error("--config-file %s: %s" % (path, e.strerror or e)) from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = " (line %d, column %d)" % (mark.line + 1, mark.column + 1) if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise error("--config-file %s: not valid YAML%s: %s" % (path, where, problem)) from None


def _leaf_sections():
    return {leaf: section for section, keys in CONFIG_KEYS.items() if isinstance(keys, dict)
            for leaf in keys}


def _unknown(path, key, where, known):
    hint = ""
    leaf = key.replace("-", "_") if isinstance(key, str) else key
    sections = _leaf_sections()
    if where is None and leaf in sections:
        hint = "; did you mean %s.%s?" % (sections[leaf], leaf)
    elif where is None and isinstance(leaf, str) and leaf in CONFIG_KEYS:
        hint = "; did you mean %s?" % leaf
    elif where is not None and leaf in CONFIG_KEYS.get(where, {}):
        hint = "; did you mean %s.%s?" % (where, leaf)
    elif where is not None and leaf in sections:
        hint = "; did you mean %s.%s?" % (sections[leaf], leaf)
    return "--config-file %s: unknown key %r%s (%s takes %s)%s" % (
        path, key if where is None else "%s.%s" % (where, key),
        "" if where is None else " in section %r" % where,
        "the file" if where is None else where, ", ".join(known), hint)


def apply_config(ns, path, error):
    """Sets the flags' destinations in `ns` (argparse's namespace) from the file at `path`,
    except those given on the command line. Returns (notes, {dest: "--config-file FILE: KEY"})
    for the messages of later checks, which then name the key instead of the flag. Raises
    error(message)."""
    data = load_yaml(path, error)
    if data is None:
        return (), {}
    if not isinstance(data, dict):
        raise error("--config-file %s: expected a mapping of keys (controller, params, autotune, "
                    "...), got %s" % (path, type(data).__name__))
    notes, origin = [], {}
    for key, value in data.items():
        spec = CONFIG_KEYS.get(key) if isinstance(key, str) else None
        if spec is None:
            raise error(_unknown(path, key, None, list(CONFIG_KEYS)))
        if value is None:
            continue
        if isinstance(spec, Key):
            _apply(ns, path, key, spec, value, error, notes, origin)
            continue
        if not isinstance(value, dict):
            raise error("--config-file %s: %s: expected a mapping of its keys (%s), got %r"
                        % (path, key, ", ".join(spec), value))
        for sub, subvalue in value.items():
            leaf = spec.get(sub) if isinstance(sub, str) else None
            if leaf is None:
                raise error(_unknown(path, sub, key, list(spec)))
            if subvalue is not None:
                _apply(ns, path, "%s.%s" % (key, sub), leaf, subvalue, error, notes, origin)
    return tuple(notes), origin


def _nonnegative(value):
    """horovodrun's _validate_arg_nonnegative, for a value given as a number or its text."""
    try:
        return math.isfinite(float(value)) and float(value) >= 0
    except ValueError:
        return False


def _given(ns, dest):
    return dest is not None and getattr(ns, dest) not in (None, False)


def _apply(ns, path, name, key, value, error, notes, origin):
    label = "--config-file %s: %s" % (path, name)
    if key.kind == "controller":
        if not isinstance(value, str) or value.lower() not in ("gloo", "mpi"):
            raise error("%s: expected gloo or mpi, got %r" % (label, value))
        if not ns.gloo and not ns.mpi:
            setattr(ns, value.lower(), True)
        return
    if key.kind == "bool":
        if not isinstance(value, bool):
            raise error("%s: expected true or false, got %r" % (label, value))
        if _given(ns, key.dest) or _given(ns, key.off_dest):
            return  # the command line said it (either way)
        dest = key.dest if value else key.off_dest
        if dest is not None:
            setattr(ns, dest, True)
            origin[dest] = label
        return
    if key.kind == "text":
        if not isinstance(value, str):
            raise error("%s: expected a string, got %r" % (label, value))
    elif isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise error("%s: expected a number, got %r" % (label, value))
    if key.dest is None:  # a Horovod key without a kolo flag: checked as horovodrun, noted
        if not _nonnegative(value):
            raise error("%s: expected a number >= 0, got %r" % (label, value))
        notes.append(key.note)
        return
    if _given(ns, key.dest):
        return
    setattr(ns, key.dest, value if isinstance(value, str) else repr(value))
    origin[key.dest] = label
