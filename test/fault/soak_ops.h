// SPDX-License-Identifier: Apache-2.0
// The soak test's op generator and reference data (soak.cc runs them).
//
// Every op is a pure function of (seed, thread, index): every rank derives the same kind,
// name, dtype, shape, reduce op, scales, root, splits and process set, so all members of the set
// submit the same logical op. Tensor contents are a pure function of (op seed, rank, element),
// so any rank can compute what every other rank contributed and check a result exactly.
// Values are small integers (scales are powers of two), so sums, products and copies are exact
// in every dtype; only AVERAGE (a division by the set size) needs a tolerance.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kolo.h"
#include "test/c_api_values.h"

namespace soak {

inline uint64_t mix(uint64_t x) {  // splitmix64 finalizer
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
inline uint64_t mix(uint64_t a, uint64_t b) { return mix(a ^ mix(b)); }

class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  uint64_t next() { return s_ = mix(s_); }
  int64_t range(int64_t lo, int64_t hi) {  // inclusive
    return lo + static_cast<int64_t>(next() % static_cast<uint64_t>(hi - lo + 1));
  }
  bool chance(int percent) { return range(0, 99) < percent; }

 private:
  uint64_t s_;
};

enum class Kind { kAllreduce, kGrouped, kAllgather, kBroadcast, kAlltoall, kReducescatter };
inline const char* kindName(Kind k) {
  static const char* names[] = {"allreduce", "grouped",  "allgather",
                                "broadcast", "alltoall", "reducescatter"};
  return names[static_cast<int>(k)];
}

// ---- dtypes (test/c_api_values.h) ----------------------------------------------------------
using kolo_test::decode;
using kolo_test::dtypeSize;
using kolo_test::encode;
using kolo_test::isFloat;

// ---- one op ----------------------------------------------------------------------------------
struct Spec {
  Kind kind = Kind::kAllreduce;
  std::string name;
  uint64_t dataSeed = 0;  // contents (differs per index even for a recurring name)
  kolo_dtype_t dtype = KOLO_FLOAT32;
  kolo_reduce_op_t op = KOLO_SUM;
  double prescale = 1, postscale = 1;
  int set = 0;           // 0 global, 1 and 2 the sets made at start
  int32_t root = 0;      // broadcast: index in the set
  int64_t rows = 1;      // dim 0 (allreduce, broadcast, reducescatter)
  int64_t cols = 1;      // product of the other dims (trailing shape {cols})
  int groupN = 1;        // grouped: tensors in the group (each rows x cols)
  bool largest = false;  // the warm-up's largest op of its kind: every split and gather at max
};

// The value rank `rank` holds at element `i` of op `s` (small integers, by dtype and op).
inline double valueOf(const Spec& s, int rank, int64_t i, int setSize) {
  Rng r(mix(s.dataSeed, mix(static_cast<uint64_t>(rank) + 1, static_cast<uint64_t>(i))));
  if (s.dtype == KOLO_BOOL) return static_cast<double>(r.range(0, 1));
  const bool reducing =
      s.kind == Kind::kAllreduce || s.kind == Kind::kGrouped || s.kind == Kind::kReducescatter;
  const bool isUnsigned = s.dtype == KOLO_UINT8 || s.dtype == KOLO_UINT16;
  if (reducing && s.op == KOLO_PRODUCT) {
    return isUnsigned ? static_cast<double>(r.range(1, 2)) : static_cast<double>(r.range(-1, 2));
  }
  int64_t span = 100;
  if (s.dtype == KOLO_UINT8 || s.dtype == KOLO_INT8) span = 120 / setSize;
  if (s.dtype == KOLO_BFLOAT16) span = 200 / setSize;  // 8 mantissa bits: exact below 256
  if (!reducing) span = s.dtype == KOLO_INT8 ? 127 : s.dtype == KOLO_UINT8 ? 255 : 1000;
  if (s.dtype == KOLO_BFLOAT16 && !reducing) span = 250;
  return isUnsigned ? static_cast<double>(r.range(0, span))
                    : static_cast<double>(r.range(-span / 2, span / 2));
}

// The members of set 1 ([0, size-1) or {0}) and set 2 ([1, size) or {0}).
inline std::vector<int> setMembers(int set, int size) {
  std::vector<int> m;
  if (set == 0) {
    for (int r = 0; r < size; ++r) m.push_back(r);
  } else if (set == 1) {
    for (int r = 0; r < std::max(1, size - 1); ++r) m.push_back(r);
  } else {
    for (int r = size > 1 ? 1 : 0; r < size; ++r) m.push_back(r);
  }
  return m;
}

// alltoall: rows set member `from` sends to set member `to` (0..3).
inline int64_t splitRows(const Spec& s, int from, int to) {
  if (s.largest) return 3;
  return static_cast<int64_t>(
      mix(s.dataSeed, mix(static_cast<uint64_t>(from) * 977 + static_cast<uint64_t>(to))) % 4);
}
// allgather: dim 0 that global rank `rank` contributes (0..4).
inline int64_t gatherRows(const Spec& s, int rank) {
  if (s.largest) return 4;
  return static_cast<int64_t>(mix(s.dataSeed ^ 0x5a5a, static_cast<uint64_t>(rank)) % 5);
}

// Op `index` of `thread`. Half the ops recur under one of 32 names per thread with the same
// kind, dtype and shape (like a training step's gradients: they hit the response cache); the
// rest get a name of their own.
inline Spec makeSpec(uint64_t seed, int thread, int64_t index) {
  const bool recurring = Rng(mix(seed, mix(thread * 1000003ull + index))).chance(50);
  const int64_t key = recurring ? index % 32 : index;
  Rng r(mix(seed ^ (recurring ? 0x7265637572ull : 0x6f6e6365ull),
            mix(static_cast<uint64_t>(thread) * 1000003ull + static_cast<uint64_t>(key))));
  Spec s;
  s.name = "soak." + std::to_string(thread) + (recurring ? ".p" : ".") + std::to_string(key);
  s.dataSeed = mix(seed, mix(static_cast<uint64_t>(thread) << 40 | static_cast<uint64_t>(index)));
  const int64_t k = r.range(0, 99);
  s.kind = k < 45   ? Kind::kAllreduce
           : k < 52 ? Kind::kGrouped
           : k < 67 ? Kind::kAllgather
           : k < 79 ? Kind::kBroadcast
           : k < 89 ? Kind::kAlltoall
                    : Kind::kReducescatter;
  static const kolo_dtype_t dtypes[] = {KOLO_UINT8,   KOLO_INT8,    KOLO_UINT16,  KOLO_INT16,
                                        KOLO_INT32,   KOLO_INT64,   KOLO_FLOAT16, KOLO_BFLOAT16,
                                        KOLO_FLOAT32, KOLO_FLOAT32, KOLO_FLOAT64, KOLO_BOOL};
  s.dtype = dtypes[r.range(0, 11)];
  const int64_t set = r.range(0, 99);
  s.set = set < 70 ? 0 : set < 85 ? 1 : 2;
  // Sizes: mostly small, some medium, a few large (up to 256 Ki elements), some empty.
  const int64_t sz = r.range(0, 99);
  s.cols = sz < 60 ? r.range(1, 64) : sz < 95 ? r.range(65, 4096) : r.range(4097, 1 << 18);
  s.rows = r.range(0, 9) == 0 ? 0 : r.range(1, 4);
  if (s.kind == Kind::kGrouped) s.groupN = static_cast<int>(r.range(2, 4));
  if (s.dtype == KOLO_BOOL) {
    s.op = r.chance(50) ? KOLO_MIN : KOLO_MAX;
  } else {
    static const kolo_reduce_op_t ops[] = {KOLO_SUM, KOLO_SUM, KOLO_AVERAGE,
                                           KOLO_MIN, KOLO_MAX, KOLO_PRODUCT};
    s.op = ops[r.range(0, 5)];
    if (s.op == KOLO_AVERAGE && !isFloat(s.dtype)) s.op = KOLO_SUM;
  }
  if (isFloat(s.dtype) && (s.op == KOLO_SUM || s.op == KOLO_AVERAGE)) {
    static const double scales[] = {0.5, 1.0, 1.0, 2.0};
    s.prescale = scales[r.range(0, 3)];
    s.postscale = scales[r.range(0, 3)];
  }
  s.root = static_cast<int32_t>(r.range(0, 63));  // reduced modulo the set size by the runner
  return s;
}

// The largest op of a kind the generator can make (grow-only staging buffers reach their final
// size on it, so memory measured after it can only grow through a leak).
inline Spec largestSpec(uint64_t seed, Kind kind) {
  Spec s;
  s.kind = kind;
  s.name = std::string("soak.largest.") + kindName(kind);
  s.dataSeed = mix(seed, 0x6c617267ull + static_cast<uint64_t>(kind));
  s.dtype = KOLO_FLOAT64;
  s.rows = 4;
  s.cols = 1 << 18;
  s.groupN = 4;
  s.largest = true;
  return s;
}

}  // namespace soak
