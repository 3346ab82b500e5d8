// SPDX-License-Identifier: Apache-2.0
// Job-wide settings (bootstrap/job_settings.h): ranks started with different values of a knob
// that changes the messages of a collective must all fail init at once, with an error naming
// the variable, the value here and the rank that differs -- not hang until KOLO_TIMEOUT_SECONDS
// or fail in the first collective with a message about tags and byte counts.
//
// Three ranks, three inits in the same processes:
//   1. rank 1 has KOLO_ALLREDUCE_ALGORITHM=recursive_doubling, rank 2 HOROVOD_CACHE_CAPACITY=16
//      (the Horovod spelling), rank 0 neither: every rank's init fails within 10 s naming both
//      variables, its own value and the other ranks';
//   2. rank 2 has the other KOLO_SHM than the job's: every init fails naming KOLO_SHM (without
//      a store the check must run before shared memory goes over the base transport);
//   3. every rank has the same values: init, an allreduce with its exact sum, shutdown.
//
// Usage: kolo_mp_settings_test file|tcp on|off [INITS]: the parent makes the store (a temporary
// directory, or a TcpStoreServer on 127.0.0.1), starts three copies of itself as the ranks over
// Gloo (KOLO_SHM as given) and waits at most 120 s. Under mpirun (-np 3): kolo_mp_settings_test
// mpi on|off [INITS], no store. INITS (default 1): step 3 is repeated that many times and the
// mean init time printed (the cost of the check: compare with a build without it).
#include <kolo.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "test/support/forked_job.h"

namespace {

using Clock = std::chrono::steady_clock;

int gRank = -1;

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "settings: rank %d (pid %d): %s\n", gRank, static_cast<int>(getpid()),
               what.c_str());
  std::fflush(stderr);
  _exit(1);
}

void check(bool ok, const std::string& what) {
  if (!ok) die(what);
}

void setEnv(const char* name, const std::string& value) { setenv(name, value.c_str(), 1); }

double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The knobs this test sets, in both spellings: cleared before each step.
void clearKnobs() {
  for (const char* name : {"ALLREDUCE_ALGORITHM", "CACHE_CAPACITY"}) {
    unsetenv((std::string("KOLO_") + name).c_str());
    unsetenv((std::string("HOROVOD_") + name).c_str());
  }
}

// An init that must fail on this rank, quickly, with every `expected` piece in its message.
void initMustFail(const std::string& step, const std::vector<std::string>& expected) {
  const auto start = Clock::now();
  const int rc = kolo_init();
  const double took = secondsSince(start);
  if (rc == KOLO_OK) {
    kolo_shutdown();
    die(step + ": kolo_init succeeded although the job-wide settings differ between ranks");
  }
  const std::string err = kolo_last_error();
  std::printf("settings: rank %d: %s: init failed in %.3f s: %s\n", gRank, step.c_str(), took,
              err.c_str());
  std::fflush(stdout);
  check(rc == KOLO_ERR_INVALID_ARGUMENT, step + ": kolo_init returned " + std::to_string(rc) +
                                             ", expected KOLO_ERR_INVALID_ARGUMENT: " + err);
  for (const std::string& piece : expected) {
    check(err.find(piece) != std::string::npos,
          step + ": the error does not say \"" + piece + "\": " + err);
  }
  // KOLO_TIMEOUT_SECONDS is 30: well under it, and under the start timeout (60).
  check(took < 10, step + ": the failing init took " + std::to_string(took) + " s");
}

// Init, an allreduce of known sum, shutdown; returns the init's seconds.
double initAndAllreduce(const std::string& step, const std::string& shm) {
  const auto start = Clock::now();
  const int rc = kolo_init();
  const double took = secondsSince(start);
  if (rc != KOLO_OK) die(step + ": kolo_init failed: " + kolo_last_error());
  check(kolo_rank() == gRank && kolo_size() == 3, step + ": kolo says rank " +
                                                      std::to_string(kolo_rank()) + " of " +
                                                      std::to_string(kolo_size()));
  const bool onShm = std::string(kolo_transport_name()) == "shm";
  check(onShm == (shm == "on"),
        step + ": KOLO_SHM=" + shm + " but the transport is " + kolo_transport_name());
  constexpr int kCount = 4096;
  std::vector<int32_t> data(kCount);
  for (int i = 0; i < kCount; ++i) data[i] = (gRank + 1) * 1000 + i;
  int64_t shape[1] = {kCount};
  kolo_tensor_t t = {data.data(), KOLO_INT32, 1, shape, KOLO_CPU_DEVICE, nullptr};
  kolo_handle_t h = 0;
  if (kolo_allreduce_async("settings.equal", &t, nullptr, KOLO_SUM, 1.0, 1.0, 0, nullptr, nullptr,
                           &h) != KOLO_OK) {
    die(step + ": allreduce submission failed: " + kolo_last_error());
  }
  if (kolo_handle_wait(h, 60.0) != KOLO_OK) die(step + ": allreduce failed: " + kolo_last_error());
  kolo_handle_release(h);
  for (int i = 0; i < kCount; ++i) {
    const int32_t want = 6000 + 3 * i;  // (1 + 2 + 3) * 1000 + 3 i
    check(data[i] == want, step + ": element " + std::to_string(i) + " is " +
                               std::to_string(data[i]) + ", expected " + std::to_string(want));
  }
  if (kolo_shutdown() != KOLO_OK) die(step + ": kolo_shutdown failed: " + kolo_last_error());
  return took;
}

int rankMain(int rank, const std::string& shm, int inits) {
  gRank = rank;
  unsetenv("KOLO_RENDEZVOUS_ROUND");
  unsetenv("HOROVOD_RENDEZVOUS_ROUND");
  const std::string other = shm == "on" ? "off" : "on";

  // 1. An algorithm on rank 1, the cache capacity on rank 2 (Horovod's spelling).
  clearKnobs();
  setEnv("KOLO_SHM", shm);
  if (rank == 1) setEnv("KOLO_ALLREDUCE_ALGORITHM", "recursive_doubling");
  if (rank == 2) setEnv("HOROVOD_CACHE_CAPACITY", "16");
  const std::string here = " here (rank " + std::to_string(rank) + ")";
  const std::string algorithm = "KOLO_ALLREDUCE_ALGORITHM differs between ranks: ";
  const std::string cache = "KOLO_CACHE_CAPACITY differs between ranks: ";
  std::vector<std::string> expected = {"job-wide settings must be equal on every rank"};
  if (rank == 1) {
    expected.push_back(algorithm + "'recursive_doubling'" + here + ", 'auto' on ranks 0, 2");
  } else {
    expected.push_back(algorithm + "'auto'" + here + ", 'recursive_doubling' on rank 1");
  }
  if (rank == 2) {
    expected.push_back(cache + "'16'" + here + ", '1024' on ranks 0, 1");
  } else {
    expected.push_back(cache + "'1024'" + here + ", '16' on rank 2");
  }
  initMustFail("algorithm and cache capacity", expected);

  // 2. KOLO_SHM on rank 2 only.
  clearKnobs();
  setEnv("KOLO_SHM", rank == 2 ? other : shm);
  const std::string mine = rank == 2 ? other : shm;
  initMustFail("KOLO_SHM", {"KOLO_SHM differs between ranks: '" + mine + "'" + here + ", '" +
                            (rank == 2 ? shm + "' on ranks 0, 1" : other + "' on rank 2")});

  // 3. The same values everywhere: a working job.
  clearKnobs();
  setEnv("KOLO_SHM", shm);
  setEnv("KOLO_ALLREDUCE_ALGORITHM", "recursive_doubling");
  setEnv("HOROVOD_CACHE_CAPACITY", "16");
  double total = 0;
  for (int i = 0; i < inits; ++i) total += initAndAllreduce("equal settings", shm);
  std::printf("settings: rank %d: equal settings: %d init(s), mean %.1f ms\n", rank, inits,
              1000 * total / inits);
  std::fflush(stdout);
  return 0;
}

int parent(const char* self, const std::string& storeKind, const std::string& shm,
           const std::string& inits) {
  kolo::test::ForkedJob job("settings", storeKind);
  setEnv("KOLO_SIZE", "3");
  const int failed = job.run(3, [&](int r) {
    setEnv("KOLO_RANK", std::to_string(r));  // before the fork: the child inherits it
    return std::vector<std::string>{self, "--rank", std::to_string(r), shm, inits};
  });
  if (failed == 0) {
    std::printf("settings: store=%s shm=%s: every rank passed\n", storeKind.c_str(), shm.c_str());
  }
  return failed == 0 ? 0 : 1;
}

// Under mpirun: this process is one rank, told by the MPI launcher's variables.
int mpiRank() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"}) {
    if (const char* v = std::getenv(name)) return std::atoi(v);
  }
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (argc >= 5 && mode == "--rank") {
    return rankMain(std::atoi(argv[2]), argv[3], std::atoi(argv[4]));
  }
  const std::string shm = argc > 2 ? argv[2] : "";
  const int inits = argc > 3 ? std::atoi(argv[3]) : 1;
  if ((mode != "file" && mode != "tcp" && mode != "mpi") || (shm != "on" && shm != "off") ||
      argc > 4 || inits < 1) {
    std::fprintf(stderr, "usage: %s file|tcp|mpi on|off [INITS]\n", argv[0]);
    return 2;
  }
  if (mode == "mpi") {
    const int rank = mpiRank();
    if (rank < 0) {
      std::fprintf(stderr, "settings: 'mpi' runs under mpirun -np 3\n");
      return 2;
    }
    for (const char* name : {"KOLO_RENDEZVOUS_ADDR", "KOLO_RENDEZVOUS_PORT", "KOLO_RENDEZVOUS_DIR",
                             "KOLO_RANK", "KOLO_SIZE"}) {
      unsetenv(name);
    }
    setEnv("KOLO_CONTROLLER", "mpi");
    setEnv("KOLO_START_TIMEOUT", "60");
    if (std::getenv("KOLO_TIMEOUT_SECONDS") == nullptr) setEnv("KOLO_TIMEOUT_SECONDS", "30");
    return rankMain(rank, shm, inits);
  }
  return parent("/proc/self/exe", mode, shm, std::to_string(inits));
}
