# SPDX-License-Identifier: Apache-2.0
"""kolo.torch.elastic: horovod.torch.elastic for kolo (`hvd.elastic` after
`import kolo.torch as hvd`): run, State, ObjectState, TorchState, ElasticSampler,
HostsUpdatedInterrupt. See kolo.elastic for how a job is re-formed."""

from kolo.elastic import (ElasticJobError, HostsUpdatedInterrupt, State, WorkerRemoved,
                          current_round, is_elastic, run)
from kolo.torch.elastic.sampler import ElasticSampler
from kolo.torch.elastic.state import ObjectState, TorchState

__all__ = ["run", "State", "ObjectState", "TorchState", "ElasticSampler",
           "HostsUpdatedInterrupt", "ElasticJobError", "WorkerRemoved", "is_elastic",
           "current_round"]
