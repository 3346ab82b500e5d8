// SPDX-License-Identifier: Apache-2.0
// Job-wide settings (bootstrap/job_settings.h): which knobs are compared, the message that names
// what differs, and both exchanges (store, transport) on thread ranks. The multi-process test,
// whole inits that must fail on every rank, is test/mp/settings_mp_test.cc.
#include "bootstrap/job_settings.h"

#include <catch2/catch.hpp>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap/registry.h"
#include "test/unit/loopback_ranks.h"

using namespace kolo;
using namespace std::chrono_literals;

namespace {

using Env = std::map<std::string, std::string>;

std::string textOf(const Env& vars) {
  auto env = [&vars](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
  Config c;
  Status s = Config::fromEnvironment(&c, env);
  INFO(s.toString());
  REQUIRE(s.isOk());
  return settingsText(jobSettings(c));
}

std::string withSetting(const std::string& text, const std::string& name, const std::string& v) {
  const size_t at = text.find(name + "=");
  REQUIRE(at != std::string::npos);
  const size_t end = text.find('\n', at);
  return text.substr(0, at) + name + "=" + v + text.substr(end);
}

}  // namespace

TEST_CASE("job settings: every knob that shapes the messages, and no per-rank one") {
  const std::string base = textOf({});
  // Each of these changes what a collective or the control round sends: compared.
  const Env jobWide[] = {
      {{"KOLO_ALLREDUCE_ALGORITHM", "ring"}},
      {{"HOROVOD_ALLREDUCE_ALGORITHM", "recursive_doubling"}},
      {{"KOLO_ALLGATHER_ALGORITHM", "bruck"}},
      {{"KOLO_BROADCAST_ALGORITHM", "tree"}},
      {{"KOLO_ALLTOALL_ALGORITHM", "native"}},
      {{"KOLO_REDUCESCATTER_ALGORITHM", "ring"}},
      {{"KOLO_ALLREDUCE_HD_MIN_BYTES", "4096"}},
      {{"KOLO_ALLREDUCE_RING_MIN_BYTES", "1048576"}},
      {{"KOLO_SEGMENT_BYTES", "65536"}},
      {{"KOLO_HIERARCHICAL_ALLREDUCE", "1"}},
      {{"HOROVOD_HIERARCHICAL_ALLREDUCE", "0"}},
      {{"KOLO_FUSION_THRESHOLD", "0"}},
      {{"KOLO_FUSION_DIRECT_BYTES", "0"}},
      {{"HOROVOD_CACHE_CAPACITY", "16"}},
      {{"KOLO_CONTROL_PIGGYBACK_BYTES", "0"}},
      {{"KOLO_SHM", "off"}},
      {{"KOLO_GPU_OPERATIONS", "host"}},
      {{"HOROVOD_GPU_OPERATIONS", "NCCL"}},
  };
  for (const Env& e : jobWide) {
    INFO(e.begin()->first << "=" << e.begin()->second);
    CHECK(textOf(e) != base);
  }
  // Each of these is this rank's own: who and where it is, how long it waits, what it logs.
  const Env perRank[] = {
      {{"KOLO_RANK", "1"}, {"KOLO_SIZE", "2"}},
      {{"KOLO_LOCAL_RANK", "1"}, {"KOLO_LOCAL_SIZE", "2"}},
      {{"KOLO_CROSS_RANK", "1"}, {"KOLO_CROSS_SIZE", "2"}},
      {{"KOLO_HOSTNAME", "elsewhere"}},
      {{"KOLO_RENDEZVOUS_ADDR", "10.0.0.1"}, {"KOLO_RENDEZVOUS_PORT", "1234"}},
      {{"KOLO_RENDEZVOUS_DIR", "/tmp/x"}},
      {{"KOLO_RENDEZVOUS_ROUND", "3"}},
      {{"KOLO_GLOO_IFACE", "eth1"}},
      {{"KOLO_START_TIMEOUT", "30"}},
      {{"KOLO_CYCLE_TIME", "5"}},
      {{"KOLO_CALLER_ROUNDS", "0"}},
      {{"KOLO_STALL_CHECK_DISABLE", "1"}},
      {{"KOLO_STALL_CHECK_TIME_SECONDS", "5"}},
      {{"KOLO_STALL_SHUTDOWN_TIME_SECONDS", "0"}},
      {{"KOLO_TIMEOUT_SECONDS", "90"}},
      {{"KOLO_HEARTBEAT_SECONDS", "2"}},
      {{"KOLO_ASYNC_COMPLETION", "1"}},
      {{"KOLO_AUTOTUNE", "1"}, {"KOLO_AUTOTUNE_LOG", "/tmp/a.csv"}},
      {{"KOLO_AUTOTUNE_WARMUP_SAMPLES", "1"}, {"KOLO_AUTOTUNE_STEPS_PER_SAMPLE", "2"}},
      {{"KOLO_TIMELINE", "/tmp/t.json"}, {"KOLO_TIMELINE_MARK_CYCLES", "1"}},
      {{"KOLO_TIMELINE_ALL_RANKS", "1"}},
      {{"KOLO_LOG_LEVEL", "debug"}},
  };
  for (const Env& e : perRank) {
    INFO(e.begin()->first << "=" << e.begin()->second);
    CHECK(textOf(e) == base);
  }
  // The transport as resolved: auto and the kind it resolves to agree.
  if (transportBuilt(TransportKind::kGloo) && !launchedByMpi()) {
    CHECK(textOf({{"KOLO_CONTROLLER", "gloo"}}) == base);
    if (transportBuilt(TransportKind::kMpi)) CHECK(textOf({{"KOLO_CONTROLLER", "mpi"}}) != base);
  }
  // The same value in either spelling is the same setting.
  CHECK(textOf({{"KOLO_CACHE_CAPACITY", "16"}}) == textOf({{"HOROVOD_CACHE_CAPACITY", "16"}}));
  CHECK(textOf({{"KOLO_ALLREDUCE_ALGORITHM", "RING"}}) ==
        textOf({{"KOLO_ALLREDUCE_ALGORITHM", "ring"}}));
}

TEST_CASE("job settings: the digest") {
  const std::string a = textOf({}), b = textOf({{"KOLO_SEGMENT_BYTES", "65536"}});
  CHECK(settingsDigest(a).size() == 16);
  CHECK(settingsDigest(a).find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(settingsDigest(a) == settingsDigest(textOf({})));
  CHECK(settingsDigest(a) != settingsDigest(b));
}

TEST_CASE("job settings: the message names the variable, the values and the ranks") {
  const std::string base = textOf({});
  const std::string rd = withSetting(base, "KOLO_ALLREDUCE_ALGORITHM", "recursive_doubling");
  CHECK(compareSettings(0, {base, base, base}).isOk());

  Status s = compareSettings(0, {base, rd, base});
  CHECK(s.code() == ErrorCode::kInvalidArgument);
  CHECK(s.message() ==
        "KOLO_ALLREDUCE_ALGORITHM differs between ranks: 'auto' here (rank 0), "
        "'recursive_doubling' on rank 1; job-wide settings must be equal on every rank");
  s = compareSettings(1, {base, rd, base});
  CHECK(s.message() ==
        "KOLO_ALLREDUCE_ALGORITHM differs between ranks: 'recursive_doubling' here (rank 1), "
        "'auto' on ranks 0, 2; job-wide settings must be equal on every rank");

  // Two variables, two other values of one of them, an unset crossover.
  const std::string seg = withSetting(rd, "KOLO_SEGMENT_BYTES", "65536");
  const std::string ring = withSetting(base, "KOLO_ALLREDUCE_ALGORITHM", "ring");
  const std::string hd = withSetting(base, "KOLO_ALLREDUCE_HD_MIN_BYTES", "4096");
  s = compareSettings(0, {base, seg, ring, seg, hd});
  CHECK(s.message() ==
        "KOLO_ALLREDUCE_ALGORITHM differs between ranks: 'auto' here (rank 0), "
        "'recursive_doubling' on ranks 1, 3, 'ring' on rank 2; KOLO_ALLREDUCE_HD_MIN_BYTES "
        "differs between ranks: unset here (rank 0), '4096' on rank 4; KOLO_SEGMENT_BYTES "
        "differs between ranks: '262144' here (rank 0), '65536' on ranks 1, 3; job-wide "
        "settings must be equal on every rank");

  // Many ranks: eight are named, the rest counted.
  std::vector<std::string> many(20, base);
  many[0] = rd;
  s = compareSettings(0, many);
  CHECK_THAT(s.message(), Catch::Contains("'auto' on ranks 1, 2, 3, 4, 5, 6, 7, 8 and 11 more;"));

  // A rank whose list of variables is not ours runs another kolo.
  s = compareSettings(1, {base + "KOLO_NEW_KNOB=1\n", base});
  CHECK(s.code() == ErrorCode::kInvalidArgument);
  CHECK_THAT(s.message(), Catch::Contains("rank 0 name other variables") &&
                              Catch::Contains("every rank must run the same kolo"));
  CHECK(compareSettings(2, {base}).code() == ErrorCode::kInvalidArgument);
}

TEST_CASE("job settings: the store exchange carries the digest in host/<rank>") {
  const int size = 3;
  const std::string base = textOf({});
  const std::string rd = withSetting(base, "KOLO_ALLREDUCE_ALGORITHM", "recursive_doubling");
  const std::vector<std::string> names = {"h0", "h1", "h0"};
  for (bool differ : {false, true}) {
    INFO("settings differ: " << differ);
    auto store = makePrefixStore(makeMemoryStore(), "round3/");
    std::vector<std::vector<std::string>> hosts(size);
    auto results = testing::onRanks(size, [&](int r) {
      const std::string& mine = differ && r == 1 ? rd : base;
      return exchangeHostsAndSettings(*store, r, size, names[r], mine, 10s, &hosts[r]);
    });
    for (int r = 0; r < size; ++r) {
      INFO("rank " << r);
      if (!differ) {
        REQUIRE(results[r].isOk());
        CHECK(hosts[r] == names);
        continue;
      }
      CHECK(results[r].code() == ErrorCode::kInvalidArgument);
      CHECK_THAT(results[r].message(),
                 Catch::Contains("KOLO_ALLREDUCE_ALGORITHM differs between ranks: ") &&
                     Catch::Contains(r == 1 ? "'recursive_doubling' here (rank 1), 'auto' on "
                                              "ranks 0, 2"
                                            : "'recursive_doubling' on rank 1"));
    }
  }
  // A worker that publishes a bare host name (another kolo) is named at once.
  auto store = makeMemoryStore();
  REQUIRE(store->set("host/1", std::vector<uint8_t>{'h', '1'}).isOk());
  std::vector<std::string> hosts;
  Status s = exchangeHostsAndSettings(*store, 0, 2, "h0", base, 10s, &hosts);
  CHECK(s.code() == ErrorCode::kInvalidArgument);
  CHECK_THAT(s.message(), Catch::Contains("rank 1 published its host name without a digest"));
}

TEST_CASE("job settings: the exchange over a transport, without a store") {
  const int size = 3;
  const std::string base = textOf({});
  // Texts of other lengths: the second allgather takes the longest.
  const std::string longer = withSetting(base, "KOLO_ALLREDUCE_RING_MIN_BYTES", "1073741824");
  const std::string shorter = withSetting(base, "KOLO_SHM", "on");
  const std::vector<std::string> names = {"a", std::string(300, 'b'), "c"};
  for (bool differ : {false, true}) {
    INFO("settings differ: " << differ);
    std::vector<std::vector<std::string>> hosts(size);
    auto results = testing::runRanks(size, [&](Transport& t, int r) {
      const std::string& mine = !differ ? base : r == 1 ? longer : r == 2 ? shorter : base;
      return exchangeHostsAndSettings(t, names[r], mine, &hosts[r]);
    });
    for (int r = 0; r < size; ++r) {
      INFO("rank " << r);
      if (!differ) {
        REQUIRE(results[r].isOk());
        CHECK(hosts[r] == std::vector<std::string>{"a", std::string(255, 'b'), "c"});
        continue;
      }
      CHECK(results[r].code() == ErrorCode::kInvalidArgument);
      const std::string& msg = results[r].message();
      if (r == 0) {
        CHECK_THAT(msg, Catch::Contains("KOLO_ALLREDUCE_RING_MIN_BYTES differs between ranks: "
                                        "unset here (rank 0), '1073741824' on rank 1") &&
                            Catch::Contains("KOLO_SHM differs between ranks: 'auto' here (rank "
                                            "0), 'on' on rank 2"));
      } else {
        CHECK_THAT(msg, Catch::Contains("KOLO_ALLREDUCE_RING_MIN_BYTES") &&
                            Catch::Contains("KOLO_SHM differs"));
      }
    }
  }
}
