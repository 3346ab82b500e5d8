// SPDX-License-Identifier: Apache-2.0
// kolo-bench: an nccl-tests-style sweep of kolo's collectives over one transport, run as a
// multi-process job. For every collective x dtype x redop x size it runs kolo's own algorithm
// (ring / p2p over the transport's point-to-point API) and the transport's native collective
// (MPI_Allreduce..., Gloo's algorithms) back to back in the same job, so the native rows are
// the baseline of the kolo rows, and ends with a per-size summary of the two.
//
//   mpirun --allow-run-as-root -np 2 kolo-bench [flags]                  (MPI)
//   kolorun -np 2 kolo-bench [flags]                                     (Gloo)
//
// Method, per row: `warmup` untimed runs, a barrier, `iters` timed runs back to back, each timed
// on every rank; the row's time is the mean over the iterations of the maximum over the ranks
// (an op is as slow as its slowest rank). Then the inputs are refilled with a deterministic
// pattern, the outputs poisoned, the collective runs once more and every rank counts the elements
// that differ bitwise from the exact expected result; "wrong" is the total over all ranks. algbw =
// bytes / time; busbw = algbw x nccl-tests' factor (allreduce 2(n-1)/n, allgather, reducescatter
// and alltoall (n-1)/n, broadcast 1). bench/README.md explains the columns.
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "base/clock.h"
#include "bench/bench_job.h"
#include "bench/bench_util.h"
#include "bench/collective_case.h"
#include "bench/gloo_algorithms.h"
#include "bench/pattern.h"
#include "ops/collectives.h"
#include "transport/shm/shm_transport.h"

namespace kolo::bench {
namespace {

struct Options {
  size_t minBytes = 4;
  size_t maxBytes = size_t{256} << 20;
  long stepFactor = 2;
  long iters = 20;
  long warmup = 5;
  std::vector<Collective> collectives = {Collective::kAllreduce, Collective::kAllgather,
                                         Collective::kBroadcast, Collective::kAlltoall,
                                         Collective::kReducescatter};
  std::vector<DataType> dtypes = {DataType::kFloat32};
  std::vector<ReduceOp> redops = {ReduceOp::kSum};
  std::vector<ops::Algorithm> algorithms = {ops::Algorithm::kRing, ops::Algorithm::kNative};
  long root = 0;
  size_t segmentBytes = 0;  // 0: KOLO_SEGMENT_BYTES (Config)
  bool check = true;
  bool median = false;          // --stat median: the time column is the median, not the mean
  bool hierarchical = false;    // --hierarchical: allreduces through ops/hierarchical
  bool glooAlgorithms = false;  // also Gloo's own ring and halving-doubling (float32 sum allreduce)
  std::string csvPath;
};

const char kUsage[] =
    "usage: kolo-bench [--min-bytes N] [--max-bytes N] [--step-factor F] [--iters N]\n"
    "                  [--warmup N] [--ops LIST] [--dtype LIST] [--redop LIST]\n"
    "                  [--algorithms LIST] [--root R] [--segment-bytes N] [--no-check]\n"
    "                  [--stat mean|median] [--csv FILE] [--hierarchical]\n"
    "                  [--gloo-algorithms]\n"
    "  sizes accept K/M/G suffixes (binary): --min-bytes 4 --max-bytes 256M (defaults)\n"
    "  --step-factor 2 (default) or 4 ...; --iters 20, --warmup 5 (defaults)\n"
    "  --ops allreduce,allgather,broadcast,alltoall,reducescatter (default: all)\n"
    "  --dtype float32 (default; any of float16,bfloat16,float32,float64,[u]int8,[u]int16,\n"
    "          int32,int64); --redop sum (default; sum,min,max,product)\n"
    "  --algorithms ring,native (default; also auto = what kolo's selection picks, and\n"
    "          recursive_doubling, halving_doubling (allreduce), tree (broadcast),\n"
    "          bruck (allgather); a collective skips the names it has no form of)\n"
    "  --stat mean (default, as nccl-tests) or median over the iterations\n"
    "  --gloo-algorithms: on a Gloo job, float32 sum allreduce rows also run Gloo's own ring\n"
    "          (gloo_ring) and halving-doubling (gloo_hd), called directly\n"
    "  --hierarchical: allreduces run ops/hierarchical (reduce-scatter in the host, the row's\n"
    "          algorithm across hosts, allgather in the host); the job's hosts (KOLO_HOSTNAME)\n"
    "          must hold equal numbers (> 1) of ranks\n"
    "Run it under a launcher: mpirun -np N kolo-bench ... | kolorun -np N kolo-bench ...\n";

// Parses argv into *o; on failure *error says why.
bool parseOptions(int argc, char** argv, Options* o, std::string* error) {
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--no-check") {
      o->check = false;
      continue;
    }
    if (flag == "--gloo-algorithms") {
      o->glooAlgorithms = true;
      continue;
    }
    if (flag == "--hierarchical") {
      o->hierarchical = true;
      continue;
    }
    if (flag == "-h" || flag == "--help") {
      *error = "";
      return false;
    }
    if (i + 1 >= argc) {
      *error = "missing value after " + flag;
      return false;
    }
    const std::string v = argv[++i];
    bool ok = true;
    if (flag == "--min-bytes") {
      ok = parseBytes(v, &o->minBytes);
    } else if (flag == "--max-bytes") {
      ok = parseBytes(v, &o->maxBytes);
    } else if (flag == "--step-factor") {
      ok = parseInt(v, 2, 1024, &o->stepFactor);
    } else if (flag == "--iters") {
      ok = parseInt(v, 1, 1000000, &o->iters);
    } else if (flag == "--warmup") {
      ok = parseInt(v, 0, 1000000, &o->warmup);
    } else if (flag == "--root") {
      ok = parseInt(v, 0, 1 << 24, &o->root);
    } else if (flag == "--segment-bytes") {
      ok = parseBytes(v, &o->segmentBytes) && o->segmentBytes > 0;
    } else if (flag == "--stat") {
      ok = v == "mean" || v == "median";
      o->median = v == "median";
    } else if (flag == "--csv") {
      o->csvPath = v;
    } else if (flag == "--ops") {
      o->collectives.clear();
      for (const std::string& s : splitList(v)) {
        Collective c;
        ok = ok && parseCollective(s, &c);
        o->collectives.push_back(c);
      }
      ok = ok && !o->collectives.empty();
    } else if (flag == "--dtype") {
      o->dtypes.clear();
      for (const std::string& s : splitList(v)) {
        DataType d;
        ok = ok && parseDataType(s, &d) && patternSupports(d);
        o->dtypes.push_back(d);
      }
      ok = ok && !o->dtypes.empty();
    } else if (flag == "--redop") {
      o->redops.clear();
      for (const std::string& s : splitList(v)) {
        ReduceOp r;
        ok = ok && parseReduceOp(s, &r);
        o->redops.push_back(r);
      }
      ok = ok && !o->redops.empty();
    } else if (flag == "--algorithms") {
      o->algorithms.clear();
      for (const std::string& s : splitList(v)) {
        ops::Algorithm a;
        ok = ok && ops::parseAlgorithm(s, &a);
        o->algorithms.push_back(a);
      }
      ok = ok && !o->algorithms.empty();
    } else {
      *error = "unknown flag " + flag;
      return false;
    }
    if (!ok) {
      *error = "bad value '" + v + "' for " + flag;
      return false;
    }
  }
  if (o->minBytes == 0 || o->minBytes > o->maxBytes) {
    *error = "need 0 < --min-bytes <= --max-bytes";
    return false;
  }
  return true;
}

struct Row {
  Collective collective;
  DataType dtype;
  ReduceOp redop;
  ops::Algorithm algorithm;
  std::string impl;
  CaseShape shape;
  double timeUs = -1;  // < 0: not available (no native collective of this kind)
  double algbw = 0, busbw = 0;
  int64_t wrong = -1;      // < 0: not checked
  std::string label = "";  // the algorithm column when not ops::toString(algorithm): gloo_ring
};

// A barrier that every transport can run: a one-element ring allreduce.
Status barrier(Transport& t) {
  int32_t one = 1;
  return ops::ringAllreduce(t, &one, 1, DataType::kInt32, ReduceOp::kSum, 4096);
}

Status maxOverRanks(Transport& t, double* value) {
  return ops::ringAllreduce(t, value, 1, DataType::kFloat64, ReduceOp::kMax, 4096);
}

Status sumOverRanks(Transport& t, int64_t* value) {
  return ops::ringAllreduce(t, value, 1, DataType::kInt64, ReduceOp::kSum, 4096);
}

// Times one row (see the method at the top of the file).
Status measure(Transport& t, CaseRunner& runner, const Options& o, Row* row) {
  for (long i = 0; i < o.warmup; ++i) KOLO_RETURN_IF_ERROR(runner.runOnce(row->algorithm, nullptr));
  KOLO_RETURN_IF_ERROR(barrier(t));
  std::vector<double> us(static_cast<size_t>(o.iters));
  for (long i = 0; i < o.iters; ++i) {
    const auto start = Clock::now();
    KOLO_RETURN_IF_ERROR(runner.runOnce(row->algorithm, i == 0 ? &row->impl : nullptr));
    us[static_cast<size_t>(i)] =
        std::chrono::duration<double, std::micro>(Clock::now() - start).count();
  }
  // Iteration i took as long as its slowest rank; the row reports the mean of that.
  KOLO_RETURN_IF_ERROR(
      ops::ringAllreduce(t, us.data(), us.size(), DataType::kFloat64, ReduceOp::kMax, 4096));
  const SampleStats stats = statsOf(us);
  row->timeUs = o.median ? stats.median : stats.mean;
  row->algbw = static_cast<double>(row->shape.bytes) / (row->timeUs * 1e-6) / 1e9;
  row->busbw = row->algbw * busBandwidthFactor(row->collective, t.size());
  if (o.check) {
    uint64_t mine = 0;
    KOLO_RETURN_IF_ERROR(runner.check(row->algorithm, &mine));
    int64_t total = static_cast<int64_t>(mine);
    KOLO_RETURN_IF_ERROR(sumOverRanks(t, &total));
    row->wrong = total;
  }
  return Status::ok();
}

// Gloo's own ring and halving-doubling on the row's allreduce (gloo_algorithms.h: a Gloo
// context of their own, keys under gloo-algorithms/<n>/), timed like measure(), unchecked.
Status measureGloo(const BenchJob& job, const Options& o, int n, Row* ring, Row* hd) {
  GlooAlgorithmTimes g;
  KOLO_RETURN_IF_ERROR(timeGlooAlgorithms(job, "gloo-algorithms/" + std::to_string(n) + "/",
                                          ring->shape.count, o.warmup, o.iters, &g));
  Transport& t = *job.transport;
  for (auto [row, us] :
       {std::make_pair(ring, &g.ringUs), std::make_pair(hd, &g.halvingDoublingUs)}) {
    KOLO_RETURN_IF_ERROR(
        ops::ringAllreduce(t, us->data(), us->size(), DataType::kFloat64, ReduceOp::kMax, 4096));
    const SampleStats stats = statsOf(*us);
    row->timeUs = o.median ? stats.median : stats.mean;
    row->algbw = static_cast<double>(row->shape.bytes) / (row->timeUs * 1e-6) / 1e9;
    row->busbw = row->algbw * busBandwidthFactor(row->collective, t.size());
  }
  return Status::ok();
}

// Transports set up connections and shared-memory segments on first use; without this the
// first row of a sweep pays for that. Runs every selected collective and algorithm a few times
// at the smallest size (untimed, unchecked).
Status warmUpJob(Transport& t, CaseRunner& runner, const Options& o) {
  constexpr int kRounds = 20;
  const Capabilities caps = t.capabilities();
  for (Collective c : o.collectives) {
    CaseShape shape;
    if (!shapeFor(c, o.minBytes, o.dtypes.front(), t.size(), &shape) &&
        !shapeFor(c, 64 * 1024, o.dtypes.front(), t.size(), &shape)) {
      continue;
    }
    KOLO_RETURN_IF_ERROR(runner.setup(c, shape, o.dtypes.front(), o.redops.front()));
    for (ops::Algorithm a : o.algorithms) {
      if (!ops::appliesTo(a, opTypeOf(c))) continue;
      if (a == ops::Algorithm::kNative && !nativeCapable(caps, c)) continue;
      for (int i = 0; i < kRounds; ++i) {
        Status s = runner.runOnce(a, nullptr);
        if (s.code() == ErrorCode::kUnsupported) break;
        KOLO_RETURN_IF_ERROR(s);
      }
    }
  }
  return barrier(t);
}

const char* algorithmLabel(const Row& r) {
  return r.label.empty() ? ops::toString(r.algorithm) : r.label.c_str();
}

void printSectionHeader(Collective c) {
  std::printf("#\n# %s\n", toString(c));
  std::printf("# %12s %12s %9s %8s %9s %11s %11s %11s %7s  %s\n", "bytes", "count", "dtype",
              "redop", "algorithm", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "wrong", "impl");
}

void printRow(const Row& r) {
  const char* redop = isReducing(r.collective) ? toString(r.redop) : "-";
  if (r.timeUs < 0) {
    std::printf("  %12zu %12zu %9s %8s %9s %11s %11s %11s %7s  %s\n", r.shape.bytes, r.shape.count,
                toString(r.dtype), redop, algorithmLabel(r), "n/a", "n/a", "n/a", "n/a",
                r.impl.c_str());
  } else {
    const std::string wrong = r.wrong < 0 ? "-" : std::to_string(r.wrong);
    std::printf("  %12zu %12zu %9s %8s %9s %11.2f %11.3f %11.3f %7s  %s\n", r.shape.bytes,
                r.shape.count, toString(r.dtype), redop, algorithmLabel(r), r.timeUs, r.algbw,
                r.busbw, wrong.c_str(), r.impl.c_str());
  }
  std::fflush(stdout);
}

void writeCsvRow(std::FILE* f, const Transport& t, const Row& r, const char* stat) {
  if (f == nullptr) return;
  const char* redop = isReducing(r.collective) ? toString(r.redop) : "none";
  if (r.timeUs < 0) {
    std::fprintf(f, "%s,%d,%s,%zu,%zu,%s,%s,%s,%s,,,,,%s\n", t.name(), t.size(),
                 toString(r.collective), r.shape.bytes, r.shape.count, toString(r.dtype), redop,
                 algorithmLabel(r), r.impl.c_str(), stat);
  } else {
    std::fprintf(f, "%s,%d,%s,%zu,%zu,%s,%s,%s,%s,%.3f,%.6f,%.6f,%s,%s\n", t.name(), t.size(),
                 toString(r.collective), r.shape.bytes, r.shape.count, toString(r.dtype), redop,
                 algorithmLabel(r), r.impl.c_str(), r.timeUs, r.algbw, r.busbw,
                 r.wrong < 0 ? "" : std::to_string(r.wrong).c_str(), stat);
  }
  std::fflush(f);
}

// Per collective/dtype/redop/size: the best kolo row (ring, or auto when asked for) against the
// best native row. ratio = native time / kolo time, so > 1 means kolo is faster.
void printSummary(const std::vector<Row>& rows) {
  using Key = std::tuple<int, int, int, size_t>;
  std::map<Key, std::pair<double, double>> best;  // (kolo us, native us), < 0 = none
  std::vector<Key> order;
  for (const Row& r : rows) {
    if (r.timeUs < 0) continue;
    const Key k{static_cast<int>(r.collective), static_cast<int>(r.dtype),
                isReducing(r.collective) ? static_cast<int>(r.redop) : -1, r.shape.bytes};
    auto it = best.find(k);
    if (it == best.end()) {
      it = best.emplace(k, std::make_pair(-1.0, -1.0)).first;
      order.push_back(k);
    }
    double& slot = r.algorithm == ops::Algorithm::kNative ? it->second.second : it->second.first;
    if (slot < 0 || r.timeUs < slot) slot = r.timeUs;
  }
  std::printf(
      "#\n# summary: best kolo (ring/auto) vs best native; ratio = native time / kolo "
      "time (> 1: kolo faster)\n");
  std::printf("# %13s %12s %9s %8s %12s %12s %7s\n", "collective", "bytes", "dtype", "redop",
              "kolo(us)", "native(us)", "ratio");
  for (const Key& k : order) {
    const auto& [kolo, native] = best[k];
    if (kolo < 0 || native < 0) continue;
    const int redop = std::get<2>(k);
    std::printf("  %13s %12zu %9s %8s %12.2f %12.2f %7.2f\n",
                toString(static_cast<Collective>(std::get<0>(k))), std::get<3>(k),
                toString(static_cast<DataType>(std::get<1>(k))),
                redop < 0 ? "-" : toString(static_cast<ReduceOp>(redop)), kolo, native,
                native / kolo);
  }
}

int fail(const Transport* t, const Status& s) {
  std::fprintf(stderr, "kolo-bench: rank %d: %s\n", t != nullptr ? t->rank() : -1,
               s.toString().c_str());
  return 1;
}

int run(const Options& o) {
  BenchJob job;
  Status s = connectBenchJob("", &job);
  if (!s.isOk()) return fail(nullptr, s);
  Transport& t = *job.transport;
  const bool leader = t.rank() == 0;
  if (o.root >= t.size()) {
    return fail(&t, Status(ErrorCode::kInvalidArgument, "--root " + std::to_string(o.root) +
                                                            " is not below the job size " +
                                                            std::to_string(t.size())));
  }
  const size_t segment = o.segmentBytes > 0 ? o.segmentBytes : job.config.algorithms.segmentBytes;

  // Only rank 0 writes the CSV; every rank learns whether it could open it.
  std::FILE* csv = nullptr;
  double csvFailed = 0;
  if (leader && !o.csvPath.empty()) {
    csv = std::fopen(o.csvPath.c_str(), "w");
    if (csv == nullptr) {
      std::fprintf(stderr, "kolo-bench: cannot write %s\n", o.csvPath.c_str());
      csvFailed = 1;
    } else {
      std::fprintf(csv,
                   "transport,ranks,collective,bytes,count,dtype,redop,algorithm,impl,"
                   "time_us,algbw_gbps,busbw_gbps,wrong,time_stat\n");
    }
  }
  s = maxOverRanks(t, &csvFailed);
  if (!s.isOk()) return fail(&t, s);
  if (csvFailed != 0) return 1;

  if (leader) {
    std::printf(
        "# kolo-bench: transport %s, %d ranks, iters %ld, warmup %ld, segment %zu B, "
        "check %s\n",
        describeTransport(t).c_str(), t.size(), o.iters, o.warmup, segment, o.check ? "on" : "off");
    std::printf(
        "# time = %s over iterations of the slowest rank's time; busbw uses nccl-tests' "
        "factors; wrong = elements differing from the exact result, all ranks\n",
        o.median ? "median" : "mean");
  }
  if (o.glooAlgorithms &&
      (job.store == nullptr || std::string(controlTransport(t).name()) != "gloo")) {
    return fail(&t, Status(ErrorCode::kInvalidArgument,
                           "--gloo-algorithms needs a Gloo job (kolorun, not mpirun)"));
  }
  int glooCalls = 0;
  CaseRunner runner(t, segment, static_cast<int>(o.root));
  std::unique_ptr<ops::HostGroups> groups;
  if (o.hierarchical) {
    std::vector<std::string> hosts;
    ops::HostLayout layout;
    s = ops::gatherStrings(t, job.config.hostname, &hosts);
    if (s.isOk()) s = ops::planHosts(hosts, t.rank(), &layout);
    if (s.isOk() && !ops::hierarchicalFits(layout)) {
      s = Status(ErrorCode::kInvalidArgument,
                 "--hierarchical needs several hosts with equal numbers (> 1) of ranks; this job "
                 "has " +
                     std::to_string(layout.hosts) + " host(s) (KOLO_HOSTNAME)");
    }
    if (s.isOk()) {
      s = ops::buildHostGroups(t, layout, 1 << 20, job.config.shm != ShmMode::kOff, &groups);
    }
    if (!s.isOk()) return fail(&t, s);
    runner.setHierarchy(groups.get());
    if (leader) {
      std::printf("# hierarchical allreduce: %d hosts x %zu ranks, local %s, cross %s\n",
                  layout.hosts, layout.local.size(), groups->local->name(), groups->cross->name());
    }
  }
  const Capabilities caps = t.capabilities();
  s = warmUpJob(t, runner, o);
  if (!s.isOk()) return fail(&t, s);
  std::vector<Row> rows;
  for (Collective c : o.collectives) {
    if (leader) printSectionHeader(c);
    const std::vector<ReduceOp> redops =
        isReducing(c) ? o.redops : std::vector<ReduceOp>{ReduceOp::kSum};
    for (DataType dtype : o.dtypes) {
      for (ReduceOp redop : redops) {
        for (size_t bytes = o.minBytes; bytes <= o.maxBytes;) {
          CaseShape shape;
          if (shapeFor(c, bytes, dtype, t.size(), &shape)) {
            s = runner.setup(c, shape, dtype, redop);
            if (!s.isOk()) return fail(&t, s);
            for (ops::Algorithm a : o.algorithms) {
              if (!ops::appliesTo(a, opTypeOf(c))) continue;  // e.g. bruck for an allreduce
              Row row{c, dtype, redop, a, "", shape};
              if (a == ops::Algorithm::kNative && !nativeCapable(caps, c)) {
                row.impl = std::string("(") + t.name() + " has no native " + toString(c) + ")";
              } else {
                s = measure(t, runner, o, &row);
                if (s.code() == ErrorCode::kUnsupported && a == ops::Algorithm::kNative) {
                  row.timeUs = -1;  // e.g. MPI counts beyond int: the same on every rank
                  row.impl = "(unsupported: " + s.message() + ")";
                } else if (!s.isOk()) {
                  return fail(&t, s);
                }
              }
              if (leader) {
                printRow(row);
                writeCsvRow(csv, t, row, o.median ? "median" : "mean");
              }
              rows.push_back(row);
            }
            if (o.glooAlgorithms && c == Collective::kAllreduce && dtype == DataType::kFloat32 &&
                redop == ReduceOp::kSum) {
              Row ring{c, dtype, redop, ops::Algorithm::kNative, "GLOO_RING_DIRECT", shape};
              Row hd{c, dtype, redop, ops::Algorithm::kNative, "GLOO_HALVING_DOUBLING", shape};
              ring.label = "gloo_ring";
              hd.label = "gloo_hd";
              s = measureGloo(job, o, glooCalls++, &ring, &hd);
              if (!s.isOk()) return fail(&t, s);
              for (const Row& r : {ring, hd}) {
                if (leader) {
                  printRow(r);
                  writeCsvRow(csv, t, r, o.median ? "median" : "mean");
                }
                rows.push_back(r);
              }
            }
          }
          if (bytes > o.maxBytes / static_cast<size_t>(o.stepFactor)) break;
          bytes *= static_cast<size_t>(o.stepFactor);
        }
      }
    }
  }
  if (leader) printSummary(rows);
  if (csv != nullptr) std::fclose(csv);
  int64_t wrongTotal = 0;
  for (const Row& r : rows) wrongTotal += r.wrong > 0 ? r.wrong : 0;
  s = barrier(t);
  if (!s.isOk()) return fail(&t, s);
  if (leader && wrongTotal > 0) {
    std::printf("# FAILED: %lld wrong elements in all\n", static_cast<long long>(wrongTotal));
  }
  return wrongTotal > 0 ? 3 : 0;
}

}  // namespace
}  // namespace kolo::bench

int main(int argc, char** argv) {
  kolo::bench::Options options;
  std::string error;
  if (!kolo::bench::parseOptions(argc, argv, &options, &error)) {
    if (!error.empty()) std::fprintf(stderr, "kolo-bench: %s\n", error.c_str());
    std::fputs(kolo::bench::kUsage, error.empty() ? stdout : stderr);
    return error.empty() ? 0 : 2;
  }
  return kolo::bench::run(options);
}
