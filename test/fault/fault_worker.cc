// SPDX-License-Identifier: Apache-2.0
// fault_worker: one rank of a fault-injection job, driven by test_faults.py (or kolorun/mpirun).
// It uses only the public C API (kolo.h), like a user program would.
//
//   fault_worker --mode MODE [--victim V] [--mb N] [--kill-at K] [--delay-ms D]
//                [--pause-ms P] [--add-set] [--bound S] [--tag T]
//
// One rank (the victim) injects the fault; every other rank (a survivor) keeps submitting ops
// and must see an error. Modes (where the victim's fault happens):
//   ok            no fault: prints FAULT_READY, waits --pause-ms, runs a few checked ops (and
//                 one of --mb MiB), with --add-set creates the process set {0, 1} (printing
//                 FAULT_SET rank= code= elapsed= msg=; exit 3 if it failed), shuts down cleanly
//   kill-init     victim SIGKILLs itself as soon as its kolo_init returned (the others may
//                 still be connecting: they fail in init or in their first op)
//   kill-before   victim SIGKILLs itself --delay-ms after init, before submitting anything
//   kill-during   victim submits "t0" (so rank 0 holds its request), then SIGKILLs itself
//                 before the survivors submit "t0"
//   kill-after    every rank completes "t0"; then the victim SIGKILLs itself
//   kill-mid      every rank submits a large allreduce (--mb MiB of float32, 256); a thread of
//                 the victim SIGKILLs the process once --kill-at (8) of 64 sampled elements of
//                 its tensor hold sums, i.e. mid-transfer (or after --delay-ms)
//   kill-mid-bcast, kill-mid-alltoall, kill-mid-allgather
//                 every rank runs a large broadcast (root: the rank after the victim) /
//                 alltoall / allgather of --mb MiB twice; the first run is timed, and in the
//                 second a thread of the victim SIGKILLs it after half of that time
//   kill-negotiate every rank submits bursts of 64 new names (each round negotiates them at
//                 rank 0) and waits for them; the victim SIGKILLs itself after --delay-ms
//   kill-set      every rank completes "t0", then calls kolo_add_process_set({0..N-2}); a thread
//                 of the victim SIGKILLs it --delay-ms after its call started
//   stop          every rank completes "t0"; then the victim SIGSTOPs itself (the harness
//                 sends SIGCONT later: it must then fail on its own, not hang)
//   exit          every rank completes "t0"; then the victim _exit(0)s (sockets close, no
//                 kolo_shutdown)
//   close-sockets every rank completes "t0"; then the victim shuts down every TCP socket it
//                 has (its process keeps running) and submits "t1" like the others
//   shutdown      every rank completes "t0"; then the victim calls kolo_shutdown and exits 0
//   init          just kolo_init (rendezvous failures): reports its outcome
//   recurring     no fault: one name allreduced 6 times, a different rank late each time by
//                 --delay-ms (a regression test of cached requests announced to rank 0)
//
// Each rank ends with one line the harness parses:
//   FAULT_RESULT rank=R role=survivor|victim|init code=C elapsed=S wall=W named=0|1 next=C2
//     next_named=0|1 shutdown_s=S3 msg=<first error text>
// (wall: epoch seconds when the error came back; a victim's FAULT_VICTIM line has the wall time
// of its fault, so wall differences are detection latencies on one host)
// code is the first error's kolo_status_string ("HANG" if the op was still running after
// --bound seconds); next is the code of one more submission after it; shutdown_s is how long
// kolo_shutdown took. Exit status: 0 clean run (ok, init success, shutdown victim), 3 a fault
// was seen and named the victim, 4 a fault was seen that did not name it, 5 no fault was seen
// where one was expected, 6 init failed, 2 bad usage. --tag is ignored (it marks the process
// for the harness's leftover-process check).
#include <dirent.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "kolo.h"

namespace {

using Clock = std::chrono::steady_clock;

enum ExitCode { kClean = 0, kUsage = 2, kNamed = 3, kUnnamed = 4, kNoFault = 5, kInitFailed = 6 };

struct Options {
  std::string mode;
  int victim = 1;
  int64_t mb = -1;      // size of the large allreduce in MiB (kill-mid: 256 unless given)
  int delayMs = -1;     // kill-mid: 20000 (a deadline for the trigger), others: 300
  int pauseMs = 0;      // ok: pause after init (FAULT_READY printed first)
  bool addSet = false;  // ok: create a process set {0, 1} after the ops
  int killAt = 8;       // kill-mid: sampled elements (of 64) reduced when the victim dies
  double bound = 60;    // seconds a single wait may take before the worker calls it a hang
};

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Wall-clock seconds (comparable between the processes of one host): detection latencies.
double wallNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Messages are printed on one line: newlines become spaces.
std::string oneLine(std::string s) {
  for (char& c : s) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return s;
}

bool namesRank(const std::string& text, int rank) {
  return std::regex_search(text, std::regex("rank " + std::to_string(rank) + "\\b"));
}

struct Outcome {
  std::string code = "OK";
  std::string msg;
  double elapsed = 0;
  double wall = 0;  // when the outcome was known
};

// Waits for `h` up to `bound` seconds (*rc: the wait's result). True when the op is still
// running then: *o is a HANG since `start`, and the handle stays registered (the op is in flight).
bool hung(kolo_handle_t h, double bound, Clock::time_point start, int* rc, Outcome* o) {
  *rc = kolo_handle_wait(h, bound);
  int st = 0;
  const char* text = nullptr;
  if (*rc != KOLO_ERR_TIMEOUT || kolo_handle_status(h, &st, &text) != KOLO_OK || st != -1) {
    return false;
  }
  o->code = "HANG";
  o->msg = "still running after " + std::to_string(bound) + " s";
  o->elapsed = since(start);
  return true;
}

// Allreduce (sum, int32) of n elements of rank + 1 + i; checks the result when it succeeds.
Outcome allreduceInts(const char* name, int64_t n, double bound) {
  Outcome o;
  std::vector<int32_t> v(static_cast<size_t>(n));
  const int rank = kolo_rank(), size = kolo_size();
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<int32_t>(rank + 1 + i);
  int64_t shape[1] = {n};
  kolo_tensor_t t = {v.data(), KOLO_INT32, 1, shape, KOLO_CPU_DEVICE, nullptr};
  kolo_handle_t h = 0;
  auto start = Clock::now();
  int rc = kolo_allreduce_async(name, &t, nullptr, KOLO_SUM, 1.0, 1.0, KOLO_GLOBAL_PROCESS_SET,
                                nullptr, nullptr, &h);
  if (rc == KOLO_OK) {
    if (hung(h, bound, start, &rc, &o)) return o;  // the handle stays registered
    if (rc != KOLO_OK) o.msg = kolo_last_error();
    kolo_handle_release(h);
  } else {
    o.msg = kolo_last_error();
  }
  o.elapsed = since(start);
  o.wall = wallNow();
  o.code = kolo_status_string(rc);
  if (rc == KOLO_OK) {
    for (int64_t i = 0; i < n; ++i) {
      int64_t want = static_cast<int64_t>(size) * (size + 1) / 2 + static_cast<int64_t>(size) * i;
      if (v[i] != static_cast<int32_t>(want)) {
        o.code = "WRONG";
        o.msg = "element " + std::to_string(i) + " is " + std::to_string(v[i]) + ", expected " +
                std::to_string(want);
        break;
      }
    }
  }
  return o;
}

// Socket descriptors of this process.
std::vector<int> socketFds() {
  std::vector<int> fds;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return fds;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    int fd = std::atoi(e->d_name);
    struct stat st {};
    if (fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode)) fds.push_back(fd);
  }
  closedir(dir);
  return fds;
}

// A large float32 ring allreduce (values small integers, so the sum is exact).
Outcome allreduceLarge(const char* name, int64_t mb, double bound, const Options& opt) {
  Outcome o;
  const int64_t n = mb * (1 << 20) / 4;
  std::vector<float> v(static_cast<size_t>(n), static_cast<float>(kolo_rank() + 1));
  int64_t shape[1] = {n};
  kolo_tensor_t t = {v.data(), KOLO_FLOAT32, 1, shape, KOLO_CPU_DEVICE, nullptr};
  kolo_handle_t h = 0;
  auto start = Clock::now();
  int rc = kolo_allreduce_async(name, &t, nullptr, KOLO_SUM, 1.0, 1.0, KOLO_GLOBAL_PROCESS_SET,
                                nullptr, nullptr, &h);
  if (rc == KOLO_OK && kolo_rank() == opt.victim && opt.mode == "kill-mid") {
    // Killed once the op is well under way, whatever the transport: the tensor is reduced in
    // place (large tensors skip the fusion buffer), so the victim watches 64 evenly spaced
    // elements of its own buffer and dies when --kill-at of them hold partial or final sums
    // (or after --delay-ms). Reading while the runtime writes is a benign race of a test.
    std::thread([data = v.data(), n, &opt] {
      const auto stop = Clock::now() + std::chrono::milliseconds(opt.delayMs);
      const volatile float* p = data;
      const float mine = static_cast<float>(kolo_rank() + 1);
      int changed = 0;
      while (Clock::now() < stop) {
        changed = 0;
        for (int k = 0; k < 64; ++k) changed += p[n / 64 * k] != mine ? 1 : 0;
        if (changed >= opt.killAt) break;
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
      std::printf("FAULT_VICTIM rank=%d action=SIGKILL changed=%d/64 wall=%.3f\n", kolo_rank(),
                  changed, wallNow());
      std::fflush(stdout);
      raise(SIGKILL);
    }).detach();
  }
  if (rc == KOLO_OK) {
    if (hung(h, bound, start, &rc, &o)) return o;  // the handle stays registered
    if (rc != KOLO_OK) o.msg = kolo_last_error();
    kolo_handle_release(h);
  } else {
    o.msg = kolo_last_error();
  }
  o.elapsed = since(start);
  o.wall = wallNow();
  o.code = kolo_status_string(rc);
  const float want = static_cast<float>(kolo_size() * (kolo_size() + 1) / 2);
  if (rc == KOLO_OK && (v.front() != want || v.back() != want || v[n / 2] != want)) {
    o.code = "WRONG";
    o.msg = "large allreduce gave a wrong sum";
  }
  return o;
}

// SIGKILLs this process from a detached thread after `ms` milliseconds, printing the victim's
// line (with `what`) first.
void killLater(double ms, const std::string& what) {
  std::thread([ms, what] {
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ms));
    std::printf("FAULT_VICTIM rank=%d action=SIGKILL %s wall=%.3f\n", kolo_rank(), what.c_str(),
                wallNow());
    std::fflush(stdout);
    raise(SIGKILL);
  }).detach();
}

// One large broadcast / alltoall / allgather of `mb` MiB of int32 (rank-dependent values),
// waited for; the outcome checked at a few places when it succeeds. killMs >= 0: this rank
// SIGKILLs itself that long after the submission.
Outcome largeCollective(const std::string& kind, const char* name, int64_t mb, double bound,
                        int victim, double killMs) {
  Outcome o;
  const int rank = kolo_rank(), size = kolo_size();
  int64_t n = mb * (1 << 20) / 4;
  n -= n % size;  // alltoall divides dimension 0 evenly
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<int32_t>(rank * 1000 + i % 1000);
  int64_t shape[1] = {n};
  kolo_tensor_t t = {v.data(), KOLO_INT32, 1, shape, KOLO_CPU_DEVICE, nullptr};
  kolo_handle_t h = 0;
  const int root = (victim + 1) % size;
  auto start = Clock::now();
  int rc;
  if (kind == "bcast") {
    rc = kolo_broadcast_async(name, &t, root, KOLO_GLOBAL_PROCESS_SET, nullptr, nullptr, &h);
  } else if (kind == "alltoall") {
    rc = kolo_alltoall_async(name, &t, nullptr, 0, nullptr, nullptr, KOLO_GLOBAL_PROCESS_SET,
                             nullptr, nullptr, &h);
  } else {
    rc = kolo_allgather_async(name, &t, nullptr, nullptr, KOLO_GLOBAL_PROCESS_SET, nullptr, nullptr,
                              &h);
  }
  if (rc == KOLO_OK && killMs >= 0) {
    char what[64];
    std::snprintf(what, sizeof what, "during=%s after_ms=%.0f", kind.c_str(), killMs);
    killLater(killMs, what);
  }
  if (rc == KOLO_OK) {
    if (hung(h, bound, start, &rc, &o)) return o;  // the handle stays registered
    if (rc != KOLO_OK) o.msg = kolo_last_error();
  } else {
    o.msg = kolo_last_error();
  }
  o.elapsed = since(start);
  o.wall = wallNow();
  o.code = kolo_status_string(rc);
  if (rc == KOLO_OK) {
    // Element i of rank r's input is r * 1000 + i % 1000.
    const int32_t* out = v.data();
    int64_t blockIn = n / size, total = n;
    void* data = nullptr;
    int32_t nd = 0;
    int64_t os[KOLO_MAX_DIMS] = {};
    if (kind != "bcast") {
      kolo_handle_output(h, &data, &nd, os);
      out = static_cast<const int32_t*>(data);
      total = kind == "alltoall" ? n : n * size;
    }
    auto want = [&](int64_t i) -> int64_t {
      if (kind == "bcast") return root * 1000 + i % 1000;
      if (kind == "alltoall") return (i / blockIn) * 1000 + (rank * blockIn + i % blockIn) % 1000;
      return (i / n) * 1000 + (i % n) % 1000;
    };
    if (out == nullptr || (kind != "bcast" && os[0] != total)) {
      o.code = "WRONG";
      o.msg = kind + ": no output or a wrong output shape";
    } else {
      for (int64_t i : {int64_t{0}, total / 3, total / 2 + 7, total - 1}) {
        if (out[i] != want(i)) {
          o.code = "WRONG";
          o.msg = kind + ": element " + std::to_string(i) + " is " + std::to_string(out[i]) +
                  ", expected " + std::to_string(want(i));
          break;
        }
      }
    }
  }
  kolo_handle_release(h);
  return o;
}

// Bursts of 64 small allreduces under new names, waited for, until one fails (or `bound`).
Outcome negotiateBursts(double bound) {
  Outcome o;
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::duration<double>(bound);
  std::vector<std::vector<int32_t>> data(64, std::vector<int32_t>(16, kolo_rank()));
  int64_t shape[1] = {16};
  for (int burst = 0; o.code == "OK" && Clock::now() < deadline; ++burst) {
    std::vector<kolo_handle_t> hs;
    for (int k = 0; k < 64; ++k) {
      kolo_tensor_t t = {data[k].data(), KOLO_INT32, 1, shape, KOLO_CPU_DEVICE, nullptr};
      std::string name = "neg." + std::to_string(burst) + "." + std::to_string(k);
      kolo_handle_t h = 0;
      int rc =
          kolo_allreduce_async(name.c_str(), &t, nullptr, KOLO_SUM, 1, 1, 0, nullptr, nullptr, &h);
      if (rc != KOLO_OK) {
        if (o.code == "OK") {
          o.code = kolo_status_string(rc);
          o.msg = kolo_last_error();
          o.wall = wallNow();
        }
        break;
      }
      hs.push_back(h);
    }
    for (kolo_handle_t h : hs) {
      int rc = KOLO_OK;
      if (hung(h, bound, start, &rc, &o)) return o;  // the handle stays registered
      if (rc != KOLO_OK && o.code == "OK") {
        o.code = kolo_status_string(rc);
        o.msg = kolo_last_error();
        o.wall = wallNow();
      }
      kolo_handle_release(h);
    }
  }
  o.elapsed = since(start);
  return o;
}

// Every socket of this process is shut down (both directions); the descriptors stay open.
int shutdownAllSockets() {
  int count = 0;
  for (int fd : socketFds()) {
    if (::shutdown(fd, SHUT_RDWR) == 0) ++count;
  }
  return count;
}

int gRank = -1;  // this rank, remembered before kolo_shutdown makes kolo_rank() -1

void printResult(const char* role, const Outcome& first, const Outcome& next, double shutdownS,
                 int victim) {
  std::printf(
      "FAULT_RESULT rank=%d role=%s code=%s elapsed=%.3f wall=%.3f named=%d next=%s "
      "next_named=%d shutdown_s=%.3f msg=%s\n",
      gRank, role, first.code.c_str(), first.elapsed, first.wall,
      namesRank(first.msg, victim) ? 1 : 0, next.code.c_str(), namesRank(next.msg, victim) ? 1 : 0,
      shutdownS, oneLine(first.msg).c_str());
  std::fflush(stdout);
}

int usage(const char* why) {
  std::fprintf(stderr, "fault_worker: %s\n", why);
  return kUsage;
}

// A survivor (or the victim once it runs again): submit until something fails, then check that
// one more submission fails at once and that shutdown is bounded.
int observeFault(const Options& opt, const char* role, Outcome first) {
  int index = 1;
  auto deadline = Clock::now() + std::chrono::duration<double>(opt.bound);
  while (first.code == "OK" && Clock::now() < deadline) {
    std::string name = "t" + std::to_string(index++);
    first = allreduceInts(name.c_str(), 1024, opt.bound);
  }
  if (first.code == "OK") first.code = "NONE";
  Outcome next;
  if (first.code != "HANG") next = allreduceInts("after", 16, 5.0);
  auto t = Clock::now();
  if (first.code != "HANG") kolo_shutdown();
  printResult(role, first, next, since(t), opt.victim);
  if (first.code == "NONE" || first.code == "HANG" || first.code == "WRONG") return kNoFault;
  return namesRank(first.msg, opt.victim) ? kNamed : kUnnamed;
}

int run(const Options& opt) {
  auto t0 = Clock::now();
  int rc = kolo_init();
  if (opt.mode == "init" || rc != KOLO_OK) {
    Outcome o;
    o.code = kolo_status_string(rc);
    o.msg = rc == KOLO_OK ? "" : kolo_last_error();
    o.elapsed = since(t0);
    int rank = -1;
    if (const char* r = std::getenv("KOLO_RANK")) rank = std::atoi(r);
    std::printf(
        "FAULT_RESULT rank=%d role=init code=%s elapsed=%.3f named=%d next=OK "
        "next_named=0 shutdown_s=0 msg=%s\n",
        rank, o.code.c_str(), o.elapsed, namesRank(o.msg, opt.victim) ? 1 : 0,
        oneLine(o.msg).c_str());
    std::fflush(stdout);
    if (rc == KOLO_OK) kolo_shutdown();
    return rc == KOLO_OK ? kClean : kInitFailed;
  }
  const int rank = kolo_rank();
  gRank = rank;
  const bool victim = rank == opt.victim;
  auto announce = [&](const char* action) {
    std::printf("FAULT_VICTIM rank=%d action=%s wall=%.3f\n", rank, action, wallNow());
    std::fflush(stdout);
  };

  if (opt.mode == "ok") {
    std::printf("FAULT_READY rank=%d\n", rank);
    std::fflush(stdout);
    std::this_thread::sleep_for(std::chrono::milliseconds(opt.pauseMs));
    for (int i = 0; i < 4; ++i) {
      Outcome o = allreduceInts(("ok" + std::to_string(i)).c_str(), 4096, opt.bound);
      if (o.code != "OK") {
        printResult("ok", o, Outcome(), 0, -1);
        return kUnnamed;
      }
    }
    double bigS = 0;
    if (opt.mb > 0) {  // one large allreduce too (timing reference for kill-mid)
      Outcome o = allreduceLarge("big", opt.mb, opt.bound, opt);
      if (o.code != "OK") {
        printResult("ok", o, Outcome(), 0, -1);
        return kUnnamed;
      }
      bigS = o.elapsed;
    }
    int exitCode = kClean;
    if (opt.addSet) {  // a collective change that needs the rendezvous store on TCP
      const int32_t members[2] = {0, 1};
      int32_t id = -1;
      auto t = Clock::now();
      int src = kolo_add_process_set(members, 2, &id);
      std::printf("FAULT_SET rank=%d code=%s elapsed=%.3f msg=%s\n", rank, kolo_status_string(src),
                  since(t), src == KOLO_OK ? "" : oneLine(kolo_last_error()).c_str());
      if (src != KOLO_OK) exitCode = kNamed;
    }
    kolo_shutdown();
    std::printf(
        "FAULT_RESULT rank=%d role=ok code=OK elapsed=%.3f named=0 next=OK "
        "next_named=0 shutdown_s=0 big_s=%.3f msg=\n",
        rank, since(t0), bigS);
    return exitCode;
  }
  if (opt.mode == "recurring") {
    // One name submitted again and again; each time one rank (in turn) comes late, after
    // --delay-ms (set it above KOLO_HEARTBEAT_SECONDS): the early ranks' cached requests are
    // then announced to rank 0 while the late rank has none pending. Every result is checked.
    for (int i = 0; i < 6; ++i) {
      if (rank == i % kolo_size()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(opt.delayMs));
      }
      Outcome o = allreduceInts("recurring", 64, 20.0);
      if (o.code != "OK") {
        o.msg = "iteration " + std::to_string(i) + ": " + o.msg;
        printResult("recurring", o, Outcome(), 0, -1);
        return kUnnamed;
      }
    }
    kolo_shutdown();
    std::printf(
        "FAULT_RESULT rank=%d role=recurring code=OK elapsed=%.3f named=0 next=OK "
        "next_named=0 shutdown_s=0 msg=\n",
        rank, since(t0));
    return kClean;
  }
  if (opt.mode == "kill-before" || opt.mode == "kill-init") {
    if (victim) {
      // kill-before: every rank has finished kolo_init by then; kill-init: at once, while
      // the others may still be connecting (they fail init or their first op).
      if (opt.mode == "kill-before") {
        std::this_thread::sleep_for(std::chrono::milliseconds(opt.delayMs));
      }
      announce("SIGKILL");
      raise(SIGKILL);
    }
    return observeFault(opt, "survivor", Outcome());
  }
  if (opt.mode == "kill-during") {
    if (victim) {
      int32_t v[4] = {1, 2, 3, 4};
      int64_t shape[1] = {4};
      kolo_tensor_t t = {v, KOLO_INT32, 1, shape, KOLO_CPU_DEVICE, nullptr};
      kolo_handle_t h;
      if (kolo_allreduce_async("t0", &t, nullptr, KOLO_SUM, 1, 1, 0, nullptr, nullptr, &h) != 0) {
        return usage(kolo_last_error());
      }
      // Rounds follow each other every KOLO_CYCLE_TIME while work is pending: after this
      // pause the request has reached rank 0 and waits there for the survivors'.
      std::this_thread::sleep_for(std::chrono::milliseconds(opt.delayMs));
      announce("SIGKILL");
      raise(SIGKILL);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(opt.delayMs * 2));
    return observeFault(opt, "survivor", Outcome());
  }
  if (opt.mode == "kill-mid") {
    Outcome o = allreduceLarge("big", opt.mb, opt.bound, opt);
    return observeFault(opt, "survivor", o);
  }
  if (opt.mode.rfind("kill-mid-", 0) == 0) {
    const std::string kind = opt.mode.substr(9);
    if (kind != "bcast" && kind != "alltoall" && kind != "allgather") {
      return usage(("unknown mode " + opt.mode).c_str());
    }
    Outcome warm = largeCollective(kind, "warm", opt.mb, opt.bound, opt.victim, -1);
    if (warm.code != "OK") {
      printResult("survivor", warm, Outcome(), 0, opt.victim);
      return kNoFault;
    }
    Outcome o = largeCollective(kind, "big", opt.mb, opt.bound, opt.victim,
                                victim ? warm.elapsed * 1000 / 2 : -1);
    return observeFault(opt, "survivor", o);
  }
  if (opt.mode == "kill-negotiate") {
    if (victim) killLater(opt.delayMs, "during=negotiation");
    return observeFault(opt, "survivor", negotiateBursts(opt.bound));
  }

  // The remaining modes start from a completed, verified op.
  Outcome first = allreduceInts("t0", 1024, opt.bound);
  if (first.code != "OK") {
    printResult("survivor", first, Outcome(), 0, opt.victim);
    return kNoFault;
  }
  if (opt.mode == "kill-after") {
    if (victim) {
      announce("SIGKILL");
      raise(SIGKILL);
    }
  } else if (opt.mode == "kill-set") {
    std::vector<int32_t> members;
    for (int r = 0; r + 1 < kolo_size(); ++r) members.push_back(r);
    if (victim) killLater(opt.delayMs, "during=add_process_set");
    Outcome o;
    auto t = Clock::now();
    int32_t id = -1;
    int src = kolo_add_process_set(members.data(), static_cast<int32_t>(members.size()), &id);
    o.elapsed = since(t);
    o.wall = wallNow();
    o.code = kolo_status_string(src);
    if (src != KOLO_OK) o.msg = kolo_last_error();
    return observeFault(opt, "survivor", o);
  } else if (opt.mode == "stop") {
    if (victim) {
      announce("SIGSTOP");
      raise(SIGSTOP);
      // Continued by the harness after the survivors gave up: this rank must fail too.
      announce("SIGCONT");
      Outcome o = allreduceInts("t1", 1024, opt.bound);
      if (o.code == "OK") o.code = "NONE";
      auto t = Clock::now();
      if (o.code != "HANG") kolo_shutdown();
      printResult("victim", o, Outcome(), since(t), -1);
      return o.code == "NONE" || o.code == "HANG" ? kNoFault : kNamed;
    }
  } else if (opt.mode == "exit") {
    if (victim) {
      announce("_exit");
      _exit(0);
    }
  } else if (opt.mode == "close-sockets") {
    if (victim) {
      int n = shutdownAllSockets();
      std::printf("FAULT_VICTIM rank=%d action=shutdown-sockets count=%d wall=%.3f\n", rank, n,
                  wallNow());
      std::fflush(stdout);
      Outcome o = allreduceInts("t1", 1024, opt.bound);
      if (o.code == "OK") o.code = "NONE";
      auto t = Clock::now();
      if (o.code != "HANG") kolo_shutdown();
      printResult("victim", o, Outcome(), since(t), -1);
      return o.code == "NONE" || o.code == "HANG" ? kNoFault : kNamed;
    }
  } else if (opt.mode == "shutdown") {
    if (victim) {
      announce("kolo_shutdown");
      auto t = Clock::now();
      int src = kolo_shutdown();
      std::printf(
          "FAULT_RESULT rank=%d role=victim code=%s elapsed=0 named=0 next=OK "
          "next_named=0 shutdown_s=%.3f msg=\n",
          rank, kolo_status_string(src), since(t));
      return src == KOLO_OK ? kClean : kUnnamed;
    }
  } else {
    return usage(("unknown mode " + opt.mode).c_str());
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(opt.delayMs));
  return observeFault(opt, "survivor", Outcome());
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> const char* { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--mode") {
      opt.mode = value();
    } else if (a == "--victim") {
      opt.victim = std::atoi(value());
    } else if (a == "--mb") {
      opt.mb = std::atoll(value());
    } else if (a == "--pause-ms") {
      opt.pauseMs = std::atoi(value());
    } else if (a == "--add-set") {
      opt.addSet = true;
    } else if (a == "--kill-at") {
      opt.killAt = std::atoi(value());
    } else if (a == "--delay-ms") {
      opt.delayMs = std::atoi(value());
    } else if (a == "--bound") {
      opt.bound = std::atof(value());
    } else if (a == "--tag") {
      value();
    } else {
      return usage(("unknown argument " + a).c_str());
    }
  }
  if (opt.mode.empty()) return usage("--mode is required");
  if (opt.mb < 0) opt.mb = opt.mode.rfind("kill-mid", 0) == 0 ? 256 : 0;
  if (opt.delayMs < 0) opt.delayMs = opt.mode == "kill-mid" ? 20000 : 300;
  return run(opt);
}
