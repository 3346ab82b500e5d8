// SPDX-License-Identifier: Apache-2.0
// The timeline through the runtime as N processes: KOLO_TIMELINE with all-ranks mode and cycle
// marks, then start/stop/start at run time. Every rank checks its own files: valid JSON (parsed
// by python3's json module), the tensor names, NEGOTIATE_ALLREDUCE, ALLREDUCE, the activities,
// CYCLE_START, dtype/shape args and the start time; and that no row ends an event it never
// began, also when the timeline starts while the coordinator is in the middle of a round.
#include <catch2/catch.hpp>
#include <kolo.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace {

std::string readFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool validJson(const std::string& path) {
  std::string cmd = "/usr/bin/python3 -c 'import json,sys; json.load(open(sys.argv[1]))' '" + path + "'";
  return std::system(cmd.c_str()) == 0;
}

void allreduceSome(const std::string& prefix, int count) {
  std::vector<std::vector<float>> bufs(count, std::vector<float>(1000, 1.f));
  std::vector<int64_t> shape = {10, 100};
  std::vector<kolo_handle_t> hs(count);
  for (int i = 0; i < count; ++i) {
    kolo_tensor_t t = {bufs[i].data(), KOLO_FLOAT32, 2, shape.data(), KOLO_CPU_DEVICE, nullptr};
    REQUIRE(kolo_allreduce_async((prefix + std::to_string(i)).c_str(), &t, nullptr, KOLO_SUM, 1, 1,
                                 0, nullptr, nullptr, &hs[i]) == KOLO_OK);
  }
  for (auto h : hs) {
    REQUIRE(kolo_handle_wait(h, 60) == KOLO_OK);
    kolo_handle_release(h);
  }
}

// Every "E" event must close a "B" of the same row (tid) opened before it in the file. Events
// are one per line. Rows may end with events still open (an op in flight when it stopped).
void checkRowsNest(const std::string& path) {
  std::ifstream in(path);
  std::map<std::string, int> open;
  std::string line;
  int lineNo = 0;
  while (std::getline(in, line)) {
    ++lineNo;
    const bool begin = line.find("\"ph\":\"B\"") != std::string::npos;
    const bool end = line.find("\"ph\":\"E\"") != std::string::npos;
    if (!begin && !end) continue;
    const size_t at = line.find("\"tid\":");
    REQUIRE(at != std::string::npos);
    const std::string tid = line.substr(at + 6, line.find_first_of(",}", at + 6) - (at + 6));
    if (begin) ++open[tid];
    if (end) {
      INFO(path << " line " << lineNo << ": " << line);
      CHECK(open[tid] > 0);
      --open[tid];
    }
  }
}

void barrier() {
  kolo_handle_t h;
  REQUIRE(kolo_barrier_async(0, nullptr, nullptr, &h) == KOLO_OK);
  REQUIRE(kolo_handle_wait(h, 60) == KOLO_OK);
  kolo_handle_release(h);
}

}  // namespace

TEST_CASE("KOLO_TIMELINE with all ranks and cycle marks; start/stop/start at run time") {
  const char* dirEnv = std::getenv("KOLO_TEST_TIMELINE_DIR");
  REQUIRE(dirEnv != nullptr);
  const std::string dir = dirEnv;
  setenv("KOLO_TIMELINE", (dir + "/env.json").c_str(), 1);
  setenv("KOLO_TIMELINE_ALL_RANKS", "1", 1);
  setenv("KOLO_TIMELINE_MARK_CYCLES", "1", 1);
  REQUIRE(kolo_init() == KOLO_OK);
  const std::string transport = kolo_transport_name();
  const int rank = kolo_rank();
  allreduceSome("grad/layer", 20);  // several fused into one batch
  std::vector<float> big(1 << 19, 1.f);  // 2 MiB: runs alone, without the fusion buffer
  int64_t bigShape[1] = {1 << 19};
  kolo_tensor_t tb = {big.data(), KOLO_FLOAT32, 1, bigShape, KOLO_CPU_DEVICE, nullptr};
  kolo_handle_t h;
  REQUIRE(kolo_allreduce_async("grad/big", &tb, nullptr, KOLO_SUM, 1, 1, 0, nullptr, nullptr, &h) == KOLO_OK);
  REQUIRE(kolo_handle_wait(h, 60) == KOLO_OK);
  kolo_handle_release(h);

  // Run-time control: a new file each time; starting twice with the same file is harmless.
  const std::string first = dir + "/first.json", second = dir + "/second.json";
  REQUIRE(kolo_start_timeline(first.c_str(), 0) == KOLO_OK);
  REQUIRE(kolo_start_timeline(first.c_str(), 0) == KOLO_OK);
  allreduceSome("phase1/t", 3);
  REQUIRE(kolo_stop_timeline() == KOLO_OK);
  // Rank 0 also records the other ranks' requests (their NEGOTIATE ticks): without this barrier
  // a faster rank's "between" request could reach rank 0 before rank 0 stopped "first".
  barrier();
  allreduceSome("between/t", 2);
  REQUIRE(kolo_start_timeline(second.c_str(), 1) == KOLO_OK);
  allreduceSome("phase2/t", 3);
  // A CYCLE_START is written when a round begins. The phase2 ops may all complete in a round
  // that had begun before this start (its mark went nowhere); the barrier needs a round that
  // begins after they completed, so "second" holds at least one mark before quick0 replaces it.
  barrier();
  // Starts while the coordinator runs rounds (cycle marks: a round begins at every op): the ops
  // submitted right after must still show their NEGOTIATE_ begin before its end.
  std::vector<std::string> quick;
  for (int i = 0; i < 10; ++i) {
    quick.push_back(dir + "/quick" + std::to_string(i) + ".json");
    REQUIRE(kolo_start_timeline(quick.back().c_str(), 1) == KOLO_OK);
    allreduceSome("quick" + std::to_string(i) + "/t", 2);
  }
  barrier();
  REQUIRE(kolo_shutdown() == KOLO_OK);
  for (const auto& q : quick) {
    std::string mine = q.substr(0, q.size() - 5) + "." + std::to_string(rank) + ".json";
    REQUIRE(validJson(mine));
    checkRowsNest(mine);
  }

  // KOLO_TIMELINE_ALL_RANKS: "env.json" -> "env.<rank>.json" on every rank.
  const std::string envFile = dir + "/env." + std::to_string(rank) + ".json";
  REQUIRE(validJson(envFile));
  checkRowsNest(envFile);
  std::string env = readFile(envFile);
  for (const char* needle :
       {"grad/layer0", "grad/layer19", "grad/big", "NEGOTIATE_ALLREDUCE", "\"ALLREDUCE\"",
        "CYCLE_START", "float32", "start_time"}) {
    INFO("rank " << rank << " looks for " << needle << " in " << envFile);
    CHECK(env.find(needle) != std::string::npos);
  }
  // Fused allreduces pack into the fusion buffer, except over shared memory, which reduces the
  // tensors where they lie (allreduceSpans): there the copy steps must not appear.
  const bool packs = transport != "shm";
  for (const char* needle : {"MEMCPY_IN_FUSION_BUFFER", "MEMCPY_OUT_FUSION_BUFFER"}) {
    INFO("rank " << rank << " on " << transport << " looks for " << needle);
    CHECK((env.find(needle) != std::string::npos) == packs);
  }
  // The transport step of the job: ring, or the transport's native collective.
  CHECK((env.find("RING_ALLREDUCE") != std::string::npos ||
         env.find("_ALLREDUCE\"") != std::string::npos));

  // Run-time files follow the all-ranks rule too.
  const std::string f1 = dir + "/first." + std::to_string(rank) + ".json";
  const std::string f2 = dir + "/second." + std::to_string(rank) + ".json";
  REQUIRE(validJson(f1));
  REQUIRE(validJson(f2));
  std::string a = readFile(f1), b = readFile(f2);
  CHECK(a.find("phase1/t0") != std::string::npos);
  CHECK(a.find("phase2/t0") == std::string::npos);
  CHECK(a.find("between/t0") == std::string::npos);
  CHECK(a.find("CYCLE_START") == std::string::npos);
  CHECK(b.find("phase2/t2") != std::string::npos);
  CHECK(b.find("phase1/t0") == std::string::npos);
  CHECK(b.find("CYCLE_START") != std::string::npos);
}
