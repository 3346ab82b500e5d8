// SPDX-License-Identifier: Apache-2.0
// The hierarchical allreduce of host tensors (ops/hierarchical.h) through the C API, as 4
// processes on one machine that test/mp/fake_hosts.sh makes look like 2 hosts x 2 ranks: the
// job runs over Gloo TCP between the "hosts", shared memory inside each.
//
// For each KOLO_HIERARCHICAL_ALLREDUCE setting (unset = auto, 1, 0) the job is initialized anew
// and checks, on every rank: every dtype x op (Average with prescale and postscale) at several
// sizes against a reference, submitted together so they fuse; a grouped allreduce; float data
// whose sums round, so that every rank must hold the same bits; process sets that fit (every
// rank) and do not fit (3 ranks on 2 hosts, 1 rank per host). Rank 0 records the timeline of each
// part and checks which path ran: HIERARCHICAL_ALLREDUCE where the set fits and the setting
// says so, never otherwise -- so the test cannot pass on the flat path.
//
// The hidden "[fault]" case: rank 3 exits in the middle of a hierarchical allreduce; every
// survivor must fail with an error that names rank 3, within the (short) timeout.
#include <kolo.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "test/c_api_values.h"

namespace {

int R() { return kolo_rank(); }
int N() { return kolo_size(); }

const kolo_dtype_t kAllTypes[] = {KOLO_UINT8,   KOLO_INT8,    KOLO_UINT16,  KOLO_INT16,
                                  KOLO_INT32,   KOLO_INT64,   KOLO_FLOAT16, KOLO_BFLOAT16,
                                  KOLO_FLOAT32, KOLO_FLOAT64, KOLO_BOOL};
const kolo_reduce_op_t kOps[] = {KOLO_SUM, KOLO_AVERAGE, KOLO_MIN, KOLO_MAX, KOLO_PRODUCT};

struct Buf {
  kolo_dtype_t t;
  std::vector<unsigned char> bytes;
  Buf(kolo_dtype_t type, size_t n) : t(type), bytes(n * kolo_test::dtypeSize(type)) {}
  void set(size_t i, double v) {
    kolo_test::encode(t, v, bytes.data() + i * kolo_test::dtypeSize(t));
  }
  double get(size_t i) const {
    return kolo_test::decode(t, bytes.data() + i * kolo_test::dtypeSize(t));
  }
};

struct Tensor {
  int64_t shape[1];
  kolo_tensor_t t;
  explicit Tensor(Buf& b) {
    shape[0] = static_cast<int64_t>(b.bytes.size() / kolo_test::dtypeSize(b.t));
    t = {b.bytes.data(), b.t, 1, shape, KOLO_CPU_DEVICE, nullptr};
  }
};

// Rank r's element i: small integers, so sums and products are exact in every dtype.
double value(kolo_dtype_t t, int rank, size_t i) {
  if (t == KOLO_BOOL) return (i + rank) % 3 == 0 ? 1 : 0;
  return static_cast<double>((i + 2 * rank) % 3 + 1);
}

double reduceRef(kolo_dtype_t t, kolo_reduce_op_t op, size_t i, const std::vector<int>& ranks,
                 double pre, double post) {
  const bool integer = !kolo_test::isFloat(t) && t != KOLO_BOOL;
  auto scaled = [&](double v, double f) {
    if (f == 1.0 || t == KOLO_BOOL) return v;
    return integer ? std::trunc(v * f) : v * f;
  };
  double acc = scaled(value(t, ranks[0], i), pre);
  for (size_t k = 1; k < ranks.size(); ++k) {
    const double v = scaled(value(t, ranks[k], i), pre);
    switch (op) {
      case KOLO_SUM:
      case KOLO_AVERAGE:
        acc = t == KOLO_BOOL ? (acc || v) : acc + v;
        break;
      case KOLO_MIN:
        acc = std::min(acc, v);
        break;
      case KOLO_MAX:
        acc = std::max(acc, v);
        break;
      default:
        acc = t == KOLO_BOOL ? (acc && v) : acc * v;
        break;
    }
  }
  double f = post;
  if (op == KOLO_AVERAGE && t != KOLO_BOOL) f /= static_cast<double>(ranks.size());
  return scaled(acc, f);
}

void waitOk(kolo_handle_t h) {
  const int rc = kolo_handle_wait(h, 120.0);
  INFO("rank " << R() << ": " << kolo_last_error());
  REQUIRE(rc == KOLO_OK);
  kolo_handle_release(h);
}

// Every dtype x op x size of one set, all submitted before any wait (so they fuse), then
// checked against the reference on every member.
void allDtypesAndOps(int32_t set, const std::vector<int>& ranks, const std::string& prefix) {
  const size_t sizes[] = {1, 3, 1001, 1 << 15};
  struct Op {
    Buf buf;
    kolo_dtype_t t;
    kolo_reduce_op_t op;
    size_t n;
    double pre, post;
    kolo_handle_t h = 0;
  };
  std::vector<Op> ops;
  ops.reserve(sizeof(kAllTypes) / sizeof(kAllTypes[0]) * 5 * 4);
  for (kolo_dtype_t t : kAllTypes) {
    for (kolo_reduce_op_t op : kOps) {
      for (size_t n : sizes) {
        // Average carries a prescale and a postscale (exact: quarters of small integers).
        const bool scaled = op == KOLO_AVERAGE && t != KOLO_BOOL;
        ops.push_back(Op{Buf(t, n), t, op, n, scaled ? 0.5 : 1.0, scaled ? 4.0 : 1.0});
      }
    }
  }
  int k = 0;
  for (Op& o : ops) {
    for (size_t i = 0; i < o.n; ++i) o.buf.set(i, value(o.t, R(), i));
    Tensor tensor(o.buf);
    const std::string name = prefix + ".ar." + std::to_string(k++);
    REQUIRE(kolo_allreduce_async(name.c_str(), &tensor.t, nullptr, o.op, o.pre, o.post, set,
                                 nullptr, nullptr, &o.h) == KOLO_OK);
  }
  for (Op& o : ops) waitOk(o.h);
  for (const Op& o : ops) {
    size_t bad = 0, firstBad = 0;
    for (size_t i = 0; i < o.n; ++i) {
      if (o.buf.get(i) != reduceRef(o.t, o.op, i, ranks, o.pre, o.post) && bad++ == 0) firstBad = i;
    }
    INFO("set " << set << " dtype " << o.t << " op " << o.op << " n " << o.n
                << ": first wrong element " << firstBad << " = " << o.buf.get(firstBad)
                << ", expected " << reduceRef(o.t, o.op, firstBad, ranks, o.pre, o.post));
    REQUIRE(bad == 0);
  }
  // A grouped allreduce: three tensors, one handle.
  std::vector<Buf> group;
  for (size_t n : {size_t{7}, size_t{4096}, size_t{33}}) group.emplace_back(KOLO_INT32, n);
  std::vector<Tensor> gt;
  gt.reserve(group.size());  // a Tensor points into itself: no reallocation
  for (Buf& b : group) {
    for (size_t i = 0; i < b.bytes.size() / 4; ++i) b.set(i, value(KOLO_INT32, R(), i));
    gt.emplace_back(b);
  }
  std::vector<kolo_tensor_t> inputs;
  for (Tensor& t : gt) inputs.push_back(t.t);
  kolo_handle_t h = 0;
  REQUIRE(kolo_grouped_allreduce_async((prefix + ".group").c_str(), 3, inputs.data(), nullptr,
                                       KOLO_SUM, 1.0, 1.0, set, nullptr, nullptr, &h) == KOLO_OK);
  waitOk(h);
  for (const Buf& b : group) {
    for (size_t i = 0; i < b.bytes.size() / 4; ++i) {
      REQUIRE(b.get(i) == reduceRef(KOLO_INT32, KOLO_SUM, i, ranks, 1.0, 1.0));
    }
  }
}

uint64_t fnv1a(const std::vector<unsigned char>& bytes) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : bytes) h = (h ^ c) * 1099511628211ull;
  return h;
}

// Float sums that round: every member must still end with the same bits.
void sameBitsEverywhere(int32_t set, const std::vector<int>& ranks, const std::string& prefix) {
  for (kolo_dtype_t t : {KOLO_FLOAT32, KOLO_FLOAT64, KOLO_BFLOAT16}) {
    const size_t n = 100003;
    Buf b(t, n);
    std::mt19937 gen(1234u + static_cast<unsigned>(R()));
    std::uniform_real_distribution<double> dist(-1.0, 1.0);
    for (size_t i = 0; i < n; ++i) b.set(i, dist(gen));
    Tensor tensor(b);
    kolo_handle_t h = 0;
    const std::string name = prefix + ".bits." + std::to_string(static_cast<int>(t));
    REQUIRE(kolo_allreduce_async(name.c_str(), &tensor.t, nullptr, KOLO_SUM, 1.0, 1.0, set, nullptr,
                                 nullptr, &h) == KOLO_OK);
    waitOk(h);
    // Against the exact sum (every member's input regenerated from its seed).
    std::vector<double> exact(n, 0.0);
    for (int r : ranks) {
      std::mt19937 g(1234u + static_cast<unsigned>(r));
      Buf theirs(t, n);
      for (size_t i = 0; i < n; ++i) theirs.set(i, dist(g));
      for (size_t i = 0; i < n; ++i) exact[i] += theirs.get(i);
    }
    double worst = 0;
    for (size_t i = 0; i < n; ++i) worst = std::max(worst, std::abs(b.get(i) - exact[i]));
    REQUIRE(worst < (t == KOLO_BFLOAT16 ? 0.1 : 1e-4));
    // The same bits on every member: MIN and MAX of the hash agree.
    int64_t hash[2];
    hash[0] = hash[1] = static_cast<int64_t>(fnv1a(b.bytes) >> 1);
    int64_t shape[1] = {1};
    kolo_tensor_t lo{&hash[0], KOLO_INT64, 1, shape, KOLO_CPU_DEVICE, nullptr};
    kolo_tensor_t hi{&hash[1], KOLO_INT64, 1, shape, KOLO_CPU_DEVICE, nullptr};
    kolo_handle_t h1 = 0, h2 = 0;
    REQUIRE(kolo_allreduce_async((name + ".min").c_str(), &lo, nullptr, KOLO_MIN, 1.0, 1.0, set,
                                 nullptr, nullptr, &h1) == KOLO_OK);
    REQUIRE(kolo_allreduce_async((name + ".max").c_str(), &hi, nullptr, KOLO_MAX, 1.0, 1.0, set,
                                 nullptr, nullptr, &h2) == KOLO_OK);
    waitOk(h1);
    waitOk(h2);
    INFO("dtype " << t << ": the members' results differ in their bits");
    REQUIRE(hash[0] == hash[1]);
  }
}

std::string readFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs `fn` with the timeline on (rank 0 writes it) and returns what rank 0 recorded (other
// ranks: an empty string).
template <typename Fn>
std::string recorded(const std::string& what, Fn fn) {
  const char* dir = std::getenv("KOLO_TEST_TIMELINE_DIR");
  const std::string path = std::string(dir != nullptr ? dir : "/tmp") + "/hier_" +
                           std::to_string(getpid()) + "_" + what + ".json";
  REQUIRE(kolo_start_timeline(path.c_str(), 0) == KOLO_OK);
  fn();
  REQUIRE(kolo_stop_timeline() == KOLO_OK);
  if (R() != 0) return "";
  std::string text = readFile(path);
  std::remove(path.c_str());
  REQUIRE(text.find("ALLREDUCE") != std::string::npos);  // the timeline did record the ops
  return text;
}

bool tookHierarchical(const std::string& timeline) {
  return timeline.find("HIERARCHICAL_ALLREDUCE") != std::string::npos;
}

void runMode(const char* setting) {
  if (setting == nullptr) {
    unsetenv("KOLO_HIERARCHICAL_ALLREDUCE");
  } else {
    setenv("KOLO_HIERARCHICAL_ALLREDUCE", setting, 1);
  }
  const std::string mode = setting == nullptr ? "auto" : setting;
  REQUIRE(kolo_init() == KOLO_OK);
  REQUIRE(N() == 4);
  REQUIRE(kolo_local_size() == 2);
  REQUIRE(std::string(kolo_transport_name()) != "shm");  // no segment over both "hosts"
  const bool hierarchical = mode != "0";                  // auto: every size (docs/algorithms.md)
  const std::vector<int> all = {0, 1, 2, 3};

  std::string tl = recorded(mode + "_global", [&] {
    allDtypesAndOps(KOLO_GLOBAL_PROCESS_SET, all, "g" + mode);
    sameBitsEverywhere(KOLO_GLOBAL_PROCESS_SET, all, "g" + mode);
  });
  if (R() == 0) {
    INFO("KOLO_HIERARCHICAL_ALLREDUCE=" << mode << ", global set");
    REQUIRE(tookHierarchical(tl) == hierarchical);
  }

  // Every rank again as an added set: its own groups.
  int32_t every = -1, three = -1, two = -1;
  REQUIRE(kolo_add_process_set(std::vector<int32_t>{0, 1, 2, 3}.data(), 4, &every) == KOLO_OK);
  tl = recorded(mode + "_every", [&] { allDtypesAndOps(every, all, "e" + mode); });
  if (R() == 0) {
    INFO("KOLO_HIERARCHICAL_ALLREDUCE=" << mode << ", set of every rank");
    REQUIRE(tookHierarchical(tl) == hierarchical);
  }
  // 2 + 1 ranks: no equal split, flat whatever the setting. 1 rank per host: flat too.
  REQUIRE(kolo_add_process_set(std::vector<int32_t>{0, 1, 2}.data(), 3, &three) == KOLO_OK);
  REQUIRE(kolo_add_process_set(std::vector<int32_t>{0, 2}.data(), 2, &two) == KOLO_OK);
  tl = recorded(mode + "_uneven", [&] {
    if (R() != 3) allDtypesAndOps(three, {0, 1, 2}, "t" + mode);
    if (R() % 2 == 0) sameBitsEverywhere(two, {0, 2}, "w" + mode);
  });
  if (R() == 0) {
    INFO("KOLO_HIERARCHICAL_ALLREDUCE=" << mode << ", sets {0,1,2} and {0,2}");
    REQUIRE(!tookHierarchical(tl));
  }
  REQUIRE(kolo_remove_process_set(two) == KOLO_OK);
  REQUIRE(kolo_remove_process_set(three) == KOLO_OK);
  REQUIRE(kolo_remove_process_set(every) == KOLO_OK);
  REQUIRE(kolo_shutdown() == KOLO_OK);
}

}  // namespace

TEST_CASE("hierarchical allreduce: KOLO_HIERARCHICAL_ALLREDUCE unset (auto)") { runMode(nullptr); }
TEST_CASE("hierarchical allreduce: KOLO_HIERARCHICAL_ALLREDUCE=1") { runMode("1"); }
TEST_CASE("hierarchical allreduce: KOLO_HIERARCHICAL_ALLREDUCE=0") { runMode("0"); }

TEST_CASE("hierarchical allreduce: a rank lost mid-op is named", "[.][fault]") {
  setenv("KOLO_HIERARCHICAL_ALLREDUCE", "1", 1);
  REQUIRE(kolo_init() == KOLO_OK);
  REQUIRE(N() == 4);
  const size_t n = 16 << 20;  // 64 MiB of float32: long enough to be cut in the middle
  std::vector<float> data(n, 1.0f);
  int64_t shape[1] = {static_cast<int64_t>(n)};
  kolo_tensor_t t{data.data(), KOLO_FLOAT32, 1, shape, KOLO_CPU_DEVICE, nullptr};
  kolo_handle_t h = 0;
  REQUIRE(kolo_allreduce_async("warm", &t, nullptr, KOLO_SUM, 1.0, 1.0, 0, nullptr, nullptr, &h) ==
          KOLO_OK);
  waitOk(h);  // the groups exist now
  REQUIRE(data[0] == 4.0f);
  REQUIRE(kolo_allreduce_async("cut", &t, nullptr, KOLO_SUM, 1.0, 1.0, 0, nullptr, nullptr, &h) ==
          KOLO_OK);
  if (R() == 3) {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    _exit(0);  // mid-op (or just before it): the others must name rank 3
  }
  const auto start = std::chrono::steady_clock::now();
  const int rc = kolo_handle_wait(h, 60.0);
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::string msg = kolo_last_error();
  INFO("rank " << R() << " got " << kolo_status_string(rc) << " after " << took << " s: " << msg);
  CHECK((rc == KOLO_ERR_PEER_LOST || rc == KOLO_ERR_ABORTED || rc == KOLO_ERR_TIMEOUT));
  CHECK((msg.find("rank 3") != std::string::npos || msg.find("global 3") != std::string::npos));
  CHECK(took < 20.0);
  kolo_handle_release(h);
  kolo_shutdown();
}
