// SPDX-License-Identifier: Apache-2.0
#include <catch2/catch.hpp>

#include <map>

#include "base/config.h"
#include "base/status.h"
#include "base/types.h"

using namespace kolo;

TEST_CASE("every dtype has a size and a name") {
  for (int i = 0; i < kNumDataTypes; ++i) {
    auto t = static_cast<DataType>(i);
    CHECK(sizeOf(t) > 0);
    CHECK(std::string(toString(t)) != "unknown-dtype");
  }
  CHECK(sizeOf(DataType::kBFloat16) == 2);
  CHECK(sizeOf(DataType::kInt64) == 8);
}

TEST_CASE("status carries code and message") {
  Status s(ErrorCode::kPeerLost, "rank 2 closed its connection");
  CHECK_FALSE(s.isOk());
  CHECK(s.toString() == "PEER_LOST: rank 2 closed its connection");
  CHECK(Status::ok().toString() == "OK");
}

TEST_CASE("config reads KOLO_ and HOROVOD_ names and rejects bad values") {
  std::map<std::string, std::string> env = {{"HOROVOD_FUSION_THRESHOLD", "1024"},
                                            {"KOLO_CYCLE_TIME", "2.5"},
                                            {"HOROVOD_CYCLE_TIME", "9"},
                                            {"KOLO_ALLREDUCE_ALGORITHM", "ring"}};
  auto get = [&](const char* n) -> const char* {
    auto it = env.find(n);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  Config c;
  REQUIRE(Config::fromEnvironment(&c, get).isOk());
  CHECK(c.fusionThresholdBytes == 1024);
  CHECK(c.cycleTimeMs == 2.5);
  CHECK(c.algorithms.allreduce == ops::Algorithm::kRing);
  CHECK_FALSE(c.asyncCompletion);
  // Nothing waits forever by default: stalled ops fail after 30 minutes (0 = never).
  CHECK(c.stallShutdownSeconds == 1800);
  env["HOROVOD_STALL_SHUTDOWN_TIME_SECONDS"] = "0";
  REQUIRE(Config::fromEnvironment(&c, get).isOk());
  CHECK(c.stallShutdownSeconds == 0);
  env["KOLO_STALL_SHUTDOWN_TIME_SECONDS"] = "90";
  REQUIRE(Config::fromEnvironment(&c, get).isOk());
  CHECK(c.stallShutdownSeconds == 90);

  // Horovod's name for asynchronous completion of GPU ops; KOLO_ wins when both are set.
  env["HOROVOD_ENABLE_ASYNC_COMPLETION"] = "1";
  Status s0;
  REQUIRE(Config::fromEnvironment(&c, get).isOk());
  CHECK(c.asyncCompletion);
  env["KOLO_ASYNC_COMPLETION"] = "off";
  REQUIRE(Config::fromEnvironment(&c, get).isOk());
  CHECK_FALSE(c.asyncCompletion);

  // Horovod's HOROVOD_GPU_OPERATIONS=MPI|GLOO means the host-staged path; KOLO_ wins.
  CHECK(c.gpuOperations == GpuOperations::kAuto);
  env["HOROVOD_GPU_OPERATIONS"] = "MPI";
  REQUIRE(Config::fromEnvironment(&c, get).isOk());
  CHECK(c.gpuOperations == GpuOperations::kHost);
  env["KOLO_GPU_OPERATIONS"] = "nccl";
  REQUIRE(Config::fromEnvironment(&c, get).isOk());
  CHECK(c.gpuOperations == GpuOperations::kNccl);
  env["KOLO_GPU_OPERATIONS"] = "ddl";
  s0 = Config::fromEnvironment(&c, get);
  CHECK(s0.code() == ErrorCode::kInvalidArgument);
  CHECK(s0.message().find("KOLO_GPU_OPERATIONS='ddl'") != std::string::npos);
  env.erase("KOLO_GPU_OPERATIONS");

  env["KOLO_CACHE_CAPACITY"] = "lots";
  Status s = Config::fromEnvironment(&c, get);
  CHECK(s.code() == ErrorCode::kInvalidArgument);
  CHECK(s.message().find("KOLO_CACHE_CAPACITY='lots'") != std::string::npos);
}
