// SPDX-License-Identifier: Apache-2.0
// The loopback transport: matching, ordering, rendezvous copies, timeouts that name the peer,
// abort from another thread, cancellation and split. Posting never blocks, so most cases drive
// several ranks from one thread deterministically; the blocking cases use real threads.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "transport/loopback/loopback_transport.h"

using namespace kolo;
using namespace std::chrono_literals;

namespace {

std::vector<std::unique_ptr<Transport>> group(int n) {
  std::vector<std::unique_ptr<Transport>> ts;
  Status s = createLoopbackGroup(n, &ts);
  REQUIRE(s.isOk());
  REQUIRE(ts.size() == static_cast<size_t>(n));
  return ts;
}

Status postOne(Transport& t, const P2POp& op, std::unique_ptr<PendingOps>* out) {
  return t.post({op}, out);
}

bool isDone(PendingOps& p) {
  bool done = false;
  Status s = p.test(&done);
  REQUIRE(s.isOk());
  return done;
}

}  // namespace

TEST_CASE("loopback: group creation and identity") {
  auto ts = group(3);
  for (int r = 0; r < 3; ++r) {
    CHECK(std::string(ts[r]->name()) == "loopback");
    CHECK(ts[r]->rank() == r);
    CHECK(ts[r]->size() == 3);
    CHECK(ts[r]->globalRank(r) == r);
    CHECK(ts[r]->capabilities().sharedMemory);
    CHECK_FALSE(ts[r]->capabilities().nativeAllreduce);
  }
  std::vector<std::unique_ptr<Transport>> bad;
  CHECK(createLoopbackGroup(0, &bad).code() == ErrorCode::kInvalidArgument);
  CHECK(createLoopbackGroup(-2, &bad).code() == ErrorCode::kInvalidArgument);
  int x = 0;
  CHECK(ts[0]->allreduce(&x, 1, DataType::kInt32, ReduceOp::kSum).code() ==
        ErrorCode::kUnsupported);
}

TEST_CASE("loopback: recv posted before send and send before recv both deliver") {
  auto ts = group(2);
  int payload = 42, got = 0;
  std::unique_ptr<PendingOps> r, s;
  REQUIRE(postOne(*ts[1], recvOp(0, 5, &got, sizeof got), &r).isOk());
  CHECK_FALSE(isDone(*r));
  REQUIRE(postOne(*ts[0], sendOp(1, 5, &payload, sizeof payload), &s).isOk());
  CHECK(isDone(*r));
  CHECK(isDone(*s));
  CHECK(got == 42);

  payload = 7;
  REQUIRE(postOne(*ts[0], sendOp(1, 5, &payload, sizeof payload), &s).isOk());
  CHECK_FALSE(isDone(*s));  // rendezvous: the send waits for its receive
  REQUIRE(postOne(*ts[1], recvOp(0, 5, &got, sizeof got), &r).isOk());
  CHECK(r->wait(Clock::now() + 1s).isOk());
  CHECK(s->wait(Clock::now() + 1s).isOk());
  CHECK(got == 7);
}

TEST_CASE("loopback: FIFO per (src, dst, tag), tags independent") {
  auto ts = group(2);
  constexpr int kMsgs = 50;
  std::vector<int> out(kMsgs), in(kMsgs, -1);
  std::vector<std::unique_ptr<PendingOps>> sends(kMsgs), recvs(kMsgs);
  for (int i = 0; i < kMsgs; ++i) {
    out[i] = i * 3 + 1;
    REQUIRE(postOne(*ts[0], sendOp(1, 9, &out[i], sizeof(int)), &sends[i]).isOk());
  }
  for (int i = 0; i < kMsgs; ++i) {
    REQUIRE(postOne(*ts[1], recvOp(0, 9, &in[i], sizeof(int)), &recvs[i]).isOk());
  }
  for (int i = 0; i < kMsgs; ++i) {
    REQUIRE(sends[i]->wait(Clock::now() + 1s).isOk());
    REQUIRE(recvs[i]->wait(Clock::now() + 1s).isOk());
    CHECK(in[i] == i * 3 + 1);
  }
  // A message on tag 2 is not stuck behind an unreceived one on tag 1.
  int a = 11, b = 22, ga = 0, gb = 0;
  std::unique_ptr<PendingOps> sa, sb, rb, ra;
  REQUIRE(postOne(*ts[0], sendOp(1, 1, &a, sizeof a), &sa).isOk());
  REQUIRE(postOne(*ts[0], sendOp(1, 2, &b, sizeof b), &sb).isOk());
  REQUIRE(postOne(*ts[1], recvOp(0, 2, &gb, sizeof gb), &rb).isOk());
  CHECK(isDone(*rb));
  CHECK(gb == 22);
  CHECK_FALSE(isDone(*sa));
  REQUIRE(postOne(*ts[1], recvOp(0, 1, &ga, sizeof ga), &ra).isOk());
  CHECK(ga == 11);
  CHECK(isDone(*sa));
}

TEST_CASE("loopback: a batch with sends and receives, self messages and empty messages") {
  auto ts = group(3);
  std::vector<int> data = {1, 2, 3};
  std::vector<int> got(3, 0);
  std::vector<std::unique_ptr<PendingOps>> p(3);
  // Each rank sends its value to the right and receives from the left, in one batch.
  for (int r = 0; r < 3; ++r) {
    REQUIRE(ts[r]
                ->post({sendOp((r + 1) % 3, 0, &data[r], sizeof(int)),
                        recvOp((r + 2) % 3, 0, &got[r], sizeof(int))},
                       &p[r])
                .isOk());
  }
  for (int r = 0; r < 3; ++r) REQUIRE(p[r]->wait(Clock::now() + 1s).isOk());
  CHECK(got == std::vector<int>({3, 1, 2}));

  int self = 5, selfGot = 0;
  REQUIRE(ts[2]
              ->exchange({recvOp(2, 4, &selfGot, sizeof(int)), sendOp(2, 4, &self, sizeof(int))})
              .isOk());
  CHECK(selfGot == 5);
  REQUIRE(ts[0]->post({}, &p[0]).isOk());
  CHECK(isDone(*p[0]));
  std::unique_ptr<PendingOps> e1, e2;
  REQUIRE(postOne(*ts[0], sendOp(1, 3, nullptr, 0), &e1).isOk());
  REQUIRE(postOne(*ts[1], recvOp(0, 3, nullptr, 0), &e2).isOk());
  CHECK(isDone(*e1));
  CHECK(isDone(*e2));
  std::unique_ptr<PendingOps> bad;
  CHECK(postOne(*ts[0], sendOp(3, 0, &self, 4), &bad).code() == ErrorCode::kInvalidArgument);
  CHECK(postOne(*ts[0], sendOp(1, 0, nullptr, 4), &bad).code() == ErrorCode::kInvalidArgument);
}

TEST_CASE("loopback: byte count disagreement fails both sides with kMismatch") {
  auto ts = group(2);
  char buf[16] = {};
  std::unique_ptr<PendingOps> s, r;
  REQUIRE(postOne(*ts[0], sendOp(1, 6, buf, 8), &s).isOk());
  REQUIRE(postOne(*ts[1], recvOp(0, 6, buf + 8, 4), &r).isOk());
  Status a = s->wait(Clock::now() + 1s);
  Status b = r->wait(Clock::now() + 1s);
  CHECK(a.code() == ErrorCode::kMismatch);
  CHECK(b.code() == ErrorCode::kMismatch);
  CHECK(a.message().find("rank 0 sent 8 bytes to rank 1 (tag 6)") != std::string::npos);
}

TEST_CASE("loopback: timeout names the outstanding peers and does not hang") {
  auto ts = group(3);
  ts[1]->setTimeout(200ms);
  int x = 0, y = 0, z = 0;
  std::unique_ptr<PendingOps> p;
  REQUIRE(ts[1]->post({recvOp(0, 7, &x, 4), recvOp(0, 7, &y, 4), sendOp(2, 8, &z, 4)}, &p).isOk());
  auto start = Clock::now();
  Status s = p->wait(ts[1]->deadlineFromNow());
  auto took = Clock::now() - start;
  CHECK(s.code() == ErrorCode::kTimeout);
  CHECK(took >= 190ms);
  CHECK(took < 2s);
  INFO(s.message());
  // The number is the measured wait (%.3g): a late wake-up prints 0.3 or more, so check it lies
  // between the 200 ms timeout (less a little rounding) and the 2 s bound above.
  const std::string prefix = "rank 1 waited ";
  REQUIRE(s.message().compare(0, prefix.size(), prefix) == 0);
  const double waited = std::strtod(s.message().c_str() + prefix.size(), nullptr);
  CHECK(waited >= 0.19);
  CHECK(waited < 2.0);
  CHECK(s.message().find("2 recv(s) from rank 0 (tag 7)") != std::string::npos);
  CHECK(s.message().find("1 send(s) to rank 2 (tag 8)") != std::string::npos);
  // The partly done batch reports only what is still missing.
  int v = 9;
  std::unique_ptr<PendingOps> q;
  REQUIRE(postOne(*ts[0], sendOp(1, 7, &v, 4), &q).isOk());
  s = p->wait(Clock::now() + 50ms);
  CHECK(s.message().find("1 recv(s) from rank 0 (tag 7)") != std::string::npos);
  CHECK(x == 9);
}

TEST_CASE("loopback: cancelled receive is withdrawn from the stream") {
  auto ts = group(2);
  int first = 0, second = 0, v = 31;
  {
    std::unique_ptr<PendingOps> r;
    REQUIRE(postOne(*ts[1], recvOp(0, 2, &first, 4), &r).isOk());
  }  // destroyed incomplete: cancelled
  std::unique_ptr<PendingOps> r2, s;
  REQUIRE(postOne(*ts[1], recvOp(0, 2, &second, 4), &r2).isOk());
  REQUIRE(postOne(*ts[0], sendOp(1, 2, &v, 4), &s).isOk());
  REQUIRE(r2->wait(Clock::now() + 1s).isOk());
  CHECK(first == 0);
  CHECK(second == 31);
}

TEST_CASE("loopback: abort from another thread wakes every waiter on every rank") {
  auto ts = group(3);
  for (auto& t : ts) t->setTimeout(20s);
  std::vector<Status> results(2);
  std::vector<std::chrono::steady_clock::duration> took(2);
  std::vector<std::thread> waiters;
  for (int r = 0; r < 2; ++r) {
    waiters.emplace_back([&, r] {
      int sink = 0;
      auto start = Clock::now();
      results[r] = ts[r]->exchange({recvOp(2, 1, &sink, 4)});
      took[r] = Clock::now() - start;
    });
  }
  std::this_thread::sleep_for(50ms);
  ts[2]->abort(Status(ErrorCode::kPeerLost, "rank 2 lost its node"));
  for (auto& w : waiters) w.join();
  for (int r = 0; r < 2; ++r) {
    CHECK(results[r].code() == ErrorCode::kPeerLost);
    CHECK(results[r].message() == "rank 2 lost its node");
    CHECK(took[r] < 5s);
  }
  // Later operations fail with the first cause; abort is idempotent.
  ts[0]->abort(Status(ErrorCode::kAborted, "second cause"));
  int v = 0;
  std::unique_ptr<PendingOps> p;
  Status s = postOne(*ts[1], sendOp(0, 1, &v, 4), &p);
  CHECK(s.code() == ErrorCode::kPeerLost);
  std::unique_ptr<Transport> sub;
  CHECK(ts[0]->split({0, 1}, 3, &sub).code() == ErrorCode::kPeerLost);
}

TEST_CASE("loopback: abort fails a wait already posted and a test") {
  auto ts = group(2);
  int v = 0;
  std::unique_ptr<PendingOps> p;
  REQUIRE(postOne(*ts[0], recvOp(1, 1, &v, 4), &p).isOk());
  ts[1]->abort(Status(ErrorCode::kAborted, "stop"));
  bool done = true;
  CHECK(p->test(&done).code() == ErrorCode::kAborted);
  CHECK_FALSE(done);
  CHECK(p->wait(Clock::now() + 10s).message() == "stop");
}

TEST_CASE("loopback: split into subgroups") {
  auto ts = group(4);
  ts[3]->setTimeout(1234ms);
  std::vector<std::unique_ptr<Transport>> sub(4);
  for (int r = 0; r < 4; ++r) REQUIRE(ts[r]->split({1, 3}, 9, &sub[r]).isOk());
  CHECK(sub[0] == nullptr);
  CHECK(sub[2] == nullptr);
  REQUIRE(sub[1] != nullptr);
  REQUIRE(sub[3] != nullptr);
  CHECK(sub[1]->rank() == 0);
  CHECK(sub[3]->rank() == 1);
  CHECK(sub[3]->size() == 2);
  CHECK(sub[1]->globalRank(1) == 3);
  CHECK(sub[3]->timeout() == 1234ms);

  // Subgroup traffic is separate from the parent's, even on the same tag.
  int a = 5, got = 0, parentGot = 0, b = 6;
  std::unique_ptr<PendingOps> s, r, ps, pr;
  REQUIRE(postOne(*ts[1], sendOp(3, 0, &b, 4), &ps).isOk());
  REQUIRE(postOne(*sub[1], sendOp(1, 0, &a, 4), &s).isOk());
  REQUIRE(postOne(*sub[3], recvOp(0, 0, &got, 4), &r).isOk());
  REQUIRE(r->wait(Clock::now() + 1s).isOk());
  CHECK(got == 5);
  REQUIRE(postOne(*ts[3], recvOp(1, 0, &parentGot, 4), &pr).isOk());
  REQUIRE(pr->wait(Clock::now() + 1s).isOk());
  CHECK(parentGot == 6);

  // Timeouts in a subgroup name both the group and the global rank.
  sub[1]->setTimeout(100ms);
  Status t = sub[1]->exchange({recvOp(1, 4, &got, 4)});
  CHECK(t.code() == ErrorCode::kTimeout);
  CHECK(t.message().find("from rank 3 (index 1 in this group) (tag 4)") != std::string::npos);

  // The same setId again makes a fresh group; a member list disagreement is a mismatch.
  std::vector<std::unique_ptr<Transport>> again(4);
  for (int r = 0; r < 4; ++r) REQUIRE(ts[r]->split({0, 1, 2}, 9, &again[r]).isOk());
  CHECK(again[2]->size() == 3);
  CHECK(again[3] == nullptr);
  std::unique_ptr<Transport> x, y;
  REQUIRE(ts[0]->split({0, 2}, 11, &x).isOk());
  CHECK(ts[2]->split({0, 1, 2}, 11, &y).code() == ErrorCode::kMismatch);
  CHECK(ts[1]->split({2, 1}, 12, &y).code() == ErrorCode::kInvalidArgument);

  // Aborting the parent reaches the subgroup.
  int v = 0;
  std::unique_ptr<PendingOps> w;
  REQUIRE(postOne(*sub[3], recvOp(0, 2, &v, 4), &w).isOk());
  ts[0]->abort(Status(ErrorCode::kAborted, "parent down"));
  CHECK(w->wait(Clock::now() + 10s).message() == "parent down");
}

TEST_CASE("loopback: many threads exchanging concurrently") {
  constexpr int kRanks = 8;
  constexpr int kRounds = 200;
  auto ts = group(kRanks);
  std::vector<Status> results(kRanks);
  std::vector<long> sums(kRanks, 0);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      Transport& t = *ts[r];
      t.setTimeout(10s);
      for (int round = 0; round < kRounds; ++round) {
        std::vector<int> out(kRanks), in(kRanks, 0);
        std::vector<P2POp> ops;
        for (int p = 0; p < kRanks; ++p) {
          out[p] = r * 1000 + round;
          ops.push_back(sendOp(p, 0, &out[p], 4));
          ops.push_back(recvOp(p, 0, &in[p], 4));
        }
        Status s = t.exchange(ops);
        if (!s.isOk()) {
          results[r] = s;
          return;
        }
        for (int p = 0; p < kRanks; ++p) sums[r] += in[p] - round;
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int r = 0; r < kRanks; ++r) {
    CHECK(results[r].isOk());
    CHECK(sums[r] == long{kRounds} * 1000 * (kRanks * (kRanks - 1) / 2));
  }
}
