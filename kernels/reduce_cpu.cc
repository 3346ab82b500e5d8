// SPDX-License-Identifier: Apache-2.0
// Element-wise reductions on host memory (contract in reduce_cpu.h).
//
// Why it looks like this:
//  - Every (dtype, op) pair is one instantiation of a tiny loop over a stateless functor, so GCC
//    sees a straight-line body and vectorizes it at -O3 with plain SSE2 (kernels/CMakeLists.txt
//    sets -O3 -fno-trapping-math for this file only; no -march flag, the binary must run anywhere).
//  - The loops take __restrict pointers. The aliasing the contract allows (dst == src, dst == a,
//    dst == b) is dispatched to a loop whose operands really are distinct, instead of leaving
//    GCC a runtime overlap check that would send exact aliasing down the scalar path.
//  - Integer arithmetic happens in an unsigned type at least 32 bits wide: it wraps modulo 2^bits
//    as promised, and avoids the undefined behaviour of signed overflow (and of uint16 * uint16,
//    which promotes to a signed int).
//  - Float min/max test for NaN with a bitwise OR of comparisons instead of std::fmin/fmax
//    (which drop NaNs) or a branch: the select if-converts into cmpps/andps/orps.
//  - fp16/bf16 go through float in blocks of kBlock elements kept on the stack: two conversion
//    loops, one loop that combines in float (the same functors as fp32) and encodes, and one that
//    narrows to 16 bits; each vectorizes. The conversions are branch-free selects between
//    candidate encodings for the same reason.
//  - On x86-64 CPUs with F16C and AVX2 (checked once at run time, the binary still runs
//    anywhere), fp16 converts with vcvtph2ps/vcvtps2ph and combines 8 floats at a time. The
//    hardware rounds to nearest even like floatToHalfWide; only NaN differs (it keeps the
//    payload), so a block holding a NaN is encoded by floatToHalfWide: results are bitwise the
//    same on either path.
//  - Pointers are assumed aligned to their element size, as every tensor and fusion-buffer slot
//    is. Enum values outside DataType/ReduceOp are a bug in the caller: we abort with a message
//    rather than silently leaving dst untouched (these functions cannot return a Status).
//  - kBitAnd is defined for the integer types and bool; on floating-point types it ANDs the raw
//    bit patterns, which is the only meaning that keeps the response-cache round dtype-agnostic.
#include "kernels/reduce_cpu.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <type_traits>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#define KOLO_F16C_PATH 1
#endif

namespace kolo::kernels {
namespace {

constexpr size_t kBlock = 256;  // fp16/bf16 elements converted per step (2 x 1 KiB of floats)

[[noreturn]] void badEnum(const char* function, const char* what, int value) {
  std::fprintf(stderr, "kolo internal error: %s called with invalid %s %d\n", function, what,
               value);
  std::abort();
}

template <typename To, typename From>
inline To bitCast(From v) {
  static_assert(sizeof(To) == sizeof(From), "bitCast needs equal sizes");
  To out;
  std::memcpy(&out, &v, sizeof(out));
  return out;
}

// Unsigned type used for wrapping integer arithmetic; floats compute in their own type.
template <typename T>
using Arith = std::conditional_t<std::is_integral_v<T>,
                                 std::conditional_t<(sizeof(T) <= 4), uint32_t, uint64_t>, T>;

// ---- the combining functors -----------------------------------------------------------------
struct SumOp {
  template <typename T>
  static T apply(T a, T b) {
    return static_cast<T>(static_cast<Arith<T>>(a) + static_cast<Arith<T>>(b));
  }
};
struct ProductOp {
  template <typename T>
  static T apply(T a, T b) {
    return static_cast<T>(static_cast<Arith<T>>(a) * static_cast<Arith<T>>(b));
  }
};
// `a != a` is the NaN test (no library call, so it vectorizes); integers never take it.
struct MinOp {
  template <typename T>
  static T apply(T a, T b) {
    return ((a < b) | (a != a)) ? a : b;
  }
};
struct MaxOp {
  template <typename T>
  static T apply(T a, T b) {
    return ((a > b) | (a != a)) ? a : b;
  }
};
struct BitAndOp {
  template <typename T>
  static T apply(T a, T b) {
    return static_cast<T>(a & b);
  }
};
// bool is handled as bytes so that a non-canonical true (e.g. 2) still counts as true.
struct LogicalOrOp {
  static uint8_t apply(uint8_t a, uint8_t b) { return static_cast<uint8_t>((a | b) != 0); }
};
struct LogicalAndOp {
  static uint8_t apply(uint8_t a, uint8_t b) { return static_cast<uint8_t>((a != 0) & (b != 0)); }
};

// ---- fp16 / bf16 conversions ----------------------------------------------------------------
// Written as integer selects with all-ones masks, comparisons on int32 (SSE2 has pcmpgtd but no
// unsigned compare). The float -> 16-bit direction returns the encoding in an int32, sign-extended
// from bit 15: when the loop's result is 16 bits wide GCC "demotes" the selects to 16-bit lanes and
// spends more shuffles narrowing every operand than on the arithmetic, so the kernels store int32
// and narrow in a separate trivial loop.
inline uint32_t maskIf(bool c) { return 0u - static_cast<uint32_t>(c); }

// Half to float: normal encodings are a shift plus an exponent rebias; inf/NaN need the exponent
// pushed to all-ones (a second rebias); subnormals and zero are m * 2^-24, obtained exactly as
// (2^-14 + m * 2^-24) - 2^-14 without ever touching a float subnormal (no FTZ/DAZ surprises).
inline float halfToFloatImpl(uint16_t h) {
  const uint32_t v = h;
  const uint32_t em = v & 0x7fffu;
  const uint32_t shifted = em << 13;
  const int32_t e = static_cast<int32_t>(em);
  const uint32_t isSpecial = maskIf(e > 0x7bff);
  const uint32_t isSub = maskIf(e < 0x0400);
  const uint32_t normal = shifted + (112u << 23) + (isSpecial & (112u << 23));
  const uint32_t sub = bitCast<uint32_t>(bitCast<float>(shifted + (113u << 23)) - 0x1p-14f);
  const uint32_t bits = (isSub & sub) | (~isSub & normal);
  return bitCast<float>(bits | ((v & 0x8000u) << 16));
}

// Float to half, round to nearest even:
//  - normal range: rebias, add 0xfff plus the lowest kept bit (ties go to even), shift.
//  - |f| >= 65520 (the tie above the largest half, 65504) is inf; NaN is the quiet NaN 0x7e00.
//  - |f| < 2^-14: adding 0.5f aligns the value so the FPU's own round-to-nearest-even leaves the
//    half subnormal (or 0x0400 when it rounds up to the smallest normal) in the low bits.
inline int32_t floatToHalfWide(float f) {
  const uint32_t x = bitCast<uint32_t>(f);
  const uint32_t ax = x & 0x7fffffffu;
  const int32_t sax = static_cast<int32_t>(ax);
  const uint32_t normal = (ax + (0x0fffu - (112u << 23)) + ((ax >> 13) & 1u)) >> 13;
  const uint32_t sub = bitCast<uint32_t>(bitCast<float>(ax) + 0.5f) - 0x3f000000u;
  const uint32_t big = 0x7c00u | (maskIf(sax > 0x7f800000) & 0x0200u);
  const uint32_t isBig = maskIf(sax >= 0x477ff000);
  const uint32_t isSub = maskIf(sax < 0x38800000);
  uint32_t h = (isBig & big) | (~isBig & normal);
  h = (isSub & sub) | (~isSub & h);
  const int32_t sign = (static_cast<int32_t>(x) >> 16) & static_cast<int32_t>(0xffff8000u);
  return static_cast<int32_t>(h) | sign;
}

inline float bfloat16ToFloatImpl(uint16_t b) {
  return bitCast<float>(static_cast<uint32_t>(b) << 16);
}

// bf16 is the top half of a float: add just under half an ulp plus the kept lsb, truncate; the
// carry rounds into the exponent (and to inf) by itself. NaN gets no increment (it could carry
// into the sign) and is made quiet, so a payload only in the discarded bits cannot become inf.
inline int32_t floatToBfloat16Wide(float f) {
  const uint32_t x = bitCast<uint32_t>(f);
  const uint32_t isNan = maskIf(static_cast<int32_t>(x & 0x7fffffffu) > 0x7f800000);
  const uint32_t inc = (0x7fffu + ((x >> 16) & 1u)) & ~isNan;
  return (static_cast<int32_t>(x + inc) >> 16) | static_cast<int32_t>(isNan & 0x40u);
}

struct HalfCodec {
  static float toFloat(uint16_t v) { return halfToFloatImpl(v); }
  static int32_t fromFloat(float v) { return floatToHalfWide(v); }
};
struct Bfloat16Codec {
  static float toFloat(uint16_t v) { return bfloat16ToFloatImpl(v); }
  static int32_t fromFloat(float v) { return floatToBfloat16Wide(v); }
};

// ---- loops ----------------------------------------------------------------------------------
template <typename T, typename Op>
void loopInto(T* __restrict d, const T* __restrict s, size_t n) {
  for (size_t i = 0; i < n; ++i) d[i] = Op::apply(d[i], s[i]);
}
template <typename T, typename Op>
void loopIntoReversed(T* __restrict d, const T* __restrict s, size_t n) {
  for (size_t i = 0; i < n; ++i) d[i] = Op::apply(s[i], d[i]);
}
template <typename T, typename Op>
void loopThree(T* __restrict d, const T* __restrict a, const T* __restrict b, size_t n) {
  for (size_t i = 0; i < n; ++i) d[i] = Op::apply(a[i], b[i]);
}
template <typename T, typename Op>
void loopSelf(T* d, size_t n) {
  for (size_t i = 0; i < n; ++i) d[i] = Op::apply(d[i], d[i]);
}

// d = op(a, b) for one element type, any of the aliasings the contract allows.
template <typename T, typename Op>
void combine(void* dst, const void* a, const void* b, size_t n) {
  T* d = static_cast<T*>(dst);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  if (d == x && d == y) {
    loopSelf<T, Op>(d, n);
  } else if (d == x) {
    loopInto<T, Op>(d, y, n);
  } else if (d == y) {
    loopIntoReversed<T, Op>(d, x, n);
  } else {
    loopThree<T, Op>(d, x, y, n);
  }
}

// 16-bit floats: every block is fully read into the stack arrays before any element of it is
// written, so exact aliasing between d, a and b needs no special case here.
template <typename Codec, typename Op>
void combine16(void* dst, const void* a, const void* b, size_t n) {
  uint16_t* d = static_cast<uint16_t*>(dst);
  const uint16_t* x = static_cast<const uint16_t*>(a);
  const uint16_t* y = static_cast<const uint16_t*>(b);
  float fx[kBlock];
  float fy[kBlock];
  int32_t wide[kBlock];
  for (size_t off = 0; off < n; off += kBlock) {
    const size_t m = n - off < kBlock ? n - off : kBlock;
    for (size_t i = 0; i < m; ++i) fx[i] = Codec::toFloat(x[off + i]);
    for (size_t i = 0; i < m; ++i) fy[i] = Codec::toFloat(y[off + i]);
    for (size_t i = 0; i < m; ++i) wide[i] = Codec::fromFloat(Op::apply(fx[i], fy[i]));
    for (size_t i = 0; i < m; ++i) d[off + i] = static_cast<uint16_t>(wide[i]);
  }
}

using CombineFn = void (*)(void*, const void*, const void*, size_t);

#ifdef KOLO_F16C_PATH
// fp16 with F16C + AVX2 (see the top of the file). Same blocks as combine16; GCC vectorizes the
// float loop with AVX inside this target.
__attribute__((target("avx2,f16c"))) void halfBlockToFloat(const uint16_t* s, float* f,
                                                           size_t m) {
  size_t i = 0;
  for (; i + 8 <= m; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
    _mm256_storeu_ps(f + i, _mm256_cvtph_ps(h));
  }
  for (; i < m; ++i) f[i] = halfToFloatImpl(s[i]);
}

__attribute__((target("avx2,f16c"))) void floatBlockToHalf(const float* f, uint16_t* d,
                                                           size_t m) {
  size_t i = 0;
  for (; i + 8 <= m; i += 8) {
    const __m256 v = _mm256_loadu_ps(f + i);
    if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)) != 0) {  // a NaN: canonical form
      for (size_t j = i; j < i + 8; ++j) d[j] = static_cast<uint16_t>(floatToHalfWide(f[j]));
      continue;
    }
    const __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i), h);
  }
  for (; i < m; ++i) d[i] = static_cast<uint16_t>(floatToHalfWide(f[i]));
}

template <typename Op>
__attribute__((target("avx2,f16c"))) void combineHalfF16c(void* dst, const void* a, const void* b,
                                                          size_t n) {
  uint16_t* d = static_cast<uint16_t*>(dst);
  const uint16_t* x = static_cast<const uint16_t*>(a);
  const uint16_t* y = static_cast<const uint16_t*>(b);
  float fx[kBlock];
  float fy[kBlock];
  for (size_t off = 0; off < n; off += kBlock) {
    const size_t m = n - off < kBlock ? n - off : kBlock;
    halfBlockToFloat(x + off, fx, m);
    halfBlockToFloat(y + off, fy, m);
    for (size_t i = 0; i < m; ++i) fx[i] = Op::apply(fx[i], fy[i]);
    floatBlockToHalf(fx, d + off, m);
  }
}

__attribute__((target("avx2,f16c"))) void scaleHalfF16c(uint16_t* p, size_t n, float factor) {
  float f[kBlock];
  for (size_t off = 0; off < n; off += kBlock) {
    const size_t m = n - off < kBlock ? n - off : kBlock;
    halfBlockToFloat(p + off, f, m);
    for (size_t i = 0; i < m; ++i) f[i] *= factor;
    floatBlockToHalf(f, p + off, m);
  }
}

// CPUID (not __builtin_cpu_supports: Clang 14 does not know "f16c"): F16C and AVX in leaf 1,
// the OS saving YMM state (XGETBV), AVX2 in leaf 7.
bool cpuHasF16cAndAvx2() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(1, &a, &b, &c, &d) == 0) return false;
  const unsigned need = (1u << 29) | (1u << 28) | (1u << 27);  // F16C, AVX, OSXSAVE
  if ((c & need) != need) return false;
  unsigned lo = 0, hi = 0;
  __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  if ((lo & 6u) != 6u) return false;  // XMM and YMM state enabled
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0) return false;
  return (b & (1u << 5)) != 0;  // AVX2
}

bool haveF16c() {
  static const bool yes = cpuHasF16cAndAvx2() && std::getenv("KOLO_DISABLE_F16C") == nullptr;
  return yes;
}
#endif

// fp16 kernel for Op: the F16C one where the CPU has it.
template <typename Op>
CombineFn halfKernel() {
#ifdef KOLO_F16C_PATH
  if (haveF16c()) return &combineHalfF16c<Op>;
#endif
  return &combine16<HalfCodec, Op>;
}

template <typename T>
CombineFn arithmeticKernel(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
      return &combine<T, SumOp>;
    case ReduceOp::kMin:
      return &combine<T, MinOp>;
    case ReduceOp::kMax:
      return &combine<T, MaxOp>;
    case ReduceOp::kProduct:
      return &combine<T, ProductOp>;
    case ReduceOp::kBitAnd:
      if constexpr (std::is_integral_v<T>) {
        return &combine<T, BitAndOp>;
      } else if constexpr (sizeof(T) == 4) {
        return &combine<uint32_t, BitAndOp>;
      } else {
        return &combine<uint64_t, BitAndOp>;
      }
    case ReduceOp::kAdasum:  // not element-wise: ops/adasum runs it
      break;
  }
  badEnum("reduce", "ReduceOp", static_cast<int>(op));
}

template <typename Codec, typename Op>
CombineFn float16Combine() {
  if constexpr (std::is_same_v<Codec, HalfCodec>) {
    return halfKernel<Op>();
  } else {
    return &combine16<Codec, Op>;
  }
}

template <typename Codec>
CombineFn float16Kernel(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
      return float16Combine<Codec, SumOp>();
    case ReduceOp::kMin:
      return float16Combine<Codec, MinOp>();
    case ReduceOp::kMax:
      return float16Combine<Codec, MaxOp>();
    case ReduceOp::kProduct:
      return float16Combine<Codec, ProductOp>();
    case ReduceOp::kBitAnd:
      return &combine<uint16_t, BitAndOp>;
    case ReduceOp::kAdasum:  // not element-wise: ops/adasum runs it
      break;
  }
  badEnum("reduce", "ReduceOp", static_cast<int>(op));
}

CombineFn boolKernel(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
    case ReduceOp::kMax:
      return &combine<uint8_t, LogicalOrOp>;
    case ReduceOp::kMin:
    case ReduceOp::kProduct:
      return &combine<uint8_t, LogicalAndOp>;
    case ReduceOp::kBitAnd:
      return &combine<uint8_t, BitAndOp>;
    case ReduceOp::kAdasum:  // not element-wise: ops/adasum runs it
      break;
  }
  badEnum("reduce", "ReduceOp", static_cast<int>(op));
}

CombineFn selectKernel(DataType dtype, ReduceOp op) {
  switch (dtype) {
    case DataType::kUInt8:
      return arithmeticKernel<uint8_t>(op);
    case DataType::kInt8:
      return arithmeticKernel<int8_t>(op);
    case DataType::kUInt16:
      return arithmeticKernel<uint16_t>(op);
    case DataType::kInt16:
      return arithmeticKernel<int16_t>(op);
    case DataType::kInt32:
      return arithmeticKernel<int32_t>(op);
    case DataType::kInt64:
      return arithmeticKernel<int64_t>(op);
    case DataType::kFloat16:
      return float16Kernel<HalfCodec>(op);
    case DataType::kBFloat16:
      return float16Kernel<Bfloat16Codec>(op);
    case DataType::kFloat32:
      return arithmeticKernel<float>(op);
    case DataType::kFloat64:
      return arithmeticKernel<double>(op);
    case DataType::kBool:
      return boolKernel(op);
  }
  badEnum("reduce", "DataType", static_cast<int>(dtype));
}

// ---- scaling --------------------------------------------------------------------------------
// Integers: multiply in double and truncate toward zero, as Horovod does (its ScaleBuffer
// assigns the double product to the integer type, a C conversion), so 3 * 0.5 = 1 and
// -3 * 0.5 = -1. Where that conversion is undefined Horovod has no rule and we pick one: out of
// range saturates, and a NaN product (0 * inf or a NaN factor) becomes 0.
template <typename T>
void scaleInteger(T* p, size_t n, double factor) {
  constexpr double kLo = static_cast<double>(std::numeric_limits<T>::min());
  // For int64 this is 2^63 (max rounds up): v >= kHi must saturate, v < kHi converts exactly.
  constexpr double kHi = static_cast<double>(std::numeric_limits<T>::max());
  for (size_t i = 0; i < n; ++i) {
    const double v = std::trunc(static_cast<double>(p[i]) * factor);
    T out;
    if (std::isnan(v)) {
      out = 0;
    } else if (v <= kLo) {
      out = std::numeric_limits<T>::min();
    } else if (v >= kHi) {
      out = std::numeric_limits<T>::max();
    } else {
      out = static_cast<T>(v);
    }
    p[i] = out;
  }
}

template <typename T>
void scaleFloat(T* __restrict p, size_t n, T factor) {
  for (size_t i = 0; i < n; ++i) p[i] *= factor;
}

template <typename Codec>
void scale16(uint16_t* p, size_t n, float factor) {
  int32_t wide[kBlock];
  for (size_t off = 0; off < n; off += kBlock) {
    const size_t m = n - off < kBlock ? n - off : kBlock;
    for (size_t i = 0; i < m; ++i) wide[i] = Codec::fromFloat(Codec::toFloat(p[off + i]) * factor);
    for (size_t i = 0; i < m; ++i) p[off + i] = static_cast<uint16_t>(wide[i]);
  }
}

// ---- identities -----------------------------------------------------------------------------
template <typename T>
size_t identityOf(ReduceOp op, unsigned char* out) {
  using L = std::numeric_limits<T>;
  T v = 0;
  if (op == ReduceOp::kMin) v = L::has_infinity ? L::infinity() : L::max();
  if (op == ReduceOp::kMax) v = L::has_infinity ? -L::infinity() : L::lowest();
  if (op == ReduceOp::kProduct) v = 1;
  if (op == ReduceOp::kBitAnd) v = static_cast<T>(~static_cast<uint64_t>(0));
  std::memcpy(out, &v, sizeof v);
  return sizeof v;
}

// fp16/bf16 bit patterns of +inf, -inf and 1.
size_t identityOf16(ReduceOp op, uint16_t posInf, uint16_t negInf, uint16_t one,
                    unsigned char* out) {
  uint16_t v = 0;
  if (op == ReduceOp::kMin) v = posInf;
  if (op == ReduceOp::kMax) v = negInf;
  if (op == ReduceOp::kProduct) v = one;
  if (op == ReduceOp::kBitAnd) v = 0xFFFF;
  std::memcpy(out, &v, sizeof v);
  return sizeof v;
}

}  // namespace

size_t identityElement(DataType dtype, ReduceOp op, unsigned char out[8]) {
  switch (dtype) {
    case DataType::kUInt8:
      return identityOf<uint8_t>(op, out);
    case DataType::kInt8:
      return identityOf<int8_t>(op, out);
    case DataType::kUInt16:
      return identityOf<uint16_t>(op, out);
    case DataType::kInt16:
      return identityOf<int16_t>(op, out);
    case DataType::kInt32:
      return identityOf<int32_t>(op, out);
    case DataType::kInt64:
      return identityOf<int64_t>(op, out);
    case DataType::kFloat16:
      return identityOf16(op, 0x7C00, 0xFC00, 0x3C00, out);
    case DataType::kBFloat16:
      return identityOf16(op, 0x7F80, 0xFF80, 0x3F80, out);
    case DataType::kFloat32:
      return identityOf<float>(op, out);
    case DataType::kFloat64:
      return identityOf<double>(op, out);
    case DataType::kBool: {
      const bool isAnd =
          op == ReduceOp::kMin || op == ReduceOp::kProduct || op == ReduceOp::kBitAnd;
      out[0] = isAnd ? 1 : 0;
      return 1;
    }
  }
  badEnum("identityElement", "DataType", static_cast<int>(dtype));
}

void fillIdentity(void* data, size_t count, DataType dtype, ReduceOp op) {
  unsigned char one[8];
  const size_t size = identityElement(dtype, op, one);
  auto* p = static_cast<unsigned char*>(data);
  for (size_t i = 0; i < count; ++i) std::memcpy(p + i * size, one, size);
}

void reduceInto(void* dst, const void* src, size_t count, DataType dtype, ReduceOp op) {
  CombineFn fn = selectKernel(dtype, op);
  if (count > 0) fn(dst, dst, src, count);
}

void reduce3(void* dst, const void* a, const void* b, size_t count, DataType dtype, ReduceOp op) {
  CombineFn fn = selectKernel(dtype, op);
  if (count > 0) fn(dst, a, b, count);
}

void scaleInPlace(void* data, size_t count, DataType dtype, double factor) {
  if (factor == 1.0 || count == 0) {
    if (!isValid(dtype)) badEnum("scaleInPlace", "DataType", static_cast<int>(dtype));
    return;
  }
  switch (dtype) {
    case DataType::kUInt8:
      return scaleInteger(static_cast<uint8_t*>(data), count, factor);
    case DataType::kInt8:
      return scaleInteger(static_cast<int8_t*>(data), count, factor);
    case DataType::kUInt16:
      return scaleInteger(static_cast<uint16_t*>(data), count, factor);
    case DataType::kInt16:
      return scaleInteger(static_cast<int16_t*>(data), count, factor);
    case DataType::kInt32:
      return scaleInteger(static_cast<int32_t*>(data), count, factor);
    case DataType::kInt64:
      return scaleInteger(static_cast<int64_t*>(data), count, factor);
    case DataType::kFloat16:
#ifdef KOLO_F16C_PATH
      if (haveF16c()) {
        return scaleHalfF16c(static_cast<uint16_t*>(data), count, static_cast<float>(factor));
      }
#endif
      return scale16<HalfCodec>(static_cast<uint16_t*>(data), count, static_cast<float>(factor));
    case DataType::kBFloat16:
      return scale16<Bfloat16Codec>(static_cast<uint16_t*>(data), count,
                                    static_cast<float>(factor));
    case DataType::kFloat32:
      return scaleFloat(static_cast<float*>(data), count, static_cast<float>(factor));
    case DataType::kFloat64:
      return scaleFloat(static_cast<double*>(data), count, factor);
    case DataType::kBool:
      return;  // scaling a truth value has no meaning; the contract leaves it unchanged
  }
  badEnum("scaleInPlace", "DataType", static_cast<int>(dtype));
}

float halfToFloat(uint16_t h) { return halfToFloatImpl(h); }
uint16_t floatToHalf(float f) { return static_cast<uint16_t>(floatToHalfWide(f)); }
float bfloat16ToFloat(uint16_t b) { return bfloat16ToFloatImpl(b); }
uint16_t floatToBfloat16(float f) { return static_cast<uint16_t>(floatToBfloat16Wide(f)); }

}  // namespace kolo::kernels
