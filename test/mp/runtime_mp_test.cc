// SPDX-License-Identifier: Apache-2.0
// The runtime through the C API as N processes (kolorun/Gloo or mpirun): every op x dtype,
// in place and out of place, many async ops at once, errors on every rank followed by a good
// op, duplicate names, join, barrier, process sets, re-init, stall shutdown. Every rank runs the
// same tests in the same order; every value is checked on every rank.
#include <kolo.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "test/c_api_values.h"

namespace {

int R() { return kolo_rank(); }
int N() { return kolo_size(); }

struct Session {
  Session() { REQUIRE(kolo_init() == KOLO_OK); }
};

const kolo_dtype_t kAllTypes[] = {KOLO_UINT8,   KOLO_INT8,    KOLO_UINT16,  KOLO_INT16,
                                  KOLO_INT32,   KOLO_INT64,   KOLO_FLOAT16, KOLO_BFLOAT16,
                                  KOLO_FLOAT32, KOLO_FLOAT64, KOLO_BOOL};

size_t sizeOf(kolo_dtype_t t) { return kolo_test::dtypeSize(t); }

// A buffer of any dtype, read and written as doubles (all test values are exactly representable).
struct Buf {
  kolo_dtype_t t;
  std::vector<unsigned char> bytes;
  Buf(kolo_dtype_t type, size_t n) : t(type), bytes(n * sizeOf(type)) {}
  size_t size() const { return bytes.size() / sizeOf(t); }
  void set(size_t i, double v) { kolo_test::encode(t, v, bytes.data() + i * sizeOf(t)); }
  double get(size_t i) const { return kolo_test::decode(t, bytes.data() + i * sizeOf(t)); }
};

struct Tensor {
  std::vector<int64_t> shape;
  kolo_tensor_t t;
  Tensor(Buf& b, std::vector<int64_t> s) : shape(std::move(s)) {
    t = {b.bytes.data(),  b.t,    static_cast<int32_t>(shape.size()), shape.data(),
         KOLO_CPU_DEVICE, nullptr};
  }
};

// A host float32 tensor of n ones that owns its memory and shape.
struct Ones {
  std::vector<float> data;
  std::vector<int64_t> shape;
  kolo_tensor_t t{};
  explicit Ones(int64_t n) : data(static_cast<size_t>(n), 1.0f), shape{n} {
    t = {data.data(), KOLO_FLOAT32, 1, shape.data(), -1, nullptr};
  }
  Ones(const Ones&) = delete;
  Ones& operator=(const Ones&) = delete;
};

void waitOk(kolo_handle_t h) {
  int rc = kolo_handle_wait(h, 120.0);
  INFO("rank " << R() << ": " << kolo_last_error());
  REQUIRE(rc == KOLO_OK);
}

// Contribution of `rank` at element i: small values whose sums/products stay exact everywhere.
double value(kolo_dtype_t t, int rank, size_t i) {
  if (t == KOLO_BOOL) return (i + rank) % 3 == 0 ? 1 : 0;
  return static_cast<double>((i + rank) % 3 + 1);
}

double reduceRef(kolo_dtype_t t, kolo_reduce_op_t op, size_t i, int n) {
  double acc = value(t, 0, i);
  for (int r = 1; r < n; ++r) {
    double v = value(t, r, i);
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
      case KOLO_PRODUCT:
        acc = t == KOLO_BOOL ? (acc && v) : acc * v;
        break;
    }
  }
  if (op == KOLO_AVERAGE && t != KOLO_BOOL) {
    bool integer =
        t != KOLO_FLOAT16 && t != KOLO_BFLOAT16 && t != KOLO_FLOAT32 && t != KOLO_FLOAT64;
    // Integers scale by 1/n in double and truncate toward zero (Horovod's rule).
    acc = integer ? std::trunc(acc * (1.0 / n)) : acc / n;
  }
  return acc;
}

std::string tag(const char* what, kolo_dtype_t t, int k = 0) {
  return std::string(what) + "." + kolo_status_string(0) + std::to_string(static_cast<int>(t)) +
         "." + std::to_string(k);
}

}  // namespace

TEST_CASE("allreduce: every dtype x op, in place and out of place, sizes 0..large") {
  Session s;
  const size_t sizes[] = {0, 1, static_cast<size_t>(N() - 1), 1001, 1 << 17};
  const kolo_reduce_op_t ops[] = {KOLO_SUM, KOLO_AVERAGE, KOLO_MIN, KOLO_MAX, KOLO_PRODUCT};
  int k = 0;
  for (kolo_dtype_t t : kAllTypes) {
    for (kolo_reduce_op_t op : ops) {
      for (size_t n : sizes) {
        for (int outOfPlace = 0; outOfPlace < 2; ++outOfPlace, ++k) {
          Buf in(t, n), out(t, n);
          for (size_t i = 0; i < n; ++i) in.set(i, value(t, R(), i));
          Tensor ti(in, {static_cast<int64_t>(n)}), to(out, {static_cast<int64_t>(n)});
          kolo_handle_t h;
          REQUIRE(kolo_allreduce_async(tag("ar", t, k).c_str(), &ti.t, outOfPlace ? &to.t : nullptr,
                                       op, 1.0, 1.0, 0, nullptr, nullptr, &h) == KOLO_OK);
          waitOk(h);
          kolo_handle_release(h);
          const Buf& res = outOfPlace ? out : in;
          const double tol = (t == KOLO_FLOAT16 || t == KOLO_BFLOAT16) ? 2e-2 : 1e-6;
          size_t bad = 0, firstBad = 0;
          for (size_t i = 0; i < n; ++i) {
            double expect = reduceRef(t, op, i, N());
            bool ok = std::abs(res.get(i) - expect) <= tol * std::max(1.0, std::abs(expect));
            if (outOfPlace) ok = ok && in.get(i) == value(t, R(), i);  // input untouched
            if (!ok && bad++ == 0) firstBad = i;
          }
          INFO("dtype " << t << " op " << op << " n " << n << " first wrong element " << firstBad);
          REQUIRE(bad == 0);
        }
      }
    }
  }
}

TEST_CASE("allgather, broadcast, alltoall, reducescatter: every dtype") {
  Session s;
  int k = 0;
  for (kolo_dtype_t t : kAllTypes) {
    ++k;
    // allgather: rank r sends r+1 rows of 3
    Buf in(t, (R() + 1) * 3);
    for (size_t i = 0; i < in.size(); ++i) in.set(i, value(t, R(), i));
    Tensor ti(in, {R() + 1, 3});
    kolo_handle_t h;
    REQUIRE(kolo_allgather_async(tag("ag", t).c_str(), &ti.t, nullptr, nullptr, 0, nullptr, nullptr,
                                 &h) == KOLO_OK);
    waitOk(h);
    void* data;
    int32_t ndim;
    int64_t shape[KOLO_MAX_DIMS];
    REQUIRE(kolo_handle_output(h, &data, &ndim, shape) == KOLO_OK);
    REQUIRE(ndim == 2);
    REQUIRE(shape[0] == N() * (N() + 1) / 2);
    REQUIRE(shape[1] == 3);
    Buf got(t, shape[0] * 3);
    std::memcpy(got.bytes.data(), data, got.bytes.size());
    size_t pos = 0;
    for (int r = 0; r < N(); ++r)
      for (size_t i = 0; i < static_cast<size_t>(r + 1) * 3; ++i)
        REQUIRE(got.get(pos++) == value(t, r, i));
    kolo_handle_release(h);

    // broadcast from the last rank
    Buf b(t, 100);
    for (size_t i = 0; i < 100; ++i) b.set(i, value(t, R(), i));
    Tensor tb(b, {100});
    REQUIRE(kolo_broadcast_async(tag("bc", t).c_str(), &tb.t, N() - 1, 0, nullptr, nullptr, &h) ==
            KOLO_OK);
    waitOk(h);
    for (size_t i = 0; i < 100; ++i) REQUIRE(b.get(i) == value(t, N() - 1, i));
    kolo_handle_release(h);

    // alltoall: rank r sends (dst + 1) rows of 2 to dst; row values encode the source rank
    std::vector<int32_t> splits(N());
    int64_t rows = 0;
    for (int d = 0; d < N(); ++d) rows += (splits[d] = d + 1);
    Buf a(t, rows * 2);
    for (size_t i = 0; i < a.size(); ++i) a.set(i, t == KOLO_BOOL ? 1 : R() + 1);
    Tensor ta(a, {rows, 2});
    REQUIRE(kolo_alltoall_async(tag("a2a", t).c_str(), &ta.t, splits.data(), N(), nullptr, nullptr,
                                0, nullptr, nullptr, &h) == KOLO_OK);
    waitOk(h);
    REQUIRE(kolo_handle_output(h, &data, &ndim, shape) == KOLO_OK);
    REQUIRE(shape[0] == static_cast<int64_t>(N()) * (R() + 1));
    std::vector<int32_t> recv(N());
    REQUIRE(kolo_handle_received_splits(h, recv.data(), N()) == KOLO_OK);
    Buf ga(t, shape[0] * 2);
    std::memcpy(ga.bytes.data(), data, ga.bytes.size());
    for (int src = 0; src < N(); ++src) {
      REQUIRE(recv[src] == R() + 1);
      for (int j = 0; j < (R() + 1) * 2; ++j)
        REQUIRE(ga.get(src * (R() + 1) * 2 + j) == (t == KOLO_BOOL ? 1 : src + 1));
    }
    kolo_handle_release(h);

    // reducescatter (sum) of 2N+1 rows: rank 0 gets 3 rows, the others 2
    if (t != KOLO_BOOL) {
      int64_t total = 2 * N() + 1;
      Buf rs(t, total);
      for (int64_t i = 0; i < total; ++i) rs.set(i, value(t, R(), i));
      Tensor tr(rs, {total});
      REQUIRE(kolo_reducescatter_async(tag("rs", t).c_str(), &tr.t, KOLO_SUM, 1.0, 1.0, nullptr,
                                       nullptr, 0, nullptr, nullptr, &h) == KOLO_OK);
      waitOk(h);
      REQUIRE(kolo_handle_output(h, &data, &ndim, shape) == KOLO_OK);
      int64_t mine = R() == 0 ? 3 : 2, first = R() == 0 ? 0 : 3 + 2 * (R() - 1);
      REQUIRE(shape[0] == mine);
      Buf gr(t, mine);
      std::memcpy(gr.bytes.data(), data, gr.bytes.size());
      for (int64_t i = 0; i < mine; ++i)
        REQUIRE(gr.get(i) == reduceRef(t, KOLO_SUM, first + i, N()));
      kolo_handle_release(h);
    }
  }
}

TEST_CASE("forty async ops of mixed dtypes in flight at once, over several steps") {
  Session s;
  for (int step = 0; step < 5; ++step) {
    std::vector<Buf> bufs;
    std::vector<Tensor> ts;
    bufs.reserve(40);
    ts.reserve(40);
    std::vector<kolo_handle_t> hs;
    for (int k = 0; k < 40; ++k) {
      kolo_dtype_t t = kAllTypes[k % 10];  // no bool
      bufs.emplace_back(t, 10 + 37 * k);
      for (size_t i = 0; i < bufs.back().size(); ++i) bufs.back().set(i, value(t, R(), i));
      ts.emplace_back(bufs.back(), std::vector<int64_t>{static_cast<int64_t>(bufs.back().size())});
      kolo_handle_t h;
      REQUIRE(kolo_allreduce_async(("mixed." + std::to_string(k)).c_str(), &ts.back().t, nullptr,
                                   KOLO_SUM, 1.0, 1.0, 0, nullptr, nullptr, &h) == KOLO_OK);
      hs.push_back(h);
    }
    for (auto h : hs) {
      waitOk(h);
      kolo_handle_release(h);
    }
    for (int k = 0; k < 40; ++k) {
      for (size_t i = 0; i < bufs[k].size(); ++i) {
        REQUIRE(bufs[k].get(i) == reduceRef(bufs[k].t, KOLO_SUM, i, N()));
      }
    }
  }
}

TEST_CASE("a mismatch fails on every rank with the same message; the next op works") {
  Session s;
  std::vector<float> a(R() == N() - 1 ? 8 : 6, 1.f);
  std::vector<int64_t> shape = {2, R() == N() - 1 ? 4 : 3};
  kolo_tensor_t t = {a.data(), KOLO_FLOAT32, 2, shape.data(), KOLO_CPU_DEVICE, nullptr};
  kolo_handle_t h;
  REQUIRE(kolo_allreduce_async("grad/fc1", &t, nullptr, KOLO_SUM, 1, 1, 0, nullptr, nullptr, &h) ==
          KOLO_OK);
  REQUIRE(kolo_handle_wait(h, 60) == KOLO_ERR_MISMATCH);
  std::string msg = kolo_last_error();
  std::string expect = "allreduce 'grad/fc1': rank 0 sent shape [2, 3], rank " +
                       std::to_string(N() - 1) + " sent [2, 4]";
  REQUIRE(msg.find(expect) != std::string::npos);
  kolo_handle_release(h);

  // dtype mismatch on broadcast
  std::vector<int32_t> ints(4, R());
  std::vector<int64_t> s4 = {4};
  kolo_tensor_t tb = {ints.data(), R() == 0 ? KOLO_INT32 : KOLO_FLOAT32, 1, s4.data(), -1, nullptr};
  REQUIRE(kolo_broadcast_async("bcast.dtype", &tb, 0, 0, nullptr, nullptr, &h) == KOLO_OK);
  REQUIRE(kolo_handle_wait(h, 60) == KOLO_ERR_MISMATCH);
  REQUIRE(std::string(kolo_last_error()).find("rank 0 sent dtype int32, rank 1 sent float32") !=
          std::string::npos);
  kolo_handle_release(h);

  // root mismatch
  kolo_tensor_t tr = {ints.data(), KOLO_INT32, 1, s4.data(), -1, nullptr};
  REQUIRE(kolo_broadcast_async("bcast.root", &tr, R() == 0 ? 0 : 1, 0, nullptr, nullptr, &h) ==
          KOLO_OK);
  REQUIRE(kolo_handle_wait(h, 60) == KOLO_ERR_MISMATCH);
  REQUIRE(std::string(kolo_last_error()).find("root") != std::string::npos);
  kolo_handle_release(h);

  std::vector<int32_t> ok(4, 1);
  kolo_tensor_t tok = {ok.data(), KOLO_INT32, 1, s4.data(), -1, nullptr};
  REQUIRE(kolo_allreduce_async("after.mismatch", &tok, nullptr, KOLO_SUM, 1, 1, 0, nullptr, nullptr,
                               &h) == KOLO_OK);
  waitOk(h);
  for (int v : ok) REQUIRE(v == N());
  kolo_handle_release(h);
}

TEST_CASE("a duplicate name in flight fails at once; the first op completes") {
  Session s;
  std::vector<int32_t> a(4, 1), b(4, 1);
  std::vector<int64_t> s4 = {4};
  kolo_tensor_t ta = {a.data(), KOLO_INT32, 1, s4.data(), -1, nullptr};
  kolo_tensor_t tb = {b.data(), KOLO_INT32, 1, s4.data(), -1, nullptr};
  kolo_handle_t h1, h2;
  // Rank 0 holds the op back so that it is certainly still in flight on the other ranks.
  if (R() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  REQUIRE(kolo_allreduce_async("dup", &ta, nullptr, KOLO_SUM, 1, 1, 0, nullptr, nullptr, &h1) ==
          KOLO_OK);
  if (R() != 0) {
    REQUIRE(kolo_allreduce_async("dup", &tb, nullptr, KOLO_SUM, 1, 1, 0, nullptr, nullptr, &h2) ==
            KOLO_ERR_DUPLICATE_NAME);
    REQUIRE(std::string(kolo_last_error()).find("'dup'") != std::string::npos);
  }
  waitOk(h1);
  for (int v : a) REQUIRE(v == N());
  kolo_handle_release(h1);
}

TEST_CASE("join: the joined rank contributes zeros; every rank gets the same last rank") {
  Session s;
  kolo_handle_t h;
  if (R() != 0) {
    std::vector<float> x(16, 2.f);
    std::vector<int64_t> s16 = {16};
    kolo_tensor_t t = {x.data(), KOLO_FLOAT32, 1, s16.data(), -1, nullptr};
    std::this_thread::sleep_for(std::chrono::milliseconds(100 * R()));
    REQUIRE(kolo_allreduce_async("join.avg", &t, nullptr, KOLO_AVERAGE, 1, 1, 0, nullptr, nullptr,
                                 &h) == KOLO_OK);
    waitOk(h);
    kolo_handle_release(h);
    for (float v : x) REQUIRE(v == Approx(2.0 * (N() - 1) / N()));
  }
  REQUIRE(kolo_join_async(nullptr, nullptr, &h) == KOLO_OK);
  waitOk(h);
  int32_t last = -2;
  REQUIRE(kolo_handle_join_result(h, &last) == KOLO_OK);
  kolo_handle_release(h);
  // Rank 0 joined first; the others joined after their allreduce, the last one N-1 (it slept
  // longest), unless scheduling reordered them: check agreement through an allgather.
  std::vector<int32_t> mine = {last};
  std::vector<int64_t> s1 = {1};
  kolo_tensor_t t = {mine.data(), KOLO_INT32, 1, s1.data(), -1, nullptr};
  REQUIRE(kolo_allgather_async("join.last", &t, nullptr, nullptr, 0, nullptr, nullptr, &h) ==
          KOLO_OK);
  waitOk(h);
  void* data;
  REQUIRE(kolo_handle_output(h, &data, nullptr, nullptr) == KOLO_OK);
  for (int r = 0; r < N(); ++r) REQUIRE(static_cast<int32_t*>(data)[r] == last);
  REQUIRE(last != 0);
  kolo_handle_release(h);
}

TEST_CASE("barrier holds until the slowest rank arrives") {
  // The last rank arrives 400 ms late; every rank's barrier must complete after that arrival.
  // The ranks share this host, so steady_clock (CLOCK_MONOTONIC) is one clock for all of them:
  // the last rank's arrival time is broadcast and compared, not each rank's own start (the
  // ranks leave the previous test at slightly different moments).
  Session s;
  using namespace std::chrono;
  auto nowNs = [] {
    return duration_cast<nanoseconds>(steady_clock::now().time_since_epoch()).count();
  };
  if (R() == N() - 1) std::this_thread::sleep_for(milliseconds(400));
  int64_t arrived = nowNs();
  kolo_handle_t h;
  REQUIRE(kolo_barrier_async(0, nullptr, nullptr, &h) == KOLO_OK);
  waitOk(h);
  const int64_t released = nowNs();
  kolo_handle_release(h);
  const int64_t one[1] = {1};
  kolo_tensor_t t{&arrived, KOLO_INT64, 1, one, KOLO_CPU_DEVICE, nullptr};
  REQUIRE(kolo_broadcast_async("barrier.arrived", &t, N() - 1, 0, nullptr, nullptr, &h) == KOLO_OK);
  waitOk(h);
  kolo_handle_release(h);
  REQUIRE(released >= arrived);
}

TEST_CASE("process sets: members only, deterministic ids, removal") {
  Session s;
  if (N() < 2) return;
  std::vector<int32_t> evens;
  for (int r = 0; r < N(); r += 2) evens.push_back(r);
  int32_t id = -1;
  REQUIRE(kolo_add_process_set(evens.data(), static_cast<int32_t>(evens.size()), &id) == KOLO_OK);
  REQUIRE(id >= 1);
  int32_t size = 0, rank = -2;
  REQUIRE(kolo_process_set_size(id, &size) == KOLO_OK);
  REQUIRE(size == static_cast<int32_t>(evens.size()));
  REQUIRE(kolo_process_set_rank(id, &rank) == KOLO_OK);
  REQUIRE(rank == (R() % 2 == 0 ? R() / 2 : -1));
  std::vector<int32_t> a(8, R());
  std::vector<int64_t> s8 = {8};
  kolo_tensor_t t = {a.data(), KOLO_INT32, 1, s8.data(), -1, nullptr};
  kolo_handle_t h;
  if (R() % 2 == 0) {
    REQUIRE(kolo_allreduce_async("evens.sum", &t, nullptr, KOLO_SUM, 1, 1, id, nullptr, nullptr,
                                 &h) == KOLO_OK);
    waitOk(h);
    kolo_handle_release(h);
    int expect = 0;
    for (int r : evens) expect += r;
    for (int v : a) REQUIRE(v == expect);
  } else {
    REQUIRE(kolo_allreduce_async("evens.sum", &t, nullptr, KOLO_SUM, 1, 1, id, nullptr, nullptr,
                                 &h) == KOLO_ERR_INVALID_ARGUMENT);
  }
  REQUIRE(kolo_remove_process_set(id) == KOLO_OK);
  REQUIRE(kolo_process_set_size(id, &size) == KOLO_ERR_INVALID_ARGUMENT);
}

TEST_CASE("an output allocator that returns NULL on one rank fails that rank's op only") {
  // Rank 1's allocator fails: its allgather fails naming that, at once; the others get their
  // result (the collective ran, rank 1 on a scratch output), and the next op lines up.
  Session s;
  if (N() < 2) return;
  std::vector<int32_t> in(2, R() + 1);
  std::vector<int64_t> shape = {2};
  kolo_tensor_t t = {in.data(), KOLO_INT32, 1, shape.data(), -1, nullptr};
  std::vector<int32_t> out(2 * N(), -1);
  struct Mine {
    std::vector<int32_t>* out;
    bool fail;
  } mine{&out, R() == 1};
  kolo_alloc_fn alloc = [](void* user, size_t bytes, int32_t, const int64_t*) -> void* {
    auto* m = static_cast<Mine*>(user);
    return m->fail || bytes > m->out->size() * sizeof(int32_t) ? nullptr : m->out->data();
  };
  kolo_handle_t h;
  REQUIRE(kolo_allgather_async("null.alloc", &t, alloc, &mine, 0, nullptr, nullptr, &h) == KOLO_OK);
  const auto t0 = std::chrono::steady_clock::now();
  const int rc = kolo_handle_wait(h, 60);
  INFO("rank " << R() << ": " << kolo_last_error());
  if (R() == 1) {
    REQUIRE(rc == KOLO_ERR_INVALID_ARGUMENT);
    REQUIRE(std::string(kolo_last_error())
                .find("'null.alloc' on rank 1: the output allocator "
                      "returned NULL") != std::string::npos);
  } else {
    REQUIRE(rc == KOLO_OK);
    for (int r = 0; r < N(); ++r) {
      REQUIRE(out[2 * r] == r + 1);
      REQUIRE(out[2 * r + 1] == r + 1);
    }
  }
  REQUIRE(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));  // not a timeout
  kolo_handle_release(h);
  std::vector<int32_t> one(1, 1);
  std::vector<int64_t> s1 = {1};
  kolo_tensor_t tone = {one.data(), KOLO_INT32, 1, s1.data(), -1, nullptr};
  REQUIRE(kolo_allreduce_async("null.alloc.after", &tone, nullptr, KOLO_SUM, 1, 1, 0, nullptr,
                               nullptr, &h) == KOLO_OK);
  waitOk(h);
  kolo_handle_release(h);
  REQUIRE(one[0] == N());
}

TEST_CASE("input one rank gets wrong fails the op on every rank at once, naming that rank") {
  // Rank 1 passes an output of the wrong shape, a NaN scale, a NULL tensor, and refuses a
  // grouped allreduce through kolo_refuse (a framework's own check): its call fails at once,
  // and the others' copies fail at once with its reason instead of waiting for the stall
  // shutdown. Every name works again afterwards.
  Session s;
  if (N() < 2) return;
  const bool bad = R() == 1;
  std::vector<float> in(4, 1.0f), out(bad ? 3 : 4, 0.0f);
  std::vector<int64_t> shape = {4}, wrong = {3};
  kolo_tensor_t t = {in.data(), KOLO_FLOAT32, 1, shape.data(), -1, nullptr};
  kolo_tensor_t o = {out.data(), KOLO_FLOAT32, 1, bad ? wrong.data() : shape.data(), -1, nullptr};
  struct Case {
    const char* name;
    std::function<int(kolo_handle_t*)> submit;
    const char* reason;
  };
  std::vector<kolo_tensor_t> group = {t, t};
  const std::vector<Case> cases = {
      {"bad.output",
       [&](kolo_handle_t* h) {
         return kolo_allreduce_async("bad.output", &t, &o, KOLO_SUM, 1, 1, 0, nullptr, nullptr, h);
       },
       "does not match the input"},
      {"bad.scale",
       [&](kolo_handle_t* h) {
         return kolo_allreduce_async("bad.scale", &t, nullptr, KOLO_SUM, bad ? NAN : 1.0, 1, 0,
                                     nullptr, nullptr, h);
       },
       "scale factors must be finite"},
      {"bad.null",
       [&](kolo_handle_t* h) {
         return kolo_broadcast_async("bad.null", bad ? nullptr : &t, 0, 0, nullptr, nullptr, h);
       },
       "tensor is NULL"},
      {"bad.group",
       [&](kolo_handle_t* h) {
         if (bad) {
           REQUIRE(kolo_refuse(KOLO_COLLECTIVE_GROUPED_ALLREDUCE, "bad.group", 2, 0,
                               "complex64 is not supported") == KOLO_OK);
           return static_cast<int>(KOLO_ERR_INVALID_ARGUMENT);
         }
         return kolo_grouped_allreduce_async("bad.group", 2, group.data(), nullptr, KOLO_SUM, 1, 1,
                                             0, nullptr, nullptr, h);
       },
       "complex64 is not supported"},
  };
  for (const auto& c : cases) {
    INFO("case " << c.name << ", rank " << R());
    const auto t0 = std::chrono::steady_clock::now();
    kolo_handle_t h = 0;
    int rc = c.submit(&h);
    if (bad) {
      REQUIRE(rc == KOLO_ERR_INVALID_ARGUMENT);
    } else {
      REQUIRE(rc == KOLO_OK);
      rc = kolo_handle_wait(h, 60);
      INFO(kolo_last_error());
      REQUIRE(rc == KOLO_ERR_INVALID_ARGUMENT);
      const std::string e = kolo_last_error();
      CHECK(e.find("rank 1 could not submit it: ") != std::string::npos);
      CHECK(e.find(c.reason) != std::string::npos);
      kolo_handle_release(h);
    }
    REQUIRE(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));  // no stall
  }
  for (const auto& c : cases) {  // every name is free again, on every rank
    kolo_handle_t h;
    REQUIRE(kolo_allreduce_async(c.name, &t, nullptr, KOLO_SUM, 1, 1, 0, nullptr, nullptr, &h) ==
            KOLO_OK);
    waitOk(h);
    kolo_handle_release(h);
  }
}

TEST_CASE("callbacks run on kolo's thread, and a wait returns after its callback returned") {
  // X has a callback, Y none; the main thread holds its own mutex while it waits for Y (and,
  // with caller rounds, runs the round that completes X too). X's callback takes that mutex:
  // run on the waiting thread it deadlocked; it must run on kolo's thread, after the wait.
  // Rounds 3-5 hold the mutex before X is submitted and submit Y only after kolo's thread
  // completed X, so X's callback blocks there while Y still needs a round: run inside kolo's
  // round it held that round, and the wait for Y could not run one (it hung, once, in CI).
  Session s;
  Ones x(4), y(4);
  kolo_tensor_t& tx = x.t;
  kolo_tensor_t& ty = y.t;
  struct Seen {
    std::mutex* user;
    std::atomic<bool> entered{false}, ran{false};
    std::thread::id thread;
  };
  std::mutex userLock;
  for (int round = 0; round < 6; ++round) {
    const bool late = round >= 3;
    Seen seen;
    seen.user = &userLock;
    kolo_callback_t cb = [](kolo_handle_t, kolo_status_t, void* user) {
      auto* s = static_cast<Seen*>(user);
      s->entered = true;
      std::lock_guard<std::mutex> lock(*s->user);
      s->thread = std::this_thread::get_id();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      s->ran = true;
    };
    kolo_handle_t hx, hy;
    std::unique_lock<std::mutex> lock(userLock, std::defer_lock);
    if (late) lock.lock();
    REQUIRE(kolo_allreduce_async("cb.x", &tx, nullptr, KOLO_SUM, 1, 1, 0, cb, &seen, &hx) ==
            KOLO_OK);
    if (late) {  // kolo's thread completes X (every rank submitted it) and calls its callback
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (!seen.entered.load() && std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      REQUIRE(seen.entered.load());
    }
    REQUIRE(kolo_allreduce_async("cb.y", &ty, nullptr, KOLO_SUM, 1, 1, 0, nullptr, nullptr, &hy) ==
            KOLO_OK);
    if (!late) lock.lock();
    waitOk(hy);
    lock.unlock();
    waitOk(hx);
    CHECK(seen.ran.load());  // the wait returned after the callback did
    CHECK(seen.thread != std::this_thread::get_id());
    kolo_handle_release(hx);
    kolo_handle_release(hy);
  }
}

TEST_CASE("a callback that waits for another op, or changes process sets, fails at once") {
  // Callbacks run on kolo's own thread, which would have to complete the op they wait for: a
  // wait there, even without a timeout, and a process-set change return an error instead of
  // blocking the runtime for good.
  Session s;
  Ones x(2), y(2);
  kolo_tensor_t& tx = x.t;
  kolo_tensor_t& ty = y.t;
  struct Inside {
    kolo_handle_t other = 0;
    std::atomic<int> waitRc{-1}, addRc{-1};
    std::string waitError, addError;
    std::atomic<bool> ran{false};
  } inside;
  kolo_callback_t cb = [](kolo_handle_t, kolo_status_t, void* user) {
    auto* in = static_cast<Inside*>(user);
    in->ran = true;
    if (kolo_rank() == 0) return;  // rank 0 has no pending op to wait for
    int rc = kolo_handle_wait(in->other, -1);
    in->waitError = kolo_last_error();
    in->waitRc = rc;
    int32_t ranks[1] = {0};
    int32_t id = -1;
    rc = kolo_add_process_set(ranks, 1, &id);
    in->addError = kolo_last_error();
    in->addRc = rc;
  };
  // Rank 0 submits "cb.late" only after "cb.first" completed, so on the other ranks it is
  // pending while cb.first's callback waits for it.
  kolo_handle_t hfirst, hlate = 0;
  auto submitLate = [&] {
    REQUIRE(kolo_allreduce_async("cb.late", &ty, nullptr, KOLO_SUM, 1, 1, 0, nullptr, nullptr,
                                 &hlate) == KOLO_OK);
  };
  if (R() != 0) submitLate();
  inside.other = hlate;
  // Whether or not cb.first completed before its callback was attached, the callback runs on
  // kolo's thread (kolo.h), so the refusals below are the same in every order.
  REQUIRE(kolo_allreduce_async("cb.first", &tx, nullptr, KOLO_SUM, 1, 1, 0, cb, &inside, &hfirst) ==
          KOLO_OK);
  waitOk(hfirst);  // returns after the callback did
  REQUIRE(inside.ran.load());
  kolo_handle_t hb;  // every rank's callback has run before rank 0 lets cb.late complete
  REQUIRE(kolo_barrier_async(0, nullptr, nullptr, &hb) == KOLO_OK);
  waitOk(hb);
  kolo_handle_release(hb);
  if (R() == 0) submitLate();
  INFO("wait: " << inside.waitError << "; add: " << inside.addError);
  if (R() != 0) {
    CHECK(inside.waitRc.load() == KOLO_ERR_INVALID_ARGUMENT);
    CHECK(inside.waitError.find("callbacks must not block") != std::string::npos);
  }
  if (R() != 0) {
    CHECK(inside.addRc.load() == KOLO_ERR_INVALID_ARGUMENT);
    CHECK(inside.addError.find("inside a completion callback") != std::string::npos);
  }
  waitOk(hlate);
  kolo_handle_release(hfirst);
  kolo_handle_release(hlate);
}

TEST_CASE("an op pending in a process set that is removed fails, it does not wait forever") {
  // Rank 0 submits an op in set {0, 1} that rank 1 never submits, then every rank removes the
  // set: rank 0's op must fail naming the removal. It waited forever once: its error was queued
  // on the coordinator for a full round, which only another rank's next new op brought; here
  // the others submit nothing for 4 s while rank 0 allows itself 3. (2 ranks only: the 4 s
  // are paid once per transport.)
  Session s;
  if (N() != 2) return;
  std::vector<int32_t> pair = {0, 1};
  int32_t id = -1;
  REQUIRE(kolo_add_process_set(pair.data(), 2, &id) == KOLO_OK);
  std::vector<int32_t> a(4, 1);
  std::vector<int64_t> s4 = {4};
  kolo_tensor_t t = {a.data(), KOLO_INT32, 1, s4.data(), -1, nullptr};
  kolo_handle_t h = 0;
  if (R() == 0) {
    REQUIRE(kolo_allreduce_async("orphan", &t, nullptr, KOLO_SUM, 1, 1, id, nullptr, nullptr, &h) ==
            KOLO_OK);
  }
  REQUIRE(kolo_remove_process_set(id) == KOLO_OK);
  if (R() == 0) {
    const int rc = kolo_handle_wait(h, 3);
    INFO(kolo_last_error());
    REQUIRE(rc == KOLO_ERR_INVALID_ARGUMENT);
    REQUIRE(std::string(kolo_last_error()).find("was removed") != std::string::npos);
    kolo_handle_release(h);
  } else {
    std::this_thread::sleep_for(std::chrono::seconds(4));
  }
}

TEST_CASE("a batch of a set without this rank may outlast KOLO_TIMEOUT_SECONDS") {
  // Set {1, 2} runs an allgather whose output allocator takes 3 s on both members, three times
  // the 1 s timeout; rank 0, not in the set, waits for them in the next round's exchange. It
  // aborted the job once ("waited 1 s for 1 recv(s) from rank 1"): busy members are not silent
  // ones (each member's own waits are short: both are slow together).
  if (N() < 3) return;
  REQUIRE(kolo_shutdown() == KOLO_OK);
  setenv("KOLO_TIMEOUT_SECONDS", "1", 1);
  setenv("KOLO_HEARTBEAT_SECONDS", "0.1", 1);
  REQUIRE(kolo_init() == KOLO_OK);
  unsetenv("KOLO_TIMEOUT_SECONDS");
  unsetenv("KOLO_HEARTBEAT_SECONDS");
  int32_t pair[2] = {1, 2};
  int32_t id = -1;
  REQUIRE(kolo_add_process_set(pair, 2, &id) == KOLO_OK);
  if (R() == 1 || R() == 2) {
    Ones x(4);
    std::vector<float> out(8, 0.0f);
    kolo_alloc_fn slow = [](void* user, size_t bytes, int32_t, const int64_t*) -> void* {
      std::this_thread::sleep_for(std::chrono::seconds(3));
      auto* v = static_cast<std::vector<float>*>(user);
      return bytes <= v->size() * sizeof(float) ? v->data() : nullptr;
    };
    kolo_handle_t h;
    REQUIRE(kolo_allgather_async("busy", &x.t, slow, &out, id, nullptr, nullptr, &h) == KOLO_OK);
    waitOk(h);
    kolo_handle_release(h);
    CHECK(out == std::vector<float>(8, 1.0f));
  }
  kolo_handle_t hb;  // rank 0 reaches it at once; it completes once the members are back
  REQUIRE(kolo_barrier_async(0, nullptr, nullptr, &hb) == KOLO_OK);
  waitOk(hb);
  kolo_handle_release(hb);

  // The same in the data path: rank 1's slow batch in {1, 2} and then {0, 1}'s allreduce in one
  // round: rank 0 waits there for rank 1, busy in the first batch for 3 s (it aborted too).
  int32_t other[2] = {0, 1};
  int32_t id2 = -1;
  REQUIRE(kolo_add_process_set(other, 2, &id2) == KOLO_OK);
  {
    Ones x(4), y(4);
    std::vector<float> out(8, 0.0f);
    kolo_alloc_fn slow = [](void* user, size_t bytes, int32_t, const int64_t*) -> void* {
      std::this_thread::sleep_for(std::chrono::seconds(3));
      auto* v = static_cast<std::vector<float>*>(user);
      return bytes <= v->size() * sizeof(float) ? v->data() : nullptr;
    };
    kolo_handle_t hx = 0, hy = 0;
    // Rank 1 comes last, submitting both back to back: they complete in the order it sent them,
    // in one round (most often: the test holds in either case, it only checks less then).
    if (R() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    if (R() == 1 || R() == 2) {
      REQUIRE(kolo_allgather_async("busy2", &x.t, slow, &out, id, nullptr, nullptr, &hx) ==
              KOLO_OK);
    }
    if (R() == 0 || R() == 1) {
      REQUIRE(kolo_allreduce_async("after", &y.t, nullptr, KOLO_SUM, 1, 1, id2, nullptr, nullptr,
                                   &hy) == KOLO_OK);
    }
    if (hx != 0) {
      waitOk(hx);
      kolo_handle_release(hx);
    }
    if (hy != 0) {
      waitOk(hy);
      kolo_handle_release(hy);
      CHECK(y.data == std::vector<float>(4, 2.0f));
    }
  }
  REQUIRE(kolo_barrier_async(0, nullptr, nullptr, &hb) == KOLO_OK);
  waitOk(hb);
  kolo_handle_release(hb);
  REQUIRE(kolo_remove_process_set(id2) == KOLO_OK);
  REQUIRE(kolo_remove_process_set(id) == KOLO_OK);
  REQUIRE(kolo_shutdown() == KOLO_OK);
}

TEST_CASE("shutdown, then init again, works; the stall inspector ends a stuck op") {
  REQUIRE(kolo_init() == KOLO_OK);
  REQUIRE(kolo_shutdown() == KOLO_OK);
  REQUIRE(kolo_is_initialized() == 0);
  REQUIRE(kolo_rank() == -1);
  setenv("KOLO_STALL_CHECK_TIME_SECONDS", "0.5", 1);
  setenv("KOLO_STALL_SHUTDOWN_TIME_SECONDS", "1", 1);
  REQUIRE(kolo_init() == KOLO_OK);
  unsetenv("KOLO_STALL_CHECK_TIME_SECONDS");
  unsetenv("KOLO_STALL_SHUTDOWN_TIME_SECONDS");
  std::vector<int32_t> a(4, 1);
  std::vector<int64_t> s4 = {4};
  kolo_tensor_t t = {a.data(), KOLO_INT32, 1, s4.data(), -1, nullptr};
  kolo_handle_t h;
  if (R() == 0) {
    auto t0 = std::chrono::steady_clock::now();
    REQUIRE(kolo_allreduce_async("stuck", &t, nullptr, KOLO_SUM, 1, 1, 0, nullptr, nullptr, &h) ==
            KOLO_OK);
    REQUIRE(kolo_handle_wait(h, 30) == KOLO_ERR_STALLED);
    REQUIRE(std::string(kolo_last_error()).find("stuck") != std::string::npos);
    REQUIRE(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));
    kolo_handle_release(h);
  }
  // No barrier here: it would itself stall past the 1 s limit while rank 0 waits. The other
  // ranks stay up (idle) until rank 0 has seen its error, then everyone shuts down.
  if (R() != 0) std::this_thread::sleep_for(std::chrono::seconds(4));
  REQUIRE(kolo_shutdown() == KOLO_OK);
}
