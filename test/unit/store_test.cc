// SPDX-License-Identifier: Apache-2.0
// Store implementations: memory, file and TCP (client + TcpStoreServer) behave the same; TCP
// failures surface as errors within bounded time; the server speaks the documented wire bytes.
#include "rendezvous/store.h"
#include "test/support/tcp_store_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <thread>

using namespace kolo;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }

double secondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::string makeTempDir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "kolo-store-XXXXXX").string();
  REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
  return tmpl;
}

// One store of the given kind; open() gives another handle on the same data (the same object
// for memory, another FileStore on the directory, another TCP connection), so threads that block
// can each have their own TCP connection.
class Harness {
 public:
  explicit Harness(const std::string& kind) : kind_(kind) {
    if (kind == "memory") {
      memory_ = makeMemoryStore();
    } else if (kind == "file") {
      dir_ = makeTempDir();
    } else {
      REQUIRE(startTcpStoreServer("127.0.0.1", 0, &server_).isOk());
      REQUIRE(server_->port() > 0);
    }
  }
  ~Harness() {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  std::shared_ptr<Store> open() {
    std::shared_ptr<Store> s;
    if (kind_ == "memory") return memory_;
    if (kind_ == "file") {
      REQUIRE(makeFileStore(dir_ + "/store", &s).isOk());
    } else {
      REQUIRE(makeTcpStore("127.0.0.1", server_->port(), 5s, &s).isOk());
    }
    return s;
  }

  const std::string& dir() const { return dir_; }

 private:
  std::string kind_;
  std::shared_ptr<Store> memory_;
  std::string dir_;
  std::unique_ptr<TcpStoreServer> server_;
};

}  // namespace

// Runs the enclosing test case once per store implementation.
#define KOLO_ANY_STORE_KIND GENERATE(as<std::string>{}, "memory", "file", "tcp")

TEST_CASE("store set, get and overwrite keep values exactly") {
  auto kind = KOLO_ANY_STORE_KIND;
  INFO("store kind: " << kind);
  Harness h(kind);
  auto s = h.open();
  std::vector<uint8_t> v;
  REQUIRE(s->set("alpha", bytes("one")).isOk());
  REQUIRE(s->get("alpha", &v, 1s).isOk());
  CHECK(v == bytes("one"));
  REQUIRE(s->set("alpha", bytes("second value")).isOk());
  REQUIRE(s->get("alpha", &v, 1s).isOk());
  CHECK(v == bytes("second value"));
  // Empty values, binary bytes, and keys that would be unsafe as file names.
  std::vector<uint8_t> binary(256);
  for (int i = 0; i < 256; ++i) binary[i] = static_cast<uint8_t>(255 - i);
  const std::vector<std::string> keys = {"",
                                         "../escape",
                                         "a/b/c",
                                         ".",
                                         "..",
                                         "sp ace%41",
                                         std::string("nul\0key", 7),
                                         std::string(400, 'x'),
                                         std::string(399, 'x') + "y"};
  for (size_t i = 0; i < keys.size(); ++i) {
    std::vector<uint8_t> value = binary;
    value.push_back(static_cast<uint8_t>(i));
    REQUIRE(s->set(keys[i], value).isOk());
  }
  REQUIRE(s->set("empty", {}).isOk());
  for (size_t i = 0; i < keys.size(); ++i) {
    INFO("key index " << i);
    REQUIRE(s->get(keys[i], &v, 1s).isOk());
    REQUIRE(v.size() == 257);
    CHECK(std::equal(binary.begin(), binary.end(), v.begin()));
    CHECK(v.back() == i);
  }
  v = bytes("stale");
  REQUIRE(s->get("empty", &v, 1s).isOk());
  CHECK(v.empty());
  // A second handle sees the same data.
  auto other = h.open();
  REQUIRE(other->get("alpha", &v, 1s).isOk());
  CHECK(v == bytes("second value"));
  if (kind == "file") {
    // Every key stayed a plain file directly inside the store directory.
    int files = 0;
    for (const auto& e : std::filesystem::recursive_directory_iterator(h.dir())) {
      if (e.is_directory()) {
        CHECK(e.path() == std::filesystem::path(h.dir()) / "store");
      } else if (e.path().filename().string()[0] != '.') {
        CHECK(e.path().parent_path() == std::filesystem::path(h.dir()) / "store");
        ++files;
      }
    }
    CHECK(files == static_cast<int>(keys.size()) + 2);
  }
}

TEST_CASE("store get blocks until another thread sets the key") {
  auto kind = KOLO_ANY_STORE_KIND;
  INFO("store kind: " << kind);
  Harness h(kind);
  auto reader = h.open();
  auto writer = h.open();
  auto start = Clock::now();
  Status setStatus;
  std::thread t([&] {
    std::this_thread::sleep_for(150ms);
    setStatus = writer->set("late", bytes("arrived"));
  });
  std::vector<uint8_t> v;
  Status st = reader->get("late", &v, 10s);
  double waited = secondsSince(start);
  t.join();
  REQUIRE(setStatus.isOk());
  REQUIRE(st.isOk());
  CHECK(v == bytes("arrived"));
  CHECK(waited >= 0.14);
  CHECK(waited < 5.0);
}

TEST_CASE("store get and wait time out with kTimeout naming the key") {
  auto kind = KOLO_ANY_STORE_KIND;
  INFO("store kind: " << kind);
  Harness h(kind);
  auto s = h.open();
  std::vector<uint8_t> v = bytes("untouched");
  auto start = Clock::now();
  Status st = s->get("nobody/sets/this", &v, 200ms);
  double waited = secondsSince(start);
  CHECK(st.code() == ErrorCode::kTimeout);
  CHECK_THAT(st.message(), Catch::Contains("'nobody/sets/this'"));
  CHECK(waited >= 0.19);
  CHECK(waited < 3.0);
  CHECK(v == bytes("untouched"));
  // A zero timeout checks once and returns at once.
  start = Clock::now();
  CHECK(s->get("nobody/sets/this", &v, 0ms).code() == ErrorCode::kTimeout);
  CHECK(secondsSince(start) < 1.0);
  // The connection (TCP) stays usable after a timeout.
  REQUIRE(s->set("after", bytes("x")).isOk());
  REQUIRE(s->get("after", &v, 1s).isOk());
  CHECK(v == bytes("x"));
}

TEST_CASE("store add from many threads gives exact totals") {
  auto kind = KOLO_ANY_STORE_KIND;
  INFO("store kind: " << kind);
  Harness h(kind);
  const int threads = 8;
  const int perThread = kind == "file" ? 40 : 150;
  std::vector<std::vector<int64_t>> seen(threads);
  std::vector<Status> failures(threads);
  std::vector<std::shared_ptr<Store>> handles;
  for (int t = 0; t < threads; ++t) handles.push_back(h.open());
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      auto& s = handles[t];
      for (int i = 0; i < perThread; ++i) {
        int64_t nv = 0;
        Status st = s->add("counter", 1, &nv);
        if (st.isOk()) st = s->add("weighted", (t % 2 == 0 ? 1 : -1) * (1000 + t), nullptr);
        if (!st.isOk()) {
          failures[t] = st;
          return;
        }
        seen[t].push_back(nv);
      }
    });
  }
  for (auto& th : pool) th.join();
  for (int t = 0; t < threads; ++t) REQUIRE(failures[t].isOk());
  // Each increment returned a distinct value: together exactly 1..N.
  std::vector<int64_t> all;
  for (auto& s : seen) all.insert(all.end(), s.begin(), s.end());
  std::sort(all.begin(), all.end());
  REQUIRE(all.size() == static_cast<size_t>(threads * perThread));
  for (size_t i = 0; i < all.size(); ++i) REQUIRE(all[i] == static_cast<int64_t>(i + 1));
  auto s = h.open();
  int64_t total = 0;
  REQUIRE(s->add("counter", 0, &total).isOk());
  CHECK(total == threads * perThread);
  int64_t expectWeighted = 0;
  for (int t = 0; t < threads; ++t)
    expectWeighted += (t % 2 == 0 ? 1 : -1) * (1000 + t) * perThread;
  REQUIRE(s->add("weighted", 0, &total).isOk());
  CHECK(total == expectWeighted);
  // A counter reads back as the 8-byte little-endian value; add on other bytes is refused.
  std::vector<uint8_t> v;
  REQUIRE(s->add("neg", -2, nullptr).isOk());
  REQUIRE(s->get("neg", &v, 1s).isOk());
  CHECK(v == std::vector<uint8_t>{0xFE, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF});
  REQUIRE(s->set("text", bytes("hello")).isOk());
  Status bad = s->add("text", 1, &total);
  CHECK(bad.code() == ErrorCode::kInvalidArgument);
  CHECK_THAT(bad.message(), Catch::Contains("'text'"));
}

TEST_CASE("store wait returns once every key exists and names the missing one otherwise") {
  auto kind = KOLO_ANY_STORE_KIND;
  INFO("store kind: " << kind);
  Harness h(kind);
  auto waiter = h.open();
  auto writer = h.open();
  Status setStatus;
  std::thread t([&] {
    for (const char* k : {"w/2", "w/0", "w/1"}) {
      std::this_thread::sleep_for(40ms);
      if (setStatus.isOk()) setStatus = writer->set(k, bytes(k));
    }
  });
  auto start = Clock::now();
  Status st = waiter->wait({"w/0", "w/1", "w/2"}, 10s);
  double waited = secondsSince(start);
  t.join();
  REQUIRE(setStatus.isOk());
  REQUIRE(st.isOk());
  CHECK(waited >= 0.1);
  CHECK(waiter->wait({}, 0ms).isOk());
  start = Clock::now();
  st = waiter->wait({"w/0", "w/missing", "w/2"}, 200ms);
  CHECK(st.code() == ErrorCode::kTimeout);
  CHECK_THAT(st.message(), Catch::Contains("'w/missing'"));
  CHECK_THAT(st.message(), !Catch::Contains("'w/0'"));
  CHECK(secondsSince(start) >= 0.19);
  CHECK(secondsSince(start) < 3.0);
}

TEST_CASE("store check and remove") {
  auto kind = KOLO_ANY_STORE_KIND;
  INFO("store kind: " << kind);
  Harness h(kind);
  auto s = h.open();
  bool exists = true;
  REQUIRE(s->check("k", &exists).isOk());
  CHECK_FALSE(exists);
  REQUIRE(s->set("k", bytes("v")).isOk());
  REQUIRE(s->check("k", &exists).isOk());
  CHECK(exists);
  REQUIRE(s->remove("k").isOk());
  REQUIRE(s->check("k", &exists).isOk());
  CHECK_FALSE(exists);
  std::vector<uint8_t> v;
  CHECK(s->get("k", &v, 0ms).code() == ErrorCode::kTimeout);
  CHECK(s->remove("never-set").isOk());
  // A removed counter starts again from zero.
  int64_t nv = 0;
  REQUIRE(s->add("c", 5, &nv).isOk());
  REQUIRE(s->remove("c").isOk());
  REQUIRE(s->add("c", 3, &nv).isOk());
  CHECK(nv == 3);
}

TEST_CASE("prefix stores are isolated views of one store") {
  auto kind = KOLO_ANY_STORE_KIND;
  INFO("store kind: " << kind);
  Harness h(kind);
  auto base = h.open();
  auto a = makePrefixStore(base, "set1/");
  auto b = makePrefixStore(base, "set2/");
  REQUIRE(a->set("key", bytes("from a")).isOk());
  REQUIRE(b->set("key", bytes("from b")).isOk());
  std::vector<uint8_t> v;
  REQUIRE(a->get("key", &v, 1s).isOk());
  CHECK(v == bytes("from a"));
  REQUIRE(b->get("key", &v, 1s).isOk());
  CHECK(v == bytes("from b"));
  REQUIRE(base->get("set1/key", &v, 1s).isOk());
  CHECK(v == bytes("from a"));
  bool exists = true;
  REQUIRE(base->check("key", &exists).isOk());
  CHECK_FALSE(exists);
  REQUIRE(a->set("only-a", bytes("1")).isOk());
  REQUIRE(b->check("only-a", &exists).isOk());
  CHECK_FALSE(exists);
  Status st = b->wait({"only-a"}, 50ms);
  CHECK(st.code() == ErrorCode::kTimeout);
  CHECK_THAT(st.message(), Catch::Contains("set2/only-a"));
  CHECK(a->wait({"key", "only-a"}, 1s).isOk());
  int64_t nv = 0;
  REQUIRE(a->add("n", 7, &nv).isOk());
  REQUIRE(b->add("n", 1, &nv).isOk());
  CHECK(nv == 1);
  REQUIRE(a->add("n", 0, &nv).isOk());
  CHECK(nv == 7);
  REQUIRE(a->remove("key").isOk());
  REQUIRE(b->get("key", &v, 1s).isOk());
  CHECK(v == bytes("from b"));
  // Prefixes nest.
  auto nested = makePrefixStore(a, "inner/");
  REQUIRE(nested->set("x", bytes("deep")).isOk());
  REQUIRE(base->get("set1/inner/x", &v, 1s).isOk());
  CHECK(v == bytes("deep"));
}

TEST_CASE("store carries 8 MiB values bitwise") {
  auto kind = KOLO_ANY_STORE_KIND;
  INFO("store kind: " << kind);
  Harness h(kind);
  auto writer = h.open();
  auto reader = h.open();
  std::vector<uint8_t> big(8u << 20);
  uint32_t x = 12345;
  for (auto& b : big) {
    x = x * 1664525u + 1013904223u;
    b = static_cast<uint8_t>(x >> 24);
  }
  // The reader is already waiting when the large value arrives.
  std::vector<uint8_t> got;
  Status readStatus;
  std::thread t([&] { readStatus = reader->get("big", &got, 20s); });
  std::this_thread::sleep_for(50ms);
  REQUIRE(writer->set("big", big).isOk());
  t.join();
  REQUIRE(readStatus.isOk());
  REQUIRE(got.size() == big.size());
  CHECK(got == big);
  big[12345] ^= 0xFF;
  REQUIRE(writer->set("big", big).isOk());
  REQUIRE(reader->get("big", &got, 1s).isOk());
  CHECK(got == big);
}

TEST_CASE("file store readers never see a partially written value") {
  Harness h("file");
  auto writer = h.open();
  auto reader = h.open();
  REQUIRE(writer->set("v", std::vector<uint8_t>(1 << 18, 0)).isOk());
  std::atomic<bool> stop{false};
  Status setStatus;
  std::thread t([&] {
    for (uint8_t round = 1; round < 40 && setStatus.isOk(); ++round) {
      setStatus = writer->set("v", std::vector<uint8_t>((1 << 18) + round, round));
    }
    stop = true;
  });
  int reads = 0;
  while (!stop || reads < 10) {
    std::vector<uint8_t> v;
    REQUIRE(reader->get("v", &v, 1s).isOk());
    REQUIRE(v.size() >= (1u << 18));
    uint8_t first = v[0];
    REQUIRE(v.size() == (1u << 18) + first);
    REQUIRE(std::all_of(v.begin(), v.end(), [&](uint8_t b) { return b == first; }));
    ++reads;
  }
  t.join();
  REQUIRE(setStatus.isOk());
}

TEST_CASE("tcp store: a client waiting when the server is destroyed gets an error, not a hang") {
  std::unique_ptr<TcpStoreServer> server;
  REQUIRE(startTcpStoreServer("127.0.0.1", 0, &server).isOk());
  std::shared_ptr<Store> s;
  REQUIRE(makeTcpStore("127.0.0.1", server->port(), 5s, &s).isOk());
  REQUIRE(s->set("present", bytes("1")).isOk());
  Status st;
  auto start = Clock::now();
  std::thread t([&] {
    std::vector<uint8_t> v;
    st = s->get("never", &v, 30s);
  });
  std::this_thread::sleep_for(200ms);
  server.reset();
  t.join();
  CHECK(secondsSince(start) < 5.0);
  CHECK(st.code() == ErrorCode::kPeerLost);
  CHECK_THAT(st.message(), Catch::Contains("closed the connection"));
  CHECK_THAT(st.message(), Catch::Contains("never"));
  // Later calls fail at once and say why.
  start = Clock::now();
  Status again = s->set("present", bytes("2"));
  CHECK(again.code() == ErrorCode::kPeerLost);
  CHECK_THAT(again.message(), Catch::Contains("earlier failure"));
  CHECK(secondsSince(start) < 1.0);
}

TEST_CASE("tcp store: connecting where nobody listens fails after connectTimeout") {
  int port = 0;
  {
    // Take a free port from the kernel and release it: nobody listens there afterwards.
    std::unique_ptr<TcpStoreServer> server;
    REQUIRE(startTcpStoreServer("127.0.0.1", 0, &server).isOk());
    port = server->port();
  }
  std::shared_ptr<Store> s;
  auto start = Clock::now();
  Status st = makeTcpStore("127.0.0.1", port, 400ms, &s);
  double waited = secondsSince(start);
  CHECK(st.code() == ErrorCode::kTimeout);
  CHECK_THAT(st.message(), Catch::Contains("127.0.0.1:" + std::to_string(port)));
  CHECK(waited >= 0.39);
  CHECK(waited < 3.0);
  CHECK(s == nullptr);
  CHECK(makeTcpStore("127.0.0.1", 0, 100ms, &s).code() == ErrorCode::kInvalidArgument);
}

TEST_CASE("tcp store: a client retries until a late server comes up") {
  int port = 0;
  {
    std::unique_ptr<TcpStoreServer> probe;
    REQUIRE(startTcpStoreServer("127.0.0.1", 0, &probe).isOk());
    port = probe->port();
  }
  std::unique_ptr<TcpStoreServer> server;
  Status started;
  std::thread t([&] {
    std::this_thread::sleep_for(300ms);
    started = startTcpStoreServer("127.0.0.1", port, &server);
  });
  std::shared_ptr<Store> s;
  Status st = makeTcpStore("127.0.0.1", port, 10s, &s);
  t.join();
  REQUIRE(started.isOk());
  REQUIRE(st.isOk());
  REQUIRE(s->set("k", bytes("v")).isOk());
  bool exists = false;
  REQUIRE(s->check("k", &exists).isOk());
  CHECK(exists);
  // With the server up, even a zero connectTimeout makes one real attempt.
  std::shared_ptr<Store> quick;
  REQUIRE(makeTcpStore("localhost", port, 0ms, &quick).isOk());
  REQUIRE(quick->check("k", &exists).isOk());
  CHECK(exists);
}

TEST_CASE("tcp store server answers many clients parked on one key") {
  std::unique_ptr<TcpStoreServer> server;
  REQUIRE(startTcpStoreServer("127.0.0.1", 0, &server).isOk());
  const int clients = 24;
  std::vector<std::thread> pool;
  std::vector<std::vector<uint8_t>> got(clients);
  std::vector<Status> status(clients);
  for (int i = 0; i < clients; ++i) {
    pool.emplace_back([&, i] {
      std::shared_ptr<Store> s;
      status[i] = makeTcpStore("127.0.0.1", server->port(), 5s, &s);
      if (!status[i].isOk()) return;
      if (i % 2 == 0) {
        status[i] = s->get("go", &got[i], 10s);
      } else {
        status[i] = s->wait({"go"}, 10s);
        if (status[i].isOk()) status[i] = s->get("go", &got[i], 0ms);
      }
    });
  }
  std::this_thread::sleep_for(200ms);
  std::shared_ptr<Store> setter;
  REQUIRE(makeTcpStore("127.0.0.1", server->port(), 5s, &setter).isOk());
  REQUIRE(setter->set("go", bytes("now")).isOk());
  for (auto& t : pool) t.join();
  for (int i = 0; i < clients; ++i) {
    INFO("client " << i);
    REQUIRE(status[i].isOk());
    CHECK(got[i] == bytes("now"));
  }
}

namespace {

// A raw client for checking bytes on the wire (blocking socket with a 5 s receive timeout).
class RawClient {
 public:
  explicit RawClient(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd_ >= 0);
    timeval tv{5, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
  }
  ~RawClient() { ::close(fd_); }

  // Frames cmd/key/value as documented.
  static std::vector<uint8_t> frame(uint8_t cmd, const std::string& key,
                                    const std::vector<uint8_t>& val) {
    std::vector<uint8_t> req = {cmd};
    for (int i = 0; i < 4; ++i) req.push_back(static_cast<uint8_t>(key.size() >> (8 * i)));
    req.insert(req.end(), key.begin(), key.end());
    for (int i = 0; i < 8; ++i)
      req.push_back(static_cast<uint8_t>(uint64_t{val.size()} >> (8 * i)));
    req.insert(req.end(), val.begin(), val.end());
    return req;
  }

  void sendRaw(const std::vector<uint8_t>& b) {
    REQUIRE(::send(fd_, b.data(), b.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(b.size()));
  }

  void closeWrite() { ::shutdown(fd_, SHUT_WR); }

  // Sends one request; returns the full reply bytes.
  std::vector<uint8_t> call(uint8_t cmd, const std::string& key, const std::vector<uint8_t>& val) {
    sendRaw(frame(cmd, key, val));
    return readReply();
  }

  std::vector<uint8_t> readReply() {
    std::vector<uint8_t> reply = readN(9);
    uint64_t len = 0;
    for (int i = 8; i >= 1; --i) len = (len << 8) | reply[i];
    auto payload = readN(static_cast<size_t>(len));
    reply.insert(reply.end(), payload.begin(), payload.end());
    return reply;
  }

 private:
  std::vector<uint8_t> readN(size_t n) {
    std::vector<uint8_t> b(n);
    size_t done = 0;
    while (done < n) {
      ssize_t r = ::recv(fd_, b.data() + done, n - done, 0);
      REQUIRE(r > 0);
      done += static_cast<size_t>(r);
    }
    return b;
  }
  int fd_ = -1;
};

std::vector<uint8_t> le(uint64_t v, int n) {
  std::vector<uint8_t> b;
  for (int i = 0; i < n; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
  return b;
}

std::vector<uint8_t> cat(std::vector<uint8_t> a, const std::vector<uint8_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

TEST_CASE("tcp store server speaks the documented wire protocol") {
  std::unique_ptr<TcpStoreServer> server;
  REQUIRE(startTcpStoreServer("127.0.0.1", 0, &server).isOk());
  RawClient c(server->port());
  const std::vector<uint8_t> okEmpty = cat({0}, le(0, 8));
  CHECK(c.call(1, "k", bytes("abc")) == okEmpty);                               // SET
  CHECK(c.call(2, "k", le(1000, 4)) == cat(cat({0}, le(3, 8)), bytes("abc")));  // GET
  CHECK(c.call(3, "n", le(uint64_t(-5), 8)) == cat(cat({0}, le(8, 8)), le(uint64_t(-5), 8)));
  CHECK(c.call(3, "n", le(7, 8)) == cat(cat({0}, le(8, 8)), le(2, 8)));  // ADD
  CHECK(c.call(4, "n", le(1000, 4)) == okEmpty);                         // WAIT
  CHECK(c.call(5, "n", {}) == cat(cat({0}, le(1, 8)), {1}));             // CHECK
  CHECK(c.call(6, "n", {}) == okEmpty);                                  // DEL
  CHECK(c.call(5, "n", {}) == cat(cat({0}, le(1, 8)), {0}));
  auto timeout = c.call(2, "absent", le(50, 4));
  CHECK(timeout[0] == 1);
  auto err = c.call(3, "k", le(1, 8));  // ADD on a non-counter value
  CHECK(err[0] == 2);
  CHECK_THAT(std::string(err.begin() + 9, err.end()), Catch::Contains("counter"));
  CHECK(c.call(9, "k", {})[0] == 2);  // unknown command, connection still usable
  CHECK(c.call(2, "k", le(0, 4)) == cat(cat({0}, le(3, 8)), bytes("abc")));
  // Pipelined requests are answered in order, also after the client half-closes.
  {
    RawClient p(server->port());
    auto both = RawClient::frame(1, "pipe", bytes("xy"));
    auto get = RawClient::frame(2, "pipe", le(1000, 4));
    both.insert(both.end(), get.begin(), get.end());
    p.sendRaw(both);
    p.closeWrite();
    CHECK(p.readReply() == okEmpty);
    CHECK(p.readReply() == cat(cat({0}, le(2, 8)), bytes("xy")));
  }
  // A client that leaves while parked does not disturb the others.
  {
    RawClient gone(server->port());
    gone.sendRaw(RawClient::frame(2, "later", le(10000, 4)));
  }
  CHECK(c.call(1, "later", bytes("z")) == okEmpty);
  CHECK(c.call(2, "later", le(0, 4)) == cat(cat({0}, le(1, 8)), bytes("z")));
  // The TcpStore client interoperates with what the raw client wrote.
  std::shared_ptr<Store> s;
  REQUIRE(makeTcpStore("127.0.0.1", server->port(), 5s, &s).isOk());
  std::vector<uint8_t> v;
  REQUIRE(s->get("k", &v, 1s).isOk());
  CHECK(v == bytes("abc"));
}
