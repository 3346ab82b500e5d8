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


def _shards(monkeypatch, sampler_state, n, dataset, seed=3):
    from kolo.torch.elastic import sampler as mod
    out = []
    for r in range(n):
        monkeypatch.setattr(mod, "is_initialized", lambda: True)
        monkeypatch.setattr(mod, "size", lambda: n)
        monkeypatch.setattr(mod, "rank", lambda r=r: r)
        s = hvd.elastic.ElasticSampler(dataset, shuffle=True, seed=seed)
        s.load_state_dict(sampler_state)
        out.append(list(s))
    monkeypatch.undo()
    return out


def _horovod_shard(n, seed, epoch, processed_num, size, rank, shuffle=True):
    """Horovod 0.28's ElasticSampler (reset, then __iter__), written out as a reference: the
    order is list(range(n)) shuffled in place by random.Random(seed + epoch), the first
    processed_num of it are done, the rest is padded to a multiple of size and rank r takes
    every size-th index from r. (Horovod shuffles with Python's random module, not torch's.)"""
    import math
    import random
    order = list(range(n))
    if shuffle:
        random.Random(seed + epoch).shuffle(order)
    remaining = order[processed_num:]
    num_samples = int(math.ceil(len(remaining) * 1.0 / size))
    total = num_samples * size
    indices = remaining[:]
    indices += indices[:(total - len(indices))]
    return indices[rank:total:size]


@pytest.mark.parametrize("n,seed,epoch,processed", [(50, 3, 0, 0), (50, 3, 1, 16),
                                                    (97, 11, 4, 40), (10, 0, 2, 8)])
def test_elastic_sampler_order_is_horovods(monkeypatch, n, seed, epoch, processed):
    dataset = list(range(n))
    state = {"epoch": epoch, "processed_num": processed}
    for size in (1, 2, 3, 4):
        shards = _shards(monkeypatch, state, size, dataset, seed=seed)
        assert shards == [_horovod_shard(n, seed, epoch, processed, size, r)
                          for r in range(size)], (size, shards)
    s = hvd.elastic.ElasticSampler(dataset, shuffle=False)
    s.load_state_dict(state)
    assert list(s) == _horovod_shard(n, 0, epoch, processed, 1, 0, shuffle=False)


def test_elastic_sampler_horovod_api_and_state_dict_round_trip(monkeypatch):
    import inspect
    cls = hvd.elastic.ElasticSampler
    assert list(inspect.signature(cls).parameters) == ["dataset", "shuffle", "seed"]
    assert inspect.signature(cls).parameters["shuffle"].default is True
    assert inspect.signature(cls).parameters["seed"].default == 0
    for name in ("set_epoch", "record_batch", "load_state_dict", "state_dict", "reset",
                 "__iter__", "__len__"):
        assert callable(getattr(cls, name)), name
    dataset = list(range(40))
    s = cls(dataset, shuffle=True, seed=7)
    assert s.state_dict() == {"epoch": 0, "processed_num": 0}
    assert s.processed_indices == set()  # kept by Horovod 0.28, unused
    s.record_batch(0, 4)
    s.record_batch(1, 4)
    saved = s.state_dict()
    assert saved == {"epoch": 0, "processed_num": 8}
    # Horovod's format loads: the same keys, the same shards as Horovod's reference
    t = cls(dataset, shuffle=True, seed=7)
    t.load_state_dict({"epoch": 2, "processed_num": 12})
    assert t.state_dict() == {"epoch": 2, "processed_num": 12}
    assert list(t) == _horovod_shard(40, 7, 2, 12, 1, 0) and len(t) == 28
    # and the reverse: kolo's state_dict is what Horovod's load_state_dict reads
    for size in (2, 3):
        kolo_shards = _shards(monkeypatch, saved, size, dataset, seed=7)
        assert kolo_shards == [_horovod_shard(40, 7, saved["epoch"], saved["processed_num"],
                                              size, r) for r in range(size)]
    # a Horovod 0.22 state loads at the start of an epoch only
    t.load_state_dict({"epoch": 3, "processed_indices": set()})
    assert t.state_dict() == {"epoch": 3, "processed_num": 0}
    with pytest.raises(ValueError, match="processed_num"):
        t.load_state_dict({"epoch": 3, "processed_indices": {1, 2}})
    s.set_epoch(1)
    assert s.state_dict() == {"epoch": 1, "processed_num": 0}
    assert sorted(s) == dataset and list(s) != dataset


def _train_batches(shards, batches, bs):
    """The samples `batches` full batches of every rank take from its shard."""
    return [i for shard in shards for i in shard[:batches * bs]]


def test_elastic_sampler_resumes_with_exactly_the_unprocessed_samples_across_reshards(
        monkeypatch):
    # 3 ranks train 3 batches of 4, a commit; 2 ranks resume and train 2 more, a commit;
    # 4 ranks finish the epoch. Every sample once, none skipped; only the last round pads.
    n, bs = 86, 4
    dataset = list(range(n))
    trained = []
    state = {"epoch": 5, "processed_num": 0}
    for size, batches in ((3, 3), (2, 2), (4, None)):
        shards = _shards(monkeypatch, state, size, dataset)
        # exactly the unprocessed samples
        assert set().union(*shards) == set(dataset) - set(trained)
        if batches is None:
            batches = -(-len(shards[0]) // bs)
        trained += _train_batches(shards, batches, bs)
        s = hvd.elastic.ElasticSampler(dataset, shuffle=True, seed=3)
        s.load_state_dict(state)
        s.num_replicas = size  # as on each rank of that round
        for b in range(batches):
            s.record_batch(b, bs)
        state = s.state_dict()
    left = n - 3 * 3 * 4 - 2 * 2 * 4  # 34 on 4 ranks: 9 each, 2 padded
    assert len(trained) == n + (4 * 9 - left)
    assert sorted(set(trained)) == dataset
    assert len(trained) - len(set(trained)) == 2  # only the padding repeats samples
    assert _shards(monkeypatch, state, 2, dataset) == [[], []]


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
    # A peer lost inside a handler's collective, after the first sampler and the others
    # saved: the restore must give back the last commit, not a mix of the two (the first
    # sampler's new processed_num with the old model and counters skips samples).
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    first = hvd.elastic.ElasticSampler(list(range(20)), shuffle=False)
    second = hvd.elastic.ElasticSampler(list(range(20)), shuffle=False)
    state = hvd.elastic.TorchState(model, opt, first=first, second=second, batch=0)
    weight = model.weight.detach().clone()
    with torch.no_grad():
        model.weight.add_(1.0)
    first.record_batch(0, 4)
    second.record_batch(0, 4)
    state.batch = 1

    def lost(self):
        raise KoloInternalError("allgather 'kolo.elastic.second.custom': rank 1 died")

    second_handler = state._handlers["second"]
    second_handler.save = lost.__get__(second_handler)
    with pytest.raises(KoloInternalError, match="rank 1 died"):
        state.commit()
    state.restore()
    assert torch.equal(model.weight, weight) and state.batch == 0
    assert first.processed_num == 0 and second.processed_num == 0
    assert list(first) == list(range(20))
    del second_handler.save  # the next commit saves everything
    first.record_batch(0, 4)
    state.batch = 1
    state.commit()
    state.batch = 5
    first.record_batch(1, 4)
    state.restore()
    assert state.batch == 1 and first.processed_num == 4
    assert list(first) == list(range(4, 20))


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
        from kolo import basics
        monkeypatch.setattr(basics, "is_initialized", lambda: True)
        monkeypatch.setattr(basics, "rank", lambda: getattr(self.local, "rank", 0))
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


def test_sampler_handler_is_horovods_commit_restore_and_sync(monkeypatch):
    # Horovod 0.28's SamplerStateHandler: commit and restore copy the state_dict, no
    # collective (processed_num already counts every rank's samples); sync sends rank 0's
    # current state, which a new worker's fresh sampler takes too.
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
        return s.state_dict()

    assert world.run(lambda r: steps(r, range(2))) == [{"epoch": 0, "processed_num": 24}] * 3
    assert world.sent == []  # the commit sent nothing
    world.run(lambda r: handlers[r].value.record_batch(2, 4))
    world.run(lambda r: handlers[r].restore())
    assert [h.value.processed_num for h in handlers] == [24] * 3
    # a new worker (fresh sampler) and two of the old ones: rank 0's state everywhere
    world.run(lambda r: handlers[r].value.record_batch(2, 4))
    fresh = SamplerStateHandler(hvd.elastic.ElasticSampler(dataset, shuffle=True, seed=5))
    handlers = [handlers[0], fresh, handlers[2]]
    world.run(lambda r: handlers[r].sync())
    assert [h.value.state_dict() for h in handlers] == [{"epoch": 0, "processed_num": 36}] * 3
    shards = world.run(lambda r: list(handlers[r].value))
    assert sorted(i for sh in shards for i in sh) == sorted(_horovod_shard(60, 5, 0, 36, 1, 0))


def _news_of_a_new_round(monkeypatch, only_removes=False):
    """The driver, as a worker sees it: round 1 published while this worker runs in round 0."""
    from kolo.elastic import _worker
    monkeypatch.setattr(_worker, "enabled", lambda: True)
    monkeypatch.setattr(_worker, "current_round", lambda: 0)
    monkeypatch.setattr(_worker, "driver_news", lambda: (None, 1))
    monkeypatch.setattr(_worker, "round_only_removes", lambda n: only_removes)


def test_host_update_without_a_commit_keeps_every_ranks_samples(monkeypatch):
    # check_host_updates() raising HostsUpdatedInterrupt (no commit, no rollback) while the
    # removed workers are still there: the state is saved first, with the samples every rank
    # processed since the commit, so the survivors do not hand them out again.
    import kolo.elastic.state as base
    world = FakeWorld(monkeypatch, 3)
    _news_of_a_new_round(monkeypatch)
    monkeypatch.setattr(base.numpy_ops, "allreduce", lambda a, op, name: a)  # same everywhere
    dataset = list(range(300))

    def body(r):
        s = hvd.elastic.ElasticSampler(dataset, shuffle=False)
        state = hvd.elastic.TorchState(sampler=s, epoch=0)
        s.record_batch(0, 10)
        state.save()  # a commit
        s.record_batch(1, 10)
        with pytest.raises(kolo.elastic.HostsUpdatedInterrupt):
            state.check_host_updates()
        return state

    states = world.run(body)
    for st in states:
        assert st.sampler.processed_num == 60
        assert st._handlers["sampler"]._saved_sampler_state == {"epoch": 0,
                                                                "processed_num": 60}


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


# ---- kolo.torch.Trainer(elastic=True) ---------------------------------------------------------

def test_torch_state_restore_keeps_a_distributed_optimizers_lr_schedulers_tied(one_rank):
    # The scheduler drives the optimizer that DistributedOptimizer wraps (they share the
    # param_group dicts): the restore must keep those dicts, or later lr changes are lost.
    model = torch.nn.Linear(2, 1)
    inner = torch.optim.SGD(model.parameters(), lr=1.0)
    sched = torch.optim.lr_scheduler.StepLR(inner, step_size=1, gamma=0.5)
    opt = hvd.DistributedOptimizer(inner, named_parameters=model.named_parameters())
    state = hvd.elastic.TorchState(model, opt, lr_scheduler=sched)
    opt.step()
    sched.step()
    state.commit()
    opt.step()
    sched.step()
    assert opt.param_groups[0]["lr"] == 0.25
    state.restore()
    assert sched.last_epoch == 1 and opt.param_groups[0]["lr"] == 0.5
    sched.step()
    assert opt.param_groups[0]["lr"] == 0.25 and inner.param_groups[0]["lr"] == 0.25


def _elastic_fit(monkeypatch, fail_at_step):
    """Trainer(elastic=True) in one process with kolorun's side stubbed; the training step
    raises a lost peer once at global step fail_at_step. Returns (module, trainer, trained):
    trained[(epoch, step)] are the sample ids of the step's batch, the last attempt's."""
    from torch.utils.data import DataLoader, TensorDataset
    from kolo.elastic import _worker
    monkeypatch.setattr(_worker, "enabled", lambda: True)
    monkeypatch.setattr(kolo.elastic, "_reset", lambda: None)
    monkeypatch.setattr(_worker, "driver_news", lambda: (None, -1))
    torch.manual_seed(3)
    x = torch.randn(48, 3)
    y = x.sum(1, keepdim=True)
    ids = torch.arange(48)
    trained, failed = {}, []

    class Module(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 1)

        def training_step(self, batch, batch_idx):
            step = self.trainer.global_step
            if step == fail_at_step and not failed:
                failed.append(step)
                raise KoloInternalError("allreduce 'x': rank 1 died")
            xb, yb, ib = batch
            trained[(self.trainer.current_epoch, step)] = ib.tolist()
            return torch.nn.functional.mse_loss(self.lin(xb), yb)

        def configure_optimizers(self):
            opt = torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)
            sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.9)
            return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

        def train_dataloader(self):
            return DataLoader(TensorDataset(x, y, ids), batch_size=4, shuffle=True)

    module = Module()
    trainer = hvd.Trainer(max_epochs=2, elastic=True, elastic_commit_every_n_steps=3,
                          verbose=False, seed=4)
    trainer.fit(module)
    assert failed == ([] if fail_at_step is None else [fail_at_step])
    return module, trainer, trained


def test_trainer_elastic_rollback_restores_lr_schedulers_and_resumes_exactly(monkeypatch,
                                                                             one_rank):
    # A lost peer at step 5 rolls back to the commit at step 3: the model, the optimizer, the
    # LR scheduler, the sampler and the counters. The run then ends exactly as one without a
    # failure: the same parameters, scheduler state and learning rate, every sample once.
    ref_module, ref, ref_trained = _elastic_fit(monkeypatch, None)
    module, trainer, trained = _elastic_fit(monkeypatch, 5)
    sched, ref_sched = trainer.lr_schedulers[0].scheduler, ref.lr_schedulers[0].scheduler
    assert trainer.global_step == ref.global_step == 24
    assert sched.state_dict() == ref_sched.state_dict() and sched.last_epoch == 24
    assert trainer.optimizer.param_groups[0]["lr"] == ref.optimizer.param_groups[0]["lr"]
    assert trainer.optimizer.param_groups[0]["lr"] == pytest.approx(0.1 * 0.9 ** 24)
    for a, b in zip(module.parameters(), ref_module.parameters()):
        assert torch.equal(a, b)
    assert trained == ref_trained
    for epoch in (0, 1):
        ids = [i for (e, _), batch in trained.items() if e == epoch for i in batch]
        assert sorted(ids) == list(range(48))
    assert [h["epoch"] for h in trainer.metrics_history] == [0, 1]


def test_trainer_elastic_rollback_restores_the_lr_scheduler_state(monkeypatch, one_rank):
    # The unit of the above: a rollback of the Trainer's elastic state puts back the LR
    # scheduler's state_dict and the optimizer's learning rate of the last commit.
    from kolo.torch._trainer_optim import SchedulerConfig, Schedules
    model = torch.nn.Linear(2, 1)
    inner = torch.optim.SGD(model.parameters(), lr=1.0)
    sched = torch.optim.lr_scheduler.ExponentialLR(inner, gamma=0.5)
    trainer = hvd.Trainer(elastic=True, verbose=False)
    trainer.optimizer = hvd.DistributedOptimizer(inner,
                                                 named_parameters=model.named_parameters())
    schedules = Schedules([SchedulerConfig(sched, "step")], trainer.optimizer)
    state = trainer._make_elastic_state(model, schedules, 0)
    assert "lr_scheduler_0" in state._handlers and state.lr_scheduler_0 is sched
    for _ in range(2):
        trainer.optimizer.step()
        schedules.after_step()
    state.commit()
    committed = sched.state_dict()
    for _ in range(3):
        trainer.optimizer.step()
        schedules.after_step()
    assert sched.last_epoch == 5
    state.restore()
    assert sched.state_dict() == committed and sched.last_epoch == 2
    assert trainer.optimizer.param_groups[0]["lr"] == 0.25
    schedules.after_step()
    assert trainer.optimizer.param_groups[0]["lr"] == 0.125
