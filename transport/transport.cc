#include "transport/transport.h"

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

Status Transport::exchange(const std::vector<P2POp>& ops) {
  if (ops.empty()) return Status::ok();
  std::unique_ptr<PendingOps> pending;
  KOLO_RETURN_IF_ERROR(post(ops, &pending));
  return pending->wait(deadlineFromNow());
}

}  // namespace kolo
