// SPDX-License-Identifier: Apache-2.0
// Bad input through the C API, continued (see c_api_bad_input_test.cc): names (empty, too long,
// duplicate in flight), released and forged handles, bad timeouts, the lifecycle (before init,
// twice, after shutdown, again) and invalid KOLO_* values.
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <thread>

#include "c_api_bad_input.h"

using namespace bad_input;  // NOLINT: test file
using Catch::Matchers::Contains;

TEST_CASE("names: empty, too long, duplicate in flight") {
  Session s;
  std::vector<int64_t> v(3, 9);
  Tensor t(v.data(), KOLO_INT64, {3});
  expectError(allreduce("", &t), KOLO_ERR_INVALID_ARGUMENT, {"name is empty"});
  std::string n1025(1025, 'n'), n1024(1024, 'n'), huge(1 << 20, 'h');
  expectError(allreduce(n1025.c_str(), &t), KOLO_ERR_INVALID_ARGUMENT,
              {"1025 bytes long (at most 1024)"});
  expectError(allreduce(huge.c_str(), &t), KOLO_ERR_INVALID_ARGUMENT,
              {"1048576 bytes long (at most 1024)"});
  CHECK(allreduce(n1024.c_str(), &t) == KOLO_OK);
  CHECK(v == std::vector<int64_t>(3, 9));
  // The runtime's own ops' names: a user op under one would meet a barrier or join.
  for (const char* own : {"__barrier", "__join", "__process_set.add", "__process_set.remove"}) {
    expectError(allreduce(own, &t), KOLO_ERR_INVALID_ARGUMENT, {own, "reserved"});
  }

  // Duplicate: an allocator that holds the first op in flight until released (bounded).
  struct Gate {
    std::atomic<bool> open{false};
    std::atomic<bool> entered{false};
    std::vector<char> buffer;
  } gate;
  auto hold = [](void* user, size_t bytes, int32_t, const int64_t*) -> void* {
    auto* g = static_cast<Gate*>(user);
    g->entered = true;
    auto stop = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!g->open && std::chrono::steady_clock::now() < stop) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    g->buffer.resize(bytes);
    return g->buffer.data();
  };
  kolo_handle_t h1 = 0, h2 = 0;
  REQUIRE(kolo_allgather_async("twice", &t, hold, &gate, 0, nullptr, nullptr, &h1) == KOLO_OK);
  auto stop = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!gate.entered && std::chrono::steady_clock::now() < stop) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  REQUIRE(gate.entered);
  expectError(kolo_allreduce_async("twice", &t, nullptr, KOLO_SUM, 1, 1, 0, nullptr, nullptr, &h2),
              KOLO_ERR_DUPLICATE_NAME, {"'twice'", "already in flight"});
  CHECK(h2 == 0);
  expectError(kolo_handle_stream_wait(h1, nullptr), KOLO_ERR_INVALID_ARGUMENT,
              {"is still running"});
  expectError(kolo_handle_cuda_event(h1, nullptr), KOLO_ERR_INVALID_ARGUMENT, {"event is NULL"});
  gate.open = true;
  REQUIRE(kolo_handle_wait(h1, 30.0) == KOLO_OK);
  REQUIRE(kolo_handle_release(h1) == KOLO_OK);
  // Once it completed the name is free again.
  CHECK(allreduce("twice", &t) == KOLO_OK);
  expectUsable();
}

TEST_CASE("handles: released, forged, bad timeouts") {
  Session s;
  kolo_handle_t h = 0;
  REQUIRE(kolo_barrier_async(0, nullptr, nullptr, &h) == KOLO_OK);
  REQUIRE(kolo_handle_wait(h, 30.0) == KOLO_OK);
  REQUIRE(kolo_handle_release(h) == KOLO_OK);
  const int64_t kMax = std::numeric_limits<int64_t>::max();
  for (kolo_handle_t bad : {h, int64_t{0}, int64_t{-1}, std::numeric_limits<int64_t>::min(), kMax,
                            int64_t{123456789}}) {
    int done = 0, st = 0;
    int32_t last = 0, splits[1];
    const char* text = nullptr;
    void* data = nullptr;
    std::string what = "handle " + std::to_string(bad) + " is unknown";
    expectError(kolo_handle_wait(bad, 1.0), KOLO_ERR_INVALID_ARGUMENT, {what});
    expectError(kolo_handle_wait(bad, -1.0), KOLO_ERR_INVALID_ARGUMENT, {what});
    expectError(kolo_handle_poll(bad, &done), KOLO_ERR_INVALID_ARGUMENT, {what});
    expectError(kolo_handle_status(bad, &st, &text), KOLO_ERR_INVALID_ARGUMENT, {what});
    expectError(kolo_handle_output(bad, &data, nullptr, nullptr), KOLO_ERR_INVALID_ARGUMENT,
                {what});
    expectError(kolo_handle_join_result(bad, &last), KOLO_ERR_INVALID_ARGUMENT, {what});
    expectError(kolo_handle_received_splits(bad, splits, 1), KOLO_ERR_INVALID_ARGUMENT, {what});
    expectError(kolo_handle_stream_wait(bad, nullptr), KOLO_ERR_INVALID_ARGUMENT, {what});
    expectError(kolo_handle_release(bad), KOLO_ERR_INVALID_ARGUMENT, {what});
  }
  // A NaN timeout is not a wait without limit: it is rejected.
  REQUIRE(kolo_barrier_async(0, nullptr, nullptr, &h) == KOLO_OK);
  expectError(kolo_handle_wait(h, std::nan("")), KOLO_ERR_INVALID_ARGUMENT, {"timeout is NaN"});
  CHECK(kolo_handle_wait(h, std::numeric_limits<double>::infinity()) == KOLO_OK);
  CHECK(kolo_handle_wait(h, 1e300) == KOLO_OK);
  // A host op has no device work: ordering a stream after it is a no-op, event or not.
  void* event = &h;
  CHECK(kolo_handle_cuda_event(h, &event) == KOLO_OK);
  CHECK(event == nullptr);
  CHECK(kolo_handle_stream_wait(h, nullptr) == KOLO_OK);
  REQUIRE(kolo_handle_release(h) == KOLO_OK);
  expectUsable();
}

TEST_CASE("lifecycle: before init, init twice, after shutdown, init again") {
  REQUIRE(kolo_is_initialized() == 0);
  std::vector<int32_t> v(2, 1);
  Tensor t(v.data(), KOLO_INT32, {2});
  kolo_handle_t h = 0, other = 0;
  int32_t one = 0, id = 0, size = 0;
  auto notInit = [&](const char* phase) {
    INFO(phase);
    CHECK(kolo_rank() == -1);
    CHECK(kolo_size() == -1);
    CHECK(std::string(kolo_transport_name()).empty());
    expectError(allreduce("x", &t), KOLO_ERR_NOT_INITIALIZED, {"not initialized"});
    expectError(kolo_barrier_async(0, nullptr, nullptr, &other), KOLO_ERR_NOT_INITIALIZED,
                {"not initialized"});
    CHECK(other == 0);
    expectError(kolo_join_async(nullptr, nullptr, &other), KOLO_ERR_NOT_INITIALIZED,
                {"not initialized"});
    expectError(kolo_add_process_set(&one, 1, &id), KOLO_ERR_NOT_INITIALIZED, {"not initialized"});
    expectError(kolo_process_set_size(0, &size), KOLO_ERR_NOT_INITIALIZED, {"not initialized"});
    expectError(kolo_start_timeline("/tmp/kolo_bad_input_timeline.json", 0),
                KOLO_ERR_NOT_INITIALIZED, {"not initialized"});
    expectError(kolo_stop_timeline(), KOLO_ERR_NOT_INITIALIZED, {"not initialized"});
  };
  notInit("before init");
  REQUIRE(kolo_init() == KOLO_OK);
  CHECK(kolo_init() == KOLO_OK);  // twice: a no-op
  ++tried();
  CHECK(kolo_size() == 1);
  CHECK(kolo_rank() == 0);
  REQUIRE(kolo_allreduce_async("before.shutdown", &t, nullptr, KOLO_SUM, 1, 1, 0, nullptr, nullptr,
                               &h) == KOLO_OK);
  REQUIRE(kolo_handle_wait(h, 30.0) == KOLO_OK);
  REQUIRE(kolo_shutdown() == KOLO_OK);
  CHECK(kolo_shutdown() == KOLO_OK);  // idempotent
  ++tried();
  notInit("after shutdown");
  // A handle issued before the shutdown still answers.
  int st = -2;
  CHECK(kolo_handle_status(h, &st, nullptr) == KOLO_OK);
  CHECK(st == KOLO_OK);
  CHECK(kolo_handle_release(h) == KOLO_OK);
  // Init again works, and so do ops.
  REQUIRE(kolo_init() == KOLO_OK);
  expectUsable();
  REQUIRE(kolo_shutdown() == KOLO_OK);
}

TEST_CASE("invalid KOLO_* values fail init naming the variable") {
  struct Bad {
    const char* var;
    const char* value;
    const char* expect;  // besides the variable's name
  };
  const Bad cases[] = {
      {"KOLO_FUSION_THRESHOLD", "abc", "an integer"},
      {"KOLO_FUSION_THRESHOLD", "-5", "an integer"},
      {"KOLO_FUSION_THRESHOLD", "10MB", "an integer"},
      {"KOLO_FUSION_THRESHOLD", "99999999999999999999999", "an integer"},
      {"HOROVOD_FUSION_THRESHOLD", "lots", "an integer"},
      {"KOLO_CYCLE_TIME", "-1", "a number"},
      {"KOLO_CYCLE_TIME", "nan", "a number"},
      {"KOLO_CYCLE_TIME", "inf", "a number"},
      {"KOLO_CACHE_CAPACITY", "-3", "an integer"},
      {"KOLO_TIMEOUT_SECONDS", "0", "a number"},
      {"KOLO_TIMEOUT_SECONDS", "soon", "a number"},
      {"KOLO_HEARTBEAT_SECONDS", "20", "KOLO_TIMEOUT_SECONDS"},
      // The heartbeat's default is too long for this timeout: the message gives both values.
      {"KOLO_TIMEOUT_SECONDS", "0.5",
       "KOLO_HEARTBEAT_SECONDS (1 s; default 1) must be at most "
       "half of KOLO_TIMEOUT_SECONDS (0.5 s)"},
      {"KOLO_CYCLE_TIME", "20000", "KOLO_TIMEOUT_SECONDS"},
      {"KOLO_HEARTBEAT_SECONDS", "0", "a number"},
      {"KOLO_START_TIMEOUT", "-1", "a number"},
      {"KOLO_STALL_CHECK_TIME_SECONDS", "-1", "a number"},
      {"KOLO_STALL_CHECK_DISABLE", "maybe", "a boolean"},
      {"KOLO_TIMELINE_MARK_CYCLES", "2", "a boolean"},
      {"KOLO_CONTROLLER", "carrier-pigeon", "one of"},
      {"KOLO_SHM", "sometimes", "one of"},
      {"KOLO_ALLREDUCE_ALGORITHM", "fast", "one of"},
      {"KOLO_ALLGATHER_ALGORITHM", "ring2", "one of"},
      {"KOLO_SEGMENT_BYTES", "0", "an integer"},
      {"KOLO_LOG_LEVEL", "loud", "one of"},
      {"KOLO_RANK", "abc", "an integer"},
      {"KOLO_RANK", "-1", "an integer"},
      {"KOLO_SIZE", "0", "an integer"},
      {"KOLO_SIZE", "2", "KOLO_RANK"},
      {"KOLO_RENDEZVOUS_PORT", "70000", "an integer"},
  };
  REQUIRE(kolo_is_initialized() == 0);
  for (const Bad& b : cases) {
    INFO(b.var << "=" << b.value);
    REQUIRE(setenv(b.var, b.value, 1) == 0);
    int rc = kolo_init();
    std::string msg = lastError();
    unsetenv(b.var);
    ++tried();
    CHECK(rc != KOLO_OK);
    CHECK(kolo_is_initialized() == 0);
    CHECK_THAT(msg, Contains(b.var) || Contains(b.value));
    CHECK_THAT(msg, Contains(b.expect));
    if (rc == KOLO_OK) kolo_shutdown();
  }
  // KOLO_RANK >= KOLO_SIZE names both.
  setenv("KOLO_RANK", "5", 1);
  setenv("KOLO_SIZE", "2", 1);
  int rc = kolo_init();
  std::string msg = lastError();
  unsetenv("KOLO_RANK");
  unsetenv("KOLO_SIZE");
  ++tried();
  CHECK(rc == KOLO_ERR_INVALID_ARGUMENT);
  CHECK_THAT(msg, Contains("KOLO_RANK=5") && Contains("KOLO_SIZE=2"));
  // A timeline file that cannot be written costs the timeline, not the job (as Horovod: an
  // error in the log); failing init there left a multi-rank job's other ranks with a lost peer.
  setenv("KOLO_TIMELINE", "/nonexistent-dir/kolo/timeline.json", 1);
  rc = kolo_init();
  unsetenv("KOLO_TIMELINE");
  ++tried();
  REQUIRE(rc == KOLO_OK);
  expectUsable();
  REQUIRE(kolo_shutdown() == KOLO_OK);
  // With the environment clean again, init works.
  REQUIRE(kolo_init() == KOLO_OK);
  expectUsable();
  REQUIRE(kolo_shutdown() == KOLO_OK);
}

TEST_CASE("shutdown inside a completion callback is refused, not a crash or a hang") {
  // The callback runs on the coordinator's thread, whether that thread's round completed the op
  // (nobody waits) or a waiting caller's did (kolo_handle_wait runs the round), or the op was
  // done before the callback was attached. A shutdown there would join that thread: itself.
  Session s;
  struct Seen {
    std::atomic<int> rc{-1};
    std::string text;
  };
  auto shutDown = [](kolo_handle_t, kolo_status_t, void* user) {
    auto* seen = static_cast<Seen*>(user);
    const int rc = kolo_shutdown();
    seen->text = kolo_last_error();
    seen->rc = rc;
  };
  for (bool wait : {true, false}) {
    INFO((wait ? "completed in a waiting caller's round" : "completed by the coordinator"));
    std::vector<float> v(4, 1.0f);
    Tensor t(v.data(), KOLO_FLOAT32, {4});
    Seen seen;
    kolo_handle_t h = 0;
    REQUIRE(kolo_allreduce_async("cb.shutdown", &t, nullptr, KOLO_SUM, 1, 1, 0, shutDown, &seen,
                                 &h) == KOLO_OK);
    if (wait) CHECK(kolo_handle_wait(h, 30.0) == KOLO_OK);
    auto stop = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (seen.rc == -1 && std::chrono::steady_clock::now() < stop) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    CHECK(seen.rc == KOLO_ERR_INVALID_ARGUMENT);
    CHECK_THAT(seen.text, Contains("inside a completion callback"));
    REQUIRE(kolo_handle_release(h) == KOLO_OK);
    CHECK(kolo_is_initialized() == 1);
    expectUsable();
  }
}

TEST_CASE("grouped allreduce: the group's name and each output are checked like a single op's") {
  Session s;
  std::vector<float> a(4, 1.0f), b(4, 2.0f), out(4, 0.0f);
  kolo_tensor_t ins[2];
  Tensor ta(a.data(), KOLO_FLOAT32, {4}), tb(b.data(), KOLO_FLOAT32, {4});
  ins[0] = ta;
  ins[1] = tb;
  kolo_handle_t h = 0;
  for (const char* name : {static_cast<const char*>(nullptr), ""}) {
    expectError(kolo_grouped_allreduce_async(name, 2, ins, nullptr, KOLO_SUM, 1, 1, 0, nullptr,
                                             nullptr, &h),
                KOLO_ERR_INVALID_ARGUMENT, {"name is empty"});
  }
  std::string n1023(1023, 'g');
  expectError(kolo_grouped_allreduce_async(n1023.c_str(), 2, ins, nullptr, KOLO_SUM, 1, 1, 0,
                                           nullptr, nullptr, &h),
              KOLO_ERR_INVALID_ARGUMENT,
              {"1023 bytes long; a group of 2 tensors allows at most 1022"});
  // An output on another device than its input: refused, naming both (it was written as host
  // memory).
  kolo_tensor_t outs[2];
  Tensor o0(out.data(), KOLO_FLOAT32, {4}), o1(out.data(), KOLO_FLOAT32, {4});
  outs[0] = o0;
  outs[1] = o1;
  outs[1].device = 0;
  expectError(kolo_grouped_allreduce_async("grp.dev", 2, ins, outs, KOLO_SUM, 1, 1, 0, nullptr,
                                           nullptr, &h),
              KOLO_ERR_INVALID_ARGUMENT,
              {"'grp.dev.1'",
               "the output (float32 [4] on CUDA device 0) does not match the input "
               "(float32 [4] on the host)"});
  CHECK(out == std::vector<float>(4, 0.0f));
}
