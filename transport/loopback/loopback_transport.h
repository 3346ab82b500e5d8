// SPDX-License-Identifier: Apache-2.0
// The loopback transport: n "ranks" that are threads of one process, sharing one mailbox.
//
// Used by unit tests (every collective algorithm runs over it at 1..8 thread ranks) and by
// single-process runs. Semantics follow transport.h exactly:
//  - Matching: a send from src to dst with tag T pairs with the oldest unmatched receive that dst
//    posted from src with tag T (FIFO per (src, dst, tag)); a receive may be posted before or
//    after its send. Byte counts must agree, otherwise both operations fail with kMismatch.
//  - Copies: rendezvous, one copy. Data moves straight from the sender's buffer into the
//    receiver's buffer, performed by the thread that posts the second half of the pair (outside
//    the mailbox lock). A send therefore completes only once its receive has been posted, as
//    with a large MPI message: algorithms must post a step's sends and receives together.
//  - Waiting: condition variables with the caller's deadline, no spinning. A wait that runs out
//    returns kTimeout naming the outstanding peers, e.g.
//    "rank 1 waited 0.2 s for 2 recv(s) from rank 0 (tag 7)".
//  - abort(cause) from any thread makes every pending and later post/wait/test/split on every
//    rank of the group, and of groups split from it, fail with `cause` (the Status itself); a
//    batch that had fully completed before the abort still reports success.
//  - Cancelling: destroying an incomplete PendingOps withdraws its unmatched operations (and
//    waits for a copy already under way, which is a bounded memcpy).
//  - split(): members meet in the parent's shared state under (setId, how many splits with this
//    setId the caller made before); non-members get nullptr without waiting. Members must pass
//    the same ranks (kMismatch otherwise).
// Thread safety: each Transport is used by one thread at a time (its rank's thread); different
// ranks' transports may be used concurrently. Capabilities: no native collectives;
// sharedMemory = true.
#pragma once

#include <memory>
#include <vector>

#include "base/status.h"
#include "transport/transport.h"

namespace kolo {

// Creates a group of n (1..4096) connected loopback transports; (*out)[r] is rank r. The
// transports own the shared mailbox jointly: it lives until the last of them is destroyed.
// Errors: kInvalidArgument for n out of range or a null `out`.
Status createLoopbackGroup(int n, std::vector<std::unique_ptr<Transport>>* out);

}  // namespace kolo
