// SPDX-License-Identifier: Apache-2.0
// Autotune (KOLO_AUTOTUNE, Horovod's HOROVOD_AUTOTUNE): while a job runs, rank 0 measures the
// throughput of its allreduces under one set of knobs after another (hierarchical allreduce on
// or off, the fusion threshold, the cycle time and the two allreduce crossovers of
// ops/select.cc), keeps the best set and, once the sample budget is spent or the search has
// converged, fixes it for the rest of the job.
//
// How a sample is measured (as Horovod's ParameterManager does): a step is one execution of
// one allreduce name; a sub-sample ends when some name has run KOLO_AUTOTUNE_STEPS_PER_SAMPLE
// more steps, and is scored as the allreduce bytes executed divided by its wall time (bytes per
// second); a sample is kSubSamples sub-samples and scores their median, which ignores a stray
// slow or fast stretch. The first KOLO_AUTOTUNE_WARMUP_SAMPLES samples are discarded (start-up,
// caches, first-touch allocations). Every scored sample is written to KOLO_AUTOTUNE_LOG as one
// CSV line with the parameters it ran under; the last line repeats the best sample, as Horovod's
// log does.
//
// How the next point is chosen: not Horovod's Bayesian optimisation, but a compass (pattern)
// search over a grid of candidate values per knob (ParameterSearch below). It starts at the
// configured values, polls the neighbours two grid steps away along each knob in turn, moves
// to the first neighbour that scores better (and tries the same direction again first), and
// when no neighbour improves halves the step to one grid step (a categorical knob, hierarchical
// allreduce, has no distances: its neighbour is the other value at either step; it is polled
// first, one sample for a choice that moved allreduce time up to several-fold in the
// hierarchical allreduce runs of bench/RESULTS.md, and the knobs after it are then polled on the better path);
// when none improves at one step either, the point is a local optimum on the grid and the
// search has converged. It never measures a point twice. Compass search converges to a local
// optimum for any score that is unimodal along each knob (Kolda, Lewis, Torczon: "Optimization
// by direct search", SIAM Review 2003), needs no model, and costs at most 2 samples per knob per
// move; with 4-5 knobs and the default budget of 20 samples that is a few moves, which is what
// the throughput curves of these knobs (one broad maximum each) need.
// KOLO_AUTOTUNE_GAUSSIAN_PROCESS_NOISE is accepted and validated for Horovod's job scripts but
// has no effect (there is no Gaussian process).
//
// Which knobs: those the user did not set (Config::Autotune::*Set). A set knob keeps its value
// (Horovod's "constant parameters"). The crossovers are searched only where they choose
// something (ops::allreduceCrossoversUsed): on shared memory every allreduce is native, and
// samples spent on them would only measure noise. Hierarchical allreduce (host tensors) is
// searched, {hierarchical (KOLO_HIERARCHICAL_ALLREDUCE=auto), flat (off)} starting at auto, only
// where it chooses something (hierarchicalUsed: the global set spans several hosts holding the
// same number > 1 of its ranks, and KOLO_ALLREDUCE_ALGORITHM is auto, ops::useHierarchical) and
// KOLO_HIERARCHICAL_ALLREDUCE is unset (or auto); switching it between rounds is safe, as the
// host groups (ops::HierarchyCache) are built at a set's first hierarchical allreduce, the same
// batch on every rank, and then kept whichever way later rounds choose. Its CSV column then
// shows the tried value (1 hierarchical, 0 flat); otherwise, as hierarchical_allgather and
// cache_enabled, its configured value (Horovod's columns), not tuned: switching the response
// cache on and off would throw away every rank's slots.
//
// Lockstep: only rank 0 has an Autotuner. A new parameter set becomes a proposal; rank 0's
// coordinator then forces a full round, carries the proposal in that round's response list
// (ResponseList::tuning) and every rank applies it in that same round, before executing it;
// rank 0 then calls applied(), which starts the next sample (ops run between the end of a
// sample and the round that applies the next point count for neither).
//
// Ownership: the Coordinator owns its Autotuner. Threading: not thread-safe; the coordinator
// thread calls everything (tests call it from theirs). Blocking: observe() may write a line to
// the log file. Errors: open() returns kIo naming the file when it cannot be created (the
// coordinator then tunes without a log and warns); later write failures are ignored, as
// Horovod's are.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "base/clock.h"
#include "base/config.h"
#include "base/log.h"
#include "ops/device_plan.h"
#include "ops/message.h"

namespace kolo {

// Compass search over a grid; pure logic, no clock, no I/O (see the header essay).
class ParameterSearch {
 public:
  struct Dim {
    std::vector<double> levels;  // candidate values, ascending
    size_t start = 0;            // index of the starting value
    bool fixed = false;          // never moved
    bool categorical = false;    // no distances: a neighbour is one level away at any step
  };
  // Whether a point (indices into each Dim's levels) may be measured; the start always may.
  using Admissible = std::function<bool(const std::vector<size_t>& point)>;
  // maxSamples >= 1: scored samples before the search stops at its best point. `admissible`
  // (optional) rules out points that make no sense together; the search steps over them.
  ParameterSearch(std::vector<Dim> dims, int maxSamples, Admissible admissible = nullptr);

  // The point to measure next (indices into each Dim's levels); best() once done().
  const std::vector<size_t>& current() const { return current_; }
  // The score of current(); moves on. Returns done().
  bool report(double score);
  // The budget is spent, the search converged, or nothing is tunable (every Dim fixed).
  bool done() const { return done_; }
  const std::vector<size_t>& best() const { return center_; }
  double bestScore() const { return centerScore_; }
  int samples() const { return samples_; }
  double value(size_t dim, size_t index) const { return dims_[dim].levels[index]; }

 private:
  void poll();     // fills pending_ around center_ at step_
  void advance();  // picks the next unmeasured point, or finishes

  std::vector<Dim> dims_;
  int maxSamples_;
  Admissible admissible_;
  int samples_ = 0;
  bool done_ = false;
  bool haveCenter_ = false;
  std::vector<size_t> center_;
  double centerScore_ = 0;
  std::vector<size_t> current_;
  size_t step_ = 2;
  std::vector<std::pair<size_t, int>> pending_;  // (dim, direction) still to poll
  std::pair<size_t, int> lastMove_{0, 0};        // direction of the last improvement
  std::pair<size_t, int> lastTried_{0, 0};       // direction of current_ from center_
  std::map<std::vector<size_t>, double> measured_;
};

class Autotuner {
 public:
  static constexpr int kSubSamples = 5;  // Horovod's SAMPLES: median of this many
  static constexpr const char* kCsvHeader =
      "hierarchical_allreduce,hierarchical_allgather,cache_enabled,cycle_time_ms,"
      "tensor_fusion_threshold,allreduce_hd_min_bytes,allreduce_ring_min_bytes,score";
  // The search's dimensions, in polling order. kHierarchical's levels are ops::Hierarchical
  // values: kAuto (hierarchical) first, kOff (flat).
  enum Knob : size_t {
    kHierarchical = 0,
    kFusion = 1,
    kCycle = 2,
    kHdMin = 3,
    kRingMin = 4,
    kKnobs = 5
  };

  // `config` gives the sample sizes, the log path, the starting values and which knobs are
  // fixed; `ranks` resolves the crossovers' table defaults. log may be null (tests).
  // crossoversUsed = false (ops::allreduceCrossoversUsed: the transport's native allreduce runs
  // every size, as on shared memory) keeps the two crossovers out of the search.
  // hierarchicalUsed (ops::useHierarchical for some size of a global-set allreduce under
  // `config`: the hosts allow it and KOLO_ALLREDUCE_ALGORITHM is auto) puts hierarchical
  // allreduce in the search, when config leaves it auto.
  Autotuner(const Config& config, int ranks, Logger log, bool crossoversUsed = true,
            bool hierarchicalUsed = false);

  // Opens KOLO_AUTOTUNE_LOG (truncating it) and writes the CSV header; ok when no log is set.
  Status open();
  // Rank 0, after each round's execution: the round's responses (allreduces are counted).
  void observe(const std::vector<Response>& executed, Clock::time_point now);
  // A parameter set is waiting to be sent to every rank.
  bool hasProposal() const { return proposal_; }
  TuningParams takeProposal();
  // The round that carried the last proposal has applied it (starts the next sample).
  void applied(Clock::time_point now);
  // Still searching (false once the best set is fixed, or when nothing is tunable).
  bool active() const { return active_; }
  // Whether hierarchical allreduce is one of the searched knobs.
  bool tunesHierarchical() const { return tunesHierarchical_; }

  // The values behind search indices (tests, logging).
  TuningParams paramsAt(const std::vector<size_t>& point, bool active) const;
  const ParameterSearch& search() const { return search_; }
  int scoredSamples() const { return search_.samples(); }

 private:
  void sampleDone(double score);
  // "fusion 1048576 B, cycle 1 ms, hd from .. B, ring from .. B", led by "hierarchical, " or
  // "flat, " while that is tuned.
  std::string describe(const TuningParams& p) const;
  void writeLine(const TuningParams& p, double score);

  Config::Autotune opts_;
  bool hierarchicalAllreduce_, cacheEnabled_;  // the configured values of two CSV columns
  bool tunesHierarchical_;
  Logger log_;
  ParameterSearch search_;
  std::ofstream file_;
  bool active_ = true;
  bool proposal_ = false;
  bool waiting_ = false;  // a proposal is out: observations are ignored until applied()
  TuningParams pending_;
  int warmupRemaining_ = 0;
  // The sample being measured.
  std::map<OpKey, int> steps_;  // executions per op (the same name in two sets is two ops)
  int subSample_ = 0;
  std::array<double, kSubSamples> subScores_{};
  double bytes_ = 0;
  Clock::time_point subStart_{};
  bool started_ = false;
};

// Whether hierarchical allreduce chooses anything for a set with this layout (null: host names
// unknown) under `cfg`: ops::useHierarchical takes it for some size (it takes it from
// kHierarchicalMinBytes up, so the largest size decides): the hosts hold the same number > 1 of
// the set's members, more than one host, and KOLO_ALLREDUCE_ALGORITHM is auto (or it is forced
// on). The coordinator's `hierarchicalUsed` for the global set.
bool hierarchicalAllreduceUsed(const ops::AlgorithmConfig& cfg, const ops::HostLayout* layout);

// Sets the knobs of `p` in `config`, as every rank does in the round that carries them (the
// coordinator's applyTuning). Returns whether the hierarchical setting changed.
bool applyTuningParams(const TuningParams& p, Config* config);

}  // namespace kolo
