// SPDX-License-Identifier: Apache-2.0
// ops/batch_plan: the layout both backends (host memcpy + Transport, device kernels + NCCL) carry
// out. Values are checked exactly: slot offsets, copies, zero slots, outputs, scale factors,
// allgather blocks, alltoall splits, reducescatter shares, and the output allocation.
#include <catch2/catch.hpp>

#include <memory>

#include "ops/batch_plan.h"

using namespace kolo;

namespace {

Response response(OpType type, DataType dtype, std::vector<int64_t> shape,
                  const std::string& name) {
  Response r;
  r.type = type;
  r.dtype = dtype;
  r.shape = std::move(shape);
  r.name = name;
  return r;
}

std::unique_ptr<TensorEntry> entry(const Response& r, void* in, void* out = nullptr) {
  auto e = std::make_unique<TensorEntry>();
  e->request.name = r.name;
  e->request.type = r.type;
  e->request.shape = r.shape;
  e->input.data = in;
  e->input.dtype = r.dtype;
  e->input.shape = r.shape;
  e->output.data = out;
  e->handle = std::make_shared<HandleState>();
  return e;
}

bool sameCopy(const ops::PlanCopy& c, size_t tensor, size_t tensorOffset, size_t bufferOffset,
              size_t bytes) {
  return c.tensor == tensor && c.tensorOffset == tensorOffset && c.bufferOffset == bufferOffset &&
         c.bytes == bytes;
}

}  // namespace

TEST_CASE("batch plan: a fused allreduce packs its slots, a joined rank's are zeros") {
  Response a = response(OpType::kAllreduce, DataType::kFloat32, {3}, "a");
  Response b = response(OpType::kAllreduce, DataType::kFloat32, {2, 2}, "b");
  Response c = response(OpType::kAllreduce, DataType::kFloat32, {5}, "c");
  a.reduceOp = b.reduceOp = c.reduceOp = ReduceOp::kAverage;
  a.prescale = b.prescale = c.prescale = 0.5;
  a.postscale = b.postscale = c.postscale = 3.0;
  float x[3], y[4];
  auto ea = entry(a, x);
  auto eb = entry(b, y);
  ops::BatchPlan p;
  REQUIRE(ops::planBatch({&a, &b, &c}, {ea.get(), eb.get(), nullptr}, 4, 1, {}, &p).isOk());
  CHECK(p.fused);
  CHECK(p.counts == std::vector<size_t>{3, 4, 5});
  CHECK(p.slots == std::vector<size_t>{0, 3, 7});
  CHECK(p.count == 12);
  CHECK(p.paddedCount == 12);
  CHECK(p.bufferBytes == 48);
  CHECK(p.prescale == 0.5);
  CHECK(p.postscale == 3.0 / 4);  // AVERAGE divides by the whole set, joined ranks included
  REQUIRE(p.copyIn.size() == 2);
  CHECK(sameCopy(p.copyIn[0], 0, 0, 0, 12));
  CHECK(sameCopy(p.copyIn[1], 1, 0, 12, 16));
  REQUIRE(p.zeroFill.size() == 1);
  CHECK(sameCopy(p.zeroFill[0], 2, 0, 28, 20));
  REQUIRE(p.copyOut.size() == 2);  // nothing is copied out for the joined slot
  CHECK(sameCopy(p.copyOut[1], 1, 0, 12, 16));
  CHECK(p.outputs.empty());
}

TEST_CASE("batch plan: device alignment and padding of an allreduce") {
  Response a = response(OpType::kAllreduce, DataType::kFloat16, {3}, "a");
  Response b = response(OpType::kAllreduce, DataType::kFloat16, {5}, "b");
  uint16_t x[3], y[5];
  auto ea = entry(a, x);
  auto eb = entry(b, y);
  ops::PlanOptions aligned;
  aligned.slotAlignBytes = 16;
  aligned.padParts = 4;
  ops::BatchPlan p;
  REQUIRE(ops::planBatch({&a, &b}, {ea.get(), eb.get()}, 2, 0, aligned, &p).isOk());
  CHECK(p.slots == std::vector<size_t>{0, 8});  // 16 bytes = 8 fp16 elements
  CHECK(p.count == 13);
  CHECK(p.paddedCount == 16);
  CHECK(p.bufferBytes == 32);
  CHECK(sameCopy(p.copyIn[1], 1, 0, 16, 10));

  // One tensor: not fused (runs in its output) -- unless the padding needs a bigger buffer.
  ops::BatchPlan one;
  REQUIRE(ops::planBatch({&b}, {eb.get()}, 2, 0, {}, &one).isOk());
  CHECK_FALSE(one.fused);
  CHECK(one.bufferBytes == 0);
  REQUIRE(one.copyIn.size() == 1);  // the input into the output (skipped when in place)
  CHECK(sameCopy(one.copyIn[0], 0, 0, 0, 10));
  CHECK(one.copyOut.empty());
  REQUIRE(ops::planBatch({&b}, {eb.get()}, 2, 0, aligned, &one).isOk());
  CHECK(one.fused);
  CHECK(one.paddedCount == 8);
  // A joined rank's single slot is fused too (its zeros need a buffer).
  REQUIRE(ops::planBatch({&b}, {nullptr}, 2, 0, {}, &one).isOk());
  CHECK(one.fused);
  CHECK(one.copyIn.empty());
  CHECK(sameCopy(one.zeroFill.at(0), 0, 0, 0, 10));
}

TEST_CASE("batch plan: allgather blocks, outputs and copies") {
  Response a = response(OpType::kAllgather, DataType::kInt32, {2, 3}, "a");
  a.rankDim0 = {2, 1, 0};
  Response b = response(OpType::kAllgather, DataType::kInt32, {1}, "b");
  b.rankDim0 = {1, 4, 2};
  int32_t x[6], y[4];
  auto ea = entry(a, x);
  auto eb = entry(b, y);
  ops::BatchPlan p;
  REQUIRE(ops::planBatch({&a, &b}, {ea.get(), eb.get()}, 3, 1, {}, &p).isOk());
  // Row bytes: a 12, b 4. Block k: a's rows from k, then b's rows from k.
  CHECK(p.blockBytes == std::vector<size_t>{2 * 12 + 4, 12 + 16, 8});
  CHECK(p.blockOffset == std::vector<size_t>{0, 28, 56});
  CHECK(p.bufferBytes == 64);
  CHECK(p.collectiveBytes == 64);
  REQUIRE(p.outputs.size() == 2);
  CHECK(p.outputs[0].shape == std::vector<int64_t>{3, 3});
  CHECK(p.outputs[0].bytes == 36);
  CHECK(p.outputs[1].shape == std::vector<int64_t>{7});
  CHECK(p.outputs[1].bytes == 28);
  REQUIRE(p.copyIn.size() == 2);  // this rank (1) copies its rows into block 1
  CHECK(sameCopy(p.copyIn[0], 0, 0, 28, 12));
  CHECK(sameCopy(p.copyIn[1], 1, 0, 40, 16));
  REQUIRE(p.copyOut.size() == 6);  // (tensor, rank) pieces in rank order
  CHECK(sameCopy(p.copyOut[0], 0, 0, 0, 24));
  CHECK(sameCopy(p.copyOut[1], 0, 24, 28, 12));
  CHECK(sameCopy(p.copyOut[2], 0, 36, 56, 0));
  CHECK(sameCopy(p.copyOut[3], 1, 0, 24, 4));
  CHECK(sameCopy(p.copyOut[4], 1, 4, 40, 16));
  CHECK(sameCopy(p.copyOut[5], 1, 20, 56, 8));

  ops::BatchPlan one;
  REQUIRE(ops::planBatch({&b}, {eb.get()}, 3, 1, {}, &one).isOk());
  CHECK_FALSE(one.fused);
  CHECK(one.copyIn.empty());
  CHECK(one.blockBytes == std::vector<size_t>{4, 16, 8});

  SECTION("a missing local op or a malformed rankDim0 is an internal error") {
    CHECK(ops::planBatch({&a, &b}, {ea.get(), nullptr}, 3, 1, {}, &p).code() ==
          ErrorCode::kInternal);
    a.rankDim0 = {2, 1};
    CHECK(ops::planBatch({&a}, {ea.get()}, 3, 1, {}, &p).code() == ErrorCode::kInternal);
  }
}

TEST_CASE("batch plan: alltoall splits and reducescatter shares") {
  Response t = response(OpType::kAlltoall, DataType::kFloat64, {6, 2}, "t");
  // Row = sender: rank 0 sends 1,2,3; rank 1 sends 4,0,2; rank 2 sends 0,1,5.
  t.splitMatrix = {1, 2, 3, 4, 0, 2, 0, 1, 5};
  double x[12];
  auto et = entry(t, x);
  ops::BatchPlan p;
  REQUIRE(ops::planBatch({&t}, {et.get()}, 3, 1, {}, &p).isOk());
  CHECK(p.sendBytes == std::vector<size_t>{64, 0, 32});
  CHECK(p.recvBytes == std::vector<size_t>{32, 0, 16});
  CHECK(p.receivedSplits == std::vector<int32_t>{2, 0, 1});
  CHECK(p.collectiveBytes == 96);
  REQUIRE(p.outputs.size() == 1);
  CHECK(p.outputs[0].shape == std::vector<int64_t>{3, 2});
  CHECK(p.outputs[0].bytes == 48);

  Response r = response(OpType::kReducescatter, DataType::kFloat32, {5, 2}, "r");
  r.reduceOp = ReduceOp::kAverage;
  r.prescale = 2.0;
  float y[10];
  auto er = entry(r, y);
  REQUIRE(ops::planBatch({&r}, {er.get()}, 3, 2, {}, &p).isOk());
  CHECK(p.rankCounts == std::vector<size_t>{4, 4, 2});  // rows 2, 2, 1 of 2 elements
  CHECK(p.fused);
  CHECK(p.count == 10);
  CHECK(p.bufferBytes == 40);
  REQUIRE(p.copyIn.size() == 1);
  CHECK(sameCopy(p.copyIn[0], 0, 0, 0, 40));
  CHECK(p.prescale == 2.0);
  CHECK(p.postscale == 1.0 / 3);
  CHECK(p.outputs.at(0).shape == std::vector<int64_t>{1, 2});
  CHECK(p.outputs.at(0).bytes == 8);
}

TEST_CASE("batch plan: outputs through the allocator, the backend's own storage, or the input") {
  Response t = response(OpType::kAlltoall, DataType::kInt8, {4}, "t");
  t.splitMatrix = {1, 3, 2, 2};
  int8_t x[4];
  auto et = entry(t, x);
  ops::BatchPlan p;
  REQUIRE(ops::planBatch({&t}, {et.get()}, 2, 0, {}, &p).isOk());
  std::vector<int8_t> mine(64);
  size_t asked = 0;
  et->allocate = [&](size_t bytes, const std::vector<int64_t>&) {
    asked = bytes;
    return static_cast<void*>(mine.data());
  };
  std::vector<void*> outputs;
  int owned = 0;
  auto own = [&](HandleState& h, size_t bytes, void** out) {
    ++owned;
    h.ownedOutput.resize(bytes);
    *out = h.ownedOutput.data();
    return Status::ok();
  };
  REQUIRE(ops::allocateOutputs(p, {et.get()}, own, &outputs).isOk());
  CHECK(asked == 3);
  CHECK(owned == 0);
  CHECK(outputs.at(0) == mine.data());
  CHECK(et->handle->outputData == mine.data());
  CHECK(et->handle->outputShape == std::vector<int64_t>{3});
  CHECK(et->handle->receivedSplits == std::vector<int32_t>{1, 2});

  et->allocate = nullptr;
  REQUIRE(ops::allocateOutputs(p, {et.get()}, own, &outputs).isOk());
  CHECK(owned == 1);
  CHECK(outputs.at(0) == et->handle->ownedOutput.data());
  CHECK(et->handle->ownedOutput.size() == 3);

  // An allocator that returns NULL: the collective still gets a (scratch, owned) output, and
  // the entry carries the error its handle completes with.
  et->allocate = [](size_t, const std::vector<int64_t>&) { return static_cast<void*>(nullptr); };
  REQUIRE(ops::allocateOutputs(p, {et.get()}, own, &outputs).isOk());
  CHECK(owned == 2);
  CHECK(outputs.at(0) == et->handle->ownedOutput.data());
  CHECK(et->localError.code() == ErrorCode::kInvalidArgument);
  CHECK_THAT(et->localError.message(), Catch::Contains("'t'") && Catch::Contains("3 bytes"));

  // An allreduce allocates nothing: its output, or its input in place.
  Response a = response(OpType::kAllreduce, DataType::kInt8, {4}, "a");
  int8_t out[4];
  auto in = entry(a, x);
  auto outOfPlace = entry(a, x, out);
  REQUIRE(ops::planBatch({&a, &a}, {in.get(), outOfPlace.get()}, 2, 0, {}, &p).isOk());
  REQUIRE(ops::allocateOutputs(p, {in.get(), outOfPlace.get()}, own, &outputs).isOk());
  CHECK(outputs == std::vector<void*>{x, out});
}
