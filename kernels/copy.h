// copyBytes: the memcpy of the data path's bulk copies (shared-memory staging and results).
//
// Why not std::memcpy: glibc's memcpy moves mid-sized copies with `rep movsb` (from a few KiB up
// to a limit it derives from the cache sizes; on AMD, the L2 size), and on the AMD EPYC VM this
// project was measured on, `rep movsb` over lines that another core had just written ran 4-10x
// slower than a plain vector loop: 100 tensors of 64 KiB through the shared-memory allreduce at
// 2 ranks took 4.2-4.5 ms a step instead of 0.8-0.9 ms for the same bytes as one tensor (whose
// 512 KiB pieces are past that limit and take glibc's vector loop). copyBytes uses vector loads
// and stores (AVX when the CPU and OS have it, else SSE2) from 4 KiB on, memcpy below that.
//
// Contract: as memcpy: `dst` and `src` must not overlap; either may be unaligned; n may be 0
// (then the pointers may be null). Thread-safe (a one-time CPU check). Never blocks or fails.
#pragma once

#include <cstddef>

namespace kolo::kernels {

void copyBytes(void* dst, const void* src, size_t n);

}  // namespace kolo::kernels
