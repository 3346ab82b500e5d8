// SPDX-License-Identifier: Apache-2.0
// Re-init in one process (bootstrap/bootstrap.h): three processes init as a world of 3 and
// allreduce, shut down; two of them init again as a world of 2 with their ranks swapped and
// allreduce, then once more at the same size, then once more at an explicit
// KOLO_RENDEZVOUS_ROUND; the third, a worker of the first round, tries to join after the others
// moved on and must be refused at once (kAborted naming the rounds), not hang or join.
//
// Usage: kolo_mp_reinit_test file|tcp on|off. The parent makes the store (a temporary directory,
// or a TcpStoreServer on 127.0.0.1), starts three copies of itself as the ranks (KOLO_SHM as
// given) and waits at most 120 s for them; exit status 0 only when every rank passed.
#include <kolo.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "test/support/forked_job.h"

namespace {

using Clock = std::chrono::steady_clock;

int gOldRank = -1;

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "reinit: process %d (first-round rank %d): %s\n", static_cast<int>(getpid()),
               gOldRank, what.c_str());
  std::fflush(stderr);
  _exit(1);
}

void check(bool ok, const std::string& what) {
  if (!ok)
    die(what + (kolo_last_error()[0] != '\0' ? std::string(" (") + kolo_last_error() + ")" : ""));
}

void setEnv(const char* name, const std::string& value) { setenv(name, value.c_str(), 1); }

// One round: init as `rank` of `size`, allreduce a float32 vector whose expected sum is known,
// shut down.
void round(const std::string& label, int rank, int size, const std::string& shm) {
  setEnv("KOLO_RANK", std::to_string(rank));
  setEnv("KOLO_SIZE", std::to_string(size));
  const std::string where =
      label + " (rank " + std::to_string(rank) + " of " + std::to_string(size) + ")";
  check(kolo_init() == KOLO_OK, where + ": kolo_init failed");
  check(kolo_rank() == rank && kolo_size() == size, where + ": kolo says rank " +
                                                        std::to_string(kolo_rank()) + " of " +
                                                        std::to_string(kolo_size()));
  const bool onShm = std::string(kolo_transport_name()) == "shm";
  check(onShm == (shm == "on"),
        where + ": KOLO_SHM=" + shm + " but the transport is " + kolo_transport_name());

  constexpr int kCount = 1000;
  std::vector<float> data(kCount);
  for (int i = 0; i < kCount; ++i) data[i] = static_cast<float>((rank + 1) * 100 + i);
  int64_t shape[1] = {kCount};
  kolo_tensor_t t = {data.data(), KOLO_FLOAT32, 1, shape, KOLO_CPU_DEVICE, nullptr};
  kolo_handle_t h = 0;
  const std::string name = "reinit." + label;
  check(kolo_allreduce_async(name.c_str(), &t, nullptr, KOLO_SUM, 1.0, 1.0, 0, nullptr, nullptr,
                             &h) == KOLO_OK,
        where + ": allreduce submission failed");
  check(kolo_handle_wait(h, 60.0) == KOLO_OK, where + ": allreduce failed");
  kolo_handle_release(h);
  const double ranksSum = 100.0 * size * (size + 1) / 2;
  for (int i = 0; i < kCount; ++i) {
    const double want = ranksSum + static_cast<double>(size) * i;
    check(data[i] == static_cast<float>(want), where + ": element " + std::to_string(i) + " is " +
                                                   std::to_string(data[i]) + ", expected " +
                                                   std::to_string(want));
  }
  check(kolo_shutdown() == KOLO_OK, where + ": kolo_shutdown failed");
  check(kolo_is_initialized() == 0, where + ": still initialized after shutdown");
}

void touch(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) die("cannot create " + path);
  std::fclose(f);
}

bool waitForFiles(const std::vector<std::string>& paths, std::chrono::seconds limit) {
  const auto end = Clock::now() + limit;
  for (;;) {
    bool all = true;
    for (const auto& p : paths) all = all && std::filesystem::exists(p);
    if (all) return true;
    if (Clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

int child(int oldRank, const std::string& shm, const std::string& flags) {
  gOldRank = oldRank;
  unsetenv("KOLO_RENDEZVOUS_ROUND");
  unsetenv("HOROVOD_RENDEZVOUS_ROUND");
  round("world3", oldRank, 3, shm);
  if (oldRank == 2) {
    // The stale worker: its next init is its process's round 1, but by now the others are at
    // round 2 or later. It must be refused quickly, not wait out KOLO_START_TIMEOUT.
    if (!waitForFiles({flags + "/world2b.0", flags + "/world2b.1"}, std::chrono::seconds(90))) {
      die("the other ranks never finished their third round");
    }
    setEnv("KOLO_RANK", "0");
    setEnv("KOLO_SIZE", "2");
    const auto start = Clock::now();
    const int rc = kolo_init();
    const double took = std::chrono::duration<double>(Clock::now() - start).count();
    if (rc == KOLO_OK) {
      kolo_shutdown();
      die("a worker of round 1 joined a job at a later round");
    }
    const std::string err = kolo_last_error();
    check(rc == KOLO_ERR_ABORTED, "the stale init failed with status " + std::to_string(rc) + " (" +
                                      err + "), expected KOLO_ERR_ABORTED");
    check(err.find("round 1") != std::string::npos && err.find("old round") != std::string::npos,
          "the stale init's error does not name its round: " + err);
    check(took < 20, "the stale init took " + std::to_string(took) + " s to fail");
    return 0;
  }
  // A new numbering: the first round's rank 1 is rank 0 now, and 0 is 1.
  const int newRank = 1 - oldRank;
  round("world2", newRank, 2, shm);
  round("world2b", newRank, 2, shm);  // the same size once more, same process
  touch(flags + "/world2b." + std::to_string(newRank));
  setEnv("KOLO_RENDEZVOUS_ROUND", "7");  // as a launcher restarting the job would set it
  round("world2-round7", oldRank, 2, shm);
  return 0;
}

int parent(const char* self, const std::string& storeKind, const std::string& shm) {
  kolo::test::ForkedJob job("reinit", storeKind);
  const std::string flags = job.dir() + "/flags";
  std::filesystem::create_directories(flags);
  setEnv("KOLO_SHM", shm);
  const int failed = job.run(3, [&](int r) {
    return std::vector<std::string>{self, "--child", std::to_string(r), shm, flags};
  });
  if (failed == 0)
    std::printf("reinit: store=%s shm=%s: every rank passed\n", storeKind.c_str(), shm.c_str());
  return failed == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 5 && std::string(argv[1]) == "--child") {
    return child(std::atoi(argv[2]), argv[3], argv[4]);
  }
  if (argc != 3 || (std::string(argv[1]) != "file" && std::string(argv[1]) != "tcp") ||
      (std::string(argv[2]) != "on" && std::string(argv[2]) != "off")) {
    std::fprintf(stderr, "usage: %s file|tcp on|off\n", argv[0]);
    return 2;
  }
  return parent("/proc/self/exe", argv[1], argv[2]);
}
