// SPDX-License-Identifier: Apache-2.0
// kolo-store-server: runs a TcpStoreServer (rendezvous/store.h) until told to stop.
//
//   kolo-store-server [--host H] [--port P] [--ignore-stdin] [--max-seconds N]
//
// Prints the port it listens on (useful with --port 0, the default) as one line on stdout, then
// serves until SIGTERM or SIGINT, until stdin reaches EOF (so a parent that dies, closing the
// pipe, takes the server with it), or after --max-seconds if given. --ignore-stdin is for shells
// that start background jobs with stdin on /dev/null, which would otherwise stop it at once.
// Exit status: 0 after a clean stop, 2 for bad arguments, 1 if the server cannot start.
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "test/support/tcp_store_server.h"
#include "rendezvous/store.h"

namespace {

int usage(const char* why) {
  std::fprintf(stderr,
               "kolo-store-server: %s\n"
               "usage: kolo-store-server [--host H] [--port P] [--ignore-stdin] "
               "[--max-seconds N]\n",
               why);
  return 2;
}

bool parseInt(const char* s, long lo, long hi, long* out) {
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi) return false;
  *out = v;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::string host = "0.0.0.0";
  long port = 0, maxSeconds = 0;
  bool watchStdin = true;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    bool hasValue = i + 1 < argc;
    if (a == "--host" && hasValue) {
      host = argv[++i];
    } else if (a == "--port" && hasValue) {
      if (!parseInt(argv[++i], 0, 65535, &port)) return usage("--port wants 0..65535");
    } else if (a == "--max-seconds" && hasValue) {
      if (!parseInt(argv[++i], 1, 1L << 30, &maxSeconds)) return usage("--max-seconds wants > 0");
    } else if (a == "--ignore-stdin") {
      watchStdin = false;
    } else {
      return usage(("unknown or incomplete argument " + a).c_str());
    }
  }

  // Block the stop signals before the server thread exists so that it inherits the mask and the
  // signals are only ever consumed here, through the signalfd.
  sigset_t stopSignals;
  sigemptyset(&stopSignals);
  sigaddset(&stopSignals, SIGTERM);
  sigaddset(&stopSignals, SIGINT);
  if (sigprocmask(SIG_BLOCK, &stopSignals, nullptr) != 0) {
    std::perror("kolo-store-server: sigprocmask");
    return 1;
  }
  int sigFd = signalfd(-1, &stopSignals, SFD_CLOEXEC);
  if (sigFd < 0) {
    std::perror("kolo-store-server: signalfd");
    return 1;
  }

  std::unique_ptr<kolo::TcpStoreServer> server;
  kolo::Status s = kolo::startTcpStoreServer(host, static_cast<int>(port), &server);
  if (!s.isOk()) {
    std::fprintf(stderr, "kolo-store-server: %s\n", s.toString().c_str());
    return 1;
  }
  std::printf("%d\n", server->port());
  std::fflush(stdout);

  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(maxSeconds);
  for (;;) {
    pollfd fds[2] = {{sigFd, POLLIN, 0}, {STDIN_FILENO, POLLIN, 0}};
    int timeoutMs = -1;
    if (maxSeconds > 0) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      timeoutMs = static_cast<int>(left.count()) + 1;
    }
    int n = poll(fds, watchStdin ? 2 : 1, timeoutMs);
    if (n < 0 && errno != EINTR) {
      std::perror("kolo-store-server: poll");
      break;
    }
    if (n > 0 && fds[0].revents != 0) break;  // SIGTERM or SIGINT
    if (watchStdin && fds[1].revents != 0) {
      char buf[4096];
      ssize_t got = read(STDIN_FILENO, buf, sizeof(buf));
      // EOF, a read error or a closed descriptor (POLLNVAL) all mean nobody is feeding us.
      if (got == 0 || (got < 0 && errno != EINTR && errno != EAGAIN) ||
          (fds[1].revents & POLLNVAL)) {
        break;
      }
    }
  }
  server.reset();  // joins the server thread and closes every connection
  close(sigFd);
  return 0;
}
