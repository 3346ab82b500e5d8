// SPDX-License-Identifier: Apache-2.0
// Little-endian integers in byte buffers, the one codec of kolo's wire formats (the op codec in
// ops/message.cc, the rendezvous store's protocol, the tcp transport's message headers): explicit
// shifts rather than a memcpy of host integers, so the bytes are the same on any host.
//
// Ownership: none (the caller's buffers). Threading: pure functions. Blocking, errors: none;
// `bytes` is 1..8 and the buffers hold at least that many bytes.
#pragma once

#include <cstdint>
#include <vector>

namespace kolo {

inline void storeLe(uint8_t* p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

inline void appendLe(std::vector<uint8_t>* b, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) b->push_back(static_cast<uint8_t>(v >> (8 * i)));
}

inline uint64_t loadLe(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace kolo
