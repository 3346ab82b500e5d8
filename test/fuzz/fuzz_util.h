// SPDX-License-Identifier: Apache-2.0
// What the fuzz targets share: how a broken property is reported, and an independent
// little-endian reader (the targets model the wire format themselves, not through core/).
// KOLO_FUZZ_NAME is the target's name, defined by test/fuzz/CMakeLists.txt.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace fuzz {

// A property failed: say which, then abort so that libFuzzer keeps the input.
[[noreturn]] inline void fail(const std::string& what) {
  std::fprintf(stderr, "%s: %s\n", KOLO_FUZZ_NAME, what.c_str());
  std::abort();
}

// `bytes` bytes at p as an unsigned little-endian integer.
inline uint64_t le(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace fuzz
