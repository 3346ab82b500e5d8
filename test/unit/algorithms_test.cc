// SPDX-License-Identifier: Apache-2.0
// The latency-optimal algorithms (recursive doubling and halving-doubling allreduce, Bruck
// allgatherv, binomial-tree and chain broadcast; scatter-allgather broadcast in
// broadcast_test.cc) over loopback thread ranks, N = 1..9 (powers of
// two and not), with 0 elements, 1, fewer than ranks, and large buffers.
//
// Allreduce results are checked bitwise against a reference built with the same reduce_cpu
// functions in the same combination tree (fold pairs, then the balanced tree over core ranks,
// lower rank first), for every dtype x op, so a wrong operand order or a wrong tree fails even
// for floats. Every rank must end bitwise identical, and the two allreduces bitwise equal.
// Also: the selection table and names, the KOLO_<OP>_ALGORITHM names, and a silent peer named
// in the error of each algorithm.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "base/config.h"
#include "ops/collectives.h"
#include "kernels/reduce_cpu.h"
#include "transport/loopback/loopback_transport.h"
#include "test/mp/mp_data.h"
#include "test/unit/loopback_ranks.h"

using namespace kolo;
using namespace std::chrono_literals;

namespace {

using kolo::testing::requireAllOk;
using kolo::testing::runRanks;

using Bytes = std::vector<uint8_t>;

const DataType kAllTypes[] = {DataType::kUInt8,   DataType::kInt8,     DataType::kUInt16,
                              DataType::kInt16,   DataType::kInt32,    DataType::kInt64,
                              DataType::kFloat16, DataType::kBFloat16, DataType::kFloat32,
                              DataType::kFloat64, DataType::kBool};
const ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax,
                            ReduceOp::kProduct};

// Element i of rank r's input, encoded in dtype: mixed signs and fractions (floats), wrapping
// products (ints), never NaN.
Bytes input(int rank, size_t count, DataType dtype, uint32_t seed) {
  const size_t es = sizeOf(dtype);
  Bytes b(count * es);
  std::mt19937 rng(seed * 1000003u + static_cast<uint32_t>(rank) * 7919u);
  for (size_t i = 0; i < count; ++i) {
    const int k = static_cast<int>(rng() % 17) - 8;                         // -8..8
    const double f = k * 0.37 + static_cast<double>(rng() % 1000) / 999.0;  // not exact
    uint8_t* p = b.data() + i * es;
    switch (dtype) {
      case DataType::kFloat16:
      case DataType::kBFloat16:
      case DataType::kFloat32:
      case DataType::kFloat64:
        mptest::storeFloat(dtype, f, p);
        break;
      case DataType::kBool:
        *p = k > 0 ? 1 : 0;
        break;
      default: {
        int64_t v = k * 37 + static_cast<int64_t>(rng() % 50);
        std::memcpy(p, &v, es);  // little endian: the low bytes
        break;
      }
    }
  }
  return b;
}

// The result the fold + balanced tree must give, combined with reduce_cpu in the same order.
Bytes treeReference(const std::vector<Bytes>& in, size_t count, DataType dtype, ReduceOp op) {
  const int n = static_cast<int>(in.size());
  int p = 1;
  while (p * 2 <= n) p *= 2;
  const int rem = n - p;
  std::vector<Bytes> level;
  for (int i = 0; i < rem; ++i) {
    Bytes x = in[2 * i];
    if (count > 0) kernels::reduceInto(x.data(), in[2 * i + 1].data(), count, dtype, op);
    level.push_back(x);
  }
  for (int r = 2 * rem; r < n; ++r) level.push_back(in[r]);
  while (level.size() > 1) {
    std::vector<Bytes> next;
    for (size_t i = 0; i < level.size(); i += 2) {
      Bytes x = level[i];
      if (count > 0) kernels::reduceInto(x.data(), level[i + 1].data(), count, dtype, op);
      next.push_back(x);
    }
    level.swap(next);
  }
  return level[0];
}

using AllreduceFn = std::function<Status(Transport&, void*, size_t, DataType, ReduceOp)>;

const std::pair<const char*, AllreduceFn> kAllreduces[] = {
    {"recursive_doubling", ops::recursiveDoublingAllreduce},
    {"halving_doubling", ops::halvingDoublingAllreduce},
};

// Runs one allreduce on n ranks and checks every rank against the tree reference, bitwise.
void checkAllreduce(const char* name, const AllreduceFn& fn, int n, size_t count, DataType dtype,
                    ReduceOp op, uint32_t seed) {
  std::vector<Bytes> in, bufs;
  for (int r = 0; r < n; ++r) in.push_back(input(r, count, dtype, seed));
  bufs = in;
  requireAllOk(
      runRanks(n, [&](Transport& t, int r) { return fn(t, bufs[r].data(), count, dtype, op); }));
  const Bytes ref = treeReference(in, count, dtype, op);
  for (int r = 0; r < n; ++r) {
    INFO(name << " ranks=" << n << " count=" << count << " dtype=" << toString(dtype)
              << " op=" << toString(op) << " rank=" << r);
    REQUIRE(bufs[r] == ref);
  }
}

}  // namespace

TEST_CASE("recursive doubling and halving-doubling: every rank count and size, bitwise") {
  for (const auto& [name, fn] : kAllreduces) {
    for (int n = 1; n <= 9; ++n) {
      for (size_t count : {size_t{0}, size_t{1}, static_cast<size_t>(n - 1),
                           static_cast<size_t>(7 * n + 3), size_t{20000}}) {
        checkAllreduce(name, fn, n, count, DataType::kFloat32, ReduceOp::kSum, 1);
        checkAllreduce(name, fn, n, count, DataType::kInt32, ReduceOp::kProduct, 2);
      }
    }
  }
}

TEST_CASE("recursive doubling and halving-doubling: every dtype and op") {
  for (const auto& [name, fn] : kAllreduces) {
    for (int n : {2, 3, 6, 8}) {
      for (DataType dtype : kAllTypes) {
        for (ReduceOp op : kAllOps) checkAllreduce(name, fn, n, 37, dtype, op, 3);
      }
      // The control plane's kind of call: a few bytes, kMin, and the cache round's kBitAnd.
      checkAllreduce(name, fn, n, 5, DataType::kUInt8, ReduceOp::kMin, 4);
      checkAllreduce(name, fn, n, 9, DataType::kUInt8, ReduceOp::kBitAnd, 5);
      checkAllreduce(name, fn, n, 9, DataType::kInt64, ReduceOp::kBitAnd, 6);
    }
  }
}

TEST_CASE("the two allreduces agree bitwise, and min of -0 and +0 is the same everywhere") {
  for (int n : {3, 4, 5, 7}) {
    const size_t count = 1001;
    std::vector<Bytes> in;
    for (int r = 0; r < n; ++r) in.push_back(input(r, count, DataType::kFloat32, 9));
    std::vector<Bytes> a = in, b = in;
    requireAllOk(runRanks(n, [&](Transport& t, int r) {
      KOLO_RETURN_IF_ERROR(ops::recursiveDoublingAllreduce(t, a[r].data(), count,
                                                           DataType::kFloat32, ReduceOp::kSum));
      return ops::halvingDoublingAllreduce(t, b[r].data(), count, DataType::kFloat32,
                                           ReduceOp::kSum);
    }));
    for (int r = 0; r < n; ++r) {
      CHECK(a[r] == a[0]);
      CHECK(b[r] == a[0]);
    }
    // Signed zeros: which one min() returns depends on the operand order.
    for (const auto& [name, fn] : kAllreduces) {
      std::vector<std::vector<float>> z(static_cast<size_t>(n), std::vector<float>(8));
      for (int r = 0; r < n; ++r) {
        for (size_t i = 0; i < 8; ++i) z[r][i] = ((r + i) % 2 == 0) ? 0.0f : -0.0f;
      }
      requireAllOk(runRanks(n, [&](Transport& t, int r) {
        return fn(t, z[r].data(), 8, DataType::kFloat32, ReduceOp::kMin);
      }));
      for (int r = 1; r < n; ++r) {
        INFO(name << " ranks=" << n << " rank=" << r);
        CHECK(std::memcmp(z[r].data(), z[0].data(), 8 * sizeof(float)) == 0);
      }
    }
  }
}

TEST_CASE("bruck allgatherv: variable and empty blocks, every rank count, in place") {
  std::mt19937 rng(11);
  for (int n = 1; n <= 9; ++n) {
    for (int trial = 0; trial < 4; ++trial) {
      std::vector<size_t> sizes(static_cast<size_t>(n));
      for (auto& s : sizes) {
        s = trial == 0 ? 0 : trial == 1 ? 1 : trial == 2 ? rng() % 4 : rng() % 3000;
      }
      if (trial == 2 && n > 1) sizes[1] = 0;
      std::vector<size_t> off(static_cast<size_t>(n) + 1, 0);
      for (int i = 0; i < n; ++i) off[i + 1] = off[i] + sizes[i];
      Bytes expect(off[n]);
      for (size_t i = 0; i < expect.size(); ++i) expect[i] = static_cast<uint8_t>(rng());
      std::vector<Bytes> out(static_cast<size_t>(n), Bytes(off[n], 0xEE));
      const bool inPlace = trial == 3;
      requireAllOk(runRanks(n, [&](Transport& t, int r) {
        if (inPlace) {
          std::memcpy(out[r].data() + off[r], expect.data() + off[r], sizes[r]);
          return ops::bruckAllgatherv(t, out[r].data() + off[r], sizes[r], out[r].data(), sizes);
        }
        return ops::bruckAllgatherv(t, expect.data() + off[r], sizes[r], out[r].data(), sizes);
      }));
      for (int r = 0; r < n; ++r) {
        INFO("ranks=" << n << " trial=" << trial << " rank=" << r);
        CHECK(out[r] == expect);
      }
    }
  }
}

TEST_CASE("binomial tree and chain broadcast from every root, every rank count") {
  for (int n = 1; n <= 9; ++n) {
    for (size_t bytes : {size_t{0}, size_t{1}, size_t{100}, size_t{70000}}) {
      for (int root = 0; root < n; ++root) {
        Bytes want(bytes);
        for (size_t i = 0; i < bytes; ++i) want[i] = static_cast<uint8_t>(i * 13 + root);
        for (int shape = 0; shape < 2; ++shape) {
          std::vector<Bytes> bufs(static_cast<size_t>(n), Bytes(bytes, 0));
          bufs[root] = want;
          requireAllOk(runRanks(n, [&](Transport& t, int r) {
            return shape == 0 ? ops::binomialBroadcast(t, bufs[r].data(), bytes, root)
                              : ops::chainBroadcast(t, bufs[r].data(), bytes, root, 4096);
          }));
          for (int r = 0; r < n; ++r) {
            INFO("ranks=" << n << " bytes=" << bytes << " root=" << root << " shape=" << shape);
            CHECK(bufs[r] == want);
          }
        }
      }
    }
  }
}

TEST_CASE("binomial gather of variable blocks to every root, every rank count") {
  for (int n = 1; n <= 9; ++n) {
    for (int root = 0; root < n; ++root) {
      // Rank r's block: (r * 7) % 5 bytes (some empty), each byte naming the rank.
      auto blockOf = [](int r) { return Bytes(static_cast<size_t>((r * 7) % 5), uint8_t(r + 1)); };
      std::vector<std::vector<Bytes>> got(static_cast<size_t>(n));
      requireAllOk(runRanks(n, [&](Transport& t, int r) {
        return ops::binomialGatherv(t, blockOf(r), root, r == root ? &got[r] : nullptr);
      }));
      INFO("ranks=" << n << " root=" << root);
      REQUIRE(got[root].size() == static_cast<size_t>(n));
      for (int r = 0; r < n; ++r) CHECK(got[root][r] == blockOf(r));
      for (int r = 0; r < n; ++r) CHECK((r == root || got[r].empty()));
    }
  }
  // A lost leaf is named by the rank that waits for it.
  std::vector<std::unique_ptr<Transport>> ts;
  REQUIRE(createLoopbackGroup(2, &ts).isOk());
  ts[0]->setTimeout(std::chrono::milliseconds(200));
  std::vector<Bytes> all;
  Status s = ops::binomialGatherv(*ts[0], Bytes{1}, 0, &all);
  CHECK(s.code() == ErrorCode::kTimeout);
  CHECK(s.message().find("rank 1") != std::string::npos);
  CHECK(ops::binomialGatherv(*ts[0], Bytes{1}, 2, &all).code() == ErrorCode::kInvalidArgument);
}

TEST_CASE("selection: configured algorithms win, auto follows the size table") {
  std::vector<std::unique_ptr<Transport>> ts;
  REQUIRE(createLoopbackGroup(8, &ts).isOk());
  Transport& t8 = *ts[0];
  ops::AlgorithmConfig cfg;
  auto pick = [&](OpType op, size_t bytes) { return ops::selectAlgorithm(t8, cfg, op, bytes); };
  CHECK(pick(OpType::kAllreduce, 4) == ops::Algorithm::kRecursiveDoubling);
  CHECK(pick(OpType::kAllreduce, 256 << 20) == ops::Algorithm::kRing);
  CHECK(pick(OpType::kAllgather, 64) == ops::Algorithm::kBruck);
  CHECK(pick(OpType::kAllgather, 256 << 20) == ops::Algorithm::kRing);
  CHECK(pick(OpType::kBroadcast, 64) == ops::Algorithm::kTree);
  CHECK(pick(OpType::kBroadcast, 256 << 20) == ops::Algorithm::kRing);
  CHECK(pick(OpType::kAlltoall, 64) == ops::Algorithm::kRing);
  CHECK(ops::plannedStep(t8, cfg, OpType::kAllreduce, 4) == "RECURSIVE_DOUBLING_ALLREDUCE");
  CHECK(ops::plannedStep(t8, cfg, OpType::kAllgather, 4) == "BRUCK_ALLGATHER");
  CHECK(ops::plannedStep(t8, cfg, OpType::kBroadcast, 4) == "TREE_BROADCAST");
  CHECK(ops::plannedStep(t8, cfg, OpType::kBroadcast, 4 << 20) == "PIPELINED_BROADCAST");

  cfg.allreduce = ops::Algorithm::kHalvingDoubling;
  cfg.broadcast = ops::Algorithm::kRing;
  cfg.allgather = ops::Algorithm::kRing;
  CHECK(pick(OpType::kAllreduce, 4) == ops::Algorithm::kHalvingDoubling);
  CHECK(ops::plannedStep(t8, cfg, OpType::kAllreduce, 4) == "HALVING_DOUBLING_ALLREDUCE");
  CHECK(pick(OpType::kBroadcast, 4) == ops::Algorithm::kRing);
  CHECK(pick(OpType::kAllgather, 4) == ops::Algorithm::kRing);
  cfg.allreduce = ops::Algorithm::kRecursiveDoubling;
  CHECK(pick(OpType::kAllreduce, 256 << 20) == ops::Algorithm::kRecursiveDoubling);
  cfg.allreduce = ops::Algorithm::kRing;
  CHECK(pick(OpType::kAllreduce, 4) == ops::Algorithm::kRing);
  // A name with no form for the collective is auto; native without the capability is ours.
  cfg.allreduce = ops::Algorithm::kBruck;
  cfg.broadcast = ops::Algorithm::kNative;
  CHECK(pick(OpType::kAllreduce, 4) == ops::Algorithm::kRecursiveDoubling);
  CHECK(pick(OpType::kBroadcast, 4) == ops::Algorithm::kTree);

  // Loopback has no native allreduce: auto reads the crossovers; a named one of ours does not.
  ops::AlgorithmConfig fresh;
  CHECK(ops::allreduceCrossoversUsed(t8, fresh));
  fresh.allreduce = ops::Algorithm::kNative;  // ours by size, as auto
  CHECK(ops::allreduceCrossoversUsed(t8, fresh));
  fresh.allreduce = ops::Algorithm::kHalvingDoubling;
  CHECK_FALSE(ops::allreduceCrossoversUsed(t8, fresh));

  CHECK(ops::appliesTo(ops::Algorithm::kTree, OpType::kBroadcast));
  CHECK_FALSE(ops::appliesTo(ops::Algorithm::kTree, OpType::kAllreduce));
  CHECK_FALSE(ops::appliesTo(ops::Algorithm::kBruck, OpType::kAllreduce));
  CHECK(ops::appliesTo(ops::Algorithm::kNative, OpType::kAlltoall));
}

TEST_CASE("selected entry points run and name each algorithm") {
  const int n = 5;
  for (ops::Algorithm a :
       {ops::Algorithm::kRing, ops::Algorithm::kRecursiveDoubling, ops::Algorithm::kHalvingDoubling,
        ops::Algorithm::kTree, ops::Algorithm::kBruck, ops::Algorithm::kAuto}) {
    ops::AlgorithmConfig cfg;
    cfg.allreduce = cfg.allgather = cfg.broadcast = a;
    std::vector<std::string> names(static_cast<size_t>(n) * 3);
    std::vector<std::vector<int64_t>> data(static_cast<size_t>(n), std::vector<int64_t>(300));
    std::vector<std::vector<int32_t>> gathered(static_cast<size_t>(n), std::vector<int32_t>(n));
    requireAllOk(runRanks(n, [&](Transport& t, int r) -> Status {
      for (size_t i = 0; i < data[r].size(); ++i) data[r][i] = r + static_cast<int64_t>(i);
      KOLO_RETURN_IF_ERROR(ops::allreduce(t, cfg, data[r].data(), 300, DataType::kInt64,
                                          ReduceOp::kSum, &names[r * 3]));
      int32_t mine = 10 * r;
      KOLO_RETURN_IF_ERROR(ops::allgatherv(t, cfg, &mine, 4, gathered[r].data(),
                                           std::vector<size_t>(n, 4), &names[r * 3 + 1]));
      return ops::broadcast(t, cfg, data[r].data(), 16, 3, &names[r * 3 + 2]);
    }));
    for (int r = 0; r < n; ++r) {
      INFO("algorithm " << ops::toString(a) << " rank " << r);
      CHECK(data[r][0] == 10);  // 0+1+2+3+4
      CHECK(data[r][299] == 10 + 5 * 299);
      for (int i = 0; i < n; ++i) CHECK(gathered[r][i] == 10 * i);
      const char* arName = a == ops::Algorithm::kRing              ? "RING_ALLREDUCE"
                           : a == ops::Algorithm::kHalvingDoubling ? "HALVING_DOUBLING_ALLREDUCE"
                                                                   : "RECURSIVE_DOUBLING_ALLREDUCE";
      CHECK(names[r * 3] == arName);
      CHECK(names[r * 3 + 1] ==
            (a == ops::Algorithm::kRing ? "RING_ALLGATHER" : "BRUCK_ALLGATHER"));
      CHECK(names[r * 3 + 2] ==
            (a == ops::Algorithm::kRing ? "PIPELINED_BROADCAST" : "TREE_BROADCAST"));
    }
  }
}

TEST_CASE("KOLO_<OP>_ALGORITHM accepts each collective's names, rejects others by name") {
  std::map<std::string, std::string> env;
  auto get = [&](const char* n) -> const char* {
    auto it = env.find(n);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  env = {{"KOLO_ALLREDUCE_ALGORITHM", "recursive_doubling"},
         {"KOLO_BROADCAST_ALGORITHM", "Tree"},
         {"HOROVOD_ALLGATHER_ALGORITHM", "bruck"}};
  Config c;
  REQUIRE(Config::fromEnvironment(&c, get).isOk());
  CHECK(c.algorithms.allreduce == ops::Algorithm::kRecursiveDoubling);
  CHECK(c.algorithms.broadcast == ops::Algorithm::kTree);
  CHECK(c.algorithms.allgather == ops::Algorithm::kBruck);
  env = {{"KOLO_ALLREDUCE_ALGORITHM", "halving_doubling"}};
  REQUIRE(Config::fromEnvironment(&c, get).isOk());
  CHECK(c.algorithms.allreduce == ops::Algorithm::kHalvingDoubling);

  for (const auto& [var, value] : std::vector<std::pair<std::string, std::string>>{
           {"KOLO_ALLREDUCE_ALGORITHM", "tree"},
           {"KOLO_ALLREDUCE_ALGORITHM", "rabenseifner2"},
           {"KOLO_BROADCAST_ALGORITHM", "bruck"},
           {"HOROVOD_ALLGATHER_ALGORITHM", "recursive_doubling"},
           {"KOLO_ALLTOALL_ALGORITHM", "tree"}}) {
    env = {{var, value}};
    Status s = Config::fromEnvironment(&c, get);
    INFO(var << "=" << value << ": " << s.toString());
    CHECK(s.code() == ErrorCode::kInvalidArgument);
    CHECK(s.message().find(var + "='" + value + "'") != std::string::npos);
  }
}

TEST_CASE("a silent peer is named in the error of every algorithm") {
  std::vector<std::unique_ptr<Transport>> ts;
  REQUIRE(createLoopbackGroup(2, &ts).isOk());
  ts[0]->setTimeout(100ms);
  std::vector<float> buf(64, 1.0f);
  const std::vector<std::pair<const char*, std::function<Status()>>> runs = {
      {"recursive_doubling",
       [&] {
         return ops::recursiveDoublingAllreduce(*ts[0], buf.data(), 64, DataType::kFloat32,
                                                ReduceOp::kSum);
       }},
      {"halving_doubling",
       [&] {
         return ops::halvingDoublingAllreduce(*ts[0], buf.data(), 64, DataType::kFloat32,
                                              ReduceOp::kSum);
       }},
      {"bruck",
       [&] {
         return ops::bruckAllgatherv(*ts[0], buf.data(), 4, buf.data(), {4, 4});
       }},
      {"tree", [&] { return ops::binomialBroadcast(*ts[0], buf.data(), 8, 1); }},
      {"chain", [&] { return ops::chainBroadcast(*ts[0], buf.data(), 8, 1, 4); }},
      {"scatter_allgather",
       [&] { return ops::scatterAllgatherBroadcast(*ts[0], buf.data(), 8, 1); }},
  };
  for (const auto& [name, run] : runs) {
    auto start = Clock::now();
    Status s = run();
    INFO(name << ": " << s.toString());
    CHECK(Clock::now() - start < 3s);
    CHECK(s.code() == ErrorCode::kTimeout);
    CHECK(s.message().find("rank 1") != std::string::npos);
  }
  CHECK(ops::bruckAllgatherv(*ts[0], buf.data(), 4, buf.data(), {8, 4}).code() ==
        ErrorCode::kInvalidArgument);
  CHECK(ops::binomialBroadcast(*ts[0], buf.data(), 4, 2).code() == ErrorCode::kInvalidArgument);
}

TEST_CASE("control plane: a byte-vector MIN / BIT_AND allreduce and broadcasts, 1..9 ranks") {
  for (int n = 1; n <= 9; ++n) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{3}, size_t{1026}}) {
      for (ReduceOp op : {ReduceOp::kMin, ReduceOp::kBitAnd}) {
        std::vector<Bytes> in;
        for (int r = 0; r < n; ++r) in.push_back(input(r, count, DataType::kUInt8, 21));
        std::vector<Bytes> bufs = in;
        requireAllOk(runRanks(n, [&](Transport& t, int r) {
          return ops::controlAllreduce(t, bufs[r].data(), count, DataType::kUInt8, op);
        }));
        Bytes want = in[0];
        for (int r = 1; r < n; ++r) {
          for (size_t i = 0; i < count; ++i) {
            want[i] = op == ReduceOp::kMin ? std::min(want[i], in[r][i]) : want[i] & in[r][i];
          }
        }
        for (int r = 0; r < n; ++r) {
          INFO("ranks=" << n << " count=" << count << " op=" << toString(op) << " rank=" << r);
          REQUIRE(bufs[r] == want);
        }
      }
    }
    // The coordinator's two broadcasts: a length, then a response list of that length.
    for (size_t bytes : {size_t{8}, size_t{100 * 1024}}) {
      const int root = n / 2;
      Bytes want(bytes);
      for (size_t i = 0; i < bytes; ++i) want[i] = static_cast<uint8_t>(i * 7 + 1);
      std::vector<Bytes> bufs(static_cast<size_t>(n), Bytes(bytes, 0));
      bufs[root] = want;
      requireAllOk(runRanks(n, [&](Transport& t, int r) {
        return ops::controlBroadcast(t, bufs[r].data(), bytes, root);
      }));
      for (int r = 0; r < n; ++r) {
        INFO("ranks=" << n << " bytes=" << bytes << " rank=" << r);
        REQUIRE(bufs[r] == want);
      }
    }
  }
}
