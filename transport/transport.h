// SPDX-License-Identifier: Apache-2.0
// Transport: the small interface every collective algorithm in ops/ is written against.
//
// A Transport connects `size()` ranks of one group (the global job, or a process set split from
// it). It offers tagged point-to-point sends and receives, posted as a batch and then tested or
// waited with a deadline, plus optional native collectives that ops/select may prefer.
//
// Contracts:
//  - Thread safety: a Transport is used by one thread at a time (the one running a round). `abort` may be
//    called from any thread and makes every current and later wait fail promptly.
//  - Ordering: messages between the same (src, dst, tag) arrive in post order. A receive must be
//    posted with exactly the byte count the sender sends.
//  - Blocking: nothing blocks past its deadline. A wait that runs out returns kTimeout naming
//    the peers still outstanding; a peer that closed its connection or died yields kPeerLost
//    naming that peer's rank (in this group and globally).
//  - Buffers passed to post() must stay alive and untouched until the batch completes or fails.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/clock.h"
#include "base/status.h"
#include "base/types.h"

namespace kolo {

struct P2POp {
  enum class Kind { kSend, kRecv };
  Kind kind;
  int peer;      // rank within this transport's group
  uint32_t tag;  // distinguishes concurrent streams between the same pair
  void* data;    // send: read from; recv: written to
  size_t bytes;
};

inline P2POp sendOp(int peer, uint32_t tag, const void* data, size_t bytes) {
  return P2POp{P2POp::Kind::kSend, peer, tag, const_cast<void*>(data), bytes};
}
inline P2POp recvOp(int peer, uint32_t tag, void* data, size_t bytes) {
  return P2POp{P2POp::Kind::kRecv, peer, tag, data, bytes};
}

// A posted batch. Destroying an incomplete batch cancels what can be cancelled; the transport
// is then unusable for that pair only if the wire protocol cannot resynchronize (it aborts).
class PendingOps {
 public:
  virtual ~PendingOps() = default;
  // Non-blocking: *done = true once every op of the batch completed.
  virtual Status test(bool* done) = 0;
  // Blocks until every op completed, an error occurred, or the deadline passed (kTimeout).
  virtual Status wait(Deadline deadline) = 0;
};

// One tensor of a gathered allreduce (Transport::allreduceSpans): `count` elements are read from
// `in` and the reduced result is written to `out` (which may be `in`: in place). The spans of one
// call are reduced as if they were packed one after another into a single buffer.
struct ReduceSpan {
  const void* in = nullptr;
  void* out = nullptr;
  size_t count = 0;
};

struct Capabilities {
  bool nativeAllreduce = false;
  bool nativeAllgatherv = false;
  bool nativeBroadcast = false;
  bool nativeAlltoallv = false;
  bool nativeReducescatter = false;
  bool nativeAllreduceSpans = false;  // allreduceSpans: a fused allreduce without packing
  bool sharedMemory = false;  // every rank on one host; p2p is memcpy-fast
  bool deviceMemory = false;  // accepts CUDA buffers (NCCL)
};

class Transport {
 public:
  virtual ~Transport() = default;

  virtual const char* name() const = 0;  // "loopback", "mpi", "gloo", "nccl"
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Global rank of group member `groupRank` (for messages that name a peer).
  virtual int globalRank(int groupRank) const { return groupRank; }
  virtual Capabilities capabilities() const = 0;

  // Posts a batch of sends/receives that progress concurrently. Empty batches are allowed.
  virtual Status post(const std::vector<P2POp>& ops, std::unique_ptr<PendingOps>* out) = 0;

  // Native collectives (kUnsupported unless the capability is set). All block until done or
  // until the transport's timeout passes. Counts are in elements; byte vectors are per rank.
  virtual Status allreduce(void* data, size_t count, DataType dtype, ReduceOp op);
  // The allreduce of the spans' concatenation, reading and writing the tensors where they are
  // (no packing copy): the same bits as packing them, allreduce(), and unpacking. Every rank
  // passes the same counts. kUnsupported unless capabilities().nativeAllreduceSpans.
  virtual Status allreduceSpans(const std::vector<ReduceSpan>& spans, DataType dtype, ReduceOp op);
  virtual Status allgatherv(const void* send, size_t sendBytes, void* recv,
                            const std::vector<size_t>& recvBytes);
  virtual Status broadcast(void* data, size_t bytes, int root);
  virtual Status alltoallv(const void* send, const std::vector<size_t>& sendBytes, void* recv,
                           const std::vector<size_t>& recvBytes);
  // recvCounts[r] elements of the reduced result land on rank r, in rank order.
  virtual Status reducescatter(const void* send, void* recv, const std::vector<size_t>& recvCounts,
                               DataType dtype, ReduceOp op);

  // Collective over every rank of this transport: returns a transport for the members listed
  // in `ranks` (group ranks, ascending), or nullptr in *out on a rank that is not a member.
  // `setId` keeps rendezvous keys of different sets apart.
  virtual Status split(const std::vector<int>& ranks, int32_t setId,
                       std::unique_ptr<Transport>* out) = 0;

  // Makes every pending and future wait fail with `cause` (from any thread). Idempotent.
  virtual void abort(const Status& cause) = 0;

  // How long a single wait may take before the peer counts as lost.
  std::chrono::milliseconds timeout() const { return timeout_; }
  void setTimeout(std::chrono::milliseconds t) { timeout_ = t; }
  Deadline deadlineFromNow() const { return Clock::now() + timeout_; }

  // post() + wait(deadlineFromNow()).
  Status exchange(const std::vector<P2POp>& ops);

 private:
  std::chrono::milliseconds timeout_{30000};
};

// split()'s argument check, the same for every transport: `ranks` must be ascending group ranks
// of a group of `size`. kInvalidArgument "<name>: split ranks must be ascending group ranks".
Status checkSplitRanks(const Transport& t, const std::vector<int>& ranks);

// ---- set-up exchanges ----------------------------------------------------------------------------
// Small collectives a transport needs while it builds itself over another transport (the shared
// memory segment's name and the agreement that every rank mapped it), made of point-to-point
// only, so the transport floor never calls up into ops/. A star through `root`: n - 1 messages,
// fine for set-up, not meant for data. Every rank of `t` calls them in the same order; each wait
// uses t.deadlineFromNow(). Tag kSetupTag is reserved for them (ops' tags are 1-7).
inline constexpr uint32_t kSetupTag = 8;
// `bytes` of `data` from `root` to every rank.
Status setupBroadcast(Transport& t, void* data, size_t bytes, int root);
// Every rank ends with the minimum of all ranks' `*value`.
Status setupMinInt32(Transport& t, int32_t* value);

}  // namespace kolo
