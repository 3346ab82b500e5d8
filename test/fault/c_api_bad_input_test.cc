// SPDX-License-Identifier: Apache-2.0
// Bad input through the C API (libkolo.so, kolo.h only), in one process (a job of one rank:
// no launcher, loopback transport): null pointers, negative and overflowing sizes, unknown dtype,
// op, scale and device, zero-dimension tensors, mismatched buffers. c_api_bad_state_test.cc
// has names, handles, the lifecycle and KOLO_* values. Every section ends with a correct,
// checked allreduce; the number of bad inputs tried is printed at exit.
#include "c_api_bad_input.h"

#include <cmath>
#include <cstdio>
#include <limits>

namespace bad_input {

std::atomic<int>& tried() {
  static std::atomic<int> count{0};
  return count;
}

namespace {
struct Summary {
  ~Summary() {
    std::fprintf(stderr,
                 "c_api_bad_input: %d bad inputs tried, each checked for its code and "
                 "message\n",
                 tried().load());
  }
} gSummary;
}  // namespace

}  // namespace bad_input

using namespace bad_input;  // NOLINT: test file

TEST_CASE("null pointers name the argument") {
  Session s;
  std::vector<float> v(4, 1.0f);
  Tensor t(v.data(), KOLO_FLOAT32, {4});
  kolo_handle_t h = 0;

  expectError(kolo_allreduce_async("a", &t, nullptr, KOLO_SUM, 1, 1, 0, nullptr, nullptr, nullptr),
              KOLO_ERR_INVALID_ARGUMENT, {"handle output pointer is NULL"});
  expectError(kolo_allreduce_async("a", nullptr, nullptr, KOLO_SUM, 1, 1, 0, nullptr, nullptr, &h),
              KOLO_ERR_INVALID_ARGUMENT, {"input tensor is NULL"});
  CHECK(h == 0);
  kolo_tensor_t noShape = t;
  noShape.shape = nullptr;
  expectError(kolo_allreduce_async("a", &noShape, nullptr, KOLO_SUM, 1, 1, 0, nullptr, nullptr, &h),
              KOLO_ERR_INVALID_ARGUMENT, {"NULL shape"});
  Tensor noData(nullptr, KOLO_FLOAT32, {4});
  expectError(allreduce("nodata", &noData), KOLO_ERR_INVALID_ARGUMENT,
              {"'nodata'", "data pointer is NULL"});
  Tensor noOut(nullptr, KOLO_FLOAT32, {4});
  expectError(allreduce("noout", &t, KOLO_SUM, 1, 1, 0, &noOut), KOLO_ERR_INVALID_ARGUMENT,
              {"'noout'", "output", "NULL"});
  expectError(allreduce(nullptr, &t), KOLO_ERR_INVALID_ARGUMENT, {"name is empty"});
  expectError(kolo_allgather_async("g", nullptr, nullptr, nullptr, 0, nullptr, nullptr, &h),
              KOLO_ERR_INVALID_ARGUMENT, {"input tensor is NULL"});
  expectError(kolo_broadcast_async("b", nullptr, 0, 0, nullptr, nullptr, &h),
              KOLO_ERR_INVALID_ARGUMENT, {"tensor is NULL"});
  expectError(
      kolo_alltoall_async("x", nullptr, nullptr, 0, nullptr, nullptr, 0, nullptr, nullptr, &h),
      KOLO_ERR_INVALID_ARGUMENT, {"input tensor is NULL"});
  expectError(kolo_reducescatter_async("r", nullptr, KOLO_SUM, 1, 1, nullptr, nullptr, 0, nullptr,
                                       nullptr, &h),
              KOLO_ERR_INVALID_ARGUMENT, {"input tensor is NULL"});
  expectError(kolo_grouped_allreduce_async("gr", 2, nullptr, nullptr, KOLO_SUM, 1, 1, 0, nullptr,
                                           nullptr, &h),
              KOLO_ERR_INVALID_ARGUMENT, {"'gr'", "on rank 0", "inputs is NULL"});
  expectError(kolo_barrier_async(0, nullptr, nullptr, nullptr), KOLO_ERR_INVALID_ARGUMENT,
              {"handle output pointer is NULL"});
  expectError(kolo_join_async(nullptr, nullptr, nullptr), KOLO_ERR_INVALID_ARGUMENT,
              {"handle output pointer is NULL"});

  // Handle accessors and queries with NULL out-pointers, on a valid, completed handle.
  REQUIRE(kolo_barrier_async(0, nullptr, nullptr, &h) == KOLO_OK);
  REQUIRE(kolo_handle_wait(h, 30.0) == KOLO_OK);
  expectError(kolo_handle_poll(h, nullptr), KOLO_ERR_INVALID_ARGUMENT, {"done is NULL"});
  expectError(kolo_handle_status(h, nullptr, nullptr), KOLO_ERR_INVALID_ARGUMENT,
              {"status is NULL"});
  expectError(kolo_handle_join_result(h, nullptr), KOLO_ERR_INVALID_ARGUMENT,
              {"last_joined_rank is NULL"});
  expectError(kolo_handle_received_splits(h, nullptr, 1), KOLO_ERR_INVALID_ARGUMENT,
              {"splits buffer"});
  CHECK(kolo_handle_output(h, nullptr, nullptr, nullptr) == KOLO_OK);  // all optional
  REQUIRE(kolo_handle_release(h) == KOLO_OK);

  int32_t id = 0, one = 0;
  expectError(kolo_process_set_size(0, nullptr), KOLO_ERR_INVALID_ARGUMENT, {"size is NULL"});
  expectError(kolo_process_set_rank(0, nullptr), KOLO_ERR_INVALID_ARGUMENT, {"rank is NULL"});
  expectError(kolo_process_set_ranks(0, &one, 1, nullptr), KOLO_ERR_INVALID_ARGUMENT,
              {"n is NULL"});
  expectError(kolo_add_process_set(nullptr, 1, &id), KOLO_ERR_INVALID_ARGUMENT,
              {"non-empty rank list"});
  expectError(kolo_add_process_set(&one, 1, nullptr), KOLO_ERR_INVALID_ARGUMENT, {"id pointer"});
  expectError(kolo_start_timeline(nullptr, 0), KOLO_ERR_INVALID_ARGUMENT,
              {"timeline path is empty"});
  for (int code : {-1, 14, 999, std::numeric_limits<int>::min()}) {
    ++tried();
    const char* text = kolo_status_string(code);
    REQUIRE(text != nullptr);
    CHECK(std::string(text).size() > 0);
  }
  expectUsable();
}

TEST_CASE("negative and overflowing sizes") {
  Session s;
  std::vector<double> v(8, 2.0);
  kolo_handle_t h = 0;
  for (int32_t ndim : {-1, 17, std::numeric_limits<int32_t>::min()}) {
    std::vector<int64_t> shape(17, 1);
    kolo_tensor_t t = {v.data(), KOLO_FLOAT64, ndim, shape.data(), KOLO_CPU_DEVICE, nullptr};
    expectError(allreduce("nd", &t), KOLO_ERR_INVALID_ARGUMENT, {"ndim " + std::to_string(ndim)});
  }
  Tensor neg(v.data(), KOLO_FLOAT64, {2, -4});
  expectError(allreduce("neg", &neg), KOLO_ERR_INVALID_ARGUMENT,
              {"'neg'", "dimension 1 is negative (-4)"});
  const int64_t big = int64_t{1} << 40;
  const int64_t kMax = std::numeric_limits<int64_t>::max();
  for (auto shape : {std::vector<int64_t>{big, big}, std::vector<int64_t>{kMax},
                     std::vector<int64_t>{3, kMax / 2}, std::vector<int64_t>{big, big, 0}}) {
    Tensor t(v.data(), KOLO_FLOAT64, shape);
    expectError(allreduce("huge", &t), KOLO_ERR_INVALID_ARGUMENT, {"'huge'", "overflows"});
  }
  Tensor t(v.data(), KOLO_FLOAT64, {8});
  int32_t splitsNeg[1] = {-1}, splitsTwo[2] = {4, 4}, splitsLong[1] = {9};
  expectError(
      kolo_alltoall_async("a2a", &t, splitsTwo, -1, nullptr, nullptr, 0, nullptr, nullptr, &h),
      KOLO_ERR_INVALID_ARGUMENT, {"'a2a'", "n_splits is negative"});
  expectError(
      kolo_alltoall_async("a2a", &t, splitsNeg, 1, nullptr, nullptr, 0, nullptr, nullptr, &h),
      KOLO_ERR_INVALID_ARGUMENT, {"'a2a'", "split is negative"});
  expectError(
      kolo_alltoall_async("a2a", &t, splitsTwo, 2, nullptr, nullptr, 0, nullptr, nullptr, &h),
      KOLO_ERR_INVALID_ARGUMENT, {"'a2a'", "got 2 splits for a set of 1"});
  expectError(
      kolo_alltoall_async("a2a", &t, splitsLong, 1, nullptr, nullptr, 0, nullptr, nullptr, &h),
      KOLO_ERR_INVALID_ARGUMENT, {"'a2a'", "splits sum to 9, more than dimension 0 (8)"});
  for (int32_t root : {-1, 1, std::numeric_limits<int32_t>::max()}) {
    expectError(kolo_broadcast_async("bc", &t, root, 0, nullptr, nullptr, &h),
                KOLO_ERR_INVALID_ARGUMENT,
                {"'bc'", "root " + std::to_string(root) + " is outside [0, 1)"});
  }
  for (int32_t n : {0, -3}) {
    expectError(kolo_grouped_allreduce_async("grp", n, &t, nullptr, KOLO_SUM, 1, 1, 0, nullptr,
                                             nullptr, &h),
                KOLO_ERR_INVALID_ARGUMENT, {"'grp'", "n > 0"});
  }
  int32_t id = -1;
  int32_t r5[1] = {5}, dup[2] = {0, 0}, r0[1] = {0};
  expectError(kolo_add_process_set(r0, 0, &id), KOLO_ERR_INVALID_ARGUMENT, {"non-empty"});
  expectError(kolo_add_process_set(r0, -2, &id), KOLO_ERR_INVALID_ARGUMENT, {"non-empty"});
  expectError(kolo_add_process_set(r5, 1, &id), KOLO_ERR_INVALID_ARGUMENT,
              {"rank 5 is outside [0, 1)"});
  expectError(kolo_add_process_set(dup, 2, &id), KOLO_ERR_INVALID_ARGUMENT,
              {"ascending and unique"});
  expectError(kolo_remove_process_set(0), KOLO_ERR_INVALID_ARGUMENT, {"global process set"});
  for (int32_t set : {77, -1}) {
    int32_t size = 0;
    std::string what = "process set " + std::to_string(set) + " does not exist";
    expectError(kolo_remove_process_set(set), KOLO_ERR_INVALID_ARGUMENT, {what});
    expectError(kolo_process_set_size(set, &size), KOLO_ERR_INVALID_ARGUMENT, {what});
    expectError(allreduce("inset", &t, KOLO_SUM, 1, 1, set), KOLO_ERR_INVALID_ARGUMENT,
                {"'inset'", what});
  }
  // received_splits with a buffer too small for the set.
  REQUIRE(kolo_alltoall_async("a2a.ok", &t, nullptr, 0, nullptr, nullptr, 0, nullptr, nullptr,
                              &h) == KOLO_OK);
  REQUIRE(kolo_handle_wait(h, 30.0) == KOLO_OK);
  int32_t got[1] = {-1};
  expectError(kolo_handle_received_splits(h, got, 0), KOLO_ERR_INVALID_ARGUMENT,
              {"holds 0 entries, 1 needed"});
  expectError(kolo_handle_received_splits(h, got, -4), KOLO_ERR_INVALID_ARGUMENT,
              {"holds -4 entries"});
  REQUIRE(kolo_handle_received_splits(h, got, 1) == KOLO_OK);
  CHECK(got[0] == 8);
  REQUIRE(kolo_handle_release(h) == KOLO_OK);
  expectUsable();
}

TEST_CASE("unknown dtype, reduce op, scale and device") {
  Session s;
  std::vector<int32_t> v(6, 1);
  kolo_handle_t h = 0;
  for (int dt : {11, 99, -1, std::numeric_limits<int>::max()}) {
    Tensor t(v.data(), static_cast<kolo_dtype_t>(dt), {6});
    std::string what = "unknown dtype " + std::to_string(dt);
    expectError(allreduce("dt", &t), KOLO_ERR_INVALID_ARGUMENT, {"'dt'", what});
    expectError(kolo_allgather_async("dt", &t, nullptr, nullptr, 0, nullptr, nullptr, &h),
                KOLO_ERR_INVALID_ARGUMENT, {what});
    expectError(kolo_broadcast_async("dt", &t, 0, 0, nullptr, nullptr, &h),
                KOLO_ERR_INVALID_ARGUMENT, {what});
    expectError(
        kolo_alltoall_async("dt", &t, nullptr, 0, nullptr, nullptr, 0, nullptr, nullptr, &h),
        KOLO_ERR_INVALID_ARGUMENT, {what});
    expectError(kolo_reducescatter_async("dt", &t, KOLO_SUM, 1, 1, nullptr, nullptr, 0, nullptr,
                                         nullptr, &h),
                KOLO_ERR_INVALID_ARGUMENT, {what});
  }
  Tensor t(v.data(), KOLO_INT32, {6});
  for (int op : {6, 99, -1}) {
    std::string what = "unknown reduce op " + std::to_string(op);
    auto rop = static_cast<kolo_reduce_op_t>(op);
    expectError(allreduce("op", &t, rop), KOLO_ERR_INVALID_ARGUMENT, {"'op'", what});
    expectError(
        kolo_reducescatter_async("op", &t, rop, 1, 1, nullptr, nullptr, 0, nullptr, nullptr, &h),
        KOLO_ERR_INVALID_ARGUMENT, {"'op'", what});
    expectError(
        kolo_grouped_allreduce_async("op", 1, &t, nullptr, rop, 1, 1, 0, nullptr, nullptr, &h),
        KOLO_ERR_INVALID_ARGUMENT, {what});
  }
  // KOLO_ADASUM is an allreduce of float tensors only.
  expectError(allreduce("ada", &t, KOLO_OP_ADASUM), KOLO_ERR_INVALID_ARGUMENT,
              {"'ada'", "adasum", "int32"});
  Tensor f(v.data(), KOLO_FLOAT32, {6});
  expectError(kolo_reducescatter_async("ada", &f, KOLO_ADASUM, 1, 1, nullptr, nullptr, 0, nullptr,
                                       nullptr, &h),
              KOLO_ERR_INVALID_ARGUMENT, {"'ada'", "adasum", "only supported by allreduce"});
  const double inf = std::numeric_limits<double>::infinity();
  for (double bad : {std::nan(""), inf, -inf}) {
    expectError(allreduce("scale", &t, KOLO_SUM, bad, 1.0), KOLO_ERR_INVALID_ARGUMENT,
                {"'scale'", "scale factors must be finite"});
    expectError(allreduce("scale", &t, KOLO_SUM, 1.0, bad), KOLO_ERR_INVALID_ARGUMENT,
                {"'scale'", "scale factors must be finite"});
  }
  for (int32_t device : {-2, 0, 7}) {
    kolo_tensor_t d = t;
    d.device = device;
    int want = (device < -1 || !kolo_cuda_built())
                   ? (device < -1 ? KOLO_ERR_INVALID_ARGUMENT : KOLO_ERR_UNSUPPORTED)
                   : KOLO_ERR_INVALID_ARGUMENT;
    if (kolo_cuda_built() && device >= 0) continue;  // a real device path: not bad input here
    expectError(allreduce("dev", &d), want, {"'dev'", "device " + std::to_string(device)});
  }
  expectUsable();
}

TEST_CASE("zero-dimension and zero-element tensors") {
  Session s;
  kolo_handle_t h = 0;
  int32_t scalar = 5;
  Tensor sc(&scalar, KOLO_INT32, {});
  expectError(kolo_allgather_async("sc", &sc, nullptr, nullptr, 0, nullptr, nullptr, &h),
              KOLO_ERR_INVALID_ARGUMENT, {"'sc'", "scalar (0-dimensional)"});
  expectError(kolo_alltoall_async("sc", &sc, nullptr, 0, nullptr, nullptr, 0, nullptr, nullptr, &h),
              KOLO_ERR_INVALID_ARGUMENT, {"'sc'", "scalar (0-dimensional)"});
  expectError(kolo_reducescatter_async("sc", &sc, KOLO_SUM, 1, 1, nullptr, nullptr, 0, nullptr,
                                       nullptr, &h),
              KOLO_ERR_INVALID_ARGUMENT, {"'sc'", "scalar (0-dimensional)"});
  // Where they are allowed they work: a scalar allreduce and broadcast, empty tensors with a
  // NULL data pointer.
  CHECK(allreduce("sc.ok", &sc, KOLO_MAX) == KOLO_OK);
  CHECK(scalar == 5);
  int rc = kolo_broadcast_async("sc.bc", &sc, 0, 0, nullptr, nullptr, &h);
  CHECK(runOp(rc, h) == KOLO_OK);
  Tensor empty(nullptr, KOLO_FLOAT32, {0});
  CHECK(allreduce("empty", &empty) == KOLO_OK);
  Tensor empty2(nullptr, KOLO_FLOAT32, {0, 3});
  REQUIRE(kolo_allgather_async("empty.g", &empty2, nullptr, nullptr, 0, nullptr, nullptr, &h) ==
          KOLO_OK);
  REQUIRE(kolo_handle_wait(h, 30.0) == KOLO_OK);
  int32_t ndim = 0;
  int64_t shape[KOLO_MAX_DIMS] = {-1, -1};
  REQUIRE(kolo_handle_output(h, nullptr, &ndim, shape) == KOLO_OK);
  CHECK(ndim == 2);
  CHECK(shape[0] == 0);
  CHECK(shape[1] == 3);
  REQUIRE(kolo_handle_release(h) == KOLO_OK);
  expectUsable();
}

TEST_CASE("mismatched buffers") {
  Session s;
  kolo_handle_t h = 0;
  std::vector<float> in(6, 1.0f), out(6, 0.0f);
  std::vector<double> outD(6, 0.0);
  Tensor t(in.data(), KOLO_FLOAT32, {6});
  Tensor wrongShape(out.data(), KOLO_FLOAT32, {2, 3});
  Tensor wrongDtype(outD.data(), KOLO_FLOAT64, {6});
  expectError(allreduce("mm", &t, KOLO_SUM, 1, 1, 0, &wrongShape), KOLO_ERR_INVALID_ARGUMENT,
              {"'mm'", "does not match the input", "[2, 3]"});
  expectError(allreduce("mm", &t, KOLO_SUM, 1, 1, 0, &wrongDtype), KOLO_ERR_INVALID_ARGUMENT,
              {"'mm'", "does not match the input", "float64"});
  kolo_tensor_t ins[2] = {t, t};
  kolo_tensor_t outs[2] = {t, wrongShape};
  expectError(
      kolo_grouped_allreduce_async("gmm", 2, ins, outs, KOLO_SUM, 1, 1, 0, nullptr, nullptr, &h),
      KOLO_ERR_INVALID_ARGUMENT, {"'gmm.1'", "does not match"});
  // An allocator that refuses: the op fails with INVALID_ARGUMENT naming the tensor.
  auto refuse = [](void*, size_t, int32_t, const int64_t*) -> void* { return nullptr; };
  int rc = kolo_allgather_async("noalloc", &t, refuse, nullptr, 0, nullptr, nullptr, &h);
  REQUIRE(rc == KOLO_OK);
  expectError(kolo_handle_wait(h, 30.0), KOLO_ERR_INVALID_ARGUMENT, {"noalloc"});
  REQUIRE(kolo_handle_release(h) == KOLO_OK);
  expectUsable();
}
