// SPDX-License-Identifier: Apache-2.0
// Each case keeps its data where the collective leaves it during the timed loop (allreduce and
// broadcast are in place, so repeated sums grow; the patterns are chosen so products stay +-1
// and integer sums wrap harmlessly). Only the check run starts again from the pattern, with
// every output byte poisoned first, so results left over from the timed loop cannot pass for
// correct ones.
#include "bench/collective_case.h"

#include <cstdlib>
#include <cstring>

#include "bench/pattern.h"

namespace kolo::bench {
namespace {

// No input pattern value encodes to 0xA5 bytes in any dtype (int8 -91, a tiny negative float).
constexpr unsigned char kPoison = 0xA5;

ops::AlgorithmConfig forced(ops::Algorithm a, size_t segmentBytes) {
  ops::AlgorithmConfig cfg;
  cfg.allreduce = cfg.allgather = cfg.broadcast = cfg.alltoall = cfg.reducescatter = a;
  cfg.segmentBytes = segmentBytes;
  return cfg;
}

}  // namespace

const char* toString(Collective c) {
  switch (c) {
    case Collective::kAllreduce:
      return "allreduce";
    case Collective::kAllgather:
      return "allgather";
    case Collective::kBroadcast:
      return "broadcast";
    case Collective::kAlltoall:
      return "alltoall";
    case Collective::kReducescatter:
      return "reducescatter";
  }
  return "unknown-collective";
}

bool parseCollective(const std::string& text, Collective* out) {
  for (Collective c : {Collective::kAllreduce, Collective::kAllgather, Collective::kBroadcast,
                       Collective::kAlltoall, Collective::kReducescatter}) {
    if (text == toString(c)) {
      *out = c;
      return true;
    }
  }
  return false;
}

bool isReducing(Collective c) {
  return c == Collective::kAllreduce || c == Collective::kReducescatter;
}

double busBandwidthFactor(Collective c, int ranks) {
  const double n = ranks;
  switch (c) {
    case Collective::kAllreduce:
      return 2.0 * (n - 1) / n;
    case Collective::kBroadcast:
      return 1.0;
    case Collective::kAllgather:
    case Collective::kAlltoall:
    case Collective::kReducescatter:
      return (n - 1) / n;
  }
  return 1.0;
}

OpType opTypeOf(Collective c) {
  switch (c) {
    case Collective::kAllreduce:
      return OpType::kAllreduce;
    case Collective::kAllgather:
      return OpType::kAllgather;
    case Collective::kBroadcast:
      return OpType::kBroadcast;
    case Collective::kAlltoall:
      return OpType::kAlltoall;
    case Collective::kReducescatter:
      return OpType::kReducescatter;
  }
  return OpType::kAllreduce;
}

bool nativeCapable(const Capabilities& caps, Collective c) {
  switch (c) {
    case Collective::kAllreduce:
      return caps.nativeAllreduce;
    case Collective::kAllgather:
      return caps.nativeAllgatherv;
    case Collective::kBroadcast:
      return caps.nativeBroadcast;
    case Collective::kAlltoall:
      return caps.nativeAlltoallv;
    case Collective::kReducescatter:
      return caps.nativeReducescatter;
  }
  return false;
}

bool shapeFor(Collective c, size_t requestedBytes, DataType dtype, int ranks, CaseShape* out) {
  const size_t elem = sizeOf(dtype);
  CaseShape s;
  if (c == Collective::kAllreduce || c == Collective::kBroadcast) {
    s.count = requestedBytes / elem;
    s.blockCount = s.count;
  } else {
    s.blockCount = requestedBytes / (elem * static_cast<size_t>(ranks));
    s.count = s.blockCount * static_cast<size_t>(ranks);
  }
  if (s.count == 0 || s.blockCount == 0) return false;
  s.bytes = s.count * elem;
  *out = s;
  return true;
}

void AlignedBuffer::Free::operator()(unsigned char* p) const { std::free(p); }

unsigned char* AlignedBuffer::reserve(size_t bytes) {
  if (bytes <= capacity_ && data_) return data_.get();
  data_.reset();
  capacity_ = 0;
  void* p = nullptr;
  const size_t rounded = ((bytes + 63) / 64) * 64;
  if (posix_memalign(&p, 64, rounded == 0 ? 64 : rounded) != 0) return nullptr;
  // Touch every page now so that page faults never land inside a timed loop.
  std::memset(p, 0, rounded);
  data_.reset(static_cast<unsigned char*>(p));
  capacity_ = rounded;
  return data_.get();
}

Status CaseRunner::setup(Collective c, const CaseShape& shape, DataType dtype, ReduceOp op) {
  collective_ = c;
  shape_ = shape;
  dtype_ = dtype;
  op_ = isReducing(c) ? op : ReduceOp::kSum;
  const size_t blockBytes = shape.blockCount * sizeOf(dtype);
  size_t sendBytes = 0, recvBytes = shape.bytes;  // allreduce, broadcast: in place in recv_
  if (c == Collective::kAllgather) sendBytes = blockBytes;
  if (c == Collective::kAlltoall) sendBytes = shape.bytes;
  if (c == Collective::kReducescatter) {
    sendBytes = shape.bytes;
    recvBytes = blockBytes;
  }
  const bool ok = (sendBytes == 0 || send_.reserve(sendBytes) != nullptr) &&
                  recv_.reserve(recvBytes) != nullptr;
  KOLO_REQUIRE(ok, kInvalidArgument,
               std::string("cannot allocate the buffers of ") + toString(c) + " at " +
                   std::to_string(shape.bytes) + " bytes");
  fill();
  return Status::ok();
}

void CaseRunner::fill() {
  const int rank = t_.rank();
  const size_t blockBytes = shape_.blockCount * sizeOf(dtype_);
  switch (collective_) {
    case Collective::kAllreduce:
      fillPattern(recv_.data(), shape_.count, dtype_, op_, rank, 0);
      break;
    case Collective::kBroadcast:
      if (rank == root_) {
        fillPattern(recv_.data(), shape_.count, dtype_, op_, rank, 0);
      } else {
        std::memset(recv_.data(), kPoison, shape_.bytes);
      }
      break;
    case Collective::kAllgather:
      fillPattern(send_.data(), shape_.blockCount, dtype_, op_, rank,
                  static_cast<uint64_t>(rank) * shape_.blockCount);
      std::memset(recv_.data(), kPoison, shape_.bytes);
      break;
    case Collective::kAlltoall:
      fillPattern(send_.data(), shape_.count, dtype_, op_, rank, 0);
      std::memset(recv_.data(), kPoison, shape_.bytes);
      break;
    case Collective::kReducescatter:
      fillPattern(send_.data(), shape_.count, dtype_, op_, rank, 0);
      std::memset(recv_.data(), kPoison, blockBytes);
      break;
  }
}

Status CaseRunner::runOnce(ops::Algorithm algorithm, std::string* usedName) {
  const ops::AlgorithmConfig cfg = forced(algorithm, segmentBytes_);
  const size_t n = static_cast<size_t>(t_.size());
  const size_t blockBytes = shape_.blockCount * sizeOf(dtype_);
  switch (collective_) {
    case Collective::kAllreduce:
      if (hierarchy_ != nullptr) {
        if (usedName != nullptr) *usedName = "HIERARCHICAL_ALLREDUCE";
        return ops::hierarchicalAllreduce(*hierarchy_, cfg, recv_.data(), shape_.count, dtype_,
                                          op_);
      }
      return ops::allreduce(t_, cfg, recv_.data(), shape_.count, dtype_, op_, usedName);
    case Collective::kBroadcast:
      return ops::broadcast(t_, cfg, recv_.data(), shape_.bytes, root_, usedName);
    case Collective::kAllgather:
      return ops::allgatherv(t_, cfg, send_.data(), blockBytes, recv_.data(),
                             std::vector<size_t>(n, blockBytes), usedName);
    case Collective::kAlltoall: {
      const std::vector<size_t> blocks(n, blockBytes);
      return ops::alltoallv(t_, cfg, send_.data(), blocks, recv_.data(), blocks, usedName);
    }
    case Collective::kReducescatter:
      return ops::reducescatter(t_, cfg, send_.data(), recv_.data(),
                                std::vector<size_t>(n, shape_.blockCount), dtype_, op_, usedName);
  }
  return Status(ErrorCode::kInternal, "unknown collective");
}

Status CaseRunner::check(ops::Algorithm algorithm, uint64_t* wrong) {
  fill();
  std::string used;
  KOLO_RETURN_IF_ERROR(runOnce(algorithm, &used));
  const int rank = t_.rank();
  const int n = t_.size();
  const size_t block = shape_.blockCount;
  const size_t blockBytes = block * sizeOf(dtype_);
  uint64_t bad = 0;
  switch (collective_) {
    case Collective::kAllreduce:
      bad = countWrongReduced(recv_.data(), shape_.count, dtype_, op_, n, 0);
      break;
    case Collective::kBroadcast:
      bad = countWrongCopy(recv_.data(), shape_.count, dtype_, op_, root_, 0);
      break;
    case Collective::kAllgather:
      for (int r = 0; r < n; ++r) {
        bad += countWrongCopy(recv_.data() + r * blockBytes, block, dtype_, op_, r,
                              static_cast<uint64_t>(r) * block);
      }
      break;
    case Collective::kAlltoall:
      for (int s = 0; s < n; ++s) {
        bad += countWrongCopy(recv_.data() + s * blockBytes, block, dtype_, op_, s,
                              static_cast<uint64_t>(rank) * block);
      }
      break;
    case Collective::kReducescatter:
      bad = countWrongReduced(recv_.data(), block, dtype_, op_, n,
                              static_cast<uint64_t>(rank) * block);
      break;
  }
  *wrong = bad;
  return Status::ok();
}

}  // namespace kolo::bench
