# SPDX-License-Identifier: Apache-2.0
"""The timeline against what Horovod users expect (Horovod 0.28's docs/timeline.rst and
horovod/common/timeline.cc): a NEGOTIATE_<OP> bar per tensor with a tick per rank, the <OP> bar
with the transport step nested in it, the end's dtype and shape, CYCLE_START marks, and a file
chrome://tracing and Perfetto load (strict JSON here) whatever happens to the job.

Two modes, one file:
- under a launcher with N ranks (CTest python_timeline_np2, _np3): hvd.start_timeline /
  stop_timeline at run time in one job: every collective, grouped ops, process sets, a
  mismatch, names that need JSON escaping, 10k names, mark_cycles, restarting on the same file,
  paths that cannot be written, and no writer thread while the timeline is off;
- in one process with KOLO_TIMELINE_TEST_JOBS=1 (CTest python_timeline_jobs): starts its own
  2-rank jobs with kolorun --timeline-filename: a normal exit, rank 0 killed (SIGKILL) or
  aborting, another rank killed, init -> shutdown -> init, two jobs given the same file, and a
  path that cannot be opened at init.
Each test runs in one mode and skips in the other (the same decision on every rank)."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import pytest

JOBS = os.environ.get("KOLO_TIMELINE_TEST_JOBS") == "1"
in_job = pytest.mark.skipif(JOBS, reason="runs under a launcher (python_timeline_npN)")
jobs = pytest.mark.skipif(not JOBS, reason="starts its own jobs (python_timeline_jobs)")

_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.normpath(os.path.join(_HERE, "..", ".."))
_SOURCE = os.path.join(_ROOT, "bindings", "python")
_KOLORUN = os.path.join(_ROOT, "bindings", "launcher", "kolorun")


# ---- reading a timeline ------------------------------------------------------------------------

def load(path):
    """The trace as strict JSON (as chrome://tracing and Perfetto need it): (document, events)."""
    with open(path, encoding="utf-8", errors="strict") as f:
        doc = json.load(f)
    assert isinstance(doc, dict) and isinstance(doc["traceEvents"], list), doc.keys()
    return doc, doc["traceEvents"]


def rows(events):
    """Tensor name -> row (tid), from the thread_name metadata."""
    out = {}
    for e in events:
        if e.get("name") == "thread_name" and e.get("ph") == "M":
            out[e["args"]["name"]] = e["tid"]
    return out


def row_events(events, tid):
    return [e for e in events if e.get("ph") != "M" and e.get("tid") == tid]


def check_nesting(evs, name):
    """B/E pairs close in order on a row and every row ends closed (Horovod's E has no name:
    viewers close the innermost open B)."""
    depth = 0
    for e in evs:
        if e["ph"] == "B":
            depth += 1
        elif e["ph"] == "E":
            depth -= 1
            assert depth >= 0, (name, evs)
    assert depth == 0, (name, evs)


def phases(evs):
    """The row as (ph, name) pairs, ticks left out."""
    return [(e["ph"], e.get("name", "")) for e in evs if e["ph"] != "X"]


def ticks(evs):
    return sorted(e["args"]["rank"] for e in evs if e["ph"] == "X")


def writer_threads():
    """Threads of this process named as the timeline's writer."""
    n = 0
    for tid in os.listdir("/proc/self/task"):
        try:
            with open("/proc/self/task/%s/comm" % tid) as f:
                n += f.read().strip() == "kolo-timeline"
        except OSError:
            pass  # the thread ended meanwhile
    return n


# ---- in one job, at run time ------------------------------------------------------------------

@in_job
def test_every_collective_has_negotiation_ticks_op_and_step(kolo_world, rank_dir):
    k = kolo_world
    r, n = k.rank(), k.size()
    path = os.path.join(rank_dir, "ops.json")
    k.barrier()
    k.start_timeline(path)
    k.allreduce(np.ones(4, np.float32), name="t_ar")
    k.allgather(np.ones((r + 1, 2), np.float32), name="t_ag")
    k.broadcast(np.ones(3), root_rank=0, name="t_bc")
    k.alltoall(np.arange(2 * n, dtype=np.float32), name="t_a2a")
    k.reducescatter(np.ones(2 * n, np.float32), name="t_rs")
    k.grouped_allreduce([np.ones(2), np.ones(3, np.float32)], name="t_grp")
    k.barrier()
    k.stop_timeline()
    k.barrier()
    if r != 0:
        assert not os.path.exists(path)  # rank 0 writes, as Horovod's
        return
    doc, events = load(path)
    other = doc["otherData"]
    assert other["state"] == "stopped" and other["dropped_events"] == 0, other
    meta = [e for e in events if e.get("name") == "process_name"]
    assert meta and meta[0]["args"]["start_time_since_epoch_in_micros"] > 0, meta
    named = rows(events)
    want = {"allreduce.t_ar": ("ALLREDUCE", "float32"),
            "allgather.t_ag": ("ALLGATHER", "float32"),
            "broadcast.t_bc": ("BROADCAST", "float64"),
            "alltoall.t_a2a": ("ALLTOALL", "float32"),
            "reducescatter.t_rs": ("REDUCESCATTER", "float32"),
            "grouped_allreduce.t_grp.0": ("ALLREDUCE", "float64"),
            "grouped_allreduce.t_grp.1": ("ALLREDUCE", "float32")}
    for name, (op, dtype) in want.items():
        assert name in named, (name, sorted(named))
        evs = row_events(events, named[name])
        check_nesting(evs, name)
        seq = phases(evs)
        assert seq[:2] == [("B", "NEGOTIATE_" + op), ("E", "")], (name, seq)
        assert seq[2] == ("B", op), (name, seq)
        # The transport step (SHM_ALLREDUCE, RING_ALLREDUCE, P2P_ALLTOALL, ...) inside the op.
        steps = [s for ph, s in seq[3:] if ph == "B"]
        assert steps and all(s.isupper() and s.replace("_", "").isalnum() for s in steps), seq
        assert any(s.endswith(op) for s in steps), (name, steps)
        assert ticks(evs) == list(range(n)), (name, evs)  # one tick per rank, named by rank
        end = evs[-1]
        assert end["ph"] == "E" and end["args"]["dtype"] == dtype, (name, end)
        assert isinstance(end["args"]["shape"], list), end
        ts = [e["ts"] for e in evs]
        assert all(isinstance(t, (int, float)) and t >= 0 for t in ts), ts


@in_job
def test_process_set_rows_and_a_mismatch_closes_its_negotiation(kolo_world, rank_dir):
    k = kolo_world
    r, n = k.rank(), k.size()
    path = os.path.join(rank_dir, "sets.json")
    first = k.add_process_set([0])
    k.barrier()
    k.start_timeline(path)
    if r == 0:
        k.allreduce(np.ones(2), name="t_set", process_set=first)
    k.allreduce(np.ones(2), name="t_set")
    if n > 1:  # a world of one cannot mismatch (the same decision on every rank)
        with pytest.raises(Exception) as err:
            k.allreduce(np.ones(2 + r), name="t_mismatch")  # rank 0 sends [2], rank 1 [3]
        assert "t_mismatch" in str(err.value) and "shape" in str(err.value), str(err.value)
    k.barrier()
    k.stop_timeline()
    k.barrier()
    set_row = "allreduce.t_set@ps%d" % first.process_set_id
    k.remove_process_set(first)
    if r != 0:
        return
    _, events = load(path)
    named = rows(events)
    assert set_row in named and "allreduce.t_set" in named, sorted(named)
    for name in (set_row, "allreduce.t_set"):
        evs = row_events(events, named[name])
        check_nesting(evs, name)
        assert ("B", "ALLREDUCE") in phases(evs), (name, evs)
    assert ticks(row_events(events, named[set_row])) == [0]  # only the set's member
    if n == 1:
        return
    evs = row_events(events, named["allreduce.t_mismatch"])
    check_nesting(evs, "t_mismatch")
    # Negotiated, refused: the negotiation bar is closed and no op ran.
    assert phases(evs) == [("B", "NEGOTIATE_ALLREDUCE"), ("E", "")], evs


@in_job
def test_names_that_need_json_escaping_come_back_exactly(kolo_world, rank_dir):
    k = kolo_world
    path = os.path.join(rank_dir, "names.json")
    names = ['quote"d', "back\\slash", "new\nline\ttab\r", "ctl\x01\x1f\x7f",
             "unicode/\u65e5\u672c/\u00e9/\U0001F600", "</script>'&",
             "long_" + "\u00e9" * 200 + "x" * 600]  # kolo takes names of up to 1024 bytes
    k.barrier()
    k.start_timeline(path)
    for name in names:
        k.allreduce(np.ones(1), name=name)
    k.barrier()
    k.stop_timeline()
    k.barrier()
    if k.rank() != 0:
        return
    _, events = load(path)
    named = rows(events)
    for name in names:
        assert "allreduce." + name in named, (name[:40], [x[:40] for x in named])
        evs = row_events(events, named["allreduce." + name])
        check_nesting(evs, name[:40])
        assert ("B", "ALLREDUCE") in phases(evs)


@in_job
def test_ten_thousand_names_are_all_recorded(kolo_world, rank_dir):
    k = kolo_world
    count = 10000
    path = os.path.join(rank_dir, "many.json")
    k.barrier()
    k.start_timeline(path)
    handles = [k.allreduce_async(np.ones(1, np.float32), name="many_%05d" % i)
               for i in range(count)]
    for h in handles:
        k.synchronize(h)
    k.barrier()
    k.stop_timeline()
    k.barrier()
    if k.rank() != 0:
        return
    doc, events = load(path)
    dropped = doc["otherData"]["dropped_events"]
    named = rows(events)
    mine = [name for name in named if name.startswith("allreduce.many_")]
    # The queue holds 65536 events and the writer drains it while the burst arrives: nothing is
    # lost (Horovod's writer blocks instead of dropping; kolo drops and counts, never silently).
    assert dropped == 0, "%d events dropped for %d names" % (dropped, count)
    assert len(mine) == count
    by_tid = {}
    for e in events:
        if e.get("ph") != "M":
            by_tid.setdefault(e.get("tid"), []).append(e)
    for name in mine:
        evs = by_tid[named[name]]
        check_nesting(evs, name)
        assert ("B", "ALLREDUCE") in phases(evs), (name, evs)


@in_job
def test_mark_cycles_and_start_again_on_the_same_or_another_file(kolo_world, rank_dir):
    k = kolo_world
    r = k.rank()
    path = os.path.join(rank_dir, "cycles.json")
    other = os.path.join(rank_dir, "other.json")
    k.barrier()
    k.start_timeline(path, mark_cycles=True)
    k.allreduce(np.ones(2), name="t_cyc_1")
    k.barrier()
    # Horovod's start_timeline on the active file keeps it (and its events) and takes the new
    # mark_cycles; on another file it switches.
    k.start_timeline(path, mark_cycles=False)
    k.allreduce(np.ones(2), name="t_cyc_2")
    k.barrier()
    k.start_timeline(other)
    k.allreduce(np.ones(2), name="t_cyc_3")
    k.barrier()
    k.stop_timeline()
    k.stop_timeline()  # stopping twice is harmless
    k.barrier()
    if r != 0:
        return
    doc, events = load(path)
    assert doc["otherData"]["state"] == "stopped"
    named = rows(events)
    assert "allreduce.t_cyc_1" in named and "allreduce.t_cyc_2" in named, sorted(named)
    assert "allreduce.t_cyc_3" not in named
    cycles = [e for e in events if e.get("name") == "CYCLE_START"]
    assert cycles and all(e["ph"] == "i" for e in cycles), cycles[:3]
    doc2, events2 = load(other)
    assert [x for x in rows(events2) if x.startswith("allreduce.")] == ["allreduce.t_cyc_3"]
    assert not [e for e in events2 if e.get("name") == "CYCLE_START"]


@in_job
def test_a_path_that_cannot_be_written_is_a_clear_error_and_the_job_runs_on(kolo_world,
                                                                            rank_dir):
    k = kolo_world
    r = k.rank()
    plain_file = os.path.join(rank_dir, "plain")
    with open(plain_file, "w") as f:
        f.write("x")
    bad = [os.path.join(rank_dir, "no_such_dir", "t.json"),  # a directory that does not exist
           os.path.join(plain_file, "t.json"),  # a "directory" that is a file
           rank_dir]  # a directory, not a file
    for path in bad:
        if r == 0:  # the rank that writes says why, naming the path
            with pytest.raises(OSError) as err:  # as open() would; not an op failure
                k.start_timeline(path)
            assert path in str(err.value), str(err.value)
        else:
            k.start_timeline(path)  # the others do not write
        k.stop_timeline()
    with pytest.raises(ValueError):
        k.start_timeline("")
    out = k.allreduce(np.ones(2), op=k.Sum, name="t_after_bad_paths")
    assert (out == k.size()).all()
    assert not os.path.exists(os.path.join(rank_dir, "no_such_dir"))


@in_job
def test_no_writer_thread_while_the_timeline_is_off(kolo_world, rank_dir):
    """The cost when off: no thread, no file; rank 0 gets its writer only while it runs."""
    k = kolo_world
    r = k.rank()
    k.barrier()
    assert writer_threads() == 0
    path = os.path.join(rank_dir, "thread.json")
    k.start_timeline(path)
    k.allreduce(np.ones(2), name="t_thread")
    assert writer_threads() == (1 if r == 0 else 0)
    k.stop_timeline()
    assert writer_threads() == 0
    k.allreduce(np.ones(2), name="t_thread_off")
    k.barrier()
    if r == 0:
        _, events = load(path)
        assert "allreduce.t_thread_off" not in rows(events)


@in_job
def test_horovod_torch_start_timeline(hvd, rank_dir):
    import torch
    path = os.path.join(rank_dir, "hvd.json")
    hvd.barrier()
    hvd.start_timeline(file_path=path, mark_cycles=True)
    hvd.allreduce(torch.ones(3), name="t_hvd")
    hvd.barrier()
    hvd.stop_timeline()
    hvd.barrier()
    if hvd.rank() == 0:
        _, events = load(path)
        named = rows(events)
        evs = row_events(events, named["allreduce.t_hvd"])
        check_nesting(evs, "t_hvd")
        assert ("B", "ALLREDUCE") in phases(evs)
        assert evs[-1]["args"] == {"dtype": "float32", "shape": [3]}


# ---- jobs of their own ------------------------------------------------------------------------

def _env(**extra):
    env = dict(os.environ)
    for key in list(env):
        if key.startswith(("KOLO_", "HOROVOD_", "OMPI_", "PMI_", "PMIX_")) and \
                key not in ("KOLO_LIBRARY", "KOLO_STALL_SHUTDOWN_TIME_SECONDS"):
            del env[key]
    if os.environ.get("KOLO_TEST_INSTALLED") != "1":
        env["PYTHONPATH"] = _SOURCE + os.pathsep + env.get("PYTHONPATH", "")
    env.update({"KOLO_START_TIMEOUT": "60", "KOLO_TIMEOUT_SECONDS": "20"})
    env.update(extra)
    return env


def _kolorun(args, worker, argv=(), timeout=120, env=None, wait=True):
    cmd = [sys.executable, _KOLORUN, "-np", "2"] + args + [sys.executable, "-c", worker]
    cmd += [str(a) for a in argv]
    p = subprocess.Popen(cmd, env=env or _env(), stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    if not wait:
        return p
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, _ = p.communicate()
        pytest.fail("kolorun did not finish in %d s:\n%s" % (timeout, out))
    return p.returncode, out


@pytest.fixture
def job_dir():
    folder = tempfile.mkdtemp(prefix="kolo-timeline-")
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


# Steps of allreduces; rank `victim` ends itself (`how`) after step `at` once the writer has had
# time to write what came before (it writes at least every 100 ms).
_STEPS = r"""
import os, sys, time
import numpy as np
import kolo
how, victim, at = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
kolo.init()
for i in range(100000):
    kolo.allreduce(np.ones(1000, np.float32), name="step%d" % (i % 20))
    if i == at // 2:
        time.sleep(0.5)
    if i == at and kolo.rank() == victim:
        if how == "kill":
            os.kill(os.getpid(), 9)
        elif how == "abort":
            os.abort()
    if i == at and how == "none":
        break
kolo.shutdown()
"""


@jobs
def test_kolorun_timeline_filename_and_mark_cycles(job_dir):
    path = os.path.join(job_dir, "t.json")
    rc, out = _kolorun(["--timeline-filename", path, "--timeline-mark-cycles"],
                       _STEPS, argv=("none", -1, 40))
    assert rc == 0, out
    doc, events = load(path)
    assert doc["otherData"]["state"] == "stopped" and doc["otherData"]["dropped_events"] == 0
    named = rows(events)
    assert ["allreduce.step%d" % i for i in range(20)] == \
        sorted((x for x in named if x.startswith("allreduce.step")),
               key=lambda x: int(x[len("allreduce.step"):]))
    assert [e for e in events if e.get("name") == "CYCLE_START"]
    for name, tid in named.items():
        check_nesting(row_events(events, tid), name)


@jobs
@pytest.mark.parametrize("how", ["kill", "abort"])
def test_rank_0_dying_leaves_a_loadable_file(job_dir, how):
    """Rank 0 (the writer) SIGKILLed or aborting mid-training: the file on disk is valid JSON
    (state "running") holding what was written before; in the rare case the kill landed inside
    a write, kolo-timeline-repair makes it valid."""
    path = os.path.join(job_dir, "t.json")
    rc, out = _kolorun(["--timeline-filename", path], _STEPS, argv=(how, 0, 200))
    assert rc != 0, out
    try:
        doc, events = load(path)
    except ValueError:
        tool = os.environ.get("KOLO_TIMELINE_REPAIR")
        if not tool:
            raise
        subprocess.run([tool, path], check=True, timeout=60)
        doc, events = load(path)
        assert doc["otherData"]["state"] == "truncated"
    else:
        assert doc["otherData"]["state"] == "running"
    named = rows(events)
    # Everything before the half-second pause was written before the end.
    assert "allreduce.step0" in named and "allreduce.step19" in named, sorted(named)
    evs = row_events(events, named["allreduce.step0"])
    assert ("B", "ALLREDUCE") in phases(evs)


@jobs
def test_another_rank_killed_leaves_rank_0_a_closed_file(job_dir):
    path = os.path.join(job_dir, "t.json")
    rc, out = _kolorun(["--timeline-filename", path], _STEPS, argv=("kill", 1, 200))
    assert rc != 0, out
    assert "rank 1" in out, out
    doc, events = load(path)
    assert doc["otherData"]["state"] == "stopped", doc["otherData"]  # rank 0 shut down
    for name, tid in rows(events).items():
        # The op that failed too: its negotiation or its op bar was closed with the error.
        check_nesting(row_events(events, tid), name)


_REINIT = r"""
import numpy as np
import kolo
kolo.init()
kolo.allreduce(np.ones(2), name="round0")
kolo.shutdown()
kolo.init()
kolo.allreduce(np.ones(2), name="round1")
kolo.shutdown()
"""


@jobs
def test_init_shutdown_init_continues_the_file_after_a_reset_marker(job_dir):
    path = os.path.join(job_dir, "t.json")
    rc, out = _kolorun(["--timeline-filename", path], _REINIT)
    assert rc == 0, out
    doc, events = load(path)
    resets = [e for e in events if e.get("name") == "RESET"]
    assert len(resets) == 1 and resets[0]["args"] == {"round": 1, "rank": 0, "size": 2}, resets
    named = rows(events)
    assert named["allreduce.round0"] != named["allreduce.round1"]
    at = events.index(resets[0])
    r0 = row_events(events[:at], named["allreduce.round0"])
    r1 = row_events(events[at:], named["allreduce.round1"])
    assert r0 and r1
    assert max(e["ts"] for e in r0) <= resets[0]["ts"] <= min(e["ts"] for e in r1)
    assert doc["otherData"]["state"] == "stopped"


_HOLD = r"""
import os, time
import numpy as np
import kolo
go = os.environ["HOLD_UNTIL"]
kolo.init()
kolo.allreduce(np.ones(2), name="first_job_a")
deadline = time.monotonic() + 60
while not os.path.exists(go) and time.monotonic() < deadline:
    time.sleep(0.05)
kolo.allreduce(np.ones(2), name="first_job_b")
kolo.shutdown()
"""

_SHORT = r"""
import numpy as np
import kolo
kolo.init()
kolo.allreduce(np.ones(2), name="second_job")
kolo.shutdown()
"""


@jobs
def test_two_jobs_given_the_same_file_do_not_corrupt_it(job_dir):
    path = os.path.join(job_dir, "shared.json")
    go = os.path.join(job_dir, "go")
    first = _kolorun(["--timeline-filename", path], _HOLD, env=_env(HOLD_UNTIL=go), wait=False)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # the first job's timeline holds its first op
            try:
                if "allreduce.first_job_a" in rows(load(path)[1]):
                    break
            except (OSError, ValueError, KeyError):
                pass
            time.sleep(0.05)
        else:
            pytest.fail("the first job never wrote its timeline")
        rc, out = _kolorun(["--timeline-filename", path], _SHORT)
        assert rc == 0, out  # the second job runs, without a timeline, and says why
        assert "is being written by another timeline" in out and path in out, out
    finally:
        with open(go, "w"):
            pass
        out1, _ = first.communicate(timeout=120)
    assert first.returncode == 0, out1
    doc, events = load(path)
    named = rows(events)
    assert "allreduce.first_job_a" in named and "allreduce.first_job_b" in named, sorted(named)
    assert "allreduce.second_job" not in named
    assert doc["otherData"]["state"] == "stopped"


@jobs
def test_a_path_that_cannot_be_opened_at_init_is_logged_and_the_job_runs(job_dir):
    path = os.path.join(job_dir, "missing_dir", "t.json")
    rc, out = _kolorun(["--timeline-filename", path], _SHORT)
    assert rc == 0, out
    assert "cannot open '%s'" % path in out and "runs without a timeline" in out, out
    assert not os.path.exists(os.path.dirname(path))


@jobs
def test_kolo_timeline_repair_tool(job_dir):
    """The tool a user runs on a file whose writer was killed inside a write (cut mid-event):
    cut back to the last complete event, closed, "state":"truncated"; a complete file is left
    as it is; a file that is not a kolo timeline is refused."""
    tool = os.environ.get("KOLO_TIMELINE_REPAIR")
    if not tool:
        pytest.skip("KOLO_TIMELINE_REPAIR (build/timeline/kolo-timeline-repair) is not set")
    path = os.path.join(job_dir, "t.json")
    rc, out = _kolorun(["--timeline-filename", path], _STEPS, argv=("none", -1, 40))
    assert rc == 0, out
    with open(path, "rb") as f:
        whole = f.read()
    done = subprocess.run([tool, path], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "left as it is" in done.stdout, done
    with open(path, "rb") as f:
        assert f.read() == whole
    _, events = load(path)
    kept = len(events)
    # As a kill inside the writer's pwrite leaves it: the first 70% of the bytes, mid-event.
    cut = whole[:len(whole) * 7 // 10]
    with open(path, "wb") as f:
        f.write(cut)
    with pytest.raises(ValueError):
        load(path)
    done = subprocess.run([tool, path], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "repaired" in done.stdout, done
    doc, events = load(path)
    assert doc["otherData"]["state"] == "truncated"
    assert 0 < len(events) < kept
    assert events == load_prefix(whole, len(events))
    foreign = os.path.join(job_dir, "foreign.json")
    with open(foreign, "w") as f:
        f.write('[{"ph": "B"')
    done = subprocess.run([tool, foreign], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "not a kolo timeline" in done.stderr, done


def load_prefix(whole, count):
    """The first `count` events of a complete trace (given as bytes)."""
    return json.loads(whole.decode("utf-8"))["traceEvents"][:count]


# ---- core/ behaviour: a joined rank's op bar, HOROVOD_TIMELINE=DYNAMIC ---------------------

@in_job
def test_a_joined_rank_draws_its_steps_inside_an_op_bar(kolo_world, rank_dir):
    """ops/execute.cc writes a batch's steps for a tensor this rank joined for (it has no entry of
    its own), so core/coordinator.cc opens and closes the ALLREDUCE bar around them too: on rank
    0's row no MEMCPY_IN_FUSION_BUFFER / <TRANSPORT>_ALLREDUCE bar floats outside an op."""
    k = kolo_world
    if k.size() == 1:
        pytest.skip("join needs two ranks")
    path = os.path.join(rank_dir, "join.json")
    k.barrier()
    k.start_timeline(path)
    if k.rank() != 0:
        k.allreduce(np.ones(2), name="t_joined")
    k.join()
    k.stop_timeline()
    k.barrier()
    if k.rank() != 0:
        return
    _, events = load(path)
    evs = row_events(events, rows(events)["allreduce.t_joined"])
    opened = [name for ph, name in phases(evs) if ph == "B"]
    assert opened and opened[0] in ("ALLREDUCE", "NEGOTIATE_ALLREDUCE"), phases(evs)


@jobs
def test_horovod_timeline_dynamic_opens_no_file(job_dir):
    """Horovod 0.28: HOROVOD_TIMELINE=DYNAMIC enables the timeline without a file, for
    hvd.start_timeline later (its error message tells users to set it): no file named DYNAMIC
    in the working directory (base/config.cc reads it as no path)."""
    path = os.path.join(job_dir, "later.json")
    worker = ("import numpy as np, kolo\nkolo.init()\nkolo.start_timeline(%r)\n"
              "kolo.allreduce(np.ones(2), name='x')\nkolo.stop_timeline()\nkolo.shutdown()\n"
              % path)
    cmd = [sys.executable, _KOLORUN, "-np", "2", sys.executable, "-c", worker]
    done = subprocess.run(cmd, env=_env(HOROVOD_TIMELINE="DYNAMIC"), cwd=job_dir,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done
    assert "allreduce.x" in rows(load(path)[1])
    assert sorted(os.listdir(job_dir)) == ["later.json"], os.listdir(job_dir)
