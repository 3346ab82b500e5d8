// SPDX-License-Identifier: Apache-2.0
#include "ops/message.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

using namespace kolo;

namespace {

Request fullRequest(int i) {
  Request r;
  r.rank = 3 + i;
  r.type = OpType::kAlltoall;
  r.name = "layer" + std::to_string(i) + "/weight\xc3\xa9";  // non-ASCII bytes survive
  r.dtype = DataType::kBFloat16;
  r.shape = {17, 3, -1, std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min()};
  r.reduceOp = ReduceOp::kProduct;
  r.prescale = 0.1 * (i + 1);
  r.postscale = -1e300;
  r.root = 5;
  r.device = 7;
  r.processSet = 42;
  r.splits = {1, 2, 3, 11};
  r.groupId = 9;
  r.groupSize = 4;
  r.refusal = i == 0 ? "the output (int32 [2] on the host) does not match" : "";
  return r;
}

Response fullResponse(int i) {
  Response r;
  r.kind = Response::Kind::kError;
  r.type = OpType::kReducescatter;
  r.name = "t" + std::to_string(i);
  r.dtype = DataType::kFloat16;
  r.shape = {4, 5};
  r.reduceOp = ReduceOp::kBitAnd;
  r.prescale = 0.25;
  r.postscale = 3.5;
  r.root = 2;
  r.device = 1;
  r.processSet = 6;
  r.rankDim0 = {4, 0, 8};
  r.splitMatrix = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  r.joinedRanks = {1, 3, std::numeric_limits<int32_t>::min()};
  r.lastJoinedRank = 2;
  r.errorCode = ErrorCode::kJoined;
  r.error = "allgather 'x' is not allowed while rank 1 has joined";
  r.group = 12;
  return r;
}

void requireSameBits(double a, double b) {
  uint64_t x, y;
  std::memcpy(&x, &a, 8);
  std::memcpy(&y, &b, 8);
  CHECK(x == y);
}

void requireEqualSpec(const OpSpec& a, const OpSpec& b) {
  CHECK(a.type == b.type);
  CHECK(a.name == b.name);
  CHECK(a.dtype == b.dtype);
  CHECK(a.shape == b.shape);
  CHECK(a.reduceOp == b.reduceOp);
  requireSameBits(a.prescale, b.prescale);
  requireSameBits(a.postscale, b.postscale);
  CHECK(a.root == b.root);
  CHECK(a.device == b.device);
  CHECK(a.processSet == b.processSet);
}

void requireEqual(const Request& a, const Request& b) {
  CHECK(a.rank == b.rank);
  requireEqualSpec(a, b);
  CHECK(a.splits == b.splits);
  CHECK(a.groupId == b.groupId);
  CHECK(a.groupSize == b.groupSize);
  CHECK(a.refusal == b.refusal);
}

void requireEqual(const Response& a, const Response& b) {
  CHECK(a.kind == b.kind);
  requireEqualSpec(a, b);
  CHECK(a.rankDim0 == b.rankDim0);
  CHECK(a.splitMatrix == b.splitMatrix);
  CHECK(a.joinedRanks == b.joinedRanks);
  CHECK(a.lastJoinedRank == b.lastJoinedRank);
  CHECK(a.errorCode == b.errorCode);
  CHECK(a.error == b.error);
  CHECK(a.group == b.group);
}

RequestList sampleRequests() {
  RequestList list;
  list.rank = 3;
  list.shutdown = true;
  list.requests = {fullRequest(0), Request{}, fullRequest(1)};
  list.requests[1].name = "plain";
  return list;
}

ResponseList sampleResponses() {
  ResponseList list;
  list.shutdown = true;
  list.shutdownReason = "rank 2 asked to shut down";
  list.responses = {fullResponse(0), Response{}, fullResponse(1)};
  list.responses[1].name = kJoinName;
  list.responses[1].type = OpType::kJoin;
  return list;
}

}  // namespace

TEST_CASE("request list round trip keeps every field bit for bit") {
  RequestList in = sampleRequests();
  std::vector<uint8_t> bytes = encode(in);
  RequestList out;
  REQUIRE(decode(bytes.data(), bytes.size(), &out).isOk());
  CHECK(out.rank == 3);
  CHECK(out.shutdown);
  REQUIRE(out.requests.size() == 3);
  for (size_t i = 0; i < 3; ++i) requireEqual(in.requests[i], out.requests[i]);

  // NaN payloads and signed zero keep their exact bits.
  in.requests[0].prescale = std::nan("0x123");
  in.requests[0].postscale = -0.0;
  bytes = encode(in);
  REQUIRE(decode(bytes.data(), bytes.size(), &out).isOk());
  requireEqual(in.requests[0], out.requests[0]);
}

TEST_CASE("every enum value and the internal bitand op survive") {
  for (int t = 0; t <= static_cast<int>(kLastOpType); ++t) {
    for (int d = 0; d < kNumDataTypes; ++d) {
      RequestList in;
      Request r;
      r.type = static_cast<OpType>(t);
      r.dtype = static_cast<DataType>(d);
      r.reduceOp = (d % 2) ? ReduceOp::kBitAnd : static_cast<ReduceOp>(t % 6);
      in.requests.push_back(r);
      auto bytes = encode(in);
      RequestList out;
      REQUIRE(decode(bytes.data(), bytes.size(), &out).isOk());
      requireEqual(r, out.requests.at(0));
    }
  }
}

TEST_CASE("response list round trip keeps every field bit for bit") {
  ResponseList in = sampleResponses();
  std::vector<uint8_t> bytes = encode(in);
  ResponseList out;
  REQUIRE(decode(bytes.data(), bytes.size(), &out).isOk());
  CHECK(out.shutdown);
  CHECK(out.shutdownReason == "rank 2 asked to shut down");
  REQUIRE(out.responses.size() == 3);
  for (size_t i = 0; i < 3; ++i) requireEqual(in.responses[i], out.responses[i]);
  CHECK(out.responses[1].kind == Response::Kind::kOk);
  CHECK(std::string(toString(out.responses[0].kind)) == "error");
}

TEST_CASE("empty lists round trip") {
  RequestList rq;
  auto b1 = encode(rq);
  RequestList rqOut;
  rqOut.requests.resize(2);  // overwritten on success
  REQUIRE(decode(b1.data(), b1.size(), &rqOut).isOk());
  CHECK(rqOut.requests.empty());
  ResponseList rs;
  auto b2 = encode(rs);
  ResponseList rsOut;
  REQUIRE(decode(b2.data(), b2.size(), &rsOut).isOk());
  CHECK(rsOut.responses.empty());
  CHECK_FALSE(rsOut.shutdown);
}

TEST_CASE("the encoding is little-endian with magic and version up front") {
  RequestList in;
  in.rank = 0x01020304;
  auto b = encode(in);
  REQUIRE(b.size() == 4 + 1 + 4 + 1 + 4);
  CHECK(std::string(b.begin(), b.begin() + 4) == "KOLQ");
  CHECK(b[4] == 3);  // version 3: tuning carries the hierarchical choice (2: a request refusal)
  CHECK(b[5] == 0x04);
  CHECK(b[8] == 0x01);
  ResponseList rs;
  auto c = encode(rs);
  CHECK(std::string(c.begin(), c.begin() + 4) == "KOLR");
}

TEST_CASE("truncation at every byte offset is an error, never a crash") {
  auto rq = encode(sampleRequests());
  for (size_t n = 0; n < rq.size(); ++n) {
    std::vector<uint8_t> cut(rq.begin(), rq.begin() + n);  // exact-size copy for ASan
    RequestList out;
    out.rank = 77;
    Status s = decode(cut.empty() ? nullptr : cut.data(), n, &out);
    INFO("cut at " << n << ": " << s.toString());
    REQUIRE(s.code() == ErrorCode::kInternal);
    CHECK(s.message().rfind("malformed request list from ", 0) == 0);
    CHECK(out.rank == 77);  // untouched on failure
  }
  auto rs = encode(sampleResponses());
  for (size_t n = 0; n < rs.size(); ++n) {
    std::vector<uint8_t> cut(rs.begin(), rs.begin() + n);
    ResponseList out;
    Status s = decode(cut.empty() ? nullptr : cut.data(), n, &out);
    INFO("cut at " << n);
    REQUIRE(s.code() == ErrorCode::kInternal);
    CHECK(s.message().rfind("malformed response list from the coordinator: ", 0) == 0);
  }
}

TEST_CASE("decode errors say who sent it and what was wrong") {
  auto rq = encode(sampleRequests());
  RequestList out;
  Status s = decode(rq.data(), rq.size() - 3, &out);
  CHECK(s.message().rfind("malformed request list from rank 3: truncated reading refusal (4 "
                          "bytes needed, 1 left) at byte ",
                          0) == 0);
  s = decode(rq.data(), 20, &out);  // too short for even one request
  CHECK(s.message().find("count 3 for request count exceeds the 6 bytes left at byte 14") !=
        std::string::npos);
  s = decode(rq.data(), 6, &out);
  CHECK(s.message().rfind("malformed request list from an unknown rank: ", 0) == 0);
  s = decode(rq.data(), 20, &out, 5);
  CHECK(s.message().rfind("malformed request list from rank 5: ", 0) == 0);

  std::vector<uint8_t> longer = rq;
  longer.push_back(0);
  s = decode(longer.data(), longer.size(), &out);
  CHECK(s.message().find("1 trailing bytes") != std::string::npos);

  std::vector<uint8_t> badVersion = rq;
  badVersion[4] = 1;  // an older kolo's list
  s = decode(badVersion.data(), badVersion.size(), &out);
  CHECK(s.message().find("unsupported version 1") != std::string::npos);

  // A response list is not a request list.
  auto rs = encode(sampleResponses());
  s = decode(rs.data(), rs.size(), &out);
  CHECK(s.message().find("bad magic at byte 0") != std::string::npos);
  ResponseList rsOut;
  s = decode(rs.data(), rs.size(), &rsOut, 0);
  CHECK(s.isOk());
  s = decode(rq.data(), rq.size(), &rsOut, 0);
  CHECK(s.message().rfind("malformed response list from rank 0: bad magic", 0) == 0);
}

TEST_CASE("out-of-range enums and bools are rejected") {
  RequestList one;
  one.requests.push_back(Request{});
  auto base = encode(one);
  // Layout: magic 4, version 1, rank 4, shutdown 1, count 4, then the request:
  // rank 4, type 4, name len 4 (empty), dtype 4, shape count 4, reduce op 4, ...
  const size_t req = 14;
  auto patch = [&](size_t off, int32_t v) {
    auto b = base;
    for (int i = 0; i < 4; ++i)
      b[off + i] = static_cast<uint8_t>(static_cast<uint32_t>(v) >> (8 * i));
    RequestList out;
    return decode(b.data(), b.size(), &out);
  };
  CHECK(patch(req + 4, 9).message().find("bad op type 9") != std::string::npos);
  CHECK(patch(req + 4, -1).message().find("bad op type -1") != std::string::npos);
  CHECK(patch(req + 12, 11).message().find("bad dtype 11") != std::string::npos);
  CHECK(patch(req + 20, 5).isOk());  // adasum
  CHECK(patch(req + 20, 6).message().find("bad reduce op 6") != std::string::npos);
  CHECK(patch(req + 20, 100).isOk());
  auto b = base;
  b[9] = 2;  // the shutdown flag
  RequestList out;
  CHECK(decode(b.data(), b.size(), &out).message().find("bad bool 2") != std::string::npos);

  ResponseList rl;
  rl.responses.push_back(Response{});
  auto rb = encode(rl);
  // magic 4, version 1, shutdown 1, reason len 4, count 4, then kind.
  rb[14] = 2;
  ResponseList rout;
  CHECK(decode(rb.data(), rb.size(), &rout).message().find("bad response kind 2") !=
        std::string::npos);
  rb[14] = 0;
  // error code: kind 4 type 4 name 4 dtype 4 shape 4 op 4 scales 16 root device set 12,
  // three vectors 12, last joined 4 => offset 68 inside the response.
  rb[14 + 68] = 14;
  CHECK(decode(rb.data(), rb.size(), &rout).message().find("bad error code 14") !=
        std::string::npos);
  rb[14 + 68] = 13;
  CHECK(decode(rb.data(), rb.size(), &rout).isOk());
  CHECK(rout.responses.at(0).errorCode == ErrorCode::kJoined);
}

TEST_CASE("hostile counts never allocate more than the buffer") {
  RequestList one;
  one.requests.push_back(Request{});
  auto b = encode(one);
  // The request count (offset 10) claims four billion requests.
  for (int i = 0; i < 4; ++i) b[10 + i] = 0xff;
  RequestList out;
  Status s = decode(b.data(), b.size(), &out);
  CHECK(s.message().find("count 4294967295 for request count exceeds") != std::string::npos);
  // The name length claims 2^32 - 1 bytes.
  b = encode(one);
  for (int i = 0; i < 4; ++i) b[14 + 8 + i] = 0xff;
  s = decode(b.data(), b.size(), &out);
  CHECK(s.message().find("for name exceeds") != std::string::npos);
  // The shape count claims 2^31 elements.
  b = encode(one);
  b[14 + 16 + 3] = 0x80;
  s = decode(b.data(), b.size(), &out);
  CHECK(s.message().find("for shape exceeds") != std::string::npos);
}

TEST_CASE("random garbage and random mutations never crash") {
  std::mt19937_64 rng(12345);
  auto valid = encode(sampleRequests());
  auto validRs = encode(sampleResponses());
  int accepted = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    std::vector<uint8_t> buf;
    const std::vector<uint8_t>& src = (iter % 2) ? valid : validRs;
    if (iter % 4 < 2) {
      buf = src;  // flip a few bytes of a valid message
      int flips = 1 + static_cast<int>(rng() % 4);
      for (int f = 0; f < flips; ++f) buf[rng() % buf.size()] = static_cast<uint8_t>(rng());
      if (rng() % 3 == 0) buf.resize(rng() % buf.size());
    } else {
      buf.resize(rng() % 200);
      for (auto& x : buf) x = static_cast<uint8_t>(rng());
      if (buf.size() >= 5 && rng() % 2) {  // plausible header so the body gets parsed
        std::memcpy(buf.data(), (iter % 2) ? "KOLQ" : "KOLR", 4);
        buf[4] = 1;
      }
    }
    RequestList rq;
    ResponseList rs;
    Status a = decode(buf.data(), buf.size(), &rq);
    Status b = decode(buf.data(), buf.size(), &rs);
    if (a.isOk()) {
      ++accepted;
      // Whatever was accepted re-encodes to the same bytes.
      CHECK(encode(rq) == buf);
    } else {
      CHECK(a.code() == ErrorCode::kInternal);
    }
    if (b.isOk()) {
      ++accepted;
      CHECK(encode(rs) == buf);
    } else {
      CHECK(b.code() == ErrorCode::kInternal);
    }
  }
  // Single-byte flips inside doubles or names stay valid, so some mutants decode.
  CHECK(accepted > 0);
}
