# SPDX-License-Identifier: Apache-2.0
"""kolo.run and KoloRunner: a function on N local ranks, results in rank order, errors
surfaced. Runs in ONE process (not under a launcher): kolo.run starts the ranks itself, or has
kolorun start them (hosts="localhost:N" with np=None; the several-host path over ssh is
test/launcher/test_run_hosts.py)."""

import pytest

pytest.importorskip("cloudpickle", reason="kolo.run needs cloudpickle")


def _work(scale, offset=0):
    import numpy as np

    import kolo
    kolo.init()
    total = kolo.allreduce(np.array([kolo.rank() + 1.0]), op=kolo.Sum)
    return {"rank": kolo.rank(), "size": kolo.size(), "value": float(total[0]) * scale + offset}


def _torch_work():
    import torch

    import kolo.torch as hvd
    hvd.init()
    t = hvd.allreduce(torch.tensor([float(hvd.rank())]), op=hvd.Sum)
    return t.item()


def _fails():
    import kolo
    kolo.init()
    if kolo.rank() == 1:
        raise KeyError("rank one is unhappy")
    return kolo.rank()


def test_run_returns_results_in_rank_order():
    import kolo
    results = kolo.run(_work, args=(2.0,), kwargs={"offset": 1}, np=3)
    assert results == [{"rank": r, "size": 3, "value": 6.0 * 2.0 + 1} for r in range(3)]


def test_run_closure_and_torch():
    torch = pytest.importorskip("torch")
    import kolo
    factor = torch.tensor(2.0)
    assert kolo.run(lambda: _torch_work() * float(factor), np=2) == [2.0, 2.0]


def test_run_reports_the_failing_rank():
    import kolo
    with pytest.raises(RuntimeError, match="rank one is unhappy"):
        kolo.run(_fails, np=2, env={"KOLO_TIMEOUT_SECONDS": "5"})


def test_run_arguments():
    import kolo
    with pytest.raises(ValueError):
        kolo.run(_work, np=0)
    with pytest.raises(ValueError):
        kolo.run("not callable", np=1)
    with pytest.raises(ValueError, match="not both"):
        kolo.run(_work, np=2, hosts="a:1,b:1", hostfile="/nonexistent")
    with pytest.raises(ValueError, match="needs hosts"):
        kolo.run(_work, np=None)
    with pytest.raises(ValueError, match="MPI"):
        kolo.run(_work, np=2, use_mpi=True)


def _rank_and_size():
    import os
    return int(os.environ["KOLO_RANK"]), int(os.environ["KOLO_SIZE"])


def test_host_without_a_count_has_one_slot():
    """As for horovod.run and kolorun -H: "localhost" is 1 slot, so np=2 asks for more ranks
    than the hosts have (ValueError, nothing started), and np=1 runs one rank."""
    import kolo
    from kolo.runner import _is_local
    assert not _is_local("localhost", 2) and _is_local("localhost", 1)
    with pytest.raises(ValueError, match=r"more processes \(2\) than there are available slots "
                                         r"\(1\)"):
        kolo.run(_rank_and_size, np=2, hosts="localhost")
    with pytest.raises(ValueError, match=r"more processes \(3\).*slots \(2\)"):
        kolo.run(_rank_and_size, np=3, hosts="localhost,127.0.0.1")
    assert kolo.run(_rank_and_size, np=1, hosts="localhost") == [(0, 1)]


def _lose_a_peer(folder):
    import os
    import time

    import numpy as np

    import kolo
    kolo.init()
    kolo.barrier()
    if kolo.rank() == 1:
        os._exit(3)  # dies without a word
    start = time.monotonic()
    try:
        kolo.allreduce(np.ones(4), name="after_the_loss")
        outcome = "no error"
    except kolo.KoloInternalError as e:
        outcome = "%s|%s" % (e.status_name, e)
    with open(os.path.join(folder, "rank0.txt"), "w") as f:
        f.write("%.1f|%s" % (time.monotonic() - start, outcome))
    return outcome


def test_lost_peer_fails_pending_ops(tmp_path):
    import kolo
    with pytest.raises(RuntimeError, match="rank 1 exited with code 3"):
        kolo.run(_lose_a_peer, args=(str(tmp_path),), np=2, env={"KOLO_TIMEOUT_SECONDS": "3"})
    seconds, status, message = (tmp_path / "rank0.txt").read_text().split("|", 2)
    assert status in ("PEER_LOST", "ABORTED", "TIMEOUT", "SHUTDOWN"), message
    assert "allreduce 'allreduce.after_the_loss'" in message, message  # which op it was
    assert float(seconds) < 60


def _peer_shuts_down():
    import numpy as np

    import kolo
    kolo.init()
    if kolo.rank() == 1:
        kolo.broadcast(np.zeros(1), 0, name="go")
        kolo.shutdown()
        return "left"
    h = kolo.allreduce_async(np.ones(2), name="pending")  # pending before rank 1 hears "go"
    kolo.broadcast(np.zeros(1), 0, name="go")
    try:
        kolo.synchronize(h)
        return "no error"
    except kolo.KoloInternalError as e:
        first = "%s|%s" % (e.status_name, e)
    try:  # refused at submission now: the runtime's own message names the op too
        kolo.allreduce(np.ones(2), name="later")
        return first + "|no error"
    except kolo.KoloInternalError as e:
        return first + "|" + str(e)


def test_a_peers_shutdown_fails_pending_ops_naming_them():
    import kolo
    status, message, later = kolo.run(_peer_shuts_down, np=2)[0].split("|", 2)
    assert status == "SHUTDOWN", message
    assert message.startswith("allreduce 'allreduce.pending': "), message
    assert "shut down (by rank 1)" in message, message
    assert "allreduce 'allreduce.later' on rank 0: " in later, later


def _main(scale, fail_rank=None):
    import numpy as np

    import kolo
    kolo.init()
    if kolo.rank() == fail_rank:
        raise ValueError("main failed on purpose")
    total = kolo.allreduce(np.array([kolo.rank() + 1.0]), op=kolo.Sum)
    return (kolo.rank(), kolo.size(), float(total[0]) * scale)


def test_kolo_runner_local_modes_return_rank0():
    from kolo.runner import KoloRunner
    assert KoloRunner(np=-2).run(_main, scale=2.0) == (0, 2, 6.0)


def test_kolo_runner_local_failure_names_the_rank():
    from kolo.runner import KoloRunner
    with pytest.raises(RuntimeError, match=r"rank 2 \(host [^)]+\) failed(.|\n)*main failed "
                                           r"on purpose"):
        KoloRunner(np=-3, env={"KOLO_TIMEOUT_SECONDS": "5"}).run(_main, scale=1.0, fail_rank=2)


def test_kolo_runner_arguments(monkeypatch):
    from kolo.runner import KoloRunner
    monkeypatch.delenv("KOLO_RUNNER_HOSTS", raising=False)
    with pytest.raises(ValueError, match="KOLO_RUNNER_HOSTS"):
        KoloRunner(np=2)
    with pytest.raises(ValueError, match="KOLO_RUNNER_HOSTS"):
        KoloRunner(np=0)
    with pytest.raises(ValueError, match="np must be an int"):
        KoloRunner(np="2")
    with pytest.raises(ValueError, match="driver_log_verbosity"):
        KoloRunner(np=-2, driver_log_verbosity="some")
    with pytest.raises(ValueError, match="hosts need np > 0"):
        KoloRunner(np=-2, hosts="a:2")
    with pytest.raises(TypeError):
        KoloRunner(2)  # keyword-only, as HorovodRunner
    assert KoloRunner(np=-3, driver_log_verbosity="all").driver_log_verbosity == "all"
    monkeypatch.setenv("KOLO_RUNNER_HOSTS", "a:2,b:2")
    assert KoloRunner(np=4).hosts == "a:2,b:2"


def test_kolo_runner_np0_takes_every_slot_through_kolorun(monkeypatch):
    """np=0 and KOLO_RUNNER_HOSTS=localhost:3: kolorun starts the 3 ranks (no ssh: the host is
    this machine), the function and results go through kolo.run's TCP server."""
    from kolo.runner import KoloRunner
    monkeypatch.setenv("KOLO_RUNNER_HOSTS", "localhost:3")
    assert KoloRunner(np=0).run(_main, scale=1.0) == (0, 3, 6.0)


def test_run_through_kolorun_results_and_failure():
    import kolo
    assert kolo.run(_main, args=(2.0,), np=None, hosts="localhost:2") == [(0, 2, 6.0),
                                                                          (1, 2, 6.0)]
    with pytest.raises(RuntimeError, match=r"rank 1 \(host localhost\) failed(.|\n)*main "
                                           r"failed on purpose"):
        kolo.run(_main, args=(1.0, 1), np=None, hosts="localhost:2",
                 env={"KOLO_TIMEOUT_SECONDS": "5"})


def test_job_server_rejects_messages_without_the_key():
    """kolo.run(hosts=...)'s server hands out the function and takes results only from
    requests that carry the job key's HMAC: nothing is served or unpickled otherwise."""
    from kolo import _run_hosts
    server = _run_hosts._JobServer(b"the pickled function", b"k" * 32)
    try:
        with pytest.raises(ConnectionError):
            _run_hosts._request("127.0.0.1", server.port, b"x" * 32, b"F", 0)
        with pytest.raises(ConnectionError):
            _run_hosts._request("127.0.0.1", server.port, b"x" * 32, b"R", 1, b"not a pickle")
        assert server.rejected == 2 and server.results == {}
        assert _run_hosts._request("127.0.0.1", server.port, b"k" * 32, b"F", 0) == \
            b"the pickled function"
        _run_hosts._request("127.0.0.1", server.port, b"k" * 32, b"R", 1, b"result")
        assert server.results == {1: (0, b"result")}
    finally:
        server.close()


def _sleep(seconds):
    import time
    time.sleep(seconds)


def _processes_with(marker):
    import glob
    found = []
    for path in glob.glob("/proc/[0-9]*/environ"):
        try:
            with open(path, "rb") as f:
                if marker in f.read().split(b"\0"):
                    found.append(path.split("/")[2])
        except OSError:
            pass
    return found


def test_run_through_kolorun_timeout_stops_the_job():
    import os
    import time

    import kolo
    mark = "KOLO_TEST_MARK=%d.%d" % (os.getpid(), time.monotonic_ns())
    start = time.monotonic()
    with pytest.raises(TimeoutError, match="did not finish within 2 s"):
        kolo.run(_sleep, args=(120,), np=None, hosts="localhost:2", timeout=2,
                 env={"KOLO_TEST_MARK": mark.split("=", 1)[1]})
    assert time.monotonic() - start < 40
    assert _processes_with(mark.encode()) == []  # kolorun and both ranks are gone


def test_run_with_output_filename_goes_through_kolorun(tmp_path):
    """A local job given one of kolorun's options (output_filename here) runs under kolorun,
    which writes each rank's output to DIR/rank.N/stdout (horovod.run's output_filename)."""
    import kolo
    out = tmp_path / "out"
    assert kolo.run(_say, args=("hello",), np=2, output_filename=str(out)) == [0, 1]
    for r in (0, 1):
        assert "hello from %d" % r in (out / ("rank.%d" % r) / "stdout").read_text()


def _say(word):
    import kolo
    kolo.init()
    print("%s from %d" % (word, kolo.rank()), flush=True)
    return kolo.rank()


def test_horovod_run_argument_names():
    """horovod.run's names: num_proc (np is its older name), min/max_num_proc (min_np,
    max_np), reset_limit, cooldown_range; elastic arguments are never accepted and ignored."""
    import kolo
    assert kolo.run(_rank_and_size, num_proc=2) == [(0, 2), (1, 2)]
    assert kolo.run(_rank_and_size, (), None, 2) == [(0, 2), (1, 2)]  # horovod.run's order
    assert kolo.run(_rank_and_size, num_proc=1, np=1) == [(0, 1)]
    with pytest.raises(ValueError, match="num_proc=2 and np=3 disagree"):
        kolo.run(_rank_and_size, num_proc=2, np=3)
    with pytest.raises(ValueError, match="min_num_proc=1 and min_np=2 disagree"):
        kolo.run(_rank_and_size, np=2, min_num_proc=1, min_np=2)
    for extra in ({"reset_limit": 3}, {"cooldown_range": (1, 5)}):
        with pytest.raises(ValueError, match="elastic argument"):
            kolo.run(_rank_and_size, num_proc=2, **extra)
    with pytest.raises(ValueError, match="max_num_proc 1 is less than min_num_proc 2"):
        kolo.run(_rank_and_size, num_proc=2, min_num_proc=2, max_num_proc=1)
    # horovod.run's bounds: 1 <= min <= max <= 3600
    for bad in ((5, 1), (0.5, 2), (1, 3601)):
        with pytest.raises(ValueError, match="cooldown_range"):
            kolo.run(_rank_and_size, num_proc=2, min_num_proc=1, cooldown_range=bad)


def test_elastic_arguments_reach_kolorun():
    from kolo import _run_hosts
    from kolo.runner import _elastic_options
    elastic = _elastic_options(2, 1, 3, 0, (1, 5), None)
    cmd = _run_hosts.kolorun_command("kolorun", "py", 2, "a:2,b:2", None, [],
                                     {"elastic": elastic})
    assert " ".join(cmd[1:cmd.index("--")]) == (
        "kolorun -np 2 -H a:2,b:2 --min-np 1 --max-np 3 --reset-limit 0 "
        "--blacklist-cooldown-range 1.0 5.0")
    elastic = _elastic_options(None, 2, None, None, None, "/bin/discover")
    elastic["slots_per_host"] = 4
    cmd = _run_hosts.kolorun_command("kolorun", "py", None, None, None, [], {"elastic": elastic})
    assert " ".join(cmd[1:cmd.index("--")]) == (
        "kolorun --min-np 2 --host-discovery-script /bin/discover --slots-per-host 4")


def _elastic_train(marker, until_round=0):
    """With a marker, rank 1 of the first round dies at step 2 (once: the marker file); the
    others restore the last commit and go on in a new round. With until_round, trains until
    that round."""
    import os
    import time

    import numpy as np

    import kolo
    import kolo.elastic
    kolo.init()
    state = kolo.elastic.ObjectState(step=0)

    @kolo.elastic.run
    def loop(state):
        while state.step < 4 or (kolo.elastic.current_round() < until_round
                                 and state.step < 1200):
            if marker and kolo.rank() == 1 and state.step == 2:
                try:
                    os.close(os.open(marker, os.O_CREAT | os.O_EXCL))
                    os._exit(3)
                except FileExistsError:
                    pass
            kolo.allreduce(np.ones(1), name="step%d" % state.step)
            state.step += 1
            state.commit()
            if until_round:
                time.sleep(0.025)

    loop(state)
    return (kolo.rank(), kolo.size(), kolo.elastic.current_round(), state.step)


def test_elastic_run_returns_the_final_workers_results(tmp_path):
    """num_proc=2, min_num_proc=1: kolorun's elastic mode. The worker on 127.0.0.1 dies; its
    host is blacklisted (no cooldown_range), the other goes on alone in round 1: the result is
    that worker's, as rank 0 of 1 (horovod.run returns the final workers' results)."""
    import kolo
    results = kolo.run(_elastic_train, args=(str(tmp_path / "died"),), num_proc=2,
                       min_num_proc=1, hosts="localhost:1,127.0.0.1:1", start_timeout=60)
    assert results == [(0, 1, 1, 4)]
    # the older names, on this machine (horovod.run's default hosts "localhost:np"), no loss
    assert kolo.run(_elastic_train, args=(None,), np=2, min_np=1, max_np=2) == [
        (0, 2, 0, 4), (1, 2, 0, 4)]


def test_elastic_reset_limit_and_cooldown_range_are_used(tmp_path):
    import kolo
    with pytest.raises(RuntimeError, match="past --reset-limit 0"):
        kolo.run(_elastic_train, args=(str(tmp_path / "died"),), num_proc=2, min_num_proc=1,
                 max_num_proc=2, reset_limit=0)
    # cooldown_range: the failed host is usable again after 2 s (horovod.run's cool-down,
    # MIN*2^k + U(0, MIN) within [MIN, MAX], 1 <= MIN): a worker rejoins there
    results = kolo.run(_elastic_train, args=(str(tmp_path / "died2"), 2), num_proc=2,
                       min_num_proc=1, max_num_proc=2, reset_limit=3, cooldown_range=(1, 2),
                       hosts="localhost:1,127.0.0.1:1")
    assert [r[:3] for r in results] == [(0, 2, 2), (1, 2, 2)], results
