// SPDX-License-Identifier: Apache-2.0
// CUDA kernels of the device data path: batched copies into and out of a fusion buffer, scaling
// with reduce_cpu.h's semantics, and reductions for the types NCCL cannot reduce.
//
// Every function enqueues work on `stream` and returns at once (a launch error is returned as
// it is; errors of the kernels themselves surface at the next synchronization). The caller has
// made `stream`'s device current. Pointers are device memory of that device, aligned to their
// element size. Thread safety: none needed (no state); one stream is used by one thread.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "base/types.h"

namespace kolo::cuda {

struct CopyDesc {
  const void* src;
  void* dst;
  size_t bytes;
};

// Descriptors per kernel launch: they travel as a kernel argument (64 x 24 bytes), so a batch
// needs no descriptor upload and no buffer whose lifetime would have to be tracked.
constexpr int kMaxCopiesPerLaunch = 64;
// From this size a copy goes to the copy engine (cudaMemcpyAsync) instead of the kernel.
constexpr size_t kLargeCopyBytes = size_t{1} << 20;

// Performs every copy of `descs` (non-overlapping ranges): the small ones batched into as few
// kernel launches as possible, the large ones as device-to-device cudaMemcpyAsync.
cudaError_t batchedCopy(const CopyDesc* descs, size_t n, cudaStream_t stream);

// data[i] *= factor, exactly as kernels::scaleInPlace on the host: fp32/fp64 multiply in their own
// precision, fp16/bf16 through float with round-to-nearest-even (NaN encodings may differ from
// the host's), integers in double truncated toward zero and saturated (NaN becomes 0),
// bool unchanged. No-op when factor == 1 or count == 0.
cudaError_t scale(void* data, size_t count, DataType dtype, double factor, cudaStream_t stream);

// dst[i] = op(src[0 * stride + i], ..., src[(parts - 1) * stride + i]) for i < count (stride
// >= count, in elements), for the types NCCL has no reduction for: int16, uint16 (wrapping
// arithmetic) and bool (sum/max = OR, min/product = AND, result 0 or 1). kAverage adds (the
// division is a postscale). A single part is copied unchanged, as the host leaves it. dst must
// not overlap src (except dst == src with parts == 1). cudaErrorInvalidValue for any other
// dtype or op.
cudaError_t reduceSlices(void* dst, const void* src, size_t count, int parts, size_t stride,
                         DataType dtype, ReduceOp op, cudaStream_t stream);

// Whether reduceSlices (rather than NCCL) must reduce this dtype.
constexpr bool needsKernelReduction(DataType t) {
  return t == DataType::kInt16 || t == DataType::kUInt16 || t == DataType::kBool;
}

}  // namespace kolo::cuda
