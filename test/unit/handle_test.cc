// SPDX-License-Identifier: Apache-2.0
// HandleState: the result is published before the callback runs, and the handle settles (wait,
// done) only after the callback returned; a waiter's round hands callbacks to the runtime's
// thread (Progress::deferCallback); a wait on the runtime's own thread for an op that is not
// ready fails at once.
#include "ops/handle.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <thread>
#include <vector>

using namespace kolo;

namespace {

Deadline in(double seconds) {
  return Clock::now() +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

// A Progress that does no rounds; it takes callbacks (when `defers`) and says whether the
// calling thread is "the runtime's" (when `runtimeThread`).
struct FakeProgress : Progress {
  bool defers = false;
  bool runtimeThread = false;
  std::vector<std::function<void()>> taken;
  bool advance(Deadline) override { return false; }
  bool deferCallback(std::function<void()> fn) override {
    if (!defers) return false;
    taken.push_back(std::move(fn));
    return true;
  }
  bool postCallback(std::function<void()> fn) override { return deferCallback(std::move(fn)); }
  bool onRuntimeThread() const override { return runtimeThread; }
};

// The one callback `progress` took is pending: `h` is ready but not settled (a wait times out)
// until another thread, the runtime's, runs it (the callback sets ranOn to its thread).
void settlesWhenTakenRuns(FakeProgress& progress, HandleState& h, const std::thread::id& ranOn) {
  REQUIRE(progress.taken.size() == 1);
  CHECK_FALSE(h.done());
  CHECK(h.wait(in(0.05)).code() == ErrorCode::kTimeout);
  std::thread runtime([&] { progress.taken[0](); });
  runtime.join();
  CHECK(ranOn != std::this_thread::get_id());
  CHECK(h.done());
}

}  // namespace

TEST_CASE("a wait returns only after the callback returned") {
  auto h = std::make_shared<HandleState>();
  std::atomic<bool> callbackDone{false};
  std::atomic<bool> readyInside{false}, doneInside{true};
  // The callback holds on until the main thread has checked done() (a 150 ms sleep there made
  // that check depend on the scheduling); bounded, so a broken release cannot hang the test.
  std::atomic<bool> release{false}, released{false};
  h->setCallback([&](const Status& s) {
    readyInside = h->ready() && h->status().isOk() && s.isOk();
    doneInside = h->done() && h->wait(in(0)).isOk();  // its own handle: at once, on this thread
    const Deadline until = in(10);
    while (!release && Clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    released = release.load();
    // Still busy a moment after the release, so a wait that returned early would see
    // callbackDone false below (a correct wait is not affected by how long this takes).
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    callbackDone = true;
  });
  std::thread completer([&] { h->complete(Status::ok()); });
  while (!h->ready()) std::this_thread::yield();
  CHECK_FALSE(h->done());  // published, the callback still running
  release = true;
  REQUIRE(h->wait(in(10)).isOk());
  CHECK(callbackDone.load());  // the caller may now free what the callback uses
  CHECK(h->done());
  completer.join();
  CHECK(released.load());
  CHECK(readyInside.load());
  CHECK(doneInside.load());
}

TEST_CASE("a callback deferred to the runtime's thread settles the handle when it runs") {
  auto progress = std::make_shared<FakeProgress>();
  progress->defers = true;
  auto h = std::make_shared<HandleState>();
  h->setProgress(progress);
  std::thread::id ranOn;
  h->setCallback([&](const Status& s) {
    CHECK(s.code() == ErrorCode::kMismatch);
    ranOn = std::this_thread::get_id();
  });
  REQUIRE(h->complete(Status(ErrorCode::kMismatch, "x")));
  CHECK(h->ready());
  CHECK(h->status().code() == ErrorCode::kMismatch);
  settlesWhenTakenRuns(*progress, *h, ranOn);  // not run on the completing thread
  CHECK(h->wait(in(0)).code() == ErrorCode::kMismatch);

  // Without a callback nothing is deferred: the handle settles at completion.
  auto plain = std::make_shared<HandleState>();
  plain->setProgress(progress);
  plain->complete(Status::ok());
  CHECK(plain->done());
  CHECK(progress->taken.size() == 1);
}

TEST_CASE("a wait on the runtime's own thread for an op that is not ready fails at once") {
  auto progress = std::make_shared<FakeProgress>();
  progress->runtimeThread = true;
  auto h = std::make_shared<HandleState>();
  h->setProgress(progress);
  const auto t0 = Clock::now();
  Status s = h->wait();  // without a deadline: it would never return
  CHECK(s.code() == ErrorCode::kInvalidArgument);
  CHECK(s.message().find("callbacks must not block") != std::string::npos);
  CHECK(h->wait(in(5)).code() == ErrorCode::kInvalidArgument);
  CHECK(Clock::now() - t0 < std::chrono::seconds(1));
  h->complete(Status::ok());
  CHECK(h->wait().isOk());  // a ready op's status is fine to read there
}

TEST_CASE("parts: the handle completes with the last part and keeps the first error") {
  auto h = std::make_shared<HandleState>();
  h->expectParts(3);
  int calls = 0;
  h->setCallback([&](const Status& s) {
    ++calls;
    CHECK(s.code() == ErrorCode::kPeerLost);
  });
  CHECK_FALSE(h->complete(Status::ok()));
  CHECK_FALSE(h->complete(Status(ErrorCode::kPeerLost, "lost rank 1")));
  CHECK_FALSE(h->ready());
  CHECK(h->complete(Status(ErrorCode::kTimeout, "later")));
  CHECK_FALSE(h->complete(Status::ok()));  // completed once
  CHECK(calls == 1);
  CHECK(h->wait(in(0)).message() == "lost rank 1");
}

TEST_CASE("a callback attached after its op completed still runs on the runtime's thread") {
  // The C API attaches a callback right after the enqueue, and a round may complete the op in
  // between: the callback must not then run on the submitting thread (which may hold locks the
  // callback takes); the handle is unsettled until the runtime's thread ran it.
  auto progress = std::make_shared<FakeProgress>();
  progress->defers = true;
  auto h = std::make_shared<HandleState>();
  h->setProgress(progress);
  REQUIRE(h->complete(Status::ok()));
  CHECK(h->done());  // no callback yet: settled at completion
  std::thread::id ranOn;
  h->setCallback([&](const Status& s) {
    CHECK(s.isOk());
    ranOn = std::this_thread::get_id();
  });
  CHECK(ranOn == std::thread::id());
  settlesWhenTakenRuns(*progress, *h, ranOn);  // handed over, not run here

  // No runtime thread left (Progress refuses): it runs at once, on this thread.
  progress->defers = false;
  auto late = std::make_shared<HandleState>();
  late->setProgress(progress);
  late->complete(Status::ok());
  bool ran = false;
  late->setCallback([&](const Status&) { ran = true; });
  CHECK(ran);
  CHECK(late->done());
}
