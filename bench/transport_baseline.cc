// SPDX-License-Identifier: Apache-2.0
// Times are taken per iteration on every rank and reduced with MAX over the ranks (a ring
// allreduce of the whole vector after the loop, so the reduction never sits inside the timed
// region), exactly as kolo-runtime-bench does for the runtime cases.
#include "bench/transport_baseline.h"

#include <chrono>
#include <vector>

#include "base/clock.h"
#include "bench/bench_job.h"
#include "bench/gloo_algorithms.h"
#include "bench/pattern.h"
#include "ops/collectives.h"
#include "transport/shm/shm_transport.h"

namespace kolo::bench {
namespace {

ops::AlgorithmConfig forced(ops::Algorithm a, size_t segmentBytes) {
  ops::AlgorithmConfig cfg;
  cfg.allreduce = a;
  cfg.segmentBytes = segmentBytes;
  return cfg;
}

Status maxOverRanks(Transport& t, std::vector<double>* v) {
  return ops::ringAllreduce(t, v->data(), v->size(), DataType::kFloat64, ReduceOp::kMax, 4096);
}

// Runs `fn` warmup + iters times; per-iteration microseconds, MAX over ranks.
template <typename Fn>
Status timeLoop(Transport& t, long warmup, long iters, Fn fn, std::vector<double>* us) {
  for (long i = 0; i < warmup; ++i) KOLO_RETURN_IF_ERROR(fn());
  us->assign(static_cast<size_t>(iters), 0.0);
  for (double& x : *us) {
    const auto start = Clock::now();
    KOLO_RETURN_IF_ERROR(fn());
    x = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
  }
  return maxOverRanks(t, us);
}

// The bulk case with one algorithm: mean ms per allreduce, then one checked run.
Status bulk(Transport& t, const BaselineOptions& o, const ops::AlgorithmConfig& cfg,
            std::vector<float>* buf, double* ms, int64_t* wrong) {
  const size_t n = buf->size();
  fillPattern(buf->data(), n, DataType::kFloat32, ReduceOp::kSum, t.rank(), 0);
  auto once = [&] {
    return ops::allreduce(t, cfg, buf->data(), n, DataType::kFloat32, ReduceOp::kSum);
  };
  std::vector<double> us;
  KOLO_RETURN_IF_ERROR(timeLoop(t, o.warmupSteps, o.steps, once, &us));
  *ms = statsOf(us).mean / 1000.0;
  fillPattern(buf->data(), n, DataType::kFloat32, ReduceOp::kSum, t.rank(), 0);
  KOLO_RETURN_IF_ERROR(once());
  int64_t bad = static_cast<int64_t>(
      countWrongReduced(buf->data(), n, DataType::kFloat32, ReduceOp::kSum, t.size(), 0));
  KOLO_RETURN_IF_ERROR(ops::ringAllreduce(t, &bad, 1, DataType::kInt64, ReduceOp::kSum, 4096));
  *wrong = bad;
  return Status::ok();
}

}  // namespace

Status measureTransportBaseline(const BaselineOptions& o, BaselineResult* out) {
  BenchJob job;
  KOLO_RETURN_IF_ERROR(connectBenchJob("kolo-runtime-bench/", &job));
  Transport& t = *job.transport;
  const size_t segment = job.config.algorithms.segmentBytes;
  const ops::AlgorithmConfig ring = forced(ops::Algorithm::kRing, segment);
  const ops::AlgorithmConfig native = forced(ops::Algorithm::kNative, segment);
  out->transport = describeTransport(t);
  out->ranks = t.size();
  out->nativeAvailable = t.capabilities().nativeAllreduce;

  float value = 1.0f;
  std::vector<double> us;
  if (out->nativeAvailable) {
    auto once = [&] {
      return ops::allreduce(t, native, &value, 1, DataType::kFloat32, ReduceOp::kSum,
                            &out->nativeName);
    };
    KOLO_RETURN_IF_ERROR(timeLoop(t, o.latencyWarmup, o.latencyIters, once, &us));
    out->latNative = statsOf(us);
  }
  auto ringOnce = [&] {
    return ops::allreduce(t, ring, &value, 1, DataType::kFloat32, ReduceOp::kSum);
  };
  KOLO_RETURN_IF_ERROR(timeLoop(t, o.latencyWarmup, o.latencyIters, ringOnce, &us));
  out->latRing = statsOf(us);

  // Gloo's own algorithms, on a Gloo context of their own (also under KOLO_SHM: the base).
  if (job.store != nullptr && std::string(controlTransport(t).name()) == "gloo") {
    GlooAlgorithmTimes g;
    const Status s =
        timeGlooAlgorithms(job, "gloo-algorithms/", 1, o.latencyWarmup, o.latencyIters, &g);
    if (s.code() != ErrorCode::kUnsupported) {
      KOLO_RETURN_IF_ERROR(s);
      KOLO_RETURN_IF_ERROR(maxOverRanks(t, &g.ringUs));
      KOLO_RETURN_IF_ERROR(maxOverRanks(t, &g.halvingDoublingUs));
      out->latGlooRing = statsOf(g.ringUs);
      out->latGlooHd = statsOf(g.halvingDoublingUs);
      out->glooAlgorithms = true;
    }
  }

  if (o.bulkCount > 0) {
    std::vector<float> buf(o.bulkCount);
    if (out->nativeAvailable) {
      KOLO_RETURN_IF_ERROR(bulk(t, o, native, &buf, &out->bulkNativeMs, &out->bulkNativeWrong));
    }
    KOLO_RETURN_IF_ERROR(bulk(t, o, ring, &buf, &out->bulkRingMs, &out->bulkRingWrong));
  }
  const bool overShm = &controlTransport(t) != &t;
  job.transport.reset();
  if (overShm && o.bulkCount > 0) {
    BenchJob plain;
    KOLO_RETURN_IF_ERROR(connectBenchJob("kolo-runtime-bench/plain/", &plain, true));
    Transport& p = *plain.transport;
    out->plainTransport = describeTransport(p);
    if (p.capabilities().nativeAllreduce) {
      std::vector<float> buf(o.bulkCount);
      float one = 1.0f;  // names the native step
      KOLO_RETURN_IF_ERROR(ops::allreduce(p, native, &one, 1, DataType::kFloat32, ReduceOp::kSum,
                                          &out->plainNativeName));
      KOLO_RETURN_IF_ERROR(
          bulk(p, o, native, &buf, &out->bulkPlainNativeMs, &out->bulkPlainNativeWrong));
    }
    plain.transport.reset();
  }
  return Status::ok();
}

}  // namespace kolo::bench
