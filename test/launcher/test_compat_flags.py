# SPDX-License-Identifier: Apache-2.0
"""kolorun as a drop-in for horovodrun (Horovod 0.28): its flags parse, the HOROVOD_* variables
reach the ranks with horovodrun's values, --check-build prints horovodrun's block, the elastic
flags start an elastic job, --config-file reads horovodrun's YAML file, the flags kolo cannot
honour are refused (--jsrun) or accepted with a note (hierarchical allgather and friends); the
autotune flags set the KOLO_AUTOTUNE* variables (and their HOROVOD_ names)."""

import ctypes
import json
import os
import re
import sys
import time

import pytest

from conftest import PY, base_env, kolorun

from kolo_launcher import args, check_build, mpi_run
from kolo_launcher.hosts import HostSlots

ENV = {"PATH": "/usr/bin"}


def parse(*argv, env=None):
    return args.parse(list(argv), ENV if env is None else env)


# ---- flags ------------------------------------------------------------------------------------
def test_horovodrun_flags_parse_to_kolo_settings():
    o = parse("-np", "4", "-H", "a:2,b:2", "-p", "2222", "-i", "/k", "--start-timeout", "40",
              "--network-interfaces", "eth1", "--output-filename", "/tmp/o", "--verbose",
              "--fusion-threshold-mb", "16", "--cycle-time-ms", "3.5", "--cache-capacity",
              "256", "--hierarchical-allreduce", "--timeline-filename", "/tmp/tl.json",
              "--timeline-mark-cycles", "--no-stall-check",
              "--stall-check-warning-time-seconds", "20",
              "--stall-check-shutdown-time-seconds", "50", "--log-level", "TRACE", "--gloo",
              "python", "train.py", "--lr", "0.1")
    assert (o.np, o.ssh_port, o.ssh_identity, o.start_timeout) == (4, 2222, "/k", 40)
    assert o.hosts == [HostSlots("a", 2), HostSlots("b", 2)] and o.controller == "gloo"
    assert (o.network_interface, o.output_dir, o.verbose) == ("eth1", "/tmp/o", True)
    assert o.command == ["python", "train.py", "--lr", "0.1"] and o.notes == ()
    assert args.horovod_knob_environment(o.knob_env) == {
        "HOROVOD_START_TIMEOUT": "40", "HOROVOD_FUSION_THRESHOLD": str(16 << 20),
        "HOROVOD_CYCLE_TIME": "3.5", "HOROVOD_CACHE_CAPACITY": "256",
        "HOROVOD_HIERARCHICAL_ALLREDUCE": "1", "HOROVOD_TIMELINE": "/tmp/tl.json",
        "HOROVOD_TIMELINE_MARK_CYCLES": "1", "HOROVOD_STALL_CHECK_DISABLE": "1",
        "HOROVOD_STALL_CHECK_TIME_SECONDS": "20", "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": "50",
        "HOROVOD_LOG_LEVEL": "TRACE", "HOROVOD_GLOO_IFACE": "eth1"}
    for level in ("TRACE", "DEBUG", "INFO", "WARNING", "ERROR", "FATAL"):
        assert parse("-np", "1", "--log-level", level, "c").knob_env["KOLO_LOG_LEVEL"] == \
            level.lower()
    assert parse("-np", "2", "--mpi", "c").controller == "mpi"


def test_no_hierarchical_allreduce():
    o = parse("-np", "2", "--no-hierarchical-allreduce", "c")
    assert o.knob_env["KOLO_HIERARCHICAL_ALLREDUCE"] == "0"
    with pytest.raises(args.UsageError, match="exclude each other"):
        parse("-np", "2", "--hierarchical-allreduce", "--no-hierarchical-allreduce", "c")


def test_start_timeout_falls_back_to_horovod_variable():
    assert parse("-np", "1", "c", env={"HOROVOD_START_TIMEOUT": "33"}).start_timeout == 33
    both = {"HOROVOD_START_TIMEOUT": "33", "KOLO_START_TIMEOUT": "44"}
    assert parse("-np", "1", "c", env=both).start_timeout == 44
    assert parse("-np", "1", "--start-timeout", "55", "c", env=both).start_timeout == 55
    with pytest.raises(args.UsageError, match="HOROVOD_START_TIMEOUT"):
        parse("-np", "1", "c", env={"HOROVOD_START_TIMEOUT": "later"})


def test_unsupported_horovodrun_flags_are_refused_with_the_reason():
    with pytest.raises(args.UsageError, match=re.escape("--jsrun") + ": .* not supported"):
        parse("-np", "2", "--jsrun", "c")


def test_unsupported_flag_exit_status():
    r = kolorun(["-np", "2", "--jsrun", "true"])
    assert r.returncode == 2 and "--jsrun: jsrun (LSF) mode" in r.stderr


def test_one_letter_options_take_attached_values_as_argparse_does():
    # horovodrun's argparse reads -Hlocalhost:2 as -H localhost:2 (any one-letter option)
    o = parse("-n2", "-Hlocalhost:2", "-p2222", "-i/k", "-xFOO=1", "c", "-Hx")
    assert (o.np, o.hosts, o.ssh_port, o.ssh_identity) == (2, [HostSlots("localhost", 2)],
                                                         2222, "/k")
    assert o.extra_env == {"FOO": "1"} and o.command == ["c", "-Hx"]
    assert parse("-np", "1", "-xHOME", "c", env={"HOME": "/h"}).extra_env == {"HOME": "/h"}
    # -np2 would be -n with the value "p2" under argparse: refused, saying what to write
    with pytest.raises(args.UsageError, match="unrecognized option '-np2': write '-np 2'"):
        parse("-np2", "c")
    with pytest.raises(args.UsageError, match="unrecognized option '-Z2'"):
        parse("-np", "1", "-Z2", "c")


# ---- --config-file ----------------------------------------------------------------------------
# Horovod's own test file (test/single/data/config.test.yaml): its keys and nesting.
HOROVOD_CONFIG = """\
controller: gloo

params:
  fusion_threshold_mb: 32
  cycle_time_ms: 10
  cache_capacity: 2048
  hierarchical_allreduce: true
  hierarchical_allgather: true

autotune:
  enabled: true
  log_file: 'horovod_autotune_log.txt'
  warmup_samples: 5
  steps_per_sample: 20
  bayes_opt_max_samples: 50
  gaussian_process_noise: 0.9

timeline:
  filename: 'horovod_timeline.json'
  mark_cycles: true

stall_check:
  enabled: true
  warning_time_seconds: 120
  shutdown_time_seconds: 240

library_options:
  mpi_threads_disable: true
  num_nccl_streams: 2
  ccl_bgt_affinity: 1
  gloo_timeout_seconds: 60

logging:
  level: INFO
  hide_timestamp: true
"""


def config(tmp_path, text):
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return str(path)


def test_config_file_sets_what_the_flags_set(tmp_path):
    o = parse("-np", "2", "--config-file", config(tmp_path, HOROVOD_CONFIG), "c")
    flags = parse("-np", "2", "--gloo", "--fusion-threshold-mb", "32", "--cycle-time-ms", "10",
                  "--cache-capacity", "2048", "--hierarchical-allreduce",
                  "--hierarchical-allgather", "--autotune", "--autotune-log-file",
                  "horovod_autotune_log.txt", "--autotune-warmup-samples", "5",
                  "--autotune-steps-per-sample", "20", "--autotune-bayes-opt-max-samples", "50",
                  "--autotune-gaussian-process-noise", "0.9", "--timeline-filename",
                  "horovod_timeline.json", "--timeline-mark-cycles", "--stall-check",
                  "--stall-check-warning-time-seconds", "120",
                  "--stall-check-shutdown-time-seconds", "240", "--mpi-threads-disable",
                  "--num-nccl-streams", "2", "--gloo-timeout-seconds", "60", "--log-level",
                  "INFO", "--log-hide-timestamp", "c")
    assert o.knob_env == flags.knob_env and o.knob_env["KOLO_FUSION_THRESHOLD"] == str(32 << 20)
    assert (o.controller, o.start_timeout) == ("gloo", 60)
    assert "ccl_bgt_affinity has no effect" in o.notes[-1]
    # the same notes as the flags', each naming the file's key that asked for it
    why = [n.split(" has no effect in kolo ")[1] for n in o.notes[:-1]]
    assert why == [n.split(" has no effect in kolo ")[1] for n in flags.notes]
    path = config(tmp_path, HOROVOD_CONFIG)
    subjects = [n.split(" has no effect in kolo ")[0] for n in o.notes[:-1]]
    assert subjects == ["--config-file %s: %s" % (path, key) for key in (
        "params.hierarchical_allgather", "library_options.mpi_threads_disable",
        "library_options.num_nccl_streams", "logging.hide_timestamp")]
    o = parse("-np", "2", "--config-file", config(tmp_path, "controller: MPI\n"), "c")
    assert o.controller == "mpi"
    assert parse("-np", "2", "--config-file", config(tmp_path, ""), "c").knob_env == \
        parse("-np", "2", "c").knob_env


# Horovod's sample file as its repository has it (test/data/config.test.yaml): its
# library_options.mlsl_bgt_affinity is the key's name before oneCCL.
HOROVOD_SAMPLE = HOROVOD_CONFIG.split("\nlibrary_options:")[0] + """
library_options:
  mpi_threads_disable: true
  num_nccl_streams: 2
  mlsl_bgt_affinity: 1
"""


def test_horovods_sample_config_file_runs_with_a_note_per_unused_key(tmp_path):
    o = parse("-np", "2", "--config-file", config(tmp_path, HOROVOD_SAMPLE), "c")
    assert o.knob_env["KOLO_AUTOTUNE_GAUSSIAN_PROCESS_NOISE"] == "0.9"
    mlsl = [n for n in o.notes if "mlsl_bgt_affinity" in n]
    assert len(mlsl) == 1 and "has no effect in kolo" in mlsl[0] and "\n" not in mlsl[0]
    r = kolorun(["-np", "1", "--config-file", config(tmp_path, HOROVOD_SAMPLE), "true"])
    assert r.returncode == 0, r.stderr
    assert "kolorun: library_options.mlsl_bgt_affinity (older Horovod's name of " \
        "ccl_bgt_affinity) has no effect in kolo" in r.stderr


def test_autotune_off_passes_none_of_the_autotune_settings(tmp_path):
    # horovodrun's set_env_from_args exports the autotune settings only when autotune is on:
    # --no-autotune over a file that turns it on, and a file that turns it off, export none.
    on = config(tmp_path, HOROVOD_CONFIG)
    o = parse("-np", "1", "--config-file", on, "--no-autotune", "c")
    assert not [k for k in o.knob_env if k.startswith("KOLO_AUTOTUNE")], o.knob_env
    assert "HOROVOD_AUTOTUNE_LOG" not in args.horovod_knob_environment(o.knob_env)
    off = config(tmp_path, "autotune:\n  enabled: false\n  log_file: a.csv\n"
                 "  warmup_samples: 2\n")
    assert not [k for k in parse("-np", "1", "--config-file", off, "c").knob_env
                if k.startswith("KOLO_AUTOTUNE")]
    o = parse("-np", "1", "--no-autotune", "--autotune-log-file", "a.csv", "c")
    assert "KOLO_AUTOTUNE_LOG" not in o.knob_env
    # still checked, as horovodrun's validate_config_args checks them whatever the switch
    with pytest.raises(args.UsageError, match="expected a number from 0 to 1"):
        parse("-np", "1", "--no-autotune", "--autotune-gaussian-process-noise", "2", "c")
    # autotune on: every setting is passed
    o = parse("-np", "1", "--config-file", config(tmp_path, HOROVOD_CONFIG), "c")
    assert o.knob_env["KOLO_AUTOTUNE"] == "1" and o.knob_env["KOLO_AUTOTUNE_LOG"] == \
        "horovod_autotune_log.txt"


def test_command_line_flags_override_the_config_file(tmp_path):
    path = config(tmp_path, "controller: mpi\nparams:\n  cycle_time_ms: 10\n"
                  "  hierarchical_allreduce: true\nautotune:\n  enabled: false\n"
                  "stall_check:\n  enabled: false\n  warning_time_seconds: 5\n"
                  "library_options:\n  gloo_timeout_seconds: 60\ntimeline:\n  filename: ~\n")
    # Before and after --config-file alike (horovodrun's override_args).
    for argv in (["--cycle-time-ms", "3", "--config-file", path],
                 ["--config-file", path, "--cycle-time-ms", "3"]):
        o = parse(*(["-np", "2", "--gloo", "--no-hierarchical-allreduce", "--autotune",
                     "--start-timeout", "30"] + argv + ["c"]))
        assert o.controller == "gloo" and o.start_timeout == 30
        assert o.knob_env == {"KOLO_START_TIMEOUT": "30", "KOLO_CYCLE_TIME": "3",
                              "KOLO_HIERARCHICAL_ALLREDUCE": "0", "KOLO_AUTOTUNE": "1",
                              "KOLO_STALL_CHECK_DISABLE": "1",
                              "KOLO_STALL_CHECK_TIME_SECONDS": "5"}
    # The file's values over the environment's defaults; false values say "off".
    o = parse("-np", "2", "--config-file", path, "c", env={"KOLO_START_TIMEOUT": "9"})
    assert o.start_timeout == 60 and o.controller == "mpi"
    assert o.knob_env["KOLO_HIERARCHICAL_ALLREDUCE"] == "1" and "KOLO_AUTOTUNE" not in o.knob_env
    assert "KOLO_TIMELINE" not in o.knob_env  # null: as if absent


@pytest.mark.parametrize("text,message", [
    ("fusion_threshold_mb: 32\n",
     "unknown key 'fusion_threshold_mb' (the file takes controller, params, autotune, "
     "timeline, stall_check, library_options, logging); did you mean params.fusion_threshold_mb?"),
    ("params:\n  fusion_threshold: 32\n",
     "unknown key 'params.fusion_threshold' in section 'params' (params takes "
     "fusion_threshold_mb, cycle_time_ms, "),
    ("params:\n  fusion-threshold-mb: 32\n", "did you mean params.fusion_threshold_mb?"),
    ("autotune:\n  log_file: a\n  enable: true\n", "unknown key 'autotune.enable'"),
    ("params:\n  fusion_threshold_mb: lots\n",
     "params.fusion_threshold_mb: expected a number from 0 to 1048576, got 'lots'"),
    ("params:\n  cache_capacity: -1\n", "params.cache_capacity: expected an integer"),
    ("params:\n  hierarchical_allreduce: 1\n",
     "params.hierarchical_allreduce: expected true or false, got 1"),
    ("autotune:\n  enabled: true\n  warmup_samples: true\n",
     "autotune.warmup_samples: expected a number, got True"),
    ("timeline:\n  filename: 5\n", "timeline.filename: expected a string, got 5"),
    ("logging:\n  level: loud\n", "logging.level: expected one of trace, "),
    ("controller: jsrun\n", "controller: expected gloo or mpi, got 'jsrun'"),
    ("params: 32\n", "params: expected a mapping of its keys"),
    ("- a\n- b\n", "expected a mapping of keys (controller, params, autotune, ...), got list"),
    ("autotune:\n  gaussian_process_noise: 5\n",
     "autotune.gaussian_process_noise: expected a number from 0 to 1, got '5'"),
    ("library_options:\n  mlsl_bgt_affinity: x1\n", "expected a number >= 0, got 'x1'"),
    ("library_options:\n  ccl_bgt_affinity: -1\n", "expected a number >= 0, got -1"),
    ("library_options:\n  mlsl_affinity: 1\n", "unknown key 'library_options.mlsl_affinity'"),
    ("params:\n  cycle_time_ms: [1\n", "not valid YAML (line "),
])
def test_config_file_errors_name_the_key(tmp_path, text, message):
    path = config(tmp_path, text)
    with pytest.raises(args.UsageError) as info:
        parse("-np", "2", "--config-file", path, "c")
    assert str(info.value).startswith("--config-file %s: " % path), info.value
    assert message in str(info.value), info.value


def test_config_file_missing_file_or_pyyaml(tmp_path, monkeypatch):
    missing = str(tmp_path / "none.yaml")
    with pytest.raises(args.UsageError, match="--config-file %s: No such file" % missing):
        parse("-np", "2", "--config-file", missing, "c")
    path = config(tmp_path, "params:\n  cycle_time_ms: 3\n")
    monkeypatch.setitem(sys.modules, "yaml", None)  # "import yaml" raises ImportError
    with pytest.raises(args.UsageError, match="needs PyYAML, which this Python .* cannot import: "
                       "install python3-yaml"):
        parse("-np", "2", "--config-file", path, "c")
    assert parse("-np", "2", "c").knob_env  # only --config-file needs it


def test_elastic_flags_are_accepted(tmp_path):
    # horovodrun's elastic flags start an elastic job (test_elastic*.py); the discovery script
    # must exist (kolorun checks it at once, not on its first run)
    script = tmp_path / "d.sh"
    script.write_text("#!/bin/sh\necho localhost:2\n")
    script.chmod(0o755)
    o = parse("-np", "2", "--min-np", "1", "--max-np", "4", "--slots-per-host", "2",
              "--elastic-timeout", "60", "--reset-limit", "3", "--blacklist-cooldown-range", "1",
              "2", "--host-discovery-script", str(script), "c")
    assert o.elastic.min_np == 1 and o.elastic.cooldown == (1.0, 2.0) and o.command == ["c"]


@pytest.mark.parametrize("argv", [
    ["--hierarchical-allgather"],
    ["--no-hierarchical-allgather"], ["--mpi-threads-disable"], ["--num-nccl-streams", "2"],
    ["--thread-affinity", "1"], ["--log-hide-timestamp"], ["--log-without-timestamp"],
    ["--log-with-timestamp"],
])
def test_flags_without_effect_are_accepted_with_a_note(argv):
    o = parse(*(["-np", "2"] + argv + ["python", "t.py"]))
    assert o.command == ["python", "t.py"] and o.np == 2
    assert len(o.notes) == 1 and argv[0] in o.notes[0].split(" has no effect in kolo (")[0]
    assert o.knob_env == {"KOLO_START_TIMEOUT": "120"}


@pytest.mark.parametrize("argv,var,value", [
    (["--autotune"], "KOLO_AUTOTUNE", "1"),
    (["--autotune-log-file", "/tmp/a.csv"], "KOLO_AUTOTUNE_LOG", "/tmp/a.csv"),
    (["--autotune-warmup-samples", "3"], "KOLO_AUTOTUNE_WARMUP_SAMPLES", "3"),
    (["--autotune-steps-per-sample", "10"], "KOLO_AUTOTUNE_STEPS_PER_SAMPLE", "10"),
    (["--autotune-bayes-opt-max-samples", "20"], "KOLO_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", "20"),
    (["--autotune-gaussian-process-noise", "0.8"], "KOLO_AUTOTUNE_GAUSSIAN_PROCESS_NOISE", "0.8"),
])
def test_autotune_flags_set_their_variables_without_a_note(argv, var, value):
    o = parse(*(["-np", "2"] + argv + ["python", "t.py"]))
    assert o.notes == ()
    assert o.knob_env == {"KOLO_START_TIMEOUT": "120", var: value}
    assert args.horovod_knob_environment(o.knob_env)[var.replace("KOLO_", "HOROVOD_")] == value


def test_tcp_is_accepted_silently():
    assert parse("-np", "2", "--tcp", "c").notes == ()


def test_help_lists_compat_and_refused_flags(capsys):
    assert args.parse(["--help"], ENV) is None
    text = capsys.readouterr().out
    for name in ["-cb", "--check-build", "--no-hierarchical-allreduce", "--autotune", "--tcp",
                 "--min-np", "--host-discovery-script", "--config-file", "HOROVOD_RANK",
                 "HOROVOD_START_TIMEOUT"]:
        assert name in text, name
    assert max(len(line) for line in text.splitlines()) <= 100


# ---- the ranks' environment ------------------------------------------------------------------
_DUMP = ("import json, os; print('ENV ' + json.dumps({k: v for k, v in os.environ.items() "
         "if k.startswith(('KOLO_', 'HOROVOD_'))}))")


def _rank_envs(stdout):
    out = {}
    for line in stdout.splitlines():
        m = re.match(r"\[(\d+)\]<stdout>:ENV (.*)$", line)
        if m:
            out[int(m.group(1))] = json.loads(m.group(2))
    return out


def test_ranks_get_horovodrun_variables():
    env = base_env(HOROVOD_RANK="99", HOROVOD_GLOO_RENDEZVOUS_PORT="1")  # stale outer values
    r = kolorun(["-np", "3", "-H", "localhost:2,127.0.0.1:1", "--fusion-threshold-mb", "8",
                 "--cycle-time-ms", "2", "--log-level", "DEBUG", "--autotune",
                 PY, "-c", _DUMP], env=env)
    assert r.returncode == 0, r.stderr
    assert "has no effect in kolo" not in r.stderr
    envs = _rank_envs(r.stdout)
    assert sorted(envs) == [0, 1, 2]
    place = {0: ("localhost", 0, 2, 0, 2), 1: ("localhost", 1, 2, 0, 1),
             2: ("127.0.0.1", 0, 1, 1, 2)}
    for rank, e in envs.items():
        host, lr, ls, cr, cs = place[rank]
        want = {"RANK": str(rank), "SIZE": "3", "LOCAL_RANK": str(lr), "LOCAL_SIZE": str(ls),
                "CROSS_RANK": str(cr), "CROSS_SIZE": str(cs), "HOSTNAME": host,
                "CONTROLLER": "gloo"}
        for key, value in want.items():
            assert e["HOROVOD_" + key] == value, key
            assert e["KOLO_" + key] == value, key
        assert e["HOROVOD_GLOO_RENDEZVOUS_ADDR"] == e["KOLO_RENDEZVOUS_ADDR"]
        assert e["HOROVOD_GLOO_RENDEZVOUS_PORT"] == e["KOLO_RENDEZVOUS_PORT"] != "1"
        assert e["HOROVOD_CPU_OPERATIONS"] == "gloo"
        assert e["HOROVOD_FUSION_THRESHOLD"] == e["KOLO_FUSION_THRESHOLD"] == str(8 << 20)
        assert e["HOROVOD_CYCLE_TIME"] == "2" and e["HOROVOD_LOG_LEVEL"] == "DEBUG"
        assert e["HOROVOD_START_TIMEOUT"] == "120"
        assert e["HOROVOD_AUTOTUNE"] == e["KOLO_AUTOTUNE"] == "1"
    ports = {e["KOLO_RENDEZVOUS_PORT"] for e in envs.values()}
    assert len(ports) == 1


def test_mpi_mode_exports_horovod_knobs_not_stale_places():
    o = parse("--mpi", "-np", "2", "--fusion-threshold-mb", "4", "--timeline-filename",
              "/tmp/t.json", "python", "t.py")
    stale = {"PATH": "/bin", "HOROVOD_RANK": "5", "HOROVOD_GLOO_RENDEZVOUS_ADDR": "10.0.0.1",
             "HOROVOD_CONTROLLER": "gloo", "HOROVOD_FUSION_THRESHOLD": "1",
             "HOROVOD_CYCLE_TIME": "7"}
    cmd = mpi_run.build_command(o, stale, is_root=False)
    for x in ["HOROVOD_FUSION_THRESHOLD=%d" % (4 << 20), "HOROVOD_TIMELINE=/tmp/t.json",
              "HOROVOD_START_TIMEOUT=120", "HOROVOD_CYCLE_TIME"]:
        assert cmd[cmd.index(x) - 1] == "-x", x
    for name in ("HOROVOD_RANK", "HOROVOD_GLOO_RENDEZVOUS_ADDR", "HOROVOD_CONTROLLER",
                 "HOROVOD_FUSION_THRESHOLD"):
        assert name not in cmd, name


def test_config_file_reaches_the_ranks(tmp_path):
    path = config(tmp_path, "params:\n  fusion_threshold_mb: 8\n  cycle_time_ms: 2.5\n"
                  "logging:\n  level: debug\n")
    r = kolorun(["-np", "2", "--config-file", path, "--cycle-time-ms", "4", PY, "-c", _DUMP])
    assert r.returncode == 0, r.stderr
    envs = _rank_envs(r.stdout)
    assert sorted(envs) == [0, 1]
    for e in envs.values():
        assert e["KOLO_FUSION_THRESHOLD"] == e["HOROVOD_FUSION_THRESHOLD"] == str(8 << 20)
        assert e["KOLO_CYCLE_TIME"] == "4" and e["HOROVOD_LOG_LEVEL"] == "DEBUG"
    r = kolorun(["-np", "2", "--config-file", config(tmp_path, "bogus: 1\n"), "true"])
    assert r.returncode == 2 and "unknown key 'bogus'" in r.stderr, r.stderr


# ---- --check-build ----------------------------------------------------------------------------
_BLOCK = re.compile(
    r"kolo v(?P<version>\S+):\n\n"
    r"Available Frameworks:\n    \[ \] TensorFlow\n    \[(?P<torch>[X ])\] PyTorch\n"
    r"    \[ \] MXNet\n\n"
    r"Available Controllers:\n    \[(?P<mpi>[X ])\] MPI\n    \[(?P<gloo>[X ])\] Gloo\n\n"
    r"Available Tensor Operations:\n    \[(?P<nccl>[X ])\] NCCL\n    \[ \] DDL\n    \[ \] CCL\n"
    r"    \[(?P<mpi_ops>[X ])\] MPI\n    \[(?P<gloo_ops>[X ])\] Gloo\n$")


def _expected_marks(path):
    lib = ctypes.CDLL(path)
    lib.kolo_version.restype = ctypes.c_char_p
    return (lib.kolo_version().decode(), "X" if lib.kolo_mpi_built() else " ",
            "X" if lib.kolo_gloo_built() else " ", "X" if lib.kolo_nccl_built() else " ")


@pytest.mark.parametrize("flag", ["-cb", "--check-build"])
def test_check_build_prints_horovodrun_block(flag):
    lib, path = check_build.load_library(os.environ)
    assert lib is not None, path  # CTest sets KOLO_LIBRARY to this build's libkolo.so
    env = base_env(KOLO_LIBRARY=path)
    r = kolorun([flag], env=env)  # no -np, no command: horovodrun -cb needs neither
    assert r.returncode == 0 and r.stderr == "", r.stderr
    m = _BLOCK.fullmatch(r.stdout)
    assert m, r.stdout
    version, mpi, gloo, nccl = _expected_marks(path)
    assert (m["version"], m["mpi"], m["gloo"], m["nccl"]) == (version, mpi, gloo, nccl)
    assert (m["mpi_ops"], m["gloo_ops"]) == (mpi, gloo)
    torch_here = check_build._torch_available()
    assert m["torch"] == ("X" if torch_here else " ")
    assert gloo == "X"  # kolo's default mode needs Gloo: this build has it


def test_check_build_without_library_says_why(tmp_path):
    missing = str(tmp_path / "libkolo.so")
    text, note = check_build.report({"KOLO_LIBRARY": missing})
    assert note and missing in note and "KOLO_LIBRARY" in note
    assert "[X]" not in text.replace("[X] PyTorch", "")
    assert "    [ ] PyTorch" in text  # nothing to run it with
    r = kolorun(["--check-build", "--verbose"], env=base_env(KOLO_LIBRARY=missing))
    assert r.returncode == 0 and r.stdout.startswith("\nkolo v")


def test_output_filename_pads_ranks_like_horovodrun(tmp_path):
    d = tmp_path / "logs"
    r = kolorun(["-np", "11", "--output-filename", str(d), PY, "-c",
                 "import os; print(os.environ['HOROVOD_RANK'])"], timeout=120)
    assert r.returncode == 0, r.stderr
    names = sorted(p.name for p in d.iterdir())
    assert names == ["rank.%02d" % q for q in range(11)]
    for q in range(11):
        # horovodrun's forward_stream adds the prefix, then MultiFile writes the line to the
        # terminal and to the file: the same prefixed text in both
        assert (d / ("rank.%02d" % q) / "stdout").read_text() == "[%d]<stdout>:%d\n" % (q, q)
        assert "[%d]<stdout>:%d\n" % (q, q) in r.stdout


def test_horovodrun_negations_and_aliases(tmp_path):
    # horovodrun's launch.py: --no-autotune, --no-timeline-mark-cycles, --stall-check (the
    # default, HOROVOD_STALL_CHECK_DISABLE=0), --no-mpi-threads-disable, --no-log-hide-timestamp
    # and -prefix-timestamp.
    o = parse("-np", "1", "--no-autotune", "--no-timeline-mark-cycles", "--stall-check",
              "--no-mpi-threads-disable", "--no-log-hide-timestamp", "-prefix-timestamp", "c")
    assert "KOLO_AUTOTUNE" not in o.knob_env
    assert o.knob_env["KOLO_TIMELINE_MARK_CYCLES"] == "0"
    assert o.knob_env["KOLO_STALL_CHECK_DISABLE"] == "0"
    assert args.horovod_knob_environment(o.knob_env)["HOROVOD_STALL_CHECK_DISABLE"] == "0"
    assert len(o.notes) == 2 and all("has no effect in kolo" in n for n in o.notes)
    assert o.prefix_timestamp  # -prefix-timestamp has its effect (test_prefix_timestamp_*)
    assert o.command == ["c"]
    for flag, negation in (("--autotune", "--no-autotune"), ("--no-stall-check", "--stall-check"),
                           ("--timeline-mark-cycles", "--no-timeline-mark-cycles")):
        with pytest.raises(args.UsageError, match="exclude each other"):
            parse("-np", "1", flag, negation, "c")
    # the command line wins over the file's autotune.enabled: true
    pytest.importorskip("yaml")
    path = config(tmp_path, "autotune:\n  enabled: true\n")
    assert "KOLO_AUTOTUNE" not in parse("-np", "1", "--config-file", path, "--no-autotune",
                                        "c").knob_env


def test_long_options_take_unambiguous_prefixes_as_in_horovodrun():
    o = parse("--num-p", "2", "--verb", "--fusion-threshold=8", "--network-interf", "eth0", "c",
              "--verb")
    assert o.np == 2 and o.verbose and o.knob_env["KOLO_FUSION_THRESHOLD"] == str(8 << 20)
    assert o.network_interface == "eth0"
    assert o.command == ["c", "--verb"]  # the command's own options are its own
    with pytest.raises(args.UsageError, match="ambiguous option: --no could match --no-"):
        parse("-np", "1", "--no", "c")
    with pytest.raises(args.UsageError, match="--jsrun: jsrun"):
        parse("-np", "1", "--js", "c")
    r = kolorun(["--num-proc", "1", "--verb", "true"])
    assert r.returncode == 0 and "kolorun: 1 ranks on 1 hosts" in r.stderr, r.stderr


# ---- -prefix-timestamp ------------------------------------------------------------------------
# horovodrun's prefix_stream: time.asctime() of the line, then "[rank]<stdout>:" and the line
_ASCTIME = r"(?P<t>[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4})"


def _stamped(text, rank, stream, line, end):
    m = re.fullmatch(_ASCTIME + re.escape("[%d]<%s>:%s" % (rank, stream, line)) + end, text)
    assert m, "not a stamped line of rank %d: %r" % (rank, text)
    return time.mktime(time.strptime(m.group("t")))


@pytest.mark.parametrize("flag", ["-prefix-timestamp", "--prefix-output-with-timestamp"])
def test_prefix_timestamp_stamps_terminal_and_file_lines_as_horovodrun(tmp_path, flag):
    d = tmp_path / "logs"
    before = time.time()
    r = kolorun(["-np", "2", flag, "--output-filename", str(d), PY, "-c",
                 "import os, sys; r = os.environ['HOROVOD_RANK']; print('out', r); "
                 "sys.stderr.write('partial ' + r)"])
    after = time.time()
    assert r.returncode == 0, r.stderr
    assert "has no effect" not in r.stderr
    out = sorted(r.stdout.splitlines(), key=lambda l: l.split("]<")[0][-1])
    err = sorted(l for l in r.stderr.splitlines() if "<stderr>" in l)
    assert len(out) == 2 and len(err) == 2, (r.stdout, r.stderr)
    for rank in (0, 1):
        stamps = [
            _stamped(out[rank], rank, "stdout", "out %d" % rank, ""),
            _stamped(err[rank], rank, "stderr", "partial %d" % rank, ""),
            # the files get the same text (a last line without "\n" as it is)
            _stamped((d / ("rank.%d" % rank) / "stdout").read_text(), rank, "stdout",
                     "out %d" % rank, "\n"),
            _stamped((d / ("rank.%d" % rank) / "stderr").read_text(), rank, "stderr",
                     "partial %d" % rank, ""),
        ]
        for t in stamps:  # local time, to the second
            assert int(before) - 1 <= t <= after + 1, (before, t, after)


def test_without_prefix_timestamp_lines_start_with_the_rank():
    r = kolorun(["-np", "1", "echo", "x"])
    assert r.returncode == 0 and r.stdout == "[0]<stdout>:x\n", r.stdout


def test_prefix_timestamp_in_elastic_mode(tmp_path):
    script = tmp_path / "d.sh"
    script.write_text("#!/bin/sh\necho localhost:2\n")
    script.chmod(0o755)
    r = kolorun(["-np", "2", "--min-np", "1", "--host-discovery-script", str(script),
                 "-prefix-timestamp", "sh", "-c", "echo w"])
    assert r.returncode == 0, r.stderr
    lines = sorted(r.stdout.splitlines(), key=lambda l: l.split("]<")[0][-1])
    assert len(lines) == 2, r.stdout
    for wid, line in enumerate(lines):
        _stamped(line, wid, "stdout", "w", "")


def test_prefix_timestamp_in_mpi_mode_is_mpiruns_timestamp_output():
    # horovodrun's mpi_run appends --timestamp-output (Open MPI: the same asctime format)
    o = parse("--mpi", "-np", "2", "-prefix-timestamp", "c")
    assert o.notes == ()
    assert "--timestamp-output" in mpi_run.build_command(o, ENV, is_root=False)
    assert "--timestamp-output" not in mpi_run.build_command(parse("--mpi", "-np", "2", "c"),
                                                             ENV, is_root=False)


# ---- notes for what has no effect ----------------------------------------------------------
def test_mpi_args_without_mpi_get_a_note(tmp_path):
    # horovodrun hands --mpi-args to mpirun only: in Gloo mode they change nothing, say so
    note = [n for n in parse("-np", "2", "--mpi-args=--map-by core", "c").notes
            if n.startswith("--mpi-args")]
    assert len(note) == 1 and "no effect in Gloo mode" in note[0] and "--mpi" in note[0]
    assert parse("-np", "2", "--mpi", "--mpi-args=--map-by core", "c").notes == ()
    pytest.importorskip("yaml")
    path = config(tmp_path, "controller: mpi\n")
    assert parse("-np", "2", "--config-file", path, "--mpi-args=-v", "c").notes == ()
    r = kolorun(["-np", "1", "--mpi-args", "--map-by core", "true"])
    assert r.returncode == 0 and "kolorun: --mpi-args has no effect in Gloo mode" in r.stderr


def test_elastic_timeout_from_horovods_documented_variable():
    # elastic.rst names HOROVOD_ELASTIC_START_TIMEOUT; horovodrun --help HOROVOD_ELASTIC_TIMEOUT
    argv = ("-np", "2", "--min-np", "1", "-H", "localhost:2", "c")
    env = dict(ENV, HOROVOD_ELASTIC_START_TIMEOUT="42")
    assert parse(*argv, env=env).elastic.elastic_timeout == 42
    env["HOROVOD_ELASTIC_TIMEOUT"] = "43"
    assert parse(*argv, env=env).elastic.elastic_timeout == 43
    assert parse(*(("--elastic-timeout", "44") + argv), env=env).elastic.elastic_timeout == 44
    env["HOROVOD_ELASTIC_START_TIMEOUT"] = "soon"
    del env["HOROVOD_ELASTIC_TIMEOUT"]
    with pytest.raises(args.UsageError, match="HOROVOD_ELASTIC_START_TIMEOUT: expected"):
        parse(*argv, env=env)


def test_gloo_timeout_seconds_is_start_timeout_and_not_given_twice(tmp_path):
    # horovodrun's --gloo-timeout-seconds (Gloo's rendezvous and op timeout) is kolorun's
    # --start-timeout; both at once would silently keep the last: an error naming both
    assert parse("-np", "1", "--gloo-timeout-seconds", "45", "c").start_timeout == 45
    with pytest.raises(args.UsageError, match="--start-timeout and --gloo-timeout-seconds "
                       "are one setting"):
        parse("-np", "1", "--start-timeout", "5", "--gloo-timeout-seconds", "60", "c")
    with pytest.raises(args.UsageError, match="^--gloo-timeout-seconds: expected a number"):
        parse("-np", "1", "--gloo-timeout-seconds", "x", "c")
    pytest.importorskip("yaml")
    path = config(tmp_path, "library_options:\n  gloo_timeout_seconds: 60\n")
    assert parse("-np", "1", "--config-file", path, "c").start_timeout == 60
    # a flag on the command line, either name, wins over the file's key
    assert parse("-np", "1", "--config-file", path, "--gloo-timeout-seconds", "9",
                 "c").start_timeout == 9
    assert parse("-np", "1", "--config-file", path, "--start-timeout", "8", "c").start_timeout \
        == 8
