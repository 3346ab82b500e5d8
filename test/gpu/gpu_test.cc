// SPDX-License-Identifier: Apache-2.0
// The device path on one process and one GPU: the CUDA kernels against the host reductions
// (bitwise), the NCCL transport on a single rank (a real communicator: NCCL runs its kernels
// even for one rank), and the runtime end to end through the executor -- fusion, scaling,
// grouped and out-of-place ops, owned device outputs, the hierarchical allreduce, waiting on
// the producer's stream, the completion event, asynchronous completion, and submission errors.
//
// Without a visible CUDA device the program prints a SKIPPED line and exits 0 (CTest label
// gpu): a CPU-only machine builds and "passes" it without having tested anything on a GPU.
#include <kolo.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <numeric>
#include <random>
#include <thread>

#include "core/runtime.h"
#include "kernels/cuda_kernels.h"
#include "kernels/reduce_cpu.h"
#include "test/catch_runner.h"
#include "test/gpu/gpu_runtime_util.h"
#include "test/gpu/gpu_test_util.h"
#include "test/support/runtime_over.h"
#include "transport/loopback/loopback_transport.h"
#include "transport/nccl/nccl_transport.h"

using namespace kolo;
using gputest::DeviceArray;

namespace {

std::mt19937& rng() {
  static std::mt19937 g(12345);
  return g;
}

template <typename T>
std::vector<T> randomInts(size_t n) {
  std::uniform_int_distribution<int64_t> d(std::numeric_limits<T>::min(),
                                           std::numeric_limits<T>::max());
  std::vector<T> v(n);
  for (auto& x : v) x = static_cast<T>(d(rng()));
  return v;
}

template <typename T>
void checkScale(DataType dt, const std::vector<T>& host, double factor) {
  DeviceArray<T> d(host);
  REQUIRE(cuda::scale(d.get(), host.size(), dt, factor, nullptr) == cudaSuccess);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  std::vector<T> expected = host;
  kernels::scaleInPlace(expected.data(), expected.size(), dt, factor);
  std::vector<T> got = d.download();
  INFO(toString(dt) << " x " << factor);
  REQUIRE(std::memcmp(got.data(), expected.data(), got.size() * sizeof(T)) == 0);
}

Config oneGpuConfig() {
  Config c;
  c.heartbeatSeconds = 0.05;
  c.timeoutSeconds = 30;
  c.cycleTimeMs = 0.5;
  c.stallCheck = false;
  c.localRank = 0;
  return c;
}

std::unique_ptr<Runtime> oneGpuRuntime(Config cfg = oneGpuConfig()) {
  std::vector<std::unique_ptr<Transport>> group;
  REQUIRE(createLoopbackGroup(1, &group).isOk());
  std::unique_ptr<Runtime> rt;
  REQUIRE(createRuntimeOver(cfg, std::move(group[0]), {}, &rt).isOk());
  REQUIRE(rt->deviceEnabled());
  return rt;
}

using gputest::deviceView;
using gputest::waitFor;

}  // namespace

TEST_CASE("scale kernels match kernels::scaleInPlace bit for bit") {
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  const size_t n = 100003;
  for (double f : {0.5, 3.0, -1.25, 1.0 / 3.0, 1e10}) {
    checkScale(DataType::kUInt8, randomInts<uint8_t>(n), f);
    checkScale(DataType::kInt8, randomInts<int8_t>(n), f);
    checkScale(DataType::kUInt16, randomInts<uint16_t>(n), f);
    checkScale(DataType::kInt16, randomInts<int16_t>(n), f);
    checkScale(DataType::kInt32, randomInts<int32_t>(n), f);
    checkScale(DataType::kInt64, randomInts<int64_t>(n), f);
    std::uniform_real_distribution<float> small(-60000.f, 60000.f), wide(-1e30f, 1e30f);
    std::vector<uint16_t> h(n), b(n);
    std::vector<float> f32(n);
    std::vector<double> f64(n);
    for (size_t i = 0; i < n; ++i) {
      // Every tenth value is tiny, so subnormal results are covered too.
      float x = i % 10 == 0 ? small(rng()) * 1e-9f : small(rng());
      h[i] = kernels::floatToHalf(x);
      b[i] = kernels::floatToBfloat16(wide(rng()));
      f32[i] = i % 10 == 0 ? small(rng()) * 1e-42f : wide(rng());
      f64[i] = static_cast<double>(wide(rng())) * 1e100;
    }
    checkScale(DataType::kFloat16, h, f);
    checkScale(DataType::kBFloat16, b, f);
    checkScale(DataType::kFloat32, f32, f);
    checkScale(DataType::kFloat64, f64, f);
    checkScale(DataType::kBool, std::vector<uint8_t>(n, 3), f);  // unchanged
  }
}

TEST_CASE("batchedCopy moves hundreds of small copies and the large ones") {
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  const size_t bytes = 8 << 20;
  std::vector<uint8_t> src(bytes), expected(bytes, 0);
  for (auto& x : src) x = static_cast<uint8_t>(rng()());
  DeviceArray<uint8_t> dsrc(src), ddst(expected);
  std::vector<cuda::CopyDesc> descs;
  std::uniform_int_distribution<size_t> len(0, 4096), gap(0, 33), at(0, bytes - 4096);
  size_t cursor = 0;
  for (int i = 0; i < 300; ++i) {  // every alignment, several kernel launches
    size_t l = len(rng()), s = at(rng());
    cursor += gap(rng());
    descs.push_back({dsrc.get() + s, ddst.get() + cursor, l});
    std::memcpy(expected.data() + cursor, src.data() + s, l);
    cursor += l;
  }
  for (int i = 0; i < 2; ++i) {  // copy-engine path
    size_t l = (3 << 20) / 2 + 5, s = 17 + i * 1000;
    descs.push_back({dsrc.get() + s, ddst.get() + cursor, l});
    std::memcpy(expected.data() + cursor, src.data() + s, l);
    cursor += l;
  }
  REQUIRE(cursor <= bytes);
  REQUIRE(cuda::batchedCopy(descs.data(), descs.size(), nullptr) == cudaSuccess);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  REQUIRE(ddst.download() == expected);
}

TEST_CASE("reduceSlices folds int16, uint16 and bool like the host reductions") {
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  const size_t count = 5001, stride = count + 7;
  for (int parts : {1, 3}) {
    for (ReduceOp op :
         {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct}) {
      for (DataType dt : {DataType::kInt16, DataType::kUInt16, DataType::kBool}) {
        const size_t elem = sizeOf(dt);
        std::vector<uint8_t> slices(stride * parts * elem);
        for (auto& x : slices)
          x = static_cast<uint8_t>(rng()() % (dt == DataType::kBool ? 3 : 256));
        std::vector<uint8_t> expected(slices.begin(), slices.begin() + count * elem);
        for (int k = 1; k < parts; ++k) {
          kernels::reduceInto(expected.data(), slices.data() + k * stride * elem, count, dt, op);
        }
        DeviceArray<uint8_t> d(slices), out(count * elem);
        REQUIRE(cuda::reduceSlices(out.get(), d.get(), count, parts, stride, dt, op, nullptr) ==
                cudaSuccess);
        REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
        INFO(toString(dt) << " " << toString(op) << " parts " << parts);
        REQUIRE(out.download() == expected);
      }
    }
  }
  CHECK(cuda::reduceSlices(nullptr, nullptr, 1, 2, 1, DataType::kFloat32, ReduceOp::kSum,
                           nullptr) == cudaErrorInvalidValue);
}

TEST_CASE("the NCCL transport on one rank: collectives, p2p, split, abort") {
  std::vector<uint8_t> id;
  REQUIRE(NcclTransport::newUniqueId(&id).isOk());
  std::unique_ptr<NcclTransport> t;
  REQUIRE(NcclTransport::create(0, 0, 1, id, std::chrono::seconds(60), {}, "test", &t).isOk());
  CHECK(t->capabilities().deviceMemory);
  CHECK(std::string(t->name()) == "nccl");

  std::vector<float> f(1000);
  std::iota(f.begin(), f.end(), 1.f);
  DeviceArray<float> df(f);
  REQUIRE(t->allreduce(df.get(), f.size(), DataType::kFloat32, ReduceOp::kSum).isOk());
  CHECK(df.download() == f);
  std::vector<int16_t> s16 = randomInts<int16_t>(777);
  DeviceArray<int16_t> ds16(s16);
  REQUIRE(t->allreduce(ds16.get(), s16.size(), DataType::kInt16, ReduceOp::kSum).isOk());
  CHECK(ds16.download() == s16);  // kernel path, one part

  DeviceArray<float> out(1000);
  REQUIRE(t->allgatherv(df.get(), 4000, out.get(), {4000}).isOk());
  CHECK(out.download() == f);
  REQUIRE(t->broadcast(df.get(), 4000, 0).isOk());
  REQUIRE(t->alltoallv(df.get(), {4000}, out.get(), {4000}).isOk());
  CHECK(out.download() == f);
  REQUIRE(t->reducescatter(df.get(), out.get(), {1000}, DataType::kFloat32, ReduceOp::kMax).isOk());
  CHECK(out.download() == f);

  DeviceArray<float> back(1000);
  REQUIRE(t->exchange({sendOp(0, 1, df.get(), 4000), recvOp(0, 1, back.get(), 4000)}).isOk());
  CHECK(back.download() == f);

  std::unique_ptr<Transport> sub;
  REQUIRE(t->split({0}, 7, &sub).isOk());
  REQUIRE(sub != nullptr);
  CHECK(sub->size() == 1);
  REQUIRE(sub->allreduce(df.get(), f.size(), DataType::kFloat32, ReduceOp::kSum).isOk());

  t->abort(Status(ErrorCode::kAborted, "test abort"));
  Status s = t->allreduce(df.get(), f.size(), DataType::kFloat32, ReduceOp::kSum);
  CHECK(s.code() == ErrorCode::kAborted);
  CHECK_THAT(s.message(), Catch::Contains("test abort"));
}

TEST_CASE("runtime on one GPU: fused, grouped, out-of-place and averaged allreduces") {
  auto rt = oneGpuRuntime();
  std::vector<std::vector<float>> host(5);
  std::vector<std::unique_ptr<DeviceArray<float>>> dev;
  std::vector<HandlePtr> hs(5);
  for (int k = 0; k < 5; ++k) {
    host[k].resize(37 * (k + 1));
    for (size_t i = 0; i < host[k].size(); ++i) host[k][i] = static_cast<float>(i + k);
    dev.push_back(std::make_unique<DeviceArray<float>>(host[k]));
    REQUIRE(rt->allreduce("t" + std::to_string(k),
                          deviceView(dev[k]->get(), DataType::kFloat32, {37, k + 1}), nullptr,
                          ReduceOp::kSum, 2.0, 0.5, 0, &hs[k])
                .isOk());
  }
  for (int k = 0; k < 5; ++k) {
    REQUIRE(waitFor(hs[k]).isOk());
    CHECK(dev[k]->download() == host[k]);  // x * 2 * 0.5 on one rank
    REQUIRE(hs[k]->completionEvent != nullptr);
    CHECK(cudaEventQuery(static_cast<cudaEvent_t>(hs[k]->completionEvent.get())) == cudaSuccess);
  }

  std::vector<int32_t> ints(4099);
  std::iota(ints.begin(), ints.end(), -2000);
  DeviceArray<int32_t> din(ints), dout(4099);
  TensorView o = deviceView(dout.get(), DataType::kInt32, {4099});
  HandlePtr h;
  REQUIRE(rt->allreduce("oop", deviceView(din.get(), DataType::kInt32, {4099}), &o,
                        ReduceOp::kAverage, 3.0, 1.0, 0, &h)
              .isOk());
  REQUIRE(waitFor(h).isOk());
  std::vector<int32_t> expected = ints;
  for (auto& x : expected) x *= 3;
  CHECK(dout.download() == expected);
  CHECK(din.download() == ints);  // input untouched

  std::vector<TensorView> group;
  std::vector<int16_t> a = randomInts<int16_t>(100), b = randomInts<int16_t>(3);
  DeviceArray<int16_t> da(a), db(b);
  group.push_back(deviceView(da.get(), DataType::kInt16, {100}));
  group.push_back(deviceView(db.get(), DataType::kInt16, {3}));
  REQUIRE(rt->groupedAllreduce("grp", group, nullptr, ReduceOp::kMax, 1.0, 1.0, 0, &h).isOk());
  REQUIRE(waitFor(h).isOk());
  CHECK(da.download() == a);
  CHECK(db.download() == b);
  REQUIRE(rt->shutdown().isOk());
}

TEST_CASE("runtime on one GPU: allgather, alltoall, reducescatter own device outputs") {
  auto rt = oneGpuRuntime();
  std::vector<double> x(60);
  std::iota(x.begin(), x.end(), 0.5);
  DeviceArray<double> dx(x);
  HandlePtr ag, a2a, rs, bc;
  REQUIRE(
      rt->allgather("ag", deviceView(dx.get(), DataType::kFloat64, {20, 3}), {}, 0, &ag).isOk());
  REQUIRE(rt->alltoall("a2a", deviceView(dx.get(), DataType::kFloat64, {20, 3}), {}, {}, 0, &a2a)
              .isOk());
  REQUIRE(rt->reducescatter("rs", deviceView(dx.get(), DataType::kFloat64, {20, 3}), ReduceOp::kSum,
                            1.0, 4.0, {}, 0, &rs)
              .isOk());
  for (const HandlePtr& h : {ag, a2a, rs}) {
    REQUIRE(waitFor(h).isOk());
    CHECK(h->outputShape == std::vector<int64_t>{20, 3});
    REQUIRE(h->ownedDeviceOutput != nullptr);
    REQUIRE(h->outputData == h->ownedDeviceOutput.get());
    cudaPointerAttributes attr{};
    REQUIRE(cudaPointerGetAttributes(&attr, h->outputData) == cudaSuccess);
    CHECK(attr.type == cudaMemoryTypeDevice);
  }
  CHECK(gputest::downloadRaw<double>(ag->outputData, 60) == x);
  CHECK(gputest::downloadRaw<double>(a2a->outputData, 60) == x);
  CHECK(a2a->receivedSplits == std::vector<int32_t>{20});
  std::vector<double> x4 = x;
  for (auto& v : x4) v *= 4;
  CHECK(gputest::downloadRaw<double>(rs->outputData, 60) == x4);
  REQUIRE(rt->broadcast("bc", deviceView(dx.get(), DataType::kFloat64, {60}), 0, 0, &bc).isOk());
  REQUIRE(waitFor(bc).isOk());
  CHECK(dx.download() == x);
  REQUIRE(rt->shutdown().isOk());
}

TEST_CASE("hierarchical allreduce on one GPU: padded reduce-scatter + allgather") {
  Config cfg = oneGpuConfig();
  cfg.hierarchicalAllreduce = true;
  auto rt = oneGpuRuntime(cfg);
  std::vector<float> a(1001), b(7);
  std::iota(a.begin(), a.end(), 1.f);
  std::iota(b.begin(), b.end(), -3.f);
  DeviceArray<float> da(a), db(b);
  HandlePtr ha, hb;
  REQUIRE(rt->allreduce("a", deviceView(da.get(), DataType::kFloat32, {1001}), nullptr,
                        ReduceOp::kSum, 1.0, 1.0, 0, &ha)
              .isOk());
  REQUIRE(rt->allreduce("b", deviceView(db.get(), DataType::kFloat32, {7}), nullptr,
                        ReduceOp::kAverage, 1.0, 1.0, 0, &hb)
              .isOk());
  REQUIRE(waitFor(ha).isOk());
  REQUIRE(waitFor(hb).isOk());
  CHECK(da.download() == a);
  CHECK(db.download() == b);
  REQUIRE(rt->shutdown().isOk());
}

namespace {

// Floats in keepBusy's buffer (256 MiB).
constexpr size_t kBusyCount = 64 << 20;

// Queues `passes` scale kernels over `busy` (kBusyCount floats, zeroed here) on `stream`: tens
// of milliseconds of work, far longer than the host takes to submit an op and wait for it.
void keepBusy(DeviceArray<float>& busy, int passes, cudaStream_t stream) {
  REQUIRE(cudaMemset(busy.get(), 0, kBusyCount * sizeof(float)) == cudaSuccess);
  for (int i = 0; i < passes; ++i) {
    REQUIRE(cuda::scale(busy.get(), kBusyCount, DataType::kFloat32, 1.5, stream) == cudaSuccess);
  }
}

}  // namespace

TEST_CASE("the runtime waits on the producer's stream, then hands back a completed event") {
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  REQUIRE(kolo_init() == KOLO_OK);
  REQUIRE(kolo_nccl_enabled() == 1);
  cudaStream_t producer;
  REQUIRE(cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking) == cudaSuccess);
  // Keep the producer's stream busy for a while, then write the tensor's values on it. If the
  // runtime did not wait on that stream it would reduce the zeros that are there now.
  DeviceArray<float> busy(kBusyCount);
  std::vector<float> values(4096);
  std::iota(values.begin(), values.end(), 1.f);
  DeviceArray<float> t(std::vector<float>(values.size(), 0.f));
  float* pinned = nullptr;
  REQUIRE(cudaMallocHost(&pinned, values.size() * sizeof(float)) == cudaSuccess);
  std::memcpy(pinned, values.data(), values.size() * sizeof(float));
  keepBusy(busy, 200, producer);
  REQUIRE(cudaMemcpyAsync(t.get(), pinned, values.size() * sizeof(float), cudaMemcpyHostToDevice,
                          producer) == cudaSuccess);

  const int64_t shape[1] = {4096};
  kolo_tensor_t tensor{t.get(), KOLO_FLOAT32, 1, shape, 0, producer};
  kolo_handle_t h = 0;
  REQUIRE(kolo_allreduce_async("waits", &tensor, nullptr, KOLO_SUM, 2.0, 1.0, 0, nullptr, nullptr,
                               &h) == KOLO_OK);
  REQUIRE(kolo_handle_wait(h, 60.0) == KOLO_OK);
  void* event = nullptr;
  REQUIRE(kolo_handle_cuda_event(h, &event) == KOLO_OK);
  REQUIRE(event != nullptr);
  CHECK(cudaEventQuery(static_cast<cudaEvent_t>(event)) == cudaSuccess);
  cudaStream_t consumer;
  REQUIRE(cudaStreamCreate(&consumer) == cudaSuccess);
  REQUIRE(cudaStreamWaitEvent(consumer, static_cast<cudaEvent_t>(event), 0) == cudaSuccess);
  std::vector<float> got(values.size());
  REQUIRE(cudaMemcpyAsync(got.data(), t.get(), got.size() * sizeof(float), cudaMemcpyDeviceToHost,
                          consumer) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(consumer) == cudaSuccess);
  for (size_t i = 0; i < values.size(); ++i) REQUIRE(got[i] == 2.f * values[i]);
  REQUIRE(kolo_handle_release(h) == KOLO_OK);

  // A host op has no event.
  float hostValue = 1.f;
  const int64_t one[1] = {1};
  kolo_tensor_t host{&hostValue, KOLO_FLOAT32, 1, one, KOLO_CPU_DEVICE, nullptr};
  REQUIRE(kolo_allreduce_async("host", &host, nullptr, KOLO_SUM, 1.0, 1.0, 0, nullptr, nullptr,
                               &h) == KOLO_OK);
  REQUIRE(kolo_handle_wait(h, 60.0) == KOLO_OK);
  REQUIRE(kolo_handle_cuda_event(h, &event) == KOLO_OK);
  CHECK(event == nullptr);
  REQUIRE(kolo_handle_release(h) == KOLO_OK);
  REQUIRE(kolo_shutdown() == KOLO_OK);
  cudaStreamDestroy(consumer);
  cudaStreamDestroy(producer);
  cudaFreeHost(pinned);
}

TEST_CASE("asynchronous completion: the handle completes when queued, the consumer orders") {
  // KOLO_ASYNC_COMPLETION=1: kolo_handle_wait returns while the producer's stream (and so the
  // op queued behind it) is still busy; kolo_handle_stream_wait orders the consumer's stream
  // after the op without blocking the host; the values read on that stream are the result.
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  REQUIRE(setenv("KOLO_ASYNC_COMPLETION", "1", 1) == 0);
  REQUIRE(kolo_init() == KOLO_OK);
  REQUIRE(unsetenv("KOLO_ASYNC_COMPLETION") == 0);
  cudaStream_t producer, consumer;
  REQUIRE(cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking) == cudaSuccess);
  REQUIRE(cudaStreamCreateWithFlags(&consumer, cudaStreamNonBlocking) == cudaSuccess);
  DeviceArray<float> busy(kBusyCount);
  std::vector<float> values(4096);
  std::iota(values.begin(), values.end(), 1.f);
  DeviceArray<float> a(values), b(values);
  const int64_t shape[1] = {4096};
  kolo_tensor_t ta{a.get(), KOLO_FLOAT32, 1, shape, 0, producer};
  kolo_tensor_t tb{b.get(), KOLO_FLOAT32, 1, shape, 0, producer};
  kolo_handle_t ha = 0, hb = 0;  // two ops: the fused path through the device fusion buffer
  {
    // The same two ops once before the timed part: the first device batch of a process set
    // makes its NCCL communicator and fusion buffer, which took longer than the producer's busy
    // work once (a fresh machine, five other GPU tests starting beside this one).
    DeviceArray<float> wa(values), wb(values);
    kolo_tensor_t twa{wa.get(), KOLO_FLOAT32, 1, shape, 0, producer};
    kolo_tensor_t twb{wb.get(), KOLO_FLOAT32, 1, shape, 0, producer};
    REQUIRE(kolo_allreduce_async("async/a", &twa, nullptr, KOLO_SUM, 2.0, 1.0, 0, nullptr,
                                 nullptr, &ha) == KOLO_OK);
    REQUIRE(kolo_allreduce_async("async/b", &twb, nullptr, KOLO_SUM, 3.0, 1.0, 0, nullptr,
                                 nullptr, &hb) == KOLO_OK);
    REQUIRE(kolo_handle_wait(ha, 60.0) == KOLO_OK);
    REQUIRE(kolo_handle_wait(hb, 60.0) == KOLO_OK);
    REQUIRE(kolo_handle_release(ha) == KOLO_OK);
    REQUIRE(kolo_handle_release(hb) == KOLO_OK);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    std::vector<float> gotWa = wa.download(), gotWb = wb.download();
    for (size_t i = 0; i < values.size(); ++i) {
      REQUIRE(gotWa[i] == 2.f * values[i]);
      REQUIRE(gotWb[i] == 3.f * values[i]);
    }
  }
  keepBusy(busy, 400, producer);
  REQUIRE(kolo_allreduce_async("async/a", &ta, nullptr, KOLO_SUM, 2.0, 1.0, 0, nullptr, nullptr,
                               &ha) == KOLO_OK);
  REQUIRE(kolo_allreduce_async("async/b", &tb, nullptr, KOLO_SUM, 3.0, 1.0, 0, nullptr, nullptr,
                               &hb) == KOLO_OK);
  REQUIRE(kolo_handle_wait(ha, 60.0) == KOLO_OK);
  REQUIRE(kolo_handle_wait(hb, 60.0) == KOLO_OK);
  void* event = nullptr;
  REQUIRE(kolo_handle_cuda_event(ha, &event) == KOLO_OK);
  REQUIRE(event != nullptr);
  // The producer's 400 passes over 256 MiB take far longer than the host took to get here.
  CHECK(cudaEventQuery(static_cast<cudaEvent_t>(event)) == cudaErrorNotReady);
  REQUIRE(kolo_handle_stream_wait(ha, consumer) == KOLO_OK);
  REQUIRE(kolo_handle_stream_wait(hb, consumer) == KOLO_OK);
  std::vector<float> gotA(values.size()), gotB(values.size());
  REQUIRE(cudaMemcpyAsync(gotA.data(), a.get(), values.size() * sizeof(float),
                          cudaMemcpyDeviceToHost, consumer) == cudaSuccess);
  REQUIRE(cudaMemcpyAsync(gotB.data(), b.get(), values.size() * sizeof(float),
                          cudaMemcpyDeviceToHost, consumer) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(consumer) == cudaSuccess);
  for (size_t i = 0; i < values.size(); ++i) {
    REQUIRE(gotA[i] == 2.f * values[i]);
    REQUIRE(gotB[i] == 3.f * values[i]);
  }
  REQUIRE(kolo_handle_release(ha) == KOLO_OK);
  REQUIRE(kolo_handle_release(hb) == KOLO_OK);
  REQUIRE(kolo_shutdown() == KOLO_OK);
  cudaStreamDestroy(consumer);
  cudaStreamDestroy(producer);
}

TEST_CASE("device tensors that cannot be used are rejected at submission") {
  auto rt = oneGpuRuntime();
  int count = 0;
  REQUIRE(cudaGetDeviceCount(&count) == cudaSuccess);
  float host[4] = {1, 2, 3, 4};
  HandlePtr h;
  Status s = rt->allreduce("host-memory", deviceView(host, DataType::kFloat32, {4}), nullptr,
                           ReduceOp::kSum, 1.0, 1.0, 0, &h);
  CHECK(s.code() == ErrorCode::kInvalidArgument);
  CHECK_THAT(s.message(), Catch::Contains("not CUDA device memory"));
  DeviceArray<float> d(4);
  TensorView v = deviceView(d.get(), DataType::kFloat32, {4});
  v.device = count;
  s = rt->allreduce("no-such-device", v, nullptr, ReduceOp::kSum, 1.0, 1.0, 0, &h);
  CHECK(s.code() == ErrorCode::kInvalidArgument);
  CHECK_THAT(s.message(), Catch::Contains("does not exist"));
  if (count >= 2) {
    REQUIRE(rt->allreduce("first", deviceView(d.get(), DataType::kFloat32, {4}), nullptr,
                          ReduceOp::kSum, 1.0, 1.0, 0, &h)
                .isOk());
    REQUIRE(waitFor(h).isOk());
    REQUIRE(cudaSetDevice(1) == cudaSuccess);
    DeviceArray<float> other(4);
    REQUIRE(cudaSetDevice(0) == cudaSuccess);
    TensorView w = deviceView(other.get(), DataType::kFloat32, {4});
    w.device = 1;
    s = rt->allreduce("second-device", w, nullptr, ReduceOp::kSum, 1.0, 1.0, 0, &h);
    CHECK(s.code() == ErrorCode::kInvalidArgument);
    CHECK_THAT(s.message(), Catch::Contains("this rank uses cuda:0"));
  }
  REQUIRE(rt->shutdown().isOk());
}

int main(int argc, char** argv) {
  if (gputest::devicesOrSkip("kolo_gpu_test", 1) == 0) return 0;
  return kolo::testing::runCatch(argc, argv);
}
