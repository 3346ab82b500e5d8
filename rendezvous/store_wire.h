// SPDX-License-Identifier: Apache-2.0
// Private to the store implementations (store.cc, file_store.cc, tcp_store.cc,
// test/support/tcp_store_server.cc): the TCP wire protocol's constants (documented in
// rendezvous/store.h), the counter encoding every store shares, and the timeout message (the
// deadline arithmetic is base/clock.h's clampTimeout and deadlineAfter).
//
// Counters: add() keeps a key's value as exactly 8 bytes, the little-endian two's complement
// int64 that the protocol's ADD reply carries, so get() of a counter returns the same bytes from
// every implementation (memory, file, TCP server, the launcher's Python server). add() on a key
// that holds anything other than 8 bytes fails rather than reinterpreting it.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "base/clock.h"
#include "base/little_endian.h"

namespace kolo {
namespace store_wire {

using kolo::Clock;

enum : uint8_t { kCmdSet = 1, kCmdGet = 2, kCmdAdd = 3, kCmdWait = 4, kCmdCheck = 5, kCmdDel = 6 };
enum : uint8_t { kReplyOk = 0, kReplyTimeout = 1, kReplyError = 2 };

constexpr size_t kRequestHeader = 1 + 4;  // u8 cmd, u32 keyLen; then key, u64 valLen, value
constexpr size_t kReplyHeader = 1 + 8;    // u8 status, u64 len; then payload
constexpr uint32_t kMaxKeyBytes = 1u << 20;
constexpr uint64_t kMaxValueBytes = 1ull << 32;

inline const char* cmdName(uint8_t cmd) {
  static const char* const kNames[] = {"?", "SET", "GET", "ADD", "WAIT", "CHECK", "DEL"};
  return cmd <= kCmdDel ? kNames[cmd] : "?";
}

inline std::vector<uint8_t> encodeCounter(int64_t v) {
  std::vector<uint8_t> b;
  appendLe(&b, static_cast<uint64_t>(v), 8);
  return b;
}

// False when the bytes are not a counter (not exactly 8 bytes).
inline bool decodeCounter(const std::vector<uint8_t>& bytes, int64_t* v) {
  if (bytes.size() != 8) return false;
  *v = static_cast<int64_t>(loadLe(bytes.data(), 8));
  return true;
}

// Wrapping addition (what every implementation does; no signed-overflow UB).
inline int64_t addWrapping(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
}

// Timeouts are clamped to [0, what the wire's u32 milliseconds can say], so "check once" is a
// negative or zero timeout and huge ones cannot overflow the clock: base's clampTimeout and
// deadlineAfter (base/clock.h), which the bootstrap's hostname exchange uses too.
using kolo::clampTimeout;
using kolo::deadlineAfter;

inline std::string timeoutMessage(std::chrono::milliseconds timeout, const std::string& key,
                                  const std::string& where) {
  return "timed out after " + std::to_string(timeout.count()) + " ms waiting for store key '" +
         key + "' (" + where + ")";
}

}  // namespace store_wire
}  // namespace kolo
