# SPDX-License-Identifier: Apache-2.0
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
    monkeypatch.setattr(_worker, "driver_news", lambda: (None, -1))  # no news at commit
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


@pytest.mark.parametrize("skip,only_removed,syncs", [
    (True, True, 1),    # Horovod's skip_sync: no sync after the reset
    (True, False, 2),   # the round joined adds a worker after all: it needs the state
    (False, True, 2),   # hosts were added: sync
])
def test_run_skips_the_sync_after_a_round_that_only_removes_workers(monkeypatch, one_rank, skip,
                                                                   only_removed, syncs):
    from kolo.elastic import _worker
    monkeypatch.setattr(_worker, "enabled", lambda: True)
    monkeypatch.setattr(kolo.elastic, "_reset", lambda: None)
    monkeypatch.setattr(_worker, "only_members_left", lambda: only_removed)
    synced = []

    class Counted(kolo.elastic.ObjectState):
        def sync(self):
            synced.append(self.step)
            super().sync()

    state = Counted(step=0)
    attempts = []

    @kolo.elastic.run
    def train(state):
        attempts.append(state.step)
        if len(attempts) == 1:
            state.step = 3
            state.save()  # commit() without its host check: the interrupt comes next
            raise kolo.elastic.HostsUpdatedInterrupt(skip_sync=skip)
        return state.step

    assert train(state) == 3
    assert len(synced) == syncs


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


@pytest.mark.parametrize("status,message,resets", [
    ("ERR_MISMATCH", "allreduce 'x': rank 0 sent shape [3], rank 1 sent [4]", False),
    ("ERR_INVALID_ARGUMENT", "allreduce 'x': rank 1 could not submit it: bad dtype", False),
    ("ERR_JOINED", "allgather 'x' is not allowed while rank 1 has joined", False),
    ("ERR_PEER_LOST", "allreduce 'x': rank 1 died", True),
    ("ERR_INVALID_ARGUMENT", "rendezvous round 0 was abandoned: kolorun's elastic driver "
                             "formed round 1", True),
])
def test_run_ends_on_an_error_in_the_ops_instead_of_resetting_for_ever(monkeypatch, one_rank,
                                                                      status, message, resets):
    # A mismatch between ranks (or an argument a rank refused) fails the same op the same way
    # after every reset: @run lets it end the worker (after the restore), as any exception of
    # the training code, instead of re-forming the workers without end. A lost peer, and the
    # store's refusal of an abandoned round, still reset.
    from kolo import _lib
    from kolo.elastic import _worker
    monkeypatch.setattr(_worker, "enabled", lambda: True)
    monkeypatch.setattr(_worker, "driver_news", lambda: (None, -1))
    calls = []
    monkeypatch.setattr(kolo.elastic, "_reset", lambda: calls.append("reset"))
    state = kolo.elastic.ObjectState(step=0)
    attempts = []

    @kolo.elastic.run
    def train(state):
        attempts.append(state.step)
        if len(attempts) == 1:
            state.step = 2
            state.commit()
            state.step = 3
            raise KoloInternalError(message, getattr(_lib, status))
        return "done"

    if resets:
        assert train(state) == "done"
        assert attempts == [0, 2] and calls == ["reset"]
    else:
        with pytest.raises(KoloInternalError) as e:
            train(state)
        assert e.value.status == getattr(_lib, status) and str(e.value) == message
        assert attempts == [0] and calls == [] and state.step == 2


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


# ---- TorchState's handlers (horovod.torch.elastic.state) --------------------------------------

def test_torch_state_lr_scheduler_stays_tied_to_its_optimizer(one_rank):
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    state = hvd.elastic.TorchState(model, opt, lr_scheduler=sched, epoch=0)
    assert sorted(state._handlers) == ["lr_scheduler", "model", "optimizer"]
    assert state.lr_scheduler is sched and sched.optimizer is opt
    for _ in range(3):
        opt.step()
        state.lr_scheduler.step()
    assert opt.param_groups[0]["lr"] == 0.125
    state.commit()
    assert state.lr_scheduler is sched and state.optimizer is opt
    opt.step()
    sched.step()
    assert opt.param_groups[0]["lr"] == 0.0625 and sched.last_epoch == 4
    state.restore()  # the scheduler and the optimizer's lr back to the commit, still tied
    assert sched.last_epoch == 3 and opt.param_groups[0]["lr"] == 0.125
    assert state.lr_scheduler is sched and sched.optimizer is opt
    state.sync()
    assert sched.last_epoch == 3 and sched.optimizer is opt
    opt.step()
    sched.step()
    assert opt.param_groups[0]["lr"] == 0.0625


def test_torch_state_commit_copies_no_torch_object(monkeypatch, one_rank):
    # ObjectState deep-copies plain values only: the model, optimizer, scheduler and sampler
    # are never copied whole (only their state_dicts are).
    import copy
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(opt)
    sampler = hvd.elastic.ElasticSampler(list(range(10)))
    state = hvd.elastic.TorchState(model=model, optimizer=opt, plateau=plateau, sampler=sampler,
                                   epoch=0)
    assert sorted(state._handlers) == ["model", "optimizer", "plateau", "sampler"]
    copied = []
    real = copy.deepcopy

    def deepcopy(obj, memo=None):
        copied.append(type(obj))
        return real(obj, memo)

    monkeypatch.setattr(copy, "deepcopy", deepcopy)
    state.commit()
    state.restore()
    bad = (torch.nn.Module, torch.optim.Optimizer, torch.optim.lr_scheduler.ReduceLROnPlateau,
           hvd.elastic.ElasticSampler)
    assert copied and not [t for t in copied if issubclass(t, bad)], copied
    assert state.optimizer is opt and state.plateau is plateau and state.sampler is sampler


def test_torch_state_a_commit_that_fails_part_way_keeps_the_last_commit_whole(one_rank):
    # A peer lost inside the second sampler's collective, after the first sampler and the
    # others saved: the restore must give back the last commit, not a mix of the two (the
    # first sampler's new processed indices with the old model and counters skip samples).
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    first = hvd.elastic.ElasticSampler(list(range(20)), shuffle=False)
    second = hvd.elastic.ElasticSampler(list(range(20)), shuffle=False)
    state = hvd.elastic.TorchState(model, opt, first=first, second=second, batch=0)
    weight = model.weight.detach().clone()
    with torch.no_grad():
        model.weight.add_(1.0)
    first.record_indices(range(4))
    second.record_indices(range(4))
    state.batch = 1

    def lost(self):
        raise KoloInternalError("allgather 'kolo.elastic.second.processed': rank 1 died")

    second_handler = state._handlers["second"]
    second_handler.save = lost.__get__(second_handler)
    with pytest.raises(KoloInternalError, match="rank 1 died"):
        state.commit()
    state.restore()
    assert torch.equal(model.weight, weight) and state.batch == 0
    assert first.processed_indices == set() and second.processed_indices == set()
    assert list(first) == list(range(20))
    del second_handler.save  # the next commit saves everything
    first.record_indices(range(4))
    state.batch = 1
    state.commit()
    state.batch = 5
    state.restore()
    assert state.batch == 1 and first.processed_indices == set(range(4))


def test_torch_state_assigning_an_attribute_saves_the_new_object(one_rank):
    m1, m2 = torch.nn.Linear(2, 1), torch.nn.Linear(2, 1)
    state = hvd.elastic.TorchState(model=m1, epoch=0, extra=None)
    state.model = m2  # Horovod's set_value: m2 is tracked and saved at once
    assert state.model is m2 and state._handlers["model"].value is m2
    committed = [p.detach().clone() for p in m2.parameters()]
    with torch.no_grad():
        for p in m2.parameters():
            p.add_(1.0)
    state.restore()
    assert all(torch.equal(a, b) for a, b in zip(committed, m2.parameters()))
    state.commit()
    with torch.no_grad():
        for p in m2.parameters():
            p.mul_(3.0)
    state.restore()
    assert all(torch.equal(a, b) for a, b in zip(committed, m2.parameters()))
    # a plain attribute that now holds a module gets the module's handler
    m3 = torch.nn.Linear(2, 1)
    state.extra = m3
    assert state._handlers["extra"].value is m3 and "extra" not in state._saved_state
    state.commit()
    state.restore()
    assert state.extra is m3


class FakeWorld:
    """n simulated ranks, one thread each, for the handlers' collectives: allgather_object
    and broadcast_object exchange pickled copies, as the real ones do."""

    def __init__(self, monkeypatch, n):
        import pickle
        import threading
        from kolo.torch.elastic import sampler as sampler_mod
        from kolo.torch.elastic import state as state_mod
        self.n, self.pickle = n, pickle
        self.barrier = threading.Barrier(n)
        self.slots = [None] * n
        self.local = threading.local()
        self.sent = []  # (name, bytes each rank sent)
        monkeypatch.setattr(state_mod.functions, "allgather_object", self.allgather_object)
        monkeypatch.setattr(state_mod.functions, "broadcast_object", self.broadcast_object)
        monkeypatch.setattr(state_mod.basics, "is_initialized", lambda: True)
        monkeypatch.setattr(state_mod.basics, "rank", lambda: getattr(self.local, "rank", 0))
        monkeypatch.setattr(sampler_mod, "is_initialized", lambda: True)
        monkeypatch.setattr(sampler_mod, "rank", lambda: getattr(self.local, "rank", 0))
        monkeypatch.setattr(sampler_mod, "size", lambda: self.n)

    def allgather_object(self, obj, name=None, process_set=None):
        data = self.pickle.dumps(obj)
        self.slots[self.local.rank] = data
        self.barrier.wait()
        out = [self.pickle.loads(d) for d in self.slots]
        if self.local.rank == 0:
            self.sent.append((name, [len(d) for d in self.slots]))
        self.barrier.wait()
        return out

    def broadcast_object(self, obj, root_rank=0, name=None, process_set=None):
        return self.allgather_object(obj, name)[root_rank]

    def run(self, fn):
        """fn(rank) on every simulated rank at once; their results in rank order."""
        import threading
        out, errors = [None] * self.n, []

        def body(r):
            self.local.rank = r
            try:
                out[r] = fn(r)
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)
                self.barrier.abort()

        threads = [threading.Thread(target=body, args=(r,)) for r in range(self.n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not errors, errors
        return out


def test_sampler_commit_saves_every_ranks_processed_indices(monkeypatch):
    # Horovod's SamplerStateHandler.save: the committed state holds every rank's processed
    # indices, so a lost rank's committed samples are not trained again by the survivors.
    from kolo.torch.elastic.state import SamplerStateHandler
    world = FakeWorld(monkeypatch, 3)
    dataset = list(range(60))
    handlers = world.run(lambda r: SamplerStateHandler(
        hvd.elastic.ElasticSampler(dataset, shuffle=True, seed=5)))

    def steps(r, batches):
        s = handlers[r].value
        for b in batches:
            s.record_batch(b, 4)
        handlers[r].save()
        return set(s.processed_indices)

    mine = world.run(lambda r: steps(r, [0, 1]))
    union = set().union(*mine)
    assert len(union) == 24
    for h in handlers:
        assert h._saved_sampler_state["processed_indices"] == union
    # rank 2 is lost after two more batches; rank 0 restores the commit: none of the 24
    # committed samples (rank 2's 8 included) is handed out again
    world.run(lambda r: handlers[r].value.record_batch(2, 4))
    monkeypatch.setattr("kolo.torch.elastic.sampler.size", lambda: 1)
    monkeypatch.setattr("kolo.torch.elastic.sampler.rank", lambda: 0)
    handlers[0].restore()
    assert handlers[0].value.processed_indices == union
    assert set(handlers[0].value) == set(dataset) - union


def test_sampler_commit_sends_only_new_indices_and_falls_back_to_whole_sets(monkeypatch):
    from kolo.torch.elastic.state import SamplerStateHandler
    world = FakeWorld(monkeypatch, 2)
    dataset = list(range(4000))
    handlers = world.run(lambda r: SamplerStateHandler(
        hvd.elastic.ElasticSampler(dataset, shuffle=True, seed=1)))

    def record(r, first, last):  # rank r processes the even (r=0) or odd indices in [first, last)
        handlers[r].value.record_indices(range(first + r, last, 2))
        handlers[r].save()

    world.run(lambda r: record(r, 0, 3000))  # whole sets: no saved union yet
    first = world.sent[-1][1]
    world.run(lambda r: record(r, 3000, 3040))  # 40 more: only those travel
    second = world.sent[-1][1]
    assert max(second) * 20 < min(first), (first, second)
    for h in handlers:
        assert h._saved_sampler_state["processed_indices"] == set(range(3040))
        assert h.value.processed_indices == set(range(3040))
    # a rank whose saved union differs (a new worker after a reset, holding the state that
    # sync gave it): whole sets, the same union everywhere, then deltas again
    fresh = SamplerStateHandler(hvd.elastic.ElasticSampler(dataset, shuffle=True, seed=1))
    fresh.value.load_state_dict(handlers[0].value.state_dict())
    handlers[1] = fresh
    world.run(lambda r: record(r, 3040, 3060))
    assert max(world.sent[-1][1]) > min(first)  # the second gather, of whole sets
    for h in handlers:
        assert h._saved_sampler_state["processed_indices"] == set(range(3060))
    assert handlers[0]._generation == handlers[1]._generation
    world.run(lambda r: record(r, 3060, 3070))
    assert max(world.sent[-1][1]) * 20 < min(first)
    for h in handlers:
        assert h._saved_sampler_state["processed_indices"] == set(range(3070))
    # after set_epoch a set no longer holds the saved union: whole (small) sets
    world.run(lambda r: handlers[r].value.set_epoch(1))
    world.run(lambda r: record(r, 100, 120))
    for h in handlers:
        assert h._saved_sampler_state["processed_indices"] == set(range(100, 120))
        assert h._saved_sampler_state["epoch"] == 1


def test_sampler_sync_gives_rank0s_epoch_with_every_ranks_indices(monkeypatch):
    # After HostsUpdatedInterrupt there is no restore: sync must still hand out none of the
    # samples any rank of rank 0's epoch processed; a new worker's fresh sampler adds nothing.
    from kolo.torch.elastic.state import SamplerStateHandler
    world = FakeWorld(monkeypatch, 3)
    dataset = list(range(90))
    handlers = world.run(lambda r: SamplerStateHandler(
        hvd.elastic.ElasticSampler(dataset, shuffle=False)))

    def train(r):
        s = handlers[r].value
        if r < 2:  # the old workers, at epoch 2
            s.set_epoch(2)
            s.record_batch(0, 5)
            s.record_batch(1, 5)
        return set(s.processed_indices)

    done = world.run(train)
    world.run(lambda r: handlers[r].sync())
    for h in handlers:
        assert h.value.epoch == 2 and h.value.processed_indices == done[0] | done[1]
    shards = [set(h.value) for h in handlers]
    assert set().union(*shards) == set(dataset) - done[0] - done[1]


def test_sampler_sync_after_a_commit_lets_new_workers_send_only_new_indices(monkeypatch):
    # A reset right after a commit (HostsUpdatedInterrupt) with a new worker: sync sends the
    # state once, every rank then holds rank 0's commit, and the next commit is deltas only.
    # With samples processed since the commit (check_host_updates without one), the ranks
    # keep their own commit (a restore must not skip samples the model never saw).
    from kolo.torch.elastic.state import SamplerStateHandler
    world2 = FakeWorld(monkeypatch, 2)
    dataset = list(range(3000))
    handlers = world2.run(lambda r: SamplerStateHandler(
        hvd.elastic.ElasticSampler(dataset, shuffle=False)))
    world2.run(lambda r: (handlers[r].value.record_indices(range(r, 2000, 2)),
                          handlers[r].save()))
    world3 = FakeWorld(monkeypatch, 3)
    handlers.append(SamplerStateHandler(hvd.elastic.ElasticSampler(dataset, shuffle=False)))
    world3.run(lambda r: handlers[r].sync())
    first = world3.sent[0][1]  # the sync's gather: deltas (empty) and the new worker's set
    assert max(first) < 200, world3.sent
    assert [name for name, _ in world3.sent] == ["kolo.elastic.SamplerStateHandler.processed",
                                                 "kolo.elastic.SamplerStateHandler.sync"]
    for h in handlers:
        assert h.value.processed_indices == set(range(2000))
        assert h._generation == handlers[0]._generation
    world3.run(lambda r: (handlers[r].value.record_indices(range(2000 + r, 2030, 3)),
                          handlers[r].save()))
    assert max(world3.sent[-1][1]) < 400, world3.sent[-1]  # deltas only, no second gather
    assert world3.sent[-1][0] == "kolo.elastic.SamplerStateHandler.processed"
    for h in handlers:
        assert h._saved_sampler_state["processed_indices"] == set(range(2030))
    # progress since the commit, then a sync: every rank gets it, nobody's commit changes
    world3.run(lambda r: handlers[r].value.record_indices(range(2030 + r, 2060, 3)))
    generations = [h._generation for h in handlers]
    world3.run(lambda r: handlers[r].sync())
    for h in handlers:
        assert h.value.processed_indices == set(range(2060))
        assert h._saved_sampler_state["processed_indices"] == set(range(2030))
    assert [h._generation for h in handlers] == generations


def _news_of_a_new_round(monkeypatch, only_removes=False):
    """The driver, as a worker sees it: round 1 published while this worker runs in round 0."""
    from kolo.elastic import _worker
    monkeypatch.setattr(_worker, "enabled", lambda: True)
    monkeypatch.setattr(_worker, "current_round", lambda: 0)
    monkeypatch.setattr(_worker, "driver_news", lambda: (None, 1))
    monkeypatch.setattr(_worker, "round_only_removes", lambda n: only_removes)


def test_host_update_without_a_commit_shares_every_ranks_samples(monkeypatch):
    # check_host_updates() raising HostsUpdatedInterrupt (no commit, no rollback) while the
    # removed workers are still there: the state is saved first, so every sampler learns what
    # every rank processed since the commit, and the survivors do not hand out the removed
    # worker's samples again.
    import kolo.elastic.state as base
    world = FakeWorld(monkeypatch, 3)
    _news_of_a_new_round(monkeypatch)
    monkeypatch.setattr(base.numpy_ops, "allreduce", lambda a, op, name: a)  # same everywhere
    dataset = list(range(300))

    def body(r):
        s = hvd.elastic.ElasticSampler(dataset, shuffle=False)
        state = hvd.elastic.TorchState(sampler=s, epoch=0)
        s.record_indices(range(r, 30, 3))
        state.save()  # a commit
        s.record_indices(range(30 + r, 60, 3))
        with pytest.raises(kolo.elastic.HostsUpdatedInterrupt):
            state.check_host_updates()
        return state

    states = world.run(body)
    for st in states:
        assert st.sampler.processed_indices == set(range(60))
        assert st._handlers["sampler"]._saved_sampler_state["processed_indices"] == \
            set(range(60))


@pytest.mark.parametrize("only_removes", [False, True])
def test_host_update_without_a_commit_keeps_counters_and_model_of_one_moment(monkeypatch,
                                                                            one_rank,
                                                                            only_removes):
    # The reset after check_host_updates' interrupt sends rank 0's saved plain values with its
    # current model: the step counter went back to the last commit (20) while the model kept
    # the 12 steps trained since (Horovod's sync does the same). The interrupt saves first.
    _news_of_a_new_round(monkeypatch, only_removes)
    model = torch.nn.Linear(2, 1)
    model.register_buffer("nsteps", torch.zeros(1))
    state = hvd.elastic.TorchState(model, None, step=0)
    model.nsteps += 20
    state.step = 20
    state.save()  # the commit at step 20
    model.nsteps += 12
    state.step = 32
    with pytest.raises(kolo.elastic.HostsUpdatedInterrupt) as e:
        state.check_host_updates()
    assert e.value.skip_sync == only_removes
    state.sync()
    assert (state.step, int(model.nsteps)) == (32, 32)
    state.restore()  # a peer lost before the next commit: back to the interrupt, whole
    assert (state.step, int(model.nsteps)) == (32, 32)


def test_a_commit_saves_once_when_it_raises_the_interrupt(monkeypatch, one_rank):
    _news_of_a_new_round(monkeypatch)
    saves = []

    class Counted(kolo.elastic.ObjectState):
        def save(self):
            saves.append(self.step)
            super().save()

    state = Counted(step=3)
    with pytest.raises(kolo.elastic.HostsUpdatedInterrupt):
        state.commit()
    assert saves == [3]
    with pytest.raises(kolo.elastic.HostsUpdatedInterrupt):
        state.check_host_updates()
    assert saves == [3, 3]
