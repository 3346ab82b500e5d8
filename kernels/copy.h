// SPDX-License-Identifier: Apache-2.0
// copyBytes: the memcpy of the data path's bulk copies (shared-memory staging and results).
//
// Why not std::memcpy: glibc's memcpy moves mid-sized copies with `rep movsb` (from a few KiB up
// to a limit it derives from the cache sizes; on AMD, the L2 size), and on the AMD EPYC VM this
// project was measured on, `rep movsb` over lines that another core had just written ran 4-10x
// slower than a plain vector loop: 100 tensors of 64 KiB through the shared-memory allreduce at
// 2 ranks took 4.2-4.5 ms a step instead of 0.8-0.9 ms for the same bytes as one tensor (whose
// 512 KiB pieces are past that limit and take glibc's vector loop). That VM's CPU had a 512 KiB
// L2 per core and, by its `rep movsb`, no FSRM (Zen 2's string moves are microcoded and slow).
// On a CPU with FSRM ("fast short rep mov", CPUID 7.EDX bit 4: Intel from Ice Lake, AMD from Zen
// 3) `rep movsb` is fast, and the vector loop lost to glibc: on a Zen 5 VM (2026-11-27) the
// shared-memory allreduce moved 14.4 GB/s at 64 KiB with the loop against 17.3 with memcpy, and
// the 97.5 MiB allreduce ran 82 steps/s against 105. So copyBytes is memcpy on CPUs with FSRM,
// and on the others vector loads and stores (AVX when the CPU and OS have it, else SSE2) from
// 4 KiB on, memcpy below that. copyBytesVector is that loop on any CPU (tests, benchmarks).
//
// Contract: as memcpy: `dst` and `src` must not overlap; either may be unaligned; n may be 0
// (then the pointers may be null). Thread-safe (a one-time CPU check). Never blocks or fails.
#pragma once

#include <cstddef>

namespace kolo::kernels {

void copyBytes(void* dst, const void* src, size_t n);
void copyBytesVector(void* dst, const void* src, size_t n);

}  // namespace kolo::kernels
