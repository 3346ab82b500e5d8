// SPDX-License-Identifier: Apache-2.0
#include "bench/bench_util.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

namespace kolo::bench {
namespace {

std::string lower(const std::string& text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

bool parseBytes(const std::string& text, size_t* out) {
  if (text.empty() || !std::isdigit(static_cast<unsigned char>(text[0]))) return false;
  errno = 0;
  char* end = nullptr;
  const unsigned long long value = std::strtoull(text.c_str(), &end, 10);
  if (errno != 0) return false;
  std::string suffix = lower(end);
  if (suffix.size() >= 2 && suffix.compare(suffix.size() - 2, 2, "ib") == 0) {
    suffix.erase(suffix.size() - 2);
    if (suffix.empty()) return false;  // "iB" alone
  } else if (!suffix.empty() && suffix.back() == 'b') {
    suffix.pop_back();
  }
  unsigned shift = 0;
  if (suffix == "k") {
    shift = 10;
  } else if (suffix == "m") {
    shift = 20;
  } else if (suffix == "g") {
    shift = 30;
  } else if (!suffix.empty()) {
    return false;
  }
  if (value > (std::numeric_limits<size_t>::max() >> shift)) return false;
  *out = static_cast<size_t>(value) << shift;
  return true;
}

bool parseInt(const std::string& text, long lo, long hi, long* out) {
  errno = 0;
  char* end = nullptr;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (errno != 0 || end == text.c_str() || *end != '\0' || v < lo || v > hi) return false;
  *out = v;
  return true;
}

std::vector<std::string> splitList(const std::string& text) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string::npos) comma = text.size();
    if (comma > pos) out.push_back(text.substr(pos, comma - pos));
    pos = comma + 1;
  }
  return out;
}

bool parseDataType(const std::string& text, DataType* out) {
  const std::string t = lower(text);
  struct Alias {
    const char* name;
    DataType dtype;
  };
  static const Alias kAliases[] = {{"fp16", DataType::kFloat16},  {"half", DataType::kFloat16},
                                   {"bf16", DataType::kBFloat16}, {"fp32", DataType::kFloat32},
                                   {"float", DataType::kFloat32}, {"fp64", DataType::kFloat64},
                                   {"double", DataType::kFloat64}};
  for (const Alias& a : kAliases) {
    if (t == a.name) {
      *out = a.dtype;
      return true;
    }
  }
  for (int i = 0; i < kNumDataTypes; ++i) {
    const DataType d = static_cast<DataType>(i);
    if (t == toString(d)) {
      *out = d;
      return true;
    }
  }
  return false;
}

bool parseReduceOp(const std::string& text, ReduceOp* out) {
  const std::string t = lower(text);
  if (t == "prod") {
    *out = ReduceOp::kProduct;
    return true;
  }
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct}) {
    if (t == toString(op)) {
      *out = op;
      return true;
    }
  }
  return false;
}

SampleStats statsOf(std::vector<double> v) {
  SampleStats s;
  if (v.empty()) return s;
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / static_cast<double>(v.size());
  std::sort(v.begin(), v.end());
  // Nearest rank: the smallest sample with at least a fraction p of the samples at or below it.
  auto atRank = [&](double p) {
    size_t k = static_cast<size_t>(std::ceil(p * static_cast<double>(v.size())));
    return v[std::min(v.size(), std::max<size_t>(k, 1)) - 1];
  };
  s.median = atRank(0.5);
  s.p90 = atRank(0.9);
  return s;
}

std::string humanBytes(size_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int unit = 0;
  while (v >= 1024.0 && unit < 4) {
    v /= 1024.0;
    ++unit;
  }
  char buf[32];
  if (v == static_cast<double>(static_cast<long long>(v))) {
    std::snprintf(buf, sizeof(buf), "%lld %s", static_cast<long long>(v), kUnits[unit]);
  } else {
    std::snprintf(buf, sizeof(buf), "%.1f %s", v, kUnits[unit]);
  }
  return buf;
}

}  // namespace kolo::bench
