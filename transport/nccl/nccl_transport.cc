// SPDX-License-Identifier: Apache-2.0
// The NCCL transport (contract in nccl_transport.h). Why it is shaped like this:
//  - Non-blocking communicators: with a blocking one, ncclCommInitRank waits forever for a rank
//    that never comes and a collective with a dead peer never returns. Non-blocking calls return
//    ncclInProgress and we poll ncclCommGetAsyncError against the transport's deadline, which
//    gives every wait of the device path the same bound as the CPU transports'.
//  - Only the thread that uses the communicator calls ncclCommAbort (abort() from another thread
//    just raises a flag that the next poll sees): NCCL calls on one communicator must not race.
//  - Unequal allgatherv blocks go out as one NCCL group of broadcasts (one per root), unequal
//    reduce-scatter blocks as a group of reduces: NCCL's own allgather and reduce-scatter need
//    equal counts, and a group runs the pieces concurrently.
//  - Shutdown: ncclCommDestroy of a communicator that was not finalized is an intra-node
//    collective that can hang; we finalize against a deadline and abort when it runs out.
#include "transport/nccl/nccl_transport.h"

#include <algorithm>
#include <cstring>
#include <thread>

namespace kolo {
namespace {

// Polling cadence: yield for the first few hundred polls (small ops finish within
// microseconds), then sleep briefly so a long wait does not burn a core. Not
// transport/poll_support.h's Backoff on purpose: waitEvent is on every NCCL batch's path
// (ops/device/nccl_executor.cc), and Backoff's sleeps double up to 1 ms, which would let a
// sub-millisecond collective finish up to hundreds of microseconds before it is noticed; here
// the sleep stays at 20 us for the first ~4,000 polls. Change it only with GPU measurements.
void backoff(int spin) {
  if (spin < 512) {
    std::this_thread::yield();
  } else {
    std::this_thread::sleep_for(std::chrono::microseconds(spin < 4096 ? 20 : 200));
  }
}

std::string seconds(std::chrono::milliseconds ms) {
  if (ms.count() % 1000 == 0) return std::to_string(ms.count() / 1000) + " s";
  return std::to_string(ms.count()) + " ms";
}

// A posted batch of sends/receives: an event recorded after the NCCL group.
class NcclPending final : public PendingOps {
 public:
  NcclPending(NcclTransport* t, std::shared_ptr<void> event) : t_(t), event_(std::move(event)) {}
  ~NcclPending() override {
    if (!done_ && cudaEventQuery(cuda::eventOf(event_)) != cudaSuccess) {
      t_->abort(Status(ErrorCode::kAborted,
                       "a batch of NCCL sends/receives was abandoned before it completed"));
    }
  }
  Status test(bool* done) override {
    *done = false;
    KOLO_RETURN_IF_ERROR(t_->failure());
    cudaError_t e = cudaEventQuery(cuda::eventOf(event_));
    if (e == cudaErrorNotReady) return Status::ok();
    if (e != cudaSuccess) return t_->waitEvent(cuda::eventOf(event_), Clock::now());
    *done = done_ = true;
    return Status::ok();
  }
  Status wait(Deadline deadline) override {
    Status s = t_->waitEvent(cuda::eventOf(event_), deadline);
    done_ = s.isOk();
    return s;
  }

 private:
  NcclTransport* t_;
  std::shared_ptr<void> event_;
  bool done_ = false;
};

}  // namespace

Status NcclTransport::newUniqueId(std::vector<uint8_t>* out) {
  ncclUniqueId id;
  ncclResult_t r = ncclGetUniqueId(&id);
  if (r != ncclSuccess) {
    return Status(ErrorCode::kIo, std::string("ncclGetUniqueId failed: ") + ncclGetErrorString(r));
  }
  out->assign(reinterpret_cast<const uint8_t*>(&id),
              reinterpret_cast<const uint8_t*>(&id) + sizeof(id));
  return Status::ok();
}

Status NcclTransport::create(int device, int rank, int size, const std::vector<uint8_t>& id,
                             std::chrono::milliseconds timeout, std::vector<int> globalRanks,
                             const std::string& label, std::unique_ptr<NcclTransport>* out) {
  KOLO_REQUIRE(id.size() == sizeof(ncclUniqueId), kInvalidArgument,
               "an NCCL unique id has " + std::to_string(sizeof(ncclUniqueId)) + " bytes, got " +
                   std::to_string(id.size()));
  KOLO_REQUIRE(size >= 1 && rank >= 0 && rank < size, kInvalidArgument,
               "NCCL rank " + std::to_string(rank) + " of " + std::to_string(size));
  KOLO_REQUIRE(globalRanks.empty() || static_cast<int>(globalRanks.size()) == size,
               kInvalidArgument, "globalRanks must have one entry per rank");
  std::unique_ptr<NcclTransport> t(new NcclTransport());
  t->device_ = device;
  t->rank_ = rank;
  t->size_ = size;
  t->label_ = label;
  t->globalRanks_ = std::move(globalRanks);
  t->scratch_.setDevice(device);
  t->setTimeout(timeout);
  cuda::DeviceGuard g(device);
  KOLO_RETURN_IF_ERROR(g.status());
  KOLO_RETURN_IF_ERROR(cuda::check(cudaStreamCreateWithFlags(&t->stream_, cudaStreamNonBlocking),
                                   "cudaStreamCreate", device));
  KOLO_RETURN_IF_ERROR(cuda::makeEvent(device, &t->syncEvent_));
  ncclUniqueId uid;
  std::memcpy(&uid, id.data(), sizeof(uid));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  const Deadline deadline = Clock::now() + timeout;
  ncclResult_t r = ncclCommInitRankConfig(&t->comm_, size, uid, rank, &config);
  if (r != ncclSuccess && r != ncclInProgress) {
    Status s = t->ncclError(r, "ncclCommInitRankConfig");
    return t->comm_ != nullptr ? t->fail(s) : s;
  }
  for (int spin = 0;; ++spin) {
    ncclResult_t state = ncclSuccess;
    r = ncclCommGetAsyncError(t->comm_, &state);
    if (r != ncclSuccess) return t->fail(t->ncclError(r, "ncclCommGetAsyncError"));
    if (state == ncclSuccess) break;
    if (state != ncclInProgress) return t->fail(t->ncclError(state, "communicator setup"));
    if (Clock::now() >= deadline) {
      return t->fail(Status(ErrorCode::kTimeout,
                            t->describe() + ": not every rank joined within " + seconds(timeout) +
                                " (a rank is missing, or the unique id did not reach it)"));
    }
    backoff(spin);
  }
  *out = std::move(t);
  return Status::ok();
}

NcclTransport::~NcclTransport() {
  close(std::min<std::chrono::milliseconds>(timeout(), std::chrono::seconds(10)));
  cuda::DeviceGuard g(device_);
  if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
}

bool NcclTransport::close(std::chrono::milliseconds limit) {
  bool aborted;
  {
    std::lock_guard<std::mutex> lock(mu_);
    aborted = commAborted_;
    commAborted_ = true;  // from here on the communicator is gone either way
  }
  if (comm_ == nullptr || aborted) return false;
  cuda::DeviceGuard g(device_);
  bool clean = failure().isOk() && !abortRequested_.load();
  if (clean) {
    const Deadline deadline = Clock::now() + limit;
    ncclResult_t r = ncclCommFinalize(comm_);
    ncclResult_t state = r;
    for (int spin = 0; r == ncclSuccess || r == ncclInProgress; ++spin) {
      if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess || state != ncclInProgress) break;
      if (Clock::now() >= deadline) break;
      backoff(spin);
    }
    clean = state == ncclSuccess;
  }
  if (clean) {
    (void)ncclCommDestroy(comm_);
  } else {
    (void)ncclCommAbort(comm_);
  }
  comm_ = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failure_.isOk()) failure_ = Status(ErrorCode::kShutdown, describe() + " was closed");
  }
  return clean;
}

int NcclTransport::globalRank(int groupRank) const {
  if (globalRanks_.empty() || groupRank < 0 || groupRank >= size_) return groupRank;
  return globalRanks_[groupRank];
}

Capabilities NcclTransport::capabilities() const {
  Capabilities c;
  c.nativeAllreduce = c.nativeAllgatherv = c.nativeBroadcast = c.nativeAlltoallv =
      c.nativeReducescatter = true;
  c.deviceMemory = true;
  return c;
}

std::string NcclTransport::describe() const {
  return "NCCL communicator of " + label_ + " (rank " + std::to_string(rank_) + " of " +
         std::to_string(size_) + ", global rank " + std::to_string(globalRank(rank_)) +
         ", cuda:" + std::to_string(device_) + ")";
}

Status NcclTransport::failure() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failure_;
}

void NcclTransport::abort(const Status& cause) {
  std::lock_guard<std::mutex> lock(mu_);
  if (abortRequested_.load()) return;
  abortCause_ =
      cause.isOk() ? Status(ErrorCode::kAborted, "the NCCL transport was aborted") : cause;
  abortRequested_ = true;
}

void NcclTransport::abortNow(const Status& cause) {
  abort(cause);
  (void)usable();
}

Status NcclTransport::fail(const Status& cause) {
  bool doAbort = false;
  Status first;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failure_.isOk()) failure_ = cause;
    first = failure_;
    doAbort = comm_ != nullptr && !commAborted_;
    commAborted_ = true;
  }
  if (doAbort) {
    cuda::DeviceGuard g(device_);
    (void)ncclCommAbort(comm_);
    comm_ = nullptr;  // freed by the abort; only this thread reads it
  }
  return first;
}

Status NcclTransport::usable() {
  if (abortRequested_.load()) {
    Status cause;
    {
      std::lock_guard<std::mutex> lock(mu_);
      cause = abortCause_;
    }
    return fail(cause);
  }
  return failure();
}

Status NcclTransport::ncclError(ncclResult_t r, const char* what) {
  std::string msg = describe() + ": " + what + " failed: " + ncclGetErrorString(r);
  const char* last = ncclGetLastError(comm_);
  if (last != nullptr && *last != '\0') msg += " (" + std::string(last) + ")";
  // A remote error is a peer that died or dropped its connection; everything else leaves the
  // communicator unusable too, so both abort the runtime (kPeerLost / kIo).
  return Status(r == ncclRemoteError ? ErrorCode::kPeerLost : ErrorCode::kIo, msg);
}

Status NcclTransport::settle(ncclResult_t r, const char* what, Deadline deadline) {
  if (r != ncclSuccess && r != ncclInProgress) return fail(ncclError(r, what));
  for (int spin = 0;; ++spin) {
    if (abortRequested_.load()) return usable();
    ncclResult_t state = ncclSuccess;
    ncclResult_t q = ncclCommGetAsyncError(comm_, &state);
    if (q != ncclSuccess) return fail(ncclError(q, "ncclCommGetAsyncError"));
    if (state == ncclSuccess) return Status::ok();
    if (state != ncclInProgress) return fail(ncclError(state, what));
    if (Clock::now() >= deadline) {
      return fail(
          Status(ErrorCode::kTimeout,
                 describe() + ": " + what + " was not accepted within " + seconds(timeout())));
    }
    backoff(spin);
  }
}

Status NcclTransport::queryEvent(cudaEvent_t event, Deadline deadline, bool* done) {
  *done = false;
  KOLO_RETURN_IF_ERROR(usable());
  Status s = cuda::queryEvent(event, done, "device work failed");
  if (!s.isOk()) return fail(Status(s.code(), describe() + ": " + s.message()));
  if (*done) return Status::ok();
  ncclResult_t state = ncclSuccess;
  ncclResult_t q = ncclCommGetAsyncError(comm_, &state);
  if (q != ncclSuccess) return fail(ncclError(q, "ncclCommGetAsyncError"));
  if (state != ncclSuccess && state != ncclInProgress) {
    return fail(ncclError(state, "an operation in flight"));
  }
  if (Clock::now() >= deadline) {
    return fail(Status(ErrorCode::kTimeout,
                       describe() + ": device work did not complete within " +
                           seconds(timeout()) +
                           "; a peer is lost or stuck (the communicator was aborted)"));
  }
  return Status::ok();
}

Status NcclTransport::waitEvent(cudaEvent_t event, Deadline deadline) {
  for (int spin = 0;; ++spin) {
    bool done = false;
    KOLO_RETURN_IF_ERROR(queryEvent(event, deadline, &done));
    if (done) return Status::ok();
    backoff(spin);
  }
}

Status NcclTransport::synchronize(Deadline deadline) {
  KOLO_RETURN_IF_ERROR(usable());
  cuda::DeviceGuard g(device_);
  Status s =
      cuda::check(cudaEventRecord(cuda::eventOf(syncEvent_), stream_), "cudaEventRecord", device_);
  if (!s.isOk()) return fail(s);
  return waitEvent(cuda::eventOf(syncEvent_), deadline);
}

// ---- the Transport interface: enqueue, then wait ---------------------------------------------

Status NcclTransport::post(const std::vector<P2POp>& ops, std::unique_ptr<PendingOps>* out) {
  KOLO_REQUIRE(out != nullptr, kInvalidArgument, "nccl post: null output");
  for (const P2POp& op : ops) {
    KOLO_REQUIRE(op.peer >= 0 && op.peer < size_, kInvalidArgument,
                 "nccl post: peer " + std::to_string(op.peer) + " outside group of " +
                     std::to_string(size_));
    KOLO_REQUIRE(op.data != nullptr || op.bytes == 0, kInvalidArgument,
                 "nccl post: null buffer for " + std::to_string(op.bytes) + " bytes");
  }
  KOLO_RETURN_IF_ERROR(usable());
  cuda::DeviceGuard g(device_);
  KOLO_RETURN_IF_ERROR(g.status());
  std::shared_ptr<void> event;
  KOLO_RETURN_IF_ERROR(cuda::makeEvent(device_, &event));
  ncclResult_t first = ncclGroupStart();
  if (first != ncclSuccess) return fail(ncclError(first, "ncclGroupStart"));
  for (const P2POp& op : ops) {
    if (op.bytes == 0) continue;
    ncclResult_t x = op.kind == P2POp::Kind::kSend
                         ? ncclSend(op.data, op.bytes, ncclUint8, op.peer, comm_, stream_)
                         : ncclRecv(op.data, op.bytes, ncclUint8, op.peer, comm_, stream_);
    if (first == ncclSuccess && x != ncclSuccess && x != ncclInProgress) first = x;
  }
  ncclResult_t end = ncclGroupEnd();
  KOLO_RETURN_IF_ERROR(
      settle(first != ncclSuccess ? first : end, "ncclSend/ncclRecv", deadlineFromNow()));
  Status s =
      cuda::check(cudaEventRecord(cuda::eventOf(event), stream_), "cudaEventRecord", device_);
  if (!s.isOk()) return fail(s);
  *out = std::make_unique<NcclPending>(this, std::move(event));
  return Status::ok();
}

Status NcclTransport::split(const std::vector<int>& ranks, int32_t setId,
                            std::unique_ptr<Transport>* out) {
  KOLO_REQUIRE(out != nullptr, kInvalidArgument, "nccl split: null output");
  out->reset();
  for (size_t i = 0; i < ranks.size(); ++i) {
    KOLO_REQUIRE(ranks[i] >= 0 && ranks[i] < size_ && (i == 0 || ranks[i - 1] < ranks[i]),
                 kInvalidArgument, "nccl split: ranks must be ascending, unique, in the group");
  }
  KOLO_RETURN_IF_ERROR(usable());
  cuda::DeviceGuard g(device_);
  KOLO_RETURN_IF_ERROR(g.status());
  auto mine = std::lower_bound(ranks.begin(), ranks.end(), rank_);
  const bool member = mine != ranks.end() && *mine == rank_;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t child = nullptr;
  const Deadline deadline = deadlineFromNow();
  KOLO_RETURN_IF_ERROR(
      settle(ncclCommSplit(comm_, member ? 0 : NCCL_SPLIT_NOCOLOR, rank_, &child, &config),
             "ncclCommSplit", deadline));
  if (!member) return Status::ok();
  std::unique_ptr<NcclTransport> t(new NcclTransport());
  t->device_ = device_;
  t->rank_ = static_cast<int>(mine - ranks.begin());
  t->size_ = static_cast<int>(ranks.size());
  t->label_ = label_ + " / split " + std::to_string(setId);
  for (int r : ranks) t->globalRanks_.push_back(globalRank(r));
  t->comm_ = child;
  t->scratch_.setDevice(device_);
  t->setTimeout(timeout());
  if (child == nullptr) {
    return Status(ErrorCode::kIo, describe() + ": ncclCommSplit returned no communicator");
  }
  // From here on a failure aborts the child (its destructor would otherwise finalize it).
  Status s = cuda::check(cudaStreamCreateWithFlags(&t->stream_, cudaStreamNonBlocking),
                         "cudaStreamCreate", device_);
  if (s.isOk()) s = cuda::makeEvent(device_, &t->syncEvent_);
  if (!s.isOk()) return t->fail(s);
  KOLO_RETURN_IF_ERROR(t->settle(ncclInProgress, "ncclCommSplit (new communicator)", deadline));
  *out = std::move(t);
  return Status::ok();
}

}  // namespace kolo
