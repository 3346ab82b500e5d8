// SPDX-License-Identifier: Apache-2.0
// The Gloo transport: Gloo's native collectives over Gloo's TCP pairs, and point-to-point over
// kolo's own TCP mesh beside them (transport/tcp), both found through kolo's rendezvous Store.
//
// Ownership: the transport owns its Gloo context and its tcp mesh, and shares the Gloo device
// (the listening address) with the transports split from it; the Store is shared with the caller.
//
// Thread safety: as Transport (one thread at a time; abort() from any thread).
//
// Blocking and errors: creation is collective over the `size` ranks and waits at most `timeout`
// for the others to publish their addresses (kTimeout naming the missing key otherwise).
// Point-to-point batches are the tcp transport's (a peer whose connection closed gives
// kPeerLost naming it, a silent one kTimeout naming the peers still outstanding; test() does
// not block). Native collectives (allreduce for every dtype -- fp16/bf16
// reduce through kernels/reduce_cpu --, allgatherv, broadcast, alltoallv; reducescatter is
// kUnsupported) run Gloo's own algorithms under the transport timeout. abort() interrupts every
// wait of the transport, the tcp mesh's and those inside Gloo's collectives, and closes its
// connections (the mesh's own failure aborts the whole transport too);
// after an abort, a failed native collective or an abandoned batch, every later call fails
// with the first cause (Gloo cannot resynchronize a connection after an error).
// Gloo writes to sockets without MSG_NOSIGNAL: creating a transport therefore sets SIGPIPE to
// SIG_IGN when it still has its default action (a peer that dies must not kill this process).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "base/status.h"
#include "rendezvous/store.h"
#include "transport/transport.h"

namespace kolo {

// Connects rank `rank` of `size`. `iface` (KOLO_GLOO_IFACE) picks the network interface to
// listen on; otherwise `hostnameOrAddr`, otherwise 127.0.0.1 (single-host jobs). Rendezvous keys
// live under "kolo/gloo/<generation>/" in `store`, the generation counting successive
// transports created over the same store, so a re-initialized job never reads stale addresses.
// Errors: kInvalidArgument (bad arguments, unknown interface), kTimeout, kPeerLost, kIo.
Status createGlooTransport(std::shared_ptr<Store> store, int rank, int size,
                           const std::string& iface, const std::string& hostnameOrAddr,
                           std::chrono::milliseconds timeout, std::unique_ptr<Transport>* out);

}  // namespace kolo
