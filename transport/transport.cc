// SPDX-License-Identifier: Apache-2.0
#include "transport/transport.h"

#include <algorithm>

namespace kolo {
namespace {
Status unsupported(const Transport& t, const char* what) {
  return Status(ErrorCode::kUnsupported,
                std::string("transport '") + t.name() + "' has no native " + what);
}
}  // namespace

Status Transport::allreduce(void*, size_t, DataType, ReduceOp) {
  return unsupported(*this, "allreduce");
}
Status Transport::allreduceSpans(const std::vector<ReduceSpan>&, DataType, ReduceOp) {
  return unsupported(*this, "allreduceSpans");
}
Status Transport::allgatherv(const void*, size_t, void*, const std::vector<size_t>&) {
  return unsupported(*this, "allgatherv");
}
Status Transport::broadcast(void*, size_t, int) { return unsupported(*this, "broadcast"); }
Status Transport::alltoallv(const void*, const std::vector<size_t>&, void*,
                            const std::vector<size_t>&) {
  return unsupported(*this, "alltoallv");
}
Status Transport::reducescatter(const void*, void*, const std::vector<size_t>&, DataType,
                                ReduceOp) {
  return unsupported(*this, "reducescatter");
}

Status checkSplitRanks(const Transport& t, const std::vector<int>& ranks) {
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] < 0 || ranks[i] >= t.size() || (i > 0 && ranks[i] <= ranks[i - 1])) {
      return Status(ErrorCode::kInvalidArgument,
                    std::string(t.name()) + ": split ranks must be ascending group ranks");
    }
  }
  return Status::ok();
}

Status Transport::exchange(const std::vector<P2POp>& ops) {
  if (ops.empty()) return Status::ok();
  std::unique_ptr<PendingOps> pending;
  KOLO_RETURN_IF_ERROR(post(ops, &pending));
  return pending->wait(deadlineFromNow());
}

Status setupBroadcast(Transport& t, void* data, size_t bytes, int root) {
  std::vector<P2POp> ops;
  if (t.rank() == root) {
    for (int r = 0; r < t.size(); ++r) {
      if (r != root) ops.push_back(sendOp(r, kSetupTag, data, bytes));
    }
  } else {
    ops.push_back(recvOp(root, kSetupTag, data, bytes));
  }
  return t.exchange(ops);
}

Status setupMinInt32(Transport& t, int32_t* value) {
  const int n = t.size();
  if (t.rank() == 0) {
    std::vector<int32_t> all(static_cast<size_t>(n), *value);
    std::vector<P2POp> ops;
    for (int r = 1; r < n; ++r) ops.push_back(recvOp(r, kSetupTag, &all[r], sizeof(int32_t)));
    KOLO_RETURN_IF_ERROR(t.exchange(ops));
    for (int32_t v : all) *value = std::min(*value, v);
  } else {
    KOLO_RETURN_IF_ERROR(t.exchange({sendOp(0, kSetupTag, value, sizeof(int32_t))}));
  }
  return setupBroadcast(t, value, sizeof(int32_t), 0);
}

}  // namespace kolo
