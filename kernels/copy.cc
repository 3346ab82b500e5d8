// SPDX-License-Identifier: Apache-2.0
#include "kernels/copy.h"

#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace kolo::kernels {
namespace {

// Below this, memcpy's own small-size paths are as good as anything (and never `rep movsb`).
constexpr size_t kLoopMinBytes = 4096;

#if defined(__x86_64__)
__attribute__((target("avx"))) void copyAvx(uint8_t* d, const uint8_t* s, size_t n) {
  // Align the stores: copy the head up to d's next 32-byte boundary.
  const size_t head = (32 - (reinterpret_cast<uintptr_t>(d) & 31)) & 31;
  std::memcpy(d, s, head);
  size_t i = head;
  for (; i + 128 <= n; i += 128) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 32));
    const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 64));
    const __m256i e = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 96));
    _mm256_store_si256(reinterpret_cast<__m256i*>(d + i), a);
    _mm256_store_si256(reinterpret_cast<__m256i*>(d + i + 32), b);
    _mm256_store_si256(reinterpret_cast<__m256i*>(d + i + 64), c);
    _mm256_store_si256(reinterpret_cast<__m256i*>(d + i + 96), e);
  }
  std::memcpy(d + i, s + i, n - i);
}

void copySse2(uint8_t* d, const uint8_t* s, size_t n) {
  const size_t head = (16 - (reinterpret_cast<uintptr_t>(d) & 15)) & 15;
  std::memcpy(d, s, head);
  size_t i = head;
  for (; i + 64 <= n; i += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 32));
    const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 48));
    _mm_store_si128(reinterpret_cast<__m128i*>(d + i), a);
    _mm_store_si128(reinterpret_cast<__m128i*>(d + i + 16), b);
    _mm_store_si128(reinterpret_cast<__m128i*>(d + i + 32), c);
    _mm_store_si128(reinterpret_cast<__m128i*>(d + i + 48), e);
  }
  std::memcpy(d + i, s + i, n - i);
}

bool haveAvx() {
  static const bool avx = __builtin_cpu_supports("avx");
  return avx;
}

// CPUID.(EAX=7,ECX=0):EDX bit 4, "fast short REP MOVSB": glibc's `rep movsb` is fast there.
bool haveFsrm() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0) return false;
  return (d & (1u << 4)) != 0;
}
#endif

}  // namespace

void copyBytes(void* dst, const void* src, size_t n) {
#if defined(__x86_64__)
  static const bool libcIsFast = haveFsrm();
  if (!libcIsFast) {
    copyBytesVector(dst, src, n);
    return;
  }
#endif
  if (n > 0) std::memcpy(dst, src, n);
}

void copyBytesVector(void* dst, const void* src, size_t n) {
  if (n < kLoopMinBytes) {
    if (n > 0) std::memcpy(dst, src, n);
    return;
  }
#if defined(__x86_64__)
  auto* d = static_cast<uint8_t*>(dst);
  const auto* s = static_cast<const uint8_t*>(src);
  if (haveAvx()) {
    copyAvx(d, s, n);
  } else {
    copySse2(d, s, n);
  }
#else
  std::memcpy(dst, src, n);
#endif
}

}  // namespace kolo::kernels
