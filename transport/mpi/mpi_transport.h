// SPDX-License-Identifier: Apache-2.0
// The MPI transport: kolo's Transport over Open MPI (any MPI-3 library works).
//
// Ownership and lifetime: createMpiTransport initializes MPI (MPI_Init_thread asking for
// MPI_THREAD_MULTIPLE) only when the program has not done so; in that case MPI stays initialized
// for the rest of the process (MPI cannot be initialized twice) and is finalized by an atexit
// hook. A program that initialized MPI itself keeps ownership: kolo never finalizes it. Each
// transport works on its own duplicate of MPI_COMM_WORLD (split() transports on sub-communicators
// of it) with MPI_ERRORS_RETURN, so kolo's traffic never matches the program's own messages.
//
// Thread safety: as Transport (one thread at a time; abort() from any thread). kolo calls MPI
// from its coordinator thread, so an MPI initialized by the program must provide at least
// MPI_THREAD_SERIALIZED (MULTIPLE when the program keeps calling MPI itself).
//
// Blocking and errors: waits poll MPI_Testsome with a backoff until their deadline; a timeout
// names the peers still outstanding. abort() makes every current and later wait fail with the
// cause (MPI_Abort is never called). MPI cannot cancel a started collective or a send: after a
// timeout or an abandoned batch the transport is marked aborted, because MPI may still touch
// those buffers. A peer that dies is Open MPI's business: mpirun tears the whole job down, so
// the survivors are killed rather than told (kPeerLost is seen with Gloo, not with MPI).
// Sizes: point-to-point and broadcast split messages above 1 GiB into chunks; allreduce splits
// counts above INT_MAX elements; allgatherv/alltoallv/reducescatter whose counts do not fit
// MPI's int arguments (even in units of up to 4 KiB) return kUnsupported.
#pragma once

#include <chrono>
#include <memory>

#include "base/status.h"
#include "transport/transport.h"

namespace kolo {

// Creates the transport over every process of MPI_COMM_WORLD (a collective call: every process
// calls it). Waits at most `startTimeout` for the others to arrive. Errors: kUnsupported when
// MPI was initialized with too low a thread level or already finalized, kTimeout, kIo.
Status createMpiTransport(std::unique_ptr<Transport>* out,
                          std::chrono::milliseconds startTimeout = std::chrono::seconds(120));

}  // namespace kolo
