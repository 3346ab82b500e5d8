// SPDX-License-Identifier: Apache-2.0
// The runtime end to end on N thread ranks over the loopback transport: every op through the
// coordinator (negotiation, cache, fusion), errors on every rank, joins, sets, shutdown.
#include "core/runtime.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <numeric>
#include <thread>

#include "test/support/runtime_over.h"
#include "test/unit/thread_safe_catch.h"  // the rank threads assert
#include "transport/loopback/loopback_transport.h"

using namespace kolo;

namespace {

Config testConfig() {
  Config c;
  c.heartbeatSeconds = 0.05;
  c.timeoutSeconds = 20;
  c.cycleTimeMs = 0.5;
  c.stallCheck = false;
  return c;
}

// Runs fn(runtime, rank) on n thread ranks; every rank shuts down after a final barrier.
void onRanks(int n, const std::function<void(Runtime&, int)>& fn, Config cfg = testConfig()) {
  std::vector<std::unique_ptr<Transport>> group;
  REQUIRE(createLoopbackGroup(n, &group).isOk());
  std::vector<std::unique_ptr<Runtime>> rts(n);
  for (int r = 0; r < n; ++r) {
    REQUIRE(createRuntimeOver(cfg, std::move(group[r]), {}, &rts[r]).isOk());
  }
  std::vector<std::thread> threads;
  std::mutex failMu;
  std::vector<std::string> failures;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      fn(*rts[r], r);
      HandlePtr h;
      if (rts[r]->barrier(0, &h).isOk()) h->wait().ignore();
    });
  }
  for (auto& t : threads) t.join();
  for (auto& rt : rts) REQUIRE(rt->shutdown().isOk());
}

TensorView view(void* data, DataType t, std::vector<int64_t> shape) {
  TensorView v;
  v.data = data;
  v.dtype = t;
  v.shape = std::move(shape);
  return v;
}

Status waitOk(Runtime&, const HandlePtr& h) {
  return h->wait(Clock::now() + std::chrono::seconds(30));
}

}  // namespace

TEST_CASE("allreduce sums int32 bitwise and averages floats on 1-4 ranks") {
  for (int n : {1, 2, 3, 4}) {
    onRanks(n, [n](Runtime& rt, int rank) {
      std::vector<int32_t> a(1000);
      for (int i = 0; i < 1000; ++i) a[i] = i * (rank + 1);
      HandlePtr h;
      REQUIRE(rt.allreduce("ints", view(a.data(), DataType::kInt32, {10, 100}), nullptr,
                           ReduceOp::kSum, 1.0, 1.0, 0, &h)
                  .isOk());
      REQUIRE(waitOk(rt, h).isOk());
      const int factor = n * (n + 1) / 2;
      for (int i = 0; i < 1000; ++i) REQUIRE(a[i] == i * factor);

      std::vector<float> f(33, static_cast<float>(rank));
      std::vector<float> out(33, -1.f);
      TensorView o = view(out.data(), DataType::kFloat32, {33});
      REQUIRE(rt.allreduce("floats", view(f.data(), DataType::kFloat32, {33}), &o,
                           ReduceOp::kAverage, 1.0, 1.0, 0, &h)
                  .isOk());
      REQUIRE(waitOk(rt, h).isOk());
      for (float x : out) REQUIRE(x == Approx((n - 1) / 2.0));
      for (float x : f) REQUIRE(x == static_cast<float>(rank));  // input untouched
    });
  }
}

TEST_CASE("thirty async ops of mixed dtypes in flight at once, repeated (cache path)") {
  onRanks(3, [](Runtime& rt, int rank) {
    for (int iter = 0; iter < 4; ++iter) {
      std::vector<std::vector<int64_t>> i64(15);
      std::vector<std::vector<double>> f64(15);
      std::vector<HandlePtr> hs;
      for (int k = 0; k < 15; ++k) {
        i64[k].assign(k + 1, rank + k);
        f64[k].assign(2 * k + 1, 0.5 * rank);
        HandlePtr h;
        REQUIRE(rt.allreduce("i64." + std::to_string(k),
                             view(i64[k].data(), DataType::kInt64, {k + 1}), nullptr,
                             ReduceOp::kSum, 1.0, 1.0, 0, &h)
                    .isOk());
        hs.push_back(h);
        REQUIRE(rt.allreduce("f64." + std::to_string(k),
                             view(f64[k].data(), DataType::kFloat64, {2 * k + 1}), nullptr,
                             ReduceOp::kMax, 1.0, 1.0, 0, &h)
                    .isOk());
        hs.push_back(h);
      }
      for (auto& h : hs) REQUIRE(waitOk(rt, h).isOk());
      for (int k = 0; k < 15; ++k) {
        for (auto x : i64[k]) REQUIRE(x == 3 * k + 3);  // (0+k)+(1+k)+(2+k)
        for (auto x : f64[k]) REQUIRE(x == 1.0);
      }
    }
  });
}

TEST_CASE("a shape mismatch fails on every rank with one message, then the runtime works") {
  std::vector<std::string> messages(3);
  onRanks(3, [&](Runtime& rt, int rank) {
    std::vector<float> a(rank == 2 ? 17 * 4 : 17 * 3, 1.f);
    HandlePtr h;
    REQUIRE(rt.allreduce("grad/fc1", view(a.data(), DataType::kFloat32, {17, rank == 2 ? 4 : 3}),
                         nullptr, ReduceOp::kSum, 1.0, 1.0, 0, &h)
                .isOk());
    Status s = waitOk(rt, h);
    REQUIRE(s.code() == ErrorCode::kMismatch);
    messages[rank] = s.message();
    std::vector<int32_t> b(5, 2);
    REQUIRE(rt.allreduce("after", view(b.data(), DataType::kInt32, {5}), nullptr, ReduceOp::kSum,
                         1.0, 1.0, 0, &h)
                .isOk());
    REQUIRE(waitOk(rt, h).isOk());
    for (auto x : b) REQUIRE(x == 6);
  });
  CHECK(messages[0] == "allreduce 'grad/fc1': rank 0 sent shape [17, 3], rank 2 sent [17, 4]");
  CHECK(messages[1] == messages[0]);
  CHECK(messages[2] == messages[0]);
}

TEST_CASE("a duplicate name fails at once and the first op still completes") {
  // Fixed order: rank 1 submits "dup" and submits it again while rank 0 has not submitted it, so
  // the first is still pending and the second must be refused. Only then does rank 0 submit
  // "dup" (once). Both submitting twice back to back raced: a rank whose first "dup" had already
  // completed got its second accepted as a new op that the other rank never sent.
  std::atomic<bool> refused{false};
  onRanks(2, [&](Runtime& rt, int rank) {
    std::vector<int32_t> a(4, 1), b(4, 1);
    HandlePtr h1, h2;
    if (rank == 1) {
      REQUIRE(rt.allreduce("dup", view(a.data(), DataType::kInt32, {4}), nullptr, ReduceOp::kSum,
                           1.0, 1.0, 0, &h1)
                  .isOk());
      Status s = rt.allreduce("dup", view(b.data(), DataType::kInt32, {4}), nullptr, ReduceOp::kSum,
                              1.0, 1.0, 0, &h2);
      REQUIRE(s.code() == ErrorCode::kDuplicateName);
      REQUIRE(s.message().find("'dup'") != std::string::npos);
      refused = true;
    } else {
      auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (!refused && std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      REQUIRE(refused);
      REQUIRE(rt.allreduce("dup", view(a.data(), DataType::kInt32, {4}), nullptr, ReduceOp::kSum,
                           1.0, 1.0, 0, &h1)
                  .isOk());
    }
    REQUIRE(waitOk(rt, h1).isOk());
    for (auto x : a) REQUIRE(x == 2);
  });
}

TEST_CASE("allgather, broadcast, alltoall and reducescatter through the runtime") {
  onRanks(3, [](Runtime& rt, int rank) {
    // allgather: rank r contributes r+1 rows of 2 int16
    std::vector<int16_t> in((rank + 1) * 2, static_cast<int16_t>(rank));
    HandlePtr h;
    REQUIRE(rt.allgather("ag", view(in.data(), DataType::kInt16, {rank + 1, 2}), {}, 0, &h).isOk());
    REQUIRE(waitOk(rt, h).isOk());
    REQUIRE(h->outputShape == std::vector<int64_t>{6, 2});
    const auto* g = reinterpret_cast<const int16_t*>(h->outputData);
    std::vector<int16_t> expect = {0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2};
    REQUIRE(std::vector<int16_t>(g, g + 12) == expect);

    std::vector<uint8_t> bc(7, static_cast<uint8_t>(rank * 10));
    REQUIRE(rt.broadcast("bc", view(bc.data(), DataType::kUInt8, {7}), 2, 0, &h).isOk());
    REQUIRE(waitOk(rt, h).isOk());
    for (auto x : bc) REQUIRE(x == 20);

    // alltoall: rank r sends (k + 1) rows to rank k, each row = 100 * r + k
    std::vector<int64_t> splits = {1, 2, 3};
    std::vector<int32_t> a2a;
    for (int k = 0; k < 3; ++k)
      for (int j = 0; j <= k; ++j) a2a.push_back(100 * rank + k);
    REQUIRE(rt.alltoall("a2a", view(a2a.data(), DataType::kInt32, {6}), splits, {}, 0, &h).isOk());
    REQUIRE(waitOk(rt, h).isOk());
    REQUIRE(h->receivedSplits == std::vector<int32_t>(3, rank + 1));
    const auto* got = reinterpret_cast<const int32_t*>(h->outputData);
    for (int src = 0; src < 3; ++src)
      for (int j = 0; j <= rank; ++j) REQUIRE(got[src * (rank + 1) + j] == 100 * src + rank);

    // reducescatter of 7 rows: ranks get 3, 2, 2 rows
    std::vector<float> rs(7 * 2);
    for (size_t i = 0; i < rs.size(); ++i) rs[i] = static_cast<float>(i);
    REQUIRE(rt.reducescatter("rs", view(rs.data(), DataType::kFloat32, {7, 2}), ReduceOp::kSum, 1.0,
                             1.0, {}, 0, &h)
                .isOk());
    REQUIRE(waitOk(rt, h).isOk());
    int64_t rows = rank == 0 ? 3 : 2, first = rank == 0 ? 0 : rank == 1 ? 3 : 5;
    REQUIRE(h->outputShape == std::vector<int64_t>{rows, 2});
    const auto* out = reinterpret_cast<const float*>(h->outputData);
    for (int64_t i = 0; i < rows * 2; ++i) REQUIRE(out[i] == 3.f * (first * 2 + i));
  });
}

TEST_CASE("grouped allreduce completes as one") {
  onRanks(2, [](Runtime& rt, int rank) {
    for (int iter = 0; iter < 3; ++iter) {  // later iterations meet a warm response cache
      std::vector<int32_t> a(3, 1), b(1000, 2), c(5, rank);
      HandlePtr h, single;
      REQUIRE(rt.allreduce("grp.single", view(c.data(), DataType::kInt32, {5}), nullptr,
                           ReduceOp::kSum, 1.0, 1.0, 0, &single)
                  .isOk());
      REQUIRE(rt.groupedAllreduce("grp",
                                  {view(a.data(), DataType::kInt32, {3}),
                                   view(b.data(), DataType::kInt32, {1000})},
                                  nullptr, ReduceOp::kSum, 1.0, 1.0, 0, &h)
                  .isOk());
      REQUIRE(waitOk(rt, h).isOk());
      REQUIRE(waitOk(rt, single).isOk());
      for (auto x : a) REQUIRE(x == 2);
      for (auto x : b) REQUIRE(x == 4);
      for (auto x : c) REQUIRE(x == 1);
    }
  });
}

TEST_CASE("join: joined ranks contribute zeros and all agree on the last rank") {
  std::vector<int32_t> last(3, -2);
  onRanks(3, [&](Runtime& rt, int rank) {
    HandlePtr h;
    if (rank == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      std::vector<float> x(4, 3.f);
      REQUIRE(rt.allreduce("j", view(x.data(), DataType::kFloat32, {4}), nullptr,
                           ReduceOp::kAverage, 1.0, 1.0, 0, &h)
                  .isOk());
      REQUIRE(waitOk(rt, h).isOk());
      for (float v : x) REQUIRE(v == Approx(3.0 / 3));  // ranks 0 and 2 joined: they sent zeros
      std::vector<float> y(4, 3.f);
      HandlePtr g;
      REQUIRE(rt.allgather("j.ag", view(y.data(), DataType::kFloat32, {4}), {}, 0, &g).isOk());
      Status s = waitOk(rt, g);
      REQUIRE(s.code() == ErrorCode::kJoined);
    }
    REQUIRE(rt.join(&h).isOk());
    REQUIRE(waitOk(rt, h).isOk());
    last[rank] = h->lastJoinedRank;
  });
  CHECK(last[0] == 1);
  CHECK(last[1] == 1);
  CHECK(last[2] == 1);
}

TEST_CASE("process sets: ops involve only members; ids agree") {
  onRanks(4, [](Runtime& rt, int rank) {
    HandlePtr h;
    REQUIRE(rt.addProcessSet({1, 3}, &h).isOk());
    REQUIRE(waitOk(rt, h).isOk());
    int32_t id = h->processSetId;
    REQUIRE(id == 1);
    if (rank == 1 || rank == 3) {
      std::vector<int32_t> a(5, rank);
      REQUIRE(rt.allreduce("odd", view(a.data(), DataType::kInt32, {5}), nullptr, ReduceOp::kSum,
                           1.0, 1.0, id, &h)
                  .isOk());
      {
        Status s = waitOk(rt, h);
        if (!s.isOk()) fprintf(stderr, "rank %d: %s\n", rank, s.toString().c_str());
        REQUIRE(s.isOk());
      }
      for (auto x : a) REQUIRE(x == 4);
    } else {
      std::vector<int32_t> a(5, rank);
      Status s = rt.allreduce("odd", view(a.data(), DataType::kInt32, {5}), nullptr, ReduceOp::kSum,
                              1.0, 1.0, id, &h);
      REQUIRE(s.code() == ErrorCode::kInvalidArgument);
    }
    REQUIRE(rt.removeProcessSet(id, &h).isOk());
    REQUIRE(waitOk(rt, h).isOk());
    ProcessSet set;
    REQUIRE_FALSE(rt.processSet(id, &set));
  });
}

TEST_CASE("barrier holds until the slowest rank") {
  std::atomic<int> arrived{0};
  onRanks(3, [&](Runtime& rt, int rank) {
    if (rank == 2) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    arrived++;
    HandlePtr h;
    REQUIRE(rt.barrier(0, &h).isOk());
    REQUIRE(waitOk(rt, h).isOk());
    REQUIRE(arrived.load() == 3);
  });
}

TEST_CASE("bad arguments are rejected on the caller's thread with the tensor and rank named") {
  onRanks(1, [](Runtime& rt, int) {
    HandlePtr h;
    std::vector<float> a(4);
    Status s = rt.allreduce("", view(a.data(), DataType::kFloat32, {4}), nullptr, ReduceOp::kSum, 1,
                            1, 0, &h);
    CHECK(s.code() == ErrorCode::kInvalidArgument);
    s = rt.allreduce("neg", view(a.data(), DataType::kFloat32, {-1}), nullptr, ReduceOp::kSum, 1, 1,
                     0, &h);
    CHECK(s.message() == "allreduce 'neg' on rank 0: dimension 0 is negative (-1)");
    s = rt.allreduce("null", view(nullptr, DataType::kFloat32, {4}), nullptr, ReduceOp::kSum, 1, 1,
                     0, &h);
    CHECK(s.message().find("NULL") != std::string::npos);
    s = rt.allreduce("op", view(a.data(), DataType::kFloat32, {4}), nullptr,
                     static_cast<ReduceOp>(42), 1, 1, 0, &h);
    CHECK(s.message().find("unknown reduce op") != std::string::npos);
    s = rt.broadcast("root", view(a.data(), DataType::kFloat32, {4}), 3, 0, &h);
    CHECK(s.message().find("root 3") != std::string::npos);
    s = rt.allgather("scalar", view(a.data(), DataType::kFloat32, {}), {}, 0, &h);
    CHECK(s.code() == ErrorCode::kInvalidArgument);
    s = rt.allreduce("set", view(a.data(), DataType::kFloat32, {4}), nullptr, ReduceOp::kSum, 1, 1,
                     7, &h);
    CHECK(s.message().find("process set 7") != std::string::npos);
  });
}

TEST_CASE("stall shutdown fails an op only some ranks submitted, on every rank") {
  // With the stall check's warnings off too (KOLO_STALL_CHECK_DISABLE, which Horovod users set
  // to silence them): the shutdown still ends the op, so that the job never waits forever.
  const bool warnings = GENERATE(true, false);
  INFO("stall check (warnings) " << (warnings ? "on" : "off"));
  Config cfg = testConfig();
  cfg.stallCheck = warnings;
  cfg.stallCheckSeconds = 0.2;
  cfg.stallShutdownSeconds = 0.5;
  onRanks(
      2,
      [](Runtime& rt, int rank) {
        if (rank != 0) return;
        std::vector<int32_t> a(4, 1);
        HandlePtr h;
        REQUIRE(rt.allreduce("lonely", view(a.data(), DataType::kInt32, {4}), nullptr,
                             ReduceOp::kSum, 1, 1, 0, &h)
                    .isOk());
        Status s = waitOk(rt, h);
        REQUIRE(s.code() == ErrorCode::kStalled);
        REQUIRE(s.message().find("lonely") != std::string::npos);
      },
      cfg);
}

TEST_CASE("shutdown completes pending ops with the cause") {
  std::vector<std::unique_ptr<Transport>> group;
  REQUIRE(createLoopbackGroup(2, &group).isOk());
  std::unique_ptr<Runtime> a, b;
  REQUIRE(createRuntimeOver(testConfig(), std::move(group[0]), {}, &a).isOk());
  REQUIRE(createRuntimeOver(testConfig(), std::move(group[1]), {}, &b).isOk());
  std::vector<int32_t> x(4, 1);
  HandlePtr h;
  REQUIRE(b->allreduce("never", view(x.data(), DataType::kInt32, {4}), nullptr, ReduceOp::kSum, 1,
                       1, 0, &h)
              .isOk());
  REQUIRE(a->shutdown().isOk());
  Status s = h->wait(Clock::now() + std::chrono::seconds(10));
  CHECK(s.code() == ErrorCode::kShutdown);
  CHECK(s.message().find("rank 0") != std::string::npos);
  REQUIRE(b->shutdown().isOk());
  s = b->allreduce("later", view(x.data(), DataType::kInt32, {4}), nullptr, ReduceOp::kSum, 1, 1, 0,
                   &h);
  CHECK(s.code() == ErrorCode::kShutdown);
}

TEST_CASE("a lost peer fails pending ops on the survivor within the timeout") {
  Config cfg = testConfig();
  cfg.timeoutSeconds = 1;
  std::vector<std::unique_ptr<Transport>> group;
  REQUIRE(createLoopbackGroup(2, &group).isOk());
  Transport* victim = group[1].get();
  std::unique_ptr<Runtime> a, b;
  REQUIRE(createRuntimeOver(cfg, std::move(group[0]), {}, &a).isOk());
  REQUIRE(createRuntimeOver(cfg, std::move(group[1]), {}, &b).isOk());
  // Rank 1 "dies": its transport aborts, its coordinator stops answering.
  victim->abort(Status(ErrorCode::kPeerLost, "rank 1 was killed"));
  std::vector<int32_t> x(4, 1);
  HandlePtr h;
  auto t0 = Clock::now();
  // The survivor may hear of the loss before this submission (the loopback group shares the
  // abort): then the submission itself fails, naming the lost rank; either way nothing waits.
  Status s = a->allreduce("orphan", view(x.data(), DataType::kInt32, {4}), nullptr, ReduceOp::kSum,
                          1, 1, 0, &h);
  if (s.isOk()) s = h->wait(Clock::now() + std::chrono::seconds(10));
  CHECK_FALSE(s.isOk());
  CHECK(s.message().find("rank 1") != std::string::npos);
  CHECK(Clock::now() - t0 < std::chrono::seconds(5));
  a->shutdown().ignore();
  b->shutdown().ignore();
}

TEST_CASE("a caller waiting for its op runs the rounds itself, unless KOLO_CALLER_ROUNDS is off") {
  for (bool on : {true, false}) {
    Config cfg = testConfig();
    cfg.callerRounds = on;
    std::vector<uint64_t> ran(2, 0);
    onRanks(
        2,
        [&](Runtime& rt, int rank) {
          for (int i = 0; i < 200; ++i) {
            float x = static_cast<float>(rank + i);
            HandlePtr h;
            REQUIRE(rt.allreduce("step", view(&x, DataType::kFloat32, {1}), nullptr, ReduceOp::kSum,
                                 1.0, 1.0, 0, &h)
                        .isOk());
            REQUIRE(waitOk(rt, h).isOk());
            REQUIRE(x == static_cast<float>(1 + 2 * i));
          }
          ran[rank] = rt.callerRoundsRun();
        },
        cfg);
    INFO("caller rounds " << (on ? "on" : "off") << ": " << ran[0] << " and " << ran[1]);
    if (on) {
      // A waiter runs the round when it reaches wait() within the coordinator thread's grace
      // (100 us) after its enqueue; on a loaded machine it may miss many, but not all 400.
      CHECK(ran[0] + ran[1] > 0);
    } else {
      CHECK(ran[0] == 0);
      CHECK(ran[1] == 0);
    }
  }
}

TEST_CASE("shutdown from another thread ends a caller that runs rounds for an op nobody else has") {
  std::vector<std::unique_ptr<Transport>> group;
  REQUIRE(createLoopbackGroup(2, &group).isOk());
  std::vector<std::unique_ptr<Runtime>> rts(2);
  for (int r = 0; r < 2; ++r) {
    REQUIRE(createRuntimeOver(testConfig(), std::move(group[r]), {}, &rts[r]).isOk());
  }
  float x = 1;
  HandlePtr h;
  REQUIRE(rts[0]
              ->allreduce("lonely", view(&x, DataType::kFloat32, {1}), nullptr, ReduceOp::kSum, 1.0,
                          1.0, 0, &h)
              .isOk());
  Status waited;
  // The waiter takes rounds whenever the coordinator thread is between two (rank 1 never
  // submits, so rank 0 runs rounds back to back); shutdown must end both.
  std::thread waiter([&] { waited = h->wait(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const auto t0 = Clock::now();
  std::thread other([&] { REQUIRE(rts[1]->shutdown().isOk()); });
  REQUIRE(rts[0]->shutdown().isOk());
  other.join();
  waiter.join();
  CHECK(Clock::now() - t0 < std::chrono::seconds(10));
  CHECK(waited.code() == ErrorCode::kShutdown);
}
