// The Gloo transport: rendezvous, abort notes, split and abort. Point-to-point batches live in
// gloo_p2p.cc, the native collectives in gloo_collectives.cc, and the layer through which kolo
// can interrupt Gloo's waits in gloo_interpose.cc (every group's device, context and buffers
// are kolo's forwarding implementations of Gloo's public transport interfaces).
#include "transport/gloo/gloo_transport.h"

#include <gloo/transport/tcp/device.h>
#include <signal.h>

#include <algorithm>
#include <thread>

#include "transport/gloo/gloo_internal.h"

namespace kolo {
namespace gloo_detail {
namespace {

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
  // Waits first (they wake at once); closing a connection waits for a tick of Gloo's I/O loop.
  if (waits) waits->abortAll("kolo: transport aborted: " + cause.toString());
  if (context) context->closeConnections();
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

// Gloo marks a pair failed when its connection breaks, whether or not an operation was pending
// on it, and throws that failure from every later send or receive posted on the pair. A probe
// is a 1-byte receive on kProbeSlot, on which no rank ever sends; it throws at once on a
// failed pair and stays pending, harmlessly, on a healthy one (the caller aborts right after).
constexpr uint64_t kProbeSlot = uint64_t{0x4B} << 56;  // 'K'

std::vector<int> GlooShared::brokenPeers() {
  std::vector<int> broken;
  if (!context) return broken;
  for (int r = 0; r < size; ++r) {
    if (r == rank) continue;
    try {
      auto probe = context->createUnboundBuffer(&probeSink, 1);
      probe->recv(r, kProbeSlot, 0, 1);
      probes.push_back(std::move(probe));
    } catch (const std::exception&) {
      broken.push_back(r);
    }
  }
  return broken;
}

Status connectGroup(std::shared_ptr<Store> store, int rank, int size,
                    std::shared_ptr<gloo::transport::Device> device,
                    std::chrono::milliseconds timeout, std::vector<int> globalRanks,
                    std::shared_ptr<GlooShared>* out, bool watched) {
  auto state = std::make_shared<GlooShared>();
  state->rank = rank;
  state->size = size;
  state->globalRanks = std::move(globalRanks);
  state->store = store;
  state->device = device;
  state->waits = std::make_shared<GroupWaits>();
  StoreAdapter adapter(store, timeout);
  try {
    auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
    context->setTimeout(timeout);
    // The group's contexts and buffers are kolo's (gloo_interpose.h); the sockets are Gloo's.
    std::shared_ptr<gloo::transport::Device> mesh =
        watched ? std::make_shared<WatchedDevice>(device, state->waits, timeout) : device;
    context->connectFullMesh(adapter, mesh);
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

std::string glooMessage(const std::exception& e) {
  std::string text = e.what();
  // Gloo prefixes "[file:line] "; the location means nothing to a kolo user.
  if (!text.empty() && text[0] == '[') {
    size_t close = text.find("] ");
    if (close != std::string::npos) text = text.substr(close + 2);
  }
  return text;
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
  child->timer = state_->timer;
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
  state->timer = std::make_shared<WaitTimer>();
  *out = std::make_unique<GlooTransport>(std::move(state));
  return Status::ok();
}

}  // namespace kolo
