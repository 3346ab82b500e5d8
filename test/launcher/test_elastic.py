# SPDX-License-Identifier: Apache-2.0
"""Elastic training end to end on this machine (issue 14's scenarios 0-6): kolorun's elastic
driver with a discovery script, workers training with kolo.torch.elastic (elastic_worker.py)
on the libkolo.so of the build (KOLO_LIBRARY, set by CTest). Each worker that "dies" SIGKILLs
itself at a chosen round, rank and step, so kolorun sees a real death. Every job is bounded by
a subprocess timeout; each takes a few seconds.

The checks: kolorun's exit status and messages, the sizes the training ran on, the loss going
down, and the final parameters bitwise equal on every rank of the last round."""

import os
import subprocess
import threading

import pytest

from conftest import HERE, KOLORUN, PY, REPO, base_env

WORKER = os.path.join(HERE, "elastic_worker.py")
LIB = os.environ.get("KOLO_LIBRARY", "")
TORCH_PY = "/usr/bin/python3"



def _has_torch():
    try:
        return subprocess.run([TORCH_PY, "-c", "import torch"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


pytestmark = [
    pytest.mark.skipif(not LIB or not os.path.exists(LIB),
                       reason="KOLO_LIBRARY is not set (run it through CTest)"),
    pytest.mark.skipif(not _has_torch(), reason="%s has no torch" % TORCH_PY),
]


def elastic_env():
    return base_env(KOLO_LIBRARY=LIB, PYTHONPATH=os.path.join(REPO, "bindings", "python"),
                    KOLO_ELASTIC_DISCOVERY_INTERVAL="0.2", KOLO_LAUNCHER_KILL_GRACE_SECONDS="2",
                    KOLO_LAUNCHER_FAILURE_GRACE_SECONDS="10")


class Hosts:
    """A discovery script printing the content of a file the test rewrites."""

    def __init__(self, tmp_path, text):
        self.file = tmp_path / "hosts"
        self.file.write_text(text + "\n")
        self.script = tmp_path / "discover.sh"
        self.script.write_text("#!/bin/sh\ncat %s\n" % self.file)
        self.script.chmod(0o755)

    def set(self, text):
        tmp = str(self.file) + ".new"
        with open(tmp, "w") as f:
            f.write(text + "\n")
        os.replace(tmp, str(self.file))

    def later(self, seconds, text):
        t = threading.Timer(seconds, self.set, args=(text,))
        t.daemon = True
        t.start()
        return t


def run(flags, worker_args, timeout=120):
    argv = [PY, KOLORUN] + flags + ["--start-timeout", "30", TORCH_PY, WORKER] + worker_args
    r = subprocess.run(argv, env=elastic_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=timeout)
    return r


def run_changing_hosts(flags, worker_args, hosts, changes, timeout=150, prefix=None, env=None,
                       start_timeout=30, trigger=None, worker=WORKER):
    """Runs the job and rewrites the host list once per entry of `changes`, each time after
    rank 0 reported 4 more steps in a newer round than the previous change (its PROGRESS
    lines), so the changes land while the job trains whatever the machine's speed; with
    `trigger` (a text), instead at the first output line containing it."""
    argv = ((prefix or [PY, KOLORUN]) + flags + ["--start-timeout", str(start_timeout),
                                                 TORCH_PY, worker] + worker_args)
    proc = subprocess.Popen(argv, env=env or elastic_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    err = []
    t = threading.Thread(target=lambda: err.extend(proc.stderr), daemon=True)
    t.start()
    out = []
    pending = list(changes)
    seen_round, base_step = -1, 0
    killer = threading.Timer(timeout, proc.kill)
    killer.start()
    try:
        for line in proc.stdout:
            out.append(line)
            if pending and trigger is not None:
                if trigger in line:
                    hosts.set(pending.pop(0))
            elif pending and "]<stdout>:PROGRESS " in line:
                words = line.split("PROGRESS ", 1)[1].split()
                rnd, step = int(words[1]), int(words[5])
                if rnd > seen_round and step >= base_step + 4:
                    hosts.set(pending.pop(0))
                    # the next change waits for a round formed after this one
                    seen_round, base_step = rnd, step
        proc.wait()
    finally:
        killer.cancel()
    t.join(5)
    return subprocess.CompletedProcess(argv, proc.returncode, "".join(out), "".join(err))


def results(r):
    import json
    out = {}
    for line in r.stdout.splitlines():
        if "]<stdout>:RESULT " in line:
            res = json.loads(line.split("]<stdout>:RESULT ", 1)[1])
            out[res["rank"]] = res
    return out


def check_trained(r, size):
    """The job succeeded on `size` ranks in its last round, learned, and agrees bitwise."""
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    res = results(r)
    assert sorted(res) == list(range(size)), (sorted(res), r.stdout[-3000:])
    params = [res[k]["params"] for k in sorted(res)]
    assert all(p == params[0] for p in params), params
    rounds = {res[k]["round"] for k in res}
    assert len(rounds) == 1, rounds
    for k in res:
        assert res[k]["size"] == size
        assert res[k]["loss"] < res[k]["loss0"] / 20, res[k]
        assert res[k].get("coverage_gaps", 0) == 0, res[k]  # every sample of every epoch
        for epoch, counts in enumerate(res[k].get("seen", [])):
            # the committed steps trained every sample of the epoch exactly once
            assert counts == [1] * len(counts), (epoch, [(i, c) for i, c in enumerate(counts)
                                                         if c != 1])
    return res


def test_scenario0_one_machine_worker_killed_job_goes_on(tmp_path):
    hosts = Hosts(tmp_path, "localhost:3")
    r = run(["-np", "3", "--min-np", "2", "--max-np", "3", "--host-discovery-script",
             str(hosts.script)], ["--die", "0:1:5"])
    assert "worker 1 (host localhost) was killed by signal 9" in r.stderr, r.stderr[-3000:]
    # The only host is not blacklisted: a replacement (worker 3) may start there at once, and
    # the job goes on with it or, if it comes after round 1 formed, on the two survivors.
    assert "host localhost is the only host this job can use, so one failure does not " \
        "blacklist it" in r.stderr, r.stderr[-3000:]
    assert "gets no new worker" not in r.stderr
    res = r.returncode == 0 and results(r)
    size = len(res) if res else 0
    assert size in (2, 3), r.stdout[-3000:] + r.stderr[-3000:]
    res = check_trained(r, size)
    assert res[0]["sizes"][0] == 3 and res[0]["sizes"][-1] == size
    assert "1" not in {res[k]["wid"] for k in res}


def test_scenario0_one_machine_min_np_equals_np_a_death_is_replaced(tmp_path):
    # horovodrun blacklists the only host at the first death: with --min-np 2 of 2 such a job
    # can only wait out --elastic-timeout and fail. Here the host stays usable, a replacement
    # joins, and the job finishes on 2 ranks.
    hosts = Hosts(tmp_path, "localhost:2")
    r = run(["-np", "2", "--min-np", "2", "--max-np", "2", "--host-discovery-script",
             str(hosts.script), "--elastic-timeout", "20"], ["--die", "0:1:5"], timeout=90)
    res = check_trained(r, 2)
    assert res[0]["sizes"] == [2], res[0]["sizes"]
    assert "elastic round 1: 2 workers" in r.stderr, r.stderr[-3000:]
    assert sorted(res[k]["wid"] for k in res) == ["0", "2"]


def test_output_prefix_and_files_are_per_worker_never_reused(tmp_path):
    # horovodrun prefixes an elastic worker's lines with the rank it started with and names its
    # --output-filename folder the same way, so a replacement reuses the dead worker's number
    # and overwrites its files. kolorun uses the worker id, which is never reused
    # (docs/migrating.md): the dead worker's files stay, the replacement gets its own.
    hosts = Hosts(tmp_path, "localhost:2")
    out = tmp_path / "out"
    r = run(["-np", "2", "--min-np", "2", "--max-np", "2", "--host-discovery-script",
             str(hosts.script), "--elastic-timeout", "20", "--output-filename", str(out)],
            ["--die", "0:1:5"], timeout=90)
    res = check_trained(r, 2)
    assert sorted(res[k]["wid"] for k in res) == ["0", "2"]
    assert sorted(os.listdir(out)) == ["rank.0", "rank.1", "rank.2"], os.listdir(out)
    dead = (out / "rank.1" / "stdout").read_text()
    assert "worker 1 dies: round 0 rank 1 step 5" in dead, dead
    assert "worker 2" not in dead, dead
    # The replacement is rank 1 of round 1, yet its lines and folder carry its worker id, 2.
    replacement = (out / "rank.2" / "stdout").read_text()
    assert '[2]<stdout>:RESULT {"rank": 1,' in replacement, replacement
    assert '"wid": "2"' in replacement and "worker 1" not in replacement, replacement
    assert "[1]<stdout>:worker 1 dies" in r.stdout, r.stdout[-3000:]
    assert '[2]<stdout>:RESULT {"rank": 1,' in r.stdout, r.stdout[-3000:]


# The only host's first death is forgiven and kolorun starts a replacement there at once. The
# tests that check the job ends on the survivors keep it out (--hold-replacements): otherwise it
# joins whenever its start-up beats the survivors' remaining steps (a loaded machine).
def test_scenario1_one_of_four_killed_mid_epoch_resumes_on_three(tmp_path):
    hosts = Hosts(tmp_path, "localhost:4")
    r = run(["-np", "4", "--min-np", "2", "--host-discovery-script", str(hosts.script)],
            ["--die", "0:2:7", "--commit-every", "3", "--hold-replacements", "4"])
    res = check_trained(r, 3)
    assert res[0]["sizes"] == [4, 3]
    # the commit before the death was at step 6; the restored state resumes from it
    assert "restored the last commit" in r.stderr


def test_scenario2_discovery_adds_a_slot_new_worker_joins(tmp_path):
    hosts = Hosts(tmp_path, "localhost:2")
    r = run_changing_hosts(["-np", "2", "--min-np", "2", "--max-np", "3",
                            "--host-discovery-script", str(hosts.script)],
                           ["--epochs", "2", "--until-sizes", "2,3", "--step-sleep", "0.02"],
                           hosts, ["localhost:3"])
    res = check_trained(r, 3)
    assert "elastic round 1: 3 workers (localhost: 0-2)" in r.stderr, r.stderr
    assert res[0]["sizes"] == [2, 3]
    assert sorted(res[k]["wid"] for k in res) == ["0", "1", "2"]
    assert res[0]["wid"] == "0"  # the oldest worker stays rank 0 and sends the state


def test_scenario3_rank0_killed_survivors_elect_a_new_rank0(tmp_path):
    hosts = Hosts(tmp_path, "localhost:4")
    r = run(["-np", "4", "--min-np", "2", "--host-discovery-script", str(hosts.script)],
            ["--die", "0:0:5", "--hold-replacements", "4"])
    res = check_trained(r, 3)
    assert res[0]["wid"] == "1", res[0]
    assert "rank 0 is worker 1" in r.stderr


def test_scenario4_below_min_np_then_a_host_returns(tmp_path):
    # Two hosts on this machine ("localhost" and "127.0.0.1", both local). The worker on
    # 127.0.0.1 dies: that host is cooled down for min(MAX, MIN*2 + U(0, MIN)) = 2 s
    # (another host exists, so it is blacklisted at once); the 2 survivors < min-np 3 wait, the host comes back within
    # --elastic-timeout and a new worker there joins them; no deadlock.
    hosts = Hosts(tmp_path, "localhost:2\n127.0.0.1:1")
    r = run(["-np", "3", "--min-np", "3", "--host-discovery-script", str(hosts.script),
             "--elastic-timeout", "30", "--blacklist-cooldown-range", "1", "2"],
            ["--die", "0:2:4"])
    res = check_trained(r, 3)
    assert "host 127.0.0.1 gets no new worker for 2 s" in r.stderr, r.stderr[-3000:]
    assert "fewer than --min-np 3: waiting up to 30 s" in r.stderr, r.stderr
    assert sorted(res[k]["wid"] for k in res) == ["0", "1", "3"]


def test_scenario4_below_min_np_nothing_returns_fails_clearly(tmp_path):
    hosts = Hosts(tmp_path, "localhost:2\n127.0.0.1:1")
    r = run(["-np", "3", "--min-np", "3", "--host-discovery-script", str(hosts.script),
             "--elastic-timeout", "3"], ["--die", "0:2:4", "--epochs", "50"], timeout=60)
    assert r.returncode == 1, r.stderr[-3000:]
    assert "host 127.0.0.1 gets no new worker in this job" in r.stderr, r.stderr[-3000:]
    assert ("job failed: only 2 workers, fewer than --min-np 3, and no host came within "
            "--elastic-timeout 3 s") in r.stderr, r.stderr[-3000:]
    # the survivors raise the driver's reason (ElasticJobError) instead of waiting forever
    assert "elastic job aborted by kolorun: only 2 workers" in r.stderr, r.stderr[-3000:]
    assert "RESULT" not in r.stdout


def test_scenario5_failure_during_state_sync_recovers(tmp_path):
    hosts = Hosts(tmp_path, "localhost:4")
    r = run(["-np", "4", "--min-np", "2", "--host-discovery-script", str(hosts.script)],
            ["--die", "0:3:4", "--die-in-sync", "1:1"])
    # The first death is forgiven (the only host), so a replacement may take part in round 1
    # or 2; the second blacklists the host: the job ends on the 2 or 3 workers left.
    res = results(r) if r.returncode == 0 else {}
    assert len(res) in (2, 3), r.stdout[-3000:] + r.stderr[-3000:]
    check_trained(r, len(res))
    assert "dies: in sync of round 1 as rank 1" in r.stdout
    assert "elastic round 2: %d workers" % len(res) in r.stderr, r.stderr
    assert "host localhost gets no new worker in this job" in r.stderr, r.stderr


def test_scenario5_death_during_the_rendezvous_does_not_wait_for_the_start_timeout(tmp_path):
    # Rank 1 of round 1 dies after joining it, before its init: the others wait in round 1's
    # rendezvous for it. kolorun forms round 2 and refuses round 1's missing keys, so they
    # leave at once (not after --start-timeout 60) and finish on 2 ranks.
    import time
    hosts = Hosts(tmp_path, "localhost:4")
    argv = [PY, KOLORUN, "-np", "4", "--min-np", "2", "--host-discovery-script",
            str(hosts.script), "--start-timeout", "60", TORCH_PY, WORKER, "--die", "0:3:4",
            "--die-after-join", "1:1", "--hold-replacements", "4"]
    start = time.monotonic()
    r = subprocess.run(argv, env=elastic_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=120)
    elapsed = time.monotonic() - start
    check_trained(r, 2)
    assert "dies after joining round 1 as rank 1" in r.stdout
    assert "rendezvous round 1 was abandoned" in r.stderr, r.stderr[-3000:]
    assert elapsed < 45, elapsed


def test_scenario5_repeated_failures_reach_the_reset_limit(tmp_path):
    # Every replacement dies in its first sync. The only host is forgiven the first death, then
    # blacklisted for horovodrun's cool-down at each further one, and the job ends at
    # --reset-limit with a clear message.
    hosts = Hosts(tmp_path, "localhost:3")
    r = run(["-np", "3", "--min-np", "2", "--host-discovery-script", str(hosts.script),
             "--blacklist-cooldown-range", "1", "2", "--reset-limit", "5"],
            ["--die", "0:2:3", "--die-new-in-sync", "1", "--epochs", "200",
             "--step-sleep", "0.01"], timeout=90)
    assert r.returncode == 1, r.stdout[-2000:] + r.stderr[-3000:]
    assert "job failed: the workers would be re-formed a 6th time, past --reset-limit 5" \
        in r.stderr, r.stderr[-3000:]
    # horovodrun's cool-down, MIN*2^k + U(0, MIN) within [MIN, MAX]: MAX from the first one
    assert r.stderr.count("host localhost gets no new worker for 2 s") >= 2, r.stderr[-3000:]


def test_scenario6_shrink_and_grow_several_times(tmp_path):
    hosts = Hosts(tmp_path, "localhost:3")
    r = run_changing_hosts(["-np", "3", "--min-np", "2", "--max-np", "4",
                            "--host-discovery-script", str(hosts.script)],
                           ["--epochs", "2", "--until-sizes", "3,2,4,2,3", "--step-sleep",
                            "0.02"], hosts,
                           ["localhost:2", "localhost:4", "localhost:2", "localhost:3"])
    res = check_trained(r, 3)
    sizes = res[0]["sizes"]
    assert sizes[:5] == [3, 2, 4, 2, 3], sizes
    # graceful removal (horovodrun's): the removed workers leave at a commit, no rollback
    assert "host localhost has 2 slots now: worker 2 leaves the job at its next commit" \
        in r.stderr, r.stderr[-3000:]
    assert "worker 2 (host localhost) left the job at its commit" in r.stderr
    assert "restored the last commit" not in r.stderr


def test_trainer_elastic_worker_added_then_one_killed_every_sample_once(tmp_path):
    # kolo.torch.Trainer(elastic=True), commits every 3 steps, 252 samples in batches of 6.
    # Round 0 trains on 2 ranks; at its step 4 the test adds a slot, and the new worker joins
    # at a commit (round 1, 3 ranks, no rollback). Rank 1 of round 1 dies 4 steps in: the
    # survivors roll back to the commit and finish on 2 ranks (the replacement is held out).
    # Each epoch resumes with exactly the samples not trained yet: the committed steps of
    # every epoch trained each sample exactly once (the workers' `seen` counts).
    hosts = Hosts(tmp_path, "localhost:2")
    r = run_changing_hosts(["-np", "2", "--min-np", "2", "--max-np", "3",
                            "--host-discovery-script", str(hosts.script)],
                           ["--grow-step", "4", "--die-round", "1", "--die-rank", "1",
                            "--die-step", "4", "--hold-replacements", "3"],
                           hosts, ["localhost:3"], trigger="GROW at step",
                           worker=os.path.join(HERE, "elastic_trainer_worker.py"))
    res = check_trained(r, 2)
    assert "elastic round 1: 3 workers" in r.stderr, r.stderr[-3000:]
    assert "dies at step" in r.stdout and "of round 1" in r.stdout, r.stdout[-3000:]
    assert "restored the last commit" in r.stderr, r.stderr[-3000:]
    for k in res:
        assert res[k]["epochs"] == [0, 1, 2, 3], res[k]
        assert len(res[k]["seen"]) == 4 and res[k]["round"] >= 2, res[k]


# A worker that logs, in its state (so a rollback forgets them too), the samples each step of
# every rank trained, per epoch; rank 2 of round 0 may die at a step (argv[1]). 240 samples,
# batches of 4, a commit every 3 steps: every commit on 3 or 2 ranks leaves a remainder that 2
# ranks share evenly, so the sampler pads nothing and any sample trained twice was redone.
SEEN_WORKER = """\
import json, os, signal, sys, time
import torch
import kolo.torch as hvd
hvd.init()
N, BS, DIE = 240, 4, int(sys.argv[1])
torch.manual_seed(0)
X = torch.randn(N, 4)
Y = X.sum(1, keepdim=True)
model = torch.nn.Linear(4, 1)
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                               named_parameters=model.named_parameters())
sampler = hvd.elastic.ElasticSampler(list(range(N)), shuffle=True, seed=3)


class State(hvd.elastic.TorchState):
    def sync(self):
        print("SYNC round %d rank %d" % (hvd.elastic.current_round(), hvd.rank()), flush=True)
        super().sync()


state = State(model=model, optimizer=opt, sampler=sampler, epoch=0, step=0, seen={})
FIRST = hvd.elastic.current_round()


@hvd.elastic.run
def train(state):
    while state.epoch < 3:
        for b in range(-(-len(state.sampler) // BS)):
            if FIRST == hvd.elastic.current_round() == 0 and hvd.rank() == 2 and \\
                    state.step == DIE:
                os.kill(os.getpid(), signal.SIGKILL)
            idx = state.sampler.get_indices(b, BS)
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(X[idx]), Y[idx]).backward()
            opt.step()
            for part in hvd.allgather_object(list(idx)):
                state.seen.setdefault(state.epoch, []).extend(part)
            state.sampler.record_batch(b, BS)
            state.step += 1
            time.sleep(0.03)
            if state.step % 3 == 0:
                if hvd.rank() == 0:
                    print("PROGRESS round %d size %d step %d" % (
                        hvd.elastic.current_round(), hvd.size(), state.step), flush=True)
                state.commit()
        state.epoch += 1
        state.sampler.set_epoch(state.epoch)
        state.commit()


train(state)
print("SEEN " + json.dumps({"rank": hvd.rank(), "size": hvd.size(), "epochs": {
    e: [len(v), len(v) - len(set(v)), N - len(set(v))] for e, v in state.seen.items()}}),
    flush=True)
"""


def seen(r):
    import json
    return {d["rank"]: d for d in (json.loads(l.split("]<stdout>:SEEN ", 1)[1])
                                   for l in r.stdout.splitlines() if "]<stdout>:SEEN " in l)}


def test_a_lost_ranks_committed_samples_are_not_trained_again(tmp_path):
    # Horovod's SamplerStateHandler.save: a commit saves every rank's processed indices. Rank 2
    # (alone on host 127.0.0.1, which is then blacklisted: no replacement) dies after its
    # commit at step 6; the survivors must not train its 24 committed samples again.
    prog = tmp_path / "seen.py"
    prog.write_text(SEEN_WORKER)
    argv = [PY, KOLORUN, "-np", "3", "--min-np", "2", "-H", "localhost:2,127.0.0.1:1",
            "--start-timeout", "30", TORCH_PY, str(prog), "7"]
    r = subprocess.run(argv, env=elastic_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "restored the last commit" in r.stderr
    # the rollback's round syncs the restored state (no skip_sync after a lost peer)
    assert "<stdout>:SYNC round 1 rank 0" in r.stdout, r.stdout[-3000:]
    got = seen(r)
    assert sorted(got) == [0, 1], r.stdout[-3000:]
    for d in got.values():
        assert d["size"] == 2
        # epoch: [samples trained, trained twice, never trained]
        assert d["epochs"] == {"0": [240, 0, 0], "1": [240, 0, 0], "2": [240, 0, 0]}, d


def test_graceful_removal_no_rollback_and_no_sample_twice(tmp_path):
    # horovodrun's graceful removal: the host list shrinks 3 -> 2 while the job trains; worker
    # 2 is not killed: every worker raises HostsUpdatedInterrupt at the next commit, workers 0
    # and 1 go on from it (no rollback, nothing trained twice), worker 2 ends by itself.
    prog = tmp_path / "seen.py"
    prog.write_text(SEEN_WORKER)
    hosts = Hosts(tmp_path, "localhost:3")
    argv = [PY, KOLORUN, "-np", "3", "--min-np", "2", "--host-discovery-script",
            str(hosts.script), "--start-timeout", "30", TORCH_PY, str(prog), "-1"]
    r = _run_shrinking(argv, hosts, "localhost:2")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "host localhost has 2 slots now: worker 2 leaves the job at its next commit" \
        in r.stderr, r.stderr[-3000:]
    assert "worker 2 was removed from the job by kolorun (host localhost has 2 slots now)" \
        in r.stderr, r.stderr[-3000:]
    assert "worker 2 (host localhost) left the job at its commit" in r.stderr
    assert "restored the last commit" not in r.stderr and "PEER_LOST" not in r.stderr
    assert "elastic round 1: 2 workers (localhost: 0-1)" in r.stderr
    # Horovod's skip_sync: workers were only removed, so round 1 syncs nothing (round 0 did)
    assert "<stdout>:SYNC round 0 rank 0" in r.stdout, r.stdout[-3000:]
    assert "SYNC round 1" not in r.stdout, r.stdout[-3000:]
    got = seen(r)
    assert sorted(got) == [0, 1], r.stdout[-3000:]
    for d in got.values():
        assert d["size"] == 2
        assert d["epochs"] == {"0": [240, 0, 0], "1": [240, 0, 0], "2": [240, 0, 0]}, d


def _run_shrinking(argv, hosts, text, timeout=120):
    """Runs argv and rewrites the host list to `text` once rank 0 reported step 6."""
    proc = subprocess.Popen(argv, env=elastic_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    err = []
    t = threading.Thread(target=lambda: err.extend(proc.stderr), daemon=True)
    t.start()
    out = []
    killer = threading.Timer(timeout, proc.kill)
    killer.start()
    try:
        for line in proc.stdout:
            out.append(line)
            if "]<stdout>:PROGRESS round 0 size 3 step 6" in line:
                hosts.set(text)
        proc.wait()
    finally:
        killer.cancel()
    t.join(5)
    return subprocess.CompletedProcess(argv, proc.returncode, "".join(out), "".join(err))


def test_reset_limit_counts_a_replacement_with_the_re_forming_it_was_started_for(tmp_path):
    # horovodrun counts one reset per re-forming, and the replacement it starts joins that same
    # reset. A death on the only host (forgiven: a replacement starts at once) re-forms the
    # workers once: the round that admits the replacement later is no second reset, so
    # --reset-limit 1 lets the job finish on 3 ranks.
    hosts = Hosts(tmp_path, "localhost:3")
    r = run(["-np", "3", "--min-np", "2", "--host-discovery-script", str(hosts.script),
             "--reset-limit", "1"], ["--die", "0:1:5", "--until-sizes", "3,2,3",
                                     "--step-sleep", "0.02"], timeout=150)
    res = check_trained(r, 3)
    assert res[0]["sizes"][:3] == [3, 2, 3], res[0]["sizes"]
    assert "past --reset-limit" not in r.stderr
    assert "elastic round 2: 3 workers" in r.stderr, r.stderr[-3000:]


def test_an_abort_stops_the_training_workers_at_their_next_commit(tmp_path):
    # --reset-limit 0: the slot added while the job trains would re-form it, so kolorun aborts.
    # The workers learn of it at their next commit (as horovodrun ends the job at once), not
    # when --failure-grace runs out (10 s here) and kolorun stops them.
    import time
    hosts = Hosts(tmp_path, "localhost:2")
    t0 = time.monotonic()
    r = run_changing_hosts(["-np", "2", "--min-np", "1", "--max-np", "3", "--reset-limit", "0",
                            "--host-discovery-script", str(hosts.script)],
                           ["--epochs", "200", "--step-sleep", "0.02"], hosts, ["localhost:3"])
    took = time.monotonic() - t0
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-3000:]
    reason = "the workers would be re-formed a 1st time, past --reset-limit 0"
    assert "job failed: " + reason in r.stderr, r.stderr[-3000:]
    for w in ("0", "1"):
        assert "[%s]<stderr>:kolo.elastic.ElasticJobError: elastic job aborted by kolorun: %s" % (
            w, reason) in r.stderr, r.stderr[-3000:]
    assert "SIGTERM" not in r.stderr, r.stderr[-3000:]
    assert took < 40, took


def test_a_worker_added_after_the_last_commit_is_stopped_when_the_job_finishes(tmp_path):
    # The slot is added once the workers are past their last commit (they "write the final
    # checkpoint" for 6 s): round 1 can never form. Once they finish, the new worker must be
    # stopped at once, not wait out --start-timeout (40 s) in a round nobody else joins.
    import time
    hosts = Hosts(tmp_path, "localhost:2")
    t0 = time.monotonic()
    r = run_changing_hosts(["-np", "2", "--min-np", "1", "--max-np", "3",
                            "--host-discovery-script", str(hosts.script)],
                           ["--epochs", "1", "--linger", "6"], hosts, ["localhost:3"],
                           start_timeout=40, trigger="]<stdout>:LINGER round 0 rank 0")
    took = time.monotonic() - t0
    res = check_trained(r, 2)
    assert res[0]["round"] == 0
    if "elastic round 1: 3 workers" in r.stderr:  # (else worker 2 was stopped before it)
        assert "worker 2 waits to join elastic round 1, which can no longer form" in r.stderr, \
            r.stderr[-3000:]
    assert "could not join round" not in r.stderr, r.stderr[-3000:]
    assert took < 30, took


def test_a_slot_added_while_commits_are_far_apart_is_one_reset(tmp_path):
    # The workers commit every ~4 s, longer than --start-timeout 2. The new worker waits for
    # them to reach their commit before the round's rendezvous (horovodrun starts it only then),
    # so its init does not time out, no round is formed again, and --reset-limit 1 is enough.
    hosts = Hosts(tmp_path, "localhost:2")
    r = run_changing_hosts(["-np", "2", "--min-np", "1", "--max-np", "3", "--reset-limit", "1",
                            "--host-discovery-script", str(hosts.script)],
                           ["--epochs", "2", "--until-sizes", "2,3", "--commit-every", "12",
                            "--step-sleep", "0.35"], hosts, ["localhost:3"], start_timeout=2)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    res = results(r)
    assert sorted(res) == [0, 1, 2], r.stdout[-3000:]
    assert res[0]["sizes"] == [2, 3], res[0]
    assert "elastic round 1: 3 workers (localhost: 0-2)" in r.stderr, r.stderr[-3000:]
    assert "elastic round 2" not in r.stderr and "could not join round" not in r.stderr, \
        r.stderr[-3000:]


def test_a_stopped_worker_is_dropped_and_the_others_go_on(tmp_path):
    # Worker 2 freezes (SIGSTOP) mid-training. The others' runtime names it ("is stopped") and
    # they ask for a new round, which it cannot take its place in: their init there times out.
    # kolorun then SIGKILLs it as a failed worker and forms the next round without it, so the
    # job finishes on 2 (>= --min-np). It used to put the frozen worker in every new round
    # until the others gave up ("init failed in 10 rounds in a row").
    import signal
    import time
    from conftest import assert_all_gone
    hosts = Hosts(tmp_path, "localhost:3")
    pid_file = tmp_path / "stopped.pid"
    t0 = time.monotonic()
    try:
        r = run_changing_hosts(["-np", "3", "--min-np", "2", "--elastic-timeout", "20",
                                "-x", "KOLO_TIMEOUT_SECONDS=4",
                                "--host-discovery-script", str(hosts.script)],
                               ["--stop", "0:2:5", "--pid-file", str(pid_file),
                                "--hold-replacements", "3"], hosts, [], start_timeout=4,
                               timeout=90)
        took = time.monotonic() - t0
        assert pid_file.exists(), r.stdout[-3000:] + r.stderr[-3000:]
        stopped = int(pid_file.read_text())
        assert_all_gone([(stopped,)], timeout=2)
        assert ("worker 2 (host localhost) did not take its place in elastic round 1, which "
                "the others could not form without it") in r.stderr, r.stderr[-3000:]
        assert "worker 2 (host localhost) was killed by signal 9" in r.stderr, r.stderr[-3000:]
        res = check_trained(r, 2)
        assert res[0]["sizes"] == [3, 2], res[0]["sizes"]
        assert "2" not in {res[k]["wid"] for k in res}
        assert "init failed" not in r.stderr, r.stderr[-3000:]
        assert took < 60, took
    finally:
        if pid_file.exists():
            pid = int(pid_file.read_text())
            for sig in (signal.SIGCONT, signal.SIGKILL):
                try:
                    os.kill(pid, sig)
                except OSError:
                    pass


def test_a_mismatch_in_the_training_code_ends_the_job_instead_of_resetting_for_ever(tmp_path):
    # Every round would fail the same op the same way (a shape that depends on the rank): the
    # workers end with the error, as with any exception of the training code, and the job fails
    # at once; before, they re-formed without end (no --reset-limit by default).
    hosts = Hosts(tmp_path, "localhost:2")
    r = run(["-np", "2", "--min-np", "1", "--host-discovery-script", str(hosts.script)],
            ["--mismatch-at", "3"], timeout=60)
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-3000:]
    assert "allreduce 'allreduce.shape_by_rank': rank 0 sent shape [3], rank 1 sent [4]" in \
        r.stderr, r.stderr[-3000:]
    assert "not a lost peer: re-forming the workers would repeat it" in r.stderr
    assert "every worker of elastic round 0 failed" in r.stderr, r.stderr[-3000:]
    assert "elastic round 1" not in r.stderr
