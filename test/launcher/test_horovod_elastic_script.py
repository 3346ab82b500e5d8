# SPDX-License-Identifier: Apache-2.0
"""Issue 36's acceptance: a Horovod 0.28 elastic script (horovod_elastic_script.py: Horovod's
public API only, ElasticSampler and TorchState, with `import kolo.torch as hvd` its one changed
line) trains under `kolorun --min-np/--max-np` through an added worker and a killed one, and
every epoch it finishes trains every sample exactly once. Run by CTest (KOLO_LIBRARY set), with
test_elastic.py's helpers."""

import json
import os

from conftest import HERE
from test_elastic import Hosts, pytestmark, run_changing_hosts  # noqa: F401 (skip marks)

SCRIPT = os.path.join(HERE, "horovod_elastic_script.py")
N = 252
EPOCHS = 5


def lines(r, tag):
    return [json.loads(l.split("]<stdout>:%s " % tag, 1)[1]) for l in r.stdout.splitlines()
            if "]<stdout>:%s " % tag in l]


def test_horovod_script_worker_added_then_one_killed_every_sample_once(tmp_path):
    # Round 0: workers 0 and 1. At rank 0's step 4 the test offers a third slot: worker 2
    # joins at a commit (round 1, 3 ranks). Worker 1 kills itself before its 6th step at size
    # 3: the survivors restore the last commit and go on as round 2 (2 ranks). kolorun starts
    # a replacement on the only host at once; it waits 60 s before hvd.init (test plumbing),
    # so it joins no round and kolorun stops it when the job ends: the sizes are exact.
    hosts = Hosts(tmp_path, "localhost:2")
    r = run_changing_hosts(["-np", "2", "--min-np", "2", "--max-np", "3",
                            "--host-discovery-script", str(hosts.script)],
                           ["--epochs", str(EPOCHS), "--step-sleep", "0.15",
                            "--die-worker", "1", "--die-size", "3", "--die-at-step", "6",
                            "--hold-workers-from", "3"],
                           hosts, ["localhost:3"], trigger="]<stdout>:PROGRESS step 4 size 2",
                           timeout=120, worker=SCRIPT)
    tail = r.stdout[-3000:] + r.stderr[-3000:]
    assert r.returncode == 0, tail
    done = lines(r, "DONE")
    assert len(done) == 1, tail
    # one call of the training function per world: 2 ranks, 3 after the join, 2 after the death
    assert done[0]["sizes"] == [2, 3, 2], (done, tail)
    assert "elastic round 1: 3 workers (localhost: 0-2)" in r.stderr, tail
    assert "worker 1 kills itself at its step 6 at size 3 (rank 1)" in r.stdout, tail
    assert "worker 1 (host localhost) was killed by signal 9" in r.stderr, tail
    assert "restored the last commit" in r.stderr, tail
    assert "elastic round 2: 2 workers (localhost: 0,2)" in r.stderr, tail
    assert "elastic round 3" not in r.stderr, tail
    assert done[0]["loss"] < 0.01, done
    epochs = lines(r, "EPOCH")
    # Rank 0 prints an epoch before its last commit: a rollback there prints it again.
    assert sorted({e["epoch"] for e in epochs}) == list(range(EPOCHS)), tail
    for e in epochs:
        assert e["counts"] == [1] * N, (e["epoch"], e["size"], [
            (i, c) for i, c in enumerate(e["counts"]) if c != 1])
