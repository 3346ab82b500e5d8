// SPDX-License-Identifier: Apache-2.0
// Every CPU collective over loopback thread ranks (1, 2, 3, 4, 5, 8), checked on every rank
// against a reference computed locally: bitwise for integers and exactly-representable float16,
// with a tolerance for float32 (the ring adds in a different order than the reference).
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "ops/collectives.h"
#include "kernels/reduce_cpu.h"
#include "transport/loopback/loopback_transport.h"
#include "test/unit/loopback_ranks.h"

using namespace kolo;
using namespace std::chrono_literals;

namespace {

using kolo::testing::requireAllOk;
using kolo::testing::runRanks;

const int kRankCounts[] = {1, 2, 3, 4, 5, 8};
const ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct};

// memcmp that accepts the null data() of empty vectors.
bool sameBytes(const void* a, const void* b, size_t bytes) {
  return bytes == 0 || std::memcmp(a, b, bytes) == 0;
}

std::vector<size_t> countsFor(int n) {
  return {0, 1, static_cast<size_t>(n - 1), static_cast<size_t>(7 * n + 3), 1000};
}

// Inputs: small values so int32 products stay interesting but wrap identically everywhere.
int32_t intInput(int rank, size_t i) {
  return static_cast<int32_t>((rank * 7919 + static_cast<int>(i % 10007) * 31) % 201) - 100;
}
float floatInput(int rank, size_t i) {
  return 0.75f + 0.37f * static_cast<float>(rank) + 0.013f * static_cast<float>(i % 101);
}
// float16 inputs whose sums, products, minima and maxima are exact in fp16 at <= 8 ranks.
float halfInput(int rank, size_t i) {
  static const float kValues[] = {0.5f, 1.0f, 2.0f, -1.0f, -2.0f, 1.0f, -0.5f};
  return kValues[(static_cast<size_t>(rank) * 3 + i) % 7];
}

int32_t intOp(int32_t a, int32_t b, ReduceOp op) {
  uint32_t ua = static_cast<uint32_t>(a), ub = static_cast<uint32_t>(b);
  switch (op) {
    case ReduceOp::kSum:
      return static_cast<int32_t>(ua + ub);
    case ReduceOp::kProduct:
      return static_cast<int32_t>(ua * ub);
    case ReduceOp::kMin:
      return a < b ? a : b;
    case ReduceOp::kMax:
      return a > b ? a : b;
    default:
      return 0;
  }
}
double floatOp(double a, double b, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return a + b;
    case ReduceOp::kProduct:
      return a * b;
    case ReduceOp::kMin:
      return a < b ? a : b;
    case ReduceOp::kMax:
      return a > b ? a : b;
    default:
      return 0;
  }
}

std::vector<int32_t> intReference(int n, size_t count, ReduceOp op) {
  std::vector<int32_t> ref(count);
  for (size_t i = 0; i < count; ++i) {
    int32_t acc = intInput(0, i);
    for (int r = 1; r < n; ++r) acc = intOp(acc, intInput(r, i), op);
    ref[i] = acc;
  }
  return ref;
}

void checkAllreduceInt(int n, size_t count, ReduceOp op, size_t segmentBytes) {
  std::vector<std::vector<int32_t>> bufs(static_cast<size_t>(n), std::vector<int32_t>(count));
  for (int r = 0; r < n; ++r) {
    for (size_t i = 0; i < count; ++i) bufs[r][i] = intInput(r, i);
  }
  requireAllOk(runRanks(n, [&](Transport& t, int r) {
    return ops::ringAllreduce(t, bufs[r].data(), count, DataType::kInt32, op, segmentBytes);
  }));
  auto ref = intReference(n, count, op);
  for (int r = 0; r < n; ++r) {
    INFO("ranks=" << n << " count=" << count << " op=" << toString(op) << " rank=" << r
                  << " segment=" << segmentBytes);
    REQUIRE(sameBytes(bufs[r].data(), ref.data(), count * sizeof(int32_t)));
  }
}

}  // namespace

TEST_CASE("chunkRange and evenSplit math") {
  size_t b = 0, e = 0;
  chunkRange(10, 4, 0, &b, &e);
  CHECK((b == 0 && e == 3));
  chunkRange(10, 4, 1, &b, &e);
  CHECK((b == 3 && e == 6));
  chunkRange(10, 4, 3, &b, &e);
  CHECK((b == 8 && e == 10));
  chunkRange(2, 5, 4, &b, &e);
  CHECK(b == e);
  CHECK(ops::evenSplit(10, 4) == std::vector<size_t>({3, 3, 2, 2}));
  CHECK(ops::evenSplit(2, 3) == std::vector<size_t>({1, 1, 0}));
  CHECK(ops::evenSplit(0, 2) == std::vector<size_t>({0, 0}));
  for (size_t count : {0u, 1u, 7u, 64u, 1001u}) {
    for (int parts = 1; parts <= 9; ++parts) {
      size_t expectBegin = 0;
      for (int i = 0; i < parts; ++i) {
        chunkRange(count, parts, i, &b, &e);
        CHECK(b == expectBegin);
        CHECK(e - b >= count / parts);
        CHECK(e - b <= count / parts + 1);
        expectBegin = e;
      }
      CHECK(expectBegin == count);
    }
  }
}

TEST_CASE("algorithm names parse and print") {
  ops::Algorithm a = ops::Algorithm::kAuto;
  CHECK(ops::parseAlgorithm("ring", &a));
  CHECK(a == ops::Algorithm::kRing);
  CHECK(ops::parseAlgorithm("NATIVE", &a));
  CHECK(a == ops::Algorithm::kNative);
  CHECK(ops::parseAlgorithm("auto", &a));
  CHECK(a == ops::Algorithm::kAuto);
  CHECK_FALSE(ops::parseAlgorithm("fast", &a));
  CHECK(ops::parseAlgorithm("Recursive_Doubling", &a));
  CHECK(a == ops::Algorithm::kRecursiveDoubling);
  CHECK(std::string(ops::toString(ops::Algorithm::kRing)) == "ring");
  CHECK(std::string(ops::toString(ops::Algorithm::kNative)) == "native");
  CHECK(std::string(ops::toString(ops::Algorithm::kAuto)) == "auto");
}

TEST_CASE("ring allreduce int32 is bitwise exact for every op, size and count") {
  for (int n : kRankCounts) {
    for (size_t count : countsFor(n)) {
      for (ReduceOp op : kOps) checkAllreduceInt(n, count, op, 256 * 1024);
    }
    // Segments of one element, of a non-multiple of the element size, and unsegmented.
    for (size_t segment : {size_t{4}, size_t{10}, size_t{0}}) {
      checkAllreduceInt(n, static_cast<size_t>(5 * n + 2), ReduceOp::kSum, segment);
    }
    checkAllreduceInt(n, size_t{1} << 20, ReduceOp::kSum, 256 * 1024);
    checkAllreduceInt(n, (size_t{1} << 20) + 3, ReduceOp::kMax, 64 * 1024);
  }
}

TEST_CASE("ring allreduce float32 within tolerance, average adds") {
  for (int n : kRankCounts) {
    std::vector<size_t> counts = countsFor(n);
    counts.push_back(size_t{1} << 20);
    for (size_t count : counts) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct,
                          ReduceOp::kAverage}) {
        if (count == (size_t{1} << 20) && op != ReduceOp::kSum) continue;
        std::vector<std::vector<float>> bufs(static_cast<size_t>(n), std::vector<float>(count));
        for (int r = 0; r < n; ++r) {
          for (size_t i = 0; i < count; ++i) bufs[r][i] = floatInput(r, i);
        }
        requireAllOk(runRanks(n, [&](Transport& t, int r) {
          return ops::ringAllreduce(t, bufs[r].data(), count, DataType::kFloat32, op, 4096);
        }));
        ReduceOp refOp = op == ReduceOp::kAverage ? ReduceOp::kSum : op;
        for (size_t i = 0; i < count; ++i) {
          double ref = floatInput(0, i);
          for (int r = 1; r < n; ++r) ref = floatOp(ref, floatInput(r, i), refOp);
          for (int r = 0; r < n; ++r) {
            if (std::fabs(bufs[r][i] - ref) > 1e-5 * std::fabs(ref) + 1e-6) {
              FAIL("ranks=" << n << " count=" << count << " op=" << toString(op) << " rank=" << r
                            << " i=" << i << " got " << bufs[r][i] << " want " << ref);
            }
          }
          // Every rank holds the same bits: the ring reduces each chunk in one place.
          for (int r = 1; r < n; ++r) REQUIRE(std::memcmp(&bufs[r][i], &bufs[0][i], 4) == 0);
        }
      }
    }
  }
}

TEST_CASE("ring allreduce float16 matches the reduce functions bitwise") {
  for (int n : kRankCounts) {
    for (size_t count : {size_t{1}, static_cast<size_t>(3 * n + 1), size_t{70000}}) {
      for (ReduceOp op : kOps) {
        std::vector<std::vector<uint16_t>> bufs(static_cast<size_t>(n),
                                                std::vector<uint16_t>(count));
        for (int r = 0; r < n; ++r) {
          for (size_t i = 0; i < count; ++i) bufs[r][i] = kernels::floatToHalf(halfInput(r, i));
        }
        std::vector<uint16_t> ref = bufs[0];
        for (int r = 1; r < n; ++r) {
          kernels::reduceInto(ref.data(), bufs[r].data(), count, DataType::kFloat16, op);
        }
        requireAllOk(runRanks(n, [&](Transport& t, int r) {
          return ops::ringAllreduce(t, bufs[r].data(), count, DataType::kFloat16, op, 1000);
        }));
        for (int r = 0; r < n; ++r) {
          INFO("ranks=" << n << " count=" << count << " op=" << toString(op) << " rank=" << r);
          REQUIRE(sameBytes(bufs[r].data(), ref.data(), count * 2));
        }
      }
    }
  }
}

TEST_CASE("ring allgatherv with different block sizes, including empty ones") {
  for (int n : kRankCounts) {
    std::vector<std::vector<size_t>> layouts = {
        std::vector<size_t>(static_cast<size_t>(n), 0),  // all empty
        std::vector<size_t>(static_cast<size_t>(n), 12),
    };
    std::vector<size_t> mixed(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) mixed[r] = static_cast<size_t>((r * 37) % 5) * 3;
    layouts.push_back(mixed);
    std::vector<size_t> big(static_cast<size_t>(n), 1);
    big[static_cast<size_t>(n - 1)] = size_t{1} << 20;
    big[0] = 0;
    layouts.push_back(big);
    for (size_t layout = 0; layout < layouts.size(); ++layout) {
      const auto& sizes = layouts[layout];
      std::vector<size_t> offset(static_cast<size_t>(n) + 1, 0);
      for (int r = 0; r < n; ++r) offset[r + 1] = offset[r] + sizes[r];
      auto byteOf = [](int r, size_t k) { return static_cast<uint8_t>(r * 29 + k * 7 + 1); };
      std::vector<std::vector<uint8_t>> send(static_cast<size_t>(n)), recv(static_cast<size_t>(n));
      for (int r = 0; r < n; ++r) {
        send[r].resize(sizes[r]);
        for (size_t k = 0; k < sizes[r]; ++k) send[r][k] = byteOf(r, k);
        recv[r].assign(offset[n] + 1, 0xEE);  // one guard byte at the end
      }
      // Odd ranks gather in place: their block already sits in recv.
      for (int r = 1; r < n; r += 2) {
        if (sizes[r] > 0) std::memcpy(recv[r].data() + offset[r], send[r].data(), sizes[r]);
      }
      requireAllOk(runRanks(n, [&](Transport& t, int r) {
        const void* src = (r % 2 == 1) ? recv[r].data() + offset[r] : send[r].data();
        return ops::ringAllgatherv(t, src, sizes[r], recv[r].data(), sizes);
      }));
      for (int r = 0; r < n; ++r) {
        INFO("ranks=" << n << " layout=" << layout << " rank=" << r);
        for (int b = 0; b < n; ++b) {
          for (size_t k = 0; k < sizes[b]; ++k) REQUIRE(recv[r][offset[b] + k] == byteOf(b, k));
        }
        REQUIRE(recv[r][offset[n]] == 0xEE);
      }
    }
  }
}

// p2pBroadcast's three shapes: the tree below 64 KiB; at 8 ranks scatter-allgather with 256 KiB
// segments (bytes < n segments), the chain with 4 KiB ones and below 8 ranks.
TEST_CASE("broadcast from every root, tree, pipelined chain and scatter-allgather") {
  for (int n : kRankCounts) {
    for (size_t bytes : {size_t{0}, size_t{1}, size_t{1000}, size_t{64 * 1024 - 1},
                         size_t{64 * 1024}, size_t{300001}}) {
      for (size_t segment : {size_t{4096}, size_t{256 * 1024}}) {
        if (bytes < 64 * 1024 && segment != 4096) continue;  // the tree ignores segments
        for (int root = 0; root < n; ++root) {
          std::vector<std::vector<uint8_t>> bufs(static_cast<size_t>(n));
          for (int r = 0; r < n; ++r) {
            bufs[r].resize(bytes);
            for (size_t k = 0; k < bytes; ++k) {
              bufs[r][k] = static_cast<uint8_t>(r == root ? (k * 13 + root) : 0xAB);
            }
          }
          requireAllOk(runRanks(n, [&](Transport& t, int r) {
            return ops::p2pBroadcast(t, bufs[r].data(), bytes, root, segment);
          }));
          for (int r = 0; r < n; ++r) {
            INFO("ranks=" << n << " bytes=" << bytes << " root=" << root << " rank=" << r);
            REQUIRE(bufs[r] == bufs[root]);
          }
          if (bytes > 0)
            REQUIRE(bufs[root][bytes - 1] == static_cast<uint8_t>((bytes - 1) * 13 + root));
        }
      }
    }
  }
}

TEST_CASE("alltoallv with random splits") {
  std::mt19937 rng(1234);
  for (int n : kRankCounts) {
    for (int trial = 0; trial < 4; ++trial) {
      // bytes[s][d]: what rank s sends to rank d; a third of them empty.
      std::vector<std::vector<size_t>> bytes(static_cast<size_t>(n),
                                             std::vector<size_t>(static_cast<size_t>(n)));
      for (auto& row : bytes) {
        for (auto& b : row) b = rng() % 3 == 0 ? 0 : rng() % (trial == 3 ? 70000 : 50);
      }
      auto byteOf = [](int s, int d, size_t k) {
        return static_cast<uint8_t>(s * 31 + d * 17 + k * 3);
      };
      std::vector<std::vector<uint8_t>> send(static_cast<size_t>(n)), recv(static_cast<size_t>(n));
      std::vector<std::vector<size_t>> recvBytes(static_cast<size_t>(n));
      for (int s = 0; s < n; ++s) {
        for (int d = 0; d < n; ++d) {
          for (size_t k = 0; k < bytes[s][d]; ++k) send[s].push_back(byteOf(s, d, k));
          recvBytes[s].push_back(bytes[d][s]);
        }
        size_t total = 0;
        for (size_t b : recvBytes[s]) total += b;
        recv[s].assign(total, 0);
      }
      requireAllOk(runRanks(n, [&](Transport& t, int r) {
        return ops::p2pAlltoallv(t, send[r].data(), bytes[r], recv[r].data(), recvBytes[r]);
      }));
      for (int r = 0; r < n; ++r) {
        INFO("ranks=" << n << " trial=" << trial << " rank=" << r);
        size_t off = 0;
        for (int s = 0; s < n; ++s) {
          for (size_t k = 0; k < bytes[s][r]; ++k) REQUIRE(recv[r][off + k] == byteOf(s, r, k));
          off += bytes[s][r];
        }
      }
    }
  }
}

TEST_CASE("ring reducescatter with uneven blocks, int32 bitwise and float16") {
  std::mt19937 rng(99);
  for (int n : kRankCounts) {
    std::vector<std::vector<size_t>> layouts = {ops::evenSplit(static_cast<size_t>(n - 1), n),
                                                ops::evenSplit(static_cast<size_t>(7 * n + 3), n),
                                                ops::evenSplit(size_t{1} << 18, n)};
    std::vector<size_t> random(static_cast<size_t>(n));
    for (auto& c : random) c = rng() % 4 == 0 ? 0 : rng() % 300;
    layouts.push_back(random);
    for (const auto& counts : layouts) {
      size_t total = 0;
      for (size_t c : counts) total += c;
      std::vector<size_t> offset(static_cast<size_t>(n) + 1, 0);
      for (int r = 0; r < n; ++r) offset[r + 1] = offset[r] + counts[r];
      for (ReduceOp op : kOps) {
        if (total > 100000 && op != ReduceOp::kSum) continue;
        std::vector<std::vector<int32_t>> send(static_cast<size_t>(n)),
            recv(static_cast<size_t>(n));
        for (int r = 0; r < n; ++r) {
          for (size_t i = 0; i < total; ++i) send[r].push_back(intInput(r, i));
          recv[r].assign(counts[r] + 1, -7);  // guard element
        }
        requireAllOk(runRanks(n, [&](Transport& t, int r) {
          return ops::ringReducescatter(t, send[r].data(), recv[r].data(), counts, DataType::kInt32,
                                        op, 512);
        }));
        auto ref = intReference(n, total, op);
        for (int r = 0; r < n; ++r) {
          INFO("ranks=" << n << " total=" << total << " op=" << toString(op) << " rank=" << r);
          REQUIRE(sameBytes(recv[r].data(), ref.data() + offset[r], counts[r] * 4));
          REQUIRE(recv[r][counts[r]] == -7);
          for (size_t i = 0; i < total; ++i) REQUIRE(send[r][i] == intInput(r, i));  // untouched
        }

        std::vector<std::vector<uint16_t>> hsend(static_cast<size_t>(n)),
            hrecv(static_cast<size_t>(n));
        for (int r = 0; r < n; ++r) {
          for (size_t i = 0; i < total; ++i)
            hsend[r].push_back(kernels::floatToHalf(halfInput(r, i)));
          hrecv[r].assign(counts[r], 0);
        }
        std::vector<uint16_t> href = hsend[0];
        for (int r = 1; r < n; ++r) {
          kernels::reduceInto(href.data(), hsend[r].data(), total, DataType::kFloat16, op);
        }
        requireAllOk(runRanks(n, [&](Transport& t, int r) {
          return ops::ringReducescatter(t, hsend[r].data(), hrecv[r].data(), counts,
                                        DataType::kFloat16, op, 256 * 1024);
        }));
        for (int r = 0; r < n; ++r) {
          INFO("fp16 ranks=" << n << " total=" << total << " op=" << toString(op));
          REQUIRE(sameBytes(hrecv[r].data(), href.data() + offset[r], counts[r] * 2));
        }
      }
    }
  }
}

TEST_CASE("selected entry points run the ring on loopback and name it") {
  const int n = 3;
  ops::AlgorithmConfig cfg;
  cfg.allreduce = ops::Algorithm::kNative;  // loopback has no natives: falls back to the ring
  std::vector<std::string> names(static_cast<size_t>(n) * 6);
  std::vector<std::vector<int32_t>> data(static_cast<size_t>(n), std::vector<int32_t>(100000));
  requireAllOk(runRanks(n, [&](Transport& t, int r) -> Status {
    for (size_t i = 0; i < data[r].size(); ++i) data[r][i] = r + 1;
    KOLO_RETURN_IF_ERROR(ops::allreduce(t, cfg, data[r].data(), 100000, DataType::kInt32,
                                        ReduceOp::kSum, &names[r * 6 + 0]));
    int32_t mine = r, all[3] = {};
    KOLO_RETURN_IF_ERROR(ops::allgatherv(t, cfg, &mine, 4, all, {4, 4, 4}, &names[r * 6 + 1]));
    if (all[0] != 0 || all[1] != 1 || all[2] != 2) return Status(ErrorCode::kInternal, "gather");
    KOLO_RETURN_IF_ERROR(ops::broadcast(t, cfg, data[r].data(), 16, 1, &names[r * 6 + 2]));
    KOLO_RETURN_IF_ERROR(ops::broadcast(t, cfg, data[r].data(), 400000, 2, &names[r * 6 + 3]));
    int32_t a2a[3] = {r * 10, r * 10 + 1, r * 10 + 2}, got[3] = {};
    KOLO_RETURN_IF_ERROR(ops::alltoallv(t, cfg, a2a, {4, 4, 4}, got, {4, 4, 4}, &names[r * 6 + 4]));
    if (got[0] != r || got[1] != 10 + r || got[2] != 20 + r) {
      return Status(ErrorCode::kInternal, "alltoall");
    }
    int32_t rs[6] = {1, 2, 3, 4, 5, 6}, out[2] = {};
    KOLO_RETURN_IF_ERROR(ops::reducescatter(t, cfg, rs, out, {2, 2, 2}, DataType::kInt32,
                                            ReduceOp::kSum, &names[r * 6 + 5]));
    if (out[0] != 3 * (2 * r + 1) || out[1] != 3 * (2 * r + 2)) {
      return Status(ErrorCode::kInternal, "reducescatter");
    }
    return Status::ok();
  }));
  for (int r = 0; r < n; ++r) {
    CHECK(data[r][0] == 6);
    CHECK(names[r * 6 + 0] == "HALVING_DOUBLING_ALLREDUCE");  // 3 ranks: 400 KB >= 64 KiB
    CHECK(names[r * 6 + 1] == "BRUCK_ALLGATHER");               // small: Bruck
    CHECK(names[r * 6 + 2] == "TREE_BROADCAST");
    CHECK(names[r * 6 + 3] == "PIPELINED_BROADCAST");
    CHECK(names[r * 6 + 4] == "P2P_ALLTOALL");
    CHECK(names[r * 6 + 5] == "RING_REDUCESCATTER");
  }
}

namespace {

// A one-rank transport that pretends to be MPI or Gloo with native collectives, to check the
// selection rule without those libraries.
class FakeNative final : public Transport {
 public:
  explicit FakeNative(const char* name) : name_(name) {}
  const char* name() const override { return name_; }
  int rank() const override { return 0; }
  int size() const override { return 1; }
  Capabilities capabilities() const override {
    Capabilities c;
    c.nativeAllreduce = c.nativeAllgatherv = c.nativeBroadcast = c.nativeAlltoallv =
        c.nativeReducescatter = true;
    return c;
  }
  Status post(const std::vector<P2POp>&, std::unique_ptr<PendingOps>*) override {
    return Status(ErrorCode::kUnsupported, "fake");
  }
  Status split(const std::vector<int>&, int32_t, std::unique_ptr<Transport>*) override {
    return Status(ErrorCode::kUnsupported, "fake");
  }
  void abort(const Status&) override {}
  Status allreduce(void*, size_t, DataType, ReduceOp) override { return Status::ok(); }
  Status broadcast(void*, size_t, int) override { return Status::ok(); }

 private:
  const char* name_;
};

std::string allreduceName(Transport& t, ops::Algorithm a, size_t count) {
  ops::AlgorithmConfig cfg;
  cfg.allreduce = a;
  std::vector<float> buf(count);
  std::string name;
  Status s = ops::allreduce(t, cfg, buf.data(), count, DataType::kFloat32, ReduceOp::kSum, &name);
  REQUIRE(s.isOk());
  return name;
}

}  // namespace

TEST_CASE("auto selection: mpi native below 64 KiB, gloo always ours, config wins") {
  FakeNative mpi("mpi"), gloo("gloo"), other("shm");
  CHECK(allreduceName(mpi, ops::Algorithm::kAuto, 1024) == "MPI_ALLREDUCE");  // 4 KiB
  CHECK(allreduceName(mpi, ops::Algorithm::kAuto, 16 * 1024) ==
        "RECURSIVE_DOUBLING_ALLREDUCE");  // 64 KiB: ours, by the size table
  CHECK(allreduceName(mpi, ops::Algorithm::kNative, 1 << 20) == "MPI_ALLREDUCE");
  CHECK(allreduceName(mpi, ops::Algorithm::kRing, 16) == "RING_ALLREDUCE");
  // Gloo's natives only when named: ours by the size table at every size.
  CHECK(allreduceName(gloo, ops::Algorithm::kAuto, 1) == "RECURSIVE_DOUBLING_ALLREDUCE");
  CHECK(allreduceName(gloo, ops::Algorithm::kAuto, 1024) == "RECURSIVE_DOUBLING_ALLREDUCE");
  CHECK(allreduceName(gloo, ops::Algorithm::kAuto, (2 << 20) - 1) == "HALVING_DOUBLING_ALLREDUCE");
  CHECK(allreduceName(gloo, ops::Algorithm::kAuto, 2 << 20) == "RING_ALLREDUCE");  // 8 MiB
  CHECK(allreduceName(gloo, ops::Algorithm::kRing, 4 << 20) == "RING_ALLREDUCE");
  CHECK(allreduceName(gloo, ops::Algorithm::kNative, 1 << 16) == "GLOO_ALLREDUCE");
  CHECK(allreduceName(other, ops::Algorithm::kAuto, 1 << 16) == "SHM_ALLREDUCE");
  ops::AlgorithmConfig cfg;
  std::string name;
  char b[8] = {};
  REQUIRE(ops::broadcast(mpi, cfg, b, 8, 0, &name).isOk());
  CHECK(name == "MPI_BROADCAST");
  REQUIRE(ops::broadcast(gloo, cfg, b, 8, 0, &name).isOk());
  CHECK(name == "TREE_BROADCAST");
}

TEST_CASE("a silent peer gives a timeout naming it, mismatched sizes an error") {
  std::vector<std::unique_ptr<Transport>> ts;
  REQUIRE(createLoopbackGroup(2, &ts).isOk());
  ts[0]->setTimeout(200ms);
  std::vector<int32_t> buf(1000, 1);
  auto start = Clock::now();
  Status s =
      ops::ringAllreduce(*ts[0], buf.data(), buf.size(), DataType::kInt32, ReduceOp::kSum, 1024);
  CHECK(Clock::now() - start < 3s);
  CHECK(s.code() == ErrorCode::kTimeout);
  CHECK(s.message().find("from rank 1") != std::string::npos);

  int32_t v = 1, out[4] = {};
  CHECK(ops::ringAllgatherv(*ts[0], &v, 4, out, {8, 4}).code() == ErrorCode::kInvalidArgument);
  CHECK(ops::ringAllgatherv(*ts[0], &v, 4, out, {4}).code() == ErrorCode::kInvalidArgument);
  CHECK(ops::p2pBroadcast(*ts[0], out, 4, 2, 1024).code() == ErrorCode::kInvalidArgument);
  CHECK(ops::p2pAlltoallv(*ts[0], out, {4}, out, {4, 4}).code() == ErrorCode::kInvalidArgument);
}
