# SPDX-License-Identifier: Apache-2.0
"""The stall inspector and barrier naming under kolorun, at 2 and 3 ranks (a job per case).

- A rank that submits an op late: rank 0 logs a stall warning naming the op, its set and the
  missing rank once KOLO_STALL_CHECK_TIME_SECONDS has passed, also when the op was announced
  long ago and rounds carry nothing new (KOLO_STALL_SHUTDOWN_TIME_SECONDS=0: warn only), and the
  op then completes.
- One user name for an allreduce on rank 0 and an allgather on rank 1: as in Horovod these are
  two ops ("allreduce.kind", "allgather.kind"); the stall warning says which op the missing
  rank submitted instead, and both complete once each rank submits the other one too.
- Settings the job cannot honour are said once by rank 0, not left silent: a forced
  hierarchical allreduce on one host, a native algorithm the transport lacks.
- Barriers are numbered per process set: a rank's barrier in a set of its own, or a refused one,
  does not shift its later global barriers (it did: a hang until the stall shutdown).
Each job runs the kolo runtime (KOLO_LIBRARY, set by CTest) and ends within a bound; a
regression fails through the short stall shutdown, not a hang.
"""

import os
import re
import textwrap

import pytest

from conftest import PY, REPO, base_env, kolorun

LIBKOLO = os.environ.get("KOLO_LIBRARY", "")

pytestmark = pytest.mark.skipif(
    not os.path.exists(LIBKOLO), reason="needs libkolo.so in KOLO_LIBRARY (CTest sets it)")


def run_job(tmp_path, np, body, **env):
    script = tmp_path / "job.py"
    script.write_text("import sys, time\nimport numpy as np\nimport kolo\nkolo.init()\n"
                      "r, n = kolo.rank(), kolo.size()\n" + textwrap.dedent(body) +
                      "\nprint('DONE', r, flush=True)\nkolo.shutdown()\n")
    e = base_env(KOLO_LIBRARY=LIBKOLO, **env)
    e["PYTHONPATH"] = os.path.join(REPO, "bindings", "python")
    return kolorun(["-np", str(np), PY, str(script)], env=e, timeout=90)


@pytest.mark.parametrize("np", [2, 3])
def test_late_rank_is_warned_about_then_the_op_completes(np, tmp_path):
    r = run_job(tmp_path, np, """
        if r == n - 1:
            time.sleep(4.5)  # past the 1 s check time, several times
        out = kolo.allreduce(np.ones(3, dtype=np.float32), name="late", op=kolo.Sum)
        assert out.tolist() == [float(n)] * 3, out
        """, KOLO_STALL_CHECK_TIME_SECONDS="1", KOLO_STALL_SHUTDOWN_TIME_SECONDS="0")
    assert r.returncode == 0, r.stdout + r.stderr
    warnings = [l for l in r.stderr.splitlines() if "stall: allreduce 'allreduce.late'" in l]
    assert warnings, r.stderr
    assert "(process set 0)" in warnings[0] and "ranks still missing: %d" % (np - 1) in warnings[0]
    for rank in range(np):
        assert "[%d]<stdout>:DONE %d" % (rank, rank) in r.stdout, r.stdout


def test_many_ops_behind_a_late_rank_are_summed_up_in_one_line(tmp_path):
    # 30 ops wait for rank 1: a scan names at most 10 of them and counts the others in one line.
    r = run_job(tmp_path, 2, """
        if r == 1:
            time.sleep(3.5)
        hs = [kolo.allreduce_async(np.ones(1, dtype=np.float32), name="t%d" % i, op=kolo.Sum)
              for i in range(30)]
        for h in hs:
            assert kolo.synchronize(h).tolist() == [2.0]
        """, KOLO_STALL_CHECK_TIME_SECONDS="1", KOLO_STALL_SHUTDOWN_TIME_SECONDS="0")
    assert r.returncode == 0, r.stdout + r.stderr
    # Ops pass the check time a few at a time, so a scan may name fewer than 10 and sum up
    # none; a summary line always comes right after 10 named ones, and the ops it counts are
    # not named in that scan.
    lines = r.stderr.splitlines()
    summary = re.compile(r"stall: (\d+) more ops have waited up to \d+ s; ranks still missing: 1$")
    found = [(i, int(m.group(1))) for i, l in enumerate(lines) for m in [summary.search(l)] if m]
    assert found, r.stderr
    for i, more in found:
        named = [l for l in lines[max(0, i - 10):i] if "stall: allreduce 'allreduce.t" in l]
        assert len(named) == 10 and 10 + more <= 30, r.stderr


@pytest.mark.parametrize("np", [2, 3])
def test_barriers_are_numbered_per_process_set(np, tmp_path):
    r = run_job(tmp_path, np, """
        own = kolo.add_process_set([0])
        others = kolo.add_process_set(list(range(1, n)))
        if r == 0:
            kolo.barrier(process_set=own)   # rank 0 only: a set of its own
            kolo.barrier(process_set=own)
        else:
            try:
                kolo.barrier(process_set=own)  # refused: not a member
                raise SystemExit("barrier of a set this rank is not in was accepted")
            except ValueError:
                pass
            kolo.barrier(process_set=others)
        for _ in range(3):
            kolo.barrier()                      # every rank, the same names
        out = kolo.allreduce(np.ones(1, dtype=np.float32), name="after", op=kolo.Sum)
        assert out.tolist() == [float(n)], out
        """, KOLO_STALL_CHECK_TIME_SECONDS="4", KOLO_STALL_SHUTDOWN_TIME_SECONDS="8")
    # A numbering mismatch never matches up: the warning after 4 s, the failure after 8 s. A
    # rank only descheduled for a moment on a loaded machine stays far below that.
    assert r.returncode == 0, r.stdout + r.stderr
    assert "stall" not in r.stderr, r.stderr
    for rank in range(np):
        assert "[%d]<stdout>:DONE %d" % (rank, rank) in r.stdout, r.stdout


def test_settings_that_cannot_be_honoured_are_warned_about(tmp_path):
    r = run_job(tmp_path, 2, """
        out = kolo.reducescatter(np.ones((2, 3), dtype=np.float32), op=kolo.Sum)
        assert out.tolist() == [[2.0, 2.0, 2.0]], out
        """, KOLO_SHM="off", KOLO_HIERARCHICAL_ALLREDUCE="1",
        KOLO_REDUCESCATTER_ALGORITHM="native", KOLO_ALLREDUCE_HD_MIN_BYTES="16777216")
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stderr.splitlines()
    hier = [l for l in lines if "KOLO_HIERARCHICAL_ALLREDUCE=1, but every rank is on one host"
            in l]
    native = [l for l in lines if "KOLO_REDUCESCATTER_ALGORITHM=native, but the gloo transport "
              "has no native reducescatter" in l and "RING_REDUCESCATTER" in l]
    crossed = [l for l in lines if "KOLO_ALLREDUCE_HD_MIN_BYTES=16777216 is above the table's "
               "ring crossover (8388608 B for 2 ranks): halving-doubling never runs" in l]
    assert len(hier) == 1 and len(native) == 1 and len(crossed) == 1, r.stderr


def test_one_name_for_two_op_types_is_pointed_out_by_the_stall_warning(tmp_path):
    r = run_job(tmp_path, 2, """
        x = np.ones(2, dtype=np.float32)
        first = (kolo.allreduce_async if r == 0 else kolo.allgather_async)(x, name="kind")
        time.sleep(3)  # past the 1 s check time
        second = (kolo.allgather_async if r == 0 else kolo.allreduce_async)(x, name="kind")
        for h in (first, second):
            kolo.synchronize(h)
        """, KOLO_STALL_CHECK_TIME_SECONDS="1", KOLO_STALL_SHUTDOWN_TIME_SECONDS="0")
    assert r.returncode == 0, r.stdout + r.stderr
    hints = [l for l in r.stderr.splitlines() if "stall: allreduce 'allreduce.kind'" in l and
             "rank 1 submitted allgather 'allgather.kind' instead" in l]
    assert hints, r.stderr
