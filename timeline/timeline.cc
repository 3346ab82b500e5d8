// SPDX-License-Identifier: Apache-2.0
// Why it is built this way (Horovod's timeline is the reference; these are its faults avoided):
// - Horovod's writer thread polls a lock-free queue in a loop; ours sleeps on a condition
//   variable. Producers notify only on the edges that matter (first event after idle, a full
//   batch, a flush request), so a busy coordinator does not pay a futex wake per event.
// - A crash used to leave "[{...},{...}," behind. We keep the closing bytes on disk after every
//   write and overwrite them with the next write (pwrite at a remembered offset), data and new
//   closing in one system call: whenever the process dies, the file ends in a valid closing.
//   A SIGKILL inside that system call can still cut it at a page boundary (the kernel checks for
//   a fatal signal between pages; seen twice in 60 kills of a writer that writes all the time),
//   and no order of writes avoids that without rewriting the file; so every event is one line,
//   a raw newline never occurs inside a JSON string, and repair() cuts such a file back to its
//   last ",\n{" (the start of the last, possibly partial, event) and closes it.
// - Horovod lets two writers of one path interleave into garbage; we hold a flock on the file.
// - Output is compact (one short event per line, no pretty printing) so long runs stay openable.
// - Every rank can write its own file: pid = rank, so files from several ranks can be merged.
#include "timeline/timeline.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <utility>

#include "base/clock.h"
#include "kolo/build_config.h"
#include "timeline/json_writer.h"

namespace kolo {
namespace {

constexpr auto kFlushInterval = std::chrono::milliseconds(100);  // max age of unwritten events
constexpr size_t kFlushEvents = 1000;                            // or this many unwritten events
constexpr auto kIdleWait = std::chrono::seconds(1);              // idle sleep, re-armed
constexpr auto kFlushDeadline = std::chrono::seconds(10);

int64_t steadyNowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

std::string upperOpName(OpType op) {
  std::string s = toString(op);
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

// Writes all of `data` at `offset`, retrying short writes and EINTR. Returns 0 or an errno.
int pwriteAll(int fd, const std::string& data, off_t offset) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n =
        ::pwrite(fd, data.data() + done, data.size() - done, offset + static_cast<off_t>(done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (n == 0) return EIO;
    done += static_cast<size_t>(n);
  }
  return 0;
}

// True when `path` names the file open as `fd` (same device and inode), however it is spelled.
bool isSameFile(const std::string& path, int fd) {
  struct stat a = {};
  struct stat b = {};
  return ::stat(path.c_str(), &a) == 0 && ::fstat(fd, &b) == 0 && a.st_dev == b.st_dev &&
         a.st_ino == b.st_ino;
}

enum class EventKind : uint8_t {
  kNegotiateStart,
  kRankReady,
  kNegotiateEnd,
  kOpStart,
  kActivityStart,
  kActivityEnd,
  kOpEnd,
  kCycleStart,
};

// What the writer thread owns for one file, from start() to stop().
struct TimelineSession {
  std::string path;
  int fd = -1;
  int rank = 0;
  int64_t baseSteadyNs = 0;
  int64_t startUnixUs = 0;
  std::unordered_map<std::string, int64_t> tids;  // tensor name -> row
  int64_t nextTid = 1;
  std::string out;       // formatted events not yet in the file
  size_t unwritten = 0;  // events in `out`
  Clock::time_point oldestUnwritten;
  off_t dataEnd = 0;         // file offset where the closing starts (= next event goes)
  size_t closingOnDisk = 0;  // bytes after dataEnd in the file
  std::string closingText;   // those bytes, as last written (put back when a write fails)
  Status error;              // first write error; further writes are skipped
};

}  // namespace

struct Timeline::Event {
  Event() = default;
  Event(EventKind k, int64_t ts, const std::string& n) : kind(k), steadyNs(ts), name(n) {}

  EventKind kind = EventKind::kCycleStart;
  int64_t steadyNs = 0;
  std::string name;
  OpType op = OpType::kAllreduce;
  DataType dtype = DataType::kFloat32;
  int32_t rank = 0;
  std::string activity;
  std::vector<int64_t> shape;
};

struct Timeline::Impl {
  using Session = TimelineSession;
  enum class WriterState { kBusy, kIdle, kBatching };

  explicit Impl(size_t cap)
      : capacity(std::max<size_t>(cap, 1)),
        notifyAt(std::min(kFlushEvents, std::max<size_t>(capacity / 2, 1))) {}

  const size_t capacity;
  const size_t notifyAt;  // queue length that wakes a batching writer

  std::mutex lifeMu;  // serializes start/stop; guards session and writer
  std::unique_ptr<Session> session;
  std::thread writer;

  mutable std::mutex mu;  // guards everything below
  std::condition_variable writerCv;
  std::condition_variable flushCv;
  std::vector<Event> pending;
  bool accepting = false;
  bool stopping = false;
  bool writerRunning = false;
  WriterState writerState = WriterState::kBusy;
  uint64_t flushRequested = 0;
  uint64_t flushDone = 0;
  uint64_t wakeups = 0;
  uint64_t dropped = 0;
  Status writeError;

  void stopLocked(std::atomic<bool>* active);
  void writerLoop(Session* s);
  void format(Session* s, const Event& e);
  void rowOf(Session* s, const std::string& name, int64_t* tid);
  void writeOut(Session* s, bool stopped);
  std::string header(const Session& s) const;
  std::string closing(const Session& s, bool stopped);
};

// ---- JSON emission ---------------------------------------------------------------------------

std::string Timeline::Impl::header(const Session& s) const {
  std::string iso = formatIso8601Utc(s.startUnixUs);
  std::string h = "{\"traceEvents\":[\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":";
  appendJsonInt(h, s.rank);
  h += ",\"args\":{\"name\":\"kolo rank ";
  appendJsonInt(h, s.rank);
  h += "\",\"start_time\":";
  appendJsonString(h, iso);
  h += ",\"start_time_unix_us\":";
  appendJsonInt(h, s.startUnixUs);
  // Horovod's timeline carries the same value under this name; tools written for it read it.
  h += ",\"start_time_since_epoch_in_micros\":";
  appendJsonInt(h, s.startUnixUs);
  h += "}},\n{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":";
  appendJsonInt(h, s.rank);
  h += ",\"args\":{\"sort_index\":";
  appendJsonInt(h, s.rank);
  h += "}},\n{\"name\":\"process_labels\",\"ph\":\"M\",\"pid\":";
  appendJsonInt(h, s.rank);
  h += ",\"args\":{\"labels\":";
  appendJsonString(h, "started " + iso);
  h += "}}";
  return h;
}

namespace {
// The bytes after the last event: the end of the array and the otherData object.
std::string closingText(int rank, int64_t startUnixUs, uint64_t dropped, const char* state) {
  std::string c = "\n],\n\"displayTimeUnit\":\"ms\",\n\"otherData\":{\"producer\":\"kolo ";
  c += KOLO_VERSION_STRING;
  c += "\",\"rank\":";
  appendJsonInt(c, rank);
  c += ",\"start_time\":";
  appendJsonString(c, formatIso8601Utc(startUnixUs));
  c += ",\"start_time_unix_us\":";
  appendJsonInt(c, startUnixUs);
  c += ",\"dropped_events\":";
  appendJsonInt(c, static_cast<int64_t>(dropped));
  c += ",\"state\":\"";
  c += state;
  c += "\"}}\n";
  return c;
}
}  // namespace

// The closing keeps a constant shape: "running"/"stopped" have equal length and the dropped count
// only grows, so a new closing never ends before the old one (writeOut pads if it ever would).
std::string Timeline::Impl::closing(const Session& s, bool stopped) {
  uint64_t droppedNow;
  {
    std::lock_guard<std::mutex> lock(mu);
    droppedNow = dropped;
  }
  return closingText(s.rank, s.startUnixUs, droppedNow, stopped ? "stopped" : "running");
}

void Timeline::Impl::rowOf(Session* s, const std::string& name, int64_t* tid) {
  auto it = s->tids.find(name);
  if (it != s->tids.end()) {
    *tid = it->second;
    return;
  }
  *tid = s->nextTid++;
  s->tids.emplace(name, *tid);
  // Label the row with the tensor name and keep rows in order of first appearance.
  std::string& o = s->out;
  o += ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":";
  appendJsonInt(o, s->rank);
  o += ",\"tid\":";
  appendJsonInt(o, *tid);
  o += ",\"args\":{\"name\":";
  appendJsonString(o, name);
  o += "}},\n{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":";
  appendJsonInt(o, s->rank);
  o += ",\"tid\":";
  appendJsonInt(o, *tid);
  o += ",\"args\":{\"sort_index\":";
  appendJsonInt(o, *tid);
  o += "}}";
}

void Timeline::Impl::format(Session* s, const Event& e) {
  int64_t tid = 0;
  if (e.kind != EventKind::kCycleStart) rowOf(s, e.name, &tid);
  std::string& o = s->out;
  o += ",\n{";
  switch (e.kind) {
    case EventKind::kNegotiateStart:
      o += "\"name\":";
      appendJsonString(o, "NEGOTIATE_" + upperOpName(e.op));
      o += ",\"ph\":\"B\"";
      break;
    case EventKind::kOpStart:
      o += "\"name\":";
      appendJsonString(o, upperOpName(e.op));
      o += ",\"ph\":\"B\"";
      break;
    case EventKind::kActivityStart:
      o += "\"name\":";
      appendJsonString(o, e.activity);
      o += ",\"ph\":\"B\"";
      break;
    case EventKind::kRankReady:
      o += "\"name\":\"";
      appendJsonInt(o, e.rank);
      o += "\",\"ph\":\"X\",\"dur\":0";
      break;
    case EventKind::kNegotiateEnd:
    case EventKind::kActivityEnd:
    case EventKind::kOpEnd:
      o += "\"ph\":\"E\"";  // viewers close the innermost open "B" of the row; no name needed
      break;
    case EventKind::kCycleStart:
      o += "\"name\":\"CYCLE_START\",\"ph\":\"i\",\"s\":\"p\"";
      break;
  }
  o += ",\"ts\":";
  appendJsonMicros(o, e.steadyNs - s->baseSteadyNs);
  o += ",\"pid\":";
  appendJsonInt(o, s->rank);
  o += ",\"tid\":";
  appendJsonInt(o, tid);
  if (e.kind == EventKind::kRankReady) {
    o += ",\"args\":{\"rank\":";
    appendJsonInt(o, e.rank);
    o += "}";
  } else if (e.kind == EventKind::kOpEnd) {
    o += ",\"args\":{\"dtype\":";
    appendJsonString(o, toString(e.dtype));
    o += ",\"shape\":";
    appendJsonIntArray(o, e.shape);
    o += "}";
  }
  o += "}";
}

void Timeline::Impl::writeOut(Session* s, bool stopped) {
  if (s->error.isOk()) {
    std::string tail = closing(*s, stopped);
    size_t have = s->out.size() + tail.size();
    if (have < s->closingOnDisk) tail.insert(tail.size() - 1, s->closingOnDisk - have, ' ');
    std::string buf;
    buf.reserve(s->out.size() + tail.size());
    buf += s->out;
    buf += tail;
    if (int err = pwriteAll(s->fd, buf, s->dataEnd); err != 0) {
      s->error =
          Status(ErrorCode::kIo, "timeline: cannot write '" + s->path + "': " + std::strerror(err));
      // Part of the write may have landed over the old closing (a disk that filled up midway):
      // put the old closing back (its blocks are already allocated) and cut what follows, so
      // the file is the valid trace of the last good write. Best effort: the first error stands.
      if (!s->closingText.empty() && pwriteAll(s->fd, s->closingText, s->dataEnd) == 0) {
        if (::ftruncate(s->fd, s->dataEnd + static_cast<off_t>(s->closingText.size())) != 0) {
          // A file that cannot be cut (not a regular file) keeps what it has.
        }
      }
      std::lock_guard<std::mutex> lock(mu);
      writeError = s->error;
    } else {
      s->dataEnd += static_cast<off_t>(s->out.size());
      s->closingOnDisk = tail.size();
      s->closingText = std::move(tail);
    }
  }
  s->out.clear();
  s->unwritten = 0;
}

// ---- the writer thread ----------------------------------------------------------------------

void Timeline::Impl::writerLoop(Session* s) {
  std::vector<Event> batch;
  std::unique_lock<std::mutex> lock(mu);
  for (;;) {
    auto workToDo = [&] { return stopping || !pending.empty() || flushRequested != flushDone; };
    if (!workToDo()) {
      if (s->unwritten == 0) {
        writerState = WriterState::kIdle;
        writerCv.wait_for(lock, kIdleWait, workToDo);
      } else {
        writerState = WriterState::kBatching;
        writerCv.wait_until(lock, s->oldestUnwritten + kFlushInterval, workToDo);
      }
      writerState = WriterState::kBusy;
      ++wakeups;
    }
    batch.swap(pending);
    const uint64_t flushTarget = flushRequested;
    const bool stop = stopping;
    const bool flushWanted = flushTarget != flushDone;
    lock.unlock();

    try {
      if (!batch.empty() && s->unwritten == 0) s->oldestUnwritten = Clock::now();
      for (const Event& e : batch) format(s, e);
      s->unwritten += batch.size();
      batch.clear();
      if (stop || flushWanted || s->unwritten >= kFlushEvents ||
          (s->unwritten > 0 && Clock::now() >= s->oldestUnwritten + kFlushInterval)) {
        writeOut(s, stop);
      }
    } catch (const std::exception& ex) {  // bad_alloc while formatting: lose this batch only
      batch.clear();
      s->out.clear();
      s->unwritten = 0;
      std::lock_guard<std::mutex> errLock(mu);
      if (writeError.isOk()) {
        writeError = Status(ErrorCode::kInternal, std::string("timeline writer: ") + ex.what());
      }
    }

    lock.lock();
    if (flushTarget > flushDone) {
      flushDone = flushTarget;
      flushCv.notify_all();
    }
    if (stop) break;
  }
  writerRunning = false;
  flushDone = flushRequested;
  flushCv.notify_all();
}

// Requires lifeMu. The writer drains the queue and writes the "stopped" closing before it exits.
void Timeline::Impl::stopLocked(std::atomic<bool>* active) {
  if (!session) return;
  active->store(false, std::memory_order_release);
  {
    std::lock_guard<std::mutex> lock(mu);
    accepting = false;
    stopping = true;
    writerCv.notify_one();
  }
  writer.join();
  // Unlock before closing: a child forked meanwhile (a data loader's worker) shares this open
  // file and would otherwise hold the lock for as long as it lives.
  ::flock(session->fd, LOCK_UN);
  ::close(session->fd);
  session.reset();
  std::lock_guard<std::mutex> lock(mu);
  stopping = false;
  pending.clear();
}

// ---- public API -----------------------------------------------------------------------------

Timeline::Timeline() : Timeline(kDefaultQueueCapacity) {}

Timeline::Timeline(size_t queueCapacity) : impl_(std::make_unique<Impl>(queueCapacity)) {}

Timeline::~Timeline() { stop(); }

Status Timeline::start(const std::string& path, bool markCycles, int rank) {
  return begin(path, markCycles, rank, nullptr);
}

Status Timeline::resume(const std::string& path, bool markCycles, const Reset& reset) {
  return begin(path, markCycles, reset.rank, &reset);
}

namespace {
constexpr char kOpen[] = "{\"traceEvents\":[\n";
constexpr char kClose[] = "\n],\n\"displayTimeUnit\":\"ms\",\n\"otherData\":{\"producer\":\"kolo ";
constexpr char kStartKey[] = "\"start_time_unix_us\":";
constexpr char kEventStart[] = ",\n{";  // begins every line after the first; never inside a string

// What an earlier kolo session left in a file: where its events end (where the next session's
// events go), its rank and its start time.
struct FileEnd {
  size_t dataEnd = 0;
  int rank = 0;
  int64_t startUnixUs = 0;
  bool complete = false;  // ends in a closing; otherwise cut mid-event (dataEnd: the cut point)
};

int64_t numberAfter(const std::string& text, size_t from, const char* key, size_t limit) {
  const size_t at = text.find(key, from);
  if (at == std::string::npos || at > limit) return -1;
  return std::strtoll(text.c_str() + at + std::strlen(key), nullptr, 10);
}

// Where the compact JSON value starting at text[i] ends (one past it), or npos when it is not
// one: strict RFC 8259 grammar with no whitespace outside strings, as the writer formats events,
// so a raw newline (never inside an event line) ends the search. Depth-limited.
size_t jsonValueEnd(const std::string& t, size_t i, int depth = 0) {
  const size_t n = t.size();
  if (i >= n || depth > 64) return std::string::npos;
  const char c = t[i];
  if (c == '"') {
    for (size_t k = i + 1; k < n; ++k) {
      const unsigned char ch = static_cast<unsigned char>(t[k]);
      if (ch == '"') return k + 1;
      if (ch < 0x20) return std::string::npos;
      if (ch == '\\') {
        if (++k >= n) return std::string::npos;
        if (t[k] == 'u') {
          for (int h = 0; h < 4; ++h) {
            if (++k >= n || !std::isxdigit(static_cast<unsigned char>(t[k]))) {
              return std::string::npos;
            }
          }
        } else if (std::strchr("\"\\/bfnrt", t[k]) == nullptr || t[k] == '\0') {
          return std::string::npos;
        }
      }
    }
    return std::string::npos;
  }
  if (c == '{' || c == '[') {
    const char close = c == '{' ? '}' : ']';
    size_t k = i + 1;
    if (k < n && t[k] == close) return k + 1;
    for (;;) {
      if (c == '{') {
        if (k >= n || t[k] != '"') return std::string::npos;
        k = jsonValueEnd(t, k, depth + 1);
        if (k == std::string::npos || k >= n || t[k] != ':') return std::string::npos;
        ++k;
      }
      k = jsonValueEnd(t, k, depth + 1);
      if (k == std::string::npos || k >= n) return std::string::npos;
      if (t[k] == close) return k + 1;
      if (t[k] != ',') return std::string::npos;
      ++k;
    }
  }
  for (const char* word : {"true", "false", "null"}) {
    const size_t len = std::strlen(word);
    if (t.compare(i, len, word) == 0) return i + len;
  }
  // A number: -?(0|[1-9]d*)(.d+)?([eE][+-]?d+)?
  size_t k = i;
  auto digits = [&] {
    const size_t from = k;
    while (k < n && std::isdigit(static_cast<unsigned char>(t[k]))) ++k;
    return k > from;
  };
  if (k < n && t[k] == '-') ++k;
  if (k < n && t[k] == '0') {
    ++k;
  } else if (!digits()) {
    return std::string::npos;
  }
  if (k < n && t[k] == '.' && (++k, !digits())) return std::string::npos;
  if (k < n && (t[k] == 'e' || t[k] == 'E')) {
    ++k;
    if (k < n && (t[k] == '+' || t[k] == '-')) ++k;
    if (!digits()) return std::string::npos;
  }
  // The number must be followed by something (a cut "12" may have been "123").
  return k < n ? k : std::string::npos;
}

// Reads `text` (a whole file) as a kolo timeline: false when it is not one (no kolo header, or
// cut inside the first line of its header). A file that does not end in its closing was cut by a
// kill inside a write: its events end after the last event that is complete, valid JSON, counted
// from the start (",\n{" begins each line, and no line holds a raw newline), and the bytes from
// there on (a partial event, perhaps a piece of the old closing) are dropped.
bool readFileEnd(const std::string& text, FileEnd* end) {
  if (text.compare(0, sizeof(kOpen) - 1, kOpen) != 0) return false;
  const size_t firstLineEnd = text.find('\n', sizeof(kOpen) - 1);
  if (firstLineEnd == std::string::npos) return false;
  end->startUnixUs = numberAfter(text, 0, kStartKey, firstLineEnd);
  end->rank = static_cast<int>(numberAfter(text, 0, "\"pid\":", firstLineEnd));
  if (end->startUnixUs <= 0 || end->rank < 0) return false;
  // Complete: the closing, then "}}" and only whitespace (writeOut pads with spaces).
  const size_t close = text.rfind(kClose);
  const size_t last = text.find_last_not_of(" \n");
  if (close != std::string::npos && text.find(kEventStart, close) == std::string::npos &&
      last != std::string::npos && last > close && text.compare(last - 1, 2, "}}") == 0) {
    end->dataEnd = close;
    end->complete = true;
    return true;
  }
  size_t at = sizeof(kOpen) - 1;
  size_t dataEnd = std::string::npos;
  for (;;) {
    const size_t e = text[at] == '{' ? jsonValueEnd(text, at) : std::string::npos;
    if (e == std::string::npos) break;
    dataEnd = e;
    if (text.compare(e, sizeof(kEventStart) - 1, kEventStart) != 0) break;
    at = e + 2;
  }
  if (dataEnd == std::string::npos) return false;  // cut inside the first line
  end->dataEnd = dataEnd;
  end->complete = false;
  return true;
}

bool readWhole(int fd, std::string* out) {
  char buf[1 << 16];
  off_t at = 0;
  for (;;) {
    ssize_t n = ::pread(fd, buf, sizeof(buf), at);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    if (n == 0) return true;
    out->append(buf, static_cast<size_t>(n));
    at += n;
  }
}

// Takes the file's exclusive advisory lock, without waiting. Another holder (a Timeline of this
// process or of another) is an error; a file system without flock support is not.
Status lockExclusive(int fd, const std::string& path) {
  for (;;) {
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) return Status::ok();
    if (errno == EINTR) continue;
    if (errno == EWOULDBLOCK) {
      return Status(ErrorCode::kIo, "timeline: '" + path +
                                        "' is being written by another timeline (another job, "
                                        "process or runtime has it open); give each its own file");
    }
    return Status::ok();  // ENOLCK, EINVAL...: no locking here, carry on as before
  }
}

bool isRegularFile(int fd) {
  struct stat st = {};
  return ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
}
}  // namespace

Status Timeline::repair(const std::string& path, bool* repaired) {
  if (repaired != nullptr) *repaired = false;
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    return Status(ErrorCode::kIo, "timeline: cannot open '" + path + "': " + std::strerror(errno));
  }
  auto closeAnd = [&](Status s) {  // returns s once the file is closed
    ::close(fd);
    return s;
  };
  Status locked = lockExclusive(fd, path);
  if (!locked.isOk()) return closeAnd(locked);
  std::string text;
  if (!readWhole(fd, &text)) {
    return closeAnd(
        Status(ErrorCode::kIo, "timeline: cannot read '" + path + "': " + std::strerror(errno)));
  }
  FileEnd end;
  if (!readFileEnd(text, &end)) {
    return closeAnd(
        Status(ErrorCode::kInvalidArgument, "timeline: '" + path +
                                                "' is not a kolo timeline (or is cut inside its "
                                                "first line); nothing to repair"));
  }
  if (end.complete) return closeAnd(Status::ok());
  // The dropped count is unknown (it lived in the lost closing): 0, and the state says why.
  const std::string closing = closingText(end.rank, end.startUnixUs, 0, "truncated");
  if (int err = pwriteAll(fd, closing, static_cast<off_t>(end.dataEnd)); err != 0) {
    return closeAnd(
        Status(ErrorCode::kIo, "timeline: cannot write '" + path + "': " + std::strerror(err)));
  }
  if (::ftruncate(fd, static_cast<off_t>(end.dataEnd + closing.size())) != 0) {
    return closeAnd(
        Status(ErrorCode::kIo, "timeline: cannot cut '" + path + "': " + std::strerror(errno)));
  }
  if (repaired != nullptr) *repaired = true;
  return closeAnd(Status::ok());
}

Status Timeline::begin(const std::string& path, bool markCycles, int rank, const Reset* reset) {
  std::lock_guard<std::mutex> life(impl_->lifeMu);
  // Same file again (even spelled differently): keep it, do not truncate what it holds; the
  // new mark-cycles setting applies from now on (as Horovod's start_timeline).
  if (impl_->session && (impl_->session->path == path || isSameFile(path, impl_->session->fd))) {
    markCycles_.store(markCycles, std::memory_order_relaxed);
    return Status::ok();
  }
  impl_->stopLocked(&active_);

  auto s = std::make_unique<TimelineSession>();
  s->path = path;
  s->rank = rank;
  const int64_t nowUnixUs = std::chrono::duration_cast<std::chrono::microseconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count();
  int64_t oldStartUs = 0;
  bool continued = false;
  // No O_TRUNC: the file is cut only once its lock is ours, so a second writer of a path leaves
  // the first one's file alone. O_NONBLOCK: a FIFO without a reader fails (ENXIO) instead of
  // blocking init forever; regular files ignore it, and it is cleared right after.
  s->fd = ::open(path.c_str(),
                 (reset != nullptr ? O_RDWR : O_WRONLY) | O_CREAT | O_CLOEXEC | O_NONBLOCK, 0644);
  if (s->fd < 0) {
    return Status(ErrorCode::kIo, "timeline: cannot open '" + path + "': " + std::strerror(errno));
  }
  if (const int flags = ::fcntl(s->fd, F_GETFL); flags >= 0) {
    ::fcntl(s->fd, F_SETFL, flags & ~O_NONBLOCK);
  }
  if (Status locked = lockExclusive(s->fd, path); !locked.isOk()) {
    ::close(s->fd);
    return locked;
  }
  if (reset != nullptr) {
    std::string text;
    FileEnd end;
    if (readWhole(s->fd, &text) && readFileEnd(text, &end)) {
      continued = true;
      oldStartUs = end.startUnixUs;
      s->dataEnd = static_cast<off_t>(end.dataEnd);
      s->closingOnDisk = text.size() - end.dataEnd;  // a cut file's partial line included
    }
  }
  if (!continued && isRegularFile(s->fd) && ::ftruncate(s->fd, 0) != 0) {
    const int err = errno;
    ::close(s->fd);
    return Status(ErrorCode::kIo,
                  "timeline: cannot truncate '" + path + "': " + std::strerror(err));
  }
  // A continued file keeps its time axis: ts 0 stays the first session's start.
  s->startUnixUs = continued ? oldStartUs : nowUnixUs;
  s->baseSteadyNs = steadyNowNs() - (nowUnixUs - s->startUnixUs) * 1000;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->dropped = 0;
    impl_->wakeups = 0;
    impl_->flushRequested = 0;
    impl_->flushDone = 0;
    impl_->writeError = Status::ok();
  }
  s->out = impl_->header(*s);
  if (continued) {
    // Rows of this session get ids of their own, apart from those of earlier sessions that
    // wrote the same process id (the rank) into the file.
    s->nextTid = 1 + (reset->round % 1000) * 1000000;
    // The old events stay; this session adds its process row's metadata and the marker.
    static const char kOpen[] = "{\"traceEvents\":[\n";
    s->out = ",\n" + s->out.substr(sizeof(kOpen) - 1);
    s->out += ",\n{\"name\":\"RESET\",\"ph\":\"i\",\"s\":\"g\",\"ts\":";
    appendJsonMicros(s->out, steadyNowNs() - s->baseSteadyNs);
    s->out += ",\"pid\":";
    appendJsonInt(s->out, rank);
    s->out += ",\"tid\":0,\"args\":{\"round\":";
    appendJsonInt(s->out, reset->round);
    s->out += ",\"rank\":";
    appendJsonInt(s->out, reset->rank);
    s->out += ",\"size\":";
    appendJsonInt(s->out, reset->size);
    s->out += "}}";
  }
  impl_->writeOut(s.get(), false);  // the file is a valid trace from here on
  if (!s->error.isOk()) {
    ::close(s->fd);
    return s->error;
  }

  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->accepting = true;
    impl_->stopping = false;
    impl_->writerRunning = true;
    impl_->writerState = Impl::WriterState::kBusy;
  }
  TimelineSession* raw = s.get();
  try {
    impl_->writer = std::thread([this, raw] { impl_->writerLoop(raw); });
  } catch (const std::system_error& e) {
    ::close(s->fd);
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->accepting = false;
    impl_->writerRunning = false;
    return Status(ErrorCode::kInternal, std::string("timeline: cannot start writer: ") + e.what());
  }
  pthread_setname_np(impl_->writer.native_handle(), "kolo-timeline");
  impl_->session = std::move(s);
  markCycles_.store(markCycles, std::memory_order_relaxed);
  active_.store(true, std::memory_order_release);
  return Status::ok();
}

void Timeline::stop() {
  std::lock_guard<std::mutex> life(impl_->lifeMu);
  impl_->stopLocked(&active_);
}

void Timeline::push(Event&& event) {
  Impl& im = *impl_;
  std::lock_guard<std::mutex> lock(im.mu);
  if (!im.accepting) return;
  if (im.pending.size() >= im.capacity) {
    ++im.dropped;
    return;
  }
  im.pending.push_back(std::move(event));
  // Wake the writer on edges only: first event after idle, or a batch worth writing.
  if (im.writerState == Impl::WriterState::kIdle ||
      (im.writerState == Impl::WriterState::kBatching && im.pending.size() >= im.notifyAt)) {
    im.writerState = Impl::WriterState::kBusy;
    im.writerCv.notify_one();
  }
}

// Event calls: the timestamp is taken first, on the caller's thread, so queueing never skews it.
void Timeline::negotiateStart(const std::string& name, OpType op) {
  if (!active()) return;
  Event e{EventKind::kNegotiateStart, steadyNowNs(), name};
  e.op = op;
  push(std::move(e));
}

void Timeline::negotiateRankReady(const std::string& name, int rank) {
  if (!active()) return;
  Event e{EventKind::kRankReady, steadyNowNs(), name};
  e.rank = rank;
  push(std::move(e));
}

void Timeline::negotiateEnd(const std::string& name) {
  if (active()) push(Event{EventKind::kNegotiateEnd, steadyNowNs(), name});
}

void Timeline::opStart(const std::string& name, OpType op) {
  if (!active()) return;
  Event e{EventKind::kOpStart, steadyNowNs(), name};
  e.op = op;
  push(std::move(e));
}

void Timeline::activityStart(const std::string& name, const std::string& activity) {
  if (!active()) return;
  Event e{EventKind::kActivityStart, steadyNowNs(), name};
  e.activity = activity;
  push(std::move(e));
}

void Timeline::activityEnd(const std::string& name) {
  if (active()) push(Event{EventKind::kActivityEnd, steadyNowNs(), name});
}

void Timeline::opEnd(const std::string& name, DataType dtype, const std::vector<int64_t>& shape) {
  if (!active()) return;
  Event e{EventKind::kOpEnd, steadyNowNs(), name};
  e.dtype = dtype;
  e.shape = shape;
  push(std::move(e));
}

void Timeline::markCycleStart() {
  if (active() && markCycles()) push(Event{EventKind::kCycleStart, steadyNowNs(), std::string()});
}

uint64_t Timeline::droppedEvents() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->dropped;
}

void Timeline::flush() {
  if (!active()) return;
  Impl& im = *impl_;
  std::unique_lock<std::mutex> lock(im.mu);
  if (!im.accepting || !im.writerRunning) return;
  const uint64_t ticket = ++im.flushRequested;
  im.writerState = Impl::WriterState::kBusy;
  im.writerCv.notify_one();
  im.flushCv.wait_for(lock, kFlushDeadline,
                      [&] { return im.flushDone >= ticket || !im.writerRunning; });
}

Status Timeline::writeStatus() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->writeError;
}

uint64_t Timeline::writerWakeups() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->wakeups;
}

}  // namespace kolo
