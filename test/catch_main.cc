// SPDX-License-Identifier: Apache-2.0
// The main() of every Catch2 test program without its own: Catch's implementation lives in
// test/catch_runner.cc (compiled once per build tree), this file only calls it.
#include "test/catch_runner.h"

int main(int argc, char** argv) { return kolo::testing::runCatch(argc, argv); }
