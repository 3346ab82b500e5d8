# SPDX-License-Identifier: Apache-2.0
"""kolo.init -> kolo.shutdown -> kolo.init in one process through the public API, with a new
rank and world size read from os.environ in between (bootstrap/README.md, rendezvous rounds).
Runs in one process (CTest python_reinit) and starts its own three ranks over a file store in a
temporary directory, with shared memory off and on."""

import json
import os
import subprocess
import sys
import tempfile
import time

import pytest

_HERE = os.path.dirname(os.path.abspath(__file__))
_SOURCE = os.path.normpath(os.path.join(_HERE, "..", "..", "bindings", "python"))

# One rank: a world of 3 with a process set and auto-named ops; then the first two ranks as a
# world of 2 with their numbers swapped (names, process sets and the topology start fresh);
# the third leaves after the first round.
_WORKER = r"""
import os, sys
import numpy as np
import kolo

first = int(sys.argv[1])
kolo.init()
assert (kolo.rank(), kolo.size()) == (first, 3), (kolo.rank(), kolo.size())
out = kolo.allreduce(np.full(5, first + 1, dtype=np.float32), op=kolo.Sum)
assert (out == 6).all(), out
pair = kolo.add_process_set([0, 1])
assert pair.process_set_id == 1
if pair.included():
    got = kolo.allreduce(np.array([first], dtype=np.int64), op=kolo.Sum, process_set=pair)
    assert got[0] == 1, got
kolo.barrier()
kolo.shutdown()
assert not kolo.is_initialized()
if first == 2:
    sys.exit(0)

os.environ["KOLO_RANK"] = str(1 - first)
os.environ["KOLO_SIZE"] = "2"
kolo.init()
assert (kolo.rank(), kolo.size()) == (1 - first, 2), (kolo.rank(), kolo.size())
assert pair.process_set_id is None  # the first round's sets are gone
out = kolo.allreduce(np.arange(4, dtype=np.float64) + 10 * kolo.rank())
assert (out == np.arange(4) + 5).all(), out  # Average of rank 0's and rank 1's
again = kolo.add_process_set([1])
assert again.process_set_id == 1, again.process_set_id  # ids start over
g = kolo.allgather(np.array([kolo.rank()], dtype=np.int32))
assert list(g) == [0, 1], g
kolo.shutdown()
print("rank %d: both rounds passed" % first)
"""


@pytest.mark.parametrize("shm", ["off", "on"])
def test_reinit_with_another_world(shm):
    with tempfile.TemporaryDirectory(prefix="kolo-py-reinit-") as store:
        procs = []
        for r in range(3):
            env = dict(os.environ)
            for k in list(env):
                if k.startswith(("KOLO_", "HOROVOD_", "OMPI_", "PMI_", "PMIX_", "SLURM_")):
                    if k != "KOLO_LIBRARY":
                        del env[k]
            env.update({"KOLO_RANK": str(r), "KOLO_SIZE": "3", "KOLO_RENDEZVOUS_DIR": store,
                        "KOLO_CONTROLLER": "gloo", "KOLO_SHM": shm,
                        "KOLO_START_TIMEOUT": "60", "KOLO_TIMEOUT_SECONDS": "30",
                        "KOLO_TIMELINE": os.path.join(store, "timeline.json")})
            if os.environ.get("KOLO_TEST_INSTALLED") != "1":
                env["PYTHONPATH"] = _SOURCE + os.pathsep + env.get("PYTHONPATH", "")
            procs.append(subprocess.Popen([sys.executable, "-c", _WORKER, str(r)], env=env,
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                          text=True))
        deadline = time.monotonic() + 120
        outputs = []
        try:
            for p in procs:
                out, _ = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
                outputs.append(out)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        for r, (p, out) in enumerate(zip(procs, outputs)):
            assert p.returncode == 0, "rank %d (KOLO_SHM=%s) failed:\n%s" % (r, shm, out)
        # Rank 0 of the first round (process 0) started the timeline; rank 0 of the second
        # (process 1) continued the same file after one RESET marker (one time axis).
        with open(os.path.join(store, "timeline.json")) as f:
            events = json.load(f)["traceEvents"]
        resets = [e for e in events if e.get("name") == "RESET"]
        assert len(resets) == 1, resets
        assert resets[0]["args"] == {"round": 1, "rank": 0, "size": 2}, resets[0]
        at = events.index(resets[0])
        before = [e for e in events[:at] if e.get("ph") in ("B", "E", "X", "i")]
        after = [e for e in events[at + 1:] if e.get("ph") in ("B", "E", "X", "i")]
        assert before and after, (len(before), len(after))
        assert max(e["ts"] for e in before) <= resets[0]["ts"] <= min(e["ts"] for e in after)
