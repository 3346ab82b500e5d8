// SPDX-License-Identifier: Apache-2.0
// Gloo's ring and halving-doubling allreduce, called directly (see gloo_algorithms.h).
//
// The context: connected with the Gloo transport's own rendezvous (gloo_detail::connectGroup,
// the full mesh kolo's transport builds, but unwrapped: Gloo's own TCP context and buffers, not
// the interposed ones kolo's transport uses to interrupt waits) on a device that listens where kolo's transport would
// (bootstrap/registry.cc): KOLO_GLOO_IFACE when set, loopback when every rank is on this host,
// else this host's name. Ring: gloo::allreduce with the RING algorithm, the same entry point
// kolo's Gloo transport calls for its native allreduce, but with Gloo's own float sum instead
// of kolo's reduction callback. Halving-doubling: one gloo::AllreduceHalvingDoubling<float>
// object (it registers its buffers with the pairs once, as Gloo's benchmark does), run() per
// iteration. Gloo signals errors by exception; they come back as a Status naming the algorithm.
// The job's own transport (kolo's ring) only synchronizes the ranks before the context goes.
#include "bench/gloo_algorithms.h"

#include <gloo/allreduce.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/math.h>
#include <gloo/transport/tcp/device.h>

#include <chrono>
#include <exception>
#include <memory>

#include "base/clock.h"
#include "ops/collectives.h"
#include "transport/gloo/gloo_internal.h"

namespace kolo::bench {
namespace {

template <typename Fn>
Status timeIt(long warmup, long iters, Fn fn, std::vector<double>* us) {
  for (long i = 0; i < warmup; ++i) fn();
  us->assign(static_cast<size_t>(iters), 0.0);
  for (double& x : *us) {
    const auto start = Clock::now();
    fn();
    x = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
  }
  return Status::ok();
}

Status glooFailure(const char* what, int rank, const std::exception& e) {
  const std::string text = gloo_detail::glooMessage(e);
  const bool timedOut =
      text.find("Timed out") != std::string::npos || text.find("timed out") != std::string::npos;
  return Status(timedOut ? ErrorCode::kTimeout : ErrorCode::kPeerLost,
                std::string("gloo ") + what + " allreduce on rank " + std::to_string(rank) +
                    " failed: " + text);
}

}  // namespace

Status timeGlooAlgorithms(const BenchJob& job, const std::string& keyPrefix, size_t count,
                          long warmup, long iters, GlooAlgorithmTimes* out) {
  const Config& cfg = job.config;
  KOLO_REQUIRE(job.store != nullptr, kInvalidArgument,
               "Gloo's algorithms need the job's rendezvous store (run under kolorun)");
  KOLO_REQUIRE(count > 0, kInvalidArgument, "Gloo's algorithms: empty allreduce");
  gloo::transport::tcp::attr attr;
  if (!cfg.glooIface.empty()) {
    attr.iface = cfg.glooIface;
  } else if (cfg.localSize == cfg.size) {
    attr.hostname = "127.0.0.1";
  } else {
    attr.hostname = cfg.hostname;
  }
  std::shared_ptr<gloo::transport::Device> device;
  try {
    device = gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    return Status(ErrorCode::kInvalidArgument,
                  "gloo: cannot listen on '" + (attr.iface.empty() ? attr.hostname : attr.iface) +
                      "': " + gloo_detail::glooMessage(e));
  }
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(cfg.timeoutSeconds * 1000.0));
  const auto startTimeout =
      std::chrono::milliseconds(static_cast<int64_t>(cfg.startTimeoutSeconds * 1000.0));
  std::vector<int> globals(static_cast<size_t>(cfg.size));
  for (int i = 0; i < cfg.size; ++i) globals[static_cast<size_t>(i)] = i;
  std::shared_ptr<gloo_detail::GlooShared> shared;
  KOLO_RETURN_IF_ERROR(gloo_detail::connectGroup(makePrefixStore(job.store, keyPrefix), cfg.rank,
                                                 cfg.size, device, startTimeout, globals, nullptr,
                                                 &shared,
                                                 /*watched=*/false));
  std::shared_ptr<gloo::Context> context = shared->context;
  context->setTimeout(timeout);

  std::vector<float> buf(count, 1.0f);
  uint32_t tag = 0;
  try {
    auto ring = [&] {
      gloo::AllreduceOptions opts(context);
      opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
      opts.setOutput(buf.data(), count);
      opts.setReduceFunction(
          static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
      opts.setTag(tag++);
      opts.setTimeout(timeout);
      gloo::allreduce(opts);
    };
    KOLO_RETURN_IF_ERROR(timeIt(warmup, iters, ring, &out->ringUs));
  } catch (const std::exception& e) {
    return glooFailure("ring", cfg.rank, e);
  }
  try {
    gloo::AllreduceHalvingDoubling<float> hd(context, {buf.data()}, static_cast<int>(count));
    KOLO_RETURN_IF_ERROR(timeIt(
        warmup, iters, [&] { hd.run(); }, &out->halvingDoublingUs));
  } catch (const std::exception& e) {
    return glooFailure("halving-doubling", cfg.rank, e);
  }
  // A rank that destroyed its context while a peer still waits in its last run() (for a send
  // completion, or halving-doubling's ready notifications) fails that peer with "Connection
  // closed by peer": every rank leaves both loops before any context is destroyed.
  int32_t done = 1;
  return ops::ringAllreduce(*job.transport, &done, 1, DataType::kInt32, ReduceOp::kSum, 4096);
}

}  // namespace kolo::bench
