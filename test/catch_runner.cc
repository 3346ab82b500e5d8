// SPDX-License-Identifier: Apache-2.0
// Catch2's implementation without a main(), compiled once (OBJECT library kolo_catch_runner),
// and the session wrapper declared in test/catch_runner.h.
#define CATCH_CONFIG_RUNNER
#include "test/catch_runner.h"

#include <catch2/catch.hpp>

namespace kolo::testing {

namespace {
Catch::Session& session() {
  static Catch::Session s;
  return s;
}
}  // namespace

int parseCatchCommandLine(int argc, char** argv) { return session().applyCommandLine(argc, argv); }

int runCatch() { return session().run(); }

int runCatch(int argc, char** argv) {
  if (int rc = parseCatchCommandLine(argc, argv)) return rc;
  return runCatch();
}

}  // namespace kolo::testing
