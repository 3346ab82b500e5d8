// SPDX-License-Identifier: Apache-2.0
// The TCP transport's engine: matching, reading, writing and failing (tcp_transport.h has the
// wire format and the rules, tcp_mesh.h the ownership and threading).
//
// Progress happens only on the thread that waits (or tests, or posts): post() writes what the
// sockets take, progress() polls the connections that have unfinished operations and reads and
// writes until they would block. A connection with nothing pending is not read: data for a
// receive not yet posted waits in the kernel (or, once read, in `early`), which is all a peer
// may rely on, as with MPI's point-to-point.
//
// Reads go through a 64 KiB stage, so one recv() picks up a header and a small payload (often
// several messages); once a large payload has a destination (its posted receive, or the buffer
// of an early message) and the stage is empty, the rest is read straight into it.
#include "transport/tcp/tcp_mesh.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>

#include "base/little_endian.h"

namespace kolo::tcp_detail {
namespace {

constexpr uint32_t kMagic = 0x6F6C6F6B;  // "kolo" as little-endian bytes
constexpr size_t kStageBytes = 64 << 10;
// A payload remainder at least this large is read straight into its destination.
constexpr uint64_t kDirectBytes = 16 << 10;
constexpr uint64_t kMaxMessage = uint64_t{1} << 40;
constexpr int kMaxIov = 64;
constexpr size_t kMaxWritev = 8 << 20;
// recv() calls per connection per pass, so one streaming peer cannot starve the others.
constexpr int kReadsPerPass = 32;

timespec untilTimespec(Deadline until) {
  const auto left = until - Clock::now();
  if (left <= Clock::duration::zero()) return timespec{0, 0};
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
  return timespec{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
}

// The hello a connecting rank sends: magic, its rank, the nonce the acceptor published.
constexpr uint32_t kHelloMagic = 0x48434B6B;  // "kKCH"
constexpr size_t kHelloBytes = 16;
// The number of a rank that failed while connecting (the group's store; any such rank).
constexpr const char* kFailedKey = "tcp/failed";

}  // namespace

Mesh::Mesh(int rank, int size, std::vector<int> globalRanks, std::shared_ptr<Store> store,
           SocketAddress listenAddress)
    : rank_(rank),
      size_(size),
      store_(store),
      listenAddress_(listenAddress),
      notes_(std::move(store), rank, std::move(globalRanks)),
      conns_(static_cast<size_t>(size)) {}

Mesh::~Mesh() = default;

Status Mesh::init() {
  wake_ = Fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake_.valid()) return Status(ErrorCode::kIo, "tcp: eventfd: " + errnoText(errno));
  return Status::ok();
}

void Mesh::adopt(int peer, Fd fd) {
  auto c = std::make_unique<Conn>();
  c->fd = std::move(fd);
  c->peer = peer;
  c->stage.resize(kStageBytes);
  conns_[static_cast<size_t>(peer)] = std::move(c);
}

void Mesh::setAbortListener(std::function<void(const Status&)> listener) {
  std::lock_guard<std::mutex> lock(listenerMu_);
  listener_ = std::move(listener);
}

void Mesh::abortWith(const Status& cause) {
  if (!abort_.set(cause)) return;
  notes_.leave(cause);
  const uint64_t one = 1;
  if (wake_.valid()) (void)!::write(wake_.get(), &one, sizeof one);
  // shutdown, not close: the owner thread may be inside recv()/poll() on these descriptors.
  for (const auto& c : conns_) {
    if (c) ::shutdown(c->fd.get(), SHUT_RDWR);
  }
  for (auto& child : children_.alive()) child->abortWith(cause);
  std::function<void(const Status&)> listener;
  {
    std::lock_guard<std::mutex> lock(listenerMu_);
    listener = listener_;
  }
  if (listener) listener(cause);
}

void Mesh::purge() {
  if (purged_) return;
  purged_ = true;
  for (auto& c : conns_) {
    if (!c) continue;
    c->sends.clear();
    c->posted.clear();
    c->target = nullptr;
    c->reading = false;
    c->waiting = 0;
  }
}

void Mesh::abandon(const Status& cause) {
  abortWith(cause);
  purge();
}

void Mesh::complete(Conn& c, Op* op) {
  op->done = true;
  --*op->open;
  --c.waiting;
}

void Mesh::breakConn(Conn& c, const std::string& why) {
  if (c.broken.isOk()) c.broken = Status(ErrorCode::kPeerLost, why);
  if (c.waiting == 0 || aborted()) return;  // nobody waits on it (yet): fails the next op
  // Name the operation that was waiting on it.
  const Op* op = c.target;
  if (op == nullptr && !c.sends.empty()) op = c.sends.front();
  for (const auto& entry : c.posted) {
    if (op == nullptr && !entry.second.empty()) op = entry.second.front();
  }
  std::string during;
  if (op != nullptr) {
    during = std::string(" during a ") + (op->recv ? "receive of " : "send of ") +
             std::to_string(op->bytes) + " bytes";
  }
  const Status direct(ErrorCode::kPeerLost,
                      "tcp: lost " + describe(c.peer) + during + ": " + c.broken.message());
  abortWith(notes_.explainLoss(c.peer, direct));
}

Status Mesh::closedConnection(const Status& direct) {
  for (const auto& c : conns_) {
    if (!c) continue;
    // POLLRDHUP: the peer shut its side down (exit, abort); data still queued does not hide it.
    pollfd p{c->fd.get(), POLLRDHUP, 0};
    if (::poll(&p, 1, 0) != 1 || (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) == 0) continue;
    return notes_.explainLoss(
        c->peer,
        Status(ErrorCode::kPeerLost, direct.message() + "; meanwhile " + describe(c->peer) +
                                         " closed its connection (it exited or was lost)"));
  }
  return Status::ok();
}

Status Mesh::explainTimeout(const std::vector<int>& peers, const Status& direct,
                            std::chrono::milliseconds grace) {
  Status closed = closedConnection(direct);
  if (!closed.isOk()) return closed;
  return notes_.explainTimeout(peers, direct, grace);
}

void Mesh::violation(Conn& c, const std::string& what) {
  abortWith(Status(ErrorCode::kInternal, "tcp: " + what + " (from " + describe(c.peer) + ")"));
}

bool Mesh::sizesMatch(Conn& c, const Op* op, uint32_t tag, uint64_t bytes) {
  if (op->bytes == bytes) return true;
  violation(c, "a " + std::to_string(bytes) + "-byte message with tag " + std::to_string(tag) +
                   " met a receive posted for " + std::to_string(op->bytes) + " bytes");
  return false;
}

bool Mesh::deliver(Conn& c, Op* op, uint32_t tag, const std::vector<uint8_t>& message) {
  if (!sizesMatch(c, op, tag, message.size())) return false;
  if (op->bytes > 0) std::memcpy(op->data, message.data(), op->bytes);
  complete(c, op);
  return true;
}

Status Mesh::post(const std::vector<Op*>& ops) {
  if (aborted()) return abortCause();
  Conn* lastSend = nullptr;
  bool severalSendConns = false;
  for (Op* op : ops) {
    Conn& c = conn(op->peer);
    if (!op->recv) {
      storeLe(op->header, op->tag, 4);
      storeLe(op->header + 4, kMagic, 4);
      storeLe(op->header + 8, op->bytes, 8);
      c.sends.push_back(op);
      ++c.waiting;
      if (lastSend != nullptr && lastSend != &c) severalSendConns = true;
      lastSend = &c;
    } else {
      ++c.waiting;
      auto early = c.early.find(op->tag);
      if (early != c.early.end() && !early->second.empty()) {
        if (!deliver(c, op, op->tag, early->second.front())) return abortCause();
        early->second.pop_front();
      } else {
        c.posted[op->tag].push_back(op);
      }
    }
    if (!c.broken.isOk()) {
      breakConn(c, c.broken.message());
      return abortCause();
    }
  }
  // Write what the sockets take now: a small message leaves before post() returns.
  if (severalSendConns) {
    for (auto& c : conns_) {
      if (c && !c->sends.empty() && !aborted()) flush(*c);
    }
  } else if (lastSend != nullptr) {
    flush(*lastSend);
  }
  return aborted() ? abortCause() : Status::ok();
}

void Mesh::flush(Conn& c) {
  while (!c.sends.empty()) {
    iovec iov[kMaxIov];
    int n = 0;
    size_t total = 0;
    for (Op* op : c.sends) {
      if (n + 2 > kMaxIov || total >= kMaxWritev) break;
      if (op->moved < kHeaderBytes) {
        iov[n++] = iovec{op->header + op->moved, kHeaderBytes - op->moved};
        total += kHeaderBytes - op->moved;
      }
      const size_t sent = op->moved > kHeaderBytes ? op->moved - kHeaderBytes : 0;
      if (op->bytes > sent) {
        iov[n++] = iovec{op->data + sent, op->bytes - sent};
        total += op->bytes - sent;
      }
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(n);
    const ssize_t w = ::sendmsg(c.fd.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) breakConn(c, errnoText(errno));
      return;
    }
    size_t left = static_cast<size_t>(w);
    while (left > 0 && !c.sends.empty()) {
      Op* op = c.sends.front();
      const size_t need = kHeaderBytes + op->bytes - op->moved;
      const size_t take = std::min(need, left);
      op->moved += take;
      left -= take;
      if (take < need) break;
      c.sends.pop_front();
      complete(c, op);
    }
    if (static_cast<size_t>(w) < total) return;  // the socket is full: POLLOUT says when
  }
}

void Mesh::read(Conn& c) {
  for (int i = 0; i < kReadsPerPass && c.broken.isOk() && !aborted(); ++i) {
    ssize_t n;
    size_t asked;
    if (c.reading && c.stageBegin == c.stageEnd && c.bytes - c.got >= kDirectBytes) {
      uint8_t* dst = c.target != nullptr ? c.target->data : c.buffer.data();
      asked = static_cast<size_t>(c.bytes - c.got);
      n = ::recv(c.fd.get(), dst + c.got, asked, MSG_DONTWAIT);
      if (n > 0) {
        c.got += static_cast<uint64_t>(n);
        if (c.got == c.bytes) finishMessage(c);
      }
    } else {
      if (c.stageBegin == c.stageEnd) c.stageBegin = c.stageEnd = 0;
      asked = c.stage.size() - c.stageEnd;
      n = ::recv(c.fd.get(), c.stage.data() + c.stageEnd, asked, MSG_DONTWAIT);
      if (n > 0) {
        c.stageEnd += static_cast<size_t>(n);
        parse(c);
      }
    }
    if (n > 0) {
      if (static_cast<size_t>(n) < asked) return;  // drained: poll says when there is more
      continue;
    }
    if (n == 0) {
      breakConn(c, "connection closed by peer");
      return;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) breakConn(c, errnoText(errno));
    return;
  }
}

void Mesh::parse(Conn& c) {
  while (c.stageBegin < c.stageEnd && !aborted()) {
    const size_t avail = c.stageEnd - c.stageBegin;
    const uint8_t* p = c.stage.data() + c.stageBegin;
    if (!c.reading) {
      if (avail < kHeaderBytes) break;
      const auto tag = static_cast<uint32_t>(loadLe(p, 4));
      const auto magic = static_cast<uint32_t>(loadLe(p + 4, 4));
      const uint64_t bytes = loadLe(p + 8, 8);
      c.stageBegin += kHeaderBytes;
      if (magic != kMagic || bytes > kMaxMessage) {
        violation(c, "malformed message header (the byte stream is corrupt)");
        return;
      }
      startMessage(c, tag, bytes);
      continue;
    }
    const size_t take = static_cast<size_t>(std::min<uint64_t>(avail, c.bytes - c.got));
    uint8_t* dst = c.target != nullptr ? c.target->data : c.buffer.data();
    std::memcpy(dst + c.got, p, take);
    c.got += take;
    c.stageBegin += take;
    if (c.got == c.bytes) finishMessage(c);
  }
  if (c.stageBegin == c.stageEnd) {
    c.stageBegin = c.stageEnd = 0;
  } else if (c.stageBegin > 0) {  // a partial header: keep it at the front
    std::memmove(c.stage.data(), c.stage.data() + c.stageBegin, c.stageEnd - c.stageBegin);
    c.stageEnd -= c.stageBegin;
    c.stageBegin = 0;
  }
}

void Mesh::startMessage(Conn& c, uint32_t tag, uint64_t bytes) {
  c.reading = true;
  c.tag = tag;
  c.bytes = bytes;
  c.got = 0;
  c.target = nullptr;
  auto early = c.early.find(tag);
  const bool olderEarly = early != c.early.end() && !early->second.empty();
  auto posted = c.posted.find(tag);
  if (!olderEarly && posted != c.posted.end() && !posted->second.empty()) {
    Op* op = posted->second.front();
    if (!sizesMatch(c, op, tag, bytes)) return;
    posted->second.pop_front();
    c.target = op;
  } else {
    c.buffer.resize(static_cast<size_t>(bytes));
  }
  if (bytes == 0) finishMessage(c);
}

void Mesh::finishMessage(Conn& c) {
  c.reading = false;
  if (c.target != nullptr) {
    Op* op = c.target;
    c.target = nullptr;
    complete(c, op);
    return;
  }
  // No receive was posted when it started; one may have been since.
  auto posted = c.posted.find(c.tag);
  if (posted != c.posted.end() && !posted->second.empty()) {
    Op* op = posted->second.front();
    if (!deliver(c, op, c.tag, c.buffer)) return;
    posted->second.pop_front();
    if (c.buffer.capacity() > kStageBytes) std::vector<uint8_t>().swap(c.buffer);
    return;
  }
  c.early[c.tag].push_back(std::move(c.buffer));
  c.buffer = std::vector<uint8_t>();
}

Status Mesh::progress(Deadline until) {
  if (aborted()) {
    purge();
    return abortCause();
  }
  pollfds_.clear();
  polled_.clear();
  pollfds_.push_back(pollfd{wake_.get(), POLLIN, 0});
  for (auto& c : conns_) {
    if (!c || c->waiting == 0) continue;
    short events = POLLIN;
    if (!c->sends.empty()) events |= POLLOUT;
    pollfds_.push_back(pollfd{c->fd.get(), events, 0});
    polled_.push_back(c.get());
  }
  timespec ts = untilTimespec(until);
  const int n = ::ppoll(pollfds_.data(), pollfds_.size(), &ts, nullptr);
  if (n < 0) {
    if (errno == EINTR) return Status::ok();
    abortWith(Status(ErrorCode::kIo, "tcp: ppoll: " + errnoText(errno)));
  }
  for (size_t i = 0; n > 0 && i < polled_.size() && !aborted(); ++i) {
    const short ev = pollfds_[i + 1].revents;
    if (ev == 0) continue;
    Conn& c = *polled_[i];
    if (ev & (POLLIN | POLLHUP | POLLERR)) read(c);
    if ((ev & (POLLOUT | POLLHUP | POLLERR)) && !c.sends.empty() && !aborted()) flush(c);
  }
  if (aborted()) {
    purge();
    return abortCause();
  }
  return Status::ok();
}

Status connectMesh(std::shared_ptr<Store> store, int rank, int size,
                   const SocketAddress& listenAddress, std::chrono::milliseconds timeout,
                   std::vector<int> globalRanks, std::shared_ptr<Mesh>* out) {
  const Deadline deadline = Clock::now() + timeout;
  auto mesh = std::make_shared<Mesh>(rank, size, std::move(globalRanks), store, listenAddress);
  KOLO_RETURN_IF_ERROR(mesh->init());
  const std::string who = "tcp: rank " + std::to_string(rank) + " of " + std::to_string(size);
  if (size <= 1) {
    *out = std::move(mesh);
    return Status::ok();
  }
  // A rank that fails here leaves its abort note (blaming the peer it names) and its number
  // under kFailedKey, so that ranks still waiting for it relay its cause at once instead of
  // timing out and naming it, a survivor, in place of the rank really lost.
  auto fail = [&](Status cause) {
    mesh->abortWith(cause);
    const std::string me = std::to_string(rank);
    (void)store->set(kFailedKey, std::vector<uint8_t>(me.begin(), me.end()));
    return cause;
  };
  // Between slices of a wait: a connected peer that went away, or a rank that failed (its
  // cause relayed); ok when neither.
  auto peerFailure = [&]() -> Status {
    Status closed =
        mesh->closedConnection(Status(ErrorCode::kPeerLost, who + ": connecting the mesh"));
    if (!closed.isOk()) return closed;
    bool failed = false;
    std::vector<uint8_t> value;
    if (!store->check(kFailedKey, &failed).isOk() || !failed ||
        !store->get(kFailedKey, &value, std::chrono::milliseconds(1000)).isOk()) {
      return Status::ok();
    }
    const int peer = std::atoi(std::string(value.begin(), value.end()).c_str());
    if (peer == rank || peer < 0 || peer >= size) return Status::ok();
    return mesh->explainLoss(
        peer, Status(ErrorCode::kPeerLost,
                     who + ": " + mesh->describe(peer) + " failed while connecting the mesh"));
  };
  Fd listener;
  SocketAddress bound;
  KOLO_RETURN_IF_ERROR(listenOn(listenAddress, std::max(size, 128), &listener, &bound));
  std::random_device entropy;
  const uint64_t nonce = (uint64_t{entropy()} << 32) ^ entropy();
  const std::string mine = std::to_string(nonce) + "|" + bound.text();
  // Published only once the socket listens: a refused connection then means the rank is gone.
  KOLO_RETURN_IF_ERROR(store->set("tcp/addr/" + std::to_string(rank),
                                  std::vector<uint8_t>(mine.begin(), mine.end())));
  // Connect to every lower rank (their kernels accept before they call accept()).
  for (int peer = 0; peer < rank; ++peer) {
    std::vector<uint8_t> value;
    bool lost = false;
    Status s = waitInSlices(
        deadline,
        [&](std::chrono::milliseconds slice) {
          return store->get("tcp/addr/" + std::to_string(peer), &value, slice);
        },
        peerFailure, &lost);
    if (lost) return fail(s);
    if (!s.isOk()) {
      return fail(mesh->explainLoss(
          peer, Status(s.code(), who + ": " + mesh->describe(peer) +
                                     " did not publish its address: " + s.message())));
    }
    const std::string text(value.begin(), value.end());
    const size_t bar = text.find('|');
    SocketAddress addr;
    if (bar == std::string::npos) {
      return fail(Status(ErrorCode::kInternal, who + ": malformed address of rank " +
                                                   std::to_string(peer) + ": '" + text + "'"));
    }
    KOLO_RETURN_IF_ERROR(parseAddress(text.substr(bar + 1), &addr));
    const uint64_t theirs = std::strtoull(text.substr(0, bar).c_str(), nullptr, 10);
    Fd fd;
    s = connectTo(addr, deadline, &fd);
    if (s.isOk()) {
      uint8_t hello[kHelloBytes];
      storeLe(hello, kHelloMagic, 4);
      storeLe(hello + 4, static_cast<uint32_t>(rank), 4);
      storeLe(hello + 8, theirs, 8);
      s = sendAll(fd.get(), hello, sizeof hello, deadline);
    }
    if (!s.isOk()) {
      return fail(mesh->explainLoss(
          peer,
          Status(s.code(), who + ": connecting to " + mesh->describe(peer) + ": " + s.message())));
    }
    KOLO_RETURN_IF_ERROR(configureDataSocket(fd.get()));
    mesh->adopt(peer, std::move(fd));
  }
  // Accept every higher rank; a connection that does not say hello properly is dropped.
  std::vector<bool> have(static_cast<size_t>(size), false);
  int missing = size - 1 - rank;
  while (missing > 0) {
    Fd fd;
    bool lost = false;
    Status s = waitInSlices(
        deadline,
        [&](std::chrono::milliseconds slice) {
          return acceptOne(listener.get(), Clock::now() + slice, &fd);
        },
        peerFailure, &lost);
    if (lost) return fail(s);
    if (s.code() == ErrorCode::kTimeout) {
      std::string ranks;
      int first = -1;
      for (int r = rank + 1; r < size; ++r) {
        if (have[static_cast<size_t>(r)]) continue;
        if (first < 0) first = r;
        ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
      }
      return fail(mesh->explainLoss(
          first,
          Status(ErrorCode::kTimeout, who + ": rank(s) " + ranks + " did not connect within " +
                                          std::to_string(timeout.count()) + " ms")));
    }
    if (!s.isOk()) return fail(s);
    uint8_t hello[kHelloBytes];
    const Deadline helloBy = std::min(deadline, Clock::now() + std::chrono::seconds(5));
    if (!recvAll(fd.get(), hello, sizeof hello, helloBy).isOk()) continue;
    const int peer = static_cast<int>(loadLe(hello + 4, 4));
    if (loadLe(hello, 4) != kHelloMagic || loadLe(hello + 8, 8) != nonce || peer <= rank ||
        peer >= size || have[static_cast<size_t>(peer)]) {
      continue;
    }
    KOLO_RETURN_IF_ERROR(configureDataSocket(fd.get()));
    have[static_cast<size_t>(peer)] = true;
    --missing;
    mesh->adopt(peer, std::move(fd));
  }
  *out = std::move(mesh);
  return Status::ok();
}

}  // namespace kolo::tcp_detail
