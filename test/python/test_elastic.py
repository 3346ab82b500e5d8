"""kolo.elastic and kolo.torch.elastic in one process: State/ObjectState/TorchState commit,
restore and sync, the @run decorator's recovery path (with the driver's side stubbed), and
ElasticSampler's re-sharding. The multi-worker behaviour runs under kolorun in
test/launcher/test_elastic.py."""

import pytest
import torch

import kolo
import kolo.torch as hvd
from kolo.common import KoloInternalError


def test_horovod_elastic_names():
    for name in ("run", "State", "ObjectState", "TorchState", "ElasticSampler",
                 "HostsUpdatedInterrupt"):
        assert hasattr(hvd.elastic, name), name
    for name in ("run", "State", "ObjectState", "HostsUpdatedInterrupt"):
        assert hasattr(kolo.elastic, name), name


@pytest.fixture
def one_rank():
    hvd.init()
    yield
    hvd.shutdown()


def test_object_state_commit_restore_sync(one_rank):
    state = kolo.elastic.ObjectState(epoch=0, history=[1])
    state.epoch = 3
    state.history.append(2)
    state.restore()
    assert (state.epoch, state.history) == (0, [1])
    state.epoch, state.history = 5, [1, 2]
    state.commit()  # outside elastic mode: no host check
    state.history.append(3)
    state.restore()
    assert (state.epoch, state.history) == (5, [1, 2])
    state.epoch = 9
    state.sync()  # rank 0 of one: the committed values
    assert state.epoch == 5


def test_torch_state_model_optimizer_and_attributes(one_rank):
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    state = hvd.elastic.TorchState(model=model, optimizer=opt, epoch=1)
    assert state.model is model and state.optimizer is opt and state.epoch == 1
    before = [p.detach().clone() for p in model.parameters()]
    model(torch.ones(2, 3)).sum().backward()
    opt.step()
    state.epoch = 2
    state.restore()
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert state.epoch == 1 and not opt.state_dict()["state"]
    opt.step()
    state.commit()
    after = [p.detach().clone() for p in model.parameters()]
    state.sync()
    assert all(torch.equal(a, b) for a, b in zip(after, model.parameters()))


def test_run_outside_elastic_mode_restores_then_raises(one_rank):
    state = kolo.elastic.ObjectState(step=0)

    @kolo.elastic.run
    def train(state):
        state.step = 7
        raise KoloInternalError("rank 1 died")

    with pytest.raises(KoloInternalError, match="rank 1 died"):
        train(state)
    assert state.step == 0


def test_run_recovers_from_lost_peer_and_host_updates(monkeypatch, one_rank):
    from kolo.elastic import _worker
    calls = []
    monkeypatch.setattr(_worker, "enabled", lambda: True)
    monkeypatch.setattr(kolo.elastic, "_reset", lambda: calls.append("reset"))
    monkeypatch.setattr(_worker, "newest_round", lambda: -1)  # no newer round at commit
    state = kolo.elastic.ObjectState(step=0)
    state.register_reset_callbacks([lambda: calls.append("callback")])
    attempts = []

    @kolo.elastic.run
    def train(state, until):
        attempts.append(state.step)
        if len(attempts) == 1:
            state.step = 4
            state.commit()
            state.step = 6
            raise KoloInternalError("peer lost")  # back to the commit (4)
        if len(attempts) == 2:
            state.step = 8
            state.commit()
            raise kolo.elastic.HostsUpdatedInterrupt()  # the commit (8) is kept
        return until

    assert train(state, "done") == "done"
    assert attempts == [0, 4, 8]
    assert calls == ["reset", "callback", "reset", "callback"]


def test_run_lets_a_job_error_through(monkeypatch, one_rank):
    from kolo.elastic import _worker
    monkeypatch.setattr(_worker, "enabled", lambda: True)

    def reset():
        raise kolo.elastic.ElasticJobError("elastic job aborted by kolorun: reset limit")

    monkeypatch.setattr(kolo.elastic, "_reset", reset)
    state = kolo.elastic.ObjectState(step=0)

    @kolo.elastic.run
    def train(state):
        raise KoloInternalError("peer lost")

    with pytest.raises(kolo.elastic.ElasticJobError, match="reset limit"):
        train(state)


def _shards(monkeypatch, sampler_state, n, dataset):
    from kolo.torch.elastic import sampler as mod
    out = []
    for r in range(n):
        monkeypatch.setattr(mod, "is_initialized", lambda: True)
        monkeypatch.setattr(mod, "size", lambda: n)
        monkeypatch.setattr(mod, "rank", lambda r=r: r)
        s = hvd.elastic.ElasticSampler(dataset, shuffle=True, seed=3)
        s.load_state_dict(sampler_state)
        out.append(list(s))
    return out


def test_elastic_sampler_resumes_and_reshards(monkeypatch):
    dataset = list(range(50))
    s = hvd.elastic.ElasticSampler(dataset, shuffle=True, seed=3)
    assert sorted(s) == dataset and len(s) == 50  # one rank before init
    s.record_batch(0, 8)
    s.record_batch(1, 8)
    done = set(list(s)[:16])
    assert s.state_dict()["processed_indices"] == done
    for n in (1, 3, 4):
        shards = _shards(monkeypatch, s.state_dict(), n, dataset)
        assert len({len(x) for x in shards}) == 1  # equal lengths (padded)
        seen = set().union(*shards)
        assert seen == set(dataset) - done  # every unprocessed sample, none processed
        assert len(shards[0]) == -(-34 // n)
    monkeypatch.undo()
    s.set_epoch(1)
    assert s.state_dict() == {"epoch": 1, "processed_indices": set()}
    assert sorted(s) == dataset and list(s) != list(range(50))
