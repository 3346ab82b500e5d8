// SPDX-License-Identifier: Apache-2.0
// kernels/reduce_cpu: every DataType x ReduceOp against a plain scalar reference written here, the
// fp16/bf16 conversions against references that work in double with ldexp/nearbyint (not with
// the implementation's bit tricks), NaN/inf propagation inside the vectorized bodies, and scaling.
#include "kernels/reduce_cpu.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "base/types.h"

using namespace kolo;
using namespace kolo::kernels;

namespace {

const size_t kCounts[] = {0, 1, 7, 1000, 4097};
const ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin,
                         ReduceOp::kMax, ReduceOp::kProduct, ReduceOp::kBitAnd};

template <typename To, typename From>
To bits(From v) {
  static_assert(sizeof(To) == sizeof(From), "size");
  To out;
  std::memcpy(&out, &v, sizeof(out));
  return out;
}

// ---- reference conversions ------------------------------------------------------------------
float refHalfToFloat(uint16_t h) {
  const int exp = (h >> 10) & 0x1f;
  const int man = h & 0x3ff;
  float mag;
  if (exp == 0) {
    mag = std::ldexp(static_cast<float>(man), -24);
  } else if (exp == 31) {
    mag =
        man != 0 ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  } else {
    mag = std::ldexp(static_cast<float>(man + 1024), exp - 25);
  }
  return (h & 0x8000) ? -mag : mag;
}

bool isHalfNan(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0; }

// Nearest half by scaling onto the half grid of the value's binade and rounding with nearbyint
// (ties to even in the default rounding mode). NaN maps to 0x7e00 (tests only check NaN-ness).
uint16_t refFloatToHalf(float f) {
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  if (std::isnan(f)) return sign | 0x7e00;
  const double a = std::fabs(static_cast<double>(f));
  if (std::isinf(a)) return sign | 0x7c00;
  int e = a == 0 ? -14 : std::ilogb(a);
  if (e < -14) e = -14;
  const double quantum = std::ldexp(1.0, e - 10);
  const double r = std::nearbyint(a / quantum) * quantum;
  if (r >= 65536.0) return sign | 0x7c00;
  if (r < std::ldexp(1.0, -14)) return sign | static_cast<uint16_t>(r / std::ldexp(1.0, -24));
  const int re = std::ilogb(r);
  const int man = static_cast<int>(r / std::ldexp(1.0, re - 10)) - 1024;
  return sign | static_cast<uint16_t>(((re + 15) << 10) | man);
}

float refBf16ToFloat(uint16_t b) {
  const int exp = (b >> 7) & 0xff;
  const int man = b & 0x7f;
  float mag;
  if (exp == 0) {
    mag = std::ldexp(static_cast<float>(man), -133);
  } else if (exp == 255) {
    mag =
        man != 0 ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  } else {
    mag = std::ldexp(static_cast<float>(man + 128), exp - 134);
  }
  return (b & 0x8000) ? -mag : mag;
}

bool isBf16Nan(uint16_t b) { return (b & 0x7f80) == 0x7f80 && (b & 0x7f) != 0; }

// Picks between the truncated bf16 and the next one up by comparing distances in double.
uint16_t refFloatToBf16(float f) {
  if (std::isnan(f)) return std::signbit(f) ? 0xffc0 : 0x7fc0;
  const uint16_t down = static_cast<uint16_t>(bits<uint32_t>(f) >> 16);
  const double a = std::fabs(static_cast<double>(f));
  const double lo = std::fabs(static_cast<double>(refBf16ToFloat(down)));
  if (a == lo) return down;  // exact, or infinity
  const int exp = (down >> 7) & 0xff;
  const double step = std::ldexp(1.0, (exp == 0 ? 1 : exp) - 134);
  const double hi = lo + step;
  if (a - lo < hi - a) return down;
  if (a - lo > hi - a) return static_cast<uint16_t>(down + 1);
  return (down & 1) ? static_cast<uint16_t>(down + 1) : down;
}

// ---- reference reduction --------------------------------------------------------------------
enum class Kind { kInt, kFloat, kHalf, kBf16, kBool };

template <typename T>
T refInt(ReduceOp op, T a, T b) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
      return static_cast<T>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
    case ReduceOp::kProduct:
      return static_cast<T>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
    case ReduceOp::kMin:
      return a < b ? a : b;
    case ReduceOp::kMax:
      return a > b ? a : b;
    case ReduceOp::kBitAnd:
      return static_cast<T>(a & b);
  }
  return 0;
}

template <typename F>
F refFloat(ReduceOp op, F a, F b) {
  const F nan = std::numeric_limits<F>::quiet_NaN();
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
      return a + b;
    case ReduceOp::kProduct:
      return a * b;
    case ReduceOp::kMin:
      if (std::isnan(a) || std::isnan(b)) return nan;
      return a < b ? a : b;
    case ReduceOp::kMax:
      if (std::isnan(a) || std::isnan(b)) return nan;
      return a > b ? a : b;
    case ReduceOp::kBitAnd:
      break;
  }
  return nan;
}

template <typename T, Kind K>
T refCombine(ReduceOp op, T a, T b) {
  if constexpr (K == Kind::kInt) {
    return refInt(op, a, b);
  } else if constexpr (K == Kind::kBool) {
    if (op == ReduceOp::kBitAnd) return static_cast<T>(a & b);
    const bool x = a != 0, y = b != 0;
    if (op == ReduceOp::kMin || op == ReduceOp::kProduct) return x && y;
    return x || y;
  } else {
    if (op == ReduceOp::kBitAnd) {
      using U = std::conditional_t<sizeof(T) == 2, uint16_t,
                                   std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>>;
      return bits<T>(static_cast<U>(bits<U>(a) & bits<U>(b)));
    }
    if constexpr (K == Kind::kFloat) {
      return refFloat(op, a, b);
    } else if constexpr (K == Kind::kHalf) {
      return refFloatToHalf(refFloat(op, refHalfToFloat(a), refHalfToFloat(b)));
    } else {
      return refFloatToBf16(refFloat(op, refBf16ToFloat(a), refBf16ToFloat(b)));
    }
  }
}

// Equal as values: bitwise for integers and bool; for floating point both NaN or == (so that the
// sign of a zero picked by min/max does not matter).
template <typename T, Kind K>
bool same(T x, T y) {
  if constexpr (K == Kind::kInt || K == Kind::kBool) {
    return x == y;
  } else if constexpr (K == Kind::kFloat) {
    return (std::isnan(x) && std::isnan(y)) || x == y;
  } else if constexpr (K == Kind::kHalf) {
    return (isHalfNan(x) && isHalfNan(y)) || refHalfToFloat(x) == refHalfToFloat(y);
  } else {
    return (isBf16Nan(x) && isBf16Nan(y)) || refBf16ToFloat(x) == refBf16ToFloat(y);
  }
}

template <typename T, Kind K>
std::vector<T> randomData(size_t n, std::mt19937_64& rng) {
  std::vector<T> v(n);
  for (auto& x : v) {
    const uint64_t r = rng();
    if constexpr (K == Kind::kBool) {
      x = static_cast<T>(r & 1);
    } else if constexpr (K == Kind::kInt || K == Kind::kHalf || K == Kind::kBf16) {
      x = static_cast<T>(r);  // every bit pattern: wraparound, NaN, inf and subnormal encodings
    } else {
      // Mostly moderate values (exact-ish sums), sometimes an arbitrary bit pattern.
      if (r % 4 == 0) {
        x = bits<T>(static_cast<std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>>(r >> 3));
      } else {
        x = static_cast<T>(static_cast<int64_t>(r % 2001) - 1000) / static_cast<T>(64);
      }
    }
  }
  return v;
}

template <typename T, Kind K>
std::string firstMismatch(const std::vector<T>& got, const std::vector<T>& a,
                          const std::vector<T>& b, ReduceOp op, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const T want = refCombine<T, K>(op, a[i], b[i]);
    if (!same<T, K>(got[i], want)) {
      std::ostringstream os;
      os << "index " << i << ": a=" << +a[i] << " b=" << +b[i] << " got=" << +got[i]
         << " want=" << +want;
      return os.str();
    }
  }
  return "";
}

// reduceInto and every aliasing of reduce3, against the reference, with a guard element past
// the end that must stay untouched.
template <typename T, Kind K>
void checkAllOps(DataType dtype) {
  std::mt19937_64 rng(1234 + static_cast<int>(dtype));
  for (ReduceOp op : kOps) {
    for (size_t n : kCounts) {
      INFO(toString(dtype) << " " << toString(op) << " count " << n);
      const std::vector<T> a = randomData<T, K>(n + 1, rng);
      const std::vector<T> b = randomData<T, K>(n + 1, rng);
      const std::vector<T> garbage = randomData<T, K>(n + 1, rng);

      std::vector<T> d = a;
      reduceInto(d.data(), b.data(), n, dtype, op);
      CHECK(firstMismatch<T, K>(d, a, b, op, n) == "");
      CHECK(std::memcmp(&d[n], &a[n], sizeof(T)) == 0);

      d = garbage;
      reduce3(d.data(), a.data(), b.data(), n, dtype, op);
      CHECK(firstMismatch<T, K>(d, a, b, op, n) == "");
      CHECK(std::memcmp(&d[n], &garbage[n], sizeof(T)) == 0);

      d = a;
      reduce3(d.data(), d.data(), b.data(), n, dtype, op);
      CHECK(firstMismatch<T, K>(d, a, b, op, n) == "");

      d = b;
      reduce3(d.data(), a.data(), d.data(), n, dtype, op);
      CHECK(firstMismatch<T, K>(d, a, b, op, n) == "");
      CHECK(std::memcmp(&d[n], &b[n], sizeof(T)) == 0);

      d = a;
      reduce3(d.data(), d.data(), d.data(), n, dtype, op);
      CHECK(firstMismatch<T, K>(d, a, a, op, n) == "");

      d = a;
      reduceInto(d.data(), d.data(), n, dtype, op);
      CHECK(firstMismatch<T, K>(d, a, a, op, n) == "");
    }
  }
  // Count 0 never dereferences.
  reduceInto(nullptr, nullptr, 0, dtype, ReduceOp::kSum);
  reduce3(nullptr, nullptr, nullptr, 0, dtype, ReduceOp::kMax);
  scaleInPlace(nullptr, 0, dtype, 3.0);
}

template <typename T>
std::vector<T> reduced(std::vector<T> a, const std::vector<T>& b, DataType dtype, ReduceOp op) {
  reduceInto(a.data(), b.data(), a.size(), dtype, op);
  return a;
}

}  // namespace

TEST_CASE("reduce: every dtype x op matches the scalar reference", "[reduce]") {
  checkAllOps<uint8_t, Kind::kInt>(DataType::kUInt8);
  checkAllOps<int8_t, Kind::kInt>(DataType::kInt8);
  checkAllOps<uint16_t, Kind::kInt>(DataType::kUInt16);
  checkAllOps<int16_t, Kind::kInt>(DataType::kInt16);
  checkAllOps<int32_t, Kind::kInt>(DataType::kInt32);
  checkAllOps<int64_t, Kind::kInt>(DataType::kInt64);
  checkAllOps<uint16_t, Kind::kHalf>(DataType::kFloat16);
  checkAllOps<uint16_t, Kind::kBf16>(DataType::kBFloat16);
  checkAllOps<float, Kind::kFloat>(DataType::kFloat32);
  checkAllOps<double, Kind::kFloat>(DataType::kFloat64);
  checkAllOps<uint8_t, Kind::kBool>(DataType::kBool);
}

TEST_CASE("reduce: integer arithmetic wraps modulo 2^bits", "[reduce]") {
  using I8 = std::vector<int8_t>;
  CHECK(reduced(I8{127, -128, -128}, I8{1, -1, -1}, DataType::kInt8, ReduceOp::kSum) ==
        I8{-128, 127, 127});
  CHECK(reduced(I8{-128, 16}, I8{-1, 16}, DataType::kInt8, ReduceOp::kProduct) == I8{-128, 0});
  using U8 = std::vector<uint8_t>;
  CHECK(reduced(U8{255, 16}, U8{1, 17}, DataType::kUInt8, ReduceOp::kSum) == U8{0, 33});
  CHECK(reduced(U8{255, 16}, U8{255, 17}, DataType::kUInt8, ReduceOp::kProduct) == U8{1, 16});
  using U16 = std::vector<uint16_t>;
  CHECK(reduced(U16{65535}, U16{65535}, DataType::kUInt16, ReduceOp::kProduct) == U16{1});
  using I16 = std::vector<int16_t>;
  CHECK(reduced(I16{300, 32767}, I16{300, 1}, DataType::kInt16, ReduceOp::kProduct) ==
        I16{24464, 32767});
  CHECK(reduced(I16{32767}, I16{1}, DataType::kInt16, ReduceOp::kAverage) == I16{-32768});
  using I32 = std::vector<int32_t>;
  const int32_t i32max = std::numeric_limits<int32_t>::max();
  const int32_t i32min = std::numeric_limits<int32_t>::min();
  // Length 9 so the wrapping lanes sit in the vector body and in the tail.
  I32 big(9, i32max), one(9, 1), wrapped(9, i32min);
  CHECK(reduced(big, one, DataType::kInt32, ReduceOp::kSum) == wrapped);
  CHECK(reduced(I32(9, 65536), I32(9, 65536), DataType::kInt32, ReduceOp::kProduct) == I32(9, 0));
  CHECK(reduced(I32(9, 46341), I32(9, 46341), DataType::kInt32, ReduceOp::kProduct) ==
        I32(9, -2147479015));
  using I64 = std::vector<int64_t>;
  const int64_t i64max = std::numeric_limits<int64_t>::max();
  const int64_t i64min = std::numeric_limits<int64_t>::min();
  CHECK(reduced(I64{i64max, i64min, int64_t{1} << 62}, I64{1, -1, 4}, DataType::kInt64,
                ReduceOp::kSum) == I64{i64min, i64max, (int64_t{1} << 62) + 4});
  CHECK(reduced(I64{int64_t{1} << 62, -3}, I64{4, i64max}, DataType::kInt64, ReduceOp::kProduct) ==
        I64{0, i64min + 3});
  CHECK(reduced(I64{-5, 0x0ff0}, I64{3, 0x00ff}, DataType::kInt64, ReduceOp::kBitAnd) ==
        I64{3, 0x00f0});
  // bool: sum/max = OR, min/product = AND, a non-canonical true byte still counts as true.
  using B = std::vector<uint8_t>;
  CHECK(reduced(B{0, 0, 1, 1, 2}, B{0, 1, 0, 1, 0}, DataType::kBool, ReduceOp::kSum) ==
        B{0, 1, 1, 1, 1});
  CHECK(reduced(B{0, 0, 1, 1, 2}, B{0, 1, 0, 1, 1}, DataType::kBool, ReduceOp::kProduct) ==
        B{0, 0, 0, 1, 1});
  CHECK(reduced(B{0, 0, 1, 1, 2}, B{0, 1, 0, 1, 1}, DataType::kBool, ReduceOp::kBitAnd) ==
        B{0, 0, 0, 1, 0});
}

namespace {

// Each special pair is repeated across 1000 elements so it lands in vector bodies and tails.
template <typename T, Kind K>
void checkSpecials(DataType dtype, T (*fromFloat)(float)) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  struct Case {
    ReduceOp op;
    float a, b;
    float want;  // NaN means "must be NaN"
  };
  const Case cases[] = {
      {ReduceOp::kMin, nan, 1.0f, nan},       {ReduceOp::kMin, 1.0f, nan, nan},
      {ReduceOp::kMax, nan, 1.0f, nan},       {ReduceOp::kMax, 1.0f, nan, nan},
      {ReduceOp::kMax, inf, nan, nan},        {ReduceOp::kMin, -inf, nan, nan},
      {ReduceOp::kMin, -inf, 1.0f, -inf},     {ReduceOp::kMax, 2.0f, inf, inf},
      {ReduceOp::kMax, -inf, -2.0f, -2.0f},   {ReduceOp::kSum, inf, -inf, nan},
      {ReduceOp::kSum, inf, 1.0f, inf},       {ReduceOp::kSum, nan, 1.0f, nan},
      {ReduceOp::kAverage, -inf, 3.0f, -inf}, {ReduceOp::kProduct, 0.0f, inf, nan},
      {ReduceOp::kProduct, -2.0f, inf, -inf}, {ReduceOp::kProduct, 1.0f, nan, nan},
  };
  for (const Case& c : cases) {
    INFO(toString(dtype) << " " << toString(c.op) << "(" << c.a << ", " << c.b << ")");
    std::vector<T> a(1000), b(1000);
    for (size_t i = 0; i < a.size(); ++i) {
      // Interleave the special pair with ordinary values at varying strides.
      const bool special = (i * 7 + 3) % 5 < 2 || i >= 995;
      a[i] = fromFloat(special ? c.a : 1.5f);
      b[i] = fromFloat(special ? c.b : 0.5f);
    }
    std::vector<T> d(1000);
    reduce3(d.data(), a.data(), b.data(), d.size(), dtype, c.op);
    reduceInto(a.data(), b.data(), a.size(), dtype, c.op);
    size_t bad = 0;
    for (size_t i = 0; i < d.size(); ++i) {
      const bool special = (i * 7 + 3) % 5 < 2 || i >= 995;
      const T want =
          special ? fromFloat(c.want) : refCombine<T, K>(c.op, fromFloat(1.5f), fromFloat(0.5f));
      if (!same<T, K>(d[i], want) || !same<T, K>(a[i], want)) ++bad;
    }
    CHECK(bad == 0);
  }
}

}  // namespace

TEST_CASE("reduce: NaN and inf propagate in every floating-point type", "[reduce]") {
  checkSpecials<float, Kind::kFloat>(DataType::kFloat32, [](float f) { return f; });
  checkSpecials<double, Kind::kFloat>(DataType::kFloat64,
                                      [](float f) { return static_cast<double>(f); });
  checkSpecials<uint16_t, Kind::kHalf>(DataType::kFloat16, floatToHalf);
  checkSpecials<uint16_t, Kind::kBf16>(DataType::kBFloat16, floatToBfloat16);
}

TEST_CASE("fp16 conversions round to nearest even and handle inf, NaN, subnormals",
          "[reduce][fp16]") {
  CHECK(floatToHalf(1.0f) == 0x3c00);
  CHECK(floatToHalf(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);      // tie -> even (down)
  CHECK(floatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3c02);  // tie -> even (up)
  CHECK(floatToHalf(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)) == 0x3c01);
  CHECK(floatToHalf(65504.0f) == 0x7bff);
  CHECK(floatToHalf(65519.996f) == 0x7bff);
  CHECK(floatToHalf(65520.0f) == 0x7c00);  // the tie above the largest half overflows
  CHECK(floatToHalf(1e6f) == 0x7c00);
  CHECK(floatToHalf(-1e6f) == 0xfc00);
  CHECK(floatToHalf(std::numeric_limits<float>::max()) == 0x7c00);
  CHECK(floatToHalf(-std::numeric_limits<float>::infinity()) == 0xfc00);
  CHECK(floatToHalf(std::ldexp(1.0f, -14)) == 0x0400);
  CHECK(floatToHalf(std::ldexp(1.0f, -14) - std::ldexp(1.0f, -25)) == 0x0400);  // tie -> even
  CHECK(floatToHalf(std::ldexp(1.0f, -24)) == 0x0001);
  CHECK(floatToHalf(std::ldexp(1.0f, -25)) == 0x0000);  // tie -> even (zero)
  CHECK(floatToHalf(std::ldexp(3.0f, -25)) == 0x0002);  // 1.5 ulp: tie -> even (2)
  CHECK(floatToHalf(std::ldexp(3.0f, -26)) == 0x0001);  // 0.75 ulp
  CHECK(floatToHalf(-std::ldexp(1.0f, -24)) == 0x8001);
  CHECK(floatToHalf(1e-10f) == 0x0000);
  CHECK(floatToHalf(-1e-10f) == 0x8000);
  CHECK(floatToHalf(-0.0f) == 0x8000);
  CHECK(isHalfNan(floatToHalf(std::numeric_limits<float>::quiet_NaN())));
  CHECK(isHalfNan(floatToHalf(bits<float>(uint32_t{0x7f800001}))));  // low-payload NaN
  CHECK(isHalfNan(floatToHalf(bits<float>(uint32_t{0xffc00000}))));
  CHECK(halfToFloat(0x0001) == std::ldexp(1.0f, -24));
  CHECK(halfToFloat(0x03ff) == std::ldexp(1023.0f, -24));
  CHECK(halfToFloat(0x7bff) == 65504.0f);
  CHECK(halfToFloat(0xc000) == -2.0f);
  CHECK(std::isinf(halfToFloat(0x7c00)));
  CHECK(std::isnan(halfToFloat(0x7e00)));
  CHECK(std::isnan(halfToFloat(0xfc01)));
  CHECK(bits<uint32_t>(halfToFloat(0x8000)) == 0x80000000u);

  // Every half: exact decode, and encode(decode(h)) == h.
  size_t bad = 0;
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = halfToFloat(static_cast<uint16_t>(h));
    const float r = refHalfToFloat(static_cast<uint16_t>(h));
    if (isHalfNan(static_cast<uint16_t>(h))) {
      if (!std::isnan(f) || !isHalfNan(floatToHalf(f))) ++bad;
    } else if (bits<uint32_t>(f) != bits<uint32_t>(r) || floatToHalf(f) != h) {
      ++bad;
    }
  }
  CHECK(bad == 0);
  // Every midpoint between neighbouring finite halves (ties), and one float either side.
  bad = 0;
  for (uint32_t h = 0; h < 0x7bff; ++h) {
    for (uint32_t sign : {0u, 0x8000u}) {
      const float lo = refHalfToFloat(static_cast<uint16_t>(h | sign));
      const float hi = refHalfToFloat(static_cast<uint16_t>((h + 1) | sign));
      const float mid = static_cast<float>((static_cast<double>(lo) + hi) / 2);
      for (float f : {mid, std::nextafter(mid, lo), std::nextafter(mid, hi)}) {
        if (floatToHalf(f) != refFloatToHalf(f)) ++bad;
      }
    }
  }
  CHECK(bad == 0);
  // Random floats over the whole encoding space.
  std::mt19937 rng(42);
  bad = 0;
  for (int i = 0; i < 1000000; ++i) {
    const float f = bits<float>(static_cast<uint32_t>(rng()));
    const uint16_t got = floatToHalf(f), want = refFloatToHalf(f);
    if (got != want && !(isHalfNan(got) && isHalfNan(want))) ++bad;
  }
  CHECK(bad == 0);
}

TEST_CASE("bf16 conversions round to nearest even, NaN stays NaN", "[reduce][bf16]") {
  CHECK(floatToBfloat16(1.0f) == 0x3f80);
  CHECK(floatToBfloat16(1.00390625f) == 0x3f80);  // 1 + 2^-8: tie -> even (down)
  CHECK(floatToBfloat16(1.01171875f) == 0x3f82);  // 1 + 3 * 2^-8: tie -> even (up)
  CHECK(floatToBfloat16(std::nextafter(1.00390625f, 2.0f)) == 0x3f81);
  CHECK(floatToBfloat16(-1.00390625f) == 0xbf80);
  CHECK(floatToBfloat16(std::numeric_limits<float>::max()) == 0x7f80);  // rounds up to inf
  CHECK(floatToBfloat16(bits<float>(uint32_t{0x7f7f7fff})) == 0x7f7f);
  CHECK(floatToBfloat16(std::numeric_limits<float>::infinity()) == 0x7f80);
  CHECK(floatToBfloat16(-std::numeric_limits<float>::infinity()) == 0xff80);
  CHECK(floatToBfloat16(bits<float>(uint32_t{0x00008000})) == 0x0000);  // subnormal tie
  CHECK(floatToBfloat16(bits<float>(uint32_t{0x00018000})) == 0x0002);
  CHECK(floatToBfloat16(bits<float>(uint32_t{0x00008001})) == 0x0001);
  CHECK(isBf16Nan(floatToBfloat16(bits<float>(uint32_t{0x7f800001}))));  // not inf
  CHECK(isBf16Nan(floatToBfloat16(bits<float>(uint32_t{0xffffffff}))));
  CHECK(isBf16Nan(floatToBfloat16(std::numeric_limits<float>::quiet_NaN())));
  CHECK(bfloat16ToFloat(0x3f80) == 1.0f);
  CHECK(bfloat16ToFloat(0xc040) == -3.0f);
  CHECK(bfloat16ToFloat(0x0001) == std::ldexp(1.0f, -133));
  CHECK(std::isnan(bfloat16ToFloat(0x7fc0)));

  size_t bad = 0;
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const uint16_t v = static_cast<uint16_t>(b);
    const float f = bfloat16ToFloat(v);
    if (isBf16Nan(v)) {
      if (!std::isnan(f) || !isBf16Nan(floatToBfloat16(f))) ++bad;
    } else if (bits<uint32_t>(f) != bits<uint32_t>(refBf16ToFloat(v)) || floatToBfloat16(f) != v) {
      ++bad;
    }
  }
  CHECK(bad == 0);
  std::mt19937 rng(7);
  bad = 0;
  for (int i = 0; i < 1000000; ++i) {
    // Half of the samples are exact ties (low 16 bits 0x8000).
    uint32_t x = static_cast<uint32_t>(rng());
    if (i % 2) x = (x & 0xffff0000u) | 0x8000u;
    const float f = bits<float>(x);
    const uint16_t got = floatToBfloat16(f), want = refFloatToBf16(f);
    if (got != want && !(isBf16Nan(got) && isBf16Nan(want))) ++bad;
  }
  CHECK(bad == 0);
}

namespace {

template <typename T>
T refScaleInt(T x, double factor) {
  const double r = std::trunc(static_cast<double>(x) * factor);
  if (std::isnan(r)) return 0;
  if (r <= static_cast<double>(std::numeric_limits<T>::min())) {
    return std::numeric_limits<T>::min();
  }
  if (r >= static_cast<double>(std::numeric_limits<T>::max())) {
    return std::numeric_limits<T>::max();
  }
  return static_cast<T>(r);
}

template <typename T>
std::vector<T> scaled(std::vector<T> v, DataType dtype, double factor) {
  scaleInPlace(v.data(), v.size(), dtype, factor);
  return v;
}

template <typename T, Kind K>
void checkScaleRandom(DataType dtype) {
  std::mt19937_64 rng(99);
  for (double factor : {0.5, 1.0 / 3.0, -2.5, 1e-3, 1000.0}) {
    for (size_t n : kCounts) {
      INFO(toString(dtype) << " factor " << factor << " count " << n);
      const std::vector<T> orig = randomData<T, K>(n + 1, rng);
      std::vector<T> v = orig;
      scaleInPlace(v.data(), n, dtype, factor);
      size_t bad = 0;
      for (size_t i = 0; i < n; ++i) {
        T want;
        if constexpr (K == Kind::kInt) {
          want = refScaleInt(orig[i], factor);
        } else if constexpr (K == Kind::kBool) {
          want = orig[i];
        } else if constexpr (K == Kind::kFloat) {
          want = orig[i] * static_cast<T>(factor);
        } else if constexpr (K == Kind::kHalf) {
          want = refFloatToHalf(refHalfToFloat(orig[i]) * static_cast<float>(factor));
        } else {
          want = refFloatToBf16(refBf16ToFloat(orig[i]) * static_cast<float>(factor));
        }
        if (!same<T, K>(v[i], want)) ++bad;
      }
      CHECK(bad == 0);
      CHECK(std::memcmp(&v[n], &orig[n], sizeof(T)) == 0);
    }
  }
}

}  // namespace

TEST_CASE("scaleInPlace: integers truncate toward zero (as Horovod) and saturate",
          "[reduce][scale]") {
  using I8 = std::vector<int8_t>;
  CHECK(scaled(I8{100, -100, 3, -3, 1, 0, 127}, DataType::kInt8, 1.5) ==
        I8{127, -128, 4, -4, 1, 0, 127});
  CHECK(scaled(I8{100, -100, 3, -3, 1, -1, -128}, DataType::kInt8, 0.5) ==
        I8{50, -50, 1, -1, 0, 0, -64});
  CHECK(scaled(I8{5, -5, 9}, DataType::kInt8, 0.99) == I8{4, -4, 8});
  using U8 = std::vector<uint8_t>;
  CHECK(scaled(U8{200, 3, 0}, DataType::kUInt8, -1.0) == U8{0, 0, 0});
  CHECK(scaled(U8{200, 3, 127}, DataType::kUInt8, 2.0) == U8{255, 6, 254});
  using U16 = std::vector<uint16_t>;
  CHECK(scaled(U16{65535, 5, 19}, DataType::kUInt16, 0.1) == U16{6553, 0, 1});
  CHECK(scaled(U8{3, 255}, DataType::kUInt8, 0.5) == U8{1, 127});
  using I16 = std::vector<int16_t>;
  CHECK(scaled(I16{20000, -20000, 7}, DataType::kInt16, 2.0) == I16{32767, -32768, 14});
  using I32 = std::vector<int32_t>;
  CHECK(scaled(I32{7, -7, 2000000000, -2000000000, 5}, DataType::kInt32, 1.0 / 3.0) ==
        I32{2, -2, 666666666, -666666666, 1});
  CHECK(scaled(I32{3, -3, 5, -5, 2147483647}, DataType::kInt32, 0.5) ==
        I32{1, -1, 2, -2, 1073741823});
  CHECK(scaled(I32{2000000000, -2000000000}, DataType::kInt32, 1.5) ==
        I32{2147483647, -2147483647 - 1});
  CHECK(scaled(I32{1, -1}, DataType::kInt32, std::numeric_limits<double>::infinity()) ==
        I32{2147483647, -2147483647 - 1});
  CHECK(scaled(I32{0, 5}, DataType::kInt32, std::numeric_limits<double>::quiet_NaN()) == I32{0, 0});
  using I64 = std::vector<int64_t>;
  const int64_t i64max = std::numeric_limits<int64_t>::max();
  const int64_t i64min = std::numeric_limits<int64_t>::min();
  CHECK(scaled(I64{i64max, i64min, i64max - 1}, DataType::kInt64, 1.0) ==
        I64{i64max, i64min, i64max - 1});  // factor 1 is a no-op, even beyond 2^53
  CHECK(scaled(I64{i64max, i64min, int64_t{1} << 61}, DataType::kInt64, 2.0) ==
        I64{i64max, i64min, int64_t{1} << 62});
  // 2^62 * 2 is exactly 2^63, one past the range: must saturate, not convert.
  CHECK(scaled(I64{int64_t{1} << 62, -(int64_t{1} << 62) - 1}, DataType::kInt64, 2.0) ==
        I64{i64max, i64min});
  CHECK(scaled(I64{-3, 3, i64max}, DataType::kInt64, 0.5) == I64{-1, 1, int64_t{1} << 62});
  // Large values whose product still has a fraction (below 2^52): truncated, not rounded.
  const int64_t big = (int64_t{1} << 52) - 1;  // 4503599627370495
  CHECK(scaled(I64{big, -big}, DataType::kInt64, 0.5) == I64{2251799813685247, -2251799813685247});
  CHECK(scaled(I64{1000000000000007, -1000000000000007}, DataType::kInt64, 0.25) ==
        I64{250000000000001, -250000000000001});
  using B = std::vector<uint8_t>;
  CHECK(scaled(B{0, 1, 1}, DataType::kBool, 0.0) == B{0, 1, 1});
  CHECK(scaled(B{0, 1, 1}, DataType::kBool, 2.0) == B{0, 1, 1});
  // Floats multiply in their own precision; fp16/bf16 round back to nearest even.
  CHECK(scaled(std::vector<float>{3.0f, -1.0f}, DataType::kFloat32, 0.1) ==
        std::vector<float>{3.0f * 0.1f, -0.1f});
  CHECK(scaled(std::vector<double>{3.0, -1.0}, DataType::kFloat64, 0.1) ==
        std::vector<double>{3.0 * 0.1, -0.1});
  CHECK(scaled(std::vector<uint16_t>{0x3c00, 0x7bff, 0x0001}, DataType::kFloat16, 2.0) ==
        std::vector<uint16_t>{0x4000, 0x7c00, 0x0002});
  CHECK(scaled(std::vector<uint16_t>{0x3c01}, DataType::kFloat16, 0.5) ==
        std::vector<uint16_t>{0x3801});
  CHECK(scaled(std::vector<uint16_t>{0x3f81, 0x7f7f}, DataType::kBFloat16, 0.5) ==
        std::vector<uint16_t>{0x3f01, 0x7eff});
}

TEST_CASE("scaleInPlace: every dtype matches the reference at odd counts", "[reduce][scale]") {
  checkScaleRandom<uint8_t, Kind::kInt>(DataType::kUInt8);
  checkScaleRandom<int8_t, Kind::kInt>(DataType::kInt8);
  checkScaleRandom<uint16_t, Kind::kInt>(DataType::kUInt16);
  checkScaleRandom<int16_t, Kind::kInt>(DataType::kInt16);
  checkScaleRandom<int32_t, Kind::kInt>(DataType::kInt32);
  checkScaleRandom<int64_t, Kind::kInt>(DataType::kInt64);
  checkScaleRandom<uint16_t, Kind::kHalf>(DataType::kFloat16);
  checkScaleRandom<uint16_t, Kind::kBf16>(DataType::kBFloat16);
  checkScaleRandom<float, Kind::kFloat>(DataType::kFloat32);
  checkScaleRandom<double, Kind::kFloat>(DataType::kFloat64);
  checkScaleRandom<uint8_t, Kind::kBool>(DataType::kBool);
}

namespace {

// op(v, identity) == v for every sample v (what a joined rank's slot must satisfy).
template <typename T>
void checkIdentity(DataType dtype, const std::vector<T>& samples) {
  for (ReduceOp op :
       {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct}) {
    std::vector<T> id(samples.size());
    fillIdentity(id.data(), id.size(), dtype, op);
    unsigned char one[8];
    REQUIRE(identityElement(dtype, op, one) == sizeof(T));
    CHECK(std::memcmp(one, id.data(), sizeof(T)) == 0);
    std::vector<T> got = samples;
    reduceInto(got.data(), id.data(), got.size(), dtype, op);
    INFO("dtype " << static_cast<int>(dtype) << " op " << static_cast<int>(op));
    CHECK(std::memcmp(got.data(), samples.data(), samples.size() * sizeof(T)) == 0);
  }
}

template <typename T>
std::vector<T> intSamples() {
  using L = std::numeric_limits<T>;
  return {L::lowest(),
          static_cast<T>(L::lowest() + 1),
          static_cast<T>(-1),
          0,
          1,
          7,
          static_cast<T>(L::max() - 1),
          L::max()};
}

}  // namespace

TEST_CASE("identityElement: op(v, identity) == v for every dtype x op", "[reduce][identity]") {
  checkIdentity<uint8_t>(DataType::kUInt8, intSamples<uint8_t>());
  checkIdentity<int8_t>(DataType::kInt8, intSamples<int8_t>());
  checkIdentity<uint16_t>(DataType::kUInt16, intSamples<uint16_t>());
  checkIdentity<int16_t>(DataType::kInt16, intSamples<int16_t>());
  checkIdentity<int32_t>(DataType::kInt32, intSamples<int32_t>());
  checkIdentity<int64_t>(DataType::kInt64, intSamples<int64_t>());
  const double inf = std::numeric_limits<double>::infinity();
  checkIdentity<float>(DataType::kFloat32, {-static_cast<float>(inf), -1e30f, -1.5f, 0.0f, 2.5f,
                                            3e38f, static_cast<float>(inf)});
  checkIdentity<double>(DataType::kFloat64, {-inf, -1e300, -1.5, 0.0, 2.5, 1e300, inf});
  // -inf, -1, 0, 2.5, 65504 (largest finite), +inf.
  checkIdentity<uint16_t>(DataType::kFloat16, {0xFC00, 0xBC00, 0x0000, 0x4100, 0x7BFF, 0x7C00});
  checkIdentity<uint16_t>(DataType::kBFloat16, {0xFF80, 0xBF80, 0x0000, 0x4020, 0x7F7F, 0x7F80});
  checkIdentity<uint8_t>(DataType::kBool, {0, 1});
}
