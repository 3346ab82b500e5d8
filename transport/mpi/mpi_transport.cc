// SPDX-License-Identifier: Apache-2.0
// The MPI transport: initialization, point-to-point batches, split and abort. The native
// collectives live in mpi_collectives.cc.
//
// Why polling: MPI offers no wait with a timeout, and a blocking MPI_Waitall could hang forever
// on a peer that stopped answering. Batches are therefore tested with MPI_Testsome until their
// deadline, with a backoff (yield first, then short sleeps) because several ranks often share a
// couple of cores and a pure spin would steal the CPU from the very peer we are waiting for.
// Testsome (rather than Testall) tells which requests are still open, so a timeout can name the
// peers that never answered.
#include "transport/mpi/mpi_transport.h"

#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdlib>

#include "transport/mpi/mpi_internal.h"

namespace kolo {
namespace mpi_detail {
namespace {

// Point-to-point messages above this are split into several MPI messages (MPI counts are int).
constexpr size_t kMaxChunkBytes = size_t{1} << 30;

// Set once any MPI transport of this process aborted (a peer timed out, a batch was abandoned).
// Process-wide like MPI itself: it decides what the atexit hook below may do.
std::atomic<bool>& anyTransportAborted() {
  static std::atomic<bool> aborted{false};
  return aborted;
}

// How long, after an abort, a rank waits at exit for every other rank to be exiting too.
constexpr std::chrono::seconds kExitBarrierWait{5};

// The process that initialized MPI (a child fork()ed from it inherits the atexit hook, and
// its MPI_Finalize would synchronize with the parent's peers).
pid_t& mpiOwner() {
  static pid_t pid = 0;
  return pid;
}

// Registered with atexit when kolo initialized MPI: MPI cannot be re-initialized after
// MPI_Finalize, so it has to stay up until the process ends. MPI_Finalize synchronizes with
// every rank, so after an abort a survivor could block forever in exit() on a peer that stopped
// answering. Then a non-blocking barrier with a short deadline decides first: when every rank
// arrives (an abort of a healthy group, e.g. a process set torn down on purpose), MPI is
// finalized as usual; otherwise the rank exits without it, which lets mpirun see the failure
// and tear the job down (the stopped rank included).
void finalizeMpiAtExit() {
  if (getpid() != mpiOwner()) return;
  if (mpiFinalized()) return;
  if (anyTransportAborted().load()) {
    MPI_Request req = MPI_REQUEST_NULL;
    if (MPI_Ibarrier(MPI_COMM_WORLD, &req) != MPI_SUCCESS) return;
    const Clock::time_point deadline = Clock::now() + kExitBarrierWait;
    for (int done = 0; !done;) {
      if (MPI_Test(&req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) return;
      if (!done && Clock::now() >= deadline) return;
      if (!done) {
        timespec ts{0, 1000 * 1000};
        nanosleep(&ts, nullptr);
      }
    }
  }
  MPI_Finalize();
}

const char* threadLevelName(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE:
      return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED:
      return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED:
      return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE:
      return "MPI_THREAD_MULTIPLE";
  }
  return "unknown";
}

Status ensureMpiInitialized() {
  // MPI's initialization state is process-wide; this lock only serializes kolo's own
  // check-then-init when two transports are created concurrently.
  static std::mutex initMutex;
  std::lock_guard<std::mutex> lock(initMutex);
  KOLO_REQUIRE(!mpiFinalized(), kUnsupported,
               "mpi: MPI was already finalized in this process and cannot be initialized again");
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
    if (rc != MPI_SUCCESS) return mpiError(rc, "MPI_Init_thread");
    mpiOwner() = getpid();
    std::atexit(&finalizeMpiAtExit);
  }
  int provided = 0;
  MPI_Query_thread(&provided);
  if (provided < MPI_THREAD_SERIALIZED) {
    return Status(ErrorCode::kUnsupported,
                  std::string("mpi: MPI provides only ") + threadLevelName(provided) +
                      "; kolo calls MPI from its background thread and needs "
                      "MPI_THREAD_MULTIPLE (initialize MPI with MPI_Init_thread)");
  }
  return Status::ok();
}

// Completes `state` for a freshly created communicator: rank, size, tag bound, error handler
// and whether every member shares this host.
Status describeComm(MpiShared* state) {
  int rc = MPI_Comm_set_errhandler(state->comm, MPI_ERRORS_RETURN);
  if (rc != MPI_SUCCESS) return mpiError(rc, "MPI_Comm_set_errhandler");
  MPI_Comm_rank(state->comm, &state->rank);
  MPI_Comm_size(state->comm, &state->size);
  void* attr = nullptr;
  int found = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &attr, &found);
  if (found && attr != nullptr) state->tagUpperBound = *static_cast<int*>(attr);
  MPI_Comm node = MPI_COMM_NULL;
  rc = MPI_Comm_split_type(state->comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  if (rc != MPI_SUCCESS) return mpiError(rc, "MPI_Comm_split_type");
  int nodeSize = 0;
  MPI_Comm_size(node, &nodeSize);
  MPI_Comm_free(&node);
  state->sharedMemory = nodeSize == state->size;
  return Status::ok();
}

struct Request {
  MPI_Request req = MPI_REQUEST_NULL;
  int peer = 0;
  bool recv = false;
  int bytes = 0;
};

class MpiPending final : public PendingOps {
 public:
  MpiPending(std::shared_ptr<MpiShared> state, std::vector<Request> reqs)
      : state_(std::move(state)), reqs_(std::move(reqs)), open_(reqs_.size()) {
    handles_.reserve(reqs_.size());
    for (const Request& r : reqs_) handles_.push_back(r.req);
  }

  ~MpiPending() override {
    if (open_ == 0 || mpiFinalized()) return;
    const std::string abandoned = "mpi: a batch was abandoned with " + std::to_string(open_) +
                                  " operation(s) outstanding (" + outstanding() + ")";
    // Receives can be cancelled; sends cannot (MPI keeps reading their buffers), so an
    // abandoned batch leaves the transport unusable. The first failure the batch saw is the
    // most useful cause for every later call.
    for (size_t i = 0; i < handles_.size(); ++i) {
      if (handles_[i] == MPI_REQUEST_NULL) continue;
      if (reqs_[i].recv) MPI_Cancel(&handles_[i]);
      MPI_Request_free(&handles_[i]);
    }
    if (!failed_.isOk()) {
      state_->abort.set(failed_);
    } else if (!lastTimeout_.isOk()) {
      state_->abort.set(Status(ErrorCode::kTimeout, lastTimeout_.message() + "; " + abandoned));
    } else {
      state_->abort.set(Status(ErrorCode::kAborted, abandoned));
    }
  }

  Status test(bool* done) override {
    *done = false;
    KOLO_RETURN_IF_ERROR(failed_);
    if (open_ == 0) {
      *done = true;
      return Status::ok();
    }
    if (state_->abort.isSet()) return state_->abort.cause();
    int count = 0;
    indices_.resize(handles_.size());
    statuses_.resize(handles_.size());
    int rc = MPI_Testsome(static_cast<int>(handles_.size()), handles_.data(), &count,
                          indices_.data(), statuses_.data());
    if (rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS) {
      failed_ = mpiError(rc, "MPI_Testsome", ErrorCode::kPeerLost);
      return failed_;
    }
    if (count == MPI_UNDEFINED) count = 0;
    for (int k = 0; k < count; ++k) {
      const Request& r = reqs_[static_cast<size_t>(indices_[k])];
      const MPI_Status& st = statuses_[static_cast<size_t>(k)];
      if (rc == MPI_ERR_IN_STATUS && st.MPI_ERROR != MPI_SUCCESS) {
        failed_ =
            mpiError(st.MPI_ERROR,
                     std::string(r.recv ? "receive from " : "send to ") + state_->describe(r.peer),
                     ErrorCode::kPeerLost);
        return failed_;
      }
      if (r.recv) {
        int got = 0;
        MPI_Get_count(&st, MPI_BYTE, &got);
        if (got != r.bytes) {
          failed_ = Status(ErrorCode::kInternal, "mpi: " + state_->describe(r.peer) + " sent " +
                                                     std::to_string(got) + " bytes where " +
                                                     std::to_string(r.bytes) + " were posted");
          return failed_;
        }
      }
    }
    open_ -= static_cast<size_t>(count);
    *done = open_ == 0;
    return Status::ok();
  }

  Status wait(Deadline deadline) override {
    Backoff backoff;
    for (;;) {
      bool done = false;
      KOLO_RETURN_IF_ERROR(test(&done));
      if (done) return Status::ok();
      Status peer;
      if (state_->peerAborted(&peer)) return peer;
      if (Clock::now() >= deadline) {
        lastTimeout_ = Status(ErrorCode::kTimeout, "mpi: timed out waiting for " + outstanding());
        return lastTimeout_;
      }
      backoff.pause();
    }
  }

 private:
  // "receive from rank 1 (global 1), send to rank 2 (global 2)"
  std::string outstanding() const {
    std::vector<std::pair<int, bool>> open;
    for (size_t i = 0; i < handles_.size(); ++i) {
      if (handles_[i] != MPI_REQUEST_NULL) open.emplace_back(reqs_[i].peer, reqs_[i].recv);
    }
    return describeOutstanding(open, state_->globalRanks);
  }

  std::shared_ptr<MpiShared> state_;
  std::vector<Request> reqs_;
  std::vector<MPI_Request> handles_;
  std::vector<int> indices_;
  std::vector<MPI_Status> statuses_;
  size_t open_;
  Status failed_;
  Status lastTimeout_;
};

}  // namespace

MpiShared::~MpiShared() {
  if (comm != MPI_COMM_NULL && !mpiFinalized()) MPI_Comm_free(&comm);
}

void MpiShared::abortWith(const Status& cause) {
  abort.set(cause);
  anyTransportAborted().store(true);
  for (auto& child : children.alive()) child->abortWith(cause);
}

bool MpiShared::peerAborted(Status* cause) {
  if (channel == nullptr || !channel->heard(cause)) return false;
  abort.set(*cause);
  return true;
}

std::string MpiShared::describe(int groupRank) const {
  return describeGroupRank(groupRank, globalRanks);
}

Status waitRequest(MpiShared& state, MPI_Request* req, const std::string& what, Deadline deadline) {
  Backoff backoff;
  for (;;) {
    if (state.abort.isSet()) return state.abort.cause();
    int flag = 0;
    int rc = MPI_Test(req, &flag, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
      Status s = mpiError(rc, what, ErrorCode::kPeerLost);
      state.abort.set(s);
      return s;
    }
    if (flag) return Status::ok();
    Status peer;
    if (state.peerAborted(&peer)) return peer;
    if (Clock::now() >= deadline) {
      Status s(ErrorCode::kTimeout,
               "mpi: " + what + " did not complete in time: a rank of this group (size " +
                   std::to_string(state.size) + ") did not take part; the transport is unusable");
      state.abort.set(s);
      return s;
    }
    backoff.pause();
  }
}

MpiTransport::MpiTransport(std::shared_ptr<MpiShared> state) : state_(std::move(state)) {}

int MpiTransport::globalRank(int groupRank) const {
  if (groupRank < 0 || groupRank >= state_->size) return -1;
  return state_->globalRanks[static_cast<size_t>(groupRank)];
}

Capabilities MpiTransport::capabilities() const {
  Capabilities c;
  c.nativeAllreduce = c.nativeAllgatherv = c.nativeBroadcast = true;
  c.nativeAlltoallv = c.nativeReducescatter = true;
  c.sharedMemory = state_->sharedMemory;
  return c;
}

Status MpiTransport::checkUsable() const {
  if (state_->abort.isSet()) return state_->abort.cause();
  KOLO_REQUIRE(!mpiFinalized(), kShutdown, "mpi: MPI was finalized");
  return Status::ok();
}

Status MpiTransport::post(const std::vector<P2POp>& ops, std::unique_ptr<PendingOps>* out) {
  KOLO_RETURN_IF_ERROR(checkUsable());
  // Validate everything first: once a request is started, a failure abandons the batch.
  for (const P2POp& op : ops) {
    KOLO_REQUIRE(op.peer >= 0 && op.peer < state_->size, kInvalidArgument,
                 "mpi: peer " + std::to_string(op.peer) + " is outside a group of " +
                     std::to_string(state_->size));
    KOLO_REQUIRE(op.tag <= static_cast<uint32_t>(state_->tagUpperBound), kInvalidArgument,
                 "mpi: tag " + std::to_string(op.tag) + " exceeds MPI_TAG_UB " +
                     std::to_string(state_->tagUpperBound));
  }
  std::vector<Request> reqs;
  reqs.reserve(ops.size());
  for (const P2POp& op : ops) {
    const bool isRecv = op.kind == P2POp::Kind::kRecv;
    auto* base = static_cast<uint8_t*>(op.data);
    size_t offset = 0;
    // Chunks of one message share (peer, tag): MPI's non-overtaking rule keeps them in order.
    do {
      const size_t len = std::min(kMaxChunkBytes, op.bytes - offset);
      Request r;
      r.peer = op.peer;
      r.recv = isRecv;
      r.bytes = static_cast<int>(len);
      int rc = isRecv ? MPI_Irecv(base + offset, r.bytes, MPI_BYTE, op.peer,
                                  static_cast<int>(op.tag), state_->comm, &r.req)
                      : MPI_Isend(base + offset, r.bytes, MPI_BYTE, op.peer,
                                  static_cast<int>(op.tag), state_->comm, &r.req);
      if (rc != MPI_SUCCESS) {
        MpiPending abandoned(state_, std::move(reqs));  // what started is abandoned at once
        return mpiError(
            rc,
            std::string(isRecv ? "MPI_Irecv from " : "MPI_Isend to ") + state_->describe(op.peer),
            ErrorCode::kPeerLost);
      }
      reqs.push_back(r);
      offset += len;
    } while (offset < op.bytes);
  }
  *out = std::make_unique<MpiPending>(state_, std::move(reqs));
  return Status::ok();
}

Status MpiTransport::split(const std::vector<int>& ranks, int32_t setId,
                           std::unique_ptr<Transport>* out) {
  *out = nullptr;
  KOLO_RETURN_IF_ERROR(checkUsable());
  KOLO_RETURN_IF_ERROR(checkSplitRanks(*this, ranks));
  const bool member = std::binary_search(ranks.begin(), ranks.end(), state_->rank);
  // MPI_Comm_split blocks without a deadline; a non-blocking barrier first turns a missing
  // rank into kTimeout instead of a hang.
  MPI_Request barrier = MPI_REQUEST_NULL;
  int rc = MPI_Ibarrier(state_->comm, &barrier);
  if (rc != MPI_SUCCESS) return mpiError(rc, "MPI_Ibarrier");
  KOLO_RETURN_IF_ERROR(waitRequest(
      *state_, &barrier, "split barrier for set " + std::to_string(setId), deadlineFromNow()));
  auto child = std::make_shared<MpiShared>();
  rc = MPI_Comm_split(state_->comm, member ? 0 : MPI_UNDEFINED, state_->rank, &child->comm);
  if (rc != MPI_SUCCESS) return mpiError(rc, "MPI_Comm_split");
  if (!member) return Status::ok();
  KOLO_RETURN_IF_ERROR(describeComm(child.get()));
  child->reductions = state_->reductions;
  child->channel = state_->channel;
  for (int r : ranks) child->globalRanks.push_back(state_->globalRanks[static_cast<size_t>(r)]);
  state_->children.add(child);
  auto t = std::make_unique<MpiTransport>(std::move(child));
  t->setTimeout(timeout());
  *out = std::move(t);
  return Status::ok();
}

void MpiTransport::abort(const Status& cause) {
  const Status why = cause.isOk() ? Status(ErrorCode::kAborted, "mpi: aborted") : cause;
  // The runtime aborts its world transport when it fails (never at shutdown): the other ranks
  // hear of it at once instead of at their deadlines. A set's transport aborts alone.
  if (state_->world && state_->channel != nullptr) state_->channel->announce(why);
  state_->abortWith(why);
}

}  // namespace mpi_detail

Status createMpiTransport(std::unique_ptr<Transport>* out, std::chrono::milliseconds startTimeout) {
  using namespace mpi_detail;
  *out = nullptr;
  KOLO_RETURN_IF_ERROR(ensureMpiInitialized());
  auto state = std::make_shared<MpiShared>();
  KOLO_RETURN_IF_ERROR(MpiReductions::create(&state->reductions));
  // The handle becomes valid only when the duplication completes; until then it is not ours
  // to free, so it joins `state` afterwards.
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Request req = MPI_REQUEST_NULL;
  int rc = MPI_Comm_idup(MPI_COMM_WORLD, &comm, &req);
  if (rc != MPI_SUCCESS) return mpiError(rc, "MPI_Comm_idup");
  MPI_Comm_size(MPI_COMM_WORLD, &state->size);
  KOLO_RETURN_IF_ERROR(
      waitRequest(*state, &req, "MPI_Comm_idup of MPI_COMM_WORLD", Clock::now() + startTimeout));
  state->comm = comm;
  KOLO_RETURN_IF_ERROR(describeComm(state.get()));
  state->globalRanks.resize(static_cast<size_t>(state->size));
  for (int i = 0; i < state->size; ++i) state->globalRanks[static_cast<size_t>(i)] = i;
  MPI_Comm channel = MPI_COMM_NULL;
  rc = MPI_Comm_idup(MPI_COMM_WORLD, &channel, &req);
  if (rc != MPI_SUCCESS) return mpiError(rc, "MPI_Comm_idup (abort channel)");
  KOLO_RETURN_IF_ERROR(
      waitRequest(*state, &req, "MPI_Comm_idup of the abort channel", Clock::now() + startTimeout));
  KOLO_RETURN_IF_ERROR(AbortChannel::create(channel, &state->channel));
  state->world = true;
  *out = std::make_unique<MpiTransport>(std::move(state));
  return Status::ok();
}

}  // namespace kolo
