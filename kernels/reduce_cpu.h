// SPDX-License-Identifier: Apache-2.0
// Element-wise reductions and scaling on host memory, for every DataType x ReduceOp.
//
// Semantics (shared by the ring algorithms, fusion and the tests' reference):
//  - kSum and kAverage both add (the division of AVERAGE happens later as a postscale).
//  - kMin/kMax: a NaN in either input gives NaN (NaN propagates, as in torch). kProduct
//    multiplies. Integer arithmetic wraps modulo 2^bits.
//  - bool: sum/max = logical OR, min/product = logical AND; kBitAnd = bitwise AND (ints, bool).
//  - float16/bfloat16 are converted to float, combined, and rounded back to nearest-even. fp16
//    uses the CPU's F16C conversions where it has them (with AVX2), bitwise the same results;
//    KOLO_DISABLE_F16C=1 in the environment keeps the portable path (for tests and comparison).
//  - Scaling: floats multiply in their own precision (fp16/bf16 via float); integers multiply in
//    double and truncate toward zero like Horovod (3 * 0.5 = 1, -3 * 0.5 = -1), saturating at
//    the type's range (NaN becomes 0). bool is unchanged by scaling.
// Thread safety: pure functions. Hot loops are written so GCC emits SIMD at the default -O3
// used for this file (no -march=native); bench/ checks the throughput.
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/types.h"

namespace kolo::kernels {

// dst[i] = op(dst[i], src[i]) for i in [0, count). dst and src may not overlap partially.
void reduceInto(void* dst, const void* src, size_t count, DataType dtype, ReduceOp op);

// dst[i] = op(a[i], b[i]); dst may alias a or b.
void reduce3(void* dst, const void* a, const void* b, size_t count, DataType dtype, ReduceOp op);

// data[i] *= factor. No-op when factor == 1.0.
void scaleInPlace(void* data, size_t count, DataType dtype, double factor);

// The identity of op for dtype: the element x with op(x, v) == v for every v. 0 for kSum,
// kAverage and kAdasum (a zero vector has coefficient 1); for kMin the type's largest value
// (+inf for floats), for kMax its lowest (-inf), 1 for kProduct, all bits set for kBitAnd; bool:
// true for kMin/kProduct/kBitAnd (AND), false for kSum/kMax (OR). A joined rank contributes it.
// identityElement writes the element's bytes to out (room for 8) and returns the element size.
size_t identityElement(DataType dtype, ReduceOp op, unsigned char out[8]);
// data[i] = identity of op for i in [0, count).
void fillIdentity(void* data, size_t count, DataType dtype, ReduceOp op);
// Whether zeros are op's identity (sum, average, Adasum): no fillIdentity needed over zeros.
inline bool zeroIsIdentity(ReduceOp op) {
  return op != ReduceOp::kMin && op != ReduceOp::kMax && op != ReduceOp::kProduct &&
         op != ReduceOp::kBitAnd;
}

// The factor applied after the reduction: postscale, divided by the set size for kAverage.
// Divided, not multiplied by 1/n, as Horovod computes it (postscale_factor /= size): the two
// differ in the last bit (7 * (1/3) < 7/3), which truncation can turn into a whole unit.
inline double averagedPostscale(double postscale, ReduceOp op, int setSize) {
  return op == ReduceOp::kAverage ? postscale / setSize : postscale;
}

// Conversions used by reductions and by Compression.fp16-style helpers.
float halfToFloat(uint16_t h);
uint16_t floatToHalf(float f);  // round to nearest even, handles inf/NaN/subnormals
float bfloat16ToFloat(uint16_t b);
uint16_t floatToBfloat16(float f);  // round to nearest even, NaN stays NaN

}  // namespace kolo::kernels
