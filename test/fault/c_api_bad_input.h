// SPDX-License-Identifier: Apache-2.0
// Helpers of the C API bad-input tests (c_api_bad_input_test.cc, c_api_bad_state_test.cc):
// one process, a job of one rank. Every bad call must return the documented code with a message
// naming what is wrong and leave the runtime usable (expectUsable: a correct, checked op).
#pragma once

#include <atomic>
#include <catch2/catch.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "kolo.h"

namespace bad_input {

// Bad inputs tried in this process (printed at exit by c_api_bad_input_test.cc).
std::atomic<int>& tried();

inline std::string lastError() { return kolo_last_error(); }

// One bad input: the call returned `rc`; it must be `code` and the message must hold every
// needle.
inline void expectError(int rc, int code, std::initializer_list<std::string> needles) {
  ++tried();
  INFO("last error: " << lastError());
  CHECK(rc == code);
  CHECK(std::string(kolo_status_string(rc)) == kolo_status_string(code));
  for (const auto& n : needles) CHECK_THAT(lastError(), Catch::Matchers::Contains(n));
}

// A kolo_tensor_t that owns its shape (not copyable: `shape` points into `dims`).
struct Tensor : kolo_tensor_t {
  std::vector<int64_t> dims;
  Tensor(void* d, kolo_dtype_t dt, std::vector<int64_t> s) : kolo_tensor_t{}, dims(std::move(s)) {
    data = d;
    dtype = dt;
    ndim = static_cast<int32_t>(dims.size());
    shape = dims.data();
    device = KOLO_CPU_DEVICE;
    stream = nullptr;
  }
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;
};

// A correct op: the runtime must still work. In a job of one rank the sum is the input.
inline void expectUsable() {
  static std::atomic<int> serial{0};
  std::vector<int32_t> v = {3, -7, 11, 42};
  Tensor t(v.data(), KOLO_INT32, {4});
  kolo_handle_t h = 0;
  std::string name = "usable." + std::to_string(serial++);
  REQUIRE(kolo_allreduce_async(name.c_str(), &t, nullptr, KOLO_SUM, 1.0, 1.0,
                               KOLO_GLOBAL_PROCESS_SET, nullptr, nullptr, &h) == KOLO_OK);
  REQUIRE(kolo_handle_wait(h, 30.0) == KOLO_OK);
  REQUIRE(kolo_handle_release(h) == KOLO_OK);
  CHECK(v == std::vector<int32_t>({3, -7, 11, 42}));
}

// Submits an allreduce, waits and releases; returns the first failing code (the error text
// stays that call's).
inline int allreduce(const char* name, const kolo_tensor_t* in, kolo_reduce_op_t op = KOLO_SUM,
                     double pre = 1.0, double post = 1.0, int32_t set = 0,
                     const kolo_tensor_t* out = nullptr) {
  kolo_handle_t h = 0;
  int rc = kolo_allreduce_async(name, in, out, op, pre, post, set, nullptr, nullptr, &h);
  if (rc == KOLO_OK) {
    rc = kolo_handle_wait(h, 30.0);
    kolo_handle_release(h);  // succeeds, so the wait's error text stays
  }
  return rc;
}

// Waits for and releases a submitted op; returns the first failing code.
inline int runOp(int submitRc, kolo_handle_t h) {
  if (submitRc != KOLO_OK) return submitRc;
  int rc = kolo_handle_wait(h, 30.0);
  if (rc != KOLO_OK) return rc;
  return kolo_handle_release(h);
}

struct Session {
  Session() { REQUIRE(kolo_init() == KOLO_OK); }
  ~Session() { kolo_shutdown(); }
};

}  // namespace bad_input
