// SPDX-License-Identifier: Apache-2.0
// Adasum allreduce: vector-halving, distance-doubling (VHDD), as Horovod's Adasum (the semantics
// are in ops/adasum.h).
//
// Why not the ring: the Adasum of two vectors needs their dot product and norms before any
// element of the result can be written, and the tree of pairs must combine groups of ranks in a
// fixed order. VHDD follows that tree exactly: at level d (d = 1, 2, 4, ..., p/2) rank r works
// with rank r ^ d, and the two halves of the tree that meet at that level are the groups of d
// ranks on either side of bit d.
//
// Core (p = a power of two ranks). Every rank owns an element range [lo, hi) of the buffer,
// initially all of it; r and r ^ d own the same range when they meet.
//  1. Reduce phase, one step per level d = 1, 2, ..., p/2: split the range at
//     mid = lo + (hi - lo) / 2. The "left" rank (bit d of r clear) keeps [lo, mid), the right
//     one [mid, hi); each sends the half it gives up to its peer and receives the peer's copy
//     of the half it keeps. Now each rank holds, on its kept half, a piece of the left group's
//     vector L and the same piece of the right group's vector R. It computes, per tensor, the
//     partial L.R, |L|^2 and |R|^2 over the piece (double accumulators). The 2d ranks of the
//     group (same bits above d) hold disjoint pieces that tile the whole buffer, so a sum over
//     those 2d ranks (recursive doubling: log2(2d) exchanges of 3 doubles per tensor) gives the
//     full per-tensor products. Each rank then writes cL * L + cR * R over its kept half with the
//     Adasum coefficients (adasum.h) and owns that half from then on.
//  2. Gather phase, levels d = p/2, ..., 1: each rank swaps its owned range with r ^ d, which
//     owns the other half of the range they split at that level, so the ranges double back to
//     the whole buffer, now holding the result on every rank.
// Every rank of a group gets bitwise the same sums (each recursive-doubling step adds the same
// two partials on both sides, and IEEE addition commutes), hence the same coefficients, and the
// combination cL*L + cR*R is evaluated identically by both owners' arithmetic.
//
// Other rank counts (Horovod refuses them): with p the largest power of two <= n, rank p + i
// first sends its whole buffer to rank i, which combines the two locally (adasum(g_i, g_{p+i}),
// no extra reduction needed since it holds both whole vectors), the p core ranks run VHDD, and
// rank i sends the result back to rank p + i. So the tree is: fold, then the power-of-two tree.
//
// Bytes moved per core rank for N bytes: the reduce phase sends N/2 + N/4 + ... = N (p-1)/p and
// the gather phase the same, so 2 N (p-1)/p each way, like the ring, in 2 log2(p) large steps
// plus log2(p) (log2(p) + 1) / 2 small exchanges of 24 bytes per tensor. The fold adds N each way
// for the ranks involved (rank i and p + i), and two steps. Scratch: N/2 (N on folding ranks).
#include "ops/adasum.h"

#include <algorithm>
#include <cfloat>
#include <cstdint>
#include <cstring>
#include <string>

#include "kernels/reduce_cpu.h"
#include "ops/ring_internal.h"

namespace kolo::ops {
namespace {

constexpr uint32_t kTag = internal::kTagAdasum;

// ---- element kernels ---------------------------------------------------------------------------
// {a.b, a.a, b.b} over n elements of T, each read as a double through `load`: every product and
// sum is in double, so float16 65504^2 or 2^-24 * 2^-24 are exact and FLT_MAX^2 is finite.
template <typename T, typename Load>
void dotsOf(const T* a, const T* b, size_t n, Load load, double* out) {
  double dot = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < n; ++i) {
    const double x = load(a[i]), y = load(b[i]);
    dot += x * y;
    aa += x * x;
    bb += y * y;
  }
  out[0] = dot;
  out[1] = aa;
  out[2] = bb;
}

template <typename T>
void scaledAdd(T* a, double ca, const T* b, double cb, size_t n) {
  for (size_t i = 0; i < n; ++i) a[i] = static_cast<T>(ca * a[i] + cb * b[i]);
}

// In double, then rounded to float and to the 16-bit type: the coefficient of the smaller of two
// parallel vectors is about -|b|/|a|/2, beyond FLT_MAX for bfloat16 vectors 2^128 apart in norm
// (a float coefficient would turn the result into -inf).
template <float (*Load)(uint16_t), uint16_t (*Store)(float)>
void scaledAdd16(uint16_t* a, double ca, const uint16_t* b, double cb, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    a[i] = Store(static_cast<float>(ca * static_cast<double>(Load(a[i])) +
                                    cb * static_cast<double>(Load(b[i]))));
  }
}

// out = {a.b, a.a, b.b} over n elements.
void partialDots(const uint8_t* a, const uint8_t* b, size_t n, DataType dt, double* out) {
  switch (dt) {
    case DataType::kFloat16:
      return dotsOf(reinterpret_cast<const uint16_t*>(a), reinterpret_cast<const uint16_t*>(b), n,
                    kernels::halfToFloat, out);
    case DataType::kBFloat16:
      return dotsOf(reinterpret_cast<const uint16_t*>(a), reinterpret_cast<const uint16_t*>(b), n,
                    kernels::bfloat16ToFloat, out);
    case DataType::kFloat32:
      return dotsOf(reinterpret_cast<const float*>(a), reinterpret_cast<const float*>(b), n,
                    [](float v) { return static_cast<double>(v); }, out);
    default:
      return dotsOf(reinterpret_cast<const double*>(a), reinterpret_cast<const double*>(b), n,
                    [](double v) { return v; }, out);
  }
}

// a = ca * a + cb * b over n elements.
void combineInto(uint8_t* a, double ca, const uint8_t* b, double cb, size_t n, DataType dt) {
  switch (dt) {
    case DataType::kFloat16:
      return scaledAdd16<kernels::halfToFloat, kernels::floatToHalf>(
          reinterpret_cast<uint16_t*>(a), ca, reinterpret_cast<const uint16_t*>(b), cb, n);
    case DataType::kBFloat16:
      return scaledAdd16<kernels::bfloat16ToFloat, kernels::floatToBfloat16>(
          reinterpret_cast<uint16_t*>(a), ca, reinterpret_cast<const uint16_t*>(b), cb, n);
    case DataType::kFloat32:
      return scaledAdd(reinterpret_cast<float*>(a), ca, reinterpret_cast<const float*>(b), cb, n);
    default:
      return scaledAdd(reinterpret_cast<double*>(a), ca, reinterpret_cast<const double*>(b), cb,
                       n);
  }
}

// ---- buffer layout and messages ----------------------------------------------------------------
// fn(i, begin, end) for every tensor i that intersects [lo, hi), with the intersection in
// buffer element positions.
template <class Fn>
void forEachPiece(const std::vector<size_t>& counts, size_t lo, size_t hi, Fn fn) {
  size_t start = 0;
  for (size_t i = 0; i < counts.size() && start < hi; ++i) {
    const size_t end = start + counts[i];
    const size_t b = std::max(start, lo), e = std::min(end, hi);
    if (b < e) fn(i, b, e);
    start = end;
  }
}

// Sends and receives with one peer; empty directions are skipped on both ends (both compute
// the same lengths).
Status swapWith(Transport& t, int peer, const void* send, size_t sendBytes, void* recv,
                size_t recvBytes) {
  std::vector<P2POp> ops;
  if (recvBytes > 0) ops.push_back(recvOp(peer, kTag, recv, recvBytes));
  if (sendBytes > 0) ops.push_back(sendOp(peer, kTag, send, sendBytes));
  return t.exchange(ops);
}

// Sums v over the 2d ranks that share r's bits above bit d (recursive doubling).
Status groupSum(Transport& t, int r, int d, std::vector<double>* v, std::vector<double>* tmp) {
  const size_t bytes = v->size() * sizeof(double);
  for (int k = 1; k <= d; k <<= 1) {
    KOLO_RETURN_IF_ERROR(swapWith(t, r ^ k, v->data(), bytes, tmp->data(), bytes));
    for (size_t i = 0; i < v->size(); ++i) (*v)[i] += (*tmp)[i];
  }
  return Status::ok();
}

}  // namespace

static_assert(kAdasumMinNormSq * kAdasumMinNormSq == DBL_MIN, "the bound is sqrt(DBL_MIN)");

void adasumCoefficients(double dot, double aNormSq, double bNormSq, double* aCoeff,
                        double* bCoeff) {
  *aCoeff = aNormSq >= kAdasumMinNormSq ? 1.0 - dot / aNormSq * 0.5 : 1.0;
  *bCoeff = bNormSq >= kAdasumMinNormSq ? 1.0 - dot / bNormSq * 0.5 : 1.0;
}

void adasumCombine(void* a, const void* b, const std::vector<size_t>& counts, DataType dtype) {
  const size_t es = sizeOf(dtype);
  auto* pa = static_cast<uint8_t*>(a);
  const auto* pb = static_cast<const uint8_t*>(b);
  for (size_t n : counts) {
    double q[3], ca, cb;
    partialDots(pa, pb, n, dtype, q);
    adasumCoefficients(q[0], q[1], q[2], &ca, &cb);
    combineInto(pa, ca, pb, cb, n, dtype);
    pa += n * es;
    pb += n * es;
  }
}

Status adasumAllreduce(Transport& t, void* data, const std::vector<size_t>& counts,
                       DataType dtype) {
  KOLO_REQUIRE(isFloatingPoint(dtype), kInvalidArgument,
               std::string("adasum: ") + toString(dtype) +
                   " is not supported (Adasum needs float16, bfloat16, float32 or float64)");
  size_t total = 0;
  for (size_t c : counts) total += c;
  KOLO_REQUIRE(data != nullptr || total == 0, kInvalidArgument, "adasum: null buffer");
  const int n = t.size();
  if (n <= 1 || total == 0) return Status::ok();
  const int r = t.rank();
  int p = 1;
  while (p * 2 <= n) p *= 2;
  const size_t es = sizeOf(dtype), allBytes = total * es;
  uint8_t* base = static_cast<uint8_t*>(data);

  if (r >= p) {  // folded into rank r - p: hand over the vector, get the result back
    KOLO_RETURN_IF_ERROR(swapWith(t, r - p, base, allBytes, nullptr, 0));
    return swapWith(t, r - p, nullptr, 0, base, allBytes);
  }
  const bool folding = r + p < n;
  std::vector<uint8_t> scratch(folding ? allBytes : (total - total / 2) * es);
  if (folding) {
    KOLO_RETURN_IF_ERROR(swapWith(t, r + p, nullptr, 0, scratch.data(), allBytes));
    adasumCombine(base, scratch.data(), counts, dtype);
  }

  std::vector<double> dots(3 * counts.size()), tmp(dots.size());
  std::vector<std::pair<size_t, size_t>> before;  // the owned range before each level
  size_t lo = 0, hi = total;
  for (int d = 1; d < p; d <<= 1) {
    const bool left = (r & d) == 0;
    const size_t mid = lo + (hi - lo) / 2;
    const size_t keepLo = left ? lo : mid, keepHi = left ? mid : hi;
    const size_t giveLo = left ? mid : lo, giveHi = left ? hi : mid;
    before.emplace_back(lo, hi);
    KOLO_RETURN_IF_ERROR(swapWith(t, r ^ d, base + giveLo * es, (giveHi - giveLo) * es,
                                  scratch.data(), (keepHi - keepLo) * es));
    const uint8_t* theirs = scratch.data();
    std::fill(dots.begin(), dots.end(), 0.0);
    // Slots per tensor: {L.R, |L|^2, |R|^2} whichever side this rank is on.
    forEachPiece(counts, keepLo, keepHi, [&](size_t i, size_t b, size_t e) {
      double q[3];
      partialDots(base + b * es, theirs + (b - keepLo) * es, e - b, dtype, q);
      dots[3 * i] = q[0];
      dots[3 * i + 1] = left ? q[1] : q[2];
      dots[3 * i + 2] = left ? q[2] : q[1];
    });
    KOLO_RETURN_IF_ERROR(groupSum(t, r, d, &dots, &tmp));
    forEachPiece(counts, keepLo, keepHi, [&](size_t i, size_t b, size_t e) {
      double cl, cr;
      adasumCoefficients(dots[3 * i], dots[3 * i + 1], dots[3 * i + 2], &cl, &cr);
      combineInto(base + b * es, left ? cl : cr, theirs + (b - keepLo) * es, left ? cr : cl,
                  e - b, dtype);
    });
    lo = keepLo;
    hi = keepHi;
  }
  for (int d = p / 2, level = static_cast<int>(before.size()) - 1; d >= 1; d >>= 1, --level) {
    const size_t plo = before[level].first, phi = before[level].second;
    const bool left = (r & d) == 0;
    const size_t otherLo = left ? hi : plo, otherHi = left ? phi : lo;
    KOLO_RETURN_IF_ERROR(swapWith(t, r ^ d, base + lo * es, (hi - lo) * es,
                                  base + otherLo * es, (otherHi - otherLo) * es));
    lo = plo;
    hi = phi;
  }
  if (folding) KOLO_RETURN_IF_ERROR(swapWith(t, r + p, base, allBytes, nullptr, 0));
  return Status::ok();
}

}  // namespace kolo::ops
