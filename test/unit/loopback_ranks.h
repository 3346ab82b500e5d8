// SPDX-License-Identifier: Apache-2.0
// Thread ranks for unit tests: runRanks runs one function per rank over an in-process loopback
// group (the algorithm tests), onRanks one function per rank index on its own thread (tests that
// build their own transports: tcp, gloo, shm). Catch assertions are not thread-safe, so ranks
// only return a Status and the caller checks them (requireAllOk). Both block until every rank
// returned; each transport's timeout bounds a rank that waits for a peer that never comes.
#pragma once

#include <catch2/catch.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "base/status.h"
#include "transport/loopback/loopback_transport.h"

namespace kolo::testing {

inline std::vector<Status> runRanks(
    int n, const std::function<Status(Transport&, int)>& fn,
    std::chrono::milliseconds timeout = std::chrono::milliseconds(10000)) {
  std::vector<std::unique_ptr<Transport>> ts;
  Status created = createLoopbackGroup(n, &ts);
  REQUIRE(created.isOk());
  std::vector<Status> results(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    ts[r]->setTimeout(timeout);
    threads.emplace_back([&, r] { results[r] = fn(*ts[r], r); });
  }
  for (auto& th : threads) th.join();
  return results;
}

inline std::vector<Status> onRanks(int n, const std::function<Status(int)>& fn) {
  std::vector<Status> results(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back([&, r] { results[r] = fn(r); });
  for (auto& th : threads) th.join();
  return results;
}

inline void requireAllOk(const std::vector<Status>& results) {
  for (size_t r = 0; r < results.size(); ++r) {
    INFO("rank " << r << ": " << results[r].toString());
    REQUIRE(results[r].isOk());
  }
}

}  // namespace kolo::testing
