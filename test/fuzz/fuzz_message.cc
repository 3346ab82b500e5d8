// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: the coordinator wire codec (ops/message.h).
//
// The same bytes go to both decoders (the magic picks at most one). Whenever a decode succeeds,
// the format's canonical-encoding property must hold: re-encoding the decoded list reproduces the
// input byte for byte (booleans are 0/1, enums known, counts exact, no trailing bytes, so there is
// exactly one encoding per value), and decoding that again yields an equal list (doubles compared
// by bit pattern, so NaN payloads count). A failed decode must leave *out untouched and name the
// sender. Any violation aborts, which libFuzzer reports as a crash.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "ops/message.h"
#include "test/fuzz/fuzz_util.h"

namespace {

using fuzz::fail;

bool sameBits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

bool equal(const kolo::Request& a, const kolo::Request& b) {
  return a.rank == b.rank && a.type == b.type && a.name == b.name && a.dtype == b.dtype &&
         a.shape == b.shape && a.reduceOp == b.reduceOp && sameBits(a.prescale, b.prescale) &&
         sameBits(a.postscale, b.postscale) && a.root == b.root && a.device == b.device &&
         a.processSet == b.processSet && a.splits == b.splits && a.groupId == b.groupId &&
         a.groupSize == b.groupSize;
}

bool equal(const kolo::Response& a, const kolo::Response& b) {
  return a.kind == b.kind && a.type == b.type && a.name == b.name && a.dtype == b.dtype &&
         a.shape == b.shape && a.reduceOp == b.reduceOp && sameBits(a.prescale, b.prescale) &&
         sameBits(a.postscale, b.postscale) && a.root == b.root && a.device == b.device &&
         a.processSet == b.processSet && a.rankDim0 == b.rankDim0 &&
         a.splitMatrix == b.splitMatrix && a.joinedRanks == b.joinedRanks &&
         a.lastJoinedRank == b.lastJoinedRank && a.errorCode == b.errorCode && a.error == b.error &&
         a.group == b.group;
}

bool equal(const kolo::RequestList& a, const kolo::RequestList& b) {
  if (a.rank != b.rank || a.shutdown != b.shutdown || a.requests.size() != b.requests.size()) {
    return false;
  }
  for (size_t i = 0; i < a.requests.size(); ++i) {
    if (!equal(a.requests[i], b.requests[i])) return false;
  }
  return true;
}

bool equal(const kolo::ResponseList& a, const kolo::ResponseList& b) {
  if (a.shutdown != b.shutdown || a.shutdownReason != b.shutdownReason ||
      a.responses.size() != b.responses.size() || a.hasTuning != b.hasTuning ||
      (a.hasTuning && !(a.tuning == b.tuning))) {
    return false;
  }
  for (size_t i = 0; i < a.responses.size(); ++i) {
    if (!equal(a.responses[i], b.responses[i])) return false;
  }
  return true;
}

// A sentinel value a failed decode must not touch.
template <typename List>
List sentinel();
template <>
kolo::RequestList sentinel() {
  kolo::RequestList l;
  l.rank = 77;
  l.requests.resize(1);
  l.requests[0].name = "sentinel";
  return l;
}
template <>
kolo::ResponseList sentinel() {
  kolo::ResponseList l;
  l.shutdownReason = "sentinel";
  l.responses.resize(1);
  return l;
}

template <typename List>
void roundTrip(const uint8_t* data, size_t size, int32_t fromRank) {
  List decoded = sentinel<List>();
  kolo::Status st = kolo::decode(data, size, &decoded, fromRank);
  if (!st.isOk()) {
    if (!equal(decoded, sentinel<List>())) fail("a failed decode modified its output");
    if (st.message().find("malformed") == std::string::npos) fail("decode error not 'malformed'");
    return;
  }
  std::vector<uint8_t> again = kolo::encode(decoded);
  if (again.size() != size || (size != 0 && std::memcmp(again.data(), data, size) != 0)) {
    fail("encode(decode(bytes)) != bytes");
  }
  List twice;
  if (!kolo::decode(again.data(), again.size(), &twice).isOk()) fail("re-encoded list fails");
  if (!equal(decoded, twice)) fail("decode(encode(list)) != list");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // libFuzzer hands an exact-size heap copy, so ASan sees any read past the end.
  const uint8_t* p = size == 0 ? nullptr : data;
  int32_t fromRank = size > 0 ? static_cast<int32_t>(data[size - 1] % 3) - 1 : -1;
  roundTrip<kolo::RequestList>(p, size, fromRank);
  roundTrip<kolo::ResponseList>(p, size, fromRank);
  return 0;
}
