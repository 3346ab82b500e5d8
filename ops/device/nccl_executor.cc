// SPDX-License-Identifier: Apache-2.0
// NcclExecutor: submission checks, device choice, lazy communicator setup per process set, and
// the plumbing every batch shares (design in nccl_executor_impl.h; data paths in
// nccl_collectives.cc).
#include "ops/device/nccl_executor.h"

#include <algorithm>
#include <numeric>

#include "ops/handle.h"
#include "ops/device_plan.h"
#include "timeline/timeline.h"
#include "transport/poll_support.h"
#include "kernels/cuda_kernels.h"
#include "ops/device/nccl_executor_impl.h"

namespace kolo {
namespace {

// Split ids of the hierarchical cross transports, far above process-set ids (1, 2, ...).
constexpr int32_t kCrossSplitBase = int32_t{1} << 30;

std::chrono::milliseconds millis(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000.0));
}

// The timeline step of a batch, begun for every tensor of it and ended when it goes away.
class Activity {
 public:
  Activity(Timeline* tl, const std::vector<const Response*>& rs, const std::string& name)
      : tl_(tl != nullptr && tl->active() ? tl : nullptr), rs_(rs) {
    if (tl_ != nullptr) {
      for (const Response* r : rs_) tl_->activityStart(displayName(keyOf(*r)), name);
    }
  }
  ~Activity() {
    if (tl_ != nullptr) {
      for (const Response* r : rs_) tl_->activityEnd(displayName(keyOf(*r)));
    }
  }

 private:
  Timeline* tl_;
  const std::vector<const Response*>& rs_;
};

}  // namespace

Status createNcclExecutor(const Config& cfg, std::shared_ptr<Store> store,
                          std::unique_ptr<ops::DeviceExecutor>* out,
                          std::shared_ptr<CudaDeviceChoice> choice) {
  *out = std::make_unique<NcclExecutor>(cfg, std::move(store), std::move(choice));
  return Status::ok();
}

NcclExecutor::NcclExecutor(const Config& cfg, std::shared_ptr<Store> store,
                           std::shared_ptr<CudaDeviceChoice> choice)
    : CudaDeviceBase(cfg, std::move(choice)),
      store_(std::move(store)),
      host_(cfg.hostname.empty() ? localHostname() : cfg.hostname) {}

NcclExecutor::~NcclExecutor() {
  // Communicators first (their shutdown may still use the device), then the buffers. Every rank
  // closes them in the same order; once one finds its peers gone (or had failed), the others
  // are aborted at once instead of each waiting out its own finalize deadline.
  const auto limit =
      std::min<std::chrono::milliseconds>(millis(cfg_.timeoutSeconds), std::chrono::seconds(10));
  bool peersGone = false;
  inFlight_.clear();  // closing a communicator finishes or aborts its work
  for (auto& entry : sets_) {
    for (NcclTransport* t : {entry.second.local.get(), entry.second.all.get()}) {
      if (t == nullptr) continue;
      if (peersGone) t->abort(Status(ErrorCode::kShutdown, "kolo is shutting down"));
      if (!t->close(limit)) peersGone = true;
    }
  }
  sets_.clear();
}

// ---- setup
// ---------------------------------------------------------------------------------------

Status NcclExecutor::stateFor(const ProcessSet& set, int device, SetState** out) {
  auto it = sets_.find(set.id);
  if (it == sets_.end()) {
    SetState& st = sets_[set.id];
    Status s = setUp(set, device, &st);
    if (!s.isOk()) {
      st = SetState();
      st.broken = s;
      return s;
    }
    it = sets_.find(set.id);
  }
  KOLO_RETURN_IF_ERROR(it->second.broken);
  *out = &it->second;
  return Status::ok();
}

Status NcclExecutor::makeComm(const ProcessSet& set, int device, const std::vector<int>& members,
                              const std::string& kind, std::unique_ptr<NcclTransport>* out) {
  const int me = set.myIndex;
  const int root = members.front();
  const int groupRank =
      static_cast<int>(std::find(members.begin(), members.end(), me) - members.begin());
  const auto startTimeout = millis(cfg_.startTimeoutSeconds);
  std::vector<uint8_t> mine, id;
  if (me == root) KOLO_RETURN_IF_ERROR(NcclTransport::newUniqueId(&mine));
  const std::string prefix = "kolo/nccl/set" + std::to_string(set.id) + "/" + kind + "/";
  KOLO_RETURN_IF_ERROR(ops::shareFromRoots(*set.transport, store_.get(), prefix, mine,
                                           sizeof(ncclUniqueId), root, startTimeout, &id));
  std::vector<int> globalRanks;
  for (int m : members) globalRanks.push_back(set.ranks[m]);
  std::string label = "process set " + std::to_string(set.id);
  if (kind != "all") label += " (" + kind + " " + host_ + ")";
  KOLO_RETURN_IF_ERROR(NcclTransport::create(device, groupRank, static_cast<int>(members.size()),
                                             id, startTimeout, std::move(globalRanks), label, out));
  (*out)->setTimeout(millis(cfg_.timeoutSeconds));
  return Status::ok();
}

Status NcclExecutor::setUp(const ProcessSet& set, int device, SetState* st) {
  KOLO_REQUIRE(set.transport != nullptr && set.myIndex >= 0, kInternal,
               "device batch of process set " + std::to_string(set.id) + " on a non-member");
  if (!cfg_.hierarchicalAllreduce) return Status::ok();

  std::vector<std::string> hosts;
  KOLO_RETURN_IF_ERROR(ops::gatherStrings(*set.transport, host_, &hosts));
  ops::HostLayout layout;
  KOLO_RETURN_IF_ERROR(ops::planHosts(hosts, set.myIndex, &layout));
  // Uneven hosts would give unequal shards; every member sees the same layout, so all of them
  // fall back to the flat allreduce together.
  if (!layout.homogeneous) return Status::ok();
  KOLO_RETURN_IF_ERROR(makeComm(set, device, layout.local, "host", &st->local));
  if (layout.hosts > 1) {
    KOLO_REQUIRE(set.id < kCrossSplitBase, kInternal, "process set id too large");
    for (const auto& group : layout.cross) {  // collective: every member makes every split
      std::unique_ptr<Transport> part;
      KOLO_RETURN_IF_ERROR(set.transport->split(group, kCrossSplitBase + set.id, &part));
      if (part) st->cross = std::move(part);
    }
    KOLO_REQUIRE(st->cross != nullptr, kInternal, "no cross-host transport for this rank");
    st->cross->setTimeout(set.transport->timeout());
  }
  st->hierarchical = true;
  return Status::ok();
}

Status NcclExecutor::flatComm(const ProcessSet& set, int device, SetState* st) {
  if (st->all) return Status::ok();
  KOLO_RETURN_IF_ERROR(st->allBroken);
  std::vector<int> everyone(set.ranks.size());
  std::iota(everyone.begin(), everyone.end(), 0);
  Status s = makeComm(set, device, everyone, "all", &st->all);
  if (!s.isOk()) {
    st->all.reset();
    st->allBroken = s;
  }
  return s;
}

// ---- batch plumbing ----------------------------------------------------------------------------

Status NcclExecutor::waitReady(NcclTransport& t, const Entries& es) {
  auto after = [&t](const std::shared_ptr<void>& event, const char* what) {
    Status s = cuda::check(cudaStreamWaitEvent(t.stream(), cuda::eventOf(event), 0), what,
                           t.device());
    if (!s.isOk()) t.abort(s);
    return s;
  };
  if (lastDone_) {  // asynchronous completion: after the previous batch, on whichever stream
    KOLO_RETURN_IF_ERROR(after(lastDone_, "cudaStreamWaitEvent (previous batch)"));
  }
  for (TensorEntry* e : es) {
    if (e == nullptr || !e->readyEvent) continue;
    KOLO_RETURN_IF_ERROR(after(e->readyEvent, "cudaStreamWaitEvent (producer's ready event)"));
  }
  return Status::ok();
}

Status NcclExecutor::finish(NcclTransport& t, const Entries& es) {
  std::shared_ptr<void> done;
  Status s = cuda::makeEvent(t.device(), &done);
  if (s.isOk()) {
    s = cuda::check(cudaEventRecord(cuda::eventOf(done), t.stream()), "cudaEventRecord",
                    t.device());
  }
  if (!s.isOk()) {
    t.abort(s);
    return s;
  }
  for (TensorEntry* e : es) {
    if (e == nullptr) continue;
    e->handle->completionEvent = done;
    e->handle->completionDevice = t.device();
  }
  if (!cfg_.asyncCompletion) return t.waitEvent(cuda::eventOf(done), t.deadlineFromNow());

  // Asynchronous completion: the handles complete now. An owned output released while the work
  // writing it may still run is not freed then (cudaFree would wait for the device, on whatever
  // thread released it): it goes to frees_, which poll() empties as the work completes. Once
  // the executor is gone its communicators are closed, so the work has ended.
  std::weak_ptr<cuda::DeferredFrees> frees = frees_;
  for (TensorEntry* e : es) {
    if (e == nullptr || !e->handle->ownedDeviceOutput) continue;
    std::shared_ptr<void> mem = std::move(e->handle->ownedDeviceOutput);
    void* p = mem.get();
    e->handle->ownedDeviceOutput =
        std::shared_ptr<void>(p, [mem = std::move(mem), done, frees](void*) mutable {
          if (cudaEventQuery(cuda::eventOf(done)) != cudaErrorNotReady) return;  // free now
          if (auto f = frees.lock()) f->add(std::move(mem), std::move(done));
        });
  }
  inFlight_.push_back(InFlight{done, &t, t.deadlineFromNow()});
  lastDone_ = std::move(done);
  return poll();  // a failure already visible fails this batch too
}

// Batches run one after the other (each waits for lastDone_), so only the oldest one in flight
// is running; the others wait for it. Its deadline counts from when it could start: when it
// was queued, or when poll() saw the one before it complete.
Status NcclExecutor::poll() {
  frees_->reclaim();
  size_t kept = 0;
  bool headAdvanced = false;
  for (size_t i = 0; i < inFlight_.size(); ++i) {
    InFlight& f = inFlight_[i];
    const bool head = kept == 0;
    if (head && headAdvanced) f.deadline = std::max(f.deadline, f.transport->deadlineFromNow());
    bool done = false;
    Status s = f.transport->queryEvent(cuda::eventOf(f.event), head ? f.deadline : Deadline::max(),
                                       &done);
    if (!s.isOk()) return failInFlight(s);
    if (done) {
      headAdvanced = headAdvanced || head;
      continue;
    }
    if (i != kept) inFlight_[kept] = std::move(f);
    ++kept;
  }
  inFlight_.resize(kept);
  return Status::ok();
}

Status NcclExecutor::failInFlight(const Status& cause) {
  // Every communicator stops now: work of other sets queued behind the failed batch would
  // otherwise spin in its kernels (and keep consumer streams waiting) until shutdown.
  for (auto& entry : sets_) {
    for (NcclTransport* t : {entry.second.local.get(), entry.second.all.get()}) {
      if (t != nullptr) t->abortNow(cause);
    }
  }
  inFlight_.clear();
  lastDone_.reset();
  return cause;
}

Status NcclExecutor::drain() {
  Backoff backoff;
  while (!inFlight_.empty()) {
    KOLO_RETURN_IF_ERROR(poll());
    if (!inFlight_.empty()) backoff.pause();
  }
  frees_->reclaim();
  return Status::ok();
}

Status NcclExecutor::fusionBuffer(size_t bytes, void** out) {
  if (bytes > fusion_.capacity()) KOLO_RETURN_IF_ERROR(drain());
  return fusion_.reserve(bytes, out);
}

Status NcclExecutor::stagingBuffer(size_t bytes, void** out) {
  if (bytes > staging_.capacity()) KOLO_RETURN_IF_ERROR(drain());
  return staging_.reserve(bytes, out);
}

Status NcclExecutor::copies(NcclTransport& t, const std::vector<cuda::CopyDesc>& descs) {
  Status s = cuda::check(cuda::batchedCopy(descs.data(), descs.size(), t.stream()),
                         "batched copy kernel", t.device());
  if (!s.isOk()) t.abort(s);
  return s;
}

Status NcclExecutor::scale(NcclTransport& t, void* data, size_t count, DataType dtype,
                           double factor) {
  Status s =
      cuda::check(cuda::scale(data, count, dtype, factor, t.stream()), "scale kernel", t.device());
  if (!s.isOk()) t.abort(s);
  return s;
}

// ---- dispatch
// ------------------------------------------------------------------------------------

Status NcclExecutor::execute(const ops::ExecContext& ctx, const Batch& rs, const Entries& es) {
  if (rs.empty()) return Status::ok();
  int device = -1;
  KOLO_RETURN_IF_ERROR(executionDevice(&device));
  cuda::DeviceGuard g(device);
  KOLO_RETURN_IF_ERROR(g.status());
  fusion_.setDevice(device);
  SetState* st = nullptr;
  KOLO_RETURN_IF_ERROR(stateFor(*ctx.set, device, &st));
  const Response& first = *rs[0];
  // Only a hierarchical allreduce does without the communicator of every member.
  const bool hierarchical = first.type == OpType::kAllreduce && st->hierarchical &&
                            !cuda::needsKernelReduction(first.dtype);
  if (!hierarchical) KOLO_RETURN_IF_ERROR(flatComm(*ctx.set, device, st));
  switch (first.type) {
    case OpType::kAllreduce: {
      Activity a(ctx.timeline, rs, hierarchical ? "NCCL_HIERARCHICAL_ALLREDUCE" : "NCCL_ALLREDUCE");
      return runAllreduce(ctx, *st, rs, es);
    }
    case OpType::kAllgather: {
      Activity a(ctx.timeline, rs, "NCCL_ALLGATHER");
      return runAllgather(ctx, *st, rs, es);
    }
    case OpType::kBroadcast: {
      Activity a(ctx.timeline, rs, "NCCL_BROADCAST");
      return runBroadcast(ctx, *st, rs, *es[0]);
    }
    case OpType::kAlltoall: {
      Activity a(ctx.timeline, rs, "NCCL_ALLTOALL");
      return runAlltoall(ctx, *st, rs, *es[0]);
    }
    case OpType::kReducescatter: {
      Activity a(ctx.timeline, rs, "NCCL_REDUCESCATTER");
      return runReducescatter(ctx, *st, rs, *es[0]);
    }
    default:
      return Status(ErrorCode::kInternal,
                    std::string("device execute: no data path for ") + toString(first.type));
  }
}

}  // namespace kolo
