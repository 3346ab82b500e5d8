// SPDX-License-Identifier: Apache-2.0
// kolo_fuzz_make_seeds: writes the valid seed inputs checked in under test/fuzz/corpus.
//
//   kolo_fuzz_make_seeds message DIR          encoded RequestLists and ResponseLists
//   kolo_fuzz_make_seeds store_protocol DIR   client byte streams of the store protocol
//   kolo_fuzz_make_seeds store_client DIR     server reply streams for fuzz_store_client's script
//
// Seeds are small on purpose (libFuzzer mutates them; big seeds slow every execution). The
// config and hostlist seeds are plain text and written by hand.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "ops/message.h"

namespace {

using Bytes = std::vector<uint8_t>;

bool write(const std::string& dir, const std::string& name, const Bytes& b) {
  std::ofstream f(dir + "/" + name, std::ios::binary);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  return static_cast<bool>(f);
}

bool messageSeeds(const std::string& dir) {
  using namespace kolo;
  bool ok = true;
  RequestList empty;
  ok &= write(dir, "requests_empty", encode(empty));

  RequestList reqs;
  reqs.rank = 1;
  Request a;
  a.rank = 1;
  a.name = "grad/fc1.weight";
  a.shape = {128, 64};
  reqs.requests.push_back(a);
  Request b;
  b.rank = 1;
  b.type = OpType::kAlltoall;
  b.name = "tokens";
  b.dtype = DataType::kInt64;
  b.shape = {6, 2};
  b.splits = {1, 2, 3};
  b.groupId = 4;
  b.groupSize = 2;
  reqs.requests.push_back(b);
  Request c;
  c.rank = 1;
  c.type = OpType::kBroadcast;
  c.name = "params";
  c.root = 0;
  c.prescale = 0.5;
  c.postscale = 2.0;
  c.device = 0;
  reqs.requests.push_back(c);
  ok &= write(dir, "requests_three", encode(reqs));

  RequestList shutdown;
  shutdown.rank = 3;
  shutdown.shutdown = true;
  Request join;
  join.rank = 3;
  join.type = OpType::kJoin;
  join.name = kJoinName;
  shutdown.requests.push_back(join);
  ok &= write(dir, "requests_join_shutdown", encode(shutdown));

  RequestList refusing;  // a rank that could not submit its tensor (Request::refusal)
  refusing.rank = 2;
  Request refused;
  refused.rank = 2;
  refused.name = "grad/emb";
  refused.dtype = DataType::kUInt8;
  refused.refusal = "tensor type torch.complex64 is not supported by kolo";
  refusing.requests.push_back(refused);
  ok &= write(dir, "requests_refusal", encode(refusing));

  ResponseList none;
  ok &= write(dir, "responses_empty", encode(none));

  ResponseList resp;
  Response r1;
  r1.name = "grad/fc1.weight";
  r1.shape = {128, 64};
  r1.joinedRanks = {2};
  r1.group = 7;
  resp.responses.push_back(r1);
  Response r2;
  r2.type = OpType::kAllgather;
  r2.name = "features";
  r2.dtype = DataType::kFloat16;
  r2.shape = {3, 8};
  r2.rankDim0 = {3, 1, 0};
  resp.responses.push_back(r2);
  Response r3;
  r3.type = OpType::kAlltoall;
  r3.name = "tokens";
  r3.splitMatrix = {1, 2, 3, 4};
  resp.responses.push_back(r3);
  ok &= write(dir, "responses_three", encode(resp));

  ResponseList err;
  err.shutdown = true;
  err.shutdownReason = "rank 2 left";
  Response e;
  e.kind = Response::Kind::kError;
  e.name = "x";
  e.errorCode = ErrorCode::kInvalidArgument;
  e.error = "mismatched dtype for 'x'";
  e.lastJoinedRank = 1;
  err.responses.push_back(e);
  ok &= write(dir, "responses_error_shutdown", encode(err));

  ResponseList tuning;
  tuning.hasTuning = true;
  tuning.tuning = {8 << 20, 2.5, 65536, 8 << 20, true};
  ok &= write(dir, "responses_tuning", encode(tuning));
  return ok;
}

// u8 cmd | u32 keyLen | key | u64 valLen | value
void request(Bytes* out, uint8_t cmd, const std::string& key, const Bytes& value) {
  auto le = [out](uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out->push_back(static_cast<uint8_t>(v >> (8 * i)));
  };
  out->push_back(cmd);
  le(key.size(), 4);
  out->insert(out->end(), key.begin(), key.end());
  le(value.size(), 8);
  out->insert(out->end(), value.begin(), value.end());
}

Bytes u32le(uint32_t v) {
  return {uint8_t(v), uint8_t(v >> 8), uint8_t(v >> 16), uint8_t(v >> 24)};
}
Bytes i64le(int64_t v) {
  Bytes b;
  for (int i = 0; i < 8; ++i)
    b.push_back(static_cast<uint8_t>(static_cast<uint64_t>(v) >> (8 * i)));
  return b;
}

bool storeSeeds(const std::string& dir) {
  enum : uint8_t { kSet = 1, kGet = 2, kAdd = 3, kWait = 4, kCheck = 5, kDel = 6 };
  bool ok = true;
  Bytes s;
  request(&s, kSet, "rank0/addr", {'1', '2', '7', '.', '0', '.', '0', '.', '1'});
  request(&s, kGet, "rank0/addr", u32le(1000));
  request(&s, kCheck, "rank0/addr", {});
  ok &= write(dir, "set_get_check", s);

  Bytes c;
  request(&c, kAdd, "barrier", i64le(1));
  request(&c, kAdd, "barrier", i64le(-5));
  request(&c, kGet, "barrier", u32le(0));
  request(&c, kDel, "barrier", {});
  request(&c, kCheck, "barrier", {});
  ok &= write(dir, "counter", c);

  Bytes w;
  request(&w, kWait, "missing", u32le(0));
  request(&w, kGet, "missing", u32le(0));
  request(&w, kSet, "k", {});
  request(&w, kWait, "k", u32le(5));
  ok &= write(dir, "wait_missing", w);

  Bytes bad;
  request(&bad, kAdd, "k", {1, 2, 3});
  request(&bad, 9, "k", {});
  request(&bad, kGet, "k", {0});
  ok &= write(dir, "bad_requests", bad);

  Bytes park;
  request(&park, kSet, "a", {'x'});
  request(&park, kGet, "never", u32le(60000));
  request(&park, kSet, "b", {'y'});
  ok &= write(dir, "parked_get", park);

  Bytes partial;
  request(&partial, kSet, "whole", {'1'});
  partial.insert(partial.end(), {kSet, 3, 0, 0, 0, 'p', 'a'});
  ok &= write(dir, "partial_request", partial);
  return ok;
}

// u8 status | u64 len | payload
void reply(Bytes* out, uint8_t status, const Bytes& payload) {
  out->push_back(status);
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<uint8_t>(payload.size() >> (8 * i)));
  out->insert(out->end(), payload.begin(), payload.end());
}

// fuzz_store_client's script: set, get, add, check, wait (two keys), remove, get, add.
bool clientSeeds(const std::string& dir) {
  const Bytes text = {'n', 'o', 'p', 'e'};
  bool ok = true;
  Bytes all;
  reply(&all, 0, {});
  reply(&all, 0, {1, 2, 3});
  reply(&all, 0, i64le(5));
  reply(&all, 0, {1});
  reply(&all, 0, {});
  reply(&all, 0, {});
  reply(&all, 0, {});
  reply(&all, 1, text);
  reply(&all, 0, i64le(4));
  ok &= write(dir, "all_ok", all);

  Bytes errors;
  reply(&errors, 2, text);
  reply(&errors, 1, text);
  reply(&errors, 0, {1, 2});  // not an 8-byte counter
  reply(&errors, 0, {});      // not a 1-byte flag
  reply(&errors, 0, {});
  reply(&errors, 1, text);
  reply(&errors, 2, text);
  ok &= write(dir, "errors", errors);

  Bytes truncated;
  reply(&truncated, 0, {});
  truncated.insert(truncated.end(), {0, 200, 0, 0, 0, 0, 0, 0, 0, 'x'});
  ok &= write(dir, "truncated_payload", truncated);

  Bytes badStatus;
  reply(&badStatus, 7, {});
  ok &= write(dir, "bad_status", badStatus);
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: kolo_fuzz_make_seeds message|store_protocol|store_client DIR\n");
    return 2;
  }
  std::string what = argv[1];
  bool ok = false;
  if (what == "message") {
    ok = messageSeeds(argv[2]);
  } else if (what == "store_protocol") {
    ok = storeSeeds(argv[2]);
  } else if (what == "store_client") {
    ok = clientSeeds(argv[2]);
  } else {
    std::fprintf(stderr, "unknown corpus %s\n", argv[1]);
  }
  return ok ? 0 : 1;
}
