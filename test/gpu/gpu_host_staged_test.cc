// SPDX-License-Identifier: Apache-2.0
// The host-staged path for CUDA tensors (KOLO_GPU_OPERATIONS=host,
// ops/device/host_staged_executor.h) with three ranks sharing one GPU -- its use case, which
// NCCL refuses -- as three thread ranks of one process over the loopback transport, each with
// its own Runtime: fused, scaled, averaged and out-of-place allreduces, int16 and bool, uneven
// allgather / alltoall / reducescatter into owned device outputs, broadcast from the last rank,
// waiting on the producer's stream, and the completion event. Values are checked exactly on
// every rank.
//
// Without a visible CUDA device the program prints a SKIPPED line and exits 0 (CTest label
// gpu): a CPU-only machine builds and "passes" it without having tested anything on a GPU.
#include <algorithm>
#include <catch2/catch.hpp>
#include <functional>
#include <mutex>
#include <numeric>
#include <thread>

#include "core/runtime.h"
#include "test/catch_runner.h"
#include "test/gpu/gpu_runtime_util.h"
#include "test/gpu/gpu_test_util.h"
#include "test/support/runtime_over.h"
#include "transport/loopback/loopback_transport.h"

using namespace kolo;

namespace {

constexpr int kRanks = 3;

Config stagedConfig() {
  Config c;
  c.heartbeatSeconds = 0.05;
  c.timeoutSeconds = 30;
  c.cycleTimeMs = 0.5;
  c.stallCheck = false;
  c.localRank = 0;
  c.gpuOperations = GpuOperations::kHost;
  return c;
}

using gputest::deviceView;
using gputest::waitFor;

// Runs fn(runtime, rank) on kRanks thread ranks, each with its own Runtime on device 0.
// Catch's assertions are not thread-safe: a rank's failures are collected and reported after.
void onRanks(const std::function<void(Runtime&, int, std::vector<std::string>*)>& fn) {
  std::vector<std::unique_ptr<Transport>> group;
  REQUIRE(createLoopbackGroup(kRanks, &group).isOk());
  std::vector<std::unique_ptr<Runtime>> rts(kRanks);
  for (int r = 0; r < kRanks; ++r) {
    REQUIRE(createRuntimeOver(stagedConfig(), std::move(group[r]), {}, &rts[r]).isOk());
    REQUIRE(rts[r]->deviceEnabled());
  }
  std::vector<std::vector<std::string>> failures(kRanks);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      if (cudaSetDevice(0) != cudaSuccess) failures[r].push_back("cudaSetDevice(0)");
      fn(*rts[r], r, &failures[r]);
    });
  }
  for (auto& t : threads) t.join();
  for (auto& rt : rts) REQUIRE(rt->shutdown().isOk());
  for (int r = 0; r < kRanks; ++r) {
    for (const std::string& f : failures[r]) FAIL_CHECK("rank " << r << ": " << f);
  }
}

#define RANK_CHECK(cond)                                                                 \
  do {                                                                                   \
    if (!(cond)) fails->push_back(std::string(#cond) + " @" + std::to_string(__LINE__)); \
  } while (0)

template <typename T>
std::vector<T> download(const void* p, size_t n) {
  std::vector<T> host(n);
  if (n > 0 && cudaMemcpy(host.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost) != cudaSuccess) {
    host.clear();
  }
  return host;
}

template <typename T>
void* upload(const std::vector<T>& host) {
  void* p = nullptr;
  if (cudaMalloc(&p, std::max<size_t>(1, host.size()) * sizeof(T)) != cudaSuccess) return nullptr;
  cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice);
  return p;
}

}  // namespace

TEST_CASE("host-staged allreduces on a shared GPU: fused, scaled, averaged, out of place") {
  onRanks([](Runtime& rt, int r, std::vector<std::string>* fails) {
    const int n = kRanks;
    std::vector<void*> dev;
    std::vector<HandlePtr> hs(4);
    for (int k = 0; k < 4; ++k) {  // fused: small tensors in one batch
      std::vector<float> x(33 * (k + 1));
      for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((r + 1) * (i + k));
      dev.push_back(upload(x));
      RANK_CHECK(rt.allreduce("f" + std::to_string(k),
                              deviceView(dev[k], DataType::kFloat32, {33, k + 1}), nullptr,
                              ReduceOp::kSum, 2.0, 0.5, 0, &hs[k])
                     .isOk());
    }
    const float factor = static_cast<float>(n * (n + 1) / 2);
    for (int k = 0; k < 4; ++k) {
      RANK_CHECK(waitFor(hs[k]).isOk());
      RANK_CHECK(hs[k]->completionEvent != nullptr);
      std::vector<float> got = download<float>(dev[k], 33 * (k + 1));
      bool ok = got.size() == 33u * (k + 1);
      for (size_t i = 0; ok && i < got.size(); ++i) ok = got[i] == factor * (i + k);
      RANK_CHECK(ok);
      cudaFree(dev[k]);
    }

    std::vector<int32_t> ints(1001);
    std::iota(ints.begin(), ints.end(), -500 + r);
    void* in = upload(ints);
    void* out = upload(std::vector<int32_t>(ints.size(), 0));
    TensorView o = deviceView(out, DataType::kInt32, {1001});
    HandlePtr h;
    RANK_CHECK(rt.allreduce("avg", deviceView(in, DataType::kInt32, {1001}), &o, ReduceOp::kAverage,
                            1.0, 1.0, 0, &h)
                   .isOk());
    RANK_CHECK(waitFor(h).isOk());
    std::vector<int32_t> expected(ints.size());
    for (size_t i = 0; i < expected.size(); ++i) {
      expected[i] = static_cast<int32_t>(i) - 500 + 1;  // the mean of -500+i+{0,1,2}
    }
    RANK_CHECK(download<int32_t>(out, ints.size()) == expected);
    RANK_CHECK(download<int32_t>(in, ints.size()) == ints);  // input untouched

    std::vector<uint8_t> flags = {0, 1, 0, static_cast<uint8_t>(r == 2)};
    void* fb = upload(flags);
    RANK_CHECK(rt.allreduce("bool", deviceView(fb, DataType::kBool, {4}), nullptr, ReduceOp::kMax,
                            1.0, 1.0, 0, &h)
                   .isOk());
    RANK_CHECK(waitFor(h).isOk());
    RANK_CHECK(download<uint8_t>(fb, 4) == (std::vector<uint8_t>{0, 1, 0, 1}));
    cudaFree(in);
    cudaFree(out);
    cudaFree(fb);
  });
}

TEST_CASE("host-staged allgather, alltoall, reducescatter, broadcast on a shared GPU") {
  onRanks([](Runtime& rt, int r, std::vector<std::string>* fails) {
    // Rank r holds r + 1 rows of 2 int64 values r*100 + i.
    std::vector<int64_t> x(2 * (r + 1));
    for (size_t i = 0; i < x.size(); ++i) x[i] = r * 100 + static_cast<int64_t>(i);
    void* dx = upload(x);
    HandlePtr ag, a2a;
    RANK_CHECK(rt.allgather("ag", deviceView(dx, DataType::kInt64, {r + 1, 2}), {}, 0, &ag).isOk());
    // Alltoall: rank r sends all its r + 1 rows to rank r + 1 (mod 3).
    std::vector<int64_t> splits(kRanks, 0);
    splits[(r + 1) % kRanks] = r + 1;
    RANK_CHECK(
        rt.alltoall("a2a", deviceView(dx, DataType::kInt64, {r + 1, 2}), splits, {}, 0, &a2a).isOk());
    RANK_CHECK(waitFor(ag).isOk());
    RANK_CHECK(waitFor(a2a).isOk());
    std::vector<int64_t> all;
    for (int k = 0; k < kRanks; ++k) {
      for (int i = 0; i < 2 * (k + 1); ++i) all.push_back(k * 100 + i);
    }
    RANK_CHECK(ag->outputShape == (std::vector<int64_t>{6, 2}));
    RANK_CHECK(ag->ownedDeviceOutput != nullptr && ag->outputData == ag->ownedDeviceOutput.get());
    RANK_CHECK(download<int64_t>(ag->outputData, all.size()) == all);
    const int from = (r + kRanks - 1) % kRanks;  // the rank that sends to r
    std::vector<int32_t> received(kRanks, 0);
    received[from] = from + 1;
    RANK_CHECK(a2a->receivedSplits == received);
    std::vector<int64_t> fromRows;
    for (int i = 0; i < 2 * (from + 1); ++i) fromRows.push_back(from * 100 + i);
    RANK_CHECK(download<int64_t>(a2a->outputData, fromRows.size()) == fromRows);

    // Reducescatter of 7 rows x 1: shares 3, 2, 2 rows; sum of (r + 1) * i, postscale 0.5.
    std::vector<double> y(7);
    for (size_t i = 0; i < y.size(); ++i) y[i] = (r + 1) * static_cast<double>(i);
    void* dy = upload(y);
    HandlePtr rs;
    RANK_CHECK(rt.reducescatter("rs", deviceView(dy, DataType::kFloat64, {7, 1}), ReduceOp::kSum, 1.0,
                                0.5, {}, 0, &rs)
                   .isOk());
    RANK_CHECK(waitFor(rs).isOk());
    const size_t first = r == 0 ? 0 : (r == 1 ? 3 : 5), rows = r == 0 ? 3 : 2;
    std::vector<double> mine;
    for (size_t i = first; i < first + rows; ++i) mine.push_back(6.0 * i * 0.5);
    RANK_CHECK(rs->outputShape == (std::vector<int64_t>{static_cast<int64_t>(rows), 1}));
    RANK_CHECK(download<double>(rs->outputData, rows) == mine);

    std::vector<float> b(5, static_cast<float>(r));
    void* db = upload(b);
    HandlePtr bc;
    RANK_CHECK(
        rt.broadcast("bc", deviceView(db, DataType::kFloat32, {5}), kRanks - 1, 0, &bc).isOk());
    RANK_CHECK(waitFor(bc).isOk());
    RANK_CHECK(download<float>(db, 5) == std::vector<float>(5, static_cast<float>(kRanks - 1)));
    cudaFree(dx);
    cudaFree(dy);
    cudaFree(db);
  });
}

TEST_CASE("host-staged ops wait on the producer's stream") {
  onRanks([](Runtime& rt, int r, std::vector<std::string>* fails) {
    // The producer's stream first clears a large buffer many times, then writes the tensor's
    // values. Staging that did not wait on it would read the zeros there now.
    cudaStream_t producer;
    RANK_CHECK(cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking) == cudaSuccess);
    const size_t busyBytes = size_t{256} << 20;
    void* busy = nullptr;
    RANK_CHECK(cudaMalloc(&busy, busyBytes) == cudaSuccess);
    std::vector<float> values(4096);
    std::iota(values.begin(), values.end(), 1.f);
    void* t = upload(std::vector<float>(values.size(), 0.f));
    float* pinned = nullptr;
    RANK_CHECK(cudaMallocHost(reinterpret_cast<void**>(&pinned), values.size() * sizeof(float)) ==
               cudaSuccess);
    std::copy(values.begin(), values.end(), pinned);
    for (int i = 0; i < 50; ++i) cudaMemsetAsync(busy, i, busyBytes, producer);
    RANK_CHECK(cudaMemcpyAsync(t, pinned, values.size() * sizeof(float), cudaMemcpyHostToDevice,
                               producer) == cudaSuccess);
    HandlePtr h;
    RANK_CHECK(rt.allreduce("waits", deviceView(t, DataType::kFloat32, {4096}, producer), nullptr,
                            ReduceOp::kSum, 1.0, 1.0, 0, &h)
                   .isOk());
    RANK_CHECK(waitFor(h).isOk());
    RANK_CHECK(h->completionEvent != nullptr &&
               cudaEventQuery(static_cast<cudaEvent_t>(h->completionEvent.get())) == cudaSuccess);
    std::vector<float> got = download<float>(t, values.size());
    bool ok = got.size() == values.size();
    for (size_t i = 0; ok && i < got.size(); ++i) ok = got[i] == kRanks * values[i];
    RANK_CHECK(ok);
    cudaStreamSynchronize(producer);
    cudaStreamDestroy(producer);
    cudaFreeHost(pinned);
    cudaFree(t);
    cudaFree(busy);
  });
}

int main(int argc, char** argv) {
  if (gputest::devicesOrSkip("kolo_gpu_host_staged_test", 1) == 0) return 0;
  return kolo::testing::runCatch(argc, argv);
}
