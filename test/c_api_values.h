// SPDX-License-Identifier: Apache-2.0
// Values of any kolo dtype, read and written as doubles, for test programs that use the public
// C API (kolo.h): the fault/soak tests and the multi-process runtime test. The half and bfloat16
// conversions are written here, independently of kernels/reduce_cpu, so that tests check the
// engine's conversions against a separate reference. Exact for the small integers, halves and
// quarters the tests use.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kolo.h"

namespace kolo_test {

inline size_t dtypeSize(kolo_dtype_t d) {
  switch (d) {
    case KOLO_UINT8:
    case KOLO_INT8:
    case KOLO_BOOL:
      return 1;
    case KOLO_UINT16:
    case KOLO_INT16:
    case KOLO_FLOAT16:
    case KOLO_BFLOAT16:
      return 2;
    case KOLO_INT32:
    case KOLO_FLOAT32:
      return 4;
    default:
      return 8;
  }
}
inline bool isFloat(kolo_dtype_t d) {
  return d == KOLO_FLOAT16 || d == KOLO_BFLOAT16 || d == KOLO_FLOAT32 || d == KOLO_FLOAT64;
}

// IEEE half <-> float, exact for the small integers and halves used here.
inline uint16_t toHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  int32_t exp = static_cast<int32_t>((x >> 23) & 0xff) - 127 + 15;
  uint32_t mant = x & 0x7fffff;
  if ((x & 0x7fffffff) == 0) return sign;
  if (exp <= 0) return sign;  // underflow: not produced by this generator
  if (exp >= 31) return static_cast<uint16_t>(sign | 0x7c00);
  uint32_t h = (static_cast<uint32_t>(exp) << 10) | (mant >> 13);
  uint32_t rest = mant & 0x1fff;  // round to nearest even
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) ++h;
  return static_cast<uint16_t>(sign | h);
}
inline float fromHalf(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff, x;
  if (exp == 0) {
    float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  }
  if (exp == 31) {
    x = sign | 0x7f800000 | (mant << 13);
  } else {
    x = sign | ((exp - 15 + 127) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}
inline uint16_t toBf16(float f) {  // round to nearest even
  uint32_t x;
  std::memcpy(&x, &f, 4);
  x += 0x7fff + ((x >> 16) & 1);
  return static_cast<uint16_t>(x >> 16);
}
inline float fromBf16(uint16_t b) {
  uint32_t x = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

inline void encode(kolo_dtype_t d, double v, void* dst) {
  switch (d) {
    case KOLO_UINT8:
      *static_cast<uint8_t*>(dst) = static_cast<uint8_t>(v);
      break;
    case KOLO_INT8:
      *static_cast<int8_t*>(dst) = static_cast<int8_t>(v);
      break;
    case KOLO_BOOL:
      *static_cast<uint8_t*>(dst) = v != 0 ? 1 : 0;
      break;
    case KOLO_UINT16:
      *static_cast<uint16_t*>(dst) = static_cast<uint16_t>(v);
      break;
    case KOLO_INT16:
      *static_cast<int16_t*>(dst) = static_cast<int16_t>(v);
      break;
    case KOLO_INT32:
      *static_cast<int32_t*>(dst) = static_cast<int32_t>(v);
      break;
    case KOLO_INT64:
      *static_cast<int64_t*>(dst) = static_cast<int64_t>(v);
      break;
    case KOLO_FLOAT16:
      *static_cast<uint16_t*>(dst) = toHalf(static_cast<float>(v));
      break;
    case KOLO_BFLOAT16:
      *static_cast<uint16_t*>(dst) = toBf16(static_cast<float>(v));
      break;
    case KOLO_FLOAT32:
      *static_cast<float*>(dst) = static_cast<float>(v);
      break;
    case KOLO_FLOAT64:
      *static_cast<double*>(dst) = v;
      break;
  }
}
inline double decode(kolo_dtype_t d, const void* src) {
  switch (d) {
    case KOLO_UINT8:
    case KOLO_BOOL:
      return *static_cast<const uint8_t*>(src);
    case KOLO_INT8:
      return *static_cast<const int8_t*>(src);
    case KOLO_UINT16:
      return *static_cast<const uint16_t*>(src);
    case KOLO_INT16:
      return *static_cast<const int16_t*>(src);
    case KOLO_INT32:
      return *static_cast<const int32_t*>(src);
    case KOLO_INT64:
      return static_cast<double>(*static_cast<const int64_t*>(src));
    case KOLO_FLOAT16:
      return fromHalf(*static_cast<const uint16_t*>(src));
    case KOLO_BFLOAT16:
      return fromBf16(*static_cast<const uint16_t*>(src));
    case KOLO_FLOAT32:
      return *static_cast<const float*>(src);
    case KOLO_FLOAT64:
      return *static_cast<const double*>(src);
  }
  return 0;
}

}  // namespace kolo_test
