// SPDX-License-Identifier: Apache-2.0
// Deterministic input patterns for the benchmarks, and the exact result each collective must
// produce from them, so a benchmark can count wrong elements after its timed loop.
//
// The values are small integers (or +-1 / {1, 2} for products) chosen so that every reduction
// of them is exact in every dtype the benchmarks accept -- floating point included, as long as
// the sum of up to `ranks` values of magnitude <= 8 is representable: always for float32/64,
// up to 256 ranks for float16 and 32 ranks for bfloat16. Integer results wrap modulo 2^bits,
// as kolo's reductions do. Comparisons are bitwise on the encoded element.
//
// bool is not accepted (kolo-bench measures numeric payloads, as nccl-tests does).
// Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "base/types.h"

namespace kolo::bench {

// Whether the benchmarks can generate and check `dtype` (every numeric type; not bool).
bool patternSupports(DataType dtype);

// The integer value rank `rank` contributes at element `index` under `op` (the product pattern
// differs: +-1 for signed and floating types, {1, 2} for unsigned ones).
int64_t patternValue(int rank, uint64_t index, DataType dtype, ReduceOp op);

// Writes patternValue(rank, first + i) for i in [0, count) into dst, encoded as dtype.
void fillPattern(void* dst, size_t count, DataType dtype, ReduceOp op, int rank, uint64_t first);

// Number of the `count` elements at `data` that differ (bitwise) from patternValue(rank,
// first + i), i.e. from an unchanged copy of the pattern.
size_t countWrongCopy(const void* data, size_t count, DataType dtype, ReduceOp op, int rank,
                      uint64_t first);

// Number of the `count` elements at `data` that differ (bitwise) from the reduction under `op`
// over ranks [0, ranks) of patternValue(r, first + i). kAverage is checked as a sum (kolo's
// ring algorithms sum; the caller scales).
size_t countWrongReduced(const void* data, size_t count, DataType dtype, ReduceOp op, int ranks,
                         uint64_t first);

}  // namespace kolo::bench
