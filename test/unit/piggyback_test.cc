// SPDX-License-Identifier: Apache-2.0
// core/piggyback: which cached responses ride in the control round, where their payload sits
// (a function of the cache alone, so every rank lays it out the same), and the fill/deliver
// pair: prescale on the copy in, postscale and AVERAGE's 1/N on the way out.
#include "core/piggyback.h"

#include <catch2/catch.hpp>
#include <vector>

using namespace kolo;

namespace {

Response allreduce(const std::string& name, DataType dt, std::vector<int64_t> shape,
                   ReduceOp op = ReduceOp::kSum) {
  Response r;
  r.type = OpType::kAllreduce;
  r.name = name;
  r.dtype = dt;
  r.shape = std::move(shape);
  r.reduceOp = op;
  return r;
}

uint32_t put(ResponseCache& c, const Response& r) {
  Request q;
  q.name = r.name;
  q.dtype = r.dtype;
  q.shape = r.shape;
  q.reduceOp = r.reduceOp;
  q.processSet = r.processSet;
  q.device = r.device;
  c.put(r, q);
  uint32_t bit = 0;
  REQUIRE(c.lookup(q, &bit) == ResponseCache::Lookup::kHit);
  return bit;
}

bool always(size_t) { return true; }

}  // namespace

TEST_CASE("piggyback: eligible slots in slot order, 8-byte aligned, within the budget") {
  ResponseCache cache(16);
  const uint32_t a = put(cache, allreduce("a", DataType::kFloat32, {3}));  // 12 bytes at 0
  Response other = allreduce("other-set", DataType::kFloat32, {3});
  other.processSet = 1;
  const uint32_t b = put(cache, other);
  Response gpu = allreduce("gpu", DataType::kFloat32, {3});
  gpu.device = 0;
  const uint32_t c = put(cache, gpu);
  const uint32_t d = put(cache, allreduce("min", DataType::kFloat32, {3}, ReduceOp::kMin));
  const uint32_t e = put(cache, allreduce("big", DataType::kFloat64, {600}));  // 4800 bytes
  const uint32_t f = put(cache, allreduce("avg", DataType::kInt32, {5}, ReduceOp::kAverage));
  const uint32_t g = put(cache, allreduce("gather", DataType::kFloat32, {3}));
  Response gathered = cache.response(g);
  gathered.type = OpType::kAllgather;
  cache.put(gathered, cache.request(g));

  Piggyback p;
  p.plan(cache, 4096, 2, always);
  CHECK(p.carries(a));
  CHECK(p.carries(f));
  for (uint32_t bit : {b, c, d, e, g}) CHECK_FALSE(p.carries(bit));
  CHECK(p.payloadBytes() == 16 + 20);  // a at 0 (12 bytes), f at 16
  std::vector<ops::ReduceRegion> regions;
  p.regions(1000, &regions);
  REQUIRE(regions.size() == 2);
  CHECK(regions[0].offset == 1000);
  CHECK(regions[0].count == 3);
  CHECK(regions[0].op == ReduceOp::kSum);
  CHECK(regions[1].offset == 1016);
  CHECK(regions[1].dtype == DataType::kInt32);
  CHECK(regions[1].op == ReduceOp::kSum);  // AVERAGE sums; deliver divides

  // A budget that fits only the first, a rule that refuses, one rank, no budget: fewer or none.
  p.plan(cache, 16, 2, always);
  CHECK(p.carries(a));
  CHECK_FALSE(p.carries(f));
  p.plan(cache, 4096, 2, [](size_t) { return false; });
  CHECK(p.payloadBytes() == 0);
  CHECK_FALSE(p.carries(a));
  p.plan(cache, 4096, 1, always);
  CHECK_FALSE(p.carries(a));
  p.plan(cache, 0, 2, always);
  CHECK_FALSE(p.carries(a));
}

TEST_CASE("piggyback: fill prescales the copy, deliver postscales and averages into the output") {
  ResponseCache cache(4);
  Response r = allreduce("avg", DataType::kFloat32, {4}, ReduceOp::kAverage);
  r.prescale = 0.5;
  r.postscale = 3.0;
  const uint32_t bit = put(cache, r);
  Piggyback p;
  p.plan(cache, 64, 4, always);
  REQUIRE(p.carries(bit));

  std::vector<float> in = {2, 4, 6, 8}, out(4, -1.f);
  TensorEntry e;
  e.input.data = in.data();
  e.input.shape = {4};
  e.output.data = out.data();
  std::vector<uint8_t> payload(p.payloadBytes(), 0);
  p.fill(bit, e, cache.response(bit), payload.data());
  const float* staged = reinterpret_cast<const float*>(payload.data());
  CHECK(staged[0] == 1.f);
  CHECK(staged[3] == 4.f);
  CHECK(in[0] == 2.f);  // the input is untouched
  // Pretend the other 3 ranks sent the same: the reduced sum is 4x.
  for (int i = 0; i < 4; ++i) reinterpret_cast<float*>(payload.data())[i] *= 4;
  p.deliver(bit, payload.data(), cache.response(bit), e);
  // sum(0.5 x) over 4 ranks = 2x; * postscale 3 / 4 ranks = 1.5 x.
  CHECK(out == std::vector<float>{3, 6, 9, 12});
  CHECK(in == std::vector<float>{2, 4, 6, 8});
}
