// SPDX-License-Identifier: Apache-2.0
// transport/gloo/gloo_interpose.h: GroupWaits and WatchedBuffer against the contracts in their
// header comments, and the one property of the installed Gloo that gloo_interpose.cc relies on
// beyond the signatures: an abort that lands just before a wait starts still ends that wait.
// Contract-only cases wrap a recording stand-in for Gloo's buffer; the rest run over Gloo's TCP
// transport on loopback (two thread ranks connected by connectGroup, as the transport does).
// Catch2 assertions are not thread-safe: waiting threads record what they saw and the main
// thread checks it after joining them. Built without Gloo, the file has one case that says so.
#include <catch2/catch.hpp>

#include "kolo/build_config.h"

#if KOLO_HAVE_GLOO

#include <gloo/common/error.h>
#include <gloo/transport/tcp/device.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "rendezvous/store.h"
#include "test/unit/loopback_ranks.h"
#include "transport/gloo/gloo_internal.h"
#include "transport/gloo/gloo_interpose.h"

using namespace kolo;
using namespace kolo::gloo_detail;
using kolo::testing::onRanks;
using kolo::testing::requireAllOk;
using namespace std::chrono_literals;

namespace {

// Far beyond every bound below: a wait that is not ended by an abort runs into it, and the
// elapsed-time checks fail.
constexpr std::chrono::milliseconds kLongWait = 30s;
// What "promptly" means here: a wait ended by an abort returns well within it, on a loaded CI
// machine too.
constexpr double kPromptSeconds = 5.0;

double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Runs `wait` on a thread, calls `interrupt` 100 ms later, and returns how long the wait took;
// *result: 1 when it returned true, 0 when false, 2 when it threw.
double interruptedWait(const std::function<bool()>& wait, const std::function<void()>& interrupt,
                       int* result) {
  double seconds = 0;
  std::thread waiter([&] {
    const auto start = Clock::now();
    try {
      *result = wait() ? 1 : 0;
    } catch (const std::exception&) {
      *result = 2;
    }
    seconds = secondsSince(start);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  interrupt();
  waiter.join();
  return seconds;
}

// What the stand-in buffer was asked to do.
struct Calls {
  std::atomic<int> waitRecv{0}, waitSend{0}, abortWaitRecv{0}, abortWaitSend{0}, send{0}, recv{0};
  int forwarded() const { return waitRecv + waitSend + send + recv; }
};

// Gloo's buffer interface with nothing behind it: records the calls, every wait completes.
class RecordingBuffer final : public gloo::transport::UnboundBuffer {
 public:
  explicit RecordingBuffer(std::shared_ptr<Calls> calls)
      : UnboundBuffer(nullptr, 0), calls_(std::move(calls)) {}
  bool waitRecv(int*, std::chrono::milliseconds) override {
    ++calls_->waitRecv;
    return true;
  }
  bool waitSend(int*, std::chrono::milliseconds) override {
    ++calls_->waitSend;
    return true;
  }
  void abortWaitRecv() override { ++calls_->abortWaitRecv; }
  void abortWaitSend() override { ++calls_->abortWaitSend; }
  void send(int, uint64_t, size_t, size_t) override { ++calls_->send; }
  void recv(int, uint64_t, size_t, size_t) override { ++calls_->recv; }
  void recv(std::vector<int>, uint64_t, size_t, size_t) override { ++calls_->recv; }

 private:
  std::shared_ptr<Calls> calls_;
};

std::unique_ptr<WatchedBuffer> recordingBuffer(const std::shared_ptr<GroupWaits>& waits,
                                               std::shared_ptr<Calls> calls) {
  return std::make_unique<WatchedBuffer>(std::make_unique<RecordingBuffer>(std::move(calls)),
                                         waits);
}

// Runs fn, expecting gloo::IoException; returns its message ("" when nothing was thrown).
template <typename Fn>
std::string ioExceptionOf(Fn fn) {
  try {
    fn();
  } catch (const gloo::IoException& e) {
    return e.what();
  }
  return "";
}

// The text a receive wait on `buf` throws as a gloo::IoException ("" when it throws none) when
// `interrupt` runs 100 ms into it; *seconds: how long the wait took.
std::string recvInterruptedBy(gloo::transport::UnboundBuffer& buf,
                              const std::function<void()>& interrupt, double* seconds) {
  std::string thrown;
  int result = -1;
  *seconds = interruptedWait(
      [&] {
        thrown = ioExceptionOf([&] { buf.waitRecv(nullptr, kLongWait); });
        return false;
      },
      interrupt, &result);
  return thrown;
}

std::shared_ptr<gloo::transport::Device> loopbackDevice() {
  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  return gloo::transport::tcp::CreateDevice(attr);
}

// One rank's Gloo buffer on a context of its own (no peers, no connection): what Gloo itself
// does with a wait, with no kolo code around it.
struct LoneContext {
  std::shared_ptr<gloo::transport::Device> device = loopbackDevice();
  std::shared_ptr<gloo::transport::Context> context;
  uint64_t word = 0;
  LoneContext() {
    context = device->createContext(0, 1);
    context->setTimeout(kLongWait);
  }
  std::unique_ptr<gloo::transport::UnboundBuffer> buffer() {
    return context->createUnboundBuffer(&word, sizeof(word));
  }
};

// Gloo's buffer, with the group's abort landing exactly between WatchedBuffer's own check of
// aborted() and the start of Gloo's wait: the window gloo_interpose.cc relies on Gloo for.
class AbortJustBeforeWait final : public gloo::transport::UnboundBuffer {
 public:
  AbortJustBeforeWait(std::unique_ptr<gloo::transport::UnboundBuffer> gloo,
                      std::shared_ptr<GroupWaits> waits, std::string message)
      : UnboundBuffer(gloo->ptr, gloo->size),
        gloo_(std::move(gloo)),
        waits_(std::move(waits)),
        message_(std::move(message)) {}
  bool waitRecv(int* rank, std::chrono::milliseconds timeout) override {
    waits_->abortAll(message_);  // reaches Gloo's buffer through abortWaitRecv below
    return gloo_->waitRecv(rank, timeout);
  }
  bool waitSend(int* rank, std::chrono::milliseconds timeout) override {
    waits_->abortAll(message_);
    return gloo_->waitSend(rank, timeout);
  }
  void abortWaitRecv() override { gloo_->abortWaitRecv(); }
  void abortWaitSend() override { gloo_->abortWaitSend(); }
  void send(int r, uint64_t slot, size_t off, size_t n) override { gloo_->send(r, slot, off, n); }
  void recv(int r, uint64_t slot, size_t off, size_t n) override { gloo_->recv(r, slot, off, n); }
  void recv(std::vector<int> rs, uint64_t slot, size_t off, size_t n) override {
    gloo_->recv(std::move(rs), slot, off, n);
  }

 private:
  std::unique_ptr<gloo::transport::UnboundBuffer> gloo_;
  std::shared_ptr<GroupWaits> waits_;
  std::string message_;
};

// Two thread ranks connected through Gloo's TCP transport on loopback, each group's device,
// context and buffers kolo's watched ones (connectGroup, as the Gloo transport makes them).
struct WatchedPair {
  std::vector<std::shared_ptr<GlooShared>> ranks{2};
  explicit WatchedPair(std::chrono::milliseconds timeout = kLongWait) {
    std::shared_ptr<Store> store = makeMemoryStore();
    requireAllOk(onRanks(2, [&](int r) {
      return connectGroup(store, r, 2, loopbackDevice(), timeout, {0, 1}, nullptr,
                          &ranks[static_cast<size_t>(r)]);
    }));
  }
  // A buffer of rank r's group: a WatchedBuffer (WatchedContext makes every buffer).
  std::unique_ptr<gloo::transport::UnboundBuffer> buffer(int r, void* data, size_t bytes) {
    return ranks[static_cast<size_t>(r)]->context->createUnboundBuffer(data, bytes);
  }
  GroupWaits& waits(int r) { return *ranks[static_cast<size_t>(r)]->waits; }
};

constexpr uint64_t kSlot = 7;

}  // namespace

// ---- the installed Gloo -----------------------------------------------------------------------

TEST_CASE("gloo interpose: Gloo keeps an abort made before a wait; that wait ends at once") {
  LoneContext gloo;
  auto buffer = gloo.buffer();
  buffer->abortWaitRecv();
  auto start = Clock::now();
  CHECK_FALSE(buffer->waitRecv(nullptr, kLongWait));  // false: aborted, not completed
  CHECK(secondsSince(start) < kPromptSeconds);

  buffer->abortWaitSend();
  start = Clock::now();
  CHECK_FALSE(buffer->waitSend(nullptr, kLongWait));
  CHECK(secondsSince(start) < kPromptSeconds);
}

TEST_CASE("gloo interpose: a group abort just before Gloo's wait ends it, with its message") {
  for (bool receive : {true, false}) {
    CAPTURE(receive);
    LoneContext gloo;
    auto waits = std::make_shared<GroupWaits>();
    const std::string message = "kolo: transport aborted: test abort";
    WatchedBuffer buffer(std::make_unique<AbortJustBeforeWait>(gloo.buffer(), waits, message),
                         waits);
    const auto start = Clock::now();
    const std::string thrown = ioExceptionOf([&] {
      if (receive) {
        (void)buffer.waitRecv(nullptr, kLongWait);
      } else {
        (void)buffer.waitSend(nullptr, kLongWait);
      }
    });
    CHECK(secondsSince(start) < kPromptSeconds);
    CHECK(thrown == message);
    CHECK(waits->aborted());
  }
}

// ---- GroupWaits -------------------------------------------------------------------------------

TEST_CASE("gloo interpose: GroupWaits before and after abortAll; the first message wins") {
  GroupWaits waits;
  CHECK_FALSE(waits.aborted());
  CHECK_NOTHROW(waits.throwIfAborted());
  waits.abortAll("first");
  CHECK(waits.aborted());
  CHECK(ioExceptionOf([&] { waits.throwIfAborted(); }) == "first");
  waits.abortAll("second");  // idempotent: no effect
  CHECK(ioExceptionOf([&] { waits.throwIfAborted(); }) == "first");
}

TEST_CASE("gloo interpose: concurrent abortAll aborts each live buffer once each way") {
  auto waits = std::make_shared<GroupWaits>();
  std::vector<std::shared_ptr<Calls>> calls;
  std::vector<std::unique_ptr<WatchedBuffer>> buffers;
  for (int i = 0; i < 4; ++i) {
    calls.push_back(std::make_shared<Calls>());
    buffers.push_back(recordingBuffer(waits, calls.back()));
  }
  std::vector<std::thread> callers;
  for (int t = 0; t < 8; ++t) {
    callers.emplace_back([&, t] { waits->abortAll("abort " + std::to_string(t)); });
  }
  for (auto& t : callers) t.join();
  for (const auto& c : calls) {
    CHECK(c->abortWaitRecv == 1);
    CHECK(c->abortWaitSend == 1);
    CHECK(c->forwarded() == 0);
  }
  // One caller's message, the same every time it is asked.
  const std::string first = ioExceptionOf([&] { waits->throwIfAborted(); });
  CHECK(first.rfind("abort ", 0) == 0);
  CHECK(ioExceptionOf([&] { buffers[0]->waitRecv(nullptr, 1s); }) == first);
  CHECK(ioExceptionOf([&] { buffers[3]->send(1, kSlot, 0, 0); }) == first);
}

TEST_CASE("gloo interpose: a buffer is in its group from construction to destruction only") {
  auto waits = std::make_shared<GroupWaits>();
  auto keptCalls = std::make_shared<Calls>();
  auto goneCalls = std::make_shared<Calls>();
  auto kept = recordingBuffer(waits, keptCalls);
  recordingBuffer(waits, goneCalls).reset();  // destroyed: removed from the group
  {
    // Destroyed out of creation order too (remove swaps the last live buffer into its place).
    auto a = recordingBuffer(waits, std::make_shared<Calls>());
    auto b = recordingBuffer(waits, goneCalls);
    b.reset();
  }
  waits->abortAll("aborted");
  CHECK(keptCalls->abortWaitRecv == 1);
  CHECK(keptCalls->abortWaitSend == 1);
  CHECK(goneCalls->abortWaitRecv == 0);
  CHECK(goneCalls->abortWaitSend == 0);

  // Created after the abort: not aborted through Gloo, but every call sees aborted() first.
  auto lateCalls = std::make_shared<Calls>();
  auto late = recordingBuffer(waits, lateCalls);
  CHECK(ioExceptionOf([&] { late->waitRecv(nullptr, 1s); }) == "aborted");
  CHECK(lateCalls->abortWaitRecv == 0);
  CHECK(lateCalls->forwarded() == 0);
}

// ---- WatchedBuffer ----------------------------------------------------------------------------

// Every wait, send and receive after the group's abort throws its message, never reaching Gloo.
TEST_CASE("gloo interpose: WatchedBuffer forwards until the group aborts, then throws") {
  auto waits = std::make_shared<GroupWaits>();
  auto calls = std::make_shared<Calls>();
  auto buffer = recordingBuffer(waits, calls);
  CHECK(buffer->waitRecv(nullptr, 1s));
  CHECK(buffer->waitSend(nullptr, 1s));
  buffer->send(1, kSlot, 0, 0);
  buffer->recv(1, kSlot, 0, 0);
  buffer->recv(std::vector<int>{1}, kSlot, 0, 0);
  buffer->abortWaitRecv();
  buffer->abortWaitSend();
  CHECK(calls->waitRecv == 1);
  CHECK(calls->waitSend == 1);
  CHECK(calls->send == 1);
  CHECK(calls->recv == 2);
  CHECK(calls->abortWaitRecv == 1);
  CHECK(calls->abortWaitSend == 1);
  CHECK_FALSE(waits->aborted());  // a buffer's own abortWait* does not abort the group

  waits->abortAll("group aborted");
  const int before = calls->forwarded();
  CHECK(ioExceptionOf([&] { buffer->waitRecv(nullptr, 1s); }) == "group aborted");
  CHECK(ioExceptionOf([&] { buffer->waitSend(nullptr, 1s); }) == "group aborted");
  CHECK(ioExceptionOf([&] { buffer->send(1, kSlot, 0, 0); }) == "group aborted");
  CHECK(ioExceptionOf([&] { buffer->recv(1, kSlot, 0, 0); }) == "group aborted");
  CHECK(ioExceptionOf([&] { buffer->recv(std::vector<int>{1}, kSlot, 0, 0); }) == "group aborted");
  CHECK(calls->forwarded() == before);
}

TEST_CASE("gloo interpose: a completed transfer over Gloo's TCP returns true, naming the peer") {
  WatchedPair pair;
  uint64_t out = 0x0123456789abcdefull, in = 0;
  auto sendBuf = pair.buffer(0, &out, sizeof(out));
  auto recvBuf = pair.buffer(1, &in, sizeof(in));
  REQUIRE(dynamic_cast<WatchedBuffer*>(sendBuf.get()) != nullptr);
  REQUIRE(dynamic_cast<WatchedBuffer*>(recvBuf.get()) != nullptr);
  recvBuf->recv(0, kSlot);
  sendBuf->send(1, kSlot);
  int from = -1, to = -1;
  CHECK(recvBuf->waitRecv(&from, kLongWait));
  CHECK(sendBuf->waitSend(&to, kLongWait));
  CHECK(from == 0);
  CHECK(to == 1);
  CHECK(in == out);
}

// abortWaitRecv / abortWaitSend from another thread: the wait returns false, the operation stays
// posted and completes later.
TEST_CASE("gloo interpose: a buffer's own abortWait* ends a wait with false, not the op") {
  WatchedPair pair;
  uint64_t out = 42, in = 0;
  auto sendBuf = pair.buffer(0, &out, sizeof(out));
  auto recvBuf = pair.buffer(1, &in, sizeof(in));

  // A receive that no send matches yet.
  recvBuf->recv(0, kSlot);
  int result = -1;
  double seconds = interruptedWait([&] { return recvBuf->waitRecv(nullptr, kLongWait); },
                                   [&] { recvBuf->abortWaitRecv(); }, &result);
  CHECK(result == 0);
  CHECK(seconds < kPromptSeconds);
  CHECK_FALSE(pair.waits(1).aborted());

  // A send whose receive is not posted yet (Gloo sends once the peer's receive is announced).
  uint64_t sink = 0;
  auto sendBuf2 = pair.buffer(0, &out, sizeof(out));
  sendBuf2->send(1, kSlot + 1);
  result = -1;
  seconds = interruptedWait([&] { return sendBuf2->waitSend(nullptr, kLongWait); },
                            [&] { sendBuf2->abortWaitSend(); }, &result);
  CHECK(result == 0);
  CHECK(seconds < kPromptSeconds);

  // Both operations are still posted: the peers complete them, and the next waits see it.
  sendBuf->send(1, kSlot);
  CHECK(recvBuf->waitRecv(nullptr, kLongWait));
  CHECK(sendBuf->waitSend(nullptr, kLongWait));
  CHECK(in == 42);
  auto recvBuf2 = pair.buffer(1, &sink, sizeof(sink));
  recvBuf2->recv(0, kSlot + 1);
  CHECK(recvBuf2->waitRecv(nullptr, kLongWait));
  CHECK(sendBuf2->waitSend(nullptr, kLongWait));
  CHECK(sink == 42);
}

TEST_CASE("gloo interpose: the group's abort ends a wait in progress with the abort message") {
  WatchedPair pair;
  uint64_t in = 0;
  auto recvBuf = pair.buffer(1, &in, sizeof(in));
  recvBuf->recv(0, kSlot);  // rank 0 never sends
  double seconds = 0;
  const std::string thrown = recvInterruptedBy(
      *recvBuf, [&] { pair.waits(1).abortAll("kolo: transport aborted: test"); }, &seconds);
  CHECK(thrown == "kolo: transport aborted: test");
  CHECK(seconds < kPromptSeconds);
}

TEST_CASE("gloo interpose: Gloo's timeout passing is a gloo::IoException, not an abort") {
  WatchedPair pair;
  uint64_t in = 0;
  auto recvBuf = pair.buffer(1, &in, sizeof(in));
  recvBuf->recv(0, kSlot);  // rank 0 never sends
  const auto start = Clock::now();
  const std::string thrown = ioExceptionOf([&] { recvBuf->waitRecv(nullptr, 200ms); });
  const double seconds = secondsSince(start);
  CHECK_FALSE(thrown.empty());
  CHECK(seconds >= 0.15);
  CHECK(seconds < kPromptSeconds);
  CHECK_FALSE(pair.waits(1).aborted());
}

TEST_CASE("gloo interpose: a receive whose connection closes is a gloo::IoException") {
  WatchedPair pair;
  uint64_t in = 0;
  auto recvBuf = pair.buffer(1, &in, sizeof(in));
  recvBuf->recv(0, kSlot);
  double seconds = 0;
  const std::string thrown = recvInterruptedBy(
      *recvBuf, [&] { pair.ranks[0]->context->closeConnections(); },  // rank 0 goes away
      &seconds);
  CHECK_FALSE(thrown.empty());
  CHECK(seconds < kPromptSeconds);
  CHECK_FALSE(pair.waits(1).aborted());
}

#else

TEST_CASE("gloo interpose: kolo was built without Gloo") { WARN("kolo was built without Gloo"); }

#endif
