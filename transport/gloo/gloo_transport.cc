// The Gloo transport: rendezvous, point-to-point batches, split and abort. The native
// collectives live in gloo_collectives.cc, the reach into Gloo's internals in gloo_access.cc.
//
// Point-to-point: each op gets its own Gloo UnboundBuffer and the slot kP2PSlotPrefix | tag.
// Gloo matches sends and receives per (pair, slot) in post order, which is exactly kolo's FIFO
// per (src, dst, tag). A batch is polled: each pass peeks at every open buffer, so a closed
// connection to any peer of the batch is noticed at once, not after the peers in front of it.
// Gloo's own waitRecv/waitSend are never used for waiting: their timeout closes every
// connection of the context, and they cannot report a failure on another pair meanwhile.
#include "transport/gloo/gloo_transport.h"

#include <gloo/transport/tcp/device.h>
#include <sched.h>
#include <signal.h>
#include <time.h>

#include <algorithm>
#include <thread>

#include "transport/gloo/gloo_internal.h"

namespace kolo {
namespace gloo_detail {
namespace {

// Top byte of a Gloo slot names the collective (Gloo uses 0x01..0x08); 'k' is kolo's p2p.
constexpr uint64_t kP2PSlotPrefix = uint64_t{0x6B} << 56;

// Gloo's rendezvous talks to a gloo::rendezvous::Store, which reports failures by exception.
// The adapter throws, and remembers the kolo Status so the caller can return it unchanged.
class StoreAdapter : public gloo::rendezvous::Store {
 public:
  StoreAdapter(std::shared_ptr<kolo::Store> store, std::chrono::milliseconds timeout)
      : store_(std::move(store)), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    check(store_->set(key, std::vector<uint8_t>(data.begin(), data.end())));
  }
  std::vector<char> get(const std::string& key) override {
    std::vector<uint8_t> value;
    check(store_->get(key, &value, timeout_));
    return std::vector<char>(value.begin(), value.end());
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    check(store_->wait(keys, timeout));
  }

  const Status& firstError() const { return firstError_; }

 private:
  void check(Status s) {
    if (s.isOk()) return;
    if (firstError_.isOk()) firstError_ = s;
    throw std::runtime_error(s.toString());
  }

  std::shared_ptr<kolo::Store> store_;
  std::chrono::milliseconds timeout_;
  Status firstError_;
};

bool mentionsTimeout(const std::string& text) {
  std::string lower(text);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return lower.find("timed out") != std::string::npos || lower.find("timeout") != std::string::npos;
}

struct Entry {
  std::unique_ptr<gloo::transport::UnboundBuffer> buffer;
  int peer = 0;
  bool recv = false;
  size_t bytes = 0;
  bool done = false;
};

class GlooPending final : public PendingOps {
 public:
  explicit GlooPending(std::shared_ptr<GlooShared> state)
      : state_(std::move(state)), posted_(Clock::now()) {}

  ~GlooPending() override {
    if (open_ == 0) return;
    // A posted receive cannot be withdrawn from Gloo, and its pair would stall on the data
    // meant for it: the transport is done for. Failing the context also tells the peers.
    // The first failure this batch saw is the most useful cause for every later call.
    const std::string abandoned = "gloo: a batch was abandoned with " + std::to_string(open_) +
                                  " operation(s) outstanding (" + outstanding() + ")";
    if (!lastTimeout_.isOk()) {
      state_->abortWith(Status(ErrorCode::kTimeout, lastTimeout_.message() + "; " + abandoned));
    } else {
      state_->abortWith(Status(ErrorCode::kAborted, abandoned));
    }
  }

  Entry& add(std::unique_ptr<gloo::transport::UnboundBuffer> buffer, const P2POp& op) {
    Entry e;
    e.buffer = std::move(buffer);
    e.peer = op.peer;
    e.recv = op.kind == P2POp::Kind::kRecv;
    e.bytes = op.bytes;
    entries_.push_back(std::move(e));
    ++open_;
    return entries_.back();
  }

  // The op of `e` could not even be posted.
  Status postFailed(Entry& e, const std::exception& ex) {
    e.done = true;  // nothing of it is pending in Gloo
    --open_;
    Status s = state_->explainLoss(e.peer, lost(e, glooMessage(ex)));
    state_->abortWith(s);
    return s;
  }

  Status test(bool* done) override {
    *done = false;
    KOLO_RETURN_IF_ERROR(failed_);
    if (open_ == 0) {
      *done = true;
      return Status::ok();
    }
    if (state_->abort.isSet()) return state_->abort.cause();
    for (Entry& e : entries_) {
      if (e.done) continue;
      std::exception_ptr error;
      BufferState s = peekBuffer(e.buffer.get(), e.recv, &error);
      if (s == BufferState::kDone) {
        e.done = true;
        --open_;
      } else if (s == BufferState::kFailed) {
        std::string text = "unknown error";
        try {
          std::rethrow_exception(error);
        } catch (const std::exception& ex) {
          text = glooMessage(ex);
        } catch (...) {
        }
        failed_ = state_->abort.isSet() ? state_->abort.cause()
                                        : state_->explainLoss(e.peer, lost(e, text));
        state_->abortWith(failed_);  // the pair is closed; peers learn it at once
        return failed_;
      }
    }
    *done = open_ == 0;
    return Status::ok();
  }

  Status wait(Deadline deadline) override {
    Backoff backoff;
    for (;;) {
      bool done = false;
      KOLO_RETURN_IF_ERROR(test(&done));
      if (done) return Status::ok();
      if (Clock::now() >= deadline) {
        // A quarter of the time this batch was given (about the transport timeout), <= 1 s.
        const auto grace = std::min<std::chrono::milliseconds>(
            std::chrono::milliseconds(1000),
            std::chrono::duration_cast<std::chrono::milliseconds>((deadline - posted_) / 4));
        lastTimeout_ = state_->explainTimeout(
            outstandingPeers(),
            Status(ErrorCode::kTimeout, "gloo: timed out waiting for " + outstanding()), grace);
        return lastTimeout_;
      }
      backoff.pause();
    }
  }

 private:
  Status lost(const Entry& e, const std::string& why) const {
    return Status(ErrorCode::kPeerLost, "gloo: lost " + state_->describe(e.peer) + " during a " +
                                            (e.recv ? "receive of " : "send of ") +
                                            std::to_string(e.bytes) + " bytes: " + why);
  }

  // Peers of unfinished ops, those we receive from first (a send may only wait for a peer
  // that is itself waiting for someone else).
  std::vector<int> outstandingPeers() const {
    std::vector<int> peers;
    for (int pass = 0; pass < 2; ++pass) {
      for (const Entry& e : entries_) {
        if (e.done || e.recv != (pass == 0)) continue;
        if (std::find(peers.begin(), peers.end(), e.peer) == peers.end()) peers.push_back(e.peer);
      }
    }
    return peers;
  }

  std::string outstanding() const {
    std::string text;
    std::vector<std::pair<int, bool>> named;
    for (const Entry& e : entries_) {
      if (e.done) continue;
      auto key = std::make_pair(e.peer, e.recv);
      if (std::find(named.begin(), named.end(), key) != named.end()) continue;
      named.push_back(key);
      if (!text.empty()) text += ", ";
      text += std::string(e.recv ? "receive from " : "send to ") + state_->describe(e.peer);
    }
    return text.empty() ? "nothing" : text;
  }

  std::shared_ptr<GlooShared> state_;
  std::vector<Entry> entries_;
  size_t open_ = 0;
  Status failed_;
  Status lastTimeout_;
  Clock::time_point posted_;
};

void ignoreSigpipe() {
  struct sigaction current {};
  if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
    signal(SIGPIPE, SIG_IGN);
  }
}

}  // namespace

// Abort notes: "kolo/abort/<group rank>" in the group's store holds "<code>:<blamed>:<message>"
// for the cause a rank aborted with, <blamed> being the group rank it holds responsible (-1:
// none). It is written before the rank's connections close, so a peer that sees them close
// finds it at once (kAbortNoteWait only covers Gloo closing a context by itself, on its own
// timeouts). A rank that times out leaves a provisional note at once, then looks for its
// peers' notes for a grace period: in a ring the rank waited for is often a survivor that is
// itself waiting for the rank that really stopped, and times out at about the same moment.
constexpr char kAbortNoteKey[] = "kolo/abort/";
constexpr std::chrono::milliseconds kAbortNoteWait{200};

namespace {
struct Note {
  ErrorCode code = ErrorCode::kOk;
  int blamed = -1;
  std::string message;
};

bool parseNote(const std::vector<uint8_t>& bytes, Note* out) {
  std::string text(bytes.begin(), bytes.end());
  size_t a = text.find(':');
  size_t b = a == std::string::npos ? a : text.find(':', a + 1);
  if (b == std::string::npos) return false;
  int code = std::atoi(text.substr(0, a).c_str());
  if (code <= 0 || code > static_cast<int>(ErrorCode::kJoined)) return false;
  out->code = static_cast<ErrorCode>(code);
  out->blamed = std::atoi(text.substr(a + 1, b - a - 1).c_str());
  out->message = text.substr(b + 1);
  return true;
}
}  // namespace

void GlooShared::leaveNote(const Status& cause, int blamedRank) {
  if (!context || !store) return;
  // Best effort: without a store (it may be gone) peers just name this rank.
  const std::string text = std::to_string(static_cast<int>(cause.code())) + ":" +
                           std::to_string(blamedRank) + ":" + cause.message();
  store->set(kAbortNoteKey + std::to_string(rank), std::vector<uint8_t>(text.begin(), text.end()))
      .ignore();
}

void GlooShared::abortWith(const Status& cause) {
  if (!abort.set(cause)) return;
  leaveNote(cause, blamed.load());
  if (context) context->fail("kolo: transport aborted: " + cause.toString());
  for (auto& child : children.alive()) child->abortWith(cause);
}

Status GlooShared::relayed(int groupRank, const std::vector<uint8_t>& bytes) {
  Note note;
  // A note that blames this rank is from a peer waiting for us: we are alive, it says nothing.
  if (!parseNote(bytes, &note) || note.blamed == rank) return Status::ok();
  blamed = note.blamed >= 0 ? note.blamed : groupRank;
  return Status(note.code, note.message + " (seen by " + describe(groupRank) +
                               ", which then closed its connections)");
}

Status GlooShared::explainLoss(int groupRank, const Status& direct) {
  blamed = groupRank;
  if (!store || groupRank < 0 || groupRank >= size) return direct;
  std::vector<uint8_t> note;
  if (!store->get(kAbortNoteKey + std::to_string(groupRank), &note, kAbortNoteWait).isOk()) {
    return direct;  // no note: the peer itself died or closed its connections
  }
  Status s = relayed(groupRank, note);
  if (s.isOk()) blamed = groupRank;
  return s.isOk() ? direct : s;
}

Status GlooShared::explainTimeout(const std::vector<int>& peers, const Status& direct,
                                  std::chrono::milliseconds grace) {
  blamed = peers.empty() ? -1 : peers.front();
  if (!store || peers.empty()) return direct;
  leaveNote(direct, blamed.load());  // provisional: peers waiting for us learn whom we blame
  const auto until = Clock::now() + grace;
  do {
    for (int p : peers) {
      bool exists = false;
      if (!store->check(kAbortNoteKey + std::to_string(p), &exists).isOk()) return direct;
      std::vector<uint8_t> note;
      if (!exists || !store->get(kAbortNoteKey + std::to_string(p), &note, kAbortNoteWait).isOk()) {
        continue;
      }
      Status s = relayed(p, note);
      if (!s.isOk()) return s;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  } while (Clock::now() < until);
  blamed = peers.front();
  return direct;
}

std::string GlooShared::describe(int groupRank) const {
  return describeGroupRank(groupRank, globalRanks);
}

Status connectGroup(std::shared_ptr<Store> store, int rank, int size,
                    std::shared_ptr<gloo::transport::Device> device,
                    std::chrono::milliseconds timeout, std::vector<int> globalRanks,
                    std::shared_ptr<GlooShared>* out) {
  auto state = std::make_shared<GlooShared>();
  state->rank = rank;
  state->size = size;
  state->globalRanks = std::move(globalRanks);
  state->store = store;
  state->device = device;
  StoreAdapter adapter(store, timeout);
  try {
    auto context = std::make_shared<GlooContext>(rank, size);
    context->setTimeout(timeout);
    context->connectFullMesh(adapter, device);
    state->context = std::move(context);
  } catch (const std::exception& e) {
    if (!adapter.firstError().isOk()) {
      return Status(adapter.firstError().code(), "gloo rendezvous of rank " + std::to_string(rank) +
                                                     " of " + std::to_string(size) + ": " +
                                                     adapter.firstError().message());
    }
    std::string text = glooMessage(e);
    return Status(mentionsTimeout(text) ? ErrorCode::kTimeout : ErrorCode::kPeerLost,
                  "gloo: connecting rank " + std::to_string(rank) + " of " + std::to_string(size) +
                      " failed: " + text);
  } catch (...) {
    return Status(ErrorCode::kInternal, "gloo: unknown exception while connecting");
  }
  *out = std::move(state);
  return Status::ok();
}

int GlooTransport::globalRank(int groupRank) const {
  if (groupRank < 0 || groupRank >= state_->size) return -1;
  return state_->globalRanks[static_cast<size_t>(groupRank)];
}

Capabilities GlooTransport::capabilities() const {
  Capabilities c;
  c.nativeAllreduce = c.nativeAllgatherv = c.nativeBroadcast = c.nativeAlltoallv = true;
  // Even between processes of one host Gloo moves bytes through TCP, never memcpy-fast.
  c.sharedMemory = false;
  return c;
}

Status GlooTransport::checkUsable() const {
  if (state_->abort.isSet()) return state_->abort.cause();
  return Status::ok();
}

Status GlooTransport::post(const std::vector<P2POp>& ops, std::unique_ptr<PendingOps>* out) {
  KOLO_RETURN_IF_ERROR(checkUsable());
  // Validate everything first: once an op is posted, a failure abandons the batch.
  for (const P2POp& op : ops) {
    KOLO_REQUIRE(op.peer >= 0 && op.peer < state_->size && op.peer != state_->rank,
                 kInvalidArgument,
                 "gloo: peer " + std::to_string(op.peer) + " is not another rank of a group of " +
                     std::to_string(state_->size));
  }
  auto pending = std::make_unique<GlooPending>(state_);
  for (const P2POp& op : ops) {
    const uint64_t slot = kP2PSlotPrefix | op.tag;
    // Entry first: whatever happens, the buffer is owned by the batch.
    std::unique_ptr<gloo::transport::UnboundBuffer> buffer;
    try {
      buffer = state_->context->createUnboundBuffer(op.data, op.bytes);
    } catch (const std::exception& e) {
      return Status(ErrorCode::kInternal, "gloo: createUnboundBuffer: " + glooMessage(e));
    }
    Entry& e = pending->add(std::move(buffer), op);
    try {
      if (e.recv) {
        e.buffer->recv(op.peer, slot, 0, op.bytes);
      } else {
        e.buffer->send(op.peer, slot, 0, op.bytes);
      }
    } catch (const std::exception& ex) {
      if (state_->abort.isSet()) return state_->abort.cause();
      return pending->postFailed(e, ex);
    }
  }
  *out = std::move(pending);
  return Status::ok();
}

Status GlooTransport::split(const std::vector<int>& ranks, int32_t setId,
                            std::unique_ptr<Transport>* out) {
  *out = nullptr;
  KOLO_RETURN_IF_ERROR(checkUsable());
  for (size_t i = 0; i < ranks.size(); ++i) {
    KOLO_REQUIRE(ranks[i] >= 0 && ranks[i] < state_->size && (i == 0 || ranks[i] > ranks[i - 1]),
                 kInvalidArgument, "gloo: split ranks must be ascending group ranks");
  }
  // Every rank counts every split, members or not, so the prefix agrees everywhere.
  const std::string prefix = "set" + std::to_string(setId) + "." + std::to_string(splits_++) + "/";
  auto it = std::lower_bound(ranks.begin(), ranks.end(), state_->rank);
  if (it == ranks.end() || *it != state_->rank) return Status::ok();
  std::vector<int> globals;
  for (int r : ranks) globals.push_back(state_->globalRanks[static_cast<size_t>(r)]);
  std::shared_ptr<GlooShared> child;
  KOLO_RETURN_IF_ERROR(connectGroup(
      makePrefixStore(state_->store, prefix), static_cast<int>(it - ranks.begin()),
      static_cast<int>(ranks.size()), state_->device, timeout(), std::move(globals), &child));
  state_->children.add(child);
  auto t = std::make_unique<GlooTransport>(std::move(child));
  t->setTimeout(timeout());
  *out = std::move(t);
  return Status::ok();
}

void GlooTransport::abort(const Status& cause) {
  state_->abortWith(cause.isOk() ? Status(ErrorCode::kAborted, "gloo: aborted") : cause);
}

}  // namespace gloo_detail

Status createGlooTransport(std::shared_ptr<Store> store, int rank, int size,
                           const std::string& iface, const std::string& hostnameOrAddr,
                           std::chrono::milliseconds timeout, std::unique_ptr<Transport>* out) {
  using namespace gloo_detail;
  *out = nullptr;
  KOLO_REQUIRE(store != nullptr, kInvalidArgument, "gloo: a rendezvous store is required");
  KOLO_REQUIRE(size >= 1 && rank >= 0 && rank < size, kInvalidArgument,
               "gloo: rank " + std::to_string(rank) + " of size " + std::to_string(size));
  KOLO_REQUIRE(timeout.count() > 0, kInvalidArgument, "gloo: the timeout must be positive");
  ignoreSigpipe();

  gloo::transport::tcp::attr attr;
  if (!iface.empty()) {
    attr.iface = iface;
  } else {
    attr.hostname = hostnameOrAddr.empty() ? "127.0.0.1" : hostnameOrAddr;
  }
  std::shared_ptr<gloo::transport::Device> device;
  try {
    device = gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    return Status(ErrorCode::kInvalidArgument,
                  "gloo: cannot listen on " +
                      (iface.empty() ? "address '" + attr.hostname + "'"
                                     : "network interface '" + iface + "'") +
                      ": " + glooMessage(e));
  }

  // Every rank of one generation adds exactly once, and a rank cannot start the next
  // generation before the whole current one has connected (which needs all of their adds).
  int64_t ticket = 0;
  KOLO_RETURN_IF_ERROR(store->add("kolo/gloo/generation", 1, &ticket));
  const int64_t generation = (ticket - 1) / size;
  auto groupStore = makePrefixStore(store, "kolo/gloo/" + std::to_string(generation) + "/");

  std::vector<int> globals(static_cast<size_t>(size));
  for (int i = 0; i < size; ++i) globals[static_cast<size_t>(i)] = i;
  std::shared_ptr<GlooShared> state;
  KOLO_RETURN_IF_ERROR(
      connectGroup(groupStore, rank, size, device, timeout, std::move(globals), &state));
  *out = std::make_unique<GlooTransport>(std::move(state));
  return Status::ok();
}

}  // namespace kolo
