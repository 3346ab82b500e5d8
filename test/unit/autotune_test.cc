// SPDX-License-Identifier: Apache-2.0
// The autotuner without threads (core/autotune.h): the compass search on synthetic scores
// converges to the best point and fixes it after its budget, never moves a fixed knob; the
// Autotuner discards warm-up samples, logs one CSV line per scored sample plus the best, and
// stops proposing once fixed; hierarchical allreduce is searched only where the hosts make it a
// choice and the user left it auto, and applying a set switches the config; the response list
// carries the parameters; Config reads the knobs.
#include "core/autotune.h"

#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>

#include "base/config.h"
#include "ops/collectives.h"
#include "ops/hierarchical.h"
#include "ops/message.h"

using namespace kolo;

namespace {

std::vector<ParameterSearch::Dim> grid(std::vector<size_t> sizes, std::vector<size_t> start,
                                       std::vector<bool> fixed = {}) {
  std::vector<ParameterSearch::Dim> dims;
  for (size_t d = 0; d < sizes.size(); ++d) {
    ParameterSearch::Dim x;
    for (size_t i = 0; i < sizes[d]; ++i) x.levels.push_back(static_cast<double>(i));
    x.start = start[d];
    x.fixed = d < fixed.size() && fixed[d];
    dims.push_back(x);
  }
  return dims;
}

// Unimodal along every knob, best (1000) at `opt`.
double bowl(const std::vector<size_t>& p, const std::vector<size_t>& opt) {
  double s = 1000;
  for (size_t d = 0; d < p.size(); ++d) {
    double diff = static_cast<double>(p[d]) - static_cast<double>(opt[d]);
    s -= (d + 1) * diff * diff;
  }
  return s;
}

std::vector<std::string> lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

std::vector<std::string> split(const std::string& line) {
  std::vector<std::string> out;
  std::stringstream ss(line);
  for (std::string f; std::getline(ss, f, ',');) out.push_back(f);
  return out;
}

}  // namespace

TEST_CASE("compass search converges to the best point and never measures a point twice") {
  const std::vector<size_t> opt = {6, 1, 4, 2};
  ParameterSearch s(grid({9, 9, 7, 6}, {2, 6, 1, 5}), 100);
  std::set<std::vector<size_t>> seen;
  while (!s.done()) {
    REQUIRE(seen.insert(s.current()).second);
    s.report(bowl(s.current(), opt));
  }
  CHECK(s.best() == opt);
  CHECK(s.current() == opt);
  CHECK(s.bestScore() == 1000);
  CHECK(s.samples() < 100);  // converged, not out of budget
  CHECK(s.samples() == static_cast<int>(seen.size()));
}

TEST_CASE("the search stops after its sample budget at the best point measured") {
  const std::vector<size_t> opt = {8, 8, 0};
  ParameterSearch s(grid({9, 9, 9}, {0, 0, 8}), 5);
  double best = -1e9;
  std::vector<size_t> bestPoint;
  int reports = 0;
  while (!s.done()) {
    double score = bowl(s.current(), opt);
    if (score > best) best = score, bestPoint = s.current();
    s.report(score);
    ++reports;
  }
  CHECK(reports == 5);
  CHECK(s.best() == bestPoint);
  CHECK(s.bestScore() == best);
  CHECK(s.best() != opt);  // five samples are not enough to get there from the far corner
  CHECK(s.current() == bestPoint);
  CHECK(s.report(1e9));  // done: further scores change nothing
  CHECK(s.best() == bestPoint);
  CHECK(s.samples() == 5);
}

TEST_CASE("fixed knobs are never moved; all fixed means nothing to search") {
  ParameterSearch s(grid({9, 9, 9}, {4, 3, 4}, {false, true, false}), 50);
  while (!s.done()) {
    CHECK(s.current()[1] == 3);
    s.report(bowl(s.current(), {7, 8, 1}));
  }
  CHECK(s.best() == std::vector<size_t>{7, 3, 1});

  ParameterSearch none(grid({9, 9}, {2, 3}, {true, true}), 50);
  CHECK(none.done());
  CHECK(none.current() == std::vector<size_t>{2, 3});
}

TEST_CASE("the search steps over points its predicate rules out") {
  // Two knobs that must stay ordered (knob 0 <= knob 1), the best unordered point out of bounds.
  auto ordered = [](const std::vector<size_t>& p) { return p[0] <= p[1]; };
  ParameterSearch s(grid({9, 9}, {2, 6}), 100, ordered);
  std::set<std::vector<size_t>> seen;
  while (!s.done()) {
    CHECK(ordered(s.current()));
    REQUIRE(seen.insert(s.current()).second);
    s.report(bowl(s.current(), {7, 3}));
  }
  CHECK(ordered(s.best()));
  CHECK(s.best()[0] <= s.best()[1]);
  CHECK(s.bestScore() > bowl({2, 6}, {7, 3}));  // it still moved toward the best
}

namespace {

// Drives an Autotuner as the coordinator does: one allreduce of `bytes` per round; the round
// takes bytes / throughput(params in effect) seconds, or `warmupSeconds` per round while the
// warm-up rounds last (a fake, very fast start that must not count).
struct Driver {
  Autotuner tuner;
  TuningParams now;
  Clock::time_point t = Clock::now();
  std::vector<TuningParams> applied;

  Driver(const Config& c, int ranks, bool hierarchicalUsed = false)
      : tuner(c, ranks, nullptr, true, hierarchicalUsed) {
    now = tuner.paramsAt(tuner.search().current(), true);
  }
  void round(double throughput, double bytes) {
    if (tuner.hasProposal()) {
      now = tuner.takeProposal();
      applied.push_back(now);
      tuner.applied(t);
    }
    Response r;
    r.type = OpType::kAllreduce;
    r.name = "grad";
    r.dtype = DataType::kUInt8;
    r.shape = {static_cast<int64_t>(bytes)};
    t += std::chrono::nanoseconds(static_cast<int64_t>(bytes / throughput * 1e9));
    tuner.observe({r}, t);
  }
};

// Best at 8 MiB of fusion and 5 ms of cycle time (bytes per second).
double throughputOf(const TuningParams& p) {
  double mb = static_cast<double>(p.fusionThresholdBytes) / (1 << 20);
  double fusion = std::abs(std::log2(mb + 1) - std::log2(9.0));
  double cycle = std::abs(std::log10(p.cycleTimeMs) - std::log10(5.0));
  double ring = std::abs(std::log2(static_cast<double>(p.allreduceRingMinBytes)) - 22);
  return 1e9 / (1 + fusion + 2 * cycle + 0.5 * ring);
}

// Autotune on, with this many warm-up samples, steps per sample and samples in all.
Config tuningConfig(int warmupSamples, int stepsPerSample, int maxSamples) {
  Config c;
  c.autotune.enabled = true;
  c.autotune.warmupSamples = warmupSamples;
  c.autotune.stepsPerSample = stepsPerSample;
  c.autotune.maxSamples = maxSamples;
  return c;
}

// A fresh, empty file for an autotune log, removed when the test ends (also when it fails).
struct TempLog {
  std::string path;
  TempLog() {
    char name[] = "/tmp/kolo_autotune_test_XXXXXX";
    const int fd = mkstemp(name);
    REQUIRE(fd >= 0);
    close(fd);
    path = name;
  }
  ~TempLog() { std::remove(path.c_str()); }
};

}  // namespace

TEST_CASE("the autotuner discards warm-up samples, logs each sample and fixes the best") {
  const TempLog temp;
  const std::string& path = temp.path;
  Config c = tuningConfig(2, 3, 8);
  c.autotune.logPath = path;
  c.autotune.hdMinSet = true;  // as if KOLO_ALLREDUCE_HD_MIN_BYTES were set
  c.algorithms.allreduceCrossovers.hdMinBytes = 12345;
  Driver drv(c, 2);
  REQUIRE(drv.tuner.open().isOk());
  REQUIRE(drv.tuner.active());

  // One round starts the clock; each sample is 5 sub-samples of 3 steps (rounds).
  const int perSample = Autotuner::kSubSamples * 3;
  drv.round(1e9, 1000);
  for (int i = 0; i < 2 * perSample; ++i) drv.round(1e15, 1000);  // warm-up: absurdly fast
  CHECK(drv.tuner.scoredSamples() == 0);
  CHECK_FALSE(drv.tuner.hasProposal());  // warm-up samples propose nothing
  int rounds = 0;
  while (drv.tuner.active() && rounds < 100 * perSample) {
    drv.round(throughputOf(drv.now), 1000);
    ++rounds;
  }
  REQUIRE_FALSE(drv.tuner.active());
  CHECK(drv.tuner.scoredSamples() == 8);
  drv.round(throughputOf(drv.now), 1000);  // the round that applies the fixed set
  REQUIRE_FALSE(drv.applied.empty());
  const TuningParams fixed = drv.applied.back();
  CHECK_FALSE(fixed.active);
  for (size_t i = 0; i + 1 < drv.applied.size(); ++i) CHECK(drv.applied[i].active);
  for (const auto& p : drv.applied) CHECK(p.allreduceHdMinBytes == 12345);  // never tuned

  // Fixed from now on: no proposal, no log line, whatever the rounds measure.
  for (int i = 0; i < 10 * perSample; ++i) drv.round(1e15, 1000);
  CHECK_FALSE(drv.tuner.hasProposal());
  CHECK(drv.applied.back() == fixed);

  auto log = lines(path);
  REQUIRE(log.size() == 1 + 8 + 1);  // header, 8 samples, the best
  CHECK(log[0] == Autotuner::kCsvHeader);
  double best = 0;
  std::set<std::string> points;
  for (size_t i = 1; i < log.size(); ++i) {
    auto f = split(log[i]);
    REQUIRE(f.size() == 8);
    CHECK(f[0] == "0");      // hierarchical_allreduce, as configured
    CHECK(f[2] == "1");      // cache_enabled
    CHECK(f[5] == "12345");  // the fixed crossover
    const double score = std::stod(f[7]);
    CHECK(score < 1e10);  // no warm-up score was kept
    if (i + 1 < log.size()) {
      points.insert(f[3] + "," + f[4] + "," + f[6]);
      best = std::max(best, score);
    } else {
      CHECK(score == best);  // the last line is the best sample
    }
  }
  CHECK(points.size() == 8);  // every sample measured a different point
  // The fixed set is the best line's.
  auto last = split(log.back());
  CHECK(std::stod(last[3]) == fixed.cycleTimeMs);
  CHECK(std::stod(last[4]) * (1 << 20) == static_cast<double>(fixed.fusionThresholdBytes));
  // The first sample ran at the configured values (128 MiB, 1 ms).
  auto first = split(log[1]);
  CHECK(first[3] == "1");
  CHECK(first[4] == "128");
}

TEST_CASE("a step is one execution of one op: the same name in two process sets is two ops") {
  Config c = tuningConfig(0, 3, 50);
  Autotuner tuner(c, 2, nullptr);
  Clock::time_point t = Clock::now();
  auto round = [&] {  // "grad" in the global set and in set 1, each executed once
    std::vector<Response> rs(2);
    for (int s = 0; s < 2; ++s) {
      rs[s].type = OpType::kAllreduce;
      rs[s].name = "grad";
      rs[s].processSet = s;
      rs[s].dtype = DataType::kUInt8;
      rs[s].shape = {1000};
    }
    t += std::chrono::milliseconds(1);
    tuner.observe(rs, t);
  };
  // A sample is kSubSamples sub-samples of 3 steps: 15 rounds (the first, which starts the
  // clock, counts its steps too), not 8 as when both ops counted under one name.
  for (int i = 0; i < Autotuner::kSubSamples * 3 - 1; ++i) round();
  CHECK(tuner.scoredSamples() == 0);
  round();
  CHECK(tuner.scoredSamples() == 1);
}

TEST_CASE("with enough samples the autotuner finds the best fusion and cycle time") {
  Config c = tuningConfig(0, 1, 60);
  c.autotune.hdMinSet = true;
  c.autotune.ringMinSet = true;
  c.algorithms.allreduceCrossovers.ringMinBytes = 4 << 20;
  Driver drv(c, 2);
  drv.round(1e9, 1000);
  for (int i = 0; i < 5000 && drv.tuner.active(); ++i) drv.round(throughputOf(drv.now), 1000);
  drv.round(throughputOf(drv.now), 1000);
  REQUIRE_FALSE(drv.tuner.active());
  CHECK(drv.tuner.scoredSamples() < 60);  // converged before the budget
  CHECK(drv.applied.back().fusionThresholdBytes == 8 << 20);
  CHECK(drv.applied.back().cycleTimeMs == 5);
  CHECK(drv.applied.back().allreduceRingMinBytes == 4 << 20);
}

TEST_CASE("the autotuner never proposes halving-doubling from above the ring's crossover") {
  Config c = tuningConfig(0, 1, 200);
  c.autotune.fusionThresholdSet = true;
  c.autotune.cycleTimeSet = true;
  Driver drv(c, 4);
  // Best with both crossovers large: an unconstrained search would end at hd 4 MiB, ring 256 KiB.
  auto throughput = [](const TuningParams& p) {
    const double hd = std::log2(static_cast<double>(p.allreduceHdMinBytes));
    const double ring = std::log2(static_cast<double>(p.allreduceRingMinBytes));
    return 1e9 / (1 + std::abs(hd - 22) + std::abs(ring - 18));
  };
  drv.round(1e9, 1000);
  for (int i = 0; i < 20000 && drv.tuner.active(); ++i) drv.round(throughput(drv.now), 1000);
  drv.round(throughput(drv.now), 1000);
  REQUIRE_FALSE(drv.tuner.active());
  REQUIRE(drv.applied.size() > 3);
  for (const TuningParams& p : drv.applied) {
    CHECK(p.allreduceHdMinBytes <= p.allreduceRingMinBytes);
  }
  CHECK(drv.applied.back().allreduceHdMinBytes == drv.applied.back().allreduceRingMinBytes);
}

TEST_CASE("an explicitly set knob is fixed; nothing tunable means no tuning") {
  std::map<std::string, std::string> env = {{"HOROVOD_AUTOTUNE", "1"},
                                            {"KOLO_FUSION_THRESHOLD", "1048576"},
                                            {"HOROVOD_CYCLE_TIME", "3"},
                                            {"KOLO_AUTOTUNE_LOG", "/tmp/x.csv"},
                                            {"HOROVOD_AUTOTUNE_WARMUP_SAMPLES", "1"},
                                            {"KOLO_AUTOTUNE_STEPS_PER_SAMPLE", "4"},
                                            {"HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", "7"},
                                            {"KOLO_AUTOTUNE_GAUSSIAN_PROCESS_NOISE", "0.5"},
                                            {"KOLO_ALLREDUCE_RING_MIN_BYTES", "2097152"}};
  auto get = [&](const char* n) -> const char* {
    auto it = env.find(n);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  Config c;
  REQUIRE(Config::fromEnvironment(&c, get).isOk());
  CHECK(c.autotune.enabled);
  CHECK(c.autotune.logPath == "/tmp/x.csv");
  CHECK(c.autotune.warmupSamples == 1);
  CHECK(c.autotune.stepsPerSample == 4);
  CHECK(c.autotune.maxSamples == 7);
  CHECK(c.autotune.noise == 0.5);
  CHECK(c.autotune.fusionThresholdSet);
  CHECK(c.autotune.cycleTimeSet);
  CHECK_FALSE(c.autotune.hdMinSet);
  CHECK(c.autotune.ringMinSet);
  CHECK(c.algorithms.allreduceCrossovers.ringMinBytes == 2097152);

  Autotuner t(c, 2, nullptr);
  const auto& start = t.search().current();
  auto p = t.paramsAt(start, true);
  CHECK(p.fusionThresholdBytes == 1048576);
  CHECK(p.cycleTimeMs == 3);
  CHECK(p.allreduceRingMinBytes == 2097152);
  CHECK(p.allreduceHdMinBytes == static_cast<int64_t>(ops::effectiveCrossovers({}, 2).hdMinBytes));
  CHECK(t.active());  // the halving-doubling crossover is still free
  // On a transport whose native allreduce runs every size the crossovers are not searched.
  Autotuner native(c, 2, nullptr, false);
  CHECK_FALSE(native.active());

  env["KOLO_ALLREDUCE_ALGORITHM"] = "ring";  // crossovers unused: fixed too
  REQUIRE(Config::fromEnvironment(&c, get).isOk());
  Autotuner none(c, 2, nullptr);
  CHECK_FALSE(none.active());

  env["KOLO_ALLREDUCE_HD_MIN_BYTES"] = "4194304";  // above the ring's 2 MiB: contradictory
  Status crossed = Config::fromEnvironment(&c, get);
  CHECK(crossed.code() == ErrorCode::kInvalidArgument);
  CHECK(crossed.message() ==
        "KOLO_ALLREDUCE_HD_MIN_BYTES=4194304 is above KOLO_ALLREDUCE_RING_MIN_BYTES=2097152: "
        "halving-doubling would never run (set them equal to skip it)");
  env["KOLO_ALLREDUCE_HD_MIN_BYTES"] = "2097152";  // equal: no halving-doubling, accepted
  REQUIRE(Config::fromEnvironment(&c, get).isOk());

  env["KOLO_AUTOTUNE_STEPS_PER_SAMPLE"] = "0";
  Status s = Config::fromEnvironment(&c, get);
  CHECK(s.message().find("KOLO_AUTOTUNE_STEPS_PER_SAMPLE='0'") != std::string::npos);
}

namespace {

// The layout of the global set of ranks on these hosts (rank 0's view), as the coordinator
// computes it; null when the host names are unknown (empty).
bool hierarchicalUsedOn(const std::vector<std::string>& hostOfRank,
                        const ops::AlgorithmConfig& cfg = {}) {
  ops::HierarchyCache cache(hostOfRank, false);
  ProcessSet world;
  for (size_t r = 0; r < std::max<size_t>(hostOfRank.size(), 4); ++r) {
    world.ranks.push_back(static_cast<int32_t>(r));
  }
  world.myIndex = 0;
  return hierarchicalAllreduceUsed(cfg, cache.layout(world));
}

Config configFrom(const std::map<std::string, std::string>& env) {
  auto get = [&](const char* n) -> const char* {
    auto it = env.find(n);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  Config c;
  REQUIRE(Config::fromEnvironment(&c, get).isOk());
  return c;
}

// Drives `drv` until its set is fixed and applied; returns the sets applied.
template <typename Throughput>
std::vector<TuningParams> tuneToEnd(Driver& drv, Throughput throughput) {
  drv.round(1e9, 1000);
  for (int i = 0; i < 20000 && drv.tuner.active(); ++i) drv.round(throughput(drv.now), 1000);
  drv.round(throughput(drv.now), 1000);  // applies the fixed set
  REQUIRE_FALSE(drv.tuner.active());
  return drv.applied;
}

}  // namespace

TEST_CASE("autotune searches hierarchical allreduce only where the hosts allow it and it is auto") {
  // The topology rule (ops::useHierarchical for some size): several hosts, each with the same
  // number > 1 of the set's ranks, and KOLO_ALLREDUCE_ALGORITHM auto.
  CHECK(hierarchicalUsedOn({"a", "a", "b", "b"}));
  CHECK(hierarchicalUsedOn({"a", "a", "b", "b", "c", "c"}));
  CHECK_FALSE(hierarchicalUsedOn({"a", "a", "a", "a"}));  // one host (shared memory)
  CHECK_FALSE(hierarchicalUsedOn({"a", "b", "c", "d"}));  // one rank per host
  CHECK_FALSE(hierarchicalUsedOn({"a", "a", "a", "b"}));  // uneven: 3 + 1
  CHECK_FALSE(hierarchicalUsedOn({}));                    // host names unknown
  ops::AlgorithmConfig named;
  named.allreduce = ops::Algorithm::kRing;  // "the ring over the whole set": flat
  CHECK_FALSE(hierarchicalUsedOn({"a", "a", "b", "b"}, named));
  CHECK(hierarchicalUsedOn({"a", "a", "b", "b"},
                           configFrom({{"KOLO_ALLREDUCE_ALGORITHM", "auto"}}).algorithms));
  CHECK_FALSE(hierarchicalUsedOn({"a", "a", "b", "b"},
                                 configFrom({{"KOLO_ALLREDUCE_ALGORITHM", "ring"}}).algorithms));

  // Unset or auto, on such a topology: searched, starting at auto (hierarchical).
  for (const char* value : {"", "auto"}) {
    std::map<std::string, std::string> env = {{"KOLO_AUTOTUNE", "1"}};
    if (*value != '\0') env["KOLO_HIERARCHICAL_ALLREDUCE"] = value;
    const Config c = configFrom(env);
    Autotuner t(c, 4, nullptr, true, true);
    CHECK(t.tunesHierarchical());
    CHECK(t.active());
    CHECK(t.paramsAt(t.search().current(), true).hierarchicalAllreduce == ops::Hierarchical::kAuto);
    Autotuner flatTopology(c, 4, nullptr, true, false);
    CHECK_FALSE(flatTopology.tunesHierarchical());
  }
  // Set by the user: never searched; every set carries the configured value.
  for (const auto& [value, want] : {std::make_pair("1", ops::Hierarchical::kOn),
                                    std::make_pair("0", ops::Hierarchical::kOff)}) {
    const Config c = configFrom({{"KOLO_AUTOTUNE", "1"}, {"KOLO_HIERARCHICAL_ALLREDUCE", value}});
    Driver drv(c, 4, true);
    CHECK_FALSE(drv.tuner.tunesHierarchical());
    for (const TuningParams& p : tuneToEnd(drv, throughputOf)) {
      CHECK(p.hierarchicalAllreduce == want);
    }
  }
  // Only hierarchical allreduce left free, but the topology has no hierarchy: nothing to tune.
  Config fixedRest = configFrom({{"KOLO_AUTOTUNE", "1"},
                                 {"KOLO_FUSION_THRESHOLD", "1048576"},
                                 {"KOLO_CYCLE_TIME", "2"},
                                 {"KOLO_ALLREDUCE_ALGORITHM", "ring"}});
  CHECK_FALSE(Autotuner(fixedRest, 4, nullptr, false, false).active());
  fixedRest.algorithms.allreduce = ops::Algorithm::kAuto;
  CHECK(Autotuner(fixedRest, 4, nullptr, false, true).active());
  CHECK_FALSE(Autotuner(fixedRest, 4, nullptr, false, false).active());

  // Not searched: every point the search visits keeps the configured auto.
  Driver untuned(tuningConfig(0, 1, 20), 4, false);
  for (const TuningParams& p : tuneToEnd(untuned, throughputOf)) {
    CHECK(p.hierarchicalAllreduce == ops::Hierarchical::kAuto);
  }
}

TEST_CASE("autotune tries flat right after hierarchical, logs both and keeps the better") {
  const TempLog temp;
  const std::string& path = temp.path;
  // Everything else set: the search is hierarchical vs flat alone, two samples.
  Config c = tuningConfig(0, 1, 20);
  c.autotune.logPath = path;
  c.autotune.fusionThresholdSet = c.autotune.cycleTimeSet = true;
  c.autotune.hdMinSet = c.autotune.ringMinSet = true;
  for (bool flatWins : {true, false}) {
    INFO("flat wins: " << flatWins);
    Driver drv(c, 4, true);
    REQUIRE(drv.tuner.open().isOk());
    auto throughput = [flatWins](const TuningParams& p) {
      const bool flat = p.hierarchicalAllreduce == ops::Hierarchical::kOff;
      return flat == flatWins ? 2e9 : 1e9;
    };
    const std::vector<TuningParams> applied = tuneToEnd(drv, throughput);
    CHECK(drv.tuner.scoredSamples() == 2);
    REQUIRE(applied.size() == 2);
    CHECK(applied[0].hierarchicalAllreduce == ops::Hierarchical::kOff);
    CHECK(applied[0].active);
    CHECK(applied[1].hierarchicalAllreduce ==
          (flatWins ? ops::Hierarchical::kOff : ops::Hierarchical::kAuto));
    CHECK_FALSE(applied[1].active);
    auto log = lines(path);
    REQUIRE(log.size() == 1 + 2 + 1);
    CHECK(log[0] == Autotuner::kCsvHeader);
    CHECK(split(log[1])[0] == "1");  // the start: hierarchical
    CHECK(split(log[2])[0] == "0");  // flat
    CHECK(split(log[3])[0] == (flatWins ? "0" : "1"));
    for (size_t i = 1; i < log.size(); ++i) CHECK(split(log[i]).size() == 8);
  }

  // Every knob free: hierarchical is polled first (the first new point is flat, all else as
  // configured), and the search still finds the best of the others.
  Driver all(tuningConfig(0, 1, 60), 4, true);
  const TuningParams start = all.now;
  auto throughput = [](const TuningParams& p) {
    return throughputOf(p) * (p.hierarchicalAllreduce == ops::Hierarchical::kOff ? 1.5 : 1);
  };
  const std::vector<TuningParams> applied = tuneToEnd(all, throughput);
  REQUIRE(applied.size() > 2);
  TuningParams firstNew = applied[0];
  CHECK(firstNew.hierarchicalAllreduce == ops::Hierarchical::kOff);
  firstNew.hierarchicalAllreduce = start.hierarchicalAllreduce;
  CHECK(firstNew == start);
  const TuningParams& best = applied.back();
  CHECK(best.hierarchicalAllreduce == ops::Hierarchical::kOff);
  CHECK(best.fusionThresholdBytes == 8 << 20);
  CHECK(best.cycleTimeMs == 5);
}

TEST_CASE("applying autotune parameters switches the config, hierarchical allreduce included") {
  Config c;
  TuningParams p{1 << 20, 2.5, 4096, 262144, true};
  p.hierarchicalAllreduce = ops::Hierarchical::kOff;
  CHECK(applyTuningParams(p, &c));  // auto -> off: changed
  CHECK(c.fusionThresholdBytes == 1 << 20);
  CHECK(c.cycleTimeMs == 2.5);
  CHECK(c.algorithms.allreduceCrossovers.hdMinBytes == 4096);
  CHECK(c.algorithms.allreduceCrossovers.ringMinBytes == 262144);
  CHECK(c.algorithms.hierarchicalAllreduce == ops::Hierarchical::kOff);
  CHECK_FALSE(c.hierarchicalAllreduce);  // CUDA tensors' setting: not the autotuner's
  // What the executors decide from it: 2 hosts x 2 ranks now run flat, then hierarchical again.
  ops::HierarchyCache cache({"a", "a", "b", "b"}, false);
  ProcessSet world;
  world.ranks = {0, 1, 2, 3};
  world.myIndex = 0;
  const ops::HostLayout* layout = cache.layout(world);
  REQUIRE(layout != nullptr);
  CHECK_FALSE(ops::useHierarchical(c.algorithms, *layout, 1 << 20));
  p.cycleTimeMs = 5;
  CHECK_FALSE(applyTuningParams(p, &c));  // the hierarchical setting did not change
  CHECK(c.cycleTimeMs == 5);
  p.hierarchicalAllreduce = ops::Hierarchical::kAuto;
  CHECK(applyTuningParams(p, &c));
  CHECK(c.algorithms.hierarchicalAllreduce == ops::Hierarchical::kAuto);
  CHECK(ops::useHierarchical(c.algorithms, *layout, 1 << 20));
}

TEST_CASE("the response list carries tuning parameters; the crossovers default to the table") {
  ResponseList in;
  in.responses.push_back(Response{});
  in.hasTuning = true;
  in.tuning = {8 << 20, 2.5, 65536, 8 << 20, true};
  in.tuning.hierarchicalAllreduce = ops::Hierarchical::kOff;
  auto bytes = encode(in);
  ResponseList out;
  REQUIRE(decode(bytes.data(), bytes.size(), &out).isOk());
  CHECK(out.hasTuning);
  CHECK(out.tuning == in.tuning);
  CHECK(out.tuning.hierarchicalAllreduce == ops::Hierarchical::kOff);
  CHECK(out.responses.size() == 1);
  for (ops::Hierarchical h :
       {ops::Hierarchical::kAuto, ops::Hierarchical::kOn, ops::Hierarchical::kOff}) {
    in.tuning.hierarchicalAllreduce = h;
    auto b = encode(in);
    REQUIRE(decode(b.data(), b.size(), &out).isOk());
    CHECK(out.tuning == in.tuning);
  }
  // The hierarchical setting is the last field, an int32 enum: unknown values are refused.
  std::vector<uint8_t> bad = bytes;
  bad[bad.size() - 4] = 3;
  auto error = [&out](const std::vector<uint8_t>& b) {
    return decode(b.data(), b.size(), &out).message();
  };
  CHECK(error(bad).find("bad tuning hierarchical allreduce 3") != std::string::npos);
  std::fill(bad.end() - 4, bad.end(), uint8_t{0xff});  // -1
  CHECK(error(bad).find("bad tuning hierarchical allreduce -1") != std::string::npos);
  bytes.pop_back();
  CHECK(decode(bytes.data(), bytes.size(), &out).message().find("tuning hierarchical allreduce") !=
        std::string::npos);
  bytes.resize(bytes.size() - 4);
  CHECK(decode(bytes.data(), bytes.size(), &out).message().find("tuning active flag") !=
        std::string::npos);
  ResponseList plain;
  auto b2 = encode(plain);
  REQUIRE(decode(b2.data(), b2.size(), &out).isOk());
  CHECK_FALSE(out.hasTuning);

  auto table2 = ops::effectiveCrossovers({}, 2);
  CHECK(table2.hdMinBytes == 512 * 1024);
  CHECK(table2.ringMinBytes == 8 * 1024 * 1024);
  CHECK(ops::effectiveCrossovers({}, 3).hdMinBytes == 64 * 1024);
  CHECK(ops::effectiveCrossovers({}, 16).hdMinBytes == 64 * 1024);
  auto mixed = ops::effectiveCrossovers({1000, 0}, 2);
  CHECK(mixed.hdMinBytes == 1000);
  CHECK(mixed.ringMinBytes == 8 * 1024 * 1024);

  // One crossover set on the wrong side of the table's other one: said, with both values.
  CHECK(ops::crossoversUnfit({}, 2).empty());
  CHECK(ops::crossoversUnfit({1000, 0}, 2).empty());
  CHECK(ops::crossoversUnfit({16 << 20, 0}, 2) ==
        "KOLO_ALLREDUCE_HD_MIN_BYTES=16777216 is above the table's ring crossover (8388608 B for "
        "2 ranks): halving-doubling never runs; set KOLO_ALLREDUCE_RING_MIN_BYTES too");
  CHECK(ops::crossoversUnfit({0, 32768}, 4)
            .find("KOLO_ALLREDUCE_RING_MIN_BYTES=32768 is below "
                  "the table's halving-doubling crossover (65536 B "
                  "for 4 ranks)") == 0);
  CHECK(ops::crossoversUnfit({0, 32768}, 2).find("(524288 B for 2 ranks)") != std::string::npos);
  CHECK(ops::crossoversUnfit({0, 1 << 20}, 2).empty());
  CHECK(ops::crossoversUnfit({4 << 20, 1 << 20}, 2).empty());  // both set: Config's to refuse
}
