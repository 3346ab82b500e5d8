// SPDX-License-Identifier: Apache-2.0
// Adasum: the adaptive summation of Maleki et al. (2020), Horovod's op=Adasum, as an in-place
// allreduce over a Transport's point-to-point API. The algorithm and its cost are described at
// the top of ops/adasum.cc.
//
// Semantics. Two gradients a and b combine as
//     adasum(a, b) = (1 - a.b / (2 |a|^2)) a + (1 - a.b / (2 |b|^2)) b
// where a coefficient is 1 when its vector's squared norm |a|^2, accumulated in double, is below
// kAdasumMinNormSq = sqrt(DBL_MIN) ~ 1.5e-154: Horovod's rule, the same quantity and bound
// (horovod/common/ops/adasum/adasum.h compares `anormsq >= sqrt(DBL_MIN)`). So a zero vector
// leaves the other unchanged, and any vector whose norm is at least ~1.2e-77 is combined by the
// formula: float16 subnormals (|x| >= 2^-24) and float32/bfloat16 values down to FLT_MIN always
// are. The products and norms are per tensor: a buffer holding several tensors back to back (a
// fused batch) is described by `counts`, and each tensor gets its own coefficients. The n ranks
// combine as a binary tree:
//   - with p the largest power of two <= n, rank p + i (i < n - p) is folded into rank i first:
//     h_i = adasum(g_i, g_{p+i}); the other ranks below p keep h_i = g_i;
//   - then level 1 combines (h_0, h_1), (h_2, h_3), ...; level 2 combines the results of
//     (0,1) and (2,3), and so on up to one vector, which every rank receives.
// For n a power of two this is exactly Horovod's tree; Horovod refuses other counts, kolo folds.
// Dot products and norms accumulate in double for every dtype (each element widened to double
// first, as Horovod does), so float16 values near 65504 or subnormal, and float32 near FLT_MAX,
// neither overflow nor underflow there. The combination is computed in double for every dtype
// too (float16/bfloat16 results rounded to float, then to nearest-even), so a coefficient as
// large as |b|/|a| of two bfloat16 vectors of widely spread magnitudes does not overflow. Adasum
// is defined for float16, bfloat16, float32 and float64 only (kInvalidArgument otherwise).
//
// Threads/blocking: as every collective in ops/ (collectives.h): all ranks of `t` call it with
// the same counts and dtype, on the transport's one user thread; each wait is bounded by
// t.deadlineFromNow(), so a lost peer gives kPeerLost / kTimeout naming it.
#pragma once

#include <cstddef>
#include <vector>

#include "base/status.h"
#include "base/types.h"
#include "transport/transport.h"

namespace kolo::ops {

// Below this squared norm (a double, |a|^2 itself, not |a|) a vector's coefficient is 1:
// sqrt(DBL_MIN) = 2^-511, Horovod's bound, compared as Horovod does (`normSq >= bound`).
constexpr double kAdasumMinNormSq = 1.4916681462400413e-154;

// In place: `data` holds sum(counts) elements of dtype, tensor after tensor; on return every
// rank holds the Adasum of all ranks' buffers (tensor by tensor).
Status adasumAllreduce(Transport& t, void* data, const std::vector<size_t>& counts,
                       DataType dtype);

// a := adasum(a, b) for each tensor of the buffers (both hold sum(counts) elements). The local
// building block of the algorithm; exposed for the tests' reference. dtype must be a float type.
void adasumCombine(void* a, const void* b, const std::vector<size_t>& counts, DataType dtype);

// The coefficients of one pair from its dot product and squared norms (the rule above).
void adasumCoefficients(double dot, double aNormSq, double bNormSq, double* aCoeff,
                        double* bCoeff);

}  // namespace kolo::ops
