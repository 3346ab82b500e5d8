# SPDX-License-Identifier: Apache-2.0
"""Autotune end to end: kolorun --autotune on 2 ranks (Gloo mode and --mpi) running a loop of
allreduces, and on 4 ranks faked as 2 hosts x 2 (test/mp/fake_hosts.sh), where hierarchical
allreduce is tuned too.

With a small sample budget the job must write the CSV log (Horovod's header plus kolo's
crossover columns, one line per scored sample, the best last), the samples must try different
parameters, every rank must apply each new parameter set in the same round (the coordinator
logs "autotune: round R applies ..." at info level on every rank; checked in Gloo mode, where
kolorun keeps each rank's lines whole), nothing may change after the best set is fixed, and
every allreduce result stays exact throughout (each rank checks its sums). On one host
hierarchical allreduce is not tuned (its column keeps the configured value); on the fake hosts
the search tries hierarchical (the start, auto) and then flat (off) before anything else, the
hierarchical_allreduce column shows 1 and 0, and every rank switches in the same round.
"""

import os
import re
import shutil
import textwrap

import pytest

from conftest import PY, REPO, base_env, kolorun

LIBKOLO = os.environ.get("KOLO_LIBRARY", "")

pytestmark = pytest.mark.skipif(
    not os.path.exists(LIBKOLO), reason="needs libkolo.so in KOLO_LIBRARY (CTest sets it)")

HEADER = ("hierarchical_allreduce,hierarchical_allgather,cache_enabled,cycle_time_ms,"
          "tensor_fusion_threshold,allreduce_hd_min_bytes,allreduce_ring_min_bytes,score")

# 1 warm-up + 4 scored samples of 5 sub-samples x 2 steps = 50 steps; the job runs 160, so
# the last 100 or so run with the fixed set.
JOB = """
import sys
import numpy as np
import kolo
kolo.init()
r, n = kolo.rank(), kolo.size()
sizes = [256, 20000, 150000]  # float32 elements: 1 KiB, 80 KiB, 600 KiB
for step in range(160):
    value = float((r + 1) * (step % 5 + 1))
    handles = [kolo.allreduce_async(np.full(s, value, dtype=np.float32), name="t%d" % i,
                                    op=kolo.Sum) for i, s in enumerate(sizes)]
    want = float(n * (n + 1) // 2 * (step % 5 + 1))
    for h, s in zip(handles, sizes):
        out = kolo.synchronize(h)
        assert out.shape == (s,) and (out == want).all(), (step, s, out[:4], want)
kolo.shutdown()
open("%s/done.%d" % (sys.argv[1], r), "w").close()
"""

APPLY = re.compile(r"\[kolo rank (\d)\] info: autotune: round (\d+) applies fusion threshold "
                   r"(\d+) B, cycle time ([0-9.e+-]+) ms, allreduce halving-doubling from (\d+) "
                   r"B, ring from (\d+) B, hierarchical allreduce (auto|on|off) "
                   r"\((searching|fixed)\)")
FAKE_HOSTS = os.path.join(REPO, "test", "mp", "fake_hosts.sh")


def applied_sets(stderr, ranks):
    """{rank: [(round, fusion, cycle, hd, ring, hierarchical, state), ...]} from the info lines."""
    applied = {rank: [] for rank in range(ranks)}
    for line in stderr.splitlines():
        m = APPLY.search(line)
        if m:
            applied[int(m.group(1))].append(m.groups()[1:])
    return applied


@pytest.mark.parametrize("mode", ["gloo", "mpi"])
def test_autotune_searches_then_fixes_the_best_on_every_rank(mode, tmp_path):
    if mode == "mpi" and not shutil.which("mpirun"):
        pytest.skip("needs Open MPI's mpirun")
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(JOB))
    log = tmp_path / "autotune.csv"
    env = base_env(KOLO_LIBRARY=LIBKOLO)
    env["PYTHONPATH"] = os.path.join(REPO, "bindings", "python")
    r = kolorun(["--" + mode, "-np", "2", "--autotune", "--autotune-log-file", str(log),
                 "--autotune-warmup-samples", "1", "--autotune-steps-per-sample", "2",
                 "--autotune-bayes-opt-max-samples", "4", "--log-level", "info",
                 PY, str(script), str(tmp_path)], env=env, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    for rank in range(2):
        assert (tmp_path / ("done.%d" % rank)).exists(), r.stdout + r.stderr

    lines = log.read_text().splitlines()
    assert lines[0] == HEADER
    rows = [line.split(",") for line in lines[1:]]
    assert len(rows) == 4 + 1, lines  # 4 samples, then the best
    assert all(len(row) == 8 for row in rows), lines
    samples, best = rows[:-1], rows[-1]
    assert all(row[0] == "0" for row in rows), lines  # one host: not tuned, as configured
    params = [tuple(row[3:7]) for row in samples]
    assert len(set(params)) == 4, lines  # every sample tried another point
    scores = [float(row[7]) for row in samples]
    assert all(s > 0 for s in scores), lines
    assert tuple(best[3:7]) == params[scores.index(max(scores))], lines
    assert float(best[7]) == max(scores)
    assert params[0] == ("1", "128", str(512 * 1024), str(8 << 20))  # the defaults come first
    if mode == "mpi":
        return  # mpirun may cut a line of one rank's output in two: the rest reads the logs

    # Every rank applies the same sets in the same rounds: 3 new points, then the fixed best.
    applied = applied_sets(r.stderr, 2)
    assert applied[0] == applied[1], r.stderr
    sets = applied[0]
    assert [s[-1] for s in sets] == ["searching"] * 3 + ["fixed"], r.stderr
    assert all(s[5] == "auto" for s in sets), r.stderr
    rounds = [int(s[0]) for s in sets]
    assert rounds == sorted(rounds) and len(set(rounds)) == 4
    # The points applied while searching are the ones samples 2..4 measured, in order; the fixed
    # one is the best line's.
    mib = float(1 << 20)
    def as_row(s):
        return (s[2], s[1], s[3], s[4])
    for applied_set, row in zip(sets[:3], samples[1:]):
        cycle, fusion, hd, ring = as_row(applied_set)
        assert float(cycle) == float(row[3]) and int(fusion) == float(row[4]) * mib, (sets, rows)
        assert (hd, ring) == (row[5], row[6])
    cycle, fusion, hd, ring = as_row(sets[3])
    assert float(cycle) == float(best[3]) and int(fusion) == float(best[4]) * mib
    assert (hd, ring) == (best[5], best[6])
    assert "autotune: best after 4 samples" in r.stderr


def test_autotune_tries_hierarchical_and_flat_on_two_hosts(tmp_path):
    """2 hosts x 2 ranks (fake): hierarchical allreduce is a choice, so the search tries it."""
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(JOB))
    log = tmp_path / "autotune.csv"
    env = base_env(KOLO_LIBRARY=LIBKOLO)
    env["PYTHONPATH"] = os.path.join(REPO, "bindings", "python")
    r = kolorun(["--gloo", "-np", "4", "--autotune", "--autotune-log-file", str(log),
                 "--autotune-warmup-samples", "1", "--autotune-steps-per-sample", "2",
                 "--autotune-bayes-opt-max-samples", "3", "--log-level", "info",
                 FAKE_HOSTS, "2", PY, str(script), str(tmp_path)], env=env, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    for rank in range(4):
        assert (tmp_path / ("done.%d" % rank)).exists(), r.stdout + r.stderr
    assert "autotune: hierarchical allreduce is tuned too" in r.stderr, r.stderr

    lines = log.read_text().splitlines()
    assert lines[0] == HEADER
    rows = [line.split(",") for line in lines[1:]]
    assert len(rows) == 3 + 1 and all(len(row) == 8 for row in rows), lines
    samples, best = rows[:-1], rows[-1]
    # The start is hierarchical (auto); the first point polled is flat with nothing else moved.
    assert samples[0][0] == "1" and samples[1][0] == "0", lines
    assert samples[1][1:7] == samples[0][1:7], lines
    scores = [float(row[7]) for row in samples]
    assert all(s > 0 for s in scores), lines
    assert best[:7] == samples[scores.index(max(scores))][:7], lines
    assert float(best[7]) == max(scores), lines

    # Every rank applies the same sets in the same rounds: 2 new points, then the fixed best,
    # each with the hierarchical value its log line shows (auto = 1, off = 0).
    applied = applied_sets(r.stderr, 4)
    assert applied[0] and all(applied[rank] == applied[0] for rank in range(4)), r.stderr
    sets = applied[0]
    assert [s[-1] for s in sets] == ["searching"] * 2 + ["fixed"], r.stderr
    rounds = [int(s[0]) for s in sets]
    assert rounds == sorted(rounds) and len(set(rounds)) == 3, r.stderr
    column = {"auto": "1", "off": "0"}
    assert [column[s[5]] for s in sets] == [row[0] for row in samples[1:] + [best]], (sets, rows)
    assert "autotune: best after 3 samples" in r.stderr
