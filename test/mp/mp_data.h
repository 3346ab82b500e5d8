// SPDX-License-Identifier: Apache-2.0
// Test data for the multi-process transport tests: every rank can compute every rank's input
// (a pure function of rank, index and seed) and hence the expected result of any collective,
// without communicating. The reference reduction is written independently of kernels/reduce_cpu:
// integers wrap in unsigned arithmetic, bool uses OR (sum, max) / AND (min, product, bitand),
// floats fold in double. Float inputs are small multiples of 1/4 (sum, min, max) or products of
// {±0.5, ±1, 1.5, ±2} (product), so every dtype represents them and every partial result
// exactly; the comparison still allows a small relative tolerance, as float results may differ
// in the last bit between reduction orders in general.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "base/types.h"
#include "kernels/reduce_cpu.h"

namespace kolo::mptest {

inline uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

inline uint64_t bitsAt(int rank, size_t i, uint64_t seed) {
  return mix(seed * 0x100000001B3ull ^ (static_cast<uint64_t>(rank) << 40) ^ i);
}

// Raw bytes for byte-moving collectives.
inline void fillBytes(uint8_t* out, size_t n, int rank, uint64_t seed) {
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<uint8_t>(bitsAt(rank, i, seed) >> 13);
}

inline double floatInput(ReduceOp op, uint64_t bits) {
  if (op == ReduceOp::kProduct) {
    static const double kFactors[] = {0.5, 1.0, 2.0, -1.0, -0.5, 1.5, -2.0, 1.0};
    return kFactors[bits % 8];
  }
  return (static_cast<double>(bits % 33) - 16.0) * 0.25;
}

inline void storeFloat(DataType dt, double x, uint8_t* p) {
  switch (dt) {
    case DataType::kFloat16: {
      uint16_t h = kernels::floatToHalf(static_cast<float>(x));
      std::memcpy(p, &h, 2);
      return;
    }
    case DataType::kBFloat16: {
      uint16_t h = kernels::floatToBfloat16(static_cast<float>(x));
      std::memcpy(p, &h, 2);
      return;
    }
    case DataType::kFloat32: {
      float f = static_cast<float>(x);
      std::memcpy(p, &f, 4);
      return;
    }
    default:
      std::memcpy(p, &x, 8);
      return;
  }
}

inline double loadFloat(DataType dt, const uint8_t* p) {
  uint16_t h;
  float f;
  double d;
  switch (dt) {
    case DataType::kFloat16:
      std::memcpy(&h, p, 2);
      return kernels::halfToFloat(h);
    case DataType::kBFloat16:
      std::memcpy(&h, p, 2);
      return kernels::bfloat16ToFloat(h);
    case DataType::kFloat32:
      std::memcpy(&f, p, 4);
      return f;
    default:
      std::memcpy(&d, p, 8);
      return d;
  }
}

// Elements [first, first + count) of rank `rank`'s input for reducing with `op`.
inline std::vector<uint8_t> reduceInput(DataType dt, ReduceOp op, int rank, size_t count,
                                        uint64_t seed, size_t first = 0) {
  const size_t elem = sizeOf(dt);
  std::vector<uint8_t> out(count * elem);
  for (size_t i = 0; i < count; ++i) {
    const uint64_t bits = bitsAt(rank, first + i, seed);
    uint8_t* p = out.data() + i * elem;
    if (isFloatingPoint(dt)) {
      storeFloat(dt, floatInput(op, bits), p);
    } else if (dt == DataType::kBool) {
      *p = static_cast<uint8_t>((bits >> 7) & 1);
    } else {
      std::memcpy(p, &bits, elem);  // little-endian: the low bytes, any value of the type
    }
  }
  return out;
}

template <typename T>
T combineInt(T a, T b, ReduceOp op) {
  using U = std::make_unsigned_t<T>;
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
      return static_cast<T>(
          static_cast<U>(static_cast<uint64_t>(static_cast<U>(a)) + static_cast<U>(b)));
    case ReduceOp::kProduct:
      return static_cast<T>(static_cast<U>(static_cast<uint64_t>(static_cast<U>(a)) *
                                           static_cast<uint64_t>(static_cast<U>(b))));
    case ReduceOp::kMin:
      return b < a ? b : a;
    case ReduceOp::kMax:
      return b > a ? b : a;
    case ReduceOp::kBitAnd:
      return static_cast<T>(a & b);
  }
  return a;
}

template <typename T>
void foldInts(std::vector<uint8_t>* acc, const std::vector<uint8_t>& in, ReduceOp op) {
  const size_t n = in.size() / sizeof(T);
  for (size_t i = 0; i < n; ++i) {
    T a, b;
    std::memcpy(&a, acc->data() + i * sizeof(T), sizeof(T));
    std::memcpy(&b, in.data() + i * sizeof(T), sizeof(T));
    a = combineInt(a, b, op);
    std::memcpy(acc->data() + i * sizeof(T), &a, sizeof(T));
  }
}

// Reference for integer and bool dtypes: the exact expected bytes of elements
// [first, first + count).
inline std::vector<uint8_t> referenceInts(DataType dt, ReduceOp op, int size, size_t count,
                                          uint64_t seed, size_t first = 0) {
  std::vector<uint8_t> acc = reduceInput(dt, op, 0, count, seed, first);
  for (int r = 1; r < size; ++r) {
    std::vector<uint8_t> in = reduceInput(dt, op, r, count, seed, first);
    switch (dt) {
      case DataType::kUInt8:
        foldInts<uint8_t>(&acc, in, op);
        break;
      case DataType::kInt8:
        foldInts<int8_t>(&acc, in, op);
        break;
      case DataType::kUInt16:
        foldInts<uint16_t>(&acc, in, op);
        break;
      case DataType::kInt16:
        foldInts<int16_t>(&acc, in, op);
        break;
      case DataType::kInt32:
        foldInts<int32_t>(&acc, in, op);
        break;
      case DataType::kInt64:
        foldInts<int64_t>(&acc, in, op);
        break;
      case DataType::kBool: {
        const bool orOp = op == ReduceOp::kSum || op == ReduceOp::kAverage || op == ReduceOp::kMax;
        for (size_t i = 0; i < count; ++i) {
          acc[i] =
              orOp ? static_cast<uint8_t>(acc[i] | in[i]) : static_cast<uint8_t>(acc[i] & in[i]);
        }
        break;
      }
      default:
        break;
    }
  }
  return acc;
}

// Reference for floating-point dtypes, in double, of elements [first, first + count).
inline std::vector<double> referenceFloats(DataType dt, ReduceOp op, int size, size_t count,
                                           uint64_t seed, size_t first = 0) {
  std::vector<double> acc(count);
  for (int r = 0; r < size; ++r) {
    for (size_t i = 0; i < count; ++i) {
      const double x = floatInput(op, bitsAt(r, first + i, seed));
      if (r == 0) {
        acc[i] = x;
      } else if (op == ReduceOp::kProduct) {
        acc[i] *= x;
      } else if (op == ReduceOp::kMin) {
        acc[i] = std::min(acc[i], x);
      } else if (op == ReduceOp::kMax) {
        acc[i] = std::max(acc[i], x);
      } else {
        acc[i] += x;
      }
    }
  }
  return acc;
}

// Describes the first mismatch of the `count` elements at `got` against the reference (which
// starts at the same element), or returns "" when all match. Integers bitwise, floats within a
// relative tolerance. `first` only numbers the elements in the message.
inline std::string compareReduced(DataType dt, const uint8_t* got,
                                  const std::vector<uint8_t>& refInts,
                                  const std::vector<double>& refFloats, size_t count,
                                  size_t first = 0) {
  const size_t elem = sizeOf(dt);
  if (!isFloatingPoint(dt)) {
    for (size_t i = 0; i < count; ++i) {
      if (std::memcmp(got + i * elem, refInts.data() + i * elem, elem) != 0) {
        return "element " + std::to_string(first + i) + " differs bitwise";
      }
    }
    return "";
  }
  const double tol = dt == DataType::kFloat16 || dt == DataType::kBFloat16 ? 1e-2
                     : dt == DataType::kFloat32                            ? 1e-5
                                                                           : 1e-12;
  for (size_t i = 0; i < count; ++i) {
    const double g = loadFloat(dt, got + i * elem);
    const double want = refFloats[i];
    if (!(std::fabs(g - want) <= tol * (1.0 + std::fabs(want)))) {
      return "element " + std::to_string(first + i) + " is " + std::to_string(g) + ", expected " +
             std::to_string(want);
    }
  }
  return "";
}

}  // namespace kolo::mptest
