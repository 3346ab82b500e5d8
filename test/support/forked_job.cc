// SPDX-License-Identifier: Apache-2.0
#include "test/support/forked_job.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>

namespace kolo::test {
namespace {

[[noreturn]] void die(const std::string& tag, const std::string& what) {
  std::fprintf(stderr, "%s: %s\n", tag.c_str(), what.c_str());
  std::exit(1);
}

void setEnv(const char* name, const std::string& value) { setenv(name, value.c_str(), 1); }

}  // namespace

ForkedJob::ForkedJob(const std::string& tag, const std::string& storeKind) : tag_(tag) {
  std::string tmpl = "/tmp/kolo-" + tag + "-XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) die(tag_, "mkdtemp failed");
  dir_ = tmpl;
  const std::string storeDir = dir_ + "/store";
  std::filesystem::create_directories(storeDir);
  if (storeKind == "tcp") {
    Status s = startTcpStoreServer("127.0.0.1", 0, &server_);
    if (!s.isOk()) die(tag_, "cannot start the store server: " + s.toString());
    setEnv("KOLO_RENDEZVOUS_ADDR", "127.0.0.1");
    setEnv("KOLO_RENDEZVOUS_PORT", std::to_string(server_->port()));
    unsetenv("KOLO_RENDEZVOUS_DIR");
  } else {
    setEnv("KOLO_RENDEZVOUS_DIR", storeDir);
    unsetenv("KOLO_RENDEZVOUS_ADDR");
    unsetenv("KOLO_RENDEZVOUS_PORT");
  }
  setEnv("KOLO_CONTROLLER", "gloo");
  setEnv("KOLO_START_TIMEOUT", "60");
  if (std::getenv("KOLO_TIMEOUT_SECONDS") == nullptr) setEnv("KOLO_TIMEOUT_SECONDS", "30");
}

ForkedJob::~ForkedJob() {
  server_.reset();
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

int ForkedJob::run(int n, const std::function<std::vector<std::string>(int)>& argvOf,
                   std::chrono::seconds limit) {
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    std::vector<std::string> args = argvOf(r);
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = fork();
    if (pid < 0) die(tag_, "fork failed");
    if (pid == 0) {
      execv(argv[0], argv.data());
      _exit(127);
    }
    pids.push_back(pid);
  }
  int failed = 0;
  const auto end = std::chrono::steady_clock::now() + limit;
  size_t left = pids.size();
  while (left > 0) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      --left;
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        std::fprintf(stderr, "%s: rank process %d failed (status %d)\n", tag_.c_str(),
                     static_cast<int>(pid), status);
        ++failed;
      }
      continue;
    }
    if (std::chrono::steady_clock::now() > end) {
      std::fprintf(stderr, "%s: the ranks did not finish within %lld s; killing them\n",
                   tag_.c_str(), static_cast<long long>(limit.count()));
      for (pid_t p : pids) kill(p, SIGKILL);
      while (waitpid(-1, &status, 0) > 0) {
      }
      return n;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return failed;
}

}  // namespace kolo::test
