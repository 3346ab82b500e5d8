// SPDX-License-Identifier: Apache-2.0
// Thread-safe assertions for tests whose thread ranks assert.
//
// Catch2 v2 is not thread-safe: assertions made on several threads at once race on its run
// context (ThreadSanitizer: data race in Catch::RunContext::assertionPassed), which can lose or
// garble results. A test file whose rank threads assert includes this header after
// <catch2/catch.hpp>; it redefines REQUIRE, CHECK, their _FALSE and _THAT forms so that each
// first evaluates its expression (which may block on the other ranks, so never under the lock)
// and then reports the result to Catch under one process-wide lock. The price: a failure shows
// the expression's text, not its operands' values. As before, a failing REQUIRE on a thread
// other than the test's own ends the program (Catch throws to stop the test).
#pragma once

#include <catch2/catch.hpp>
#include <mutex>

namespace kolo_test {
inline std::mutex& catchMutex() {
  static std::mutex m;
  return m;
}
}  // namespace kolo_test

#define KOLO_LOCKED_ASSERT(name, disposition, text, ...)                                    \
  do {                                                                                      \
    const bool koloPassed_ = static_cast<bool>(__VA_ARGS__);                                \
    std::lock_guard<std::mutex> koloLock_(kolo_test::catchMutex());                         \
    Catch::AssertionHandler koloHandler_(name, CATCH_INTERNAL_LINEINFO, text, disposition); \
    koloHandler_.handleExpr(Catch::ExprLhs<bool>(koloPassed_));                             \
    koloHandler_.complete();                                                                \
  } while (false)

#undef REQUIRE
#undef REQUIRE_FALSE
#undef REQUIRE_THAT
#undef CHECK
#undef CHECK_FALSE
#undef CHECK_THAT
#define REQUIRE(...) \
  KOLO_LOCKED_ASSERT("REQUIRE", Catch::ResultDisposition::Normal, #__VA_ARGS__, __VA_ARGS__)
#define REQUIRE_FALSE(...)                                                                   \
  KOLO_LOCKED_ASSERT("REQUIRE_FALSE",                                                        \
                     Catch::ResultDisposition::Normal | Catch::ResultDisposition::FalseTest, \
                     #__VA_ARGS__, __VA_ARGS__)
#define REQUIRE_THAT(arg, matcher)                                                         \
  KOLO_LOCKED_ASSERT("REQUIRE_THAT", Catch::ResultDisposition::Normal, #arg ", " #matcher, \
                     (matcher).match(arg))
#define CHECK(...)                                                                       \
  KOLO_LOCKED_ASSERT("CHECK", Catch::ResultDisposition::ContinueOnFailure, #__VA_ARGS__, \
                     __VA_ARGS__)
#define CHECK_FALSE(...)                                                                 \
  KOLO_LOCKED_ASSERT(                                                                    \
      "CHECK_FALSE",                                                                     \
      Catch::ResultDisposition::ContinueOnFailure | Catch::ResultDisposition::FalseTest, \
      #__VA_ARGS__, __VA_ARGS__)
#define CHECK_THAT(arg, matcher)                                                \
  KOLO_LOCKED_ASSERT("CHECK_THAT", Catch::ResultDisposition::ContinueOnFailure, \
                     #arg ", " #matcher, (matcher).match(arg))
