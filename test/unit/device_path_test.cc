// SPDX-License-Identifier: Apache-2.0
// The host side of the device (CUDA/NCCL) path, which builds and runs on every machine: host
// layouts for the hierarchical allreduce, fused slot layout, the exchanges that hand NCCL unique
// ids around (Store and CPU-transport paths), and how the runtime answers a CUDA tensor when no
// device path can run it. The device itself is exercised by test/gpu (label gpu).
#include <catch2/catch.hpp>
#include <thread>

#include "bootstrap/registry.h"
#include "core/runtime.h"
#include "kolo/build_config.h"
#include "ops/device_executor.h"
#include "ops/device_plan.h"
#include "test/support/runtime_over.h"
#include "test/unit/thread_safe_catch.h"  // the rank threads assert
#include "transport/loopback/loopback_transport.h"

using namespace kolo;

namespace {

// Runs fn(transport, rank) on n loopback thread ranks.
void onRanks(int n, const std::function<void(Transport&, int)>& fn) {
  std::vector<std::unique_ptr<Transport>> group;
  REQUIRE(createLoopbackGroup(n, &group).isOk());
  for (auto& t : group) t->setTimeout(std::chrono::seconds(20));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back([&, r] { fn(*group[r], r); });
  for (auto& t : threads) t.join();
}

std::vector<uint8_t> idOf(int root) {
  std::vector<uint8_t> id(128);
  for (size_t i = 0; i < id.size(); ++i) id[i] = static_cast<uint8_t>(root * 31 + i);
  return id;
}

}  // namespace

TEST_CASE("planHosts: contiguous, round-robin and uneven placements") {
  ops::HostLayout l;
  const std::vector<std::string> contiguous = {"a", "a", "b", "b", "c", "c"};
  REQUIRE(ops::planHosts(contiguous, 3, &l).isOk());
  CHECK(l.hosts == 3);
  CHECK(l.hostIndex == 1);
  CHECK(l.local == std::vector<int>{2, 3});
  CHECK(l.localIndex == 1);
  CHECK(l.homogeneous);
  REQUIRE(l.cross.size() == 2);
  CHECK(l.cross[0] == std::vector<int>{0, 2, 4});
  CHECK(l.cross[1] == std::vector<int>{1, 3, 5});

  const std::vector<std::string> roundRobin = {"b", "a", "b", "a"};
  REQUIRE(ops::planHosts(roundRobin, 1, &l).isOk());
  CHECK(l.hosts == 2);
  CHECK(l.hostIndex == 1);  // "b" appears first
  CHECK(l.local == std::vector<int>{1, 3});
  CHECK(l.localIndex == 0);
  CHECK(l.cross == std::vector<std::vector<int>>{{0, 1}, {2, 3}});

  REQUIRE(ops::planHosts({"a", "a", "b"}, 2, &l).isOk());
  CHECK_FALSE(l.homogeneous);
  CHECK(l.cross.empty());
  CHECK(l.local == std::vector<int>{2});

  REQUIRE(ops::planHosts({"solo"}, 0, &l).isOk());
  CHECK(l.hosts == 1);
  CHECK(l.local == std::vector<int>{0});
  CHECK(l.cross == std::vector<std::vector<int>>{{0}});

  CHECK(ops::planHosts({}, 0, &l).code() == ErrorCode::kInvalidArgument);
  CHECK(ops::planHosts({"a", ""}, 0, &l).code() == ErrorCode::kInvalidArgument);
  CHECK(ops::planHosts({"a"}, 1, &l).code() == ErrorCode::kInvalidArgument);
}

TEST_CASE("alignedSlots puts every tensor on a 16-byte boundary; paddedCount rounds up") {
  std::vector<size_t> off;
  CHECK(ops::alignedSlots({3, 5, 0, 4}, 4, 16, &off) == 16);
  CHECK(off == std::vector<size_t>{0, 4, 12, 12});
  CHECK(ops::alignedSlots({7}, 2, 16, &off) == 7);
  CHECK(off == std::vector<size_t>{0});
  CHECK(ops::alignedSlots({1, 1}, 8, 16, &off) == 3);
  CHECK(off == std::vector<size_t>{0, 2});
  CHECK(ops::alignedSlots({}, 4, 16, &off) == 0);
  CHECK(ops::alignedSlots({5, 5}, 1, 1, &off) == 10);  // byte alignment: dense
  CHECK(ops::paddedCount(10, 4) == 12);
  CHECK(ops::paddedCount(12, 4) == 12);
  CHECK(ops::paddedCount(0, 3) == 0);
  CHECK(ops::paddedCount(5, 1) == 5);
}

TEST_CASE("gatherStrings returns every member's string in member order") {
  for (int n : {1, 3}) {
    onRanks(n, [n](Transport& t, int rank) {
      std::vector<std::string> all;
      std::string mine = "host-" + std::to_string(rank % 2) + std::string(rank * 100, 'x');
      REQUIRE(ops::gatherStrings(t, mine, &all).isOk());
      REQUIRE(static_cast<int>(all.size()) == n);
      for (int r = 0; r < n; ++r) {
        std::string expected = "host-" + std::to_string(r % 2) + std::string(r * 100, 'x');
        CHECK(all[r] == expected.substr(0, 255));
      }
    });
  }
}

TEST_CASE("shareFromRoots hands each group its root's id, over a store and over the transport") {
  // Four members on two "hosts": roots 0 and 2.
  auto store = makeMemoryStore();
  for (bool useStore : {true, false}) {
    onRanks(4, [&](Transport& t, int rank) {
      const int root = rank < 2 ? 0 : 2;
      std::vector<uint8_t> mine = rank == root ? idOf(root) : std::vector<uint8_t>{};
      std::vector<uint8_t> got;
      Status s = ops::shareFromRoots(t, useStore ? store.get() : nullptr, "kolo/nccl/set0/host/",
                                     mine, 128, root, std::chrono::seconds(10), &got);
      REQUIRE(s.isOk());
      CHECK(got == idOf(root));
    });
  }
  std::vector<uint8_t> v;
  REQUIRE(store->get("kolo/nccl/set0/host/2", &v, std::chrono::seconds(1)).isOk());
  CHECK(v == idOf(2));
}

TEST_CASE("shareFromRoots rejects inconsistent arguments and times out on a missing root") {
  onRanks(1, [](Transport& t, int) {
    std::vector<uint8_t> got;
    CHECK(ops::shareFromRoots(t, nullptr, "p/", idOf(0), 64, 0, std::chrono::seconds(1), &got)
              .code() == ErrorCode::kInvalidArgument);  // wrong length
    CHECK(ops::shareFromRoots(t, nullptr, "p/", {}, 128, 0, std::chrono::seconds(1), &got).code() ==
          ErrorCode::kInvalidArgument);  // names itself but is no root
    CHECK(ops::shareFromRoots(t, nullptr, "p/", idOf(0), 128, 1, std::chrono::seconds(1), &got)
              .code() == ErrorCode::kInvalidArgument);  // root out of range
  });
  auto store = makeMemoryStore();
  onRanks(2, [&](Transport& t, int rank) {
    if (rank == 0) return;  // the root never publishes
    std::vector<uint8_t> got;
    Status s = ops::shareFromRoots(t, store.get(), "never/", {}, 128, 0,
                                   std::chrono::milliseconds(100), &got);
    CHECK(s.code() == ErrorCode::kTimeout);
    CHECK_THAT(s.message(), Catch::Contains("never/0"));
  });
}

TEST_CASE("a CUDA tensor the runtime cannot run fails at submission; the runtime goes on") {
  std::string why;
  if (deviceTransportAvailable(&why)) {
    WARN("a CUDA device is visible: the GPU suite (label gpu) covers this path");
    return;
  }
  std::vector<std::unique_ptr<Transport>> group;
  REQUIRE(createLoopbackGroup(1, &group).isOk());
  Config cfg;
  cfg.heartbeatSeconds = 0.05;
  cfg.stallCheck = false;
  std::unique_ptr<Runtime> rt;
  REQUIRE(createRuntimeOver(cfg, std::move(group[0]), {}, &rt).isOk());
  CHECK_FALSE(rt->deviceEnabled());

  float x[4] = {1, 2, 3, 4};
  TensorView v;
  v.data = x;
  v.shape = {4};
  v.device = 0;
  HandlePtr h;
  Status s = rt->allreduce("grad", v, nullptr, ReduceOp::kSum, 1.0, 1.0, 0, &h);
  CHECK(s.code() == ErrorCode::kUnsupported);
  CHECK_THAT(s.message(), Catch::Contains("allreduce 'grad' on rank 0"));
  if (deviceTransportBuilt()) {
    CHECK_THAT(s.message(), Catch::Contains("no CUDA device is visible"));
  } else {
    CHECK_THAT(s.message(), Catch::Contains("does not include"));
  }
  CHECK(h == nullptr);
  s = rt->broadcast("b", v, 0, 0, &h);
  CHECK(s.code() == ErrorCode::kUnsupported);
  std::vector<TensorView> group2 = {v, v};
  CHECK(rt->groupedAllreduce("g", group2, nullptr, ReduceOp::kSum, 1.0, 1.0, 0, &h).code() ==
        ErrorCode::kUnsupported);

  v.device = -2;
  CHECK(rt->allreduce("bad", v, nullptr, ReduceOp::kSum, 1.0, 1.0, 0, &h).code() ==
        ErrorCode::kInvalidArgument);

  v.device = kCpuDevice;
  REQUIRE(rt->allreduce("grad", v, nullptr, ReduceOp::kSum, 2.0, 1.0, 0, &h).isOk());
  REQUIRE(h->wait(Clock::now() + std::chrono::seconds(20)).isOk());
  CHECK(x[3] == 8.f);
  CHECK(h->completionEvent == nullptr);
  REQUIRE(rt->shutdown().isOk());
}

TEST_CASE("KOLO_GPU_OPERATIONS picks the device executor this build has") {
  Config cfg;
  std::unique_ptr<ops::DeviceExecutor> ex;
  // host: the host-staged executor in any CUDA build, none without CUDA.
  cfg.gpuOperations = GpuOperations::kHost;
  REQUIRE(createDeviceExecutor(cfg, nullptr, &ex).isOk());
  REQUIRE((ex != nullptr) == (KOLO_HAVE_CUDA != 0));
  if (ex) CHECK(std::string(ex->name()) == "host");
  // nccl: the NCCL executor where built; an error naming the knob in a CUDA build without NCCL.
  cfg.gpuOperations = GpuOperations::kNccl;
  Status s = createDeviceExecutor(cfg, nullptr, &ex);
  if (KOLO_HAVE_CUDA && !KOLO_HAVE_NCCL) {
    CHECK(s.code() == ErrorCode::kUnsupported);
    CHECK_THAT(s.message(), Catch::Contains("KOLO_GPU_OPERATIONS=nccl"));
  } else {
    REQUIRE(s.isOk());
    REQUIRE((ex != nullptr) == (KOLO_HAVE_NCCL != 0));
    if (ex) CHECK(std::string(ex->name()) == "nccl");
  }
  // auto: NCCL, or host-staged for a set whose ranks share a GPU, where NCCL is built; else the
  // host-staged one.
  cfg.gpuOperations = GpuOperations::kAuto;
  REQUIRE(createDeviceExecutor(cfg, nullptr, &ex).isOk());
  REQUIRE((ex != nullptr) == (KOLO_HAVE_CUDA != 0));
  if (ex) CHECK(std::string(ex->name()) == (KOLO_HAVE_NCCL ? "auto" : "host"));
}
