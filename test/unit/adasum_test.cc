// SPDX-License-Identifier: Apache-2.0
// Adasum allreduce (ops/adasum.h) over loopback thread ranks, 1 to 8 ranks (powers of two and
// the folded counts in between), checked against a direct double-precision evaluation of the
// formula over the same tree: fold rank p+i into rank i, then pairs (0,1), (2,3), ..., then
// pairs of pairs. Buffers hold several tensors (a fused batch): products and norms are per
// tensor, which a tensor identical on every rank shows exactly (its Adasum is itself).
#include <catch2/catch.hpp>
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
    const double ca = aa >= 1e-8 ? 1 - dot / (2 * aa) : 1;
    const double cb = bb >= 1e-8 ? 1 - dot / (2 * bb) : 1;
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

}  // namespace

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
