// SPDX-License-Identifier: Apache-2.0
// The C++ TCP store server, for tests only (kolorun serves the same protocol from Python, which is
// what users run; rendezvous/store.h documents the protocol). Serves on host:port (port 0 = pick a
// free one) from a background thread until destroyed. Thread safety: port() from any thread.
// Blocking: start binds and listens, then returns. Errors: start fails with the address and the
// system error when it cannot listen.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"

namespace kolo {

class TcpStoreServer {
 public:
  virtual ~TcpStoreServer() = default;
  virtual int port() const = 0;
};
Status startTcpStoreServer(const std::string& host, int port,
                           std::unique_ptr<TcpStoreServer>* out);

}  // namespace kolo
