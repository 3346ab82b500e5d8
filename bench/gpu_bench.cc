// SPDX-License-Identifier: Apache-2.0
// kolo-gpu-bench: allreduce of CUDA tensors through the runtime (C API, the NCCL device path)
// against ncclAllReduce called directly on a communicator this program makes itself, in the
// same job, one GPU per process (device = local rank):
//
//   kolo-gpu-bench [flags]                          (one process, one GPU: still real NCCL)
//   kolorun -np 2 kolo-gpu-bench [flags]             (Gloo control plane, ids via the Store)
//   mpirun --allow-run-as-root -np 2 kolo-gpu-bench  (MPI control plane)
//   KOLO_HIERARCHICAL_ALLREDUCE=1 ... kolo-gpu-bench (the runtime side goes hierarchical)
//
// For each size (float32 sum, in place): a correctness pass (every rank fills rank + 1, every
// element must come back as n (n + 1) / 2; wrong ones are counted and summed over ranks), then
// `--iters` timed iterations of each side after `--warmup` untimed ones. A kolo iteration is
// kolo_allreduce_async + kolo_handle_wait (what a training step waits for); an NCCL iteration
// is ncclAllReduce + cudaStreamSynchronize. Times are per op, the slowest rank's (MAX over ranks
// through a kolo host allreduce), median reported; algbw = bytes / time, busbw = algbw *
// 2 (n - 1) / n as in nccl-tests. Without enough visible GPUs it prints SKIPPED and exits 0.
// `--calls N` first prints what each CUDA / NCCL call of a small device op costs here.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "base/clock.h"
#include "bench/bench_util.h"
#include "kolo.h"

namespace kolo::bench {
namespace {

constexpr double kWaitSeconds = 300;

struct Options {
  size_t minBytes = 4 << 10, maxBytes = size_t{256} << 20;
  long factor = 4, iters = 20, warmup = 5;
  long calls = 0;  // --calls N: first time the CUDA/NCCL calls a device op is made of, N each
  std::string csvPath;
};

const char kUsage[] =
    "usage: kolo-gpu-bench [--min BYTES] [--max BYTES] [--factor N] [--iters N] [--warmup N]\n"
    "                      [--calls N] [--csv FILE]\n";

bool parseOptions(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) return false;  // every flag takes a value (and -h / --help is none)
    const std::string v = argv[++i];
    long x = 0;
    if (flag == "--min") {
      if (!parseBytes(v, &o->minBytes)) return false;
    } else if (flag == "--max") {
      if (!parseBytes(v, &o->maxBytes)) return false;
    } else if (flag == "--factor" && parseInt(v, 2, 1 << 20, &x)) {
      o->factor = x;
    } else if (flag == "--iters" && parseInt(v, 1, 1 << 24, &x)) {
      o->iters = x;
    } else if (flag == "--warmup" && parseInt(v, 0, 1 << 24, &x)) {
      o->warmup = x;
    } else if (flag == "--calls" && parseInt(v, 1, 1 << 24, &x)) {
      o->calls = x;
    } else if (flag == "--csv") {
      o->csvPath = v;
    } else {
      return false;
    }
  }
  return o->minBytes >= 4 && o->minBytes <= o->maxBytes;
}

bool ok(int rc, const char* what) {
  if (rc == KOLO_OK) return true;
  std::fprintf(stderr, "kolo-gpu-bench: %s failed: %s\n", what, kolo_last_error());
  return false;
}

// A host allreduce through kolo (MAX of times, SUM of wrong counts, the NCCL id broadcast).
bool hostAllreduce(const char* name, double* values, int n, kolo_reduce_op_t op) {
  const int64_t shape[1] = {n};
  kolo_tensor_t t{values, KOLO_FLOAT64, 1, shape, KOLO_CPU_DEVICE, nullptr};
  kolo_handle_t h = 0;
  if (!ok(kolo_allreduce_async(name, &t, nullptr, op, 1.0, 1.0, 0, nullptr, nullptr, &h), name) ||
      !ok(kolo_handle_wait(h, kWaitSeconds), name)) {
    return false;
  }
  return ok(kolo_handle_release(h), "release");
}

bool shareNcclId(ncclUniqueId* id) {
  std::vector<uint8_t> bytes(sizeof(ncclUniqueId), 0);
  if (kolo_rank() == 0) std::memcpy(bytes.data(), id, sizeof(ncclUniqueId));
  const int64_t shape[1] = {static_cast<int64_t>(bytes.size())};
  kolo_tensor_t t{bytes.data(), KOLO_UINT8, 1, shape, KOLO_CPU_DEVICE, nullptr};
  kolo_handle_t h = 0;
  if (!ok(kolo_broadcast_async("gpu-bench.nccl-id", &t, 0, 0, nullptr, nullptr, &h), "id") ||
      !ok(kolo_handle_wait(h, kWaitSeconds), "id broadcast") || !ok(kolo_handle_release(h), "id")) {
    return false;
  }
  std::memcpy(id, bytes.data(), sizeof(ncclUniqueId));
  return true;
}

struct Timing {
  double micros = 0;
  bool failed = false;
};

// Median over iterations of the per-iteration MAX over ranks.
Timing timeKolo(float* buf, size_t count, const Options& o) {
  const int64_t shape[1] = {static_cast<int64_t>(count)};
  kolo_tensor_t t{buf, KOLO_FLOAT32, 1, shape, 0, nullptr};
  cudaGetDevice(&t.device);
  std::vector<double> times;
  const std::string name = "gpu-bench." + std::to_string(count);
  for (long i = 0; i < o.warmup + o.iters; ++i) {
    kolo_handle_t h = 0;
    const auto start = Clock::now();
    if (!ok(kolo_allreduce_async(name.c_str(), &t, nullptr, KOLO_SUM, 1.0, 1.0, 0, nullptr, nullptr,
                                 &h),
            "allreduce") ||
        !ok(kolo_handle_wait(h, kWaitSeconds), "allreduce wait")) {
      return {0, true};
    }
    const double us = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
    kolo_handle_release(h);
    if (i >= o.warmup) times.push_back(us);
  }
  if (!hostAllreduce("gpu-bench.times.kolo", times.data(), static_cast<int>(times.size()),
                     KOLO_MAX)) {
    return {0, true};
  }
  return {statsOf(times).median, false};
}

Timing timeNccl(float* buf, size_t count, ncclComm_t comm, cudaStream_t stream, const Options& o) {
  std::vector<double> times;
  for (long i = 0; i < o.warmup + o.iters; ++i) {
    const auto start = Clock::now();
    if (ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, comm, stream) != ncclSuccess ||
        cudaStreamSynchronize(stream) != cudaSuccess) {
      std::fprintf(stderr, "kolo-gpu-bench: ncclAllReduce failed\n");
      return {0, true};
    }
    const double us = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
    if (i >= o.warmup) times.push_back(us);
  }
  if (!hostAllreduce("gpu-bench.times.nccl", times.data(), static_cast<int>(times.size()),
                     KOLO_MAX)) {
    return {0, true};
  }
  return {statsOf(times).median, false};
}

// Fills rank + 1, allreduces through kolo, counts elements != n (n + 1) / 2 over all ranks.
double wrongElements(float* buf, size_t count, std::vector<float>* host) {
  const int n = kolo_size();
  host->assign(count, static_cast<float>(kolo_rank() + 1));
  if (cudaMemcpy(buf, host->data(), count * sizeof(float), cudaMemcpyHostToDevice) != cudaSuccess) {
    return -1;
  }
  const int64_t shape[1] = {static_cast<int64_t>(count)};
  kolo_tensor_t t{buf, KOLO_FLOAT32, 1, shape, 0, nullptr};
  cudaGetDevice(&t.device);
  kolo_handle_t h = 0;
  if (!ok(kolo_allreduce_async("gpu-bench.check", &t, nullptr, KOLO_SUM, 1.0, 1.0, 0, nullptr,
                               nullptr, &h),
          "check") ||
      !ok(kolo_handle_wait(h, kWaitSeconds), "check wait")) {
    return -1;
  }
  kolo_handle_release(h);
  if (cudaMemcpy(host->data(), buf, count * sizeof(float), cudaMemcpyDeviceToHost) != cudaSuccess) {
    return -1;
  }
  const float expected = static_cast<float>(n * (n + 1) / 2);
  double wrong = static_cast<double>(
      std::count_if(host->begin(), host->end(), [&](float v) { return v != expected; }));
  if (!hostAllreduce("gpu-bench.wrong", &wrong, 1, KOLO_SUM)) return -1;
  return wrong;
}

// The floor under one small device op: what each CUDA / NCCL call it is made of costs on this
// machine, on the calling thread, averaged over o.calls calls (rank 0 prints). A 4-byte
// ncclAllReduce waited for by polling its event is the least any runtime can do per op.
void callCosts(float* buf, ncclComm_t comm, cudaStream_t stream, const Options& o) {
  auto timeIt = [&](const char* what, auto&& body) {
    body();  // warm
    const auto start = Clock::now();
    for (long i = 0; i < o.calls; ++i) body();
    const double us =
        std::chrono::duration<double, std::micro>(Clock::now() - start).count() / o.calls;
    if (kolo_rank() == 0) std::printf("#   %-58s %8.2f us\n", what, us);
  };
  if (kolo_rank() == 0) std::printf("# per-call costs (mean of %ld calls each)\n", o.calls);
  cudaEvent_t ev = nullptr;
  cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  timeIt("cudaEventCreate + cudaEventDestroy (timing disabled)", [] {
    cudaEvent_t e = nullptr;
    cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
    cudaEventDestroy(e);
  });
  timeIt("cudaEventRecord", [&] { cudaEventRecord(ev, stream); });
  timeIt("cudaStreamWaitEvent", [&] { cudaStreamWaitEvent(stream, ev, 0); });
  timeIt("cudaPointerGetAttributes", [&] {
    cudaPointerAttributes a{};
    cudaPointerGetAttributes(&a, buf);
  });
  timeIt("cudaGetDevice + cudaSetDevice", [] {
    int d = 0;
    cudaGetDevice(&d);
    cudaSetDevice(d);
  });
  timeIt("cudaEventQuery (done event)", [&] { cudaEventQuery(ev); });
  cudaStreamSynchronize(stream);
  timeIt("ncclAllReduce 4 B, enqueue only", [&] {
    ncclAllReduce(buf, buf, 1, ncclFloat32, ncclSum, comm, stream);
  });
  cudaStreamSynchronize(stream);
  timeIt("ncclAllReduce 4 B + cudaEventRecord + cudaEventQuery spin", [&] {
    ncclAllReduce(buf, buf, 1, ncclFloat32, ncclSum, comm, stream);
    cudaEventRecord(ev, stream);
    while (cudaEventQuery(ev) == cudaErrorNotReady) {
    }
  });
  timeIt("ncclAllReduce 4 B + cudaStreamSynchronize", [&] {
    ncclAllReduce(buf, buf, 1, ncclFloat32, ncclSum, comm, stream);
    cudaStreamSynchronize(stream);
  });
  cudaEventDestroy(ev);
}

int run(const Options& o) {
  const int n = kolo_size(), rank = kolo_rank();
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess) devices = 0;
  double enough = devices >= kolo_local_size() ? 1 : 0;  // every rank must agree to go on
  if (!hostAllreduce("gpu-bench.devices", &enough, 1, KOLO_MIN)) return 1;
  if (enough == 0) {
    if (rank == 0) {
      std::printf("SKIPPED: kolo-gpu-bench needs one CUDA device per local rank; %d visible\n",
                  devices);
    }
    return 0;
  }
  if (cudaSetDevice(kolo_local_rank() % devices) != cudaSuccess) return 1;
  ncclUniqueId id{};
  if (rank == 0 && ncclGetUniqueId(&id) != ncclSuccess) return 1;
  if (!shareNcclId(&id)) return 1;
  ncclComm_t comm = nullptr;
  if (ncclCommInitRank(&comm, n, id, rank) != ncclSuccess) {
    std::fprintf(stderr, "kolo-gpu-bench: ncclCommInitRank failed\n");
    return 1;
  }
  cudaStream_t stream = nullptr;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  float* buf = nullptr;
  if (cudaMalloc(&buf, o.maxBytes) != cudaSuccess) return 1;

  if (o.calls > 0) callCosts(buf, comm, stream, o);

  std::FILE* csv = rank == 0 && !o.csvPath.empty() ? std::fopen(o.csvPath.c_str(), "w") : nullptr;
  if (rank == 0 && !o.csvPath.empty() && csv == nullptr) {
    std::fprintf(stderr, "kolo-gpu-bench: cannot write %s\n", o.csvPath.c_str());
  }
  if (csv != nullptr) {
    std::fprintf(csv,
                 "ranks,bytes,count,kolo_us,kolo_algbw_GBps,kolo_busbw_GBps,nccl_us,"
                 "nccl_algbw_GBps,nccl_busbw_GBps,wrong\n");
  }
  if (rank == 0) {
    std::printf(
        "# kolo-gpu-bench: float32 sum allreduce, %d rank(s), %d GPU(s) per host visible\n"
        "# %12s %12s | %10s %9s %9s | %10s %9s %9s | %6s\n",
        n, devices, "bytes", "count", "kolo us", "algbw", "busbw", "nccl us", "algbw", "busbw",
        "wrong");
  }
  const double busFactor = n > 1 ? 2.0 * (n - 1) / n : 1.0;
  std::vector<float> host;
  int rc = 0;
  for (size_t bytes = o.minBytes; bytes <= o.maxBytes; bytes *= static_cast<size_t>(o.factor)) {
    const size_t count = bytes / sizeof(float);
    const double wrong = wrongElements(buf, count, &host);
    const Timing k = timeKolo(buf, count, o);
    const Timing d = timeNccl(buf, count, comm, stream, o);
    if (wrong < 0 || k.failed || d.failed) {
      rc = 1;
      break;
    }
    if (wrong > 0) rc = 1;
    const double kAlg = bytes / k.micros / 1e3, dAlg = bytes / d.micros / 1e3;  // GB/s
    if (rank == 0) {
      std::printf("  %12zu %12zu | %10.1f %9.2f %9.2f | %10.1f %9.2f %9.2f | %6.0f\n", bytes, count,
                  k.micros, kAlg, kAlg * busFactor, d.micros, dAlg, dAlg * busFactor, wrong);
      std::fflush(stdout);
    }
    if (csv != nullptr) {
      std::fprintf(csv, "%d,%zu,%zu,%.3f,%.4f,%.4f,%.3f,%.4f,%.4f,%.0f\n", n, bytes, count,
                   k.micros, kAlg, kAlg * busFactor, d.micros, dAlg, dAlg * busFactor, wrong);
    }
    if (bytes > o.maxBytes / static_cast<size_t>(o.factor)) break;
  }
  if (csv != nullptr) std::fclose(csv);
  cudaFree(buf);
  ncclCommDestroy(comm);
  cudaStreamDestroy(stream);
  return rc;
}

}  // namespace
}  // namespace kolo::bench

int main(int argc, char** argv) {
  kolo::bench::Options o;
  if (!kolo::bench::parseOptions(argc, argv, &o)) {
    std::fputs(kolo::bench::kUsage, stderr);
    return 2;
  }
  if (kolo_init() != KOLO_OK) {
    std::fprintf(stderr, "kolo-gpu-bench: kolo_init failed: %s\n", kolo_last_error());
    return 1;
  }
  const int rc = kolo::bench::run(o);
  kolo_shutdown();
  return rc;
}
