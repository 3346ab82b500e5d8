// SPDX-License-Identifier: Apache-2.0
// The transport registry: launcher detection (Open MPI, MPICH/Hydra, Slurm) through a fake
// environment, kAuto resolution, and createTransport's choices and errors (Gloo at size 1 over
// an in-memory store, so no second process is needed).
#include "bootstrap/registry.h"

#include <catch2/catch.hpp>
#include <map>
#include <string>

using namespace kolo;

namespace {

GetEnvFn fakeEnv(const std::map<std::string, std::string>& vars) {
  return [vars](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

Config detected(const std::map<std::string, std::string>& vars, Status* status) {
  Config cfg;
  *status = detectLaunchEnvironment(&cfg, fakeEnv(vars));
  return cfg;
}

}  // namespace

TEST_CASE("registry: what is built") {
  CHECK(transportBuilt(TransportKind::kLoopback));
  CHECK(transportBuilt(TransportKind::kAuto) ==
        (transportBuilt(TransportKind::kMpi) || transportBuilt(TransportKind::kGloo)));
}

TEST_CASE("registry: Open MPI, Hydra and Slurm variables fill rank, size and local sizes") {
  Status s;
  Config c = detected({{"OMPI_COMM_WORLD_RANK", "3"},
                       {"OMPI_COMM_WORLD_SIZE", "8"},
                       {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                       {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                       {"SLURM_PROCID", "7"},
                       {"SLURM_NTASKS", "9"}},
                      &s);
  REQUIRE(s.isOk());
  CHECK(c.rank == 3);
  CHECK(c.size == 8);
  CHECK(c.localRank == 1);
  CHECK(c.localSize == 2);

  c = detected({{"PMI_RANK", "2"}, {"PMI_SIZE", "4"}, {"MPI_LOCALRANKID", "0"}}, &s);
  REQUIRE(s.isOk());
  CHECK(c.rank == 2);
  CHECK(c.size == 4);
  CHECK(c.localRank == 0);
  CHECK(c.localSize == -1);

  // Slurm: 3 nodes with 2 tasks, then 1 node with 1; this task is on node 3.
  c = detected({{"SLURM_PROCID", "6"},
                {"SLURM_NTASKS", "7"},
                {"SLURM_LOCALID", "0"},
                {"SLURM_NODEID", "3"},
                {"SLURM_TASKS_PER_NODE", "2(x3),1"}},
               &s);
  REQUIRE(s.isOk());
  CHECK(c.rank == 6);
  CHECK(c.size == 7);
  CHECK(c.localRank == 0);
  CHECK(c.localSize == 1);
  // The step's own layout wins over the allocation's.
  c = detected({{"SLURM_PROCID", "1"},
                {"SLURM_NPROCS", "4"},
                {"SLURM_NODEID", "0"},
                {"SLURM_TASKS_PER_NODE", "1(x4)"},
                {"SLURM_STEP_TASKS_PER_NODE", "2(x2)"}},
               &s);
  REQUIRE(s.isOk());
  CHECK(c.size == 4);
  CHECK(c.localSize == 2);

  // Nothing recognized: unchanged.
  c = detected({{"HOME", "/root"}}, &s);
  REQUIRE(s.isOk());
  CHECK(c.rank == -1);
  CHECK(c.size == -1);
}

TEST_CASE("registry: KOLO_RANK wins and malformed launcher variables are named") {
  Config cfg;
  cfg.rank = 0;
  cfg.size = 2;
  REQUIRE(detectLaunchEnvironment(
              &cfg, fakeEnv({{"OMPI_COMM_WORLD_RANK", "5"}, {"OMPI_COMM_WORLD_SIZE", "6"}}))
              .isOk());
  CHECK(cfg.rank == 0);
  CHECK(cfg.size == 2);

  Status s;
  detected({{"OMPI_COMM_WORLD_RANK", "x"}, {"OMPI_COMM_WORLD_SIZE", "6"}}, &s);
  CHECK(s.code() == ErrorCode::kInvalidArgument);
  CHECK_THAT(s.message(), Catch::Contains("OMPI_COMM_WORLD_RANK='x'"));
  detected({{"OMPI_COMM_WORLD_RANK", "6"}, {"OMPI_COMM_WORLD_SIZE", "6"}}, &s);
  CHECK(s.code() == ErrorCode::kInvalidArgument);
  for (const char* bad : {"2(x", "2(y3)", "0", "2,,1", "2(x3)z"}) {
    detected({{"SLURM_PROCID", "0"},
              {"SLURM_NTASKS", "2"},
              {"SLURM_NODEID", "0"},
              {"SLURM_TASKS_PER_NODE", bad}},
             &s);
    INFO(bad);
    CHECK(s.code() == ErrorCode::kInvalidArgument);
    CHECK_THAT(s.message(), Catch::Contains("SLURM_TASKS_PER_NODE"));
  }
  detected({{"SLURM_PROCID", "0"},
            {"SLURM_NTASKS", "2"},
            {"SLURM_NODEID", "4"},
            {"SLURM_TASKS_PER_NODE", "1(x2)"}},
           &s);
  CHECK(s.code() == ErrorCode::kInvalidArgument);
  CHECK_THAT(s.message(), Catch::Contains("no entry for node 4"));
}

TEST_CASE("registry: auto picks MPI under an MPI launcher, Gloo otherwise") {
  Config cfg;
  const auto none = fakeEnv({});
  CHECK_FALSE(launchedByMpi(none));
  CHECK(launchedByMpi(fakeEnv({{"OMPI_COMM_WORLD_SIZE", "2"}})));
  CHECK(launchedByMpi(fakeEnv({{"PMI_SIZE", "2"}})));
  CHECK(launchedByMpi(fakeEnv({{"PMIX_RANK", "0"}})));
  CHECK_FALSE(launchedByMpi(fakeEnv({{"SLURM_PROCID", "0"}})));
  const TransportKind underMpi = resolveTransportKind(cfg, fakeEnv({{"PMIX_RANK", "0"}}));
  const TransportKind plain = resolveTransportKind(cfg, none);
  if (transportBuilt(TransportKind::kMpi)) CHECK(underMpi == TransportKind::kMpi);
  if (transportBuilt(TransportKind::kGloo)) CHECK(plain == TransportKind::kGloo);
  cfg.transport = TransportKind::kGloo;
  CHECK(resolveTransportKind(cfg, fakeEnv({{"PMIX_RANK", "0"}})) == TransportKind::kGloo);
}

TEST_CASE("registry: createTransport choices and errors") {
  Config cfg;
  std::unique_ptr<Transport> t;
  cfg.transport = TransportKind::kLoopback;
  CHECK(createTransport(cfg, makeMemoryStore(), 0, 1, &t).code() == ErrorCode::kUnsupported);

  cfg.transport = TransportKind::kGloo;
  if (!transportBuilt(TransportKind::kGloo)) {
    CHECK(createTransport(cfg, makeMemoryStore(), 0, 1, &t).code() == ErrorCode::kUnsupported);
    return;
  }
  CHECK(createTransport(cfg, nullptr, 0, 1, &t).code() == ErrorCode::kInvalidArgument);
  CHECK(createTransport(cfg, makeMemoryStore(), -1, -1, &t).code() == ErrorCode::kInvalidArgument);
  cfg.rank = 0;
  cfg.size = 1;
  cfg.timeoutSeconds = 2.5;
  cfg.shm = ShmMode::kOff;
  REQUIRE(createTransport(cfg, makeMemoryStore(), -1, -1, &t).isOk());
  REQUIRE(t != nullptr);
  CHECK(std::string(t->name()) == "gloo");
  CHECK(t->rank() == 0);
  CHECK(t->size() == 1);
  CHECK(t->timeout() == std::chrono::milliseconds(2500));
  int64_t v = 41;
  CHECK(t->allreduce(&v, 1, DataType::kInt64, ReduceOp::kSum).isOk());
  CHECK(v == 41);
  cfg.glooIface = "no-such-if0";
  CHECK(createTransport(cfg, makeMemoryStore(), -1, -1, &t).code() == ErrorCode::kInvalidArgument);
}
