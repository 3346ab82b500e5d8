// SPDX-License-Identifier: Apache-2.0
// The Gloo transport: rendezvous, split and abort. Point-to-point batches go over kolo's own
// TCP transport (transport/tcp, one mesh beside Gloo's), the native collectives are Gloo's
// (gloo_collectives.cc), and the layer through which kolo can interrupt Gloo's waits is
// gloo_interpose.cc (every group's device, context and buffers are kolo's forwarding
// implementations of Gloo's public transport interfaces). Abort notes: transport/abort_notes.h.
#include "transport/gloo/gloo_transport.h"

#include <gloo/transport/tcp/device.h>
#include <signal.h>

#include <algorithm>
#include <cctype>
#include <functional>
#include <thread>

#include "transport/gloo/gloo_internal.h"

namespace kolo {
namespace gloo_detail {
namespace {

// Gloo's rendezvous talks to a gloo::rendezvous::Store, which reports failures by exception.
// The adapter throws, and remembers the kolo Status so the caller can return it unchanged.
// transport/gloo/CMakeLists.txt checks at configure time (KOLO_GLOO_STORE_API) that the installed
// Store has exactly these virtual methods and no other pure one: keep the two in step.
// Waits run in slices (kSetupWaitSlice); between two, `lost` (the group's point-to-point mesh,
// already connected) says whether a peer went away meanwhile, which then ends the wait at once:
// a rank waiting for the address of a rank that died would otherwise wait out the timeout.
class StoreAdapter : public gloo::rendezvous::Store {
 public:
  StoreAdapter(std::shared_ptr<kolo::Store> store, std::chrono::milliseconds timeout,
               std::function<Status()> lost)
      : store_(std::move(store)), timeout_(timeout), lost_(std::move(lost)) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    check(store_->set(key, std::vector<uint8_t>(data.begin(), data.end())));
  }
  std::vector<char> get(const std::string& key) override {
    std::vector<uint8_t> value;  // one request when the key is there (Gloo waited for it first)
    sliced({key}, timeout_,
           [&](std::chrono::milliseconds slice) { return store_->get(key, &value, slice); });
    return std::vector<char>(value.begin(), value.end());
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    sliced(keys, timeout,
           [&](std::chrono::milliseconds slice) { return store_->wait(keys, slice); });
  }

  const Status& firstError() const { return firstError_; }
  // The keys of the wait that timed out (empty when none did).
  const std::vector<std::string>& timedOutKeys() const { return timedOutKeys_; }

 private:
  // Runs `request` (a store get or wait for `keys`, given a slice of `timeout`) in slices,
  // asking `lost_` between two (waitInSlices).
  template <typename Request>
  void sliced(const std::vector<std::string>& keys, std::chrono::milliseconds timeout,
              Request&& request) {
    bool lost = false;
    Status s = waitInSlices(
        Clock::now() + timeout, request, [&] { return lost_ ? lost_() : Status::ok(); }, &lost);
    if (s.code() == ErrorCode::kTimeout && !lost) timedOutKeys_ = keys;
    check(s);
  }
  void check(Status s) {
    if (s.isOk()) return;
    if (firstError_.isOk()) firstError_ = s;
    throw std::runtime_error(s.toString());
  }

  std::shared_ptr<kolo::Store> store_;
  std::chrono::milliseconds timeout_;
  std::function<Status()> lost_;
  Status firstError_;
  std::vector<std::string> timedOutKeys_;
};

// Gloo's rendezvous keys are the ranks' numbers ("<prefix>/2"): the group rank a key stands
// for, or -1.
int rankOfKey(const std::string& key, int size) {
  const size_t slash = key.rfind('/');
  const std::string last = slash == std::string::npos ? key : key.substr(slash + 1);
  if (last.empty() || last.size() > 9 ||
      !std::all_of(last.begin(), last.end(), [](unsigned char c) { return std::isdigit(c); })) {
    return -1;
  }
  const int r = std::stoi(last);
  return r < size ? r : -1;
}

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

void GlooShared::abortWith(const Status& cause) {
  if (!abort.set(cause)) return;
  if (notes) notes->leave(cause);
  // Waits first (they wake at once); closing a connection waits for a tick of Gloo's I/O loop.
  if (waits) waits->abortAll("kolo: transport aborted: " + cause.toString());
  if (p2p) p2p->abort(cause);
  if (context) context->closeConnections();
  for (auto& child : children.alive()) child->abortWith(cause);
}

void linkP2P(const std::shared_ptr<GlooShared>& state, std::unique_ptr<TcpTransport> p2p) {
  std::weak_ptr<GlooShared> weak = state;
  p2p->setAbortListener([weak](const Status& cause) {
    if (auto s = weak.lock()) s->abortWith(cause);
  });
  state->p2p = std::move(p2p);
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
                    const TcpTransport* peers, std::shared_ptr<GlooShared>* out, bool watched) {
  auto state = std::make_shared<GlooShared>();
  state->rank = rank;
  state->size = size;
  state->globalRanks = std::move(globalRanks);
  state->store = store;
  state->notes = std::make_unique<AbortNotes>(store, rank, state->globalRanks);
  state->device = device;
  state->waits = std::make_shared<GroupWaits>();
  const std::string who =
      "gloo: connecting rank " + std::to_string(rank) + " of " + std::to_string(size);
  // A peer that went away while this group connects, named by the point-to-point mesh.
  auto lost = [&]() -> Status {
    return peers == nullptr ? Status::ok()
                            : peers->closedConnection(Status(ErrorCode::kPeerLost, who));
  };
  StoreAdapter adapter(store, timeout, lost);
  try {
    auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
    context->setTimeout(timeout);
    // The group's contexts and buffers are kolo's (gloo_interpose.h); the sockets are Gloo's.
    std::shared_ptr<gloo::transport::Device> mesh =
        watched ? std::make_shared<WatchedDevice>(device, state->waits, timeout) : device;
    context->connectFullMesh(adapter, mesh);
    state->context = std::move(context);
  } catch (const std::exception& e) {
    const Status& first = adapter.firstError();
    if (!first.isOk() && first.code() != ErrorCode::kTimeout) return first;  // a peer's loss
    if (!first.isOk()) {
      std::string waitedFor;
      for (const std::string& key : adapter.timedOutKeys()) {
        const int r = rankOfKey(key, size);
        if (r >= 0 && r != rank) {
          waitedFor +=
              std::string(waitedFor.empty() ? "" : ", ") + describeGroupRank(r, state->globalRanks);
        }
      }
      return Status(
          ErrorCode::kTimeout,
          who + ": " +
              (waitedFor.empty() ? std::string() : waitedFor + " did not publish its address; ") +
              first.message());
    }
    std::string text = glooMessage(e);
    // Gloo names a failed connection by address only: the mesh says which rank went away.
    Status direct(mentionsTimeout(text) ? ErrorCode::kTimeout : ErrorCode::kPeerLost,
                  who + " failed: " + text);
    Status gone = peers == nullptr ? Status::ok() : peers->closedConnection(direct);
    return gone.isOk() ? direct : gone;
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

Status GlooTransport::post(const std::vector<P2POp>& ops, std::unique_ptr<PendingOps>* out) {
  KOLO_RETURN_IF_ERROR(checkUsable());
  return state_->p2p->post(ops, out);
}

Status GlooTransport::split(const std::vector<int>& ranks, int32_t setId,
                            std::unique_ptr<Transport>* out) {
  *out = nullptr;
  KOLO_RETURN_IF_ERROR(checkUsable());
  KOLO_RETURN_IF_ERROR(checkSplitRanks(*this, ranks));
  // The point-to-point mesh splits first (every rank takes part, members or not).
  std::unique_ptr<Transport> p2p;
  state_->p2p->setTimeout(timeout());
  KOLO_RETURN_IF_ERROR(state_->p2p->split(ranks, setId, &p2p));
  // Every rank counts every split, members or not, so the prefix agrees everywhere.
  const std::string prefix = "set" + std::to_string(setId) + "." + std::to_string(splits_++) + "/";
  auto it = std::lower_bound(ranks.begin(), ranks.end(), state_->rank);
  if (it == ranks.end() || *it != state_->rank) return Status::ok();
  std::vector<int> globals;
  for (int r : ranks) globals.push_back(state_->globalRanks[static_cast<size_t>(r)]);
  std::shared_ptr<GlooShared> child;
  std::unique_ptr<TcpTransport> childP2P(static_cast<TcpTransport*>(p2p.release()));
  Status s = connectGroup(makePrefixStore(state_->store, prefix),
                          static_cast<int>(it - ranks.begin()), static_cast<int>(ranks.size()),
                          state_->device, timeout(), std::move(globals), childP2P.get(), &child);
  if (!s.isOk()) {
    childP2P->abort(s);  // leaves the abort note that members still connecting relay
    return s;
  }
  linkP2P(child, std::move(childP2P));
  state_->children.add(child);
  if (state_->abort.isSet()) child->abortWith(state_->abort.cause());  // raced with an abort
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

  std::shared_ptr<Store> groupStore;
  KOLO_RETURN_IF_ERROR(makeGenerationStore(store, "kolo/gloo", size, &groupStore));

  std::vector<int> globals(static_cast<size_t>(size));
  for (int i = 0; i < size; ++i) globals[static_cast<size_t>(i)] = i;
  // Point-to-point over kolo's own sockets (transport/tcp/tcp_transport.h says why), listening
  // where Gloo's device does. Connected first: while Gloo's mesh connects, it names a peer that
  // went away (Gloo's own errors give an address only).
  std::unique_ptr<TcpTransport> p2p;
  KOLO_RETURN_IF_ERROR(createTcpTransport(makePrefixStore(groupStore, "p2p/"), rank, size, iface,
                                          attr.hostname, timeout, &p2p));
  std::shared_ptr<GlooShared> state;
  Status s =
      connectGroup(groupStore, rank, size, device, timeout, std::move(globals), p2p.get(), &state);
  if (!s.isOk()) {
    p2p->abort(s);  // leaves the abort note that ranks still connecting relay
    return s;
  }
  linkP2P(state, std::move(p2p));
  *out = std::make_unique<GlooTransport>(std::move(state));
  return Status::ok();
}

}  // namespace kolo
