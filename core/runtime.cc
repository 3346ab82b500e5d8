// SPDX-License-Identifier: Apache-2.0
#include "core/runtime.h"

#include <cmath>
#include <condition_variable>
#include <limits>
#include <mutex>

#include "bootstrap/registry.h"
#include "transport/shm/shm_transport.h"

namespace kolo {

// The Progress every handle of this runtime carries: a waiting caller runs a round itself
// (Coordinator::runRoundOnCaller). detach() waits for a caller inside advance() and turns later
// calls into refusals, so the coordinator can stop and be destroyed under it.
class WaiterRounds final : public Progress {
 public:
  explicit WaiterRounds(Coordinator* c) : c_(c) {}
  bool advance(Deadline deadline) override {
    Coordinator* c;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (c_ == nullptr) return false;
      c = c_;
      ++inside_;
    }
    const bool ran = c->runRoundOnCaller(deadline);
    {
      std::lock_guard<std::mutex> lock(mu_);
      --inside_;
    }
    left_.notify_all();
    return ran;
  }
  bool deferCallback(std::function<void()> fn) override {
    std::lock_guard<std::mutex> lock(mu_);
    return c_ != nullptr && c_->deferCallback(std::move(fn));
  }
  bool postCallback(std::function<void()> fn) override {
    std::lock_guard<std::mutex> lock(mu_);
    return c_ != nullptr && c_->postCallback(std::move(fn));
  }
  bool onRuntimeThread() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return c_ != nullptr && c_->inCallback();
  }
  void detach() {
    std::unique_lock<std::mutex> lock(mu_);
    c_ = nullptr;
    left_.wait(lock, [&] { return inside_ == 0; });
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable left_;
  Coordinator* c_;  // (mu_) null once detached
  int inside_ = 0;  // (mu_) callers inside advance()
};

namespace {

constexpr size_t kMaxNameBytes = 1024;
// The names of the runtime's own ops (kJoinName is in ops/message.h), reserved for them.
constexpr const char* kBarrierName = "__barrier";
constexpr const char* kAddSetName = "__process_set.add";
constexpr const char* kRemoveSetName = "__process_set.remove";
// kolo_refuse's group size: it builds one entry per member without any array from the caller.
constexpr int32_t kMaxRefusedGroup = 1 << 20;
constexpr size_t kMaxDims = 16;

std::chrono::milliseconds millis(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000.0));
}

}  // namespace

Status Runtime::create(const Config& config, int64_t initCount, std::unique_ptr<Runtime>* out) {
  BootstrapResult boot;
  KOLO_RETURN_IF_ERROR(bootstrap(config, initCount, &boot));
  return createFrom(std::move(boot), out);
}

Status Runtime::createFrom(BootstrapResult boot, std::unique_ptr<Runtime>* out) {
  KOLO_REQUIRE(boot.transport != nullptr, kInvalidArgument,
               "Runtime::createFrom: the bootstrap result has no transport");
  std::unique_ptr<Runtime> rt(new Runtime());
  KOLO_RETURN_IF_ERROR(rt->start(std::move(boot)));
  *out = std::move(rt);
  return Status::ok();
}

Status Runtime::start(BootstrapResult boot) {
  config_ = boot.config;
  topo_ = boot.topology;
  store_ = std::move(boot.store);
  device_ = std::move(boot.device);
  transport_ = std::move(boot.transport);
  transport_->setTimeout(millis(config_.timeoutSeconds));
  log_ = makeLogger(topo_.rank, config_.logLevel);
  if (topo_.rank == 0) log_->debug("configuration:\n{}", config_.toString());
  if (boot.round > 0) log_->info("rendezvous round {}", boot.round);
  sets_ = std::make_unique<ProcessSetTable>(transport_.get(), topo_.rank, topo_.size);
  if (!config_.timelinePath.empty()) {
    // A later rendezvous round (a re-init, an elastic reset) continues the file the earlier
    // rounds wrote, after a RESET marker; round 0 starts it afresh.
    const Timeline::Reset* reset = nullptr;
    Timeline::Reset r{boot.round, topo_.rank, topo_.size};
    if (boot.round > 0) reset = &r;
    // A file that cannot be written costs the timeline, not the job (Horovod logs it and runs
    // on): failing init here would leave the other ranks with a peer that vanished.
    Status opened = openTimeline(config_.timelinePath, config_.timelineMarkCycles, reset);
    if (!opened.isOk()) {
      log_->error("KOLO_TIMELINE: {}; the job runs without a timeline", opened.message());
    }
  }
  Coordinator::Deps deps;
  deps.config = config_;
  deps.rank = topo_.rank;
  deps.size = topo_.size;
  deps.global = transport_.get();
  deps.sets = sets_.get();
  deps.queue = &queue_;
  deps.timeline = &timeline_;
  deps.device = device_.get();
  deps.hosts = std::move(boot.hosts);
  deps.log = log_;
  coordinator_ = std::make_unique<Coordinator>(std::move(deps));
  coordinator_->start();
  waiterRounds_ = std::make_shared<WaiterRounds>(coordinator_.get());
  return Status::ok();
}

Runtime::~Runtime() { shutdown().ignore(); }

const char* Runtime::controllerName() const { return controlTransport(*transport_).name(); }

Status Runtime::shutdown() {
  if (coordinator_ && coordinator_->inCallback()) {
    // A completion callback (on the coordinator's thread) or an output allocator (inside a
    // round, on any thread): the shutdown would wait for that thread or round to end (a
    // self-join, or a detach that never returns).
    return Status(ErrorCode::kInvalidArgument,
                  "shutdown was called inside a completion callback or an output allocator, "
                  "which runs on kolo's own thread or round that the shutdown would wait for; "
                  "call it once the callback has returned (from another thread)");
  }
  {
    std::lock_guard<std::mutex> lock(countersMu_);
    if (shutDown_) return Status::ok();
    shutDown_ = true;
  }
  // Waiters first: one inside a round finishes it, later waits block until the coordinator
  // thread completes their handles (the shutdown fails what is left).
  if (waiterRounds_) waiterRounds_->detach();
  if (coordinator_) coordinator_->shutdown();
  stopTimeline();
  return Status::ok();
}

Status Runtime::startTimeline(const std::string& path, bool markCycles) {
  return openTimeline(path, markCycles, nullptr);
}

Status Runtime::openTimeline(const std::string& path, bool markCycles,
                             const Timeline::Reset* reset) {
  auto open = [&](const std::string& p) {
    return reset != nullptr ? timeline_.resume(p, markCycles, *reset)
                            : timeline_.start(p, markCycles, topo_.rank);
  };
  if (path.empty()) return Status(ErrorCode::kInvalidArgument, "timeline path is empty");
  if (config_.timelineAllRanks) {
    std::string p = path;
    auto dot = p.rfind('.');
    auto slash = p.rfind('/');
    std::string tag = "." + std::to_string(topo_.rank);
    if (dot != std::string::npos && (slash == std::string::npos || dot > slash)) {
      p.insert(dot, tag);
    } else {
      p += tag;
    }
    return open(p);
  }
  if (topo_.rank != 0) return Status::ok();
  return open(path);
}

void Runtime::stopTimeline() {
  // What the file lost is said once, when it closes (Horovod logs its timeline's write errors).
  if (timeline_.active() && log_) {
    Status written = timeline_.writeStatus();
    if (!written.isOk()) {
      log_->error("timeline: {}; the events after that error are not in the file",
                  written.message());
    }
    if (uint64_t dropped = timeline_.droppedEvents()) {
      log_->warn("timeline: {} events were dropped (the writer fell behind)", dropped);
    }
  }
  timeline_.stop();
}

bool Runtime::deviceEnabled() const { return device_ != nullptr && deviceTransportAvailable(); }

const char* Runtime::deviceOperations() const { return device_ ? device_->name() : ""; }

// ---- validation ----------------------------------------------------------------------------

std::string Runtime::where(const char* op, const std::string& name) const {
  return std::string(op) + " '" + name + "' on rank " + std::to_string(topo_.rank) + ": ";
}

Status Runtime::usable() const {
  if (!coordinator_) return Status(ErrorCode::kNotInitialized, "kolo is not initialized");
  Status t = coordinator_->terminalStatus();
  if (!t.isOk()) {
    if (t.code() == ErrorCode::kShutdown) return t;
    return Status(ErrorCode::kAborted, "the runtime aborted earlier: " + t.toString());
  }
  return Status::ok();
}

Status Runtime::admit(const char* op, const std::string& name, int32_t processSet,
                      ProcessSet* set) const {
  Status state = usable();  // after a shutdown or an abort: which op was refused, too
  if (!state.isOk()) return Status(state.code(), where(op, name) + state.message());
  auto bad = [&](const std::string& what) {
    return Status(ErrorCode::kInvalidArgument, where(op, name) + what);
  };
  if (name.empty()) return bad("the name is empty");
  if (name.size() > kMaxNameBytes) {
    return bad("the name is " + std::to_string(name.size()) + " bytes long (at most " +
               std::to_string(kMaxNameBytes) + ")");
  }
  if (name.find('\0') != std::string::npos) return bad("the name contains a NUL byte");
  // The runtime's own ops' names: a user op under one would meet a barrier, join or set change
  // in negotiation (same key, another op type).
  if (name == kBarrierName || name == kJoinName || name == kAddSetName || name == kRemoveSetName) {
    if (std::string(op) != "barrier") return bad("the name is reserved for kolo's own ops");
  }
  if (!sets_->get(processSet, set)) {
    return bad("process set " + std::to_string(processSet) + " does not exist");
  }
  if (set->myIndex < 0) {
    return bad("this rank is not a member of process set " + std::to_string(processSet));
  }
  return Status::ok();
}

Status Runtime::checkTensor(const char* op, const std::string& name, const TensorView& t) const {
  auto bad = [&](const std::string& what) {
    return Status(ErrorCode::kInvalidArgument, where(op, name) + what);
  };
  if (!isValid(t.dtype)) return bad("unknown dtype " + std::to_string(static_cast<int>(t.dtype)));
  if (t.shape.size() > kMaxDims) {
    return bad("the tensor has " + std::to_string(t.shape.size()) + " dimensions (at most 16)");
  }
  int64_t n = 1;
  const int64_t limit = std::numeric_limits<int64_t>::max() / 8;
  for (size_t i = 0; i < t.shape.size(); ++i) {
    int64_t d = t.shape[i];
    if (d < 0)
      return bad("dimension " + std::to_string(i) + " is negative (" + std::to_string(d) + ")");
    if (d != 0 && n > limit / d) return bad("the shape " + shapeToString(t.shape) + " overflows");
    n *= d;
  }
  if (n > 0 && t.data == nullptr) return bad("the tensor data pointer is NULL");
  if (t.device < kCpuDevice) {
    return bad("device " + std::to_string(t.device) + " is invalid (-1 = host, >= 0 = CUDA)");
  }
  if (t.device != kCpuDevice && device_ == nullptr) {
    return Status(ErrorCode::kUnsupported,
                  where(op, name) + "device " + std::to_string(t.device) +
                      " tensors need the NCCL/CUDA path, which this build does not include");
  }
  return Status::ok();
}

std::unique_ptr<TensorEntry> Runtime::makeEntry(OpType type, const std::string& name,
                                                const TensorView& t, int32_t processSet) const {
  auto e = std::make_unique<TensorEntry>();
  e->request.rank = topo_.rank;
  e->request.type = type;
  e->request.name = name;
  e->request.dtype = t.dtype;
  e->request.shape = t.shape;
  e->request.device = t.device;
  e->request.processSet = processSet;
  e->input = t;
  e->handle = std::make_shared<HandleState>();
  e->handle->setProgress(waiterRounds_);
  return e;
}

Status Runtime::prepareDevice(TensorEntry* e, const std::string& op) const {
  if (e->input.device < 0) return Status::ok();
  Status s =
      device_->prepare(e->input, e->output.data != nullptr ? &e->output : nullptr, &e->readyEvent);
  if (s.isOk()) return s;
  return Status(s.code(), where(op.c_str(), e->request.name) + s.message());
}

Status Runtime::enqueue(std::unique_ptr<TensorEntry> e, HandlePtr* handle) {
  KOLO_RETURN_IF_ERROR(prepareDevice(e.get(), toString(e->request.type)));
  HandlePtr h = e->handle;
  KOLO_RETURN_IF_ERROR(queue_.add(std::move(e)));
  *handle = h;
  return Status::ok();
}

Status Runtime::refuse(std::unique_ptr<TensorEntry> e, Status why) {
  std::vector<std::unique_ptr<TensorEntry>> one;
  one.push_back(std::move(e));
  return sendRefusal(std::move(one), std::move(why), false, nullptr);
}

namespace {
// A check's message without the "<op> '<name>' on rank R: " it starts with: the other ranks
// read it after their own "<op> '<name>': rank R could not submit it: ".
std::string reasonAfter(const std::string& prefix, const Status& why) {
  const std::string& m = why.message();
  std::string r = m.compare(0, prefix.size(), prefix) == 0 ? m.substr(prefix.size()) : m;
  return r.empty() ? "refused" : r;
}
}  // namespace

Status Runtime::refuseInput(std::vector<std::unique_ptr<TensorEntry>> entries, Status why,
                            const std::string& reason, bool grouped, Status* sent) {
  for (auto& e : entries) {
    // The request carries no tensor: its values may be what failed (an unknown dtype or reduce
    // op would not even decode on rank 0), and the Negotiator compares none of them.
    Request& r = e->request;
    r.dtype = DataType::kUInt8;
    r.shape.clear();
    r.reduceOp = ReduceOp::kSum;
    r.prescale = r.postscale = 1.0;
    r.root = 0;
    r.device = kCpuDevice;
    r.splits.clear();
    r.refusal = reason;
  }
  return sendRefusal(std::move(entries), std::move(why), grouped, sent);
}

Status Runtime::refuseGroup(const std::string& name, int32_t groupSize, int64_t groupId,
                            int32_t processSet, Status why, const std::string& reason,
                            Status* sent) {
  std::vector<std::unique_ptr<TensorEntry>> entries;
  for (int32_t i = 0; i < groupSize; ++i) {
    auto e =
        makeEntry(OpType::kAllreduce, name + "." + std::to_string(i), TensorView(), processSet);
    e->request.groupId = static_cast<int32_t>(groupId);
    e->request.groupSize = groupSize;
    entries.push_back(std::move(e));
  }
  return refuseInput(std::move(entries), std::move(why), reason, true, sent);
}

Status Runtime::refuseOp(OpType type, const std::string& name, int32_t groupSize,
                         int32_t processSet, const std::string& reason, Status* refusal) {
  const bool grouped = type == OpType::kAllreduce && groupSize > 0;
  const char* op = grouped ? "grouped_allreduce" : toString(type);
  switch (type) {
    case OpType::kAllreduce:
    case OpType::kAllgather:
    case OpType::kBroadcast:
    case OpType::kAlltoall:
    case OpType::kReducescatter:
      break;
    default:
      return Status(ErrorCode::kInvalidArgument,
                    where(op, name) + "only a collective on a tensor can be refused");
  }
  if (grouped && groupSize > kMaxRefusedGroup) {
    return Status(ErrorCode::kInvalidArgument,
                  where(op, name) + "a group of " + std::to_string(groupSize) +
                      " tensors (at most " + std::to_string(kMaxRefusedGroup) + ")");
  }
  // The same names as the op itself: the group's members are "<name>.<i>".
  ProcessSet set;
  for (int32_t i = 0; i < (grouped ? groupSize : 1); ++i) {
    KOLO_RETURN_IF_ERROR(
        admit(op, grouped ? name + "." + std::to_string(i) : name, processSet, &set));
  }
  const std::string text = reason.empty() ? "refused" : reason;
  Status why(ErrorCode::kInvalidArgument, where(op, name) + text);
  Status sent;
  if (!grouped) {
    std::vector<std::unique_ptr<TensorEntry>> one;
    one.push_back(makeEntry(type, name, TensorView(), processSet));
    *refusal = refuseInput(std::move(one), std::move(why), text, false, &sent);
    return sent;
  }
  int64_t groupId;
  {
    std::lock_guard<std::mutex> lock(countersMu_);
    groupId = groupCount_++;
  }
  *refusal = refuseGroup(name, groupSize, groupId, processSet, std::move(why), text, &sent);
  return sent;
}

Status Runtime::refuseOne(std::unique_ptr<TensorEntry> e, Status why, const std::string& prefix) {
  std::vector<std::unique_ptr<TensorEntry>> one;
  one.push_back(std::move(e));
  const std::string reason = reasonAfter(prefix, why);
  return refuseInput(std::move(one), std::move(why), reason, false, nullptr);
}

Status Runtime::sendRefusal(std::vector<std::unique_ptr<TensorEntry>> entries, Status why,
                            bool grouped, Status* sent) {
  // A handle that only waits: this thread must not run rounds (other ops' callbacks and
  // allocators would run inside this submission); the coordinator's thread brings the error.
  auto h = std::make_shared<HandleState>();
  if (grouped) h->expectParts(static_cast<int>(entries.size()));
  for (auto& e : entries) {
    e->input.data = nullptr;  // an error response never reaches the data path; nothing to read
    e->output = TensorView();
    e->allocate = nullptr;
    e->refused = true;
    e->handle = h;
  }
  // A name in flight (the caller's mistake too) sends nothing.
  Status added = queue_.addGroup(std::move(entries));
  if (sent != nullptr) *sent = added;
  if (!added.isOk()) return why;
  // Wait a moment for the agreed error: when every rank refused, it comes at once and the name
  // is free again when the caller gets `why`, so that a retry under the same name works on
  // every rank alike. Bounded: the others may never submit the op (until they do, a retry here
  // is refused as a duplicate that says why). Not from a completion callback: its round cannot
  // move on while the callback waits.
  if (!coordinator_->inCallback()) {
    (void)h->wait(Deadline(Clock::now() + std::chrono::seconds(1)));
  }
  return why;
}

namespace {
// "float32 [4, 2] on the host", "float16 [8] on CUDA device 1"
std::string describe(const TensorView& t) {
  std::string s = std::string(toString(t.dtype)) + " " + shapeToString(t.shape);
  return t.device >= 0 ? s + " on CUDA device " + std::to_string(t.device) : s + " on the host";
}

// An allreduce's output into e->output: none, or the input's own memory, is in place;
// otherwise it must have the input's dtype, shape and device. kolo.h: only a tensor without
// elements may have a NULL data pointer, so a NULL output is a mistake, not in place.
Status takeOutput(const std::string& where, const TensorView* output, TensorEntry* e) {
  if (output == nullptr) return Status::ok();
  const TensorView& input = e->input;
  if (output->data == nullptr && output->numElements() != 0) {
    return Status(ErrorCode::kInvalidArgument, where + "the output tensor data pointer is NULL");
  }
  if (output->data == nullptr || output->data == input.data) return Status::ok();
  if (output->dtype != input.dtype || output->shape != input.shape ||
      output->device != input.device) {
    return Status(ErrorCode::kInvalidArgument, where + "the output (" + describe(*output) +
                                                   ") does not match the input (" +
                                                   describe(input) + ")");
  }
  e->output = *output;
  return Status::ok();
}

Status checkScales(const std::string& where, ReduceOp op, double prescale, double postscale) {
  if (!isValidUserOp(op)) {
    return Status(ErrorCode::kInvalidArgument,
                  where + "unknown reduce op " + std::to_string(static_cast<int>(op)));
  }
  if (!std::isfinite(prescale) || !std::isfinite(postscale)) {
    return Status(ErrorCode::kInvalidArgument, where + "scale factors must be finite");
  }
  return Status::ok();
}

// Adasum (ops/adasum.h) is an allreduce of float host tensors only.
Status checkAdasum(const std::string& where, OpType type, ReduceOp op, const TensorView& t) {
  if (op != ReduceOp::kAdasum) return Status::ok();
  if (type != OpType::kAllreduce) {
    return Status(ErrorCode::kInvalidArgument,
                  where + "op adasum is only supported by allreduce and grouped allreduce");
  }
  if (!isFloatingPoint(t.dtype)) {
    return Status(ErrorCode::kInvalidArgument,
                  where + "op adasum needs a float16, bfloat16, float32 or float64 tensor; got " +
                      toString(t.dtype));
  }
  if (t.device >= 0) {
    return Status(ErrorCode::kUnsupported,
                  where + "op adasum runs on host tensors only; this tensor is on CUDA device " +
                      std::to_string(t.device) + " (copy it to the host; kolo.torch does so)");
  }
  return Status::ok();
}
}  // namespace

// ---- ops -----------------------------------------------------------------------------------

Status Runtime::allreduce(const std::string& name, const TensorView& input,
                          const TensorView* output, ReduceOp op, double prescale, double postscale,
                          int32_t processSet, HandlePtr* handle) {
  ProcessSet set;
  KOLO_RETURN_IF_ERROR(admit("allreduce", name, processSet, &set));
  auto e = makeEntry(OpType::kAllreduce, name, input, processSet);
  e->request.reduceOp = op;
  e->request.prescale = prescale;
  e->request.postscale = postscale;
  const std::string at = where("allreduce", name);
  Status s = checkTensor("allreduce", name, input);
  if (s.isOk()) s = checkScales(at, op, prescale, postscale);
  if (s.isOk()) s = checkAdasum(at, OpType::kAllreduce, op, input);
  if (s.isOk()) s = takeOutput(at, output, e.get());
  if (!s.isOk()) return refuseOne(std::move(e), std::move(s), at);
  return enqueue(std::move(e), handle);
}

Status Runtime::groupedAllreduce(const std::string& name, const std::vector<TensorView>& inputs,
                                 const std::vector<TensorView>* outputs, ReduceOp op,
                                 double prescale, double postscale, int32_t processSet,
                                 HandlePtr* handle) {
  if (inputs.empty()) {
    return Status(ErrorCode::kInvalidArgument,
                  where("grouped_allreduce", name) + "the group has no tensors");
  }
  // The members are named "<name>.<i>" and checked as such; the group's own name first, so
  // that an empty or too long one is refused as the group's (kolo.h: names are required).
  const size_t suffix = 1 + std::to_string(inputs.size() - 1).size();
  if (name.empty()) {
    return Status(ErrorCode::kInvalidArgument,
                  where("grouped_allreduce", name) + "the name is empty");
  }
  if (name.size() + suffix > kMaxNameBytes) {
    return Status(ErrorCode::kInvalidArgument,
                  where("grouped_allreduce", name.substr(0, 64) + "...") + "the name is " +
                      std::to_string(name.size()) + " bytes long; a group of " +
                      std::to_string(inputs.size()) + " tensors allows at most " +
                      std::to_string(kMaxNameBytes - suffix) +
                      " (its members are named '<name>.<index>')");
  }
  const auto n = static_cast<int32_t>(inputs.size());
  std::vector<std::string> members(inputs.size());
  for (int32_t i = 0; i < n; ++i) {
    members[i] = name + "." + std::to_string(i);
    ProcessSet set;
    KOLO_RETURN_IF_ERROR(admit("grouped_allreduce", members[i], processSet, &set));
  }
  int64_t groupId;
  {
    std::lock_guard<std::mutex> lock(countersMu_);
    groupId = groupCount_++;
  }
  // A member this rank cannot submit refuses the whole group (the others wait for all of it).
  auto refuseAll = [&](Status why, const std::string& reason) {
    return refuseGroup(name, n, groupId, processSet, std::move(why), reason, nullptr);
  };
  if (outputs && outputs->size() != inputs.size()) {
    const std::string what = "outputs and inputs differ in count";
    return refuseAll(Status(ErrorCode::kInvalidArgument, where("grouped_allreduce", name) + what),
                     what);
  }
  auto shared = std::make_shared<HandleState>();
  shared->setProgress(waiterRounds_);
  shared->expectParts(n);
  std::vector<std::unique_ptr<TensorEntry>> entries;
  for (int32_t i = 0; i < n; ++i) {
    const std::string& member = members[i];
    // Each member is checked exactly like a single allreduce (without enqueueing it).
    const std::string at = where("grouped_allreduce", member);
    auto e = makeEntry(OpType::kAllreduce, member, inputs[i], processSet);
    Status s = checkTensor("grouped_allreduce", member, inputs[i]);
    if (s.isOk()) s = checkScales(at, op, prescale, postscale);
    if (s.isOk()) s = checkAdasum(at, OpType::kAllreduce, op, inputs[i]);
    if (s.isOk()) s = takeOutput(at, outputs ? &(*outputs)[i] : nullptr, e.get());
    if (!s.isOk()) {
      const std::string reason = "its tensor " + std::to_string(i) + ": " + reasonAfter(at, s);
      return refuseAll(std::move(s), reason);
    }
    e->request.reduceOp = op;
    e->request.prescale = prescale;
    e->request.postscale = postscale;
    e->request.groupId = static_cast<int32_t>(groupId);
    e->request.groupSize = n;
    e->handle = shared;
    KOLO_RETURN_IF_ERROR(prepareDevice(e.get(), "grouped_allreduce"));
    entries.push_back(std::move(e));
  }
  KOLO_RETURN_IF_ERROR(queue_.addGroup(std::move(entries)));
  *handle = shared;
  return Status::ok();
}

Status Runtime::allgather(const std::string& name, const TensorView& input, OutputAllocator alloc,
                          int32_t processSet, HandlePtr* handle) {
  ProcessSet set;
  KOLO_RETURN_IF_ERROR(admit("allgather", name, processSet, &set));
  auto e = makeEntry(OpType::kAllgather, name, input, processSet);
  Status s = checkTensor("allgather", name, input);
  if (!s.isOk()) return refuseOne(std::move(e), std::move(s), where("allgather", name));
  if (input.shape.empty()) {
    return refuse(std::move(e), Status(ErrorCode::kInvalidArgument,
                                       where("allgather", name) +
                                           "a scalar (0-dimensional) tensor cannot be "
                                           "gathered along dimension 0; reshape it to [1]"));
  }
  e->allocate = std::move(alloc);
  return enqueue(std::move(e), handle);
}

Status Runtime::broadcast(const std::string& name, const TensorView& tensor, int32_t root,
                          int32_t processSet, HandlePtr* handle) {
  ProcessSet set;
  KOLO_RETURN_IF_ERROR(admit("broadcast", name, processSet, &set));
  auto e = makeEntry(OpType::kBroadcast, name, tensor, processSet);
  Status s = checkTensor("broadcast", name, tensor);
  if (!s.isOk()) return refuseOne(std::move(e), std::move(s), where("broadcast", name));
  e->request.root = root;
  if (root < 0 || root >= static_cast<int32_t>(set.ranks.size())) {
    return refuse(std::move(e),
                  Status(ErrorCode::kInvalidArgument,
                         where("broadcast", name) + "root " + std::to_string(root) +
                             " is outside [0, " + std::to_string(set.ranks.size()) + ")"));
  }
  return enqueue(std::move(e), handle);
}

Status Runtime::alltoall(const std::string& name, const TensorView& input,
                         const std::vector<int64_t>& splits, OutputAllocator alloc,
                         int32_t processSet, HandlePtr* handle) {
  ProcessSet set;
  KOLO_RETURN_IF_ERROR(admit("alltoall", name, processSet, &set));
  const auto n = static_cast<int64_t>(set.ranks.size());
  auto e = makeEntry(OpType::kAlltoall, name, input, processSet);
  Status checked = checkTensor("alltoall", name, input);
  if (!checked.isOk()) return refuseOne(std::move(e), std::move(checked), where("alltoall", name));
  // Refusals go to negotiation with the splits as given (none: dimension 0 does not divide),
  // which the Negotiator's per-rank checks refuse with this rank's values.
  e->request.splits = splits;
  auto bad = [&](const std::string& what) {
    return refuse(std::move(e),
                  Status(ErrorCode::kInvalidArgument, where("alltoall", name) + what));
  };
  if (input.shape.empty()) return bad("a scalar (0-dimensional) tensor cannot be split");
  std::vector<int64_t> s = splits;
  if (s.empty()) {
    if (input.shape[0] % n != 0) {
      return bad("dimension 0 (" + std::to_string(input.shape[0]) + ") is not divisible by the " +
                 std::to_string(n) + " ranks; pass splits");
    }
    s.assign(n, input.shape[0] / n);
  }
  if (static_cast<int64_t>(s.size()) != n) {
    return bad("got " + std::to_string(s.size()) + " splits for a set of " + std::to_string(n) +
               " ranks");
  }
  int64_t sum = 0;
  for (int64_t x : s) {
    if (x < 0) return bad("a split is negative");
    sum += x;
  }
  // As Horovod: the splits may cover fewer rows than dimension 0 (the rest are not sent).
  if (sum > input.shape[0]) {
    return bad("splits sum to " + std::to_string(sum) + ", more than dimension 0 (" +
               std::to_string(input.shape[0]) + ")");
  }
  e->request.splits = s;
  e->allocate = std::move(alloc);
  return enqueue(std::move(e), handle);
}

Status Runtime::reducescatter(const std::string& name, const TensorView& input, ReduceOp op,
                              double prescale, double postscale, OutputAllocator alloc,
                              int32_t processSet, HandlePtr* handle) {
  ProcessSet set;
  KOLO_RETURN_IF_ERROR(admit("reducescatter", name, processSet, &set));
  auto e = makeEntry(OpType::kReducescatter, name, input, processSet);
  e->request.reduceOp = op;
  e->request.prescale = prescale;
  e->request.postscale = postscale;
  const std::string at = where("reducescatter", name);
  Status s = checkTensor("reducescatter", name, input);
  if (s.isOk()) s = checkScales(at, op, prescale, postscale);
  if (s.isOk()) s = checkAdasum(at, OpType::kReducescatter, op, input);
  if (!s.isOk()) return refuseOne(std::move(e), std::move(s), at);
  if (input.shape.empty()) {
    return refuse(std::move(e), Status(ErrorCode::kInvalidArgument,
                                       where("reducescatter", name) +
                                           "a scalar (0-dimensional) tensor cannot be scattered "
                                           "along dimension 0"));
  }
  e->allocate = std::move(alloc);
  return enqueue(std::move(e), handle);
}

Status Runtime::barrier(int32_t processSet, HandlePtr* handle) {
  // One name per process set, as Horovod's BARRIER_TENSOR_NAME: a rank has at most one barrier
  // of a set in flight (a second one is refused as a duplicate), and every member's next
  // barrier matches, whatever happened before. Numbered barriers drifted apart when a joined
  // rank was excused from one: its next barrier was number k, the others' k + 1, a hang.
  TensorView none;
  none.dtype = DataType::kUInt8;
  none.shape = {0};
  ProcessSet set;
  KOLO_RETURN_IF_ERROR(admit("barrier", kBarrierName, processSet, &set));
  return enqueue(makeEntry(OpType::kBarrier, kBarrierName, none, processSet), handle);
}

Status Runtime::join(HandlePtr* handle) {
  KOLO_RETURN_IF_ERROR(usable());
  TensorView none;
  none.dtype = DataType::kUInt8;
  none.shape = {0};
  return enqueue(makeEntry(OpType::kJoin, kJoinName, none, 0), handle);
}

Status Runtime::addProcessSet(const std::vector<int32_t>& ranks, HandlePtr* handle) {
  KOLO_RETURN_IF_ERROR(usable());
  KOLO_RETURN_IF_ERROR(validateProcessSetRanks(ranks, topo_.size));
  TensorView none;
  none.dtype = DataType::kUInt8;
  // One name for every add (and one for every remove), not a per-rank count: an add refused on
  // some ranks only (a joined rank was not there to submit it) must not leave the ranks'
  // counts apart, which made every later add a hang. The ops are not cached, and a rank has at
  // most one of each pending (a second at once is refused as a duplicate name).
  auto e = makeEntry(OpType::kAddProcessSet, kAddSetName, none, 0);
  // The rank list travels as the "shape" (so the response carries it) and as splits (checked).
  e->request.shape.assign(ranks.begin(), ranks.end());
  e->request.splits = e->request.shape;
  return enqueue(std::move(e), handle);
}

Status Runtime::removeProcessSet(int32_t id, HandlePtr* handle) {
  KOLO_RETURN_IF_ERROR(usable());
  if (id == 0) {
    return Status(ErrorCode::kInvalidArgument, "the global process set (id 0) cannot be removed");
  }
  if (!sets_->contains(id)) {
    return Status(ErrorCode::kInvalidArgument,
                  "process set " + std::to_string(id) + " does not exist");
  }
  TensorView none;
  none.dtype = DataType::kUInt8;
  auto e = makeEntry(OpType::kRemoveProcessSet, kRemoveSetName, none, 0);
  e->request.shape = {id};
  e->request.splits = e->request.shape;
  return enqueue(std::move(e), handle);
}

}  // namespace kolo
