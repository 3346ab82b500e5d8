// SPDX-License-Identifier: Apache-2.0
// ForkedJob: the rank processes of a multi-process test that starts its own ranks (fork + exec
// of the test program) over a rendezvous store it sets up: a file store in a fresh temporary
// folder, or test/support's C++ TCP store server on 127.0.0.1.
//
// Ownership: the job owns its folder and server; both go when it is destroyed. Threading: one
// thread. Blocking: run() waits for the ranks, up to its limit, then kills them (SIGKILL). The
// constructor sets the store's KOLO_RENDEZVOUS_* variables, KOLO_CONTROLLER=gloo,
// KOLO_START_TIMEOUT=60 and (unless set) KOLO_TIMEOUT_SECONDS=30 in this process's environment,
// which the ranks inherit. Errors: set-up failures end the process with a message (a test).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "test/support/tcp_store_server.h"

namespace kolo::test {

class ForkedJob {
 public:
  // tag names the job in messages and its folder (/tmp/kolo-<tag>-XXXXXX); storeKind: "file" or
  // "tcp".
  ForkedJob(const std::string& tag, const std::string& storeKind);
  ~ForkedJob();
  ForkedJob(const ForkedJob&) = delete;
  ForkedJob& operator=(const ForkedJob&) = delete;

  // A scratch folder of the job's own (the file store lives in dir()/store).
  const std::string& dir() const { return dir_; }

  // Starts n processes, process r running argvOf(r) (argvOf(r)[0] is the program), and waits for
  // all of them, at most `limit`. Returns the number that did not exit with status 0 (n when
  // the limit passed: every rank left is killed).
  int run(int n, const std::function<std::vector<std::string>(int)>& argvOf,
          std::chrono::seconds limit = std::chrono::seconds(120));

 private:
  std::string tag_, dir_;
  std::unique_ptr<TcpStoreServer> server_;
};

}  // namespace kolo::test
