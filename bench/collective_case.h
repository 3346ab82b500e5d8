// SPDX-License-Identifier: Apache-2.0
// One benchmark case of kolo-bench: a collective at one size, dtype and reduction, run through
// ops/collectives.h with the algorithm forced to kolo's own (ring / p2p) or the transport's
// native one, plus the deterministic fill and the wrong-element check of bench/pattern.h.
//
// Sizes follow nccl-tests: `bytes` is the whole buffer a rank sees -- the in-place buffer
// (allreduce, broadcast), the gathered output (allgather), the full send buffer (alltoall,
// reducescatter) -- and `count` is bytes / sizeof(dtype). Collectives that cut the buffer into
// one block per rank round the count down to a multiple of the rank count.
//
// Ownership: a CaseRunner borrows the transport and owns grow-only, 64-byte aligned host
// buffers reused across sizes. Thread safety: one thread. Blocking: every run blocks like the
// collective it calls (bounded by the transport's timeout).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/types.h"
#include "ops/collectives.h"
#include "ops/hierarchical.h"
#include "transport/transport.h"

namespace kolo::bench {

enum class Collective { kAllreduce, kAllgather, kBroadcast, kAlltoall, kReducescatter };
const char* toString(Collective c);
bool parseCollective(const std::string& text, Collective* out);
// Whether the collective reduces (and so has a meaningful redop column).
bool isReducing(Collective c);
// nccl-tests' bus-bandwidth factor: busbw = algbw * factor, comparable with link speed.
double busBandwidthFactor(Collective c, int ranks);
// Whether the transport offers this collective natively.
bool nativeCapable(const Capabilities& caps, Collective c);
// The runtime's OpType of a collective (for ops::appliesTo).
OpType opTypeOf(Collective c);

struct CaseShape {
  size_t bytes = 0;       // nccl-tests "size"
  size_t count = 0;       // bytes / sizeof(dtype)
  size_t blockCount = 0;  // elements per rank block (allgather, alltoall, reducescatter)
};
// The shape closest to `requestedBytes` from below; false when not even one element per block
// fits.
bool shapeFor(Collective c, size_t requestedBytes, DataType dtype, int ranks, CaseShape* out);

// Grow-only, 64-byte aligned, pre-touched host memory.
class AlignedBuffer {
 public:
  // Returns at least `bytes` bytes (contents unspecified after growth), or nullptr when the
  // allocation fails.
  unsigned char* reserve(size_t bytes);
  unsigned char* data() const { return data_.get(); }

 private:
  struct Free {
    void operator()(unsigned char* p) const;
  };
  std::unique_ptr<unsigned char, Free> data_;
  size_t capacity_ = 0;
};

class CaseRunner {
 public:
  CaseRunner(Transport& transport, size_t segmentBytes, int root)
      : t_(transport), segmentBytes_(segmentBytes), root_(root) {}

  // Prepares the buffers for one case and fills them with the pattern. Errors:
  // kInvalidArgument when the buffers cannot be allocated.
  Status setup(Collective c, const CaseShape& shape, DataType dtype, ReduceOp op);
  // One collective with the given algorithm (kRing: kolo's own; kNative: the transport's;
  // kAuto: what ops/select picks). `usedName` receives what ran (e.g. "MPI_ALLREDUCE").
  Status runOnce(ops::Algorithm algorithm, std::string* usedName);
  // Refills the inputs, poisons the outputs, runs once, and counts this rank's wrong elements.
  Status check(ops::Algorithm algorithm, uint64_t* wrong);
  // From now on allreduces run ops::hierarchicalAllreduce over `groups` (not owned; null: flat),
  // with the row's algorithm for the cross-host step.
  void setHierarchy(ops::HostGroups* groups) { hierarchy_ = groups; }

 private:
  void fill();

  Transport& t_;
  size_t segmentBytes_;
  int root_;
  Collective collective_ = Collective::kAllreduce;
  CaseShape shape_;
  DataType dtype_ = DataType::kFloat32;
  ReduceOp op_ = ReduceOp::kSum;
  AlignedBuffer send_, recv_;
  ops::HostGroups* hierarchy_ = nullptr;
};

}  // namespace kolo::bench
