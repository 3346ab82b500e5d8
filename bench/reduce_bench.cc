// SPDX-License-Identifier: Apache-2.0
// kolo-reduce-bench: single-thread throughput of kernels::reduceInto (kSum) on host buffers.
//
// Usage: kolo-reduce-bench [seconds-per-case]   (default 0.3)
//
// For each dtype (fp32, fp16, bf16, int32) and buffer size (4 MiB, 64 MiB) it times repeated
// reduceInto(dst, src) calls for at least the given time and prints
//   algGB/s = bytes of one buffer / time per call  (what a ring step cares about)
//   memGB/s = 3 x that (read dst, read src, write dst: the memory traffic actually moved).
// 4 MiB mostly stays in the last-level cache; 64 MiB shows the DRAM-bound rate. Inputs are small
// normal values so that no subnormal or inf slows the FPU down during the run.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "base/clock.h"
#include "base/types.h"
#include "kernels/reduce_cpu.h"

namespace {

using kolo::Clock;

struct Case {
  kolo::DataType dtype;
  const char* name;
};

// Fills n elements of `dtype` with `value` (converted to the dtype's encoding).
void fill(std::vector<unsigned char>* buf, kolo::DataType dtype, float value) {
  const size_t elem = kolo::sizeOf(dtype);
  const size_t n = buf->size() / elem;
  unsigned char* p = buf->data();
  for (size_t i = 0; i < n; ++i) {
    if (dtype == kolo::DataType::kFloat32) {
      std::memcpy(p + i * elem, &value, elem);
    } else if (dtype == kolo::DataType::kFloat16) {
      const uint16_t h = kolo::kernels::floatToHalf(value);
      std::memcpy(p + i * elem, &h, elem);
    } else if (dtype == kolo::DataType::kBFloat16) {
      const uint16_t b = kolo::kernels::floatToBfloat16(value);
      std::memcpy(p + i * elem, &b, elem);
    } else {
      const int32_t v = static_cast<int32_t>(value * 1000) + static_cast<int32_t>(i % 7);
      std::memcpy(p + i * elem, &v, elem);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  double minSeconds = 0.3;
  if (argc > 1) {
    minSeconds = std::atof(argv[1]);
    if (!(minSeconds > 0) || minSeconds > 60) {
      std::fprintf(stderr, "usage: %s [seconds-per-case in (0, 60]]\n", argv[0]);
      return 2;
    }
  }
  const Case cases[] = {{kolo::DataType::kFloat32, "float32"},
                        {kolo::DataType::kFloat16, "float16"},
                        {kolo::DataType::kBFloat16, "bfloat16"},
                        {kolo::DataType::kInt32, "int32"}};
  const size_t sizes[] = {size_t{4} << 20, size_t{64} << 20};

  std::printf("%-9s %-4s %10s %8s %12s %9s %9s\n", "dtype", "op", "bytes", "iters", "us/call",
              "algGB/s", "memGB/s");
  for (size_t bytes : sizes) {
    for (const Case& c : cases) {
      std::vector<unsigned char> dst(bytes), src(bytes);
      fill(&dst, c.dtype, 1.0f);
      fill(&src, c.dtype, 0.001f);
      const size_t count = bytes / kolo::sizeOf(c.dtype);
      // One untimed call warms caches and TLB.
      kolo::kernels::reduceInto(dst.data(), src.data(), count, c.dtype, kolo::ReduceOp::kSum);
      size_t iters = 0;
      const auto start = Clock::now();
      double elapsed = 0;
      while (elapsed < minSeconds || iters < 3) {
        kolo::kernels::reduceInto(dst.data(), src.data(), count, c.dtype, kolo::ReduceOp::kSum);
        ++iters;
        elapsed = std::chrono::duration<double>(Clock::now() - start).count();
      }
      const double perCall = elapsed / static_cast<double>(iters);
      const double algGbs = static_cast<double>(bytes) / perCall / 1e9;
      std::printf("%-9s %-4s %10zu %8zu %12.1f %9.2f %9.2f\n", c.name, "sum", bytes, iters,
                  perCall * 1e6, algGbs, 3 * algGbs);
    }
  }
  return 0;
}
