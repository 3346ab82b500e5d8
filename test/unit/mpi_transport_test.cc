// SPDX-License-Identifier: Apache-2.0
// The MPI transport in a singleton MPI job (one process, no mpirun): creation (twice, over one
// MPI initialization), messages to self, FIFO per tag, argument checks, a timeout that names
// the peer, abort from another thread, the native collectives at size 1 and split. The
// multi-rank behaviour is covered by test/mp under mpirun. Transports come from the registry,
// so this file builds (and its cases return early) when kolo is configured without MPI.
#include <catch2/catch.hpp>
#include <chrono>
#include <thread>
#include <vector>

#include "bootstrap/registry.h"

using namespace kolo;
using namespace std::chrono_literals;

namespace {

std::unique_ptr<Transport> makeMpi() {
  Config cfg;
  cfg.transport = TransportKind::kMpi;
  cfg.shm = ShmMode::kOff;  // the MPI transport itself, not the shared-memory one over it
  cfg.timeoutSeconds = 5;
  std::unique_ptr<Transport> t;
  Status s = createTransport(cfg, nullptr, -1, -1, &t);
  INFO(s.toString());
  REQUIRE(s.isOk());
  return t;
}

bool mpiBuilt() {
  if (!transportBuilt(TransportKind::kMpi)) WARN("kolo was built without MPI");
  return transportBuilt(TransportKind::kMpi);
}

double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

TEST_CASE("mpi: a singleton job, created twice over one MPI initialization") {
  if (!mpiBuilt()) return;
  auto a = makeMpi();
  auto b = makeMpi();
  for (auto* t : {a.get(), b.get()}) {
    CHECK(std::string(t->name()) == "mpi");
    CHECK(t->rank() == 0);
    CHECK(t->size() == 1);
    CHECK(t->globalRank(0) == 0);
    CHECK(t->timeout() == 5000ms);
    const Capabilities c = t->capabilities();
    CHECK(c.nativeAllreduce);
    CHECK(c.nativeReducescatter);
    CHECK(c.sharedMemory);
  }
}

TEST_CASE("mpi: messages to self keep FIFO order per tag, bad arguments are rejected") {
  if (!mpiBuilt()) return;
  auto t = makeMpi();
  std::vector<int> out = {1, 2, 3}, in(3, 0);
  std::vector<P2POp> ops;
  for (int i = 0; i < 3; ++i) ops.push_back(recvOp(0, 9, &in[i], sizeof(int)));
  for (int i = 0; i < 3; ++i) ops.push_back(sendOp(0, 9, &out[i], sizeof(int)));
  ops.push_back(sendOp(0, 10, nullptr, 0));
  ops.push_back(recvOp(0, 10, nullptr, 0));
  REQUIRE(t->exchange(ops).isOk());
  CHECK(in == out);
  std::unique_ptr<PendingOps> p;
  CHECK(t->post({sendOp(1, 0, &out[0], 4)}, &p).code() == ErrorCode::kInvalidArgument);
  CHECK(t->post({sendOp(0, 0xFFFFFFFFu, &out[0], 4)}, &p).code() == ErrorCode::kInvalidArgument);
  // A receive longer than what was sent is a protocol error, named.
  int big[2] = {0, 0};
  Status s = t->exchange({recvOp(0, 11, big, sizeof big), sendOp(0, 11, &out[0], 4)});
  CHECK(s.code() == ErrorCode::kInternal);
  CHECK_THAT(s.message(), Catch::Contains("sent 4 bytes where 8 were posted"));
}

TEST_CASE("mpi: an unmatched receive times out naming the peer, and abandoning it aborts") {
  if (!mpiBuilt()) return;
  auto t = makeMpi();
  int in = 0;
  std::unique_ptr<PendingOps> p;
  REQUIRE(t->post({recvOp(0, 12, &in, sizeof in)}, &p).isOk());
  bool done = true;
  REQUIRE(p->test(&done).isOk());
  CHECK_FALSE(done);
  auto start = Clock::now();
  Status s = p->wait(Clock::now() + 200ms);
  CHECK(s.code() == ErrorCode::kTimeout);
  CHECK_THAT(s.message(), Catch::Contains("receive from rank 0 (global 0)"));
  CHECK(secondsSince(start) < 1.0);
  p.reset();
  int x = 0;
  Status after = t->allreduce(&x, 1, DataType::kInt32, ReduceOp::kSum);
  CHECK(after.code() == ErrorCode::kTimeout);  // the cause recorded is the timeout itself
  CHECK_THAT(after.message(), Catch::Contains("receive from rank 0 (global 0)"));
  CHECK_THAT(after.message(), Catch::Contains("abandoned"));
}

TEST_CASE("mpi: abort from another thread ends a wait promptly and reaches split children") {
  if (!mpiBuilt()) return;
  auto t = makeMpi();
  std::unique_ptr<Transport> child;
  REQUIRE(t->split({0}, 1, &child).isOk());
  REQUIRE(child != nullptr);
  CHECK(child->size() == 1);
  int in = 0;
  std::unique_ptr<PendingOps> p;
  REQUIRE(t->post({recvOp(0, 13, &in, sizeof in)}, &p).isOk());
  const Status cause(ErrorCode::kAborted, "rank 5 lost");
  std::thread aborter([&] {
    std::this_thread::sleep_for(100ms);
    t->abort(cause);
  });
  auto start = Clock::now();
  Status s = p->wait(Clock::now() + 10s);
  aborter.join();
  CHECK(s.message() == cause.message());
  CHECK(secondsSince(start) < 2.0);
  int x = 0;
  CHECK(child->allreduce(&x, 1, DataType::kInt32, ReduceOp::kSum).message() == cause.message());
}

TEST_CASE("mpi: native collectives at size 1") {
  if (!mpiBuilt()) return;
  auto t = makeMpi();
  for (DataType dt : {DataType::kUInt8, DataType::kInt8, DataType::kUInt16, DataType::kInt16,
                      DataType::kInt32, DataType::kInt64, DataType::kFloat16, DataType::kBFloat16,
                      DataType::kFloat32, DataType::kFloat64, DataType::kBool}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct}) {
      std::vector<uint8_t> data(37 * sizeOf(dt));
      for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i % 2);
      const auto before = data;
      INFO(toString(dt) << " " << toString(op));
      CHECK(t->allreduce(data.data(), 37, dt, op).isOk());
      CHECK(data == before);
    }
  }
  float f = 1;
  CHECK(t->allreduce(&f, 1, DataType::kFloat32, ReduceOp::kBitAnd).code() ==
        ErrorCode::kInvalidArgument);
  std::vector<uint8_t> in = {1, 2, 3, 4, 5}, out(5, 0);
  CHECK(t->allgatherv(in.data(), 5, out.data(), {5}).isOk());
  CHECK(out == in);
  CHECK(t->allgatherv(in.data(), 4, out.data(), {5}).code() == ErrorCode::kInvalidArgument);
  out.assign(5, 0);
  CHECK(t->alltoallv(in.data(), {5}, out.data(), {5}).isOk());
  CHECK(out == in);
  CHECK(t->broadcast(in.data(), 5, 0).isOk());
  CHECK(t->broadcast(in.data(), 5, 1).code() == ErrorCode::kInvalidArgument);
  std::vector<int32_t> rs = {7, 8}, rsOut(2, 0);
  CHECK(t->reducescatter(rs.data(), rsOut.data(), {2}, DataType::kInt32, ReduceOp::kSum).isOk());
  CHECK(rsOut == rs);
}
