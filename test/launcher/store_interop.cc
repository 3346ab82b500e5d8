// SPDX-License-Identifier: Apache-2.0
// kolo_launcher_store_interop: the C++ TCP store client (rendezvous/tcp_store.cc) against whatever
// server listens on HOST:PORT; test_store_interop.py points it at kolorun's Python server.
//
//   kolo_launcher_store_interop HOST PORT RANK SIZE
//
// Every rank publishes "host/<rank>" as the runtime does, counts itself in with add(), waits for
// all the others, reads their values, then checks counter bytes, check(), remove() and the
// timeout status of get(). Prints "ok rank R" and exits 0, or prints what differed and exits 1.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "rendezvous/store.h"

namespace {

using std::chrono::milliseconds;

int fail(int rank, const std::string& what) {
  std::printf("FAIL rank %d: %s\n", rank, what.c_str());
  return 1;
}

std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: kolo_launcher_store_interop HOST PORT RANK SIZE\n");
    return 2;
  }
  const std::string host = argv[1];
  const int port = std::atoi(argv[2]), rank = std::atoi(argv[3]), size = std::atoi(argv[4]);
  std::shared_ptr<kolo::Store> store;
  kolo::Status st = kolo::makeTcpStore(host, port, milliseconds(10000), &store);
  if (!st) return fail(rank, "connect: " + st.toString());

  const std::string me = "host/" + std::to_string(rank);
  if (!(st = store->set(me, bytes("node-" + std::to_string(rank))))) {
    return fail(rank, "set: " + st.toString());
  }
  int64_t counted = 0;
  if (!(st = store->add("count", 1, &counted))) return fail(rank, "add: " + st.toString());
  if (counted < 1 || counted > size) return fail(rank, "add returned " + std::to_string(counted));

  std::vector<std::string> keys;
  for (int r = 0; r < size; ++r) keys.push_back("host/" + std::to_string(r));
  if (!(st = store->wait(keys, milliseconds(20000)))) return fail(rank, "wait: " + st.toString());
  for (int r = 0; r < size; ++r) {
    std::vector<uint8_t> v;
    if (!(st = store->get(keys[r], &v, milliseconds(5000)))) {
      return fail(rank, "get " + keys[r] + ": " + st.toString());
    }
    if (v != bytes("node-" + std::to_string(r))) return fail(rank, "wrong value for " + keys[r]);
  }

  // A counter reads back as 8 little-endian bytes; ADD on a non-counter is an error.
  const std::string mine = "counter/" + std::to_string(rank);
  int64_t v = 0;
  if (!(st = store->add(mine, -3, &v)) || v != -3) return fail(rank, "add -3: " + st.toString());
  if (!(st = store->add(mine, 0x100000000ll, &v)) || v != 0x100000000ll - 3) {
    return fail(rank, "add 2^32: " + st.toString());
  }
  std::vector<uint8_t> raw;
  if (!(st = store->get(mine, &raw, milliseconds(1000)))) return fail(rank, "get counter");
  const int64_t expect = 0x100000000ll - 3;
  for (int i = 0; i < 8; ++i) {
    if (raw.size() != 8 || raw[i] != static_cast<uint8_t>(static_cast<uint64_t>(expect) >> 8 * i)) {
      return fail(rank, "counter bytes differ");
    }
  }
  if (store->add(me, 1, &v).isOk()) return fail(rank, "add on a text value succeeded");

  bool exists = false;
  if (!(st = store->check(mine, &exists)) || !exists) return fail(rank, "check existing");
  if (!(st = store->remove(mine))) return fail(rank, "remove: " + st.toString());
  if (!(st = store->check(mine, &exists)) || exists) return fail(rank, "check removed");

  std::vector<uint8_t> none;
  st = store->get("missing/" + std::to_string(rank), &none, milliseconds(100));
  if (st.code() != kolo::ErrorCode::kTimeout) {
    return fail(rank, "get of a missing key gave " + st.toString() + ", not a timeout");
  }
  // The connection is still usable after a timeout.
  if (!(st = store->set("done/" + std::to_string(rank), bytes("1")))) {
    return fail(rank, "set after timeout: " + st.toString());
  }
  std::printf("ok rank %d\n", rank);
  return 0;
}
