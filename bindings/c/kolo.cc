// SPDX-License-Identifier: Apache-2.0
// The C API: converts C structs to kolo types, keeps the handle table, and holds the only
// process-wide singleton of kolo (the current Runtime). Every function catches everything:
// no C++ exception crosses this boundary.
#define KOLO_BUILDING_LIBRARY 1
#include "bindings/c/kolo.h"

#include <pthread.h>

#include <atomic>
#include <cmath>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <unordered_map>

#include "bootstrap/registry.h"
#include "core/runtime.h"
#include "kolo/build_config.h"

namespace {

using kolo::ErrorCode;
using kolo::HandlePtr;
using kolo::Status;

struct HandleRecord {
  HandlePtr state;
  std::string errorText;
};

// The singleton: the current runtime (shared so a concurrent shutdown cannot free it under a
// running call) and the handle table.
struct Api {
  std::mutex mu;
  std::shared_ptr<kolo::Runtime> rt;
  int generation = 0;
  std::mutex handlesMu;
  std::unordered_map<int64_t, std::shared_ptr<HandleRecord>> handles;
  int64_t nextHandle = 1;
  // Set in a child fork()ed after kolo_init (pthread_atfork): `rt` is the parent's, whose
  // threads do not exist here. The child's calls fail, its shutdown (an atexit handler) leaves
  // the copy alone, and its own kolo_init starts a runtime of its own.
  std::atomic<bool> forkedChild{false};
};

Api& api() {
  static Api* instance = new Api();  // never destroyed: safe to use from atexit handlers
  return *instance;
}

thread_local std::string tlsError;

int fail(const Status& s) {
  tlsError = s.toString();
  return static_cast<int>(s.code());
}

int report(const Status& s) {
  if (s.isOk()) return KOLO_OK;
  return fail(s);
}

int invalid(const std::string& what) { return fail(Status(ErrorCode::kInvalidArgument, what)); }

std::shared_ptr<kolo::Runtime> runtime() {
  std::lock_guard<std::mutex> lock(api().mu);
  if (api().forkedChild) return nullptr;
  return api().rt;
}

Status notInitialized() {
  if (api().forkedChild) {
    return Status(ErrorCode::kNotInitialized,
                  "kolo was initialized in the parent of this forked process; its runtime does "
                  "not run here (call kolo in the parent, or kolo_init in this process for a "
                  "runtime of its own)");
  }
  return Status(ErrorCode::kNotInitialized, "kolo is not initialized (call kolo_init first)");
}

Status toView(const kolo_tensor_t* t, const char* what, kolo::TensorView* out) {
  if (t == nullptr) return Status(ErrorCode::kInvalidArgument, std::string(what) + " is NULL");
  if (t->ndim < 0 || t->ndim > KOLO_MAX_DIMS) {
    return Status(ErrorCode::kInvalidArgument,
                  std::string(what) + " has ndim " + std::to_string(t->ndim) + " (0.." +
                      std::to_string(KOLO_MAX_DIMS) + ")");
  }
  if (t->ndim > 0 && t->shape == nullptr) {
    return Status(ErrorCode::kInvalidArgument, std::string(what) + " has a NULL shape");
  }
  out->data = t->data;
  out->dtype = static_cast<kolo::DataType>(t->dtype);
  out->shape.assign(t->shape, t->shape + t->ndim);
  out->device = t->device;
  out->stream = t->stream;
  return Status::ok();
}

std::string nameOf(const char* name) { return name == nullptr ? std::string() : std::string(name); }

// An argument this rank got wrong (a NULL tensor, a bad ndim, negative n_splits) fails the call
// here, and the op is refused (Runtime::refuseOp), so that the set's other ranks fail at once
// naming this rank instead of waiting for it. Returns the refusal ("<op> '<name>' on rank R:
// <what>"), or `bad` itself when nothing could be sent (a bad name or set says less than it).
Status refused(kolo::Runtime& rt, kolo::OpType type, const char* name, int32_t groupSize,
               int32_t processSet, const Status& bad) {
  Status refusal;
  return rt.refuseOp(type, nameOf(name), groupSize, processSet, bad.message(), &refusal).isOk()
             ? refusal
             : bad;
}

kolo::OutputAllocator allocator(kolo_alloc_fn fn, void* user) {
  if (fn == nullptr) return {};
  return [fn, user](size_t bytes, const std::vector<int64_t>& shape) -> void* {
    return fn(user, bytes, static_cast<int32_t>(shape.size()), shape.data());
  };
}

// Registers the handle and attaches the callback.
int publish(const HandlePtr& state, kolo_callback_t cb, void* user, kolo_handle_t* out) {
  auto rec = std::make_shared<HandleRecord>();
  rec->state = state;
  int64_t id;
  {
    std::lock_guard<std::mutex> lock(api().handlesMu);
    id = api().nextHandle++;
    api().handles[id] = rec;
  }
  *out = id;
  if (cb != nullptr) {
    state->setCallback([cb, user, id](const Status& s) {
      cb(id, static_cast<kolo_status_t>(s.code()), user);
    });
  }
  return KOLO_OK;
}

std::shared_ptr<HandleRecord> lookup(kolo_handle_t h) {
  std::lock_guard<std::mutex> lock(api().handlesMu);
  if (api().forkedChild) return nullptr;  // the parent's ops: they never complete here
  auto it = api().handles.find(h);
  return it == api().handles.end() ? nullptr : it->second;
}

int unknownHandle(kolo_handle_t h) {
  if (api().forkedChild) return fail(notInitialized());
  return invalid("handle " + std::to_string(h) + " is unknown (released, never issued or forged)");
}

// Runs a submission: checks init and the out pointer, converts exceptions.
template <typename Fn>
int submit(kolo_handle_t* handle, kolo_callback_t cb, void* user, Fn&& fn) {
  try {
    if (handle == nullptr) return invalid("the handle output pointer is NULL");
    *handle = 0;
    auto rt = runtime();
    if (!rt) return fail(notInitialized());
    HandlePtr state;
    Status s = fn(*rt, &state);
    if (!s.isOk()) return fail(s);
    return publish(state, cb, user, handle);
  } catch (const std::exception& e) {
    return fail(Status(ErrorCode::kInternal, e.what()));
  } catch (...) {
    return fail(Status(ErrorCode::kInternal, "unknown exception"));
  }
}

// In a child forked after init (a DataLoader worker) the parent's runtime object is here, its
// threads are not: its topology is plain data, so the child keeps the parent's rank and size,
// as Horovod's forked workers do (a worker that shards by rank), while its ops fail.
int topo(int kolo::Topology::*field) {
  std::lock_guard<std::mutex> lock(api().mu);
  return api().rt ? api().rt->topology().*field : -1;
}

}  // namespace

extern "C" {

int kolo_init(void) {
  try {
    std::lock_guard<std::mutex> lock(api().mu);
    if (api().forkedChild) {
      // The parent's runtime, copied by fork: never destroyed here (its destructor would join
      // threads this process does not have and remove the parent's shared memory).
      new std::shared_ptr<kolo::Runtime>(std::move(api().rt));
      // The parent's handles too: they lead to its coordinator (a wait would run its rounds).
      std::lock_guard<std::mutex> handlesLock(api().handlesMu);
      new std::unordered_map<int64_t, std::shared_ptr<HandleRecord>>(std::move(api().handles));
      api().handles.clear();
      api().forkedChild = false;
    }
    if (api().rt) return KOLO_OK;
    static std::once_flag atfork;
    std::call_once(atfork, [] {
      // handlesMu is held only briefly and never around other code: taken across the fork, so
      // the handle table is whole in the child. mu is held across kolo_init (whose MPI start
      // may fork and exec): the child starts it over unlocked instead (single-threaded there;
      // a lock another thread held would never be released).
      pthread_atfork([] { api().handlesMu.lock(); }, [] { api().handlesMu.unlock(); },
                     [] {
                       api().handlesMu.unlock();
                       new (&api().mu) std::mutex();
                       if (api().rt) api().forkedChild = true;
                     });
    });
    kolo::Config cfg;
    Status s = kolo::Config::fromEnvironment(&cfg);
    if (!s.isOk()) return fail(s);
    std::unique_ptr<kolo::Runtime> rt;
    s = kolo::Runtime::create(cfg, api().generation++, &rt);
    if (!s.isOk()) return fail(s);
    api().rt = std::move(rt);
    return KOLO_OK;
  } catch (const std::exception& e) {
    return fail(Status(ErrorCode::kInternal, std::string("init: ") + e.what()));
  }
}

int kolo_shutdown(void) {
  std::shared_ptr<kolo::Runtime> rt;
  {
    std::lock_guard<std::mutex> lock(api().mu);
    if (api().forkedChild) return KOLO_OK;  // the parent's runtime: not this process's to stop
    // Inside a completion callback the runtime refuses (and stays this process's runtime).
    if (api().rt && api().rt->insideRound()) return report(api().rt->shutdown());
    rt.swap(api().rt);
  }
  if (rt) return report(rt->shutdown());
  return KOLO_OK;
}

int kolo_is_initialized(void) { return runtime() ? 1 : 0; }
const char* kolo_last_error(void) { return tlsError.c_str(); }
const char* kolo_status_string(int status) {
  return kolo::toString(static_cast<ErrorCode>(status));
}
const char* kolo_version(void) { return KOLO_VERSION_STRING; }

int kolo_rank(void) { return topo(&kolo::Topology::rank); }
int kolo_size(void) { return topo(&kolo::Topology::size); }
int kolo_local_rank(void) { return topo(&kolo::Topology::localRank); }
int kolo_local_size(void) { return topo(&kolo::Topology::localSize); }
int kolo_cross_rank(void) { return topo(&kolo::Topology::crossRank); }
int kolo_cross_size(void) { return topo(&kolo::Topology::crossSize); }

int kolo_mpi_built(void) { return kolo::transportBuilt(kolo::TransportKind::kMpi) ? 1 : 0; }
int kolo_gloo_built(void) { return kolo::transportBuilt(kolo::TransportKind::kGloo) ? 1 : 0; }
int kolo_nccl_built(void) { return KOLO_HAVE_NCCL ? KOLO_NCCL_VERSION_CODE : 0; }
int kolo_cuda_built(void) { return KOLO_HAVE_CUDA; }
int kolo_mpi_enabled(void) {
  auto rt = runtime();
  return rt && std::string(rt->controllerName()) == "mpi" ? 1 : 0;
}
int kolo_gloo_enabled(void) {
  auto rt = runtime();
  return rt && std::string(rt->controllerName()) == "gloo" ? 1 : 0;
}
int kolo_nccl_enabled(void) {
  auto rt = runtime();
  return rt && rt->deviceEnabled() && std::string(rt->deviceOperations()) != "host" ? 1 : 0;
}
const char* kolo_transport_name(void) {
  auto rt = runtime();
  return rt ? rt->transportName() : "";
}

int kolo_allreduce_async(const char* name, const kolo_tensor_t* input, const kolo_tensor_t* output,
                         kolo_reduce_op_t op, double prescale, double postscale,
                         int32_t process_set, kolo_callback_t cb, void* cb_user,
                         kolo_handle_t* handle) {
  return submit(handle, cb, cb_user, [&](kolo::Runtime& rt, HandlePtr* h) {
    kolo::TensorView in, out;
    Status v = toView(input, "input tensor", &in);
    if (v.isOk() && output != nullptr) v = toView(output, "output tensor", &out);
    if (!v.isOk()) return refused(rt, kolo::OpType::kAllreduce, name, 0, process_set, v);
    return rt.allreduce(nameOf(name), in, output ? &out : nullptr,
                        static_cast<kolo::ReduceOp>(op), prescale, postscale, process_set, h);
  });
}

int kolo_grouped_allreduce_async(const char* name, int32_t n, const kolo_tensor_t* inputs,
                                 const kolo_tensor_t* outputs, kolo_reduce_op_t op,
                                 double prescale, double postscale, int32_t process_set,
                                 kolo_callback_t cb, void* cb_user, kolo_handle_t* handle) {
  return submit(handle, cb, cb_user, [&](kolo::Runtime& rt, HandlePtr* h) {
    if (n <= 0) {  // no group size to refuse the group by
      return Status(ErrorCode::kInvalidArgument,
                    "grouped_allreduce '" + nameOf(name) + "': needs n > 0 input tensors");
    }
    auto bad = [&](const Status& v) {
      return refused(rt, kolo::OpType::kAllreduce, name, n, process_set, v);
    };
    if (inputs == nullptr) return bad(Status(ErrorCode::kInvalidArgument, "inputs is NULL"));
    std::vector<kolo::TensorView> ins(n), outs;
    for (int32_t i = 0; i < n; ++i) {
      Status v = toView(&inputs[i], "input tensor", &ins[i]);
      if (!v.isOk()) return bad(v);
    }
    if (outputs != nullptr) {
      outs.resize(n);
      for (int32_t i = 0; i < n; ++i) {
        Status v = toView(&outputs[i], "output tensor", &outs[i]);
        if (!v.isOk()) return bad(v);
      }
    }
    return rt.groupedAllreduce(nameOf(name), ins, outputs ? &outs : nullptr,
                               static_cast<kolo::ReduceOp>(op), prescale, postscale, process_set,
                               h);
  });
}

int kolo_allgather_async(const char* name, const kolo_tensor_t* input, kolo_alloc_fn alloc,
                         void* alloc_user, int32_t process_set, kolo_callback_t cb, void* cb_user,
                         kolo_handle_t* handle) {
  return submit(handle, cb, cb_user, [&](kolo::Runtime& rt, HandlePtr* h) {
    kolo::TensorView in;
    Status v = toView(input, "input tensor", &in);
    if (!v.isOk()) return refused(rt, kolo::OpType::kAllgather, name, 0, process_set, v);
    return rt.allgather(nameOf(name), in, allocator(alloc, alloc_user), process_set, h);
  });
}

int kolo_broadcast_async(const char* name, const kolo_tensor_t* tensor, int32_t root,
                         int32_t process_set, kolo_callback_t cb, void* cb_user,
                         kolo_handle_t* handle) {
  return submit(handle, cb, cb_user, [&](kolo::Runtime& rt, HandlePtr* h) {
    kolo::TensorView t;
    Status v = toView(tensor, "tensor", &t);
    if (!v.isOk()) return refused(rt, kolo::OpType::kBroadcast, name, 0, process_set, v);
    return rt.broadcast(nameOf(name), t, root, process_set, h);
  });
}

int kolo_alltoall_async(const char* name, const kolo_tensor_t* input, const int32_t* splits,
                        int32_t n_splits, kolo_alloc_fn alloc, void* alloc_user,
                        int32_t process_set, kolo_callback_t cb, void* cb_user,
                        kolo_handle_t* handle) {
  return submit(handle, cb, cb_user, [&](kolo::Runtime& rt, HandlePtr* h) {
    kolo::TensorView in;
    Status v = toView(input, "input tensor", &in);
    if (v.isOk() && splits != nullptr && n_splits < 0) {
      v = Status(ErrorCode::kInvalidArgument, "n_splits is negative");
    }
    if (!v.isOk()) return refused(rt, kolo::OpType::kAlltoall, name, 0, process_set, v);
    std::vector<int64_t> s;
    if (splits != nullptr) {
      s.assign(splits, splits + n_splits);
    }
    return rt.alltoall(nameOf(name), in, s, allocator(alloc, alloc_user), process_set, h);
  });
}

int kolo_reducescatter_async(const char* name, const kolo_tensor_t* input, kolo_reduce_op_t op,
                             double prescale, double postscale, kolo_alloc_fn alloc,
                             void* alloc_user, int32_t process_set, kolo_callback_t cb,
                             void* cb_user, kolo_handle_t* handle) {
  return submit(handle, cb, cb_user, [&](kolo::Runtime& rt, HandlePtr* h) {
    kolo::TensorView in;
    Status v = toView(input, "input tensor", &in);
    if (!v.isOk()) return refused(rt, kolo::OpType::kReducescatter, name, 0, process_set, v);
    return rt.reducescatter(nameOf(name), in, static_cast<kolo::ReduceOp>(op), prescale,
                            postscale, allocator(alloc, alloc_user), process_set, h);
  });
}

int kolo_barrier_async(int32_t process_set, kolo_callback_t cb, void* cb_user,
                       kolo_handle_t* handle) {
  return submit(handle, cb, cb_user,
                [&](kolo::Runtime& rt, HandlePtr* h) { return rt.barrier(process_set, h); });
}

int kolo_join_async(kolo_callback_t cb, void* cb_user, kolo_handle_t* handle) {
  return submit(handle, cb, cb_user, [&](kolo::Runtime& rt, HandlePtr* h) { return rt.join(h); });
}

int kolo_refuse(kolo_collective_t op, const char* name, int32_t group_size, int32_t process_set,
                const char* reason) {
  try {
    auto rt = runtime();
    if (!rt) return fail(notInitialized());
    kolo::OpType type;
    int32_t groupSize = 0;
    switch (op) {
      case KOLO_COLLECTIVE_ALLREDUCE:
        type = kolo::OpType::kAllreduce;
        break;
      case KOLO_COLLECTIVE_GROUPED_ALLREDUCE:
        type = kolo::OpType::kAllreduce;
        if (group_size <= 0) {
          return invalid("kolo_refuse: a grouped allreduce needs group_size > 0");
        }
        groupSize = group_size;
        break;
      case KOLO_COLLECTIVE_ALLGATHER:
        type = kolo::OpType::kAllgather;
        break;
      case KOLO_COLLECTIVE_BROADCAST:
        type = kolo::OpType::kBroadcast;
        break;
      case KOLO_COLLECTIVE_ALLTOALL:
        type = kolo::OpType::kAlltoall;
        break;
      case KOLO_COLLECTIVE_REDUCESCATTER:
        type = kolo::OpType::kReducescatter;
        break;
      default:
        return invalid("kolo_refuse: unknown collective " + std::to_string(op));
    }
    Status refusal;
    Status s = rt->refuseOp(type, nameOf(name), groupSize, process_set,
                            reason == nullptr ? std::string() : std::string(reason), &refusal);
    return s.isOk() ? KOLO_OK : fail(s);
  } catch (const std::exception& e) {
    return fail(Status(ErrorCode::kInternal, e.what()));
  }
}

int kolo_handle_poll(kolo_handle_t h, int* done) {
  if (done == nullptr) return invalid("done is NULL");
  auto rec = lookup(h);
  if (!rec) return unknownHandle(h);
  *done = rec->state->done() ? 1 : 0;
  return KOLO_OK;
}

int kolo_handle_wait(kolo_handle_t h, double timeout_seconds) {
  auto rec = lookup(h);
  if (!rec) return unknownHandle(h);
  // NaN compares false with everything: it would become a garbage deadline, not "no limit".
  if (std::isnan(timeout_seconds)) {
    return invalid("kolo_handle_wait: the timeout is NaN (a negative timeout waits without limit)");
  }
  Status s;
  if (timeout_seconds < 0) {
    s = rec->state->wait();
  } else {
    auto d = std::chrono::duration_cast<kolo::Clock::duration>(
        std::chrono::duration<double>(std::min(timeout_seconds, 1e9)));
    s = rec->state->wait(kolo::Clock::now() + d);
  }
  return report(s);
}

int kolo_handle_status(kolo_handle_t h, int* status, const char** error_text) {
  if (status == nullptr) return invalid("status is NULL");
  auto rec = lookup(h);
  if (!rec) return unknownHandle(h);
  if (!rec->state->ready()) {
    *status = -1;
    if (error_text) *error_text = "";
    return KOLO_OK;
  }
  Status s = rec->state->status();
  *status = static_cast<int>(s.code());
  {
    std::lock_guard<std::mutex> lock(api().handlesMu);
    rec->errorText = s.isOk() ? "" : s.message();
  }
  if (error_text) *error_text = rec->errorText.c_str();
  return KOLO_OK;
}

int kolo_handle_output(kolo_handle_t h, void** data, int32_t* ndim, int64_t* shape) {
  auto rec = lookup(h);
  if (!rec) return unknownHandle(h);
  if (!rec->state->ready()) return invalid("handle " + std::to_string(h) + " is still running");
  const auto& st = *rec->state;
  if (data) *data = st.outputData;
  if (ndim) *ndim = static_cast<int32_t>(st.outputShape.size());
  if (shape) {
    for (size_t i = 0; i < st.outputShape.size() && i < KOLO_MAX_DIMS; ++i) shape[i] = st.outputShape[i];
  }
  return KOLO_OK;
}

int kolo_handle_cuda_event(kolo_handle_t h, void** event) {
  if (event == nullptr) return invalid("event is NULL");
  auto rec = lookup(h);
  if (!rec) return unknownHandle(h);
  if (!rec->state->ready()) return invalid("handle " + std::to_string(h) + " is still running");
  *event = rec->state->completionEvent.get();
  return KOLO_OK;
}

int kolo_handle_stream_wait(kolo_handle_t h, void* stream) {
  auto rec = lookup(h);
  if (!rec) return unknownHandle(h);
  if (!rec->state->ready()) return invalid("handle " + std::to_string(h) + " is still running");
  void* event = rec->state->completionEvent.get();
  if (event == nullptr) return KOLO_OK;  // a host op: nothing runs on a device
  Status s = kolo::deviceStreamWait(event, rec->state->completionDevice, stream);
  return s.isOk() ? KOLO_OK : fail(s);
}

int kolo_handle_received_splits(kolo_handle_t h, int32_t* splits, int32_t n) {
  auto rec = lookup(h);
  if (!rec) return unknownHandle(h);
  if (!rec->state->ready()) return invalid("handle " + std::to_string(h) + " is still running");
  const auto& r = rec->state->receivedSplits;
  if (splits == nullptr || n < static_cast<int32_t>(r.size())) {
    return invalid("the splits buffer holds " + std::to_string(n) + " entries, " +
                   std::to_string(r.size()) + " needed");
  }
  for (size_t i = 0; i < r.size(); ++i) splits[i] = r[i];
  return KOLO_OK;
}

int kolo_handle_join_result(kolo_handle_t h, int32_t* last_joined_rank) {
  if (last_joined_rank == nullptr) return invalid("last_joined_rank is NULL");
  auto rec = lookup(h);
  if (!rec) return unknownHandle(h);
  if (!rec->state->ready()) return invalid("handle " + std::to_string(h) + " is still running");
  *last_joined_rank = rec->state->lastJoinedRank;
  return KOLO_OK;
}

int kolo_handle_release(kolo_handle_t h) {
  std::lock_guard<std::mutex> lock(api().handlesMu);
  if (!api().handles.erase(h)) {
    tlsError = "INVALID_ARGUMENT: handle " + std::to_string(h) +
               " is unknown (released, never issued or forged)";
    return KOLO_ERR_INVALID_ARGUMENT;
  }
  return KOLO_OK;
}

// Process-set changes are collective and blocking: submit, then wait.
static int runBlocking(const std::function<Status(kolo::Runtime&, HandlePtr*)>& fn,
                       HandlePtr* done) {
  try {
    auto rt = runtime();
    if (!rt) return fail(notInitialized());
    if (rt->insideRound()) {
      // Before submitting: the op would go out, but this thread could not wait for it.
      return invalid(
          "a process-set change inside a completion callback (or an output allocator): it runs "
          "on kolo's own thread, which the change would wait for (callbacks must not block)");
    }
    HandlePtr h;
    Status s = fn(*rt, &h);
    if (!s.isOk()) return fail(s);
    s = h->wait();
    if (!s.isOk()) return fail(s);
    *done = h;
    return KOLO_OK;
  } catch (const std::exception& e) {
    return fail(Status(ErrorCode::kInternal, e.what()));
  }
}

int kolo_add_process_set(const int32_t* ranks, int32_t n, int32_t* id) {
  if (ranks == nullptr || n <= 0 || id == nullptr) {
    return invalid("kolo_add_process_set needs a non-empty rank list and an id pointer");
  }
  std::vector<int32_t> r(ranks, ranks + n);
  HandlePtr h;
  int rc = runBlocking([&](kolo::Runtime& rt, HandlePtr* out) { return rt.addProcessSet(r, out); }, &h);
  if (rc == KOLO_OK) *id = h->processSetId;
  return rc;
}

int kolo_remove_process_set(int32_t id) {
  HandlePtr h;
  return runBlocking([&](kolo::Runtime& rt, HandlePtr* out) { return rt.removeProcessSet(id, out); },
                     &h);
}

static int withSet(int32_t id, kolo::ProcessSet* set) {
  auto rt = runtime();
  if (!rt) return fail(notInitialized());
  if (!rt->processSet(id, set)) return invalid("process set " + std::to_string(id) + " does not exist");
  return KOLO_OK;
}

int kolo_process_set_size(int32_t id, int32_t* size) {
  if (size == nullptr) return invalid("size is NULL");
  kolo::ProcessSet set;
  int rc = withSet(id, &set);
  if (rc == KOLO_OK) *size = static_cast<int32_t>(set.ranks.size());
  return rc;
}

int kolo_process_set_rank(int32_t id, int32_t* rank) {
  if (rank == nullptr) return invalid("rank is NULL");
  kolo::ProcessSet set;
  int rc = withSet(id, &set);
  if (rc == KOLO_OK) *rank = set.myIndex;
  return rc;
}

int kolo_process_set_ranks(int32_t id, int32_t* ranks, int32_t cap, int32_t* n) {
  if (n == nullptr) return invalid("n is NULL");
  kolo::ProcessSet set;
  int rc = withSet(id, &set);
  if (rc != KOLO_OK) return rc;
  *n = static_cast<int32_t>(set.ranks.size());
  for (int32_t i = 0; i < cap && i < *n && ranks != nullptr; ++i) ranks[i] = set.ranks[i];
  return KOLO_OK;
}

int kolo_start_timeline(const char* path, int mark_cycles) {
  auto rt = runtime();
  if (!rt) return fail(notInitialized());
  if (path == nullptr || *path == '\0') return invalid("the timeline path is empty");
  return report(rt->startTimeline(path, mark_cycles != 0));
}

int kolo_stop_timeline(void) {
  auto rt = runtime();
  if (!rt) return fail(notInitialized());
  rt->stopTimeline();
  return KOLO_OK;
}

}  // extern "C"
