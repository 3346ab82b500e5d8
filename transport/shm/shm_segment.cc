// SPDX-License-Identifier: Apache-2.0
// Creating, mapping and waiting in the shm segment.
//
// Why rank 0 creates and the base transport carries the name: the base transport is already a
// connected, authenticated channel between exactly the ranks of this group, so no name has to
// be guessed or derived from a job id, and a rank on another host (or in another /dev/shm)
// simply fails to open the name, which the confirming allreduce turns into one consistent
// answer on every rank. The segment is unlinked right after that confirmation: from then on it
// lives only as long as some rank maps it, so a crash never leaves a file in /dev/shm.
// posix_fallocate reserves the tmpfs pages up front: a full /dev/shm is an error at creation
// instead of a SIGBUS in the middle of a collective.
#include "transport/shm/shm_segment.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <random>

#include "transport/poll_support.h"
#include "transport/transport.h"

namespace kolo::shm {

struct alignas(64) Header {
  uint64_t magic;
  uint64_t nonce[2];
  uint32_t size;
  uint32_t version;
  uint64_t chunkBytes;
  uint64_t ringBytes;
  uint64_t totalBytes;
  alignas(64) std::atomic<uint32_t> abortedBy;  // 0: nobody; else rank + 1
  std::atomic<uint32_t> abortTextReady;
  char abortText[448];
};

namespace {

constexpr uint64_t kMagic = 0x6b6f6c6f73686d31ull;  // "kolo" "shm1"
constexpr uint32_t kVersion = 1;
constexpr size_t kMaxChunkBytes = 1024 * 1024;  // measured: 512 KiB - 1 MiB is best at 2 ranks
constexpr std::chrono::microseconds kDefaultSpin{50};
constexpr auto kLivenessPeriod = std::chrono::milliseconds(100);

size_t alignUp(size_t x, size_t a) { return (x + a - 1) / a * a; }

// Largest power of two <= target within [lo, hi].
size_t powerOfTwoIn(size_t target, size_t lo, size_t hi) {
  size_t r = lo;
  while (r * 2 <= target && r < hi) r *= 2;
  return r;
}

// Sizes that keep the segment modest at any rank count: 1 MiB staging slots up to 16 ranks
// (48 MiB of staging at most beyond), rings of 1 MiB for 2 ranks down to 16 KiB at 64.
size_t defaultChunkBytes(int n) {
  return powerOfTwoIn((size_t{16} << 20) / static_cast<size_t>(n), 64 * 1024, kMaxChunkBytes);
}
size_t defaultRingBytes(int n) {
  if (n < 2) return 4096;
  return powerOfTwoIn((size_t{16} << 20) / (static_cast<size_t>(n) * (n - 1)), 16 * 1024,
                      size_t{1} << 20);
}

struct Layout {
  size_t ranks = 0, ringCtl = 0, ringData = 0, staging = 0, total = 0;
};

Layout layoutFor(int n, size_t ringBytes, size_t chunkBytes) {
  Layout l;
  const size_t pairs = static_cast<size_t>(n) * (n - 1);
  l.ranks = alignUp(sizeof(Header), 4096);
  l.ringCtl = alignUp(l.ranks + sizeof(RankBlock) * n, 64);
  l.ringData = alignUp(l.ringCtl + sizeof(RingCtl) * pairs, 4096);
  l.staging = alignUp(l.ringData + ringBytes * pairs, 4096);
  l.total = alignUp(l.staging + chunkBytes * kStagingBuffers * n, 4096);
  return l;
}

uint64_t pidNamespaceId() {
  struct stat st;
  if (stat("/proc/self/ns/pid", &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_ino);
}

// What rank 0 tells the others (a fixed-size message over the base transport).
struct Announcement {
  char name[64];
  uint64_t nonce[2];
  uint64_t totalBytes;
  int32_t ok;
  char error[172];
};
static_assert(sizeof(Announcement) == 264, "fixed wire size");

// A process that exited, or exited and waits to be reaped (a zombie still answers kill(pid, 0)).
bool processGone(int pid) {
  if (kill(pid, 0) != 0) return errno == ESRCH;
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT;
  char buf[512];
  ssize_t got = read(fd, buf, sizeof(buf) - 1);
  ::close(fd);
  if (got <= 0) return false;
  buf[got] = '\0';
  const char* paren = std::strrchr(buf, ')');
  if (paren == nullptr || paren[1] != ' ') return false;
  return paren[2] == 'Z' || paren[2] == 'X';
}

// The state letter of /proc/<pid>/stat ('R', 'S', 'T' stopped, 't' traced, ...); 0 if unknown.
char processState(int pid) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[512];
  ssize_t got = read(fd, buf, sizeof(buf) - 1);
  ::close(fd);
  if (got <= 0) return 0;
  buf[got] = '\0';
  const char* paren = std::strrchr(buf, ')');
  return paren != nullptr && paren[1] == ' ' ? paren[2] : 0;
}

std::string errnoText(const char* what, int err) {
  return std::string(what) + ": " + std::strerror(err);
}

}  // namespace

Status Segment::create(Transport& base, const SegmentOptions& options,
                       std::shared_ptr<Segment>* out) {
  out->reset();
  const int n = base.size();
  const int me = base.rank();
  KOLO_REQUIRE(n >= 1 && n <= kMaxRanks, kUnsupported,
               "the shared-memory transport supports 1.." + std::to_string(kMaxRanks) +
                   " ranks, not " + std::to_string(n));
  const size_t chunk = options.chunkBytes ? options.chunkBytes : defaultChunkBytes(n);
  const size_t ring = options.ringBytes ? options.ringBytes : defaultRingBytes(n);
  KOLO_REQUIRE(
      chunk >= 4096 && chunk % 64 == 0 && chunk <= (size_t{256} << 20), kInvalidArgument,
      "shm chunk size " + std::to_string(chunk) + " must be a multiple of 64 in [4096, 256 MiB]");
  KOLO_REQUIRE(ring >= 4096 && (ring & (ring - 1)) == 0 && ring <= (size_t{1} << 30),
               kInvalidArgument,
               "shm ring size " + std::to_string(ring) + " must be a power of two >= 4096");
  const Layout layout = layoutFor(n, ring, chunk);

  std::shared_ptr<Segment> seg(new Segment());
  seg->rank_ = me;
  seg->size_ = n;
  seg->chunkBytes_ = chunk;
  seg->ringBytes_ = ring;
  seg->spin_ = options.spin.count() > 0 ? options.spin : kDefaultSpin;
  for (int r = 0; r < n; ++r) seg->globals_.push_back(base.globalRank(r));

  auto mapFd = [&](int fd, std::string* err) -> bool {
    void* p = mmap(nullptr, layout.total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (p == MAP_FAILED) {
      *err = errnoText("mmap", errno);
      return false;
    }
    madvise(p, layout.total, MADV_DONTFORK);  // a forked child must not scribble on the group
    seg->base_ = p;
    seg->mappedBytes_ = layout.total;
    return true;
  };

  Announcement a;
  std::memset(&a, 0, sizeof(a));
  if (me == 0) {
    std::random_device rd;
    a.nonce[0] = (static_cast<uint64_t>(rd()) << 32) ^ rd();
    a.nonce[1] = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^ static_cast<uint64_t>(getpid());
    std::snprintf(a.name, sizeof(a.name), "/kolo-shm-%d-%016llx", static_cast<int>(getpid()),
                  static_cast<unsigned long long>(a.nonce[0]));
    a.totalBytes = layout.total;
    std::string err;
    int fd = shm_open(a.name, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) {
      err = errnoText("shm_open", errno);
    } else {
      int rc = ftruncate(fd, static_cast<off_t>(layout.total)) == 0 ? 0 : errno;
      if (rc == 0) {
        rc = posix_fallocate(fd, 0, static_cast<off_t>(layout.total));
        if (rc == EOPNOTSUPP || rc == EINVAL) rc = 0;  // no reservation here; sized anyway
        if (rc != 0) err = errnoText("posix_fallocate", rc);
      } else {
        err = errnoText("ftruncate", rc);
      }
      if (err.empty()) mapFd(fd, &err);
      ::close(fd);
      if (!err.empty()) shm_unlink(a.name);
    }
    if (err.empty()) {
      auto* h = new (seg->base_) Header();
      h->nonce[0] = a.nonce[0];
      h->nonce[1] = a.nonce[1];
      h->size = static_cast<uint32_t>(n);
      h->version = kVersion;
      h->chunkBytes = chunk;
      h->ringBytes = ring;
      h->totalBytes = layout.total;
      h->magic = kMagic;
      a.ok = 1;
    } else {
      std::snprintf(a.error, sizeof(a.error), "%s (%zu bytes in /dev/shm)", err.c_str(),
                    layout.total);
    }
  }
  Status told = setupBroadcast(base, &a, sizeof(a), 0);
  if (!told.isOk()) {
    if (me == 0 && a.ok) shm_unlink(a.name);
    return told;
  }
  if (!a.ok) {
    return Status(ErrorCode::kIo,
                  "rank 0 could not create the shared-memory segment: " + std::string(a.error));
  }
  std::string err;
  if (me != 0) {
    int fd = shm_open(a.name, O_RDWR, 0600);
    if (fd < 0) {
      err = errnoText("shm_open", errno);
    } else {
      struct stat st;
      if (fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) != a.totalBytes ||
          a.totalBytes != layout.total) {
        err = "the segment has an unexpected size";
      } else {
        mapFd(fd, &err);
      }
      ::close(fd);
    }
    if (err.empty()) {
      auto* h = static_cast<Header*>(seg->base_);
      if (h->magic != kMagic || h->nonce[0] != a.nonce[0] || h->nonce[1] != a.nonce[1]) {
        err = "a segment of that name exists but is not this group's (another host?)";
      }
    }
  }
  if (err.empty()) {
    auto* bytes = static_cast<uint8_t*>(seg->base_);
    seg->header_ = static_cast<Header*>(seg->base_);
    seg->ranks_ = reinterpret_cast<RankBlock*>(bytes + layout.ranks);
    seg->rings_ = reinterpret_cast<RingCtl*>(bytes + layout.ringCtl);
    seg->ringData_ = bytes + layout.ringData;
    seg->staging_ = bytes + layout.staging;
    seg->ranks_[me].cpu.store(-1, std::memory_order_relaxed);
    seg->ranks_[me].pid.store(static_cast<int32_t>(getpid()), std::memory_order_relaxed);
    seg->ranks_[me].pidNamespace.store(pidNamespaceId(), std::memory_order_release);
  }
  // The confirmation: the lowest rank that failed, or INT32_MAX.
  int32_t firstBad = err.empty() ? INT32_MAX : me;
  Status confirmed = setupMinInt32(base, &firstBad);
  if (me == 0) shm_unlink(a.name);
  KOLO_RETURN_IF_ERROR(confirmed);
  if (firstBad != INT32_MAX) {
    std::string why = firstBad == me ? ": " + err : " (not on this host?)";
    return Status(
        ErrorCode::kUnsupported,
        seg->label(firstBad) + " could not map the shared-memory segment " + a.name + why);
  }
  const uint64_t myNs = pidNamespaceId();
  seg->pidVisible_.assign(static_cast<size_t>(n), false);
  for (int r = 0; r < n; ++r) {
    const RankBlock& b = seg->ranks_[r];
    seg->pidVisible_[static_cast<size_t>(r)] =
        r != me && myNs != 0 && b.pidNamespace.load(std::memory_order_acquire) == myNs;
  }
  *out = std::move(seg);
  return Status::ok();
}

Segment::~Segment() {
  if (base_ != nullptr) munmap(base_, mappedBytes_);
}

std::string Segment::label(int r) const {
  int g = r >= 0 && r < static_cast<int>(globals_.size()) ? globals_[static_cast<size_t>(r)] : r;
  return describeRank(r, g);
}

void Segment::cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

bool Segment::spinWorthwhile(uint64_t watch) {
  const int mine = sched_getcpu();
  ranks_[rank_].cpu.store(mine, std::memory_order_relaxed);
  for (int r = 0; r < size_; ++r) {
    if (r != rank_ && (watch >> r & 1) != 0 &&
        ranks_[r].cpu.load(std::memory_order_relaxed) == mine) {
      return false;
    }
  }
  return true;
}

void Segment::notify(int r) {
  RankBlock& b = ranks_[r];
  b.doorbell.fetch_add(1, std::memory_order_seq_cst);
  if (b.sleeping.load(std::memory_order_seq_cst) != 0) {
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&b.doorbell), FUTEX_WAKE, INT_MAX, nullptr,
            nullptr, 0);
  }
}

void Segment::notifyOthers() {
  for (int r = 0; r < size_; ++r) {
    if (r != rank_) notify(r);
  }
}

void Segment::futexWait(uint32_t expected, Clock::duration limit) {
  if (limit <= Clock::duration::zero()) return;
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(limit).count();
  struct timespec ts;
  ts.tv_sec = static_cast<time_t>(ns / 1000000000);
  ts.tv_nsec = static_cast<long>(ns % 1000000000);
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&ranks_[rank_].doorbell), FUTEX_WAIT, expected,
          &ts, nullptr, 0);
}

void Segment::abort(const Status& cause) {
  {
    std::lock_guard<std::mutex> lock(abortMu_);
    if (localAborted_.load()) return;
    abortCause_ =
        cause.isOk() ? Status(ErrorCode::kAborted, "transport aborted without a cause") : cause;
    localAborted_.store(true);
  }
  uint32_t nobody = 0;
  if (header_->abortedBy.compare_exchange_strong(nobody, static_cast<uint32_t>(rank_ + 1))) {
    const std::string text = cause.toString();
    const size_t len = std::min(text.size(), sizeof(header_->abortText) - 1);
    std::memcpy(header_->abortText, text.data(), len);
    header_->abortText[len] = '\0';
    header_->abortTextReady.store(1, std::memory_order_release);
  }
  notify(rank_);
  notifyOthers();
}

Status Segment::aborted() const {
  if (localAborted_.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lock(abortMu_);
    return abortCause_;
  }
  const uint32_t by = header_->abortedBy.load(std::memory_order_acquire);
  if (by == 0 || static_cast<int>(by) == rank_ + 1) return Status::ok();
  std::string msg = label(static_cast<int>(by) - 1) + " aborted the shared-memory transport";
  if (header_->abortTextReady.load(std::memory_order_acquire) != 0) {
    msg += std::string(": ") + header_->abortText;
  }
  return Status(ErrorCode::kAborted, msg);
}

void Segment::close() {
  ranks_[rank_].closed.store(1, std::memory_order_release);
  notifyOthers();
}

std::string Segment::stoppedPeers() const {
  std::string text;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_ || !pidVisible_[static_cast<size_t>(r)]) continue;
    const int pid = ranks_[r].pid.load(std::memory_order_relaxed);
    const char state = processState(pid);
    if (state != 'T' && state != 't') continue;
    text += (text.empty() ? "" : ", ") + label(r) + " is stopped (process " + std::to_string(pid) +
            " in state " + state + ")";
  }
  return text;
}

Status Segment::health(Clock::time_point now, uint64_t watch) {
  KOLO_RETURN_IF_ERROR(aborted());
  int closedRank = -1;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_ || (watch >> r & 1) == 0) continue;
    if (ranks_[r].closed.load(std::memory_order_acquire) != 0) {
      closedRank = r;
      break;
    }
  }
  // A peer that closed may have done so because a third one died: name the dead one first.
  // Any rank of the group that vanished without closing counts, watched or not: a ring
  // neighbour we only send to (sends complete into the ring) is still the one to blame.
  if (closedRank < 0 && now < nextLivenessCheck_) return Status::ok();
  nextLivenessCheck_ = now + kLivenessPeriod;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_ || !pidVisible_[static_cast<size_t>(r)]) continue;
    if (ranks_[r].closed.load(std::memory_order_acquire) != 0) continue;  // left in order
    const int pid = ranks_[r].pid.load(std::memory_order_relaxed);
    if (processGone(pid)) {
      return Status(ErrorCode::kPeerLost,
                    label(r) + " died (process " + std::to_string(pid) + " is gone)");
    }
  }
  if (closedRank >= 0) {
    return Status(ErrorCode::kPeerLost, label(closedRank) + " closed its shared-memory transport");
  }
  return Status::ok();
}

}  // namespace kolo::shm
