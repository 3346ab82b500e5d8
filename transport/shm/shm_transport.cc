// SPDX-License-Identifier: Apache-2.0
// The shm Transport: glue between the segment, the point-to-point engine and the collectives.
//
// Why split() goes through the base: a process set needs its own rendezvous (its members may be
// any subset), and the base already knows how to build a connected sub-group; the new segment
// is then created over that sub-base exactly like the first one. Children are remembered
// (weakly) so that aborting a transport aborts the process-set transports split from it, as
// the runtime expects when it aborts the global transport.
#include "transport/shm/shm_transport.h"

#include <algorithm>
#include <mutex>
#include <utility>
#include <vector>

#include "transport/shm/shm_collectives.h"
#include "transport/shm/shm_p2p.h"
#include "transport/shm/shm_segment.h"

namespace kolo {
namespace {

// One transport's segment and the process-set transports split from it, for abort(): shared so
// that aborting from another thread never races with a child being destroyed.
class AbortNode {
 public:
  explicit AbortNode(std::shared_ptr<shm::Segment> segment) : segment_(std::move(segment)) {}

  void adopt(const std::shared_ptr<AbortNode>& child) {
    Status cause;
    {
      std::lock_guard<std::mutex> lock(mu_);
      children_.erase(std::remove_if(children_.begin(), children_.end(),
                                     [](const std::weak_ptr<AbortNode>& w) { return w.expired(); }),
                      children_.end());
      children_.push_back(child);
      if (!aborted_) return;
      cause = cause_;
    }
    child->abort(cause);
  }

  void abort(const Status& cause) {
    std::vector<std::shared_ptr<AbortNode>> kids;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (aborted_) return;
      aborted_ = true;
      cause_ = cause;
      for (auto& w : children_) {
        if (auto k = w.lock()) kids.push_back(std::move(k));
      }
    }
    segment_->abort(cause);
    for (auto& k : kids) k->abort(cause);
  }

 private:
  std::shared_ptr<shm::Segment> segment_;
  std::mutex mu_;
  bool aborted_ = false;
  Status cause_;
  std::vector<std::weak_ptr<AbortNode>> children_;
};

class ShmTransport final : public Transport {
 public:
  ShmTransport(std::unique_ptr<Transport> base, std::shared_ptr<shm::Segment> segment,
               const ShmOptions& options)
      : base_(std::move(base)),
        seg_(std::move(segment)),
        engine_(std::make_shared<shm::P2PEngine>(seg_)),
        collectives_(seg_.get()),
        options_(options),
        node_(std::make_shared<AbortNode>(seg_)) {}

  ~ShmTransport() override { seg_->close(); }

  const char* name() const override { return "shm"; }
  int rank() const override { return seg_->rank(); }
  int size() const override { return seg_->size(); }
  int globalRank(int groupRank) const override { return base_->globalRank(groupRank); }
  Capabilities capabilities() const override {
    Capabilities c;
    c.nativeAllreduce = true;
    c.nativeAllreduceSpans = true;
    c.nativeAllgatherv = true;
    c.nativeBroadcast = true;
    c.nativeReducescatter = true;
    c.sharedMemory = true;
    return c;
  }

  Status post(const std::vector<P2POp>& ops, std::unique_ptr<PendingOps>* out) override {
    return engine_->post(ops, out);
  }

  Status allreduce(void* data, size_t count, DataType dtype, ReduceOp op) override {
    KOLO_RETURN_IF_ERROR(seg_->aborted());
    KOLO_REQUIRE(data != nullptr || count == 0, kInvalidArgument, "shm allreduce: null buffer");
    return collectives_.allreduce(data, count, dtype, op, timeout());
  }
  Status allreduceSpans(const std::vector<ReduceSpan>& spans, DataType dtype,
                        ReduceOp op) override {
    KOLO_RETURN_IF_ERROR(seg_->aborted());
    for (const ReduceSpan& s : spans) {
      KOLO_REQUIRE((s.in != nullptr && s.out != nullptr) || s.count == 0, kInvalidArgument,
                   "shm allreduce: null buffer");
    }
    return collectives_.allreduceSpans(spans, dtype, op, timeout());
  }
  Status allgatherv(const void* send, size_t sendBytes, void* recv,
                    const std::vector<size_t>& recvBytes) override {
    KOLO_RETURN_IF_ERROR(seg_->aborted());
    return collectives_.allgatherv(send, sendBytes, recv, recvBytes, timeout());
  }
  Status broadcast(void* data, size_t bytes, int root) override {
    KOLO_RETURN_IF_ERROR(seg_->aborted());
    KOLO_REQUIRE(data != nullptr || bytes == 0, kInvalidArgument, "shm broadcast: null buffer");
    return collectives_.broadcast(data, bytes, root, timeout());
  }
  Status reducescatter(const void* send, void* recv, const std::vector<size_t>& recvCounts,
                       DataType dtype, ReduceOp op) override {
    KOLO_RETURN_IF_ERROR(seg_->aborted());
    return collectives_.reducescatter(send, recv, recvCounts, dtype, op, timeout());
  }

  Status split(const std::vector<int>& ranks, int32_t setId,
               std::unique_ptr<Transport>* out) override {
    KOLO_REQUIRE(out != nullptr, kInvalidArgument, "shm split: null output");
    out->reset();
    KOLO_RETURN_IF_ERROR(seg_->aborted());
    std::unique_ptr<Transport> subBase;
    KOLO_RETURN_IF_ERROR(base_->split(ranks, setId, &subBase));
    if (subBase == nullptr) return Status::ok();
    subBase->setTimeout(timeout());
    std::unique_ptr<Transport> sub;
    KOLO_RETURN_IF_ERROR(createShmTransport(&subBase, options_, &sub));
    sub->setTimeout(timeout());
    node_->adopt(static_cast<ShmTransport*>(sub.get())->node_);
    *out = std::move(sub);
    return Status::ok();
  }

  void abort(const Status& cause) override {
    node_->abort(cause);
    base_->abort(cause);
  }

  const Transport& base() const { return *base_; }

 private:
  std::unique_ptr<Transport> base_;
  std::shared_ptr<shm::Segment> seg_;
  std::shared_ptr<shm::P2PEngine> engine_;
  shm::Collectives collectives_;
  const ShmOptions options_;
  std::shared_ptr<AbortNode> node_;
};

}  // namespace

Status createShmTransport(std::unique_ptr<Transport>* base, const ShmOptions& options,
                          std::unique_ptr<Transport>* out) {
  KOLO_REQUIRE(base != nullptr && *base != nullptr && out != nullptr, kInvalidArgument,
               "createShmTransport: no base transport");
  out->reset();
  shm::SegmentOptions so;
  so.chunkBytes = options.chunkBytes;
  so.ringBytes = options.ringBytes;
  so.spin = options.spin;
  std::shared_ptr<shm::Segment> segment;
  KOLO_RETURN_IF_ERROR(shm::Segment::create(**base, so, &segment));
  const auto timeout = (*base)->timeout();
  auto t = std::make_unique<ShmTransport>(std::move(*base), std::move(segment), options);
  t->setTimeout(timeout);
  *out = std::move(t);
  return Status::ok();
}

Status applyShmConfig(const Config& cfg, std::unique_ptr<Transport>* transport) {
  KOLO_REQUIRE(transport != nullptr && *transport != nullptr, kInvalidArgument,
               "applyShmConfig: no transport");
  if (cfg.shm == ShmMode::kOff) return Status::ok();
  const int n = (*transport)->size();
  if (cfg.shm == ShmMode::kAuto &&
      (n < 2 || n > shm::kMaxRanks || (cfg.localSize > 0 && cfg.localSize != n))) {
    return Status::ok();
  }
  std::unique_ptr<Transport> wrapped;
  Status s = createShmTransport(transport, ShmOptions(), &wrapped);
  if (s.isOk()) {
    *transport = std::move(wrapped);
    return Status::ok();
  }
  if (cfg.shm == ShmMode::kOn) return Status(s.code(), "KOLO_SHM=on: " + s.message());
  // auto: a segment that some rank could not create or map means "not one host" -- every rank
  // got the same answer and keeps its base. Anything else is the base failing.
  if (s.code() == ErrorCode::kUnsupported || s.code() == ErrorCode::kIo) return Status::ok();
  return s;
}

const Transport& controlTransport(const Transport& t) {
  if (const auto* s = dynamic_cast<const ShmTransport*>(&t)) return s->base();
  return t;
}

}  // namespace kolo
