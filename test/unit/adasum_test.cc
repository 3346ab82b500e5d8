// SPDX-License-Identifier: Apache-2.0
// Adasum allreduce (ops/adasum.h) over loopback thread ranks, 1 to 8 ranks (powers of two and
// the folded counts in between), checked against a direct double-precision evaluation of the
// formula over the same tree: fold rank p+i into rank i, then pairs (0,1), (2,3), ..., then
// pairs of pairs. Buffers hold several tensors (a fused batch): products and norms are per
// tensor, which a tensor identical on every rank shows exactly (its Adasum is itself). Then
// Horovod's stability tests: parallel vectors of tiny (float16 subnormal), huge (float16 near
// 65504) and widely spread magnitudes average in every dtype, at 2, 3 and 4 ranks, with the
// small-norm bound sqrt(DBL_MIN) on the squared norm that Horovod uses.
#include <catch2/catch.hpp>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <thread>
#include <vector>

#include "ops/adasum.h"
#include "kernels/reduce_cpu.h"
#include "transport/loopback/loopback_transport.h"
#include "test/unit/loopback_ranks.h"

using namespace kolo;
using namespace std::chrono_literals;

namespace {

using kolo::testing::requireAllOk;
using kolo::testing::runRanks;

using Vec = std::vector<double>;

// The formula, written out independently of ops/adasum.cc: a := adasum(a, b) per tensor.
void refCombine(Vec* a, const Vec& b, const std::vector<size_t>& counts) {
  size_t off = 0;
  for (size_t c : counts) {
    double dot = 0, aa = 0, bb = 0;
    for (size_t i = off; i < off + c; ++i) {
      dot += (*a)[i] * b[i];
      aa += (*a)[i] * (*a)[i];
      bb += b[i] * b[i];
    }
    // Horovod's bound: the squared norm against sqrt(DBL_MIN).
    const double ca = aa >= std::sqrt(DBL_MIN) ? 1 - dot / (2 * aa) : 1;
    const double cb = bb >= std::sqrt(DBL_MIN) ? 1 - dot / (2 * bb) : 1;
    for (size_t i = off; i < off + c; ++i) (*a)[i] = ca * (*a)[i] + cb * b[i];
    off += c;
  }
}

Vec refAdasum(std::vector<Vec> g, const std::vector<size_t>& counts) {
  const int n = static_cast<int>(g.size());
  int p = 1;
  while (p * 2 <= n) p *= 2;
  for (int i = 0; p + i < n; ++i) refCombine(&g[i], g[p + i], counts);
  for (int d = 1; d < p; d *= 2) {
    for (int i = 0; i < p; i += 2 * d) refCombine(&g[i], g[i + d], counts);
  }
  return g[0];
}

double toDouble(const std::vector<uint8_t>& buf, size_t i, DataType dt) {
  uint16_t h;
  switch (dt) {
    case DataType::kFloat16:
      std::memcpy(&h, buf.data() + 2 * i, 2);
      return kernels::halfToFloat(h);
    case DataType::kBFloat16:
      std::memcpy(&h, buf.data() + 2 * i, 2);
      return kernels::bfloat16ToFloat(h);
    case DataType::kFloat32: {
      float f;
      std::memcpy(&f, buf.data() + 4 * i, 4);
      return f;
    }
    default: {
      double d;
      std::memcpy(&d, buf.data() + 8 * i, 8);
      return d;
    }
  }
}

void store(std::vector<uint8_t>* buf, size_t i, DataType dt, double v) {
  uint16_t h;
  switch (dt) {
    case DataType::kFloat16:
      h = kernels::floatToHalf(static_cast<float>(v));
      std::memcpy(buf->data() + 2 * i, &h, 2);
      break;
    case DataType::kBFloat16:
      h = kernels::floatToBfloat16(static_cast<float>(v));
      std::memcpy(buf->data() + 2 * i, &h, 2);
      break;
    case DataType::kFloat32: {
      float f = static_cast<float>(v);
      std::memcpy(buf->data() + 4 * i, &f, 4);
      break;
    }
    default:
      std::memcpy(buf->data() + 8 * i, &v, 8);
  }
}

double tolerance(DataType dt) {
  switch (dt) {
    case DataType::kFloat16: return 2e-2;
    case DataType::kBFloat16: return 1e-1;
    case DataType::kFloat32: return 1e-5;
    default: return 1e-11;
  }
}

// Runs Adasum over n ranks on buffers of `counts` tensors; tensor `same` (if < counts.size())
// holds the same values on every rank. Checks every rank against the reference.
void checkAdasum(int n, DataType dt, const std::vector<size_t>& counts, size_t same) {
  size_t total = 0;
  for (size_t c : counts) total += c;
  const size_t es = sizeOf(dt);
  std::vector<std::vector<uint8_t>> bufs(n, std::vector<uint8_t>(total * es));
  std::vector<Vec> inputs(n, Vec(total));
  std::mt19937 rng(1234 + n);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  for (int r = 0; r < n; ++r) {
    size_t off = 0;
    for (size_t t = 0; t < counts.size(); ++t) {
      for (size_t i = off; i < off + counts[t]; ++i) {
        // Tensor t on rank r: a shared direction plus a per-rank part, so the coefficients
        // differ from tensor to tensor and from level to level.
        const double shared = std::sin(0.1 * static_cast<double>(i) + static_cast<double>(t));
        const double v = t == same ? shared : shared * 0.5 * static_cast<double>(t % 3) + u(rng);
        store(&bufs[r], i, dt, v);
        inputs[r][i] = toDouble(bufs[r], i, dt);  // the rounded input the algorithm sees
      }
      off += counts[t];
    }
  }
  const Vec expect = refAdasum(inputs, counts);
  auto results = runRanks(
      n, [&](Transport& t, int r) { return ops::adasumAllreduce(t, bufs[r].data(), counts, dt); });
  for (int r = 0; r < n; ++r) {
    INFO("rank " << r << " of " << n << ", " << toString(dt) << ": " << results[r].toString());
    REQUIRE(results[r].isOk());
    REQUIRE(std::memcmp(bufs[r].data(), bufs[0].data(), total * es) == 0);  // same everywhere
  }
  double worst = 0;
  size_t off = 0;
  for (size_t t = 0; t < counts.size(); ++t) {
    for (size_t i = off; i < off + counts[t]; ++i) {
      const double got = toDouble(bufs[0], i, dt);
      worst = std::max(worst, std::fabs(got - expect[i]) / (1.0 + std::fabs(expect[i])));
      if (t == same) {
        INFO("tensor " << t << " is the same on every rank, element " << i);
        REQUIRE(got == Approx(inputs[0][i]).margin(tolerance(dt)));
      }
    }
    off += counts[t];
  }
  INFO(n << " ranks, " << toString(dt) << ": worst relative error " << worst);
  CHECK(worst <= tolerance(dt));
}

// ---- Horovod's stability tests (test/parallel/test_adasum_pytorch.py, test_stability and
// test_stability_2): every rank holds the same direction scaled by its own factor, so all
// vectors are parallel. adasum(x, k x) = (1 - k/2) x + (1 - 1/(2k)) k x = (x + k x) / 2: the
// average, whatever the magnitudes. Over kolo's tree that is a weighted average: weight 1/p per
// core rank, split in halves between rank i and rank p + i when p + i is folded into i. Here the
// direction has small integer entries (multiples of 4) and the factors are powers of two, so
// every input, and the averages, are exact in the dtype: float16 inputs can be subnormal.

// The weight of each rank's vector in the Adasum of n parallel vectors.
Vec treeWeights(int n) {
  int p = 1;
  while (p * 2 <= n) p *= 2;
  Vec w(n, 1.0 / p);
  for (int i = 0; p + i < n; ++i) w[i] = w[p + i] = 0.5 / p;
  return w;
}

double epsilonOf(DataType dt) {
  switch (dt) {
    case DataType::kFloat16: return std::ldexp(1.0, -10);
    case DataType::kBFloat16: return std::ldexp(1.0, -7);
    case DataType::kFloat32: return std::ldexp(1.0, -23);
    default: return std::ldexp(1.0, -52);
  }
}

// Rank r holds scales[r % scales.size()] * d, d a fixed direction of `count` entries, signed
// multiples of 4 between 8 and 60. Checks that every rank gets the same buffer, finite, equal
// to the tree's weighted average within 4 epsilons (normwise; Horovod's test allows 100).
void checkParallel(int n, DataType dt, const Vec& scales, size_t count = 64) {
  const size_t es = sizeOf(dt);
  Vec dir(count);
  for (size_t i = 0; i < count; ++i) {
    dir[i] = 4.0 * static_cast<double>(2 + (i * 7) % 14) * (i % 3 == 1 ? -1.0 : 1.0);
  }
  std::vector<std::vector<uint8_t>> bufs(n, std::vector<uint8_t>(count * es));
  std::vector<Vec> inputs(n, Vec(count));
  for (int r = 0; r < n; ++r) {
    for (size_t i = 0; i < count; ++i) {
      store(&bufs[r], i, dt, scales[r % scales.size()] * dir[i]);
      inputs[r][i] = toDouble(bufs[r], i, dt);
      REQUIRE(inputs[r][i] == scales[r % scales.size()] * dir[i]);  // exact in dt
    }
  }
  const Vec w = treeWeights(n);
  Vec expect(count, 0.0);
  for (int r = 0; r < n; ++r) {
    for (size_t i = 0; i < count; ++i) expect[i] += w[r] * inputs[r][i];
  }
  auto results = runRanks(n, [&](Transport& t, int r) {
    return ops::adasumAllreduce(t, bufs[r].data(), {count}, dt);
  });
  double diff = 0, norm = 0;
  for (size_t i = 0; i < count; ++i) {
    const double got = toDouble(bufs[0], i, dt);
    INFO(toString(dt) << " element " << i << ": got " << got << ", expected " << expect[i]);
    REQUIRE(std::isfinite(got));
    // Scaled by the largest factor so that neither sum overflows or underflows.
    const double s = std::fabs(expect[0]);
    diff += ((got - expect[i]) / s) * ((got - expect[i]) / s);
    norm += (expect[i] / s) * (expect[i] / s);
  }
  for (int r = 0; r < n; ++r) {
    INFO("rank " << r << " of " << n << ", " << toString(dt) << ": " << results[r].toString());
    REQUIRE(results[r].isOk());
    REQUIRE(std::memcmp(bufs[r].data(), bufs[0].data(), count * es) == 0);
  }
  const double rel = std::sqrt(diff / norm);
  INFO(n << " ranks, " << toString(dt) << ": relative error " << rel << " (epsilon "
         << epsilonOf(dt) << ")");
  CHECK(rel <= 4 * epsilonOf(dt));
}

// Powers of two from 2^lo, one per rank.
Vec powersOfTwo(int lo, int step) {
  return {std::ldexp(1.0, lo), std::ldexp(1.0, lo + step), std::ldexp(1.0, lo + 2 * step),
          std::ldexp(1.0, lo + 3 * step)};
}

}  // namespace

TEST_CASE("adasum: the small-norm bound is Horovod's, sqrt(DBL_MIN) on the squared norm") {
  CHECK(ops::kAdasumMinNormSq == std::sqrt(DBL_MIN));
  double ca = 0, cb = 0;
  // At the bound a vector is combined by the formula: parallel (dot = |a|^2) gives 1/2.
  ops::adasumCoefficients(ops::kAdasumMinNormSq, ops::kAdasumMinNormSq, ops::kAdasumMinNormSq,
                          &ca, &cb);
  CHECK(ca == 0.5);
  CHECK(cb == 0.5);
  // Just below it, the coefficient is 1 (a plain sum, as for a zero vector).
  const double below = std::nextafter(ops::kAdasumMinNormSq, 0.0);
  ops::adasumCoefficients(below, below, 1.0, &ca, &cb);
  CHECK(ca == 1.0);
  CHECK(cb == 1.0 - below / 2);
  // A norm of 1e-5 (squared 1e-10, below the old 1e-8 bound) is combined: e + e = e.
  std::vector<float> a = {1e-5f, 0.0f}, b = a;
  ops::adasumCombine(a.data(), b.data(), {2}, DataType::kFloat32);
  CHECK(a[0] == 1e-5f);
  // float64 vectors whose squared norm underflows the bound are summed, as in Horovod.
  std::vector<double> x = {std::ldexp(1.0, -300)}, y = x;
  ops::adasumCombine(x.data(), y.data(), {1}, DataType::kFloat64);
  CHECK(x[0] == std::ldexp(1.0, -299));
}

TEST_CASE("adasum: parallel vectors of tiny, huge and spread magnitudes average (Horovod)") {
  struct Case {
    const char* what;
    DataType dt;
    Vec scales;
  };
  // Directions have entries 8..60 in magnitude (2^3 to 2^6).
  const Case cases[] = {
      // float16: subnormals (2^-24 is the smallest), values up to 60 * 2^10 = 61440 near 65504,
      // and both at once (a ratio of 2^34).
      {"float16 subnormal", DataType::kFloat16, powersOfTwo(-24, 1)},
      {"float16 huge", DataType::kFloat16, powersOfTwo(10, -1)},
      {"float16 spread", DataType::kFloat16, {std::ldexp(1.0, -24), std::ldexp(1.0, 10),
                                             -std::ldexp(1.0, -8), std::ldexp(1.0, 2)}},
      // bfloat16 and float32 share float's exponent range: FLT_MIN is 2^-126, FLT_MAX ~2^128.
      {"bfloat16 tiny", DataType::kBFloat16, powersOfTwo(-126, 1)},
      {"bfloat16 huge", DataType::kBFloat16, powersOfTwo(121, -1)},
      {"bfloat16 spread", DataType::kBFloat16, {std::ldexp(1.0, -126), std::ldexp(1.0, 121),
                                               -std::ldexp(1.0, -40), std::ldexp(1.0, 60)}},
      {"float32 tiny", DataType::kFloat32, powersOfTwo(-126, 1)},
      {"float32 huge", DataType::kFloat32, powersOfTwo(121, -1)},
      {"float32 spread", DataType::kFloat32, {std::ldexp(1.0, -126), std::ldexp(1.0, 121),
                                             -std::ldexp(1.0, -40), std::ldexp(1.0, 60)}},
      // float64: the squared norm must stay in double's range, above 2^-511 (the bound) and
      // below 2^1024, so |x| from about 2^-255 to 2^500.
      {"float64 tiny", DataType::kFloat64, powersOfTwo(-256, 1)},
      {"float64 huge", DataType::kFloat64, powersOfTwo(490, -1)},
      {"float64 spread", DataType::kFloat64, {std::ldexp(1.0, -256), std::ldexp(1.0, 490),
                                             -std::ldexp(1.0, -100), std::ldexp(1.0, 200)}},
  };
  for (const Case& c : cases) {
    for (int n : {2, 3, 4}) {
      INFO(c.what << " at " << n << " ranks");
      checkParallel(n, c.dt, c.scales);
    }
  }
}

TEST_CASE("adasum: two vectors combine by the formula") {
  // Orthogonal vectors add; equal vectors average; opposite vectors cancel; a zero vector leaves
  // the other one unchanged (as a joined rank's zeros must). Last: a.b 2, |a|^2 4, |b|^2 2, so
  // (1 - 2/8) (2, 0) + (1 - 2/4) (1, 1) = (2, 0.5).
  struct Case {
    Vec a, b, expect;
  };
  const Case cases[] = {{{1, 0}, {0, 1}, {1, 1}},
                        {{1, 2}, {1, 2}, {1, 2}},
                        {{3, 4}, {-3, -4}, {0, 0}},
                        {{3, 4}, {0, 0}, {3, 4}},
                        {{2, 0}, {1, 1}, {2, 0.5}}};
  for (const Case& c : cases) {
    std::vector<double> a = c.a, b = c.b;
    ops::adasumCombine(a.data(), b.data(), {2}, DataType::kFloat64);
    CHECK(a[0] == Approx(c.expect[0]).margin(1e-12));
    CHECK(a[1] == Approx(c.expect[1]).margin(1e-12));
  }
}

TEST_CASE("adasum: allreduce matches the reference tree at 1 to 8 ranks") {
  const std::vector<size_t> counts = {0, 1, 5, 37, 1000, 3};
  for (int n : {1, 2, 3, 4, 5, 6, 7, 8}) {
    for (DataType dt : {DataType::kFloat16, DataType::kBFloat16, DataType::kFloat32,
                        DataType::kFloat64}) {
      checkAdasum(n, dt, counts, 4);
    }
  }
}

TEST_CASE("adasum: one tensor, and buffers shorter than the rank count") {
  for (int n : {2, 3, 4, 8}) {
    checkAdasum(n, DataType::kFloat32, {4097}, 99);
    checkAdasum(n, DataType::kFloat64, {1}, 99);
    checkAdasum(n, DataType::kFloat64, {2, 0, 1}, 99);
  }
}

TEST_CASE("adasum: rejects integer types and empty buffers are a no-op") {
  int32_t x[2] = {1, 2};
  auto results = runRanks(2, [&](Transport& t, int) {
    return ops::adasumAllreduce(t, x, {2}, DataType::kInt32);
  });
  for (const Status& s : results) {
    CHECK(s.code() == ErrorCode::kInvalidArgument);
    CHECK_THAT(s.message(), Catch::Contains("int32"));
  }
  results = runRanks(3, [&](Transport& t, int) {
    return ops::adasumAllreduce(t, nullptr, {0, 0}, DataType::kFloat32);
  });
  for (const Status& s : results) CHECK(s.isOk());
}
