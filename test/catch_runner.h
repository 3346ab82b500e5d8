// SPDX-License-Identifier: Apache-2.0
// Catch2's session for test programs with their own main() (they initialise kolo, or skip
// without a GPU, before any test case runs). Catch's implementation, and with it
// Catch::Session, is compiled once in test/catch_runner.cc (OBJECT library kolo_catch_runner);
// defining CATCH_CONFIG_RUNNER in each program would compile it again (~25 s per program).
// Single-threaded: call from main() only.
#pragma once

namespace kolo::testing {

// Parses argv as Catch's command line. Returns 0, or Catch's non-zero code for a bad command
// line (after printing the error) or for --help.
int parseCatchCommandLine(int argc, char** argv);

// Runs the test cases the parsed command line selects (parseCatchCommandLine first, or none:
// all). Returns the number of failed test cases, capped at 255.
int runCatch();

// Both, for programs with nothing to do between them.
int runCatch(int argc, char** argv);

}  // namespace kolo::testing
