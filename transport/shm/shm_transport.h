// SPDX-License-Identifier: Apache-2.0
// The shared-memory transport: the ranks of a group that share one host talk through one POSIX
// shared-memory segment (/dev/shm) instead of sockets or MPI.
//
// It is created on top of an already connected "base" transport of the same group (MPI, Gloo,
// or loopback in tests), which it owns: the base carries the segment's name at creation, backs
// split(), and is aborted with it. Everything else -- point-to-point messages and the native
// allreduce, broadcast, allgatherv and reducescatter -- moves through the segment
// (transport/shm/shm_p2p.h, shm_collectives.h describe the protocols). name() is "shm";
// capabilities(): sharedMemory and those four natives (ops/select prefers them under "auto").
//
// Lifetime: the segment is unlinked as soon as every rank mapped it, so a crash leaks nothing;
// it is unmapped when the transport and its last pending batch are gone. Destroying the
// transport tells the peers (a peer waiting for it gets kPeerLost "... closed ...").
// Errors, beyond transport.h: a peer process that died is noticed within ~100 ms of a wait and
// named ("rank 1 (global 1) died (process 4242 is gone)", kPeerLost); abort() and any failed
// native collective (timeout, lost peer) abort the whole group, so the other ranks fail
// promptly with "rank R (global G) aborted the shared-memory transport: <cause>".
// Thread safety: as Transport (one thread at a time; abort() from any thread).
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>

#include "base/config.h"
#include "base/status.h"
#include "transport/transport.h"

namespace kolo {

struct ShmOptions {
  size_t chunkBytes = 0;  // collective staging slot per rank (0: 1 MiB, less beyond 16 ranks)
  size_t ringBytes = 0;   // point-to-point ring per ordered pair, a power of two (0: by size)
  std::chrono::microseconds spin{0};  // spin before sleeping on a futex (0: 50 us)
};

// Collective over every rank of **base (at most 64 ranks, all on this host). On success *out is
// the shm transport, which took ownership of *base (left null), with base's timeout. On failure
// every rank gets an error -- kUnsupported when some rank could not map the segment (another
// host, another /dev/shm), kIo when it could not be created (e.g. /dev/shm full), the base's
// error when the base failed -- and *base is left in place, still usable unless the base
// itself failed.
Status createShmTransport(std::unique_ptr<Transport>* base, const ShmOptions& options,
                          std::unique_ptr<Transport>* out);

// KOLO_SHM applied to a freshly connected base transport (bootstrap/registry.cc calls it after
// creating MPI or Gloo). Collective. kOff: *transport unchanged. kAuto: wrapped when the job may
// fit on this host (2..64 ranks, and cfg.localSize unknown or equal to the size); when some
// rank cannot map the segment (another host) every rank keeps the base, silently. kOn: wrapped
// (any size >= 1), or an error prefixed "KOLO_SHM=on: ". Base failures are returned as they are.
Status applyShmConfig(const Config& cfg, std::unique_ptr<Transport>* transport);

// The transport under `t` when t is an shm transport, else t itself: what carries the job's
// control traffic ("mpi", "gloo"), e.g. for kolo_mpi_enabled().
const Transport& controlTransport(const Transport& t);

}  // namespace kolo
