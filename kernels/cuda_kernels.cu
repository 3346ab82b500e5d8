// SPDX-License-Identifier: Apache-2.0
// The device data path's kernels (contract in cuda_kernels.h). Why they look like this:
//  - batchedCopy: a fused batch of small tensors would cost one cudaMemcpyAsync each (a few
//    microseconds of launch overhead apiece, more than the copy). One launch handles up to 64
//    descriptors passed by value; blockIdx.y picks the descriptor, the x blocks stride over its
//    bytes with the widest word (16, 8, 4, 2 or 1 bytes) that src, dst and size all allow.
//  - scale: the same rounding rules as kernels::scaleInPlace (integers truncate toward zero, as
//    Horovod's C conversion does), so a tensor allreduced on the GPU and the same tensor
//    allreduced on the CPU agree bit for bit (NaN payloads aside). No fast-math: fp32 keeps
//    subnormals, as on the host.
//  - reduceSlices: NCCL has no 16-bit integer or bool reductions. The transport gathers every
//    rank's slice and this kernel folds them; integers wrap (unsigned arithmetic), bool is
//    logical. Rare types, so simplicity wins over speed.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <limits>

#include "kernels/cuda_kernels.h"

namespace kolo::cuda {
namespace {

constexpr int kThreads = 256;
constexpr size_t kMaxBlocks = 4096;

unsigned int blocksFor(size_t items, size_t perBlock = kThreads) {
  size_t b = (items + perBlock - 1) / perBlock;
  return static_cast<unsigned int>(std::max<size_t>(1, std::min(b, kMaxBlocks)));
}

// ---- batched copy --------------------------------------------------------------------------

struct CopyBatch {
  CopyDesc d[kMaxCopiesPerLaunch];
};

template <typename W>
__device__ void copyWords(const CopyDesc& c) {
  const W* src = static_cast<const W*>(c.src);
  W* dst = static_cast<W*>(c.dst);
  const size_t n = c.bytes / sizeof(W);
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    dst[i] = src[i];
  }
}

__global__ void batchedCopyKernel(CopyBatch batch) {
  const CopyDesc& c = batch.d[blockIdx.y];
  const uintptr_t bits = reinterpret_cast<uintptr_t>(c.src) | reinterpret_cast<uintptr_t>(c.dst) |
                         static_cast<uintptr_t>(c.bytes);
  if ((bits & 15u) == 0) {
    copyWords<uint4>(c);
  } else if ((bits & 7u) == 0) {
    copyWords<uint2>(c);
  } else if ((bits & 3u) == 0) {
    copyWords<uint32_t>(c);
  } else if ((bits & 1u) == 0) {
    copyWords<uint16_t>(c);
  } else {
    copyWords<uint8_t>(c);
  }
}

// ---- scaling ---------------------------------------------------------------------------------

template <typename T>
__global__ void scaleFloatKernel(T* p, size_t n, T factor) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    p[i] = p[i] * factor;
  }
}

__global__ void scaleHalfKernel(__half* p, size_t n, float factor) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    p[i] = __float2half_rn(__half2float(p[i]) * factor);
  }
}

__global__ void scaleBfloat16Kernel(__nv_bfloat16* p, size_t n, float factor) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    p[i] = __float2bfloat16_rn(__bfloat162float(p[i]) * factor);
  }
}

// The bounds come from the host (std::numeric_limits is host-only code): lo/hi as doubles like
// the host's kLo/kHi -- for int64, (double)max is 2^63, so v >= hi saturates and v < hi
// converts exactly -- and the saturated values themselves.
template <typename T>
__global__ void scaleIntegerKernel(T* p, size_t n, double factor, double lo, double hi, T minV,
                                   T maxV) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const double v = trunc(static_cast<double>(p[i]) * factor);
    T out;
    if (isnan(v)) {
      out = 0;
    } else if (v <= lo) {
      out = minV;
    } else if (v >= hi) {
      out = maxV;
    } else {
      out = static_cast<T>(v);
    }
    p[i] = out;
  }
}

template <typename T>
cudaError_t launchScaleInteger(void* data, size_t n, double factor, cudaStream_t s) {
  constexpr T kMin = std::numeric_limits<T>::min();
  constexpr T kMax = std::numeric_limits<T>::max();
  scaleIntegerKernel<T><<<blocksFor(n), kThreads, 0, s>>>(static_cast<T*>(data), n, factor,
                                                          static_cast<double>(kMin),
                                                          static_cast<double>(kMax), kMin, kMax);
  return cudaGetLastError();
}

// ---- reductions NCCL lacks ---------------------------------------------------------------------

// Integer ops in a 32-bit unsigned type: wraps modulo 2^16 after truncation, like the host.
struct SumOp {
  template <typename T>
  __device__ static T apply(T a, T b) {
    return static_cast<T>(static_cast<uint32_t>(a) + static_cast<uint32_t>(b));
  }
};
struct ProductOp {
  template <typename T>
  __device__ static T apply(T a, T b) {
    return static_cast<T>(static_cast<uint32_t>(a) * static_cast<uint32_t>(b));
  }
};
struct MinOp {
  template <typename T>
  __device__ static T apply(T a, T b) {
    return a < b ? a : b;
  }
};
struct MaxOp {
  template <typename T>
  __device__ static T apply(T a, T b) {
    return a > b ? a : b;
  }
};
struct OrOp {
  template <typename T>
  __device__ static T apply(T a, T b) {
    return static_cast<T>((a != 0) | (b != 0));
  }
};
struct AndOp {
  template <typename T>
  __device__ static T apply(T a, T b) {
    return static_cast<T>((a != 0) & (b != 0));
  }
};

template <typename T, typename Op>
__global__ void reduceSlicesKernel(T* dst, const T* src, size_t count, int parts, size_t stride) {
  const size_t step = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += step) {
    T acc = src[i];
    for (int k = 1; k < parts; ++k) acc = Op::apply(acc, src[static_cast<size_t>(k) * stride + i]);
    dst[i] = acc;
  }
}

template <typename T, typename Op>
cudaError_t launchReduce(void* dst, const void* src, size_t count, int parts, size_t stride,
                         cudaStream_t s) {
  reduceSlicesKernel<T, Op><<<blocksFor(count), kThreads, 0, s>>>(
      static_cast<T*>(dst), static_cast<const T*>(src), count, parts, stride);
  return cudaGetLastError();
}

template <typename T>
cudaError_t reduceInteger(void* dst, const void* src, size_t count, int parts, size_t stride,
                          ReduceOp op, cudaStream_t s) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
      return launchReduce<T, SumOp>(dst, src, count, parts, stride, s);
    case ReduceOp::kMin:
      return launchReduce<T, MinOp>(dst, src, count, parts, stride, s);
    case ReduceOp::kMax:
      return launchReduce<T, MaxOp>(dst, src, count, parts, stride, s);
    case ReduceOp::kProduct:
      return launchReduce<T, ProductOp>(dst, src, count, parts, stride, s);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace

cudaError_t batchedCopy(const CopyDesc* descs, size_t n, cudaStream_t stream) {
  CopyBatch batch;
  int used = 0;
  size_t largest = 0;
  auto flush = [&]() -> cudaError_t {
    if (used == 0) return cudaSuccess;
    dim3 grid(blocksFor(largest, kThreads * 16), static_cast<unsigned int>(used));
    batchedCopyKernel<<<grid, kThreads, 0, stream>>>(batch);
    used = 0;
    largest = 0;
    return cudaGetLastError();
  };
  for (size_t i = 0; i < n; ++i) {
    const CopyDesc& c = descs[i];
    if (c.bytes == 0 || c.src == c.dst) continue;
    if (c.bytes >= kLargeCopyBytes) {
      cudaError_t e = cudaMemcpyAsync(c.dst, c.src, c.bytes, cudaMemcpyDeviceToDevice, stream);
      if (e != cudaSuccess) return e;
      continue;
    }
    batch.d[used++] = c;
    largest = std::max(largest, c.bytes);
    if (used == kMaxCopiesPerLaunch) {
      cudaError_t e = flush();
      if (e != cudaSuccess) return e;
    }
  }
  return flush();
}

cudaError_t scale(void* data, size_t count, DataType dtype, double factor, cudaStream_t stream) {
  if (factor == 1.0 || count == 0) return cudaSuccess;
  switch (dtype) {
    case DataType::kUInt8:
      return launchScaleInteger<uint8_t>(data, count, factor, stream);
    case DataType::kInt8:
      return launchScaleInteger<int8_t>(data, count, factor, stream);
    case DataType::kUInt16:
      return launchScaleInteger<uint16_t>(data, count, factor, stream);
    case DataType::kInt16:
      return launchScaleInteger<int16_t>(data, count, factor, stream);
    case DataType::kInt32:
      return launchScaleInteger<int32_t>(data, count, factor, stream);
    case DataType::kInt64:
      return launchScaleInteger<int64_t>(data, count, factor, stream);
    case DataType::kFloat16:
      scaleHalfKernel<<<blocksFor(count), kThreads, 0, stream>>>(static_cast<__half*>(data), count,
                                                                 static_cast<float>(factor));
      return cudaGetLastError();
    case DataType::kBFloat16:
      scaleBfloat16Kernel<<<blocksFor(count), kThreads, 0, stream>>>(
          static_cast<__nv_bfloat16*>(data), count, static_cast<float>(factor));
      return cudaGetLastError();
    case DataType::kFloat32:
      scaleFloatKernel<float><<<blocksFor(count), kThreads, 0, stream>>>(
          static_cast<float*>(data), count, static_cast<float>(factor));
      return cudaGetLastError();
    case DataType::kFloat64:
      scaleFloatKernel<double>
          <<<blocksFor(count), kThreads, 0, stream>>>(static_cast<double*>(data), count, factor);
      return cudaGetLastError();
    case DataType::kBool:
      return cudaSuccess;
  }
  return cudaErrorInvalidValue;
}

cudaError_t reduceSlices(void* dst, const void* src, size_t count, int parts, size_t stride,
                         DataType dtype, ReduceOp op, cudaStream_t stream) {
  if (!needsKernelReduction(dtype) || parts < 1 || stride < count) return cudaErrorInvalidValue;
  if (count == 0) return cudaSuccess;
  if (parts == 1) {  // nothing to combine: the host leaves a lone slice as it is, so do we
    if (dst == src) return cudaSuccess;
    const size_t elem = dtype == DataType::kBool ? 1 : 2;
    return cudaMemcpyAsync(dst, src, count * elem, cudaMemcpyDeviceToDevice, stream);
  }
  switch (dtype) {
    case DataType::kInt16:
      return reduceInteger<int16_t>(dst, src, count, parts, stride, op, stream);
    case DataType::kUInt16:
      return reduceInteger<uint16_t>(dst, src, count, parts, stride, op, stream);
    case DataType::kBool:
      switch (op) {
        case ReduceOp::kSum:
        case ReduceOp::kAverage:
        case ReduceOp::kMax:
          return launchReduce<uint8_t, OrOp>(dst, src, count, parts, stride, stream);
        case ReduceOp::kMin:
        case ReduceOp::kProduct:
          return launchReduce<uint8_t, AndOp>(dst, src, count, parts, stride, stream);
        default:
          return cudaErrorInvalidValue;
      }
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace kolo::cuda
