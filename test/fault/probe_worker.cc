// SPDX-License-Identifier: Apache-2.0
// probe_worker: one rank of an adversarial probe of the runtime through the C API (kolo.h),
// driven by test_probes.py (or by hand under kolorun / mpirun). Every rank runs the same cases
// in the same order; each case prints one line per rank
//   PROBE case=NAME rank=R result=PASS|FAIL secs=S detail=<text>
// and the program exits 0 when every case passed on this rank, 1 otherwise, 2 on bad usage.
//
//   probe_worker --cases a,b,c [--bound S] [--tag T]
//
// Cases (a deviating rank is the last one, N-1, unless said otherwise):
//   mismatch-dtype mismatch-shape mismatch-op mismatch-prescale mismatch-postscale
//   mismatch-root mismatch-allgather-dims mismatch-allgather-dtype mismatch-reducescatter
//   mismatch-alltoall-dims mismatch-optype mismatch-grouped-size mismatch-set-members
//                  one rank's op differs: every rank's op fails at once (MISMATCH or
//                  INVALID_ARGUMENT) with a message naming the op and the rank, and a checked
//                  allreduce works afterwards
//   swapped-order  rank 0 submits "a" then "b", the others "b" then "a" (both async): both
//                  complete with the right sums
//   stall-missing  the last rank never submits "lonely": the others' op fails (STALLED) within
//                  the stall shutdown naming the op and the missing rank (run with
//                  KOLO_STALL_CHECK_TIME_SECONDS / KOLO_STALL_SHUTDOWN_TIME_SECONDS small)
//   stall-crossed  rank 0 waits for "a" before submitting "b", the others wait for "b" first:
//                  a deadlock of the program; every rank's op fails (STALLED) naming a rank
//   zero-size      every collective with zero-element tensors (and ranks with zero rows)
//   many-inflight  2000 allreduces with distinct names in flight at once, then a wait on each
//   threads        8 threads submit 150 ops each (allreduce, allgather, broadcast) at once
//   huge           one allreduce of more than 2^31 bytes (int8, 2^31 + 1000 elements) and an
//                  allgather whose output passes 2^31 bytes
//   shutdown-inflight  the last rank calls kolo_shutdown while the others have 200 ops in
//                  flight that wait for it: they fail with SHUTDOWN naming it, promptly
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "kolo.h"

namespace {

using Clock = std::chrono::steady_clock;

double gBound = 30;  // seconds any single wait may take before the probe calls it a hang
int R = -1, N = -1;
std::string gSeen;  // the last agreed error a case saw (printed as its detail when it passes)

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::string oneLine(std::string s) {
  for (char& c : s) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return s;
}

// "rank 2" or a list "ranks [0, 2]" that holds it.
bool namesRank(const std::string& text, int rank) {
  const std::string r = std::to_string(rank);
  return std::regex_search(text, std::regex("rank " + r + "\\b")) ||
         std::regex_search(text, std::regex("ranks \\[([0-9]+, )*" + r + "\\b[^\\]]*\\]"));
}

// The result of waiting for one op.
struct Result {
  int code = KOLO_OK;  // -1: still running after the bound (a hang)
  std::string msg;
};

Result finish(int rc, const kolo_handle_t& h, double bound = gBound) {
  Result r;
  if (rc != KOLO_OK) {
    r.code = rc;
    r.msg = kolo_last_error();
    return r;
  }
  rc = kolo_handle_wait(h, bound);
  int st = 0;
  const char* text = nullptr;
  if (rc == KOLO_ERR_TIMEOUT && kolo_handle_status(h, &st, &text) == KOLO_OK && st == -1) {
    r.code = -1;
    r.msg = "still running after " + std::to_string(bound) + " s";
    return r;  // left registered: the op is still in flight
  }
  r.code = rc;
  if (rc != KOLO_OK) r.msg = kolo_last_error();
  kolo_handle_release(h);
  return r;
}

std::string describe(const Result& r) {
  return std::string(r.code == -1 ? "HANG" : kolo_status_string(r.code)) + ": " + r.msg;
}

struct Tensor {
  std::vector<char> bytes;
  std::vector<int64_t> shape;
  kolo_tensor_t t{};
  Tensor(kolo_dtype_t dtype, std::vector<int64_t> dims, size_t elemBytes) : shape(std::move(dims)) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    bytes.assign(static_cast<size_t>(n) * elemBytes, 0);
    t = {bytes.empty() ? nullptr : bytes.data(),
         dtype,
         static_cast<int32_t>(shape.size()),
         shape.data(),
         KOLO_CPU_DEVICE,
         nullptr};
  }
  int64_t elements() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  int32_t* i32() { return reinterpret_cast<int32_t*>(bytes.data()); }
  float* f32() { return reinterpret_cast<float*>(bytes.data()); }
};

Tensor ints(std::vector<int64_t> dims, int32_t base) {
  Tensor t(KOLO_INT32, std::move(dims), 4);
  for (int64_t i = 0; i < t.elements(); ++i) t.i32()[i] = base + static_cast<int32_t>(i % 97);
  return t;
}

// Allreduce (sum) of 64 int32 elements under `name` on the global set, checked. "" when right.
std::string checkedAllreduce(const std::string& name) {
  Tensor t = ints({64}, R + 1);
  kolo_handle_t h = 0;
  Result r = finish(
      kolo_allreduce_async(name.c_str(), &t.t, nullptr, KOLO_SUM, 1, 1, 0, nullptr, nullptr, &h),
      h);
  if (r.code != KOLO_OK) return "allreduce '" + name + "' after it: " + describe(r);
  for (int64_t i = 0; i < 64; ++i) {
    int64_t want = static_cast<int64_t>(N) * (i % 97) + N * (N + 1) / 2;
    if (t.i32()[i] != want) {
      return "allreduce '" + name + "' element " + std::to_string(i) + " = " +
             std::to_string(t.i32()[i]) + ", expected " + std::to_string(want);
    }
  }
  return "";
}

// A global barrier after a case whose ranks left it at different times: "" when it completed.
std::string barrier() {
  kolo_handle_t h = 0;
  Result r = finish(kolo_barrier_async(0, nullptr, nullptr, &h), h);
  return r.code == KOLO_OK ? "" : "barrier after the case: " + describe(r);
}

// ---- mismatch cases ----------------------------------------------------------------------------

// What a mismatch case expects on every rank: a code among `codes`, a message naming `what`
// (the op's name) and the deviating rank, within the bound.
std::string expectAgreedError(const Result& r, const std::string& what, int deviant,
                              std::vector<int> codes = {KOLO_ERR_MISMATCH}) {
  bool codeOk = false;
  for (int c : codes) codeOk |= r.code == c;
  gSeen = describe(r);
  if (!codeOk) return "unexpected outcome " + describe(r);
  if (r.msg.find(what) == std::string::npos)
    return "message does not name '" + what + "': " + r.msg;
  if (deviant >= 0 && !namesRank(r.msg, deviant)) {
    return "message does not name rank " + std::to_string(deviant) + ": " + r.msg;
  }
  return "";
}

std::string mismatchAllreduce(const char* name, kolo_dtype_t dtype, std::vector<int64_t> shape,
                              kolo_reduce_op_t op, double pre, double post) {
  Tensor t(dtype, std::move(shape), dtype == KOLO_FLOAT64 || dtype == KOLO_INT64 ? 8 : 4);
  kolo_handle_t h = 0;
  Result r =
      finish(kolo_allreduce_async(name, &t.t, nullptr, op, pre, post, 0, nullptr, nullptr, &h), h);
  return expectAgreedError(r, name, N - 1);
}

// Allreduce (sum) of `count` int32 under `name`; the sum checked. "" when right.
std::string sumOf(const char* name, int64_t count, int32_t set = 0, int setSize = -1,
                  int rankBase = -1) {
  Tensor t = ints({count}, R + 1);
  kolo_handle_t h = 0;
  Result r = finish(
      kolo_allreduce_async(name, &t.t, nullptr, KOLO_SUM, 1, 1, set, nullptr, nullptr, &h), h);
  if (r.code != KOLO_OK) return std::string(name) + ": " + describe(r);
  // In a set: the members' R + 1 summed; rankBase is that sum.
  const int64_t n = setSize < 0 ? N : setSize;
  const int64_t base = rankBase < 0 ? n * (n + 1) / 2 : rankBase;
  for (int64_t i = 0; i < count; ++i) {
    if (t.i32()[i] != n * (i % 97) + base) {
      return std::string(name) + ": element " + std::to_string(i) + " = " +
             std::to_string(t.i32()[i]) + ", expected " + std::to_string(n * (i % 97) + base);
    }
  }
  return "";
}

// A name completed (and cached) a few times, then submitted with another shape on the last
// rank: the mismatch must still be caught (every rank's op fails naming it), and the name then
// works again with an agreed shape, either shape.
std::string caseMismatchCached() {
  for (int i = 0; i < 3; ++i) {
    std::string e = sumOf("c.x", 16);
    if (!e.empty()) return "round " + std::to_string(i) + ": " + e;
  }
  Tensor t = ints({R == N - 1 ? 17 : 16}, R + 1);
  kolo_handle_t h = 0;
  Result r = finish(
      kolo_allreduce_async("c.x", &t.t, nullptr, KOLO_SUM, 1, 1, 0, nullptr, nullptr, &h), h);
  std::string e = expectAgreedError(r, "c.x", N - 1);
  if (!e.empty()) return "shape change after cache hits: " + e;
  e = sumOf("c.x", 16);
  if (!e.empty()) return "retry with the old shape: " + e;
  e = sumOf("c.x", 17);
  if (!e.empty()) return "retry with the new shape: " + e;
  for (int i = 0; i < 2; ++i) {  // and a cached broadcast whose root changes on one rank
    Tensor b = ints({8}, R * 10);
    r = finish(kolo_broadcast_async("c.b", &b.t, 0, 0, nullptr, nullptr, &h), h);
    if (r.code != KOLO_OK || b.i32()[0] != 0) return "broadcast c.b: " + describe(r);
  }
  Tensor b = ints({8}, R * 10);
  r = finish(kolo_broadcast_async("c.b", &b.t, R == N - 1 ? 1 : 0, 0, nullptr, nullptr, &h), h);
  e = expectAgreedError(r, "c.b", N - 1);
  if (!e.empty()) return "root change after cache hits: " + e;
  return sumOf("c.after", 64);
}

// Process sets: an op of a set submitted by a rank outside it fails at once; a mismatch inside
// a set names the member; a set's ops run with the global set's at once.
std::string caseSets() {
  int32_t pair[2] = {0, N - 1};
  int32_t id = -1;
  if (kolo_add_process_set(pair, 2, &id) != KOLO_OK) {
    return std::string("add {0, N-1}: ") + kolo_last_error();
  }
  const bool member = R == 0 || R == N - 1;
  kolo_handle_t h = 0;
  if (!member) {
    Tensor t = ints({4}, R);
    int rc = kolo_allreduce_async("s.out", &t.t, nullptr, KOLO_SUM, 1, 1, id, nullptr, nullptr, &h);
    if (rc != KOLO_ERR_INVALID_ARGUMENT) {
      if (rc == KOLO_OK) finish(rc, h, 1);
      return "an outsider's op in the set returned " + std::string(kolo_status_string(rc));
    }
    if (!namesRank(kolo_last_error(), R)) {
      return std::string("outsider error does not name the rank: ") + kolo_last_error();
    }
    gSeen = kolo_last_error();
  } else {
    Tensor t(R == 0 ? KOLO_FLOAT32 : KOLO_INT32, {4}, 4);
    Result r = finish(
        kolo_allreduce_async("s.dtype", &t.t, nullptr, KOLO_SUM, 1, 1, id, nullptr, nullptr, &h),
        h);
    std::string e = expectAgreedError(r, "s.dtype", N - 1);
    if (!e.empty()) return "dtype mismatch in the set: " + e;
    e = sumOf("s.ok", 32, id, 2, 1 + N);
    if (!e.empty()) return e;
  }
  std::string e = sumOf("s.global", 32);
  if (!e.empty()) return e;
  if (kolo_remove_process_set(id) != KOLO_OK) {
    return std::string("remove: ") + kolo_last_error();
  }
  return "";
}

// Only rank 0 removes a set (a collective call) while the others wait in an allreduce that
// rank 0 never submits: every rank must get an error (the stall shutdown), none may hang.
std::string caseRemovePartial() {
  int32_t pair[2] = {0, 1};
  int32_t id = -1;
  if (kolo_add_process_set(pair, 2, &id) != KOLO_OK) {
    return std::string("add: ") + kolo_last_error();
  }
  Result r;
  auto t0 = Clock::now();
  if (R == 0) {
    r.code = kolo_remove_process_set(id);
    r.msg = r.code == KOLO_OK ? "" : kolo_last_error();
  } else {
    Tensor t = ints({4}, R);
    kolo_handle_t h = 0;
    r = finish(kolo_allreduce_async("rp.x", &t.t, nullptr, KOLO_SUM, 1, 1, 0, nullptr, nullptr, &h),
               h, gBound / 2);
  }
  if (since(t0) > gBound / 2) return "waited " + std::to_string(since(t0)) + " s";
  std::string e =
      expectAgreedError(r, R == 0 ? "process_set" : "rp.x", R == 0 ? 1 : 0, {KOLO_ERR_STALLED});
  return e.empty() ? barrier() : e;
}

std::string caseMismatch(const std::string& c) {
  const bool dev = R == N - 1;
  std::string err;
  if (c == "mismatch-dtype") {
    err = mismatchAllreduce("m.dtype", dev ? KOLO_INT32 : KOLO_FLOAT32, {16}, KOLO_SUM, 1, 1);
  } else if (c == "mismatch-shape") {
    err = mismatchAllreduce("m.shape", KOLO_FLOAT32, {4, dev ? 5 : 4}, KOLO_SUM, 1, 1);
  } else if (c == "mismatch-op") {
    err = mismatchAllreduce("m.op", KOLO_FLOAT32, {16}, dev ? KOLO_MAX : KOLO_SUM, 1, 1);
  } else if (c == "mismatch-prescale") {
    err = mismatchAllreduce("m.pre", KOLO_FLOAT32, {16}, KOLO_SUM, dev ? 2.0 : 1.0, 1);
  } else if (c == "mismatch-postscale") {
    err = mismatchAllreduce("m.post", KOLO_FLOAT32, {16}, KOLO_SUM, 1, dev ? 0.5 : 1.0);
  } else if (c == "mismatch-root") {
    Tensor t = ints({8}, R);
    kolo_handle_t h = 0;
    Result r =
        finish(kolo_broadcast_async("m.root", &t.t, dev ? 1 : 0, 0, nullptr, nullptr, &h), h);
    err = expectAgreedError(r, "m.root", N - 1);
  } else if (c == "mismatch-allgather-dims" || c == "mismatch-allgather-dtype") {
    const bool dims = c == "mismatch-allgather-dims";
    Tensor t(dims || !dev ? KOLO_INT32 : KOLO_FLOAT32, {R + 1, dims && dev ? 3 : 2}, 4);
    kolo_handle_t h = 0;
    const char* name = dims ? "m.agdims" : "m.agdtype";
    Result r =
        finish(kolo_allgather_async(name, &t.t, nullptr, nullptr, 0, nullptr, nullptr, &h), h);
    err = expectAgreedError(r, name, N - 1);
  } else if (c == "mismatch-reducescatter") {
    Tensor t(KOLO_FLOAT32, {N * 2, dev ? 3 : 2}, 4);
    kolo_handle_t h = 0;
    Result r = finish(kolo_reducescatter_async("m.rs", &t.t, KOLO_SUM, 1, 1, nullptr, nullptr, 0,
                                               nullptr, nullptr, &h),
                      h);
    err = expectAgreedError(r, "m.rs", N - 1);
  } else if (c == "mismatch-alltoall-dims") {
    Tensor t(KOLO_FLOAT32, {N, dev ? 3 : 2}, 4);
    kolo_handle_t h = 0;
    Result r = finish(
        kolo_alltoall_async("m.a2a", &t.t, nullptr, 0, nullptr, nullptr, 0, nullptr, nullptr, &h),
        h);
    err = expectAgreedError(r, "m.a2a", N - 1);
  } else if (c == "mismatch-optype") {
    // The same name as an allreduce on most ranks and as an allgather on the last one.
    Tensor t(KOLO_FLOAT32, {4}, 4);
    kolo_handle_t h = 0;
    int rc = dev ? kolo_allgather_async("m.type", &t.t, nullptr, nullptr, 0, nullptr, nullptr, &h)
                 : kolo_allreduce_async("m.type", &t.t, nullptr, KOLO_SUM, 1, 1, 0, nullptr,
                                        nullptr, &h);
    err = expectAgreedError(finish(rc, h), "m.type", -1, {KOLO_ERR_MISMATCH, KOLO_ERR_STALLED});
  } else if (c == "mismatch-grouped-size") {
    const int n = dev ? 3 : 2;
    std::vector<Tensor> ts;
    for (int i = 0; i < n; ++i) ts.push_back(ints({8}, R));
    std::vector<kolo_tensor_t> in;
    for (auto& t : ts) in.push_back(t.t);
    kolo_handle_t h = 0;
    Result r = finish(kolo_grouped_allreduce_async("m.group", n, in.data(), nullptr, KOLO_SUM, 1, 1,
                                                   0, nullptr, nullptr, &h),
                      h);
    err = expectAgreedError(r, "m.group", -1);
  } else if (c == "mismatch-set-members") {
    // The last rank asks for {0, 1}, the others for {0, ..., N-1} minus the last: differing
    // lists of one collective call.
    std::vector<int32_t> members;
    if (dev) {
      members = {0, 1};
    } else {
      for (int i = 0; i + 1 < N; ++i) members.push_back(i);
    }
    if (N == 3 && !dev) members = {0, 2};
    int32_t id = -1;
    auto t0 = Clock::now();
    int rc = kolo_add_process_set(members.data(), static_cast<int32_t>(members.size()), &id);
    Result r;
    r.code = rc;
    r.msg = rc == KOLO_OK ? "created set " + std::to_string(id) : kolo_last_error();
    if (since(t0) > gBound) r.code = -1;
    err = expectAgreedError(r, "add_process_set", N - 1, {KOLO_ERR_MISMATCH});
  } else {
    return "unknown case";
  }
  if (!err.empty()) return err;
  return checkedAllreduce("after." + c);
}

// ---- ordering and stalls ------------------------------------------------------------------------

std::string caseSwappedOrder() {
  Tensor a = ints({32}, R + 1), b = ints({1000}, R + 1);
  kolo_handle_t ha = 0, hb = 0;
  auto submitA = [&] {
    return kolo_allreduce_async("order.a", &a.t, nullptr, KOLO_SUM, 1, 1, 0, nullptr, nullptr, &ha);
  };
  auto submitB = [&] {
    return kolo_allreduce_async("order.b", &b.t, nullptr, KOLO_SUM, 1, 1, 0, nullptr, nullptr, &hb);
  };
  int rc1, rc2;
  if (R == 0) {
    rc1 = submitA();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    rc2 = submitB();
  } else {
    rc2 = submitB();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    rc1 = submitA();
  }
  Result ra = finish(rc1, ha), rb = finish(rc2, hb);
  if (ra.code != KOLO_OK) return "a: " + describe(ra);
  if (rb.code != KOLO_OK) return "b: " + describe(rb);
  for (int i = 0; i < 32; ++i) {
    if (a.i32()[i] != N * (i % 97) + N * (N + 1) / 2) return "wrong sum in a";
  }
  for (int i = 0; i < 1000; ++i) {
    if (b.i32()[i] != N * (i % 97) + N * (N + 1) / 2) return "wrong sum in b";
  }
  return "";
}

std::string caseStallMissing() {
  if (R == N - 1) {
    // Never submits "lonely"; stays away past the others' stall shutdown.
    std::this_thread::sleep_for(std::chrono::duration<double>(gBound / 2));
    return barrier();
  }
  Tensor t = ints({8}, R);
  kolo_handle_t h = 0;
  Result r =
      finish(kolo_allreduce_async("lonely", &t.t, nullptr, KOLO_SUM, 1, 1, 0, nullptr, nullptr, &h),
             h, gBound / 2 - 1);
  std::string e = expectAgreedError(r, "lonely", N - 1, {KOLO_ERR_STALLED});
  return e.empty() ? barrier() : e;
}

std::string caseStallCrossed() {
  Tensor a = ints({8}, R), b = ints({8}, R);
  kolo_handle_t h = 0;
  const char* first = R == 0 ? "cross.a" : "cross.b";
  Tensor& t = R == 0 ? a : b;
  Result r =
      finish(kolo_allreduce_async(first, &t.t, nullptr, KOLO_SUM, 1, 1, 0, nullptr, nullptr, &h), h,
             gBound / 2);
  // Rank 0's "cross.a" waits for every other rank; theirs wait for rank 0.
  std::string e = expectAgreedError(r, first, R == 0 ? 1 : 0, {KOLO_ERR_STALLED});
  return e.empty() ? barrier() : e;
}

// ---- sizes -----------------------------------------------------------------------------------

std::string caseZeroSize() {
  kolo_handle_t h = 0;
  {  // allreduce of [0] and [3, 0]
    Tensor t(KOLO_FLOAT32, {0}, 4), u(KOLO_FLOAT32, {3, 0}, 4);
    Result r = finish(
        kolo_allreduce_async("z.ar", &t.t, nullptr, KOLO_SUM, 1, 1, 0, nullptr, nullptr, &h), h);
    if (r.code != KOLO_OK) return "allreduce [0]: " + describe(r);
    r = finish(
        kolo_allreduce_async("z.ar2", &u.t, nullptr, KOLO_AVERAGE, 1, 1, 0, nullptr, nullptr, &h),
        h);
    if (r.code != KOLO_OK) return "allreduce [3, 0]: " + describe(r);
  }
  {  // allgather: rank 0 gives 0 rows, others R rows; and everyone 0 rows
    Tensor t = ints({R, 3}, 10 * R);
    Result r =
        finish(kolo_allgather_async("z.ag", &t.t, nullptr, nullptr, 0, nullptr, nullptr, &h), h);
    if (r.code != KOLO_OK) return "allgather: " + describe(r);
    Tensor z(KOLO_INT32, {0, 3}, 4);
    kolo_handle_t h2 = 0;
    int rc = kolo_allgather_async("z.ag0", &z.t, nullptr, nullptr, 0, nullptr, nullptr, &h2);
    if (rc != KOLO_OK) return "allgather all-empty submit: " + std::string(kolo_last_error());
    rc = kolo_handle_wait(h2, gBound);
    if (rc != KOLO_OK) return "allgather all-empty: " + std::string(kolo_last_error());
    void* data = nullptr;
    int32_t nd = 0;
    int64_t shape[KOLO_MAX_DIMS] = {};
    if (kolo_handle_output(h2, &data, &nd, shape) != KOLO_OK) {
      return "allgather all-empty output: " + std::string(kolo_last_error());
    }
    kolo_handle_release(h2);
    if (nd != 2 || shape[0] != 0 || shape[1] != 3) return "allgather all-empty: wrong shape";
  }
  {  // broadcast [0]
    Tensor t(KOLO_INT64, {0}, 8);
    Result r = finish(kolo_broadcast_async("z.bc", &t.t, N - 1, 0, nullptr, nullptr, &h), h);
    if (r.code != KOLO_OK) return "broadcast [0]: " + describe(r);
  }
  {  // alltoall: every rank sends 0 rows to everyone; then rank r sends r rows to rank 0 only
    Tensor t(KOLO_FLOAT32, {0, 4}, 4);
    std::vector<int32_t> splits(N, 0);
    Result r = finish(kolo_alltoall_async("z.a2a", &t.t, splits.data(), N, nullptr, nullptr, 0,
                                          nullptr, nullptr, &h),
                      h);
    if (r.code != KOLO_OK) return "alltoall empty: " + describe(r);
    Tensor u = ints({R, 4}, R);
    splits.assign(N, 0);
    splits[0] = R;
    kolo_handle_t h2 = 0;
    int rc = kolo_alltoall_async("z.a2a2", &u.t, splits.data(), N, nullptr, nullptr, 0, nullptr,
                                 nullptr, &h2);
    if (rc != KOLO_OK || kolo_handle_wait(h2, gBound) != KOLO_OK) {
      return "alltoall sparse: " + std::string(kolo_last_error());
    }
    std::vector<int32_t> got(N, -7);
    kolo_handle_received_splits(h2, got.data(), N);
    for (int i = 0; i < N; ++i) {
      if (got[i] != (R == 0 ? i : 0)) return "alltoall sparse: wrong received splits";
    }
    kolo_handle_release(h2);
  }
  {  // reducescatter with fewer rows than ranks: the last ranks get 0 rows
    Tensor t = ints({1, 5}, R);
    kolo_handle_t h2 = 0;
    int rc = kolo_reducescatter_async("z.rs", &t.t, KOLO_SUM, 1, 1, nullptr, nullptr, 0, nullptr,
                                      nullptr, &h2);
    if (rc != KOLO_OK || kolo_handle_wait(h2, gBound) != KOLO_OK) {
      return "reducescatter 1 row: " + std::string(kolo_last_error());
    }
    void* data = nullptr;
    int32_t nd = 0;
    int64_t shape[KOLO_MAX_DIMS] = {};
    kolo_handle_output(h2, &data, &nd, shape);
    if (nd != 2 || shape[0] != (R == 0 ? 1 : 0) || shape[1] != 5) {
      return "reducescatter 1 row: rank got " + std::to_string(shape[0]) + " rows";
    }
    if (R == 0) {
      for (int i = 0; i < 5; ++i) {
        if (static_cast<int32_t*>(data)[i] != N * i + N * (N - 1) / 2) {
          return "reducescatter 1 row: wrong sum";
        }
      }
    }
    kolo_handle_release(h2);
    Tensor z(KOLO_FLOAT32, {0, 2}, 4);
    Result r = finish(kolo_reducescatter_async("z.rs0", &z.t, KOLO_SUM, 1, 1, nullptr, nullptr, 0,
                                               nullptr, nullptr, &h),
                      h);
    if (r.code != KOLO_OK) return "reducescatter [0, 2]: " + describe(r);
  }
  {  // grouped allreduce of empty and non-empty members
    Tensor a(KOLO_FLOAT32, {0}, 4);
    Tensor b = ints({4}, R + 1);
    Tensor c(KOLO_INT32, {2, 0}, 4);
    kolo_tensor_t in[3] = {a.t, b.t, c.t};
    in[1].dtype = KOLO_INT32;
    in[0].dtype = KOLO_FLOAT32;
    Result r = finish(kolo_grouped_allreduce_async("z.grp", 3, in, nullptr, KOLO_SUM, 1, 1, 0,
                                                   nullptr, nullptr, &h),
                      h);
    if (r.code != KOLO_OK) return "grouped with empty members: " + describe(r);
    for (int i = 0; i < 4; ++i) {
      if (b.i32()[i] != N * i + N * (N + 1) / 2) return "grouped: wrong sum";
    }
  }
  return checkedAllreduce("after.zero");
}

std::string caseHuge() {
  // int8 sum of ones: exact while N < 128. More than 2^31 bytes and elements.
  const int64_t n = (int64_t{1} << 31) + 1000;
  std::vector<int8_t> v(static_cast<size_t>(n), 1);
  int64_t shape[1] = {n};
  kolo_tensor_t t = {v.data(), KOLO_INT8, 1, shape, KOLO_CPU_DEVICE, nullptr};
  kolo_handle_t h = 0;
  Result r =
      finish(kolo_allreduce_async("huge.ar", &t, nullptr, KOLO_SUM, 1, 1, 0, nullptr, nullptr, &h),
             h, gBound * 4);
  if (r.code != KOLO_OK) return "allreduce of 2^31+1000 int8: " + describe(r);
  for (int64_t i : {int64_t{0}, n / 3, (int64_t{1} << 31) - 1, int64_t{1} << 31, n - 1}) {
    if (v[static_cast<size_t>(i)] != N) {
      return "allreduce of 2^31+1000 int8: element " + std::to_string(i) + " = " +
             std::to_string(v[static_cast<size_t>(i)]);
    }
  }
  v.clear();
  v.shrink_to_fit();
  // Allgather: each rank (2^31 / N + 1000) bytes, so the output passes 2^31.
  const int64_t m = (int64_t{1} << 31) / N + 1000;
  std::vector<int8_t> g(static_cast<size_t>(m), static_cast<int8_t>(R + 1));
  int64_t gs[1] = {m};
  kolo_tensor_t gt = {g.data(), KOLO_INT8, 1, gs, KOLO_CPU_DEVICE, nullptr};
  int rc = kolo_allgather_async("huge.ag", &gt, nullptr, nullptr, 0, nullptr, nullptr, &h);
  if (rc != KOLO_OK || kolo_handle_wait(h, gBound * 4) != KOLO_OK) {
    return "allgather of " + std::to_string(m * N) + " bytes: " + kolo_last_error();
  }
  void* data = nullptr;
  int32_t nd = 0;
  int64_t os[KOLO_MAX_DIMS] = {};
  kolo_handle_output(h, &data, &nd, os);
  if (nd != 1 || os[0] != m * N) return "allgather: wrong output shape";
  const int8_t* out = static_cast<const int8_t*>(data);
  for (int k = 0; k < N; ++k) {
    for (int64_t i : {int64_t{0}, m / 2, m - 1}) {
      if (out[k * m + i] != k + 1) {
        return "allgather: block " + std::to_string(k) + " element " + std::to_string(i) + " = " +
               std::to_string(out[k * m + i]);
      }
    }
  }
  kolo_handle_release(h);
  return "";
}

// ---- concurrency -----------------------------------------------------------------------------

std::string caseManyInflight() {
  const int count = 2000;
  std::vector<Tensor> ts;
  ts.reserve(count);
  std::vector<kolo_handle_t> hs(count, 0);
  for (int i = 0; i < count; ++i) {
    ts.push_back(ints({1 + i % 37}, R + i));
    // Ranks submit in different orders: rank r starts at a rotated index.
  }
  for (int k = 0; k < count; ++k) {
    int i = (k + R * 700) % count;
    std::string name = "many." + std::to_string(i);
    int rc = kolo_allreduce_async(name.c_str(), &ts[i].t, nullptr, KOLO_SUM, 1, 1, 0, nullptr,
                                  nullptr, &hs[i]);
    if (rc != KOLO_OK) return "submit " + name + ": " + kolo_last_error();
  }
  for (int i = 0; i < count; ++i) {
    Result r = finish(KOLO_OK, hs[i]);
    if (r.code != KOLO_OK) return "many." + std::to_string(i) + ": " + describe(r);
    for (int64_t j = 0; j < ts[i].elements(); ++j) {
      int64_t want = static_cast<int64_t>(N) * (j % 97) + N * (N - 1) / 2 + int64_t{N} * i;
      if (ts[i].i32()[j] != want) return "many." + std::to_string(i) + ": wrong sum";
    }
  }
  return "";
}

std::string caseThreads() {
  const int threads = 8, per = 150;
  std::vector<std::string> errors(threads);
  std::vector<std::thread> pool;
  for (int th = 0; th < threads; ++th) {
    pool.emplace_back([th, &errors] {
      for (int i = 0; i < per && errors[th].empty(); ++i) {
        const std::string name = "thr." + std::to_string(th) + "." + std::to_string(i);
        kolo_handle_t h = 0;
        const int kind = (th + i) % 3;
        if (kind == 0) {
          Tensor t = ints({16 + i}, R + th);
          Result r = finish(kolo_allreduce_async(name.c_str(), &t.t, nullptr, KOLO_SUM, 1, 1, 0,
                                                 nullptr, nullptr, &h),
                            h);
          if (r.code != KOLO_OK) errors[th] = name + ": " + describe(r);
          int64_t want0 = static_cast<int64_t>(N) * (N - 1) / 2 + int64_t{N} * th;
          if (r.code == KOLO_OK && t.i32()[0] != want0) errors[th] = name + ": wrong sum";
        } else if (kind == 1) {
          Tensor t = ints({R + 1, 2}, 100 * R);
          Result r = finish(
              kolo_allgather_async(name.c_str(), &t.t, nullptr, nullptr, 0, nullptr, nullptr, &h),
              h);
          if (r.code != KOLO_OK) errors[th] = name + ": " + describe(r);
        } else {
          Tensor t = ints({9}, R);
          const int root = (th + i) % N;
          Result r =
              finish(kolo_broadcast_async(name.c_str(), &t.t, root, 0, nullptr, nullptr, &h), h);
          if (r.code != KOLO_OK) errors[th] = name + ": " + describe(r);
          if (r.code == KOLO_OK && t.i32()[3] != root + 3) errors[th] = name + ": wrong value";
        }
      }
    });
  }
  for (auto& t : pool) t.join();
  for (auto& e : errors) {
    if (!e.empty()) return e;
  }
  return checkedAllreduce("after.threads");
}

std::string caseShutdownInflight() {
  const int count = 200;
  if (R == N - 1) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    int rc = kolo_shutdown();
    return rc == KOLO_OK ? "" : std::string("shutdown: ") + kolo_last_error();
  }
  std::vector<Tensor> ts;
  ts.reserve(count);
  std::vector<kolo_handle_t> hs(count, 0);
  for (int i = 0; i < count; ++i) {
    ts.push_back(ints({4}, R));
    std::string name = "sd." + std::to_string(i);
    int rc = kolo_allreduce_async(name.c_str(), &ts[i].t, nullptr, KOLO_SUM, 1, 1, 0, nullptr,
                                  nullptr, &hs[i]);
    if (rc != KOLO_OK) return "submit " + name + ": " + kolo_last_error();
  }
  auto t0 = Clock::now();
  for (int i = 0; i < count; ++i) {
    Result r = finish(KOLO_OK, hs[i]);
    std::string e = expectAgreedError(r, "", N - 1, {KOLO_ERR_SHUTDOWN, KOLO_ERR_ABORTED});
    if (!e.empty()) return "sd." + std::to_string(i) + ": " + e;
  }
  if (since(t0) > 5) return "pending ops took " + std::to_string(since(t0)) + " s to fail";
  Tensor t = ints({4}, R);
  kolo_handle_t h = 0;
  Result r = finish(
      kolo_allreduce_async("sd.after", &t.t, nullptr, KOLO_SUM, 1, 1, 0, nullptr, nullptr, &h), h);
  return expectAgreedError(r, "", N - 1, {KOLO_ERR_SHUTDOWN, KOLO_ERR_ABORTED});
}

std::string runCase(const std::string& c) {
  if (c.rfind("mismatch-", 0) == 0) return caseMismatch(c);
  if (c == "cached-mismatch") return caseMismatchCached();
  if (c == "sets") return caseSets();
  if (c == "remove-partial") return caseRemovePartial();
  if (c == "swapped-order") return caseSwappedOrder();
  if (c == "stall-missing") return caseStallMissing();
  if (c == "stall-crossed") return caseStallCrossed();
  if (c == "zero-size") return caseZeroSize();
  if (c == "huge") return caseHuge();
  if (c == "many-inflight") return caseManyInflight();
  if (c == "threads") return caseThreads();
  if (c == "shutdown-inflight") return caseShutdownInflight();
  return "unknown case '" + c + "'";
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> cases;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--cases") {
      std::stringstream ss(value());
      for (std::string c; std::getline(ss, c, ',');) {
        if (!c.empty()) cases.push_back(c);
      }
    } else if (a == "--bound") {
      gBound = std::atof(value().c_str());
    } else if (a == "--tag") {
      value();
    } else {
      std::fprintf(stderr, "probe_worker: unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  if (cases.empty()) {
    std::fprintf(stderr, "probe_worker: --cases is required\n");
    return 2;
  }
  if (kolo_init() != KOLO_OK) {
    std::printf("PROBE case=init rank=-1 result=FAIL secs=0 detail=%s\n",
                oneLine(kolo_last_error()).c_str());
    return 1;
  }
  R = kolo_rank();
  N = kolo_size();
  bool ok = true;
  for (const std::string& c : cases) {
    auto t0 = Clock::now();
    gSeen.clear();
    std::string err = runCase(c);
    std::printf("PROBE case=%s rank=%d result=%s secs=%.3f detail=%s\n", c.c_str(), R,
                err.empty() ? "PASS" : "FAIL", since(t0),
                oneLine(err.empty() ? gSeen : err).c_str());
    std::fflush(stdout);
    ok &= err.empty();
  }
  kolo_shutdown();
  return ok ? 0 : 1;
}
