// SPDX-License-Identifier: Apache-2.0
// FusionBuffer: a grow-only, 64-byte aligned staging buffer (one per device; CPU here). The
// coordinator packs a batch's tensors into it, runs one collective and unpacks. Never shrinks,
// so steady-state training does no allocation. Not thread-safe (coordinator thread only).
#pragma once

#include <cstddef>
#include <cstdlib>
#include <memory>

namespace kolo {

class FusionBuffer {
 public:
  // Returns at least `bytes` of storage (contents are not preserved across growth).
  void* reserve(size_t bytes) {
    if (bytes > capacity_) {
      size_t cap = capacity_ ? capacity_ : 1 << 20;
      while (cap < bytes) cap *= 2;
      void* p = std::aligned_alloc(64, cap);
      if (p == nullptr) return nullptr;
      data_.reset(static_cast<unsigned char*>(p));
      capacity_ = cap;
    }
    return data_.get();
  }
  size_t capacity() const { return capacity_; }

 private:
  struct Free {
    void operator()(unsigned char* p) const { std::free(p); }
  };
  std::unique_ptr<unsigned char, Free> data_;
  size_t capacity_ = 0;
};

}  // namespace kolo
