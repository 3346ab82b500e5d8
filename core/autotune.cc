// SPDX-License-Identifier: Apache-2.0
#include "core/autotune.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>

#include "ops/collectives.h"
#include "ops/hierarchical.h"

namespace kolo {

// ---- ParameterSearch ---------------------------------------------------------------------------

ParameterSearch::ParameterSearch(std::vector<Dim> dims, int maxSamples, Admissible admissible)
    : dims_(std::move(dims)),
      maxSamples_(std::max(1, maxSamples)),
      admissible_(std::move(admissible)) {
  bool tunable = false;
  for (const Dim& d : dims_) {
    center_.push_back(d.start);
    if (!d.fixed && d.levels.size() > 1) tunable = true;
  }
  current_ = center_;
  done_ = !tunable;
}

bool ParameterSearch::report(double score) {
  if (done_) return true;
  ++samples_;
  measured_[current_] = score;
  if (!haveCenter_) {
    haveCenter_ = true;
    centerScore_ = score;
    poll();
  } else if (score > centerScore_) {
    // Opportunistic: move at the first improvement and try the same direction again first.
    lastMove_ = lastTried_;
    center_ = current_;
    centerScore_ = score;
    poll();
  }
  advance();
  return done_;
}

void ParameterSearch::poll() {
  pending_.clear();
  if (lastMove_.second != 0) pending_.push_back(lastMove_);
  for (size_t d = 0; d < dims_.size(); ++d) {
    if (dims_[d].fixed) continue;
    for (int dir : {+1, -1}) {
      if (lastMove_.second != 0 && lastMove_ == std::make_pair(d, dir)) continue;
      pending_.push_back({d, dir});
    }
  }
  std::reverse(pending_.begin(), pending_.end());  // taken from the back
}

void ParameterSearch::advance() {
  while (samples_ < maxSamples_) {
    while (!pending_.empty()) {
      auto [d, dir] = pending_.back();
      pending_.pop_back();
      const auto here = static_cast<std::ptrdiff_t>(center_[d]);
      const size_t step = dims_[d].categorical ? 1 : step_;
      const auto there = here + dir * static_cast<std::ptrdiff_t>(step);
      if (there < 0 || there >= static_cast<std::ptrdiff_t>(dims_[d].levels.size())) continue;
      std::vector<size_t> point = center_;
      point[d] = static_cast<size_t>(there);
      // Measured before (from another center): it scored no better than a center we left.
      if (measured_.count(point)) continue;
      if (admissible_ && !admissible_(point)) continue;
      current_ = point;
      lastTried_ = {d, dir};
      return;
    }
    if (step_ == 1) break;  // no neighbour improves at the finest step: converged
    step_ = 1;
    poll();
  }
  done_ = true;
  current_ = center_;
}

// ---- Autotuner ---------------------------------------------------------------------------------

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

// levels with `value` added (kept ascending); *index receives its position.
std::vector<double> withValue(std::vector<double> levels, double value, size_t* index) {
  if (std::find(levels.begin(), levels.end(), value) == levels.end()) levels.push_back(value);
  std::sort(levels.begin(), levels.end());
  *index = static_cast<size_t>(std::find(levels.begin(), levels.end(), value) - levels.begin());
  return levels;
}

ParameterSearch::Dim dim(std::vector<double> levels, double start, bool fixed) {
  ParameterSearch::Dim d;
  d.levels = withValue(std::move(levels), start, &d.start);
  d.fixed = fixed;
  return d;
}

double level(ops::Hierarchical h) { return static_cast<double>(static_cast<int>(h)); }

// Whether the search includes hierarchical allreduce: it chooses something on this topology
// (hierarchicalUsed) and the user left it auto.
bool hierarchicalTunable(const Config& c, bool hierarchicalUsed) {
  return hierarchicalUsed && c.algorithms.hierarchicalAllreduce == ops::Hierarchical::kAuto;
}

// The grids: Horovod searches 0-64 MB of fusion and 1-100 ms of cycle time; kolo's defaults
// (128 MB, 1 ms) and its faster rounds widen both. The crossovers span the sizes where the
// measured table (ops/select.cc) puts them at 2 to 4 ranks and beyond.
std::vector<ParameterSearch::Dim> makeDims(const Config& c, int ranks, bool crossoversUsed,
                                           bool hierarchicalUsed) {
  std::vector<double> fusion = {0};
  for (int mb = 1; mb <= 128; mb *= 2) fusion.push_back(mb * kMiB);
  const ops::AllreduceCrossovers x =
      ops::effectiveCrossovers(c.algorithms.allreduceCrossovers, ranks);
  const auto& at = c.autotune;
  std::vector<ParameterSearch::Dim> dims(Autotuner::kKnobs);
  // Hierarchical (auto) first, where it starts; flat (off). Untuned: the configured value alone.
  const ops::Hierarchical configured = c.algorithms.hierarchicalAllreduce;
  if (hierarchicalTunable(c, hierarchicalUsed)) {
    dims[Autotuner::kHierarchical].levels = {level(ops::Hierarchical::kAuto),
                                             level(ops::Hierarchical::kOff)};
    dims[Autotuner::kHierarchical].categorical = true;
  } else {
    dims[Autotuner::kHierarchical] = dim({}, level(configured), true);
  }
  dims[Autotuner::kFusion] =
      dim(fusion, static_cast<double>(c.fusionThresholdBytes), at.fusionThresholdSet);
  dims[Autotuner::kCycle] =
      dim({0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100}, c.cycleTimeMs, at.cycleTimeSet);
  dims[Autotuner::kHdMin] = dim({4096, 16384, 65536, 262144, 524288, 1048576, 4194304},
                                static_cast<double>(x.hdMinBytes), at.hdMinSet || !crossoversUsed);
  dims[Autotuner::kRingMin] =
      dim({262144, 1048576, 4194304, 8388608, 16777216, 67108864},
          static_cast<double>(x.ringMinBytes), at.ringMinSet || !crossoversUsed);
  return dims;
}

// Halving-doubling from above the ring's crossover never runs: such a point measures the same
// thing as hd == ring, so the search steps over it (the start, from the table or the
// environment, is measured as it is).
ParameterSearch makeSearch(const Config& c, int ranks, bool crossoversUsed, bool hierarchicalUsed) {
  std::vector<ParameterSearch::Dim> dims = makeDims(c, ranks, crossoversUsed, hierarchicalUsed);
  auto ordered = [hd = dims[Autotuner::kHdMin].levels,
                  ring = dims[Autotuner::kRingMin].levels](const std::vector<size_t>& point) {
    return hd[point[Autotuner::kHdMin]] <= ring[point[Autotuner::kRingMin]];
  };
  return ParameterSearch(std::move(dims), c.autotune.maxSamples, ordered);
}

}  // namespace

Autotuner::Autotuner(const Config& config, int ranks, Logger log, bool crossoversUsed,
                     bool hierarchicalUsed)
    : opts_(config.autotune),
      hierarchicalAllreduce_(config.hierarchicalAllreduce),
      cacheEnabled_(config.cacheCapacity > 0),
      tunesHierarchical_(hierarchicalTunable(config, hierarchicalUsed)),
      log_(std::move(log)),
      search_(makeSearch(config, ranks, crossoversUsed, hierarchicalUsed)) {
  warmupRemaining_ = opts_.warmupSamples;
  active_ = !search_.done();
  if (log_ && tunesHierarchical_) {
    log_->info("autotune: hierarchical allreduce is tuned too (hierarchical or flat)");
  }
  if (log_ && !crossoversUsed) {
    log_->info(
        "autotune: the allreduce crossovers are not tuned (the transport's native "
        "allreduce runs every size)");
  }
  if (log_ && !active_) {
    log_->info("autotune: every tunable knob is set explicitly; nothing to tune");
  }
}

Status Autotuner::open() {
  if (opts_.logPath.empty()) return Status::ok();
  file_.open(opts_.logPath, std::ios::out | std::ios::trunc);
  if (!file_.good()) {
    return Status(ErrorCode::kIo, "cannot create the autotune log '" + opts_.logPath +
                                      "' (KOLO_AUTOTUNE_LOG): " + std::strerror(errno));
  }
  file_ << kCsvHeader << std::endl;
  return Status::ok();
}

TuningParams Autotuner::paramsAt(const std::vector<size_t>& point, bool active) const {
  TuningParams p;
  p.fusionThresholdBytes = static_cast<int64_t>(search_.value(kFusion, point[kFusion]));
  p.cycleTimeMs = search_.value(kCycle, point[kCycle]);
  p.allreduceHdMinBytes = static_cast<int64_t>(search_.value(kHdMin, point[kHdMin]));
  p.allreduceRingMinBytes = static_cast<int64_t>(search_.value(kRingMin, point[kRingMin]));
  p.hierarchicalAllreduce = static_cast<ops::Hierarchical>(
      static_cast<int>(search_.value(kHierarchical, point[kHierarchical])));
  p.active = active;
  return p;
}

void Autotuner::observe(const std::vector<Response>& executed, Clock::time_point now) {
  if (!active_ || waiting_) return;
  double bytes = 0;
  bool any = false;
  bool close = false;
  const int64_t stepsNeeded = static_cast<int64_t>(subSample_ + 1) * opts_.stepsPerSample;
  for (const Response& r : executed) {
    if (r.kind != Response::Kind::kOk || r.type != OpType::kAllreduce) continue;
    int64_t n = 1;
    for (int64_t d : r.shape) n *= d;
    bytes += static_cast<double>(n) * static_cast<double>(sizeOf(r.dtype));
    any = true;
    if (++steps_[keyOf(r)] >= stepsNeeded) close = true;  // per (process set, name)
  }
  if (!any) return;
  if (!started_) {
    // Nothing measured the time this first round took: its bytes are not counted.
    started_ = true;
    subStart_ = now;
    return;
  }
  bytes_ += bytes;
  if (!close) return;
  const double seconds = std::max(std::chrono::duration<double>(now - subStart_).count(), 1e-9);
  subScores_[static_cast<size_t>(subSample_++)] = bytes_ / seconds;
  bytes_ = 0;
  subStart_ = now;
  if (subSample_ < kSubSamples) return;
  std::array<double, kSubSamples> sorted = subScores_;
  std::sort(sorted.begin(), sorted.end());
  subSample_ = 0;
  steps_.clear();
  sampleDone(sorted[kSubSamples / 2]);
}

void Autotuner::sampleDone(double score) {
  if (warmupRemaining_ > 0) {
    --warmupRemaining_;
    if (log_) log_->info("autotune: warming up ({} remaining)", warmupRemaining_);
    return;
  }
  const TuningParams measured = paramsAt(search_.current(), true);
  writeLine(measured, score);
  if (log_) {
    log_->info("autotune: sample {} [{}] score {:.0f} B/s", search_.samples() + 1,
               describe(measured), score);
  }
  if (search_.report(score)) {
    active_ = false;
    pending_ = paramsAt(search_.best(), false);
    writeLine(pending_, search_.bestScore());
    if (log_) {
      log_->info("autotune: best after {} samples [{}] score {:.0f} B/s; fixed from now on",
                 search_.samples(), describe(pending_), search_.bestScore());
    }
  } else {
    pending_ = paramsAt(search_.current(), true);
  }
  proposal_ = true;
  waiting_ = true;
}

TuningParams Autotuner::takeProposal() {
  proposal_ = false;
  return pending_;
}

void Autotuner::applied(Clock::time_point now) {
  waiting_ = false;
  subStart_ = now;
  bytes_ = 0;
  subSample_ = 0;
  steps_.clear();
}

std::string Autotuner::describe(const TuningParams& p) const {
  std::string s;
  if (tunesHierarchical_) {
    s = p.hierarchicalAllreduce == ops::Hierarchical::kOff ? "flat, " : "hierarchical, ";
  }
  return s + "fusion " + std::to_string(p.fusionThresholdBytes) + " B, cycle " +
         formatDouble(p.cycleTimeMs) + " ms, hd from " + std::to_string(p.allreduceHdMinBytes) +
         " B, ring from " + std::to_string(p.allreduceRingMinBytes) + " B";
}

void Autotuner::writeLine(const TuningParams& p, double score) {
  if (!file_.is_open()) return;
  // hierarchical_allreduce: the tried value while tuned (1 hierarchical, 0 flat), otherwise the
  // configured one.
  const bool hierarchical = tunesHierarchical_ ? p.hierarchicalAllreduce != ops::Hierarchical::kOff
                                               : hierarchicalAllreduce_;
  file_ << (hierarchical ? 1 : 0) << ",0," << (cacheEnabled_ ? 1 : 0) << "," << p.cycleTimeMs << ","
        << static_cast<double>(p.fusionThresholdBytes) / kMiB << "," << p.allreduceHdMinBytes << ","
        << p.allreduceRingMinBytes << "," << std::llround(score) << std::endl;
}

bool hierarchicalAllreduceUsed(const ops::AlgorithmConfig& cfg, const ops::HostLayout* layout) {
  return layout != nullptr &&
         ops::useHierarchical(cfg, *layout, std::numeric_limits<size_t>::max());
}

bool applyTuningParams(const TuningParams& p, Config* config) {
  config->fusionThresholdBytes = p.fusionThresholdBytes;
  config->cycleTimeMs = p.cycleTimeMs;
  ops::AlgorithmConfig& a = config->algorithms;
  a.allreduceCrossovers.hdMinBytes = static_cast<size_t>(p.allreduceHdMinBytes);
  a.allreduceCrossovers.ringMinBytes = static_cast<size_t>(p.allreduceRingMinBytes);
  const bool changed = a.hierarchicalAllreduce != p.hierarchicalAllreduce;
  a.hierarchicalAllreduce = p.hierarchicalAllreduce;
  return changed;
}

}  // namespace kolo
