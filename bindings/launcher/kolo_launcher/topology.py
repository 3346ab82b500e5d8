# SPDX-License-Identifier: Apache-2.0
"""Rank placement with Horovod's rules.

Ranks fill the hosts in host-list order, each host up to its slot count:
  -H a:2,b:2 -np 4  ->  a: ranks 0,1   b: ranks 2,3
  local_rank  = the rank's index on its host;       local_size = ranks on that host
  cross_rank  = index among the ranks with the same local_rank (hosts in list order)
  cross_size  = how many ranks share that local_rank
With uneven hosts (-H a:2,b:1 -np 3) rank 1 (a, local 1) has cross_rank 0 and cross_size 1.
This agrees with bootstrap/topology.h (cross ranks ordered by global rank), because ranks are
numbered host by host.
"""

from typing import List, NamedTuple


class TopologyError(ValueError):
    pass


class Slot(NamedTuple):
    rank: int
    size: int
    host: str
    local_rank: int
    local_size: int
    cross_rank: int
    cross_size: int


def assign(hosts, np) -> List[Slot]:
    """hosts: [HostSlots]; np: number of processes. Raises TopologyError when np does not fit."""
    total = sum(h.slots for h in hosts)
    if np < 1:
        raise TopologyError("-np must be at least 1 (got %d)" % np)
    if np > total:
        raise TopologyError("-np %d asks for more processes than the host list has slots (%d: %s)"
                            % (np, total, ",".join("%s:%d" % (h.name, h.slots) for h in hosts)))
    placed = []  # (host, local_rank)
    per_host = {}
    for h in hosts:
        take = min(h.slots, np - len(placed))
        if take <= 0:
            break
        per_host[h.name] = take
        placed.extend((h.name, i) for i in range(take))
    cross_size = {}
    cross_rank = []
    for _host, local in placed:
        cross_rank.append(cross_size.get(local, 0))
        cross_size[local] = cross_size.get(local, 0) + 1
    return [Slot(rank=r, size=np, host=host, local_rank=local, local_size=per_host[host],
                 cross_rank=cross_rank[r], cross_size=cross_size[local])
            for r, (host, local) in enumerate(placed)]


def used_hosts(slots):
    """The hosts that received at least one rank, in order, with the number they received."""
    order = []
    counts = {}
    for s in slots:
        if s.host not in counts:
            order.append(s.host)
            counts[s.host] = 0
        counts[s.host] += 1
    return [(h, counts[h]) for h in order]
