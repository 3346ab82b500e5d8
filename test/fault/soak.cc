// SPDX-License-Identifier: Apache-2.0
// kolo_fault_soak: T threads per rank submit random collectives (soak_ops.h) through the C API
// for a bounded number of ops, each thread keeping a window of ops in flight, and verify every
// result: integers and copies bitwise, AVERAGE within a rounding tolerance. Run it as N ranks
// (kolorun -np 3 kolo_fault_soak ...).
//
//   kolo_fault_soak [--threads T] [--ops-per-thread K] [--window W] [--seed S] [--only KIND]
//                   [--wait SECONDS]
//
// Two process sets are created at start (see soak::setMembers); a thread skips the ops of a
// set its rank is not in. Each rank prints, and exits non-zero on any failure:
//   SOAK rank=R ops=N verified=N failed=F seconds=S ops_per_s=X rss_start_kib=A
//     rss_warm_kib=B rss_end_kib=C heap_warm_kib=D heap_end_kib=E
//   SOAK_RSS rank=R mib_by_tenth=...
// The warm values are taken, with nothing in flight, after the largest op of each kind and the
// first tenth of every thread's ops (grow-only buffers, caches and malloc arenas have grown),
// the end values after the rest. The run fails when the heap in use grew more than 16 MiB
// after the warm-up, or the RSS more than 32 MiB. Blocks of 256 KiB or more are mmapped (see
// main; KOLO_SOAK_DEFAULT_MALLOC=1 keeps glibc's default, whose RSS keeps arena high-waters).
#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kolo.h"
#include "soak_ops.h"

namespace {

using soak::Kind;
using soak::Spec;
using Clock = std::chrono::steady_clock;

long rssKib() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  long pages = 0, resident = 0;
  if (f != nullptr) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

// Heap bytes in use (all malloc arenas, mmapped blocks included), in KiB.
long heapKib() {
  struct mallinfo2 m = mallinfo2();
  return static_cast<long>((m.uordblks + m.hblkhd) / 1024);
}

struct Context {
  int rank = 0, size = 1;
  int32_t setIds[3] = {0, -1, -1};
  uint64_t seed = 1;
  double waitSeconds = 120;  // --wait: longest wait for one op
  std::string only;          // --only KIND: skip every other kind (for bisecting a failure)
  std::atomic<int64_t> verified{0}, failed{0};
  std::mutex printMu;
};

// One submitted op: its spec, its tensors (kept alive until done) and its handle.
struct InFlight {
  Spec spec;
  std::vector<int> members;
  int me = 0;  // this rank's index in the set
  std::vector<std::vector<uint8_t>> buffers;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<kolo_tensor_t> tensors;
  kolo_handle_t handle = 0;
};

void fail(Context& ctx, const InFlight& f, const std::string& what) {
  ctx.failed++;
  std::lock_guard<std::mutex> lock(ctx.printMu);
  std::fprintf(stderr, "soak rank %d: %s '%s' (dtype %d, op %d, set %d): %s\n", ctx.rank,
               soak::kindName(f.spec.kind), f.spec.name.c_str(), static_cast<int>(f.spec.dtype),
               static_cast<int>(f.spec.op), f.spec.set, what.c_str());
}

// Fills a rows x cols tensor of `rank` with the op's values, starting at element `first`.
std::vector<uint8_t> fill(const Spec& s, int rank, int64_t count, int64_t first, int setSize) {
  const size_t e = soak::dtypeSize(s.dtype);
  std::vector<uint8_t> b(static_cast<size_t>(count) * e);
  for (int64_t i = 0; i < count; ++i) {
    soak::encode(s.dtype, soak::valueOf(s, rank, first + i, setSize), b.data() + i * e);
  }
  return b;
}

void addTensor(InFlight& f, std::vector<uint8_t> data, std::vector<int64_t> shape) {
  f.buffers.push_back(std::move(data));
  f.shapes.push_back(std::move(shape));
}

void finishTensors(InFlight& f) {
  f.tensors.clear();
  for (size_t i = 0; i < f.buffers.size(); ++i) {
    kolo_tensor_t t = {f.buffers[i].empty() ? nullptr : f.buffers[i].data(),
                       f.spec.dtype,
                       static_cast<int32_t>(f.shapes[i].size()),
                       f.shapes[i].data(),
                       KOLO_CPU_DEVICE,
                       nullptr};
    f.tensors.push_back(t);
  }
}

// The reduction of element i over the set, as the runtime defines it.
double reference(const Spec& s, const std::vector<int>& members, int64_t i) {
  const int n = static_cast<int>(members.size());
  double acc = 0;
  for (size_t k = 0; k < members.size(); ++k) {
    double v = soak::valueOf(s, members[k], i, n) * s.prescale;
    if (k == 0) {
      acc = v;
    } else if (s.op == KOLO_SUM || s.op == KOLO_AVERAGE) {
      acc += v;
    } else if (s.op == KOLO_MIN) {
      acc = std::min(acc, v);
    } else if (s.op == KOLO_MAX) {
      acc = std::max(acc, v);
    } else {
      acc *= v;
    }
  }
  return acc * s.postscale / (s.op == KOLO_AVERAGE ? n : 1);
}

bool close(const Spec& s, double got, double want) {
  if (s.op != KOLO_AVERAGE) return got == want;  // every other result is exact
  double tol = s.dtype == KOLO_FLOAT64   ? 1e-12
               : s.dtype == KOLO_FLOAT32 ? 1e-6
               : s.dtype == KOLO_FLOAT16 ? 1e-3
                                         : 1e-2;
  return std::fabs(got - want) <= tol * std::max(1.0, std::fabs(want));
}

// Checks `count` reduced elements at `got` against the reference from element `first`.
bool checkReduced(Context& ctx, const InFlight& f, const uint8_t* got, int64_t count,
                  int64_t first) {
  const size_t e = soak::dtypeSize(f.spec.dtype);
  for (int64_t i = 0; i < count; ++i) {
    double want = reference(f.spec, f.members, first + i);
    std::vector<uint8_t> enc(e);
    soak::encode(f.spec.dtype, want, enc.data());
    double wantStored = soak::decode(f.spec.dtype, enc.data());
    double g = soak::decode(f.spec.dtype, got + i * e);
    if (!close(f.spec, g, wantStored)) {
      fail(ctx, f,
           "element " + std::to_string(first + i) + " is " + std::to_string(g) + ", expected " +
               std::to_string(wantStored));
      return false;
    }
  }
  return true;
}

int submit(Context& ctx, InFlight& f) {
  const Spec& s = f.spec;
  const int n = static_cast<int>(f.members.size());
  const int32_t set = ctx.setIds[s.set];
  const int64_t elems = s.rows * s.cols;
  switch (s.kind) {
    case Kind::kAllreduce:
      addTensor(f, fill(s, ctx.rank, elems, 0, n), {s.rows, s.cols});
      finishTensors(f);
      return kolo_allreduce_async(s.name.c_str(), &f.tensors[0], nullptr, s.op, s.prescale,
                                  s.postscale, set, nullptr, nullptr, &f.handle);
    case Kind::kGrouped:
      for (int g = 0; g < s.groupN; ++g) {
        addTensor(f, fill(s, ctx.rank, elems, g * elems, n), {s.rows, s.cols});
      }
      finishTensors(f);
      return kolo_grouped_allreduce_async(s.name.c_str(), s.groupN, f.tensors.data(), nullptr, s.op,
                                          s.prescale, s.postscale, set, nullptr, nullptr,
                                          &f.handle);
    case Kind::kAllgather: {
      int64_t rows = soak::gatherRows(s, ctx.rank);
      addTensor(f, fill(s, ctx.rank, rows * s.cols, 0, n), {rows, s.cols});
      finishTensors(f);
      return kolo_allgather_async(s.name.c_str(), &f.tensors[0], nullptr, nullptr, set, nullptr,
                                  nullptr, &f.handle);
    }
    case Kind::kBroadcast:
      addTensor(f, fill(s, ctx.rank, elems, 0, n), {s.rows, s.cols});
      finishTensors(f);
      return kolo_broadcast_async(s.name.c_str(), &f.tensors[0], s.root % n, set, nullptr, nullptr,
                                  &f.handle);
    case Kind::kAlltoall: {
      std::vector<int32_t> splits(n);
      int64_t rows = 0;
      for (int d = 0; d < n; ++d)
        rows += splits[d] = static_cast<int32_t>(soak::splitRows(s, f.me, d));
      addTensor(f, fill(s, ctx.rank, rows * s.cols, 0, n), {rows, s.cols});
      finishTensors(f);
      return kolo_alltoall_async(s.name.c_str(), &f.tensors[0], splits.data(), n, nullptr, nullptr,
                                 set, nullptr, nullptr, &f.handle);
    }
    case Kind::kReducescatter:
      addTensor(f, fill(s, ctx.rank, elems, 0, n), {s.rows, s.cols});
      finishTensors(f);
      return kolo_reducescatter_async(s.name.c_str(), &f.tensors[0], s.op, s.prescale, s.postscale,
                                      nullptr, nullptr, set, nullptr, nullptr, &f.handle);
  }
  return KOLO_ERR_INTERNAL;
}

// Compares an owned output with the bytes every member would have sent.
bool checkOutput(Context& ctx, const InFlight& f, const std::vector<uint8_t>& want) {
  void* data = nullptr;
  int32_t ndim = 0;
  int64_t shape[KOLO_MAX_DIMS] = {0};
  if (kolo_handle_output(f.handle, &data, &ndim, shape) != KOLO_OK) {
    fail(ctx, f, std::string("kolo_handle_output: ") + kolo_last_error());
    return false;
  }
  const int64_t rows = static_cast<int64_t>(want.size() / soak::dtypeSize(f.spec.dtype)) /
                       std::max<int64_t>(1, f.spec.cols);
  if (ndim != 2 || shape[0] != rows || shape[1] != f.spec.cols ||
      (!want.empty() && std::memcmp(data, want.data(), want.size()) != 0)) {
    fail(ctx, f,
         "output differs (shape [" + std::to_string(shape[0]) + ", " + std::to_string(shape[1]) +
             "], expected " + std::to_string(rows) + " rows)");
    return false;
  }
  return true;
}

bool verify(Context& ctx, InFlight& f) {
  const Spec& s = f.spec;
  const int n = static_cast<int>(f.members.size());
  const int64_t elems = s.rows * s.cols;
  switch (s.kind) {
    case Kind::kAllreduce:
      return checkReduced(ctx, f, f.buffers[0].data(), elems, 0);
    case Kind::kGrouped:
      for (int g = 0; g < s.groupN; ++g) {
        if (!checkReduced(ctx, f, f.buffers[g].data(), elems, g * elems)) return false;
      }
      return true;
    case Kind::kAllgather: {
      std::vector<uint8_t> want;
      for (int r : f.members) {
        auto part = fill(s, r, soak::gatherRows(s, r) * s.cols, 0, n);
        want.insert(want.end(), part.begin(), part.end());
      }
      return checkOutput(ctx, f, want);
    }
    case Kind::kBroadcast: {
      auto want = fill(s, f.members[s.root % n], elems, 0, n);
      if (want != f.buffers[0]) {
        fail(ctx, f, "broadcast result differs from the root's tensor");
        return false;
      }
      return true;
    }
    case Kind::kAlltoall: {
      std::vector<uint8_t> want;
      std::vector<int32_t> got(n, -1);
      const size_t row = soak::dtypeSize(s.dtype) * static_cast<size_t>(s.cols);
      for (int src = 0; src < n; ++src) {
        int64_t before = 0;
        for (int d = 0; d < f.me; ++d) before += soak::splitRows(s, src, d);
        int64_t total = before;
        for (int d = f.me; d < n; ++d) total += soak::splitRows(s, src, d);
        auto all = fill(s, f.members[src], total * s.cols, 0, n);
        want.insert(want.end(), all.begin() + before * row,
                    all.begin() + (before + soak::splitRows(s, src, f.me)) * row);
      }
      if (kolo_handle_received_splits(f.handle, got.data(), n) != KOLO_OK) {
        fail(ctx, f, std::string("received_splits: ") + kolo_last_error());
        return false;
      }
      for (int src = 0; src < n; ++src) {
        if (got[src] != soak::splitRows(s, src, f.me)) {
          fail(ctx, f,
               "received split from " + std::to_string(src) + " is " + std::to_string(got[src]));
          return false;
        }
      }
      return checkOutput(ctx, f, want);
    }
    case Kind::kReducescatter: {
      int64_t offset = 0;
      for (int k = 0; k < f.me; ++k) offset += s.rows / n + (k < s.rows % n ? 1 : 0);
      int64_t mine = s.rows / n + (f.me < s.rows % n ? 1 : 0);
      void* data = nullptr;
      int32_t ndim = 0;
      int64_t shape[KOLO_MAX_DIMS] = {0};
      if (kolo_handle_output(f.handle, &data, &ndim, shape) != KOLO_OK || ndim != 2 ||
          shape[0] != mine || shape[1] != s.cols) {
        fail(ctx, f, "reducescatter output has the wrong shape");
        return false;
      }
      return checkReduced(ctx, f, static_cast<const uint8_t*>(data), mine * s.cols,
                          offset * s.cols);
    }
  }
  return false;
}

// Waits for a submitted op (bounded), verifies it and releases its handle. Returns false when
// the op is still running: its buffers must then stay alive (the runtime may still write them).
bool complete(Context& ctx, InFlight& f) {
  int rc = kolo_handle_wait(f.handle, ctx.waitSeconds);
  int st = 0;
  if (rc == KOLO_ERR_TIMEOUT && kolo_handle_status(f.handle, &st, nullptr) == KOLO_OK && st == -1) {
    fail(ctx, f, "still running after " + std::to_string(ctx.waitSeconds) + " s");
    return false;
  }
  if (rc != KOLO_OK) {
    fail(ctx, f, std::string(kolo_status_string(rc)) + ": " + kolo_last_error());
  } else if (verify(ctx, f)) {
    ctx.verified++;
  }
  kolo_handle_release(f.handle);
  return true;
}

void runThread(Context& ctx, int thread, int64_t from, int64_t to, int window,
               const std::function<void(int64_t)>& progress) {
  std::deque<std::unique_ptr<InFlight>> inflight;
  for (int64_t i = from; i < to; ++i) {
    auto f = std::make_unique<InFlight>();
    f->spec = soak::makeSpec(ctx.seed, thread, i);
    f->members = soak::setMembers(f->spec.set, ctx.size);
    auto it = std::find(f->members.begin(), f->members.end(), ctx.rank);
    if (!ctx.only.empty() && ctx.only != soak::kindName(f->spec.kind)) it = f->members.end();
    if (it != f->members.end()) {
      f->me = static_cast<int>(it - f->members.begin());
      int rc = submit(ctx, *f);
      if (rc != KOLO_OK) {
        fail(ctx, *f, std::string("submit: ") + kolo_last_error());
      } else {
        inflight.push_back(std::move(f));
      }
    }
    while (static_cast<int>(inflight.size()) >= window) {
      if (!complete(ctx, *inflight.front())) inflight.front().release();  // kept alive
      inflight.pop_front();
    }
    progress(i);
  }
  for (auto& f : inflight) {
    if (!complete(ctx, *f)) f.release();
  }
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 4, window = 8;
  int64_t opsPerThread = 1000;
  Context ctx;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--threads")
      threads = std::atoi(argv[i + 1]);
    else if (a == "--ops-per-thread")
      opsPerThread = std::atoll(argv[i + 1]);
    else if (a == "--window")
      window = std::atoi(argv[i + 1]);
    else if (a == "--seed")
      ctx.seed = std::strtoull(argv[i + 1], nullptr, 10);
    else if (a == "--only")
      ctx.only = argv[i + 1];
    else if (a == "--wait")
      ctx.waitSeconds = std::atof(argv[i + 1]);
    else {
      std::fprintf(stderr, "kolo_fault_soak: unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  // Large blocks (tensors, outputs, staging) straight from mmap and back to the system when
  // freed: glibc's default raises its mmap threshold after such frees and then serves them
  // from per-thread arenas, where the RSS keeps the high-water mark of 4 threads' windows.
  // With a fixed threshold the RSS follows what is really in use.
  if (std::getenv("KOLO_SOAK_DEFAULT_MALLOC") == nullptr) mallopt(M_MMAP_THRESHOLD, 256 * 1024);
  const long rssStart = rssKib();
  if (kolo_init() != KOLO_OK) {
    std::fprintf(stderr, "kolo_init: %s\n", kolo_last_error());
    return 1;
  }
  ctx.rank = kolo_rank();
  ctx.size = kolo_size();
  for (int set = 1; set <= 2; ++set) {
    auto m = soak::setMembers(set, ctx.size);
    std::vector<int32_t> ranks(m.begin(), m.end());
    if (kolo_add_process_set(ranks.data(), static_cast<int32_t>(ranks.size()), &ctx.setIds[set]) !=
        KOLO_OK) {
      std::fprintf(stderr, "kolo_add_process_set: %s\n", kolo_last_error());
      return 1;
    }
  }
  // Phase 1 (the first tenth of every thread's ops) grows buffers, caches and malloc arenas;
  // memory is then measured while nothing is in flight, and again after phase 2.
  const int64_t warmOps = std::max<int64_t>(1, opsPerThread / 10);
  std::vector<long> trace;  // RSS (MiB) after each further tenth of thread 0's ops
  auto runPhase = [&](int64_t from, int64_t to) {
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        runThread(ctx, t, from, to, window, [&](int64_t i) {
          if (t == 0 && (i + 1) % warmOps == 0) {
            std::lock_guard<std::mutex> lock(ctx.printMu);
            trace.push_back(rssKib() / 1024);
          }
        });
      });
    }
    for (auto& th : pool) th.join();
  };
  auto start = Clock::now();
  for (int k = 0; k <= static_cast<int>(Kind::kReducescatter); ++k) {
    InFlight f;
    f.spec = soak::largestSpec(ctx.seed, static_cast<Kind>(k));
    f.members = soak::setMembers(0, ctx.size);
    f.me = ctx.rank;
    int src = submit(ctx, f);
    if (src != KOLO_OK) {
      fail(ctx, f, std::string("submit: ") + kolo_last_error());
      continue;
    }
    if (!complete(ctx, f)) std::_Exit(1);  // f's buffers may still be written: leave at once
  }
  runPhase(0, warmOps);
  const long rssWarm = rssKib();
  const long heapWarm = heapKib();
  runPhase(warmOps, opsPerThread);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const long rssEnd = rssKib();
  const long heapEnd = heapKib();
  // One rank's shutdown ends the job for every rank (pending ops fail with the cause, as in
  // Horovod): a rank whose own ops are done must wait here for the others' (in sets it is not
  // in) before it shuts down.
  kolo_handle_t done = 0;
  if (kolo_barrier_async(0, nullptr, nullptr, &done) != KOLO_OK ||
      kolo_handle_wait(done, 120) != KOLO_OK) {
    std::fprintf(stderr, "soak rank %d: final barrier: %s\n", ctx.rank, kolo_last_error());
    ctx.failed++;
  }
  if (done != 0) kolo_handle_release(done);
  int rc = kolo_shutdown();
  const int64_t verified = ctx.verified.load(), failed = ctx.failed.load();
  std::printf(
      "SOAK rank=%d ops=%lld verified=%lld failed=%lld seconds=%.2f ops_per_s=%.0f "
      "rss_start_kib=%ld rss_warm_kib=%ld rss_end_kib=%ld heap_warm_kib=%ld "
      "heap_end_kib=%ld\n",
      ctx.rank, static_cast<long long>(verified + failed), static_cast<long long>(verified),
      static_cast<long long>(failed), seconds, static_cast<double>(verified) / seconds, rssStart,
      rssWarm, rssEnd, heapWarm, heapEnd);
  std::string tenths;
  for (long mib : trace) tenths += (tenths.empty() ? "" : ",") + std::to_string(mib);
  std::printf("SOAK_RSS rank=%d mib_by_tenth=%s\n", ctx.rank, tenths.c_str());
  std::fflush(stdout);
  if (rc != KOLO_OK) {
    std::fprintf(stderr, "kolo_shutdown: %s\n", kolo_last_error());
    return 1;
  }
  // Flat: neither the heap in use while idle (a leak) nor the RSS may grow after the warm-up.
  if (heapEnd - heapWarm > 16 * 1024 || rssEnd - rssWarm > 32 * 1024) {
    std::fprintf(stderr,
                 "soak rank %d: memory grew after the warm-up: heap %+ld KiB, RSS %+ld KiB\n",
                 ctx.rank, heapEnd - heapWarm, rssEnd - rssWarm);
    return 1;
  }
  return failed == 0 && verified > 0 ? 0 : 1;
}
