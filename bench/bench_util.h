// SPDX-License-Identifier: Apache-2.0
// Small command-line helpers shared by kolo-bench and kolo-runtime-bench. Pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "base/types.h"

namespace kolo::bench {

// "4096", "4K", "256M", "1G" (binary multiples, case-insensitive, optional trailing "B" or
// "iB") -> bytes. False on anything else or on overflow.
bool parseBytes(const std::string& text, size_t* out);
// A decimal integer in [lo, hi].
bool parseInt(const std::string& text, long lo, long hi, long* out);
// "a,b,,c" -> {"a", "b", "c"}.
std::vector<std::string> splitList(const std::string& text);
// "float32" / "fp32" / "float" ... -> DataType (names as toString(DataType) prints them, plus
// the short forms fp16, bf16, fp32, fp64, half, float, double).
bool parseDataType(const std::string& text, DataType* out);
// "sum" | "min" | "max" | "product" (or "prod").
bool parseReduceOp(const std::string& text, ReduceOp* out);
// Summary of a sample: mean, and median / p90 by nearest rank (all -1 for an empty sample).
struct SampleStats {
  double median = -1, p90 = -1, mean = -1;
};
SampleStats statsOf(std::vector<double> samples);

// 1536 -> "1.5 KiB"; exact powers of two print without decimals ("256 MiB").
std::string humanBytes(size_t bytes);

}  // namespace kolo::bench
