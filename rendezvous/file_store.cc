// SPDX-License-Identifier: Apache-2.0
// FileStore: the rendezvous store on a directory every rank can see (local disk for one host, a
// shared file system for several).
//
// Why it is built this way:
// - Each key is one file named "k_" + the key escaped to [A-Za-z0-9_-] with %XX for every other
//   byte, so keys like "../x" or "a/b" can never leave the directory or create subfolders. Names
//   that would exceed the file system's 255-byte limit are cut and suffixed with "~" and a 64-bit
//   FNV-1a hash of the whole key ("~" never appears in an escaped name, so cut names cannot
//   collide with uncut ones).
// - set() writes a hidden temporary file and rename()s it over the key's file. rename is atomic,
//   so a reader opens either the old complete value or the new complete value, never a prefix.
// - get()/wait() poll with a short exponential sleep (1 ms doubling to 20 ms): there is no
//   portable change notification on shared file systems, and rendezvous keys are few.
// - add() is a read-modify-write, serialized by flock() on ".lock" across processes and by a
//   mutex within the process (flock over NFS is emulated with per-process POSIX locks, which do
//   not exclude threads of the same process). The lock is taken with LOCK_NB and retried, so even
//   a lock held by a stuck process cannot block a caller past kLockTimeout.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>

#include "rendezvous/store.h"
#include "rendezvous/store_wire.h"

namespace kolo {
namespace {

using namespace store_wire;
constexpr std::chrono::seconds kLockTimeout{30};
constexpr size_t kMaxNameBytes = 200;

std::string errnoText(int err) { return std::string(std::strerror(err)); }

std::string fileNameForKey(const std::string& key) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string name = "k_";
  for (unsigned char c : key) {
    bool safe = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                c == '_' || c == '-';
    if (safe) {
      name += static_cast<char>(c);
    } else {
      name += '%';
      name += kHex[c >> 4];
      name += kHex[c & 15];
    }
  }
  if (name.size() <= kMaxNameBytes) return name;
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : key) h = (h ^ c) * 1099511628211ull;
  std::string suffix = "~";
  for (int i = 15; i >= 0; --i) suffix += kHex[(h >> (4 * i)) & 15];
  return name.substr(0, kMaxNameBytes - suffix.size()) + suffix;
}

// Owns a file descriptor; closes it on scope exit.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

class FileStore final : public Store {
 public:
  // The token keeps temporary names unique across hosts sharing the directory (pids repeat).
  explicit FileStore(std::string dir) : dir_(std::move(dir)), token_(std::random_device{}()) {}

  Status set(const std::string& key, const std::vector<uint8_t>& value) override {
    return writeAtomically(key, value);
  }

  Status get(const std::string& key, std::vector<uint8_t>* value,
             std::chrono::milliseconds timeout) override {
    KOLO_REQUIRE(value != nullptr, kInvalidArgument, "store get: value must not be null");
    auto deadline = deadlineAfter(timeout);
    auto sleep = std::chrono::milliseconds(1);
    for (;;) {
      bool found = false;
      KOLO_RETURN_IF_ERROR(readKey(key, value, &found));
      if (found) return Status::ok();
      if (!sleepUntilNextPoll(deadline, &sleep)) {
        return Status(ErrorCode::kTimeout, timeoutMessage(timeout, key, "file store " + dir_));
      }
    }
  }

  Status add(const std::string& key, int64_t delta, int64_t* newValue) override {
    std::lock_guard<std::mutex> threadLock(addMu_);
    std::string lockPath = dir_ + "/.lock";
    Fd lockFd(::open(lockPath.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
    if (lockFd.get() < 0) {
      return Status(ErrorCode::kIo, "store add: cannot open " + lockPath + ": " + errnoText(errno));
    }
    auto deadline = Clock::now() + kLockTimeout;
    auto sleep = std::chrono::milliseconds(1);
    while (::flock(lockFd.get(), LOCK_EX | LOCK_NB) != 0) {
      if (errno != EWOULDBLOCK && errno != EINTR) {
        return Status(ErrorCode::kIo, "store add: flock " + lockPath + ": " + errnoText(errno));
      }
      if (!sleepUntilNextPoll(deadline, &sleep)) {
        return Status(ErrorCode::kTimeout, "store add: " + lockPath + " stayed locked for " +
                                               std::to_string(kLockTimeout.count()) + " s");
      }
    }
    // Closing lockFd (on return) releases the flock.
    std::vector<uint8_t> bytes;
    bool found = false;
    KOLO_RETURN_IF_ERROR(readKey(key, &bytes, &found));
    int64_t v = 0;
    if (found && !decodeCounter(bytes, &v)) {
      return Status(ErrorCode::kInvalidArgument, "store add: key '" + key + "' holds a " +
                                                     std::to_string(bytes.size()) +
                                                     "-byte value, not an 8-byte counter");
    }
    v = addWrapping(v, delta);
    KOLO_RETURN_IF_ERROR(writeAtomically(key, encodeCounter(v)));
    if (newValue != nullptr) *newValue = v;
    return Status::ok();
  }

  Status wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    auto deadline = deadlineAfter(timeout);
    auto sleep = std::chrono::milliseconds(1);
    // Keys only appear (remove aside), so each key needs to be seen once.
    size_t next = 0;
    for (;;) {
      while (next < keys.size()) {
        bool exists = false;
        KOLO_RETURN_IF_ERROR(check(keys[next], &exists));
        if (!exists) break;
        ++next;
      }
      if (next == keys.size()) return Status::ok();
      if (!sleepUntilNextPoll(deadline, &sleep)) {
        return Status(ErrorCode::kTimeout,
                      timeoutMessage(timeout, keys[next], "file store " + dir_));
      }
    }
  }

  Status check(const std::string& key, bool* exists) override {
    KOLO_REQUIRE(exists != nullptr, kInvalidArgument, "store check: exists must not be null");
    struct stat st;
    std::string path = pathFor(key);
    if (::stat(path.c_str(), &st) == 0) {
      *exists = true;
      return Status::ok();
    }
    if (errno == ENOENT) {
      *exists = false;
      return Status::ok();
    }
    return Status(ErrorCode::kIo, "store check: stat " + path + ": " + errnoText(errno));
  }

  Status remove(const std::string& key) override {
    std::string path = pathFor(key);
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      return Status(ErrorCode::kIo, "store remove: unlink " + path + ": " + errnoText(errno));
    }
    return Status::ok();
  }

 private:
  std::string pathFor(const std::string& key) const { return dir_ + "/" + fileNameForKey(key); }

  // Sleeps the current backoff (never past the deadline) and doubles it up to 20 ms. Returns
  // false, without sleeping, once the deadline has passed.
  static bool sleepUntilNextPoll(Clock::time_point deadline, std::chrono::milliseconds* sleep) {
    auto now = Clock::now();
    if (now >= deadline) return false;
    auto left = std::chrono::duration_cast<std::chrono::microseconds>(deadline - now);
    std::this_thread::sleep_for(std::min<std::chrono::microseconds>(*sleep, left));
    *sleep = std::min(*sleep * 2, std::chrono::milliseconds(20));
    return true;
  }

  Status readKey(const std::string& key, std::vector<uint8_t>* value, bool* found) {
    std::string path = pathFor(key);
    Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (fd.get() < 0) {
      if (errno == ENOENT) {
        *found = false;
        return Status::ok();
      }
      return Status(ErrorCode::kIo, "store get: open " + path + ": " + errnoText(errno));
    }
    struct stat st;
    if (::fstat(fd.get(), &st) != 0) {
      return Status(ErrorCode::kIo, "store get: fstat " + path + ": " + errnoText(errno));
    }
    // The file under this descriptor is immutable (writers replace it by rename), so its size
    // is final.
    value->resize(static_cast<size_t>(st.st_size));
    size_t done = 0;
    while (done < value->size()) {
      ssize_t n = ::read(fd.get(), value->data() + done, value->size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        return Status(ErrorCode::kIo,
                      "store get: read " + path + ": " +
                          (n == 0 ? std::string("file shorter than its size") : errnoText(errno)));
      }
      done += static_cast<size_t>(n);
    }
    *found = true;
    return Status::ok();
  }

  Status writeAtomically(const std::string& key, const std::vector<uint8_t>& value) {
    std::string path = pathFor(key);
    std::string tmp = dir_ + "/.tmp-" + std::to_string(::getpid()) + "-" + std::to_string(token_) +
                      "-" + std::to_string(tmpCounter_.fetch_add(1));
    {
      Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
      if (fd.get() < 0) {
        return Status(ErrorCode::kIo, "store set: create " + tmp + ": " + errnoText(errno));
      }
      size_t done = 0;
      while (done < value.size()) {
        ssize_t n = ::write(fd.get(), value.data() + done, value.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
          int err = errno;
          ::unlink(tmp.c_str());
          return Status(ErrorCode::kIo, "store set: write " + tmp + ": " + errnoText(err));
        }
        done += static_cast<size_t>(n);
      }
    }
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
      int err = errno;
      ::unlink(tmp.c_str());
      return Status(ErrorCode::kIo, "store set: rename to " + path + ": " + errnoText(err));
    }
    return Status::ok();
  }

  const std::string dir_;
  const uint32_t token_;
  std::mutex addMu_;
  std::atomic<uint64_t> tmpCounter_{0};
};

// mkdir -p: ranks race to create the same directory, so EEXIST is success.
Status makeDirectories(const std::string& dir) {
  for (size_t pos = 1; pos <= dir.size(); ++pos) {
    if (pos != dir.size() && dir[pos] != '/') continue;
    std::string part = dir.substr(0, pos);
    if (::mkdir(part.c_str(), 0755) != 0 && errno != EEXIST) {
      return Status(ErrorCode::kIo, "file store: mkdir " + part + ": " + errnoText(errno));
    }
  }
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return Status(ErrorCode::kIo, "file store: " + dir + " is not a directory");
  }
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    return Status(ErrorCode::kIo, "file store: " + dir + " is not writable: " + errnoText(errno));
  }
  return Status::ok();
}

}  // namespace

Status makeFileStore(const std::string& directory, std::shared_ptr<Store>* out) {
  KOLO_REQUIRE(out != nullptr, kInvalidArgument, "makeFileStore: out must not be null");
  KOLO_REQUIRE(!directory.empty(), kInvalidArgument, "makeFileStore: empty directory");
  std::string dir = directory;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  KOLO_RETURN_IF_ERROR(makeDirectories(dir));
  *out = std::make_shared<FileStore>(dir);
  return Status::ok();
}

}  // namespace kolo
