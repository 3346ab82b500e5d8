// SPDX-License-Identifier: Apache-2.0
// TensorView: a non-owning view of a dense, contiguous tensor. The caller keeps the memory alive
// until the op that uses it completes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/types.h"

namespace kolo {

constexpr int kCpuDevice = -1;

// Elements of a tensor of this shape (an empty shape is a scalar: one element).
inline size_t elementsOf(const std::vector<int64_t>& shape) {
  size_t n = 1;
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  return n;
}

struct TensorView {
  void* data = nullptr;
  DataType dtype = DataType::kFloat32;
  std::vector<int64_t> shape;  // empty = scalar (one element)
  int device = kCpuDevice;     // -1 = host memory, >= 0 = CUDA device ordinal
  void* stream = nullptr;      // CUDA stream the producer used (GPU only), may be null

  int64_t numElements() const { return static_cast<int64_t>(elementsOf(shape)); }
  size_t byteSize() const { return static_cast<size_t>(numElements()) * sizeOf(dtype); }
  // Elements in one slice along the first dimension (product of shape[1:]).
  int64_t rowElements() const {
    int64_t n = 1;
    for (size_t i = 1; i < shape.size(); ++i) n *= shape[i];
    return n;
  }
};

// "[17, 3]"
std::string shapeToString(const std::vector<int64_t>& shape);

// [begin, end) elements of chunk `i` when `count` is cut into `parts` nearly-equal chunks (the
// first count % parts chunks one element longer): the ring's segment math, also the shared-memory
// collectives' split of work among ranks. Chunks may be empty; an `i` outside [0, parts) is empty.
inline void chunkRange(size_t count, int parts, int i, size_t* begin, size_t* end) {
  if (parts <= 0 || i < 0 || i >= parts) {
    *begin = *end = 0;
    return;
  }
  const size_t p = static_cast<size_t>(parts);
  const size_t idx = static_cast<size_t>(i);
  const size_t base = count / p;
  const size_t extra = count % p;
  *begin = idx * base + (idx < extra ? idx : extra);
  *end = *begin + base + (idx < extra ? 1 : 0);
}

}  // namespace kolo
