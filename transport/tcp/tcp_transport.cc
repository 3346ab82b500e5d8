// SPDX-License-Identifier: Apache-2.0
// The TCP transport's batches, split and creation (the engine is tcp_mesh.cc).
#include "transport/tcp/tcp_transport.h"

#include <algorithm>

#include "transport/tcp/tcp_mesh.h"

namespace kolo {
namespace tcp_detail {
namespace {

class Batch final : public PendingOps {
 public:
  Batch(std::shared_ptr<Mesh> mesh, const std::vector<P2POp>& ops)
      : mesh_(std::move(mesh)), ops_(ops.size()), posted_(Clock::now()) {
    for (size_t i = 0; i < ops.size(); ++i) {
      Op& op = ops_[i];
      op.recv = ops[i].kind == P2POp::Kind::kRecv;
      op.peer = ops[i].peer;
      op.tag = ops[i].tag;
      op.data = static_cast<uint8_t*>(ops[i].data);
      op.bytes = ops[i].bytes;
      op.open = &open_;
    }
    open_ = ops_.size();
  }

  ~Batch() override {
    if (open_ == 0) return;
    // A posted receive cannot be withdrawn (the peer's message would later meet another
    // receive), nor a half-written message: the group is done for, and its peers must know.
    const std::string abandoned = "tcp: a batch was abandoned with " + std::to_string(open_) +
                                  " operation(s) outstanding (" + outstanding() + ")";
    mesh_->abandon(lastTimeout_.isOk()
                       ? Status(ErrorCode::kAborted, abandoned)
                       : Status(ErrorCode::kTimeout, lastTimeout_.message() + "; " + abandoned));
  }

  Status start() {
    std::vector<Op*> ptrs;
    ptrs.reserve(ops_.size());
    for (Op& op : ops_) ptrs.push_back(&op);
    return mesh_->post(ptrs);
  }

  Status test(bool* done) override {
    *done = open_ == 0;
    if (*done) return Status::ok();
    KOLO_RETURN_IF_ERROR(mesh_->progress(Clock::time_point{}));
    *done = open_ == 0;
    return Status::ok();
  }

  Status wait(Deadline deadline) override {
    for (;;) {
      if (open_ == 0) return Status::ok();
      if (Clock::now() >= deadline) {
        // A last look without blocking (a deadline already past, or data that just came).
        KOLO_RETURN_IF_ERROR(mesh_->progress(Clock::time_point{}));
        return open_ == 0 ? Status::ok() : timedOut(deadline);
      }
      KOLO_RETURN_IF_ERROR(mesh_->progress(deadline));
    }
  }

 private:
  Status timedOut(Deadline deadline) {
    // A quarter of the time this batch was given (about the transport timeout), <= 1 s.
    const auto grace = std::min<std::chrono::milliseconds>(
        std::chrono::milliseconds(1000),
        std::chrono::duration_cast<std::chrono::milliseconds>((deadline - posted_) / 4));
    lastTimeout_ = mesh_->explainTimeout(
        outstandingPeers(), Status(ErrorCode::kTimeout, "tcp: timed out waiting for " + outstanding()),
        grace);
    return lastTimeout_;
  }

  // Peers of unfinished ops, those we receive from first (a send may only wait for a peer that
  // is itself waiting for someone else).
  std::vector<int> outstandingPeers() const {
    std::vector<int> peers;
    for (int pass = 0; pass < 2; ++pass) {
      for (const Op& op : ops_) {
        if (op.done || op.recv != (pass == 0)) continue;
        if (std::find(peers.begin(), peers.end(), op.peer) == peers.end()) peers.push_back(op.peer);
      }
    }
    return peers;
  }

  std::string outstanding() const {
    std::vector<std::pair<int, bool>> open;
    for (const Op& op : ops_) {
      if (!op.done) open.emplace_back(op.peer, op.recv);
    }
    return describeOutstanding(open, mesh_->globalRanks());
  }

  std::shared_ptr<Mesh> mesh_;
  std::vector<Op> ops_;  // never resized: the mesh points at its elements
  size_t open_ = 0;
  Clock::time_point posted_;
  Status lastTimeout_;
};

}  // namespace
}  // namespace tcp_detail

using tcp_detail::Mesh;

TcpTransport::TcpTransport(std::shared_ptr<Mesh> mesh) : mesh_(std::move(mesh)) {}

TcpTransport::~TcpTransport() = default;

int TcpTransport::rank() const { return mesh_->rank(); }
int TcpTransport::size() const { return mesh_->size(); }

int TcpTransport::globalRank(int groupRank) const {
  if (groupRank < 0 || groupRank >= mesh_->size()) return -1;
  return mesh_->globalRanks()[static_cast<size_t>(groupRank)];
}

Status TcpTransport::post(const std::vector<P2POp>& ops, std::unique_ptr<PendingOps>* out) {
  if (mesh_->aborted()) return mesh_->abortCause();
  // Validate everything first: once an op is posted, a failure abandons the batch.
  for (const P2POp& op : ops) {
    KOLO_REQUIRE(op.peer >= 0 && op.peer < mesh_->size() && op.peer != mesh_->rank(),
                 kInvalidArgument,
                 "tcp: peer " + std::to_string(op.peer) + " is not another rank of a group of " +
                     std::to_string(mesh_->size()));
    KOLO_REQUIRE(op.bytes == 0 || op.data != nullptr, kInvalidArgument,
                 "tcp: a null buffer for " + std::to_string(op.bytes) + " bytes");
  }
  auto batch = std::make_unique<tcp_detail::Batch>(mesh_, ops);
  KOLO_RETURN_IF_ERROR(batch->start());
  *out = std::move(batch);
  return Status::ok();
}

Status TcpTransport::split(const std::vector<int>& ranks, int32_t setId,
                           std::unique_ptr<Transport>* out) {
  *out = nullptr;
  if (mesh_->aborted()) return mesh_->abortCause();
  KOLO_RETURN_IF_ERROR(checkSplitRanks(*this, ranks));
  const std::string prefix = "set" + std::to_string(setId) + "." + std::to_string(splits_++) + "/";
  auto it = std::lower_bound(ranks.begin(), ranks.end(), mesh_->rank());
  if (it == ranks.end() || *it != mesh_->rank()) return Status::ok();
  std::vector<int> globals;
  for (int r : ranks) globals.push_back(mesh_->globalRanks()[static_cast<size_t>(r)]);
  std::shared_ptr<Mesh> child;
  KOLO_RETURN_IF_ERROR(tcp_detail::connectMesh(
      makePrefixStore(mesh_->store(), prefix), static_cast<int>(it - ranks.begin()),
      static_cast<int>(ranks.size()), mesh_->listenAddress(), timeout(), std::move(globals),
      &child));
  mesh_->addChild(child);
  if (mesh_->aborted()) child->abortWith(mesh_->abortCause());  // raced with an abort
  auto t = std::make_unique<TcpTransport>(std::move(child));
  t->setTimeout(timeout());
  *out = std::move(t);
  return Status::ok();
}

void TcpTransport::abort(const Status& cause) {
  mesh_->abortWith(cause.isOk() ? Status(ErrorCode::kAborted, "tcp: aborted") : cause);
}

void TcpTransport::setAbortListener(std::function<void(const Status&)> listener) {
  mesh_->setAbortListener(listener);
  // Aborted before anyone listened: tell the new listener at once (it must be idempotent).
  if (mesh_->aborted() && listener) listener(mesh_->abortCause());
}

Status TcpTransport::closedConnection(const Status& direct) const {
  return mesh_->closedConnection(direct);
}

Status TcpTransport::abortCause() const {
  return mesh_->aborted() ? mesh_->abortCause() : Status::ok();
}

Status createTcpTransport(std::shared_ptr<Store> store, int rank, int size,
                          const std::string& iface, const std::string& hostnameOrAddr,
                          std::chrono::milliseconds timeout, std::unique_ptr<TcpTransport>* out) {
  *out = nullptr;
  KOLO_REQUIRE(store != nullptr, kInvalidArgument, "tcp: a rendezvous store is required");
  KOLO_REQUIRE(size >= 1 && rank >= 0 && rank < size, kInvalidArgument,
               "tcp: rank " + std::to_string(rank) + " of size " + std::to_string(size));
  KOLO_REQUIRE(timeout.count() > 0, kInvalidArgument, "tcp: the timeout must be positive");
  tcp_detail::SocketAddress where;
  KOLO_RETURN_IF_ERROR(tcp_detail::resolveListenAddress(iface, hostnameOrAddr, &where));
  std::shared_ptr<Store> groupStore;
  KOLO_RETURN_IF_ERROR(makeGenerationStore(store, "kolo/tcp", size, &groupStore));
  std::vector<int> globals(static_cast<size_t>(size));
  for (int i = 0; i < size; ++i) globals[static_cast<size_t>(i)] = i;
  std::shared_ptr<Mesh> mesh;
  KOLO_RETURN_IF_ERROR(
      tcp_detail::connectMesh(groupStore, rank, size, where, timeout, std::move(globals), &mesh));
  *out = std::make_unique<TcpTransport>(std::move(mesh));
  (*out)->setTimeout(timeout);
  return Status::ok();
}

}  // namespace kolo
