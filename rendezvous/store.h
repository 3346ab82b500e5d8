// SPDX-License-Identifier: Apache-2.0
// Store: the rendezvous key-value store ranks use to find each other (Gloo addresses, NCCL ids,
// process-set keys). Three implementations: in-memory (thread ranks in one process), a file
// store on a shared directory, and a TCP client of the server that kolorun runs (tests also
// use test/support/tcp_store_server.h).
//
// Thread safety: every method may be called from any thread. Blocking: get/wait block until the
// keys exist or the timeout passes (kTimeout naming the missing key); never forever.
//
// TCP wire protocol (little-endian; the launcher's Python server speaks the same):
//   request : u8 cmd | u32 keyLen | key bytes | u64 valLen | value bytes
//   response: u8 status (0 ok, 1 timeout, 2 error) | u64 len | payload
//   cmd 1 SET   value = data                      -> empty payload
//   cmd 2 GET   value = u32 timeoutMs             -> payload = data (waits for the key)
//   cmd 3 ADD   value = i64 delta                 -> payload = i64 new value (missing key = 0)
//   cmd 4 WAIT  value = u32 timeoutMs             -> empty payload once the key exists
//   cmd 5 CHECK value = empty                     -> payload = u8 1 if the key exists, else 0
//   cmd 6 DEL   value = empty                     -> empty payload
//   Error payloads are UTF-8 text. One connection serves any number of sequential requests.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"

namespace kolo {

class Store {
 public:
  virtual ~Store() = default;
  virtual Status set(const std::string& key, const std::vector<uint8_t>& value) = 0;
  virtual Status get(const std::string& key, std::vector<uint8_t>* value,
                     std::chrono::milliseconds timeout) = 0;
  virtual Status add(const std::string& key, int64_t delta, int64_t* newValue) = 0;
  virtual Status wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  virtual Status check(const std::string& key, bool* exists) = 0;
  virtual Status remove(const std::string& key) = 0;
};

// In-process store shared by thread ranks (one instance, shared_ptr to each rank).
std::shared_ptr<Store> makeMemoryStore();
// Directory-backed store: each key is a file written atomically (write + rename).
Status makeFileStore(const std::string& directory, std::shared_ptr<Store>* out);
// TCP client; retries the connection until connectTimeout passes.
Status makeTcpStore(const std::string& host, int port, std::chrono::milliseconds connectTimeout,
                    std::shared_ptr<Store>* out);
// A view that prefixes every key ("set3/" + key); shares the underlying store.
std::shared_ptr<Store> makePrefixStore(std::shared_ptr<Store> base, const std::string& prefix);
// The view of the next generation of a group of `size` ranks that meet through `store` under
// `name`: "<name>/<generation>/", the generation counted by "<name>/generation". Every rank of
// a generation calls it exactly once, and no rank starts the next generation before the current
// one has met (which needs all of its calls), so successive groups over one store (a job
// re-initialized in the same process, tests) never read each other's keys. Collective.
Status makeGenerationStore(std::shared_ptr<Store> store, const std::string& name, int size,
                           std::shared_ptr<Store>* out);

}  // namespace kolo
