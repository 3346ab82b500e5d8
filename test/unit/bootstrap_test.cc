// SPDX-License-Identifier: Apache-2.0
// bootstrap(): rendezvous rounds (key prefixes, KOLO_RENDEZVOUS_ROUND, the stale-round refusal)
// as a one-rank Gloo job over a file store in a temporary directory, so no second process is
// needed; the multi-process re-init test is test/mp/reinit_mp_test.cc.
#include "bootstrap/bootstrap.h"

#include <stdlib.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <map>
#include <string>

#include "bootstrap/registry.h"

using namespace kolo;

namespace {

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/kolo-bootstrap-test-XXXXXX";
    REQUIRE(mkdtemp(tmpl) != nullptr);
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

Config oneRankGloo(const std::string& dir) {
  Config c;
  c.transport = TransportKind::kGloo;
  c.rank = 0;
  c.size = 1;
  c.rendezvousDir = dir;
  c.shm = ShmMode::kOff;
  c.startTimeoutSeconds = 5;
  return c;
}

bool hasKey(const std::string& dir, const std::string& key) {
  std::shared_ptr<Store> store;
  REQUIRE(makeFileStore(dir, &store).isOk());
  bool exists = false;
  REQUIRE(store->check(key, &exists).isOk());
  return exists;
}

}  // namespace

TEST_CASE("bootstrap: round prefixes") {
  CHECK(roundPrefix(0).empty());
  CHECK(roundPrefix(1) == "round1/");
  CHECK(roundPrefix(12) == "round12/");
}

TEST_CASE("bootstrap: KOLO_RENDEZVOUS_ROUND and HOROVOD_RENDEZVOUS_ROUND") {
  std::map<std::string, std::string> vars;
  auto env = [&vars](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
  Config c;
  REQUIRE(Config::fromEnvironment(&c, env).isOk());
  CHECK(c.rendezvousRound == -1);
  CHECK(c.toString().find("RENDEZVOUS_ROUND") == std::string::npos);
  vars["HOROVOD_RENDEZVOUS_ROUND"] = "4";
  REQUIRE(Config::fromEnvironment(&c, env).isOk());
  CHECK(c.rendezvousRound == 4);
  vars["KOLO_RENDEZVOUS_ROUND"] = "9";
  REQUIRE(Config::fromEnvironment(&c, env).isOk());
  CHECK(c.rendezvousRound == 9);
  CHECK(c.toString().find("KOLO_RENDEZVOUS_ROUND=9") != std::string::npos);
  vars["KOLO_RENDEZVOUS_ROUND"] = "-1";
  Status s = Config::fromEnvironment(&c, env);
  CHECK(s.code() == ErrorCode::kInvalidArgument);
  CHECK_THAT(s.message(), Catch::Contains("KOLO_RENDEZVOUS_ROUND"));
}

TEST_CASE("bootstrap: each round has its own keys; an older round is refused") {
  if (!transportBuilt(TransportKind::kGloo)) {
    WARN("kolo was built without Gloo");
    return;
  }
  TempDir dir;
  const Config cfg = oneRankGloo(dir.path);

  BootstrapResult first;
  REQUIRE(bootstrap(cfg, 0, &first).isOk());
  CHECK(first.round == 0);
  CHECK(first.config.rank == 0);
  CHECK(first.config.size == 1);
  CHECK(first.topology.size == 1);
  CHECK(first.hosts.size() == 1);
  REQUIRE(first.transport != nullptr);
  CHECK(hasKey(dir.path, "host/0"));  // round 0: the keys kolorun watches, unprefixed

  // The default round is the count of earlier inits.
  BootstrapResult second;
  REQUIRE(bootstrap(cfg, 1, &second).isOk());
  CHECK(second.round == 1);
  CHECK(hasKey(dir.path, "round1/host/0"));

  // An explicit round wins over the count.
  Config explicitRound = cfg;
  explicitRound.rendezvousRound = 5;
  BootstrapResult fifth;
  REQUIRE(bootstrap(explicitRound, 1, &fifth).isOk());
  CHECK(fifth.round == 5);
  CHECK(hasKey(dir.path, "round5/host/0"));
  CHECK_FALSE(hasKey(dir.path, "round2/host/0"));

  // A worker of an older round is refused at once, naming both rounds.
  BootstrapResult stale;
  const auto start = std::chrono::steady_clock::now();
  Status s = bootstrap(cfg, 2, &stale);
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(s.code() == ErrorCode::kAborted);
  CHECK_THAT(s.message(), Catch::Contains("round 2") && Catch::Contains("round 5"));
  CHECK(took < 3.0);
  CHECK(stale.transport == nullptr);
  CHECK_FALSE(hasKey(dir.path, "round2/host/0"));

  // The same round again (every rank of a round enters it) is fine.
  BootstrapResult again;
  Config same = cfg;
  same.rendezvousRound = 6;
  REQUIRE(bootstrap(same, 0, &again).isOk());
  CHECK(again.round == 6);
}

TEST_CASE("bootstrap: a job of one needs no store") {
  Config c;
  c.shm = ShmMode::kOff;
  BootstrapResult b;
  REQUIRE(bootstrap(c, 3, &b).isOk());
  CHECK(b.store == nullptr);
  CHECK(b.config.rank == 0);
  CHECK(b.config.size == 1);
  CHECK(std::string(b.transport->name()) == "loopback");
}

TEST_CASE("bootstrap: inconsistent configurations name the variables") {
  Config c;
  c.size = 2;
  BootstrapResult b;
  Status s = bootstrap(c, 0, &b);
  CHECK(s.code() == ErrorCode::kInvalidArgument);
  CHECK_THAT(s.message(), Catch::Contains("KOLO_RANK"));
  Config d;
  d.rank = 0;
  d.size = 2;
  d.transport = TransportKind::kGloo;
  d.rendezvousAddr = "127.0.0.1";
  s = bootstrap(d, 0, &b);
  CHECK(s.code() == ErrorCode::kInvalidArgument);
  CHECK_THAT(s.message(), Catch::Contains("KOLO_RENDEZVOUS_PORT"));
}
