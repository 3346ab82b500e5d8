// SPDX-License-Identifier: Apache-2.0
// The patterns are integers so that the expected result can be computed exactly in int64 (with
// unsigned wrap-around for sums and products, which is what the integer dtypes do modulo
// 2^bits once truncated) and then encoded once, bitwise-comparable with what the collective
// produced. The encoding switch sits inside the loops; GCC hoists it, and the checks run once
// per row after the timed loop, so their speed only matters for the sweep's wall time.
#include "bench/pattern.h"

#include <algorithm>
#include <cstring>

#include "kernels/reduce_cpu.h"

namespace kolo::bench {
namespace {

bool isUnsigned(DataType dtype) { return dtype == DataType::kUInt8 || dtype == DataType::kUInt16; }

// Writes `v` as element `i` of `dtype` at `base`. Integers keep their low bits (two's
// complement, little-endian), i.e. the value modulo 2^bits.
inline void encode(DataType dtype, int64_t v, void* base, size_t i) {
  unsigned char* p = static_cast<unsigned char*>(base);
  switch (dtype) {
    case DataType::kFloat32: {
      const float f = static_cast<float>(v);
      std::memcpy(p + i * 4, &f, 4);
      return;
    }
    case DataType::kFloat64: {
      const double d = static_cast<double>(v);
      std::memcpy(p + i * 8, &d, 8);
      return;
    }
    case DataType::kFloat16: {
      const uint16_t h = kernels::floatToHalf(static_cast<float>(v));
      std::memcpy(p + i * 2, &h, 2);
      return;
    }
    case DataType::kBFloat16: {
      const uint16_t b = kernels::floatToBfloat16(static_cast<float>(v));
      std::memcpy(p + i * 2, &b, 2);
      return;
    }
    default: {
      const size_t w = sizeOf(dtype);
      const uint64_t u = static_cast<uint64_t>(v);
      std::memcpy(p + i * w, &u, w);  // little-endian: the low bytes
      return;
    }
  }
}

inline bool sameElement(DataType dtype, int64_t v, const void* base, size_t i) {
  unsigned char expected[8];
  encode(dtype, v, expected, 0);
  const size_t w = sizeOf(dtype);
  return std::memcmp(static_cast<const unsigned char*>(base) + i * w, expected, w) == 0;
}

}  // namespace

bool patternSupports(DataType dtype) { return isValid(dtype) && dtype != DataType::kBool; }

int64_t patternValue(int rank, uint64_t index, DataType dtype, ReduceOp op) {
  const uint64_t r = static_cast<uint64_t>(rank);
  if (op == ReduceOp::kProduct) {
    // Magnitudes that stay exact (and finite) however often the product is taken.
    const bool flip = (index + 2 * r) % 3 == 0;
    if (isUnsigned(dtype)) return flip ? 2 : 1;
    return flip ? -1 : 1;
  }
  const int64_t v = static_cast<int64_t>((index * 7 + r * 13 + 3) % 17);  // 0..16
  return isUnsigned(dtype) ? v : v - 8;                                   // -8..8 when signed
}

void fillPattern(void* dst, size_t count, DataType dtype, ReduceOp op, int rank, uint64_t first) {
  for (size_t i = 0; i < count; ++i) {
    encode(dtype, patternValue(rank, first + i, dtype, op), dst, i);
  }
}

size_t countWrongCopy(const void* data, size_t count, DataType dtype, ReduceOp op, int rank,
                      uint64_t first) {
  size_t wrong = 0;
  for (size_t i = 0; i < count; ++i) {
    if (!sameElement(dtype, patternValue(rank, first + i, dtype, op), data, i)) ++wrong;
  }
  return wrong;
}

size_t countWrongReduced(const void* data, size_t count, DataType dtype, ReduceOp op, int ranks,
                         uint64_t first) {
  size_t wrong = 0;
  for (size_t i = 0; i < count; ++i) {
    const uint64_t index = first + i;
    int64_t acc = patternValue(0, index, dtype, op);
    for (int r = 1; r < ranks; ++r) {
      const int64_t v = patternValue(r, index, dtype, op);
      switch (op) {
        case ReduceOp::kMin:
          acc = std::min(acc, v);
          break;
        case ReduceOp::kMax:
          acc = std::max(acc, v);
          break;
        case ReduceOp::kProduct:
          acc = static_cast<int64_t>(static_cast<uint64_t>(acc) * static_cast<uint64_t>(v));
          break;
        default:  // kSum, kAverage (summed by the algorithms)
          acc = static_cast<int64_t>(static_cast<uint64_t>(acc) + static_cast<uint64_t>(v));
          break;
      }
    }
    if (!sameElement(dtype, acc, data, i)) ++wrong;
  }
  return wrong;
}

}  // namespace kolo::bench
