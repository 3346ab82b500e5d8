// SPDX-License-Identifier: Apache-2.0
// kolo-runtime-bench: what the runtime costs on top of the collective it runs, measured through
// the public C API (libkolo.so) in a multi-process job:
//
//   mpirun --allow-run-as-root -np 2 kolo-runtime-bench [flags]        (MPI)
//   kolorun -np 2 kolo-runtime-bench [flags]                           (Gloo)
//
// Cases:
//  (a) small-op latency: one 4-byte float32 allreduce (kolo_allreduce_async + kolo_handle_wait,
//      the same name every iteration, as a training loop does), median and p90.
//  (b) ResNet-50 step: the 161 float32 gradient sizes of ResNet-50 (bench/data/), all submitted
//      asynchronously, then all waited: steps/s with tensor fusion on (KOLO_FUSION_THRESHOLD as
//      set, else the default) and off (KOLO_FUSION_THRESHOLD=0). Configuration is read at
//      kolo_init, so each setting is one kolo_init ... kolo_shutdown period of this process,
//      with the variable set just before kolo_init.
//  (c) the same bytes as one tensor through the runtime (what perfect fusion could reach).
// Baselines, measured in the same job after the runtime is shut down: a second transport that
// this program creates itself through bootstrap/registry.h (the factory the runtime uses, with
// the same KOLO_* environment; its store keys live under "kolo-runtime-bench/") runs the same
// 4-byte allreduce and the same bytes as one buffer, once with the transport's native
// allreduce (MPI_Allreduce / Gloo's) and once with kolo's ring algorithm called directly. So
// "runtime" minus "ring, no runtime" is the runtime's overhead, and "native" is what the
// transport alone achieves. Over shared memory the same bytes as one buffer also run on the
// launcher's transport without shm (MPI_Allreduce or Gloo's: the hand-fused baseline). Over
// Gloo, Gloo's own ring and halving-doubling also run the 4-byte allreduce, called directly on
// a Gloo context of their own (gloo_algorithms.h). The program links
// the engine statically for that second transport next to libkolo.so, whose own engine copy is
// hidden behind its export map; MPI stays initialized from the first use until exit, so both copies
// share it.
//
// Every per-iteration time is reduced with MAX over the ranks (an op is as slow as its slowest
// rank) before the median / p90 / mean are taken. The ResNet case is checked once after its
// timed steps: inputs refilled with the deterministic pattern of bench/pattern.h, one more step,
// wrong elements counted on every rank and summed.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "base/clock.h"
#include "bench/bench_job.h"
#include "bench/bench_util.h"
#include "bench/pattern.h"
#include "bench/transport_baseline.h"
#include "kolo.h"

#ifndef KOLO_BENCH_DATA_DIR
#define KOLO_BENCH_DATA_DIR "bench/data"
#endif

namespace kolo::bench {
namespace {

constexpr double kWaitSeconds = 300;  // bound on any single wait on a kolo handle

double microsSince(Clock::time_point start) {
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
}

struct Options {
  long latencyIters = 1000;
  long latencyWarmup = 50;
  long steps = 20;
  long warmupSteps = 3;
  std::string sizesFile = std::string(KOLO_BENCH_DATA_DIR) + "/resnet50_grad_sizes.txt";
  bool fusionOn = true, fusionOff = true;
  bool baseline = true;
  std::string csvPath;
};

const char kUsage[] =
    "usage: kolo-runtime-bench [--latency-iters N] [--latency-warmup N] [--steps N]\n"
    "                          [--warmup-steps N] [--sizes-file FILE] [--fusion on|off|both]\n"
    "                          [--no-baseline] [--csv FILE]\n"
    "Run it under a launcher: mpirun -np N kolo-runtime-bench | kolorun -np N ...\n";

bool parseOptions(int argc, char** argv, Options* o, std::string* error) {
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "-h" || flag == "--help") return false;
    if (flag == "--no-baseline") {
      o->baseline = false;
      continue;
    }
    if (i + 1 >= argc) {
      *error = "missing value after " + flag;
      return false;
    }
    const std::string v = argv[++i];
    bool ok = true;
    if (flag == "--latency-iters") {
      ok = parseInt(v, 1, 10000000, &o->latencyIters);
    } else if (flag == "--latency-warmup") {
      ok = parseInt(v, 0, 10000000, &o->latencyWarmup);
    } else if (flag == "--steps") {
      ok = parseInt(v, 1, 100000, &o->steps);
    } else if (flag == "--warmup-steps") {
      ok = parseInt(v, 0, 100000, &o->warmupSteps);
    } else if (flag == "--sizes-file") {
      o->sizesFile = v;
    } else if (flag == "--csv") {
      o->csvPath = v;
    } else if (flag == "--fusion") {
      ok = v == "on" || v == "off" || v == "both";
      o->fusionOn = v != "off";
      o->fusionOff = v != "on";
    } else {
      *error = "unknown flag " + flag;
      return false;
    }
    if (!ok) {
      *error = "bad value '" + v + "' for " + flag;
      return false;
    }
  }
  return true;
}

// Reads one element count per line; '#' starts a comment.
Status readSizes(const std::string& path, std::vector<size_t>* sizes) {
  std::ifstream in(path);
  KOLO_REQUIRE(in.good(), kIo, "cannot read " + path + " (see --sizes-file)");
  std::string line;
  int lineNo = 0;
  while (std::getline(in, line)) {
    ++lineNo;
    line = line.substr(0, line.find('#'));
    line.erase(std::remove_if(line.begin(), line.end(), ::isspace), line.end());
    if (line.empty()) continue;
    long v = 0;
    KOLO_REQUIRE(parseInt(line, 1, 1L << 40, &v), kInvalidArgument,
                 path + ":" + std::to_string(lineNo) + ": not an element count: " + line);
    sizes->push_back(static_cast<size_t>(v));
  }
  KOLO_REQUIRE(!sizes->empty(), kInvalidArgument, path + " lists no sizes");
  return Status::ok();
}

// ---- the runtime through the C API -----------------------------------------------------------
Status apiStatus(int rc, const std::string& what) {
  if (rc == KOLO_OK) return Status::ok();
  return Status(static_cast<ErrorCode>(rc), what + ": " + kolo_last_error());
}

struct ApiTensor {
  int64_t shape[1];
  kolo_tensor_t t;
  ApiTensor(void* data, kolo_dtype_t dtype, size_t count) {
    shape[0] = static_cast<int64_t>(count);
    t = kolo_tensor_t{data, dtype, 1, shape, KOLO_CPU_DEVICE, nullptr};
  }
};

Status submitAllreduce(const std::string& name, const ApiTensor& tensor, kolo_reduce_op_t op,
                       kolo_handle_t* h) {
  return apiStatus(kolo_allreduce_async(name.c_str(), &tensor.t, nullptr, op, 1.0, 1.0,
                                        KOLO_GLOBAL_PROCESS_SET, nullptr, nullptr, h),
                   "kolo_allreduce_async(" + name + ")");
}

Status waitAndRelease(kolo_handle_t h, const std::string& name) {
  const Status s = apiStatus(kolo_handle_wait(h, kWaitSeconds), "kolo_handle_wait(" + name + ")");
  kolo_handle_release(h);
  return s;
}

Status runtimeAllreduce(const std::string& name, void* data, kolo_dtype_t dtype, size_t count,
                        kolo_reduce_op_t op) {
  ApiTensor tensor(data, dtype, count);
  kolo_handle_t h = 0;
  KOLO_RETURN_IF_ERROR(submitAllreduce(name, tensor, op, &h));
  return waitAndRelease(h, name);
}

Status maxOverRanks(std::vector<double>* v) {
  return runtimeAllreduce("bench.max", v->data(), KOLO_FLOAT64, v->size(), KOLO_MAX);
}

Status sumOverRanks(int64_t* v) {
  return runtimeAllreduce("bench.sum", v, KOLO_INT64, 1, KOLO_SUM);
}

// Runs `fn` warmup + iters times through the runtime; per-iteration us, MAX over ranks.
template <typename Fn>
Status timeLoop(long warmup, long iters, Fn fn, std::vector<double>* us) {
  for (long i = 0; i < warmup; ++i) KOLO_RETURN_IF_ERROR(fn());
  us->assign(static_cast<size_t>(iters), 0.0);
  for (double& x : *us) {
    const auto start = Clock::now();
    KOLO_RETURN_IF_ERROR(fn());
    x = microsSince(start);
  }
  return maxOverRanks(us);
}

// The gradients of one model step: one buffer, cut into the listed tensors.
struct Gradients {
  std::vector<size_t> sizes, offsets;
  std::vector<std::string> names;
  std::vector<float> data;
  size_t total = 0;
  explicit Gradients(const std::vector<size_t>& s) : sizes(s) {
    for (size_t i = 0; i < sizes.size(); ++i) {
      offsets.push_back(total);
      total += sizes[i];
      names.push_back("grad." + std::to_string(i));
    }
    data.assign(total, 0.0f);
  }
};

// One step: every tensor submitted in the listed order (backward order), then all waited.
// `single`: the whole buffer as one tensor instead.
Status runtimeStep(Gradients& g, bool single) {
  if (single) return runtimeAllreduce("grad.all", g.data.data(), KOLO_FLOAT32, g.total, KOLO_SUM);
  std::vector<kolo_handle_t> handles(g.sizes.size(), 0);
  Status first;
  size_t submitted = 0;
  for (; submitted < g.sizes.size() && first.isOk(); ++submitted) {
    ApiTensor tensor(g.data.data() + g.offsets[submitted], KOLO_FLOAT32, g.sizes[submitted]);
    first = submitAllreduce(g.names[submitted], tensor, KOLO_SUM, &handles[submitted]);
  }
  if (!first.isOk()) --submitted;           // the failed submission returned no handle
  for (size_t i = 0; i < submitted; ++i) {  // wait for all submitted ones, even after an error
    Status s = waitAndRelease(handles[i], g.names[i]);
    if (first.isOk()) first = s;
  }
  return first;
}

struct StepResult {
  double ms = -1;      // mean over steps of the slowest rank's step time
  int64_t wrong = -1;  // wrong elements after one checked step (-1: not run)
};

// Times steps after warm-up, then checks one step started from the pattern.
Status timeSteps(const Options& o, Gradients& g, bool single, int rank, int ranks,
                 StepResult* out) {
  fillPattern(g.data.data(), g.total, DataType::kFloat32, ReduceOp::kSum, rank, 0);
  std::vector<double> us;
  KOLO_RETURN_IF_ERROR(timeLoop(
      o.warmupSteps, o.steps, [&] { return runtimeStep(g, single); }, &us));
  out->ms = statsOf(us).mean / 1000.0;
  fillPattern(g.data.data(), g.total, DataType::kFloat32, ReduceOp::kSum, rank, 0);
  KOLO_RETURN_IF_ERROR(runtimeStep(g, single));
  int64_t wrong = static_cast<int64_t>(
      countWrongReduced(g.data.data(), g.total, DataType::kFloat32, ReduceOp::kSum, ranks, 0));
  KOLO_RETURN_IF_ERROR(sumOverRanks(&wrong));
  out->wrong = wrong;
  return Status::ok();
}

struct Results {
  std::string transport, transportDetail;  // kolo_transport_name(); with its base for shm
  int rank = -1, ranks = 0;
  std::string fusedThreshold;  // what "fusion on" ran with
  SampleStats latRuntime;
  StepResult fused, unfused, bulkRuntime;
  BaselineResult baseline;
};

// One kolo_init .. kolo_shutdown period with KOLO_FUSION_THRESHOLD = `threshold` (nullptr:
// as the user's environment has it). `firstPhase` also measures latency and the bulk case.
Status runtimePhase(const Options& o, const char* threshold, bool firstPhase, Gradients& g,
                    StepResult* step, Results* r) {
  if (threshold != nullptr) setenv("KOLO_FUSION_THRESHOLD", threshold, 1);
  KOLO_RETURN_IF_ERROR(apiStatus(kolo_init(), "kolo_init"));
  r->transport = kolo_transport_name();
  r->transportDetail = r->transport;
  if (r->transport == "shm") {  // shared memory over the launcher's transport (KOLO_SHM)
    r->transportDetail += kolo_mpi_enabled()    ? " (over mpi)"
                          : kolo_gloo_enabled() ? " (over gloo)"
                                                : "";
  }
  r->rank = kolo_rank();
  r->ranks = kolo_size();
  Status s;
  if (firstPhase) {
    float value = 1.0f;
    std::vector<double> us;
    s = timeLoop(
        o.latencyWarmup, o.latencyIters,
        [&] { return runtimeAllreduce("bench.latency", &value, KOLO_FLOAT32, 1, KOLO_SUM); }, &us);
    r->latRuntime = statsOf(us);
    if (s.isOk()) s = timeSteps(o, g, /*single=*/true, r->rank, r->ranks, &r->bulkRuntime);
  }
  if (s.isOk()) s = timeSteps(o, g, /*single=*/false, r->rank, r->ranks, step);
  const Status down = apiStatus(kolo_shutdown(), "kolo_shutdown");
  return s.isOk() ? down : s;
}

// ---- report ------------------------------------------------------------------------------------
std::string fmt(double v, const char* format = "%.2f") {
  if (v < 0) return "-";
  char buf[64];
  std::snprintf(buf, sizeof(buf), format, v);
  return buf;
}

void printStepRow(const char* what, const StepResult& s, size_t bytes) {
  const double stepsPerS = s.ms > 0 ? 1000.0 / s.ms : -1;
  const double algbw = s.ms > 0 ? static_cast<double>(bytes) / (s.ms * 1e-3) / 1e9 : -1;
  std::printf("  %-52s %10s %10s %12s %7s\n", what, fmt(s.ms).c_str(), fmt(stepsPerS).c_str(),
              fmt(algbw, "%.3f").c_str(), s.wrong < 0 ? "-" : std::to_string(s.wrong).c_str());
}

void printLatencyRow(const std::string& what, const SampleStats& s) {
  std::printf("  %-52s %10s %10s %10s\n", what.c_str(), fmt(s.median).c_str(), fmt(s.p90).c_str(),
              fmt(s.mean).c_str());
}

void report(const Options& o, const Gradients& g, const Results& r) {
  const size_t bytes = g.total * sizeof(float);
  const BaselineResult& b = r.baseline;
  const std::string native =
      "transport native" + (b.nativeName.empty() ? std::string() : " (" + b.nativeName + ")");
  std::printf("# kolo-runtime-bench: %d ranks, runtime transport %s", r.ranks,
              r.transportDetail.c_str());
  if (o.baseline) std::printf(", baseline transport %s", b.transport.c_str());
  std::printf("\n#\n");
  std::printf(
      "# small-op latency: one 4-byte float32 allreduce, %ld iterations after %ld "
      "(slowest rank per iteration)\n",
      o.latencyIters, o.latencyWarmup);
  std::printf("# %-52s %10s %10s %10s\n", "path", "median(us)", "p90(us)", "mean(us)");
  printLatencyRow("runtime (kolo_allreduce_async + handle_wait)", r.latRuntime);
  if (o.baseline) {
    printLatencyRow(native + ", no runtime", b.latNative);
    printLatencyRow("kolo ring on the transport, no runtime", b.latRing);
    if (b.glooAlgorithms) {
      printLatencyRow("gloo ring (gloo::allreduce RING), direct", b.latGlooRing);
      printLatencyRow("gloo halving-doubling (AllreduceHalvingDoubling)", b.latGlooHd);
    }
  }
  std::printf(
      "#\n# ResNet-50 step: %zu float32 gradients, %zu bytes (%s), %ld steps after %ld "
      "warm-up (mean of the slowest rank)\n",
      g.sizes.size(), bytes, humanBytes(bytes).c_str(), o.steps, o.warmupSteps);
  std::printf("# %-52s %10s %10s %12s %7s\n", "case", "ms/step", "steps/s", "algbw(GB/s)", "wrong");
  const std::string on = "runtime, " + std::to_string(g.sizes.size()) + " tensors, fusion on (" +
                         r.fusedThreshold + ")";
  const std::string off =
      "runtime, " + std::to_string(g.sizes.size()) + " tensors, fusion off (threshold 0)";
  if (o.fusionOn) printStepRow(on.c_str(), r.fused, bytes);
  if (o.fusionOff) printStepRow(off.c_str(), r.unfused, bytes);
  printStepRow("runtime, the same bytes as one tensor", r.bulkRuntime, bytes);
  if (o.baseline) {
    printStepRow((native + ", one buffer").c_str(), StepResult{b.bulkNativeMs, b.bulkNativeWrong},
                 bytes);
    printStepRow("kolo ring on the transport, one buffer",
                 StepResult{b.bulkRingMs, b.bulkRingWrong}, bytes);
    if (b.bulkPlainNativeMs >= 0) {
      const std::string plain =
          b.plainTransport + " native (" + b.plainNativeName + "), one buffer, no shm (hand-fused)";
      printStepRow(plain.c_str(), StepResult{b.bulkPlainNativeMs, b.bulkPlainNativeWrong}, bytes);
    }
  }
  // Unmeasured values are empty CSV fields.
  auto field = [](double v) { return v < 0 ? std::string() : fmt(v, "%.3f"); };
  auto perS = [&](double ms) { return field(ms > 0 ? 1000.0 / ms : -1); };
  const std::string header =
      "transport,ranks,bytes_per_step,lat_runtime_median_us,lat_runtime_p90_us,"
      "lat_native_median_us,lat_native_p90_us,lat_ring_median_us,lat_ring_p90_us,"
      "resnet_fused_steps_per_s,resnet_unfused_steps_per_s,bulk_runtime_steps_per_s,"
      "bulk_native_steps_per_s,bulk_ring_steps_per_s,lat_gloo_ring_median_us,"
      "lat_gloo_ring_p90_us,lat_gloo_hd_median_us,lat_gloo_hd_p90_us,"
      "bulk_plain_native_steps_per_s";
  std::string line = r.transport + "," + std::to_string(r.ranks) + "," + std::to_string(bytes);
  for (double v : {r.latRuntime.median, r.latRuntime.p90, b.latNative.median, b.latNative.p90,
                   b.latRing.median, b.latRing.p90}) {
    line += "," + field(v);
  }
  for (double ms : {r.fused.ms, r.unfused.ms, r.bulkRuntime.ms, b.bulkNativeMs, b.bulkRingMs}) {
    line += "," + perS(ms);
  }
  for (double v : {b.latGlooRing.median, b.latGlooRing.p90, b.latGlooHd.median, b.latGlooHd.p90}) {
    line += "," + field(v);
  }
  line += "," + perS(b.bulkPlainNativeMs);
  std::printf("#\n# csv: %s\ncsv: %s\n", header.c_str(), line.c_str());
  if (!o.csvPath.empty()) {
    std::FILE* f = std::fopen(o.csvPath.c_str(), "a");
    if (f == nullptr) {
      std::fprintf(stderr, "kolo-runtime-bench: cannot write %s\n", o.csvPath.c_str());
      return;
    }
    if (std::ftell(f) == 0) std::fprintf(f, "%s\n", header.c_str());
    std::fprintf(f, "%s\n", line.c_str());
    std::fclose(f);
  }
}

int run(const Options& o) {
  std::vector<size_t> sizes;
  Status s = readSizes(o.sizesFile, &sizes);
  if (!s.isOk()) {
    std::fprintf(stderr, "kolo-runtime-bench: %s\n", s.toString().c_str());
    return 2;
  }
  Gradients g(sizes);
  Results r;
  const char* userThreshold = std::getenv("KOLO_FUSION_THRESHOLD");
  r.fusedThreshold = userThreshold != nullptr
                         ? std::string("KOLO_FUSION_THRESHOLD=") + userThreshold
                         : std::string("default threshold");
  if (o.fusionOn) s = runtimePhase(o, nullptr, true, g, &r.fused, &r);
  if (s.isOk() && o.fusionOff) s = runtimePhase(o, "0", !o.fusionOn, g, &r.unfused, &r);
  if (s.isOk() && o.baseline) {
    BaselineOptions bo;
    bo.latencyIters = o.latencyIters;
    bo.latencyWarmup = o.latencyWarmup;
    bo.steps = o.steps;
    bo.warmupSteps = o.warmupSteps;
    bo.bulkCount = g.total;
    s = measureTransportBaseline(bo, &r.baseline);
  }
  if (!s.isOk()) {
    std::fprintf(stderr, "kolo-runtime-bench: rank %d: %s\n", r.rank, s.toString().c_str());
    return 1;
  }
  if (r.rank == 0) report(o, g, r);
  const bool wrong = r.fused.wrong > 0 || r.unfused.wrong > 0 || r.bulkRuntime.wrong > 0 ||
                     r.baseline.bulkNativeWrong > 0 || r.baseline.bulkRingWrong > 0 ||
                     r.baseline.bulkPlainNativeWrong > 0;
  if (wrong && r.rank == 0) std::printf("# FAILED: wrong elements (see the wrong column)\n");
  return wrong ? 3 : 0;
}

}  // namespace
}  // namespace kolo::bench

int main(int argc, char** argv) {
  kolo::bench::Options options;
  std::string error;
  if (!kolo::bench::parseOptions(argc, argv, &options, &error)) {
    if (!error.empty()) std::fprintf(stderr, "kolo-runtime-bench: %s\n", error.c_str());
    std::fputs(kolo::bench::kUsage, error.empty() ? stdout : stderr);
    return error.empty() ? 0 : 2;
  }
  return kolo::bench::run(options);
}
