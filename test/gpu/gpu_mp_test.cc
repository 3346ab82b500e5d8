// SPDX-License-Identifier: Apache-2.0
// The device path as N processes, one GPU each (device = local rank), through the C API:
// fused and averaged allreduces, the int16/bool kernel path, uneven allgather, broadcast,
// uneven alltoall, uneven reducescatter, a second process set (its own communicator), and the
// completion event. Run under kolorun (NCCL ids through the rendezvous Store) and under mpirun
// (no store: ids over the CPU transport); with KOLO_HIERARCHICAL_ALLREDUCE=1 the allreduces go
// through reduce-scatter + allgather (with padding, as the counts are not multiples of N).
//
// With KOLO_GPU_OPERATIONS=host (or HOROVOD_GPU_OPERATIONS=MPI|GLOO) the same cases run through
// the host-staged path (ops/device/host_staged_executor.h): inputs staged to pinned host memory,
// the CPU transport, results copied back. There, ranks may share a device (the path's use case;
// the "shared" variants set CUDA_VISIBLE_DEVICES=0, where NCCL would refuse the communicator).
// Under auto (the "auto" variants: both ranks on device 0, no KOLO_GPU_OPERATIONS) kolo must
// notice the shared GPU and take the host-staged path by itself (ops/device/auto_executor.h).
//
// Every rank prints a SKIPPED line and exits 0 when this host has no CUDA device, or, where the
// job forces NCCL (KOLO_GPU_OPERATIONS=nccl), fewer devices than local ranks (NCCL cannot put
// two ranks of one communicator on one device).
#include <kolo.h>

#include <catch2/catch.hpp>
#include <cctype>
#include <cstdlib>
#include <numeric>
#include <string>

#include "test/catch_runner.h"
#include "test/gpu/gpu_test_util.h"

using kolo::gputest::DeviceArray;
using kolo::gputest::downloadRaw;

namespace {

int R() { return kolo_rank(); }

// KOLO_GPU_OPERATIONS (or Horovod's HOROVOD_GPU_OPERATIONS), lower case; "" when unset.
std::string gpuOperationsAsked() {
  for (const char* name : {"KOLO_GPU_OPERATIONS", "HOROVOD_GPU_OPERATIONS"}) {
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0') continue;
    std::string s(v);
    for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
  }
  return "";
}
// Whether the job forces NCCL: then every local rank needs a device of its own. Otherwise one
// device does: the host-staged path (host / mpi / gloo) allows ranks to share it, and auto takes
// that path for a set whose ranks do.
bool ncclForced() { return gpuOperationsAsked() == "nccl"; }
bool hostStagedAsked() {
  const std::string s = gpuOperationsAsked();
  return s == "host" || s == "mpi" || s == "gloo";
}
int N() { return kolo_size(); }
int gDevice = 0;

kolo_tensor_t tensorOf(void* data, kolo_dtype_t t, const std::vector<int64_t>& shape) {
  return kolo_tensor_t{data, t, static_cast<int32_t>(shape.size()), shape.data(), gDevice, nullptr};
}

// Waits for the op, then orders the default stream (where download() copies) after its device
// work: needed under KOLO_ASYNC_COMPLETION=1, where the handle completes when the work is queued.
void waitOk(kolo_handle_t h) {
  int rc = kolo_handle_wait(h, 120.0);
  INFO(kolo_last_error());
  REQUIRE(rc == KOLO_OK);
  REQUIRE(kolo_handle_stream_wait(h, nullptr) == KOLO_OK);
}

// The owned device output of a done handle, downloaded; releases the handle.
template <typename T>
std::vector<T> takeOutput(kolo_handle_t h, std::vector<int64_t>* shape) {
  void* data = nullptr;
  int32_t ndim = 0;
  int64_t dims[KOLO_MAX_DIMS];
  REQUIRE(kolo_handle_output(h, &data, &ndim, dims) == KOLO_OK);
  shape->assign(dims, dims + ndim);
  size_t n = 1;
  for (int64_t d : *shape) n *= static_cast<size_t>(d);
  std::vector<T> out = downloadRaw<T>(data, n);
  REQUIRE(kolo_handle_release(h) == KOLO_OK);
  return out;
}

}  // namespace

TEST_CASE("fused allreduces, average, and the completion event") {
  std::vector<std::vector<float>> host(5);
  std::vector<std::unique_ptr<DeviceArray<float>>> dev;
  std::vector<std::vector<int64_t>> shapes(5);
  std::vector<kolo_handle_t> hs(5);
  for (int k = 0; k < 5; ++k) {
    host[k].resize(101 * (k + 1));
    for (size_t i = 0; i < host[k].size(); ++i)
      host[k][i] = static_cast<float>((R() + 1) * (i + k));
    dev.push_back(std::make_unique<DeviceArray<float>>(host[k]));
    shapes[k] = {static_cast<int64_t>(host[k].size())};
    kolo_tensor_t t = tensorOf(dev[k]->get(), KOLO_FLOAT32, shapes[k]);
    REQUIRE(kolo_allreduce_async(("f" + std::to_string(k)).c_str(), &t, nullptr, KOLO_SUM, 1.0, 1.0,
                                 0, nullptr, nullptr, &hs[k]) == KOLO_OK);
  }
  const float factor = static_cast<float>(N() * (N() + 1) / 2);
  for (int k = 0; k < 5; ++k) {
    waitOk(hs[k]);
    void* event = nullptr;
    REQUIRE(kolo_handle_cuda_event(hs[k], &event) == KOLO_OK);
    CHECK(event != nullptr);
    std::vector<float> got = dev[k]->download();
    for (size_t i = 0; i < got.size(); ++i) REQUIRE(got[i] == factor * static_cast<float>(i + k));
    REQUIRE(kolo_handle_release(hs[k]) == KOLO_OK);
  }

  std::vector<int32_t> ints(3001);
  for (size_t i = 0; i < ints.size(); ++i) ints[i] = R() * 10 + static_cast<int32_t>(i);
  DeviceArray<int32_t> di(ints);
  std::vector<int64_t> shape = {3001};
  kolo_tensor_t t = tensorOf(di.get(), KOLO_INT32, shape);
  kolo_handle_t h;
  REQUIRE(kolo_allreduce_async("avg", &t, nullptr, KOLO_AVERAGE, 1.0, 1.0, 0, nullptr, nullptr,
                               &h) == KOLO_OK);
  waitOk(h);
  std::vector<int32_t> got = di.download();
  for (size_t i = 0; i < got.size(); ++i)
    REQUIRE(got[i] == 5 * (N() - 1) + static_cast<int32_t>(i));
  REQUIRE(kolo_handle_release(h) == KOLO_OK);
}

TEST_CASE("int16 and bool allreduces take the kernel path") {
  std::vector<int16_t> s(999);
  for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<int16_t>(30000 + R() * 1000 + i);
  std::vector<uint8_t> b(17, 0);
  b[R() % 17] = 2;  // non-canonical true
  DeviceArray<int16_t> ds(s);
  DeviceArray<uint8_t> db(b);
  std::vector<int64_t> s1 = {999}, s2 = {17};
  kolo_tensor_t ts = tensorOf(ds.get(), KOLO_INT16, s1), tb = tensorOf(db.get(), KOLO_BOOL, s2);
  kolo_handle_t h1, h2;
  REQUIRE(kolo_allreduce_async("i16", &ts, nullptr, KOLO_SUM, 1.0, 1.0, 0, nullptr, nullptr, &h1) ==
          KOLO_OK);
  REQUIRE(kolo_allreduce_async("b", &tb, nullptr, KOLO_MAX, 1.0, 1.0, 0, nullptr, nullptr, &h2) ==
          KOLO_OK);
  waitOk(h1);
  waitOk(h2);
  std::vector<int16_t> gs = ds.download();
  for (size_t i = 0; i < gs.size(); ++i) {
    uint32_t sum = 0;
    for (int r = 0; r < N(); ++r)
      sum += static_cast<uint16_t>(static_cast<int16_t>(30000 + r * 1000 + i));
    REQUIRE(gs[i] == static_cast<int16_t>(static_cast<uint16_t>(sum)));  // wraps like the host
  }
  std::vector<uint8_t> gb = db.download();
  for (int i = 0; i < 17; ++i) {
    bool any = false;
    for (int r = 0; r < N(); ++r) any |= r % 17 == i;
    REQUIRE(gb[i] == (any ? (N() == 1 ? 2 : 1) : 0));
  }
  REQUIRE(kolo_handle_release(h1) == KOLO_OK);
  REQUIRE(kolo_handle_release(h2) == KOLO_OK);
}

TEST_CASE("uneven allgather, broadcast from the last rank, uneven alltoall") {
  const int n = N(), me = R();
  std::vector<float> mine(static_cast<size_t>(me + 1) * 3);
  for (size_t i = 0; i < mine.size(); ++i) mine[i] = static_cast<float>(100 * me + i);
  DeviceArray<float> dm(mine);
  std::vector<int64_t> shape = {me + 1, 3};
  kolo_tensor_t t = tensorOf(dm.get(), KOLO_FLOAT32, shape);
  kolo_handle_t h;
  REQUIRE(kolo_allgather_async("ag", &t, nullptr, nullptr, 0, nullptr, nullptr, &h) == KOLO_OK);
  waitOk(h);
  std::vector<int64_t> outShape;
  std::vector<float> all = takeOutput<float>(h, &outShape);
  CHECK(outShape == std::vector<int64_t>{n * (n + 1) / 2, 3});
  size_t pos = 0;
  for (int r = 0; r < n; ++r) {
    for (int i = 0; i < (r + 1) * 3; ++i) REQUIRE(all[pos++] == static_cast<float>(100 * r + i));
  }

  std::vector<double> bc(1000, me == n - 1 ? 7.25 : -1.0);
  DeviceArray<double> dbc(bc);
  std::vector<int64_t> bshape = {1000};
  kolo_tensor_t tb = tensorOf(dbc.get(), KOLO_FLOAT64, bshape);
  REQUIRE(kolo_broadcast_async("bc", &tb, n - 1, 0, nullptr, nullptr, &h) == KOLO_OK);
  waitOk(h);
  for (double x : dbc.download()) REQUIRE(x == 7.25);
  REQUIRE(kolo_handle_release(h) == KOLO_OK);

  // Rank r sends r + k + 1 rows of 2 int64 to rank k; each row says (sender, receiver, row).
  std::vector<int32_t> splits(n);
  std::vector<int64_t> send;
  for (int k = 0; k < n; ++k) {
    splits[k] = me + k + 1;
    for (int row = 0; row < splits[k]; ++row) {
      send.push_back(me * 1000 + k);
      send.push_back(row);
    }
  }
  DeviceArray<int64_t> ds(send);
  std::vector<int64_t> sshape = {static_cast<int64_t>(send.size() / 2), 2};
  kolo_tensor_t ta = tensorOf(ds.get(), KOLO_INT64, sshape);
  REQUIRE(kolo_alltoall_async("a2a", &ta, splits.data(), n, nullptr, nullptr, 0, nullptr, nullptr,
                              &h) == KOLO_OK);
  waitOk(h);
  std::vector<int32_t> received(n);
  REQUIRE(kolo_handle_received_splits(h, received.data(), n) == KOLO_OK);
  std::vector<int64_t> got = takeOutput<int64_t>(h, &outShape);
  pos = 0;
  for (int k = 0; k < n; ++k) {
    REQUIRE(received[k] == k + me + 1);
    for (int row = 0; row < received[k]; ++row) {
      REQUIRE(got[pos++] == k * 1000 + me);
      REQUIRE(got[pos++] == row);
    }
  }
}

TEST_CASE("uneven reducescatter with scaling") {
  const int n = N(), me = R();
  const int rows = 2 * n + 1;
  std::vector<float> x(static_cast<size_t>(rows) * 2);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i + me);
  DeviceArray<float> dx(x);
  std::vector<int64_t> shape = {rows, 2};
  kolo_tensor_t t = tensorOf(dx.get(), KOLO_FLOAT32, shape);
  kolo_handle_t h;
  REQUIRE(kolo_reducescatter_async("rs", &t, KOLO_SUM, 2.0, 1.0, nullptr, nullptr, 0, nullptr,
                                   nullptr, &h) == KOLO_OK);
  waitOk(h);
  std::vector<int64_t> outShape;
  std::vector<float> got = takeOutput<float>(h, &outShape);
  const int myRows = me == 0 ? 3 : 2;  // the first rows % n ranks get one more
  const int firstRow = me == 0 ? 0 : 3 + 2 * (me - 1);
  CHECK(outShape == std::vector<int64_t>{myRows, 2});
  for (int i = 0; i < myRows * 2; ++i) {
    const int index = firstRow * 2 + i;
    REQUIRE(got[i] == static_cast<float>(2 * (n * index + n * (n - 1) / 2)));
  }
}

TEST_CASE("a second process set gets its own communicator") {
  const int n = N(), me = R();
  const int32_t ranks[2] = {0, n - 1};
  int32_t id = -1;
  REQUIRE(kolo_add_process_set(ranks, n > 1 ? 2 : 1, &id) == KOLO_OK);
  if (me == 0 || me == n - 1) {
    std::vector<float> x(513, static_cast<float>(me + 1));
    DeviceArray<float> dx(x);
    std::vector<int64_t> shape = {513};
    kolo_tensor_t t = tensorOf(dx.get(), KOLO_FLOAT32, shape);
    kolo_handle_t h;
    REQUIRE(kolo_allreduce_async("set", &t, nullptr, KOLO_SUM, 1.0, 1.0, id, nullptr, nullptr,
                                 &h) == KOLO_OK);
    waitOk(h);
    const float expected = n > 1 ? static_cast<float>(1 + n) : 1.f;
    for (float v : dx.download()) REQUIRE(v == expected);
    REQUIRE(kolo_handle_release(h) == KOLO_OK);
  }
  REQUIRE(kolo_remove_process_set(id) == KOLO_OK);
}

int main(int argc, char** argv) {
  if (kolo_init() != KOLO_OK) {
    std::fprintf(stderr, "kolo_init failed: %s\n", kolo_last_error());
    return 1;
  }
  const int devices =
      kolo::gputest::devicesOrSkip("kolo_gpu_mp_test", ncclForced() ? kolo_local_size() : 1);
  int rc = 0;
  if (devices > 0) {
    // NCCL carries CUDA tensors unless the build has none or the job asked for the host path.
    const int expected = kolo_nccl_built() != 0 && !hostStagedAsked() ? 1 : 0;
    if (kolo_nccl_enabled() != expected) {
      std::fprintf(stderr, "kolo_nccl_enabled() is %d, expected %d\n", kolo_nccl_enabled(),
                   expected);
      rc = 1;
    }
    gDevice = kolo_local_rank() % devices;
    if (cudaSetDevice(gDevice) != cudaSuccess) return 1;
    const int caught = kolo::testing::runCatch(argc, argv);
    if (caught != 0) rc = caught;
  }
  kolo_shutdown();
  return rc;
}
