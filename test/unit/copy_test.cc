// SPDX-License-Identifier: Apache-2.0
// kernels/copy.h: copyBytes and copyBytesVector (the vector loop that copyBytes takes on CPUs
// without FSRM, tested here on any CPU) equal memcpy at every size around the loop's thresholds
// and every alignment of source and destination, and write nothing outside the destination.
#include "kernels/copy.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <vector>

namespace {
using CopyFn = void (*)(void*, const void*, size_t);

void checkCopies(CopyFn copy) {
  const std::vector<size_t> sizes = {0,    1,    15,   31,   127,   4095,         4096,
                                     4097, 4223, 8191, 65549, (1 << 20) + 7, 3 << 20};
  const std::vector<size_t> offsets = {0, 1, 3, 16, 17, 31};
  for (size_t n : sizes) {
    for (size_t so : offsets) {
      for (size_t dof : offsets) {
        std::vector<uint8_t> src(n + 64), dst(n + 128, 0xA5);
        for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 7 + n);
        copy(dst.data() + 32 + dof, src.data() + so, n);
        INFO("n " << n << " src offset " << so << " dst offset " << dof);
        bool same = true;
        for (size_t i = 0; i < n; ++i) same = same && dst[32 + dof + i] == src[so + i];
        CHECK(same);
        bool untouched = true;
        for (size_t i = 0; i < 32 + dof; ++i) untouched = untouched && dst[i] == 0xA5;
        for (size_t i = 32 + dof + n; i < dst.size(); ++i) untouched = untouched && dst[i] == 0xA5;
        CHECK(untouched);
      }
    }
  }
  copy(nullptr, nullptr, 0);  // as memcpy: nothing to do
}
}  // namespace

TEST_CASE("copyBytes copies exactly n bytes at every size and alignment") {
  checkCopies(kolo::kernels::copyBytes);
}

TEST_CASE("copyBytesVector, the loop taken without FSRM, copies exactly n bytes at every size") {
  checkCopies(kolo::kernels::copyBytesVector);
}
