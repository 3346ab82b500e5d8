// SPDX-License-Identifier: Apache-2.0
// Timeline: records what the coordinator does with each tensor as a Chrome trace-event JSON file
// (opens in chrome://tracing and https://ui.perfetto.dev), enabled by KOLO_TIMELINE=<path>.
//
// What the file shows. One process per rank (pid = rank, labelled "kolo rank N" and with the
// wall-clock start time, also under Horovod's key "start_time_since_epoch_in_micros"), one row
// per tensor name (tid assigned on first use, labelled with the name). On a tensor's row:
// NEGOTIATE_<OP> begin/end with a zero-length tick named after each rank as it reports ready
// (args {rank}); then <OP> (ALLREDUCE, ALLGATHER, ...) with the nested activities the caller
// names (QUEUE, MEMCPY_IN_FUSION_BUFFER, MPI_ALLREDUCE, ...); the op's end event carries args
// {dtype, shape}. With markCycles, an instant CYCLE_START per coordinator round.
// "ts" is microseconds since start() on the steady clock; otherData holds the rank, the wall-clock
// start (ISO 8601 UTC and Unix microseconds), the number of dropped events and the state
// ("running" until stop() writes "stopped", so a file cut short by a crash says so).
//
// How it is written. Event calls copy their arguments into an Event and append it to a bounded
// queue under a mutex; they never wait for I/O and never wait for space: when the queue is full
// the event is dropped and counted (a dropped end can leave its begin open in the viewer; the
// count in otherData says the file is incomplete). A writer thread (named "kolo-timeline") sleeps
// on a condition variable while there is nothing to do (no polling), formats events, and writes
// them out at most every 100 ms while events arrive, after 1000 events, on flush() and at stop().
// Every write puts the new events and a fresh closing "]...}" in one pwrite at the end of the data,
// overwriting the previous closing, so the file on disk is complete, valid JSON after every write:
// a process that dies (uncaught exception, abort, kill -9) leaves a valid file holding everything
// written up to ~100 ms before it died. The one exception: a kill -9 that lands inside that
// pwrite (a window of microseconds per write) may leave the write cut at a page boundary, so the
// file ends mid-event; repair() (the kolo-timeline-repair tool) cuts such a file back to its last
// complete event and closes it, and resume() does the same before it continues a file. A write
// that fails (disk full, file size limit) puts the previous closing back, so the file stays
// valid with what was written before. Writes go to the page cache (no fsync): a power loss may
// lose more.
//
// One writer per file: start() takes an exclusive advisory lock (flock) on the file, so a second
// Timeline, in this process or another (two jobs given the same KOLO_TIMELINE), gets kIo instead
// of interleaving its writes with the first's into a corrupt file.
//
// Thread safety: every member function may be called from any thread. start()/stop() serialize
// with each other. The event functions are cheap (an active() check when off; otherwise a few
// small copies and one short critical section), never block on the writer, and are no-ops while
// inactive. Events that race with stop() are either written or silently discarded.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/types.h"

namespace kolo {

class Timeline {
 public:
  // Queue capacity of the default constructor: events buffered between writer wake-ups.
  static constexpr size_t kDefaultQueueCapacity = size_t{1} << 16;

  Timeline();
  // Same with a chosen queue capacity (>= 1); small values are for tests of the drop path.
  explicit Timeline(size_t queueCapacity);
  ~Timeline();  // stop()
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  // Opens `path` (creating or truncating it), writes a valid, empty trace and starts the writer
  // thread. With `path` already active (the same file, however spelled) it returns ok and only
  // takes the new markCycles (the file keeps its events and its rank); with another file active,
  // that file is stopped first. `rank` becomes the pid and goes into the metadata. Blocks for the
  // open and the first write.
  // Errors: kIo naming the path and the OS error, or saying that another timeline (another
  // process, or another Timeline of this one) is writing that file; the timeline stays inactive
  // and the file untouched. kInternal if the writer thread cannot be created.
  Status start(const std::string& path, bool markCycles, int rank);

  // What a re-initialised runtime writes into the file an earlier runtime of this process left
  // (elastic training: init -> shutdown -> init with a new rank and size).
  struct Reset {
    int64_t round = 0;  // the rendezvous round this init joined
    int rank = 0;
    int size = 0;
  };
  // Like start(), but when `path` holds a complete kolo timeline (an earlier session stopped or
  // died), it continues that file instead of truncating it: the new session's events follow the
  // old ones (same time axis: the old file's start time is kept), under this rank's process
  // row, after an instant "RESET" marker with args {round, rank, size}. A file that is missing
  // or is not a kolo timeline is started afresh, as start() does. A kolo timeline cut short by a
  // kill (see repair()) is cut back to its last complete event and continued. Same errors as
  // start().
  Status resume(const std::string& path, bool markCycles, const Reset& reset);

  // Makes a kolo timeline file that ends mid-event (its writer was killed inside a write) valid
  // JSON again: cuts it back to its last complete event and appends a closing whose otherData
  // says "state":"truncated". A complete file is left untouched. Sets *repaired (may be null) to
  // whether the file was changed. Errors: kIo (cannot open, read or write it, or another timeline
  // is writing it now), kInvalidArgument (not a kolo timeline, or cut inside its header).
  static Status repair(const std::string& path, bool* repaired);

  // Writes every event accepted so far, marks the file "stopped", closes it and joins the writer.
  // Idempotent; a no-op when inactive. Blocks for the final write.
  void stop();

  bool active() const { return active_.load(std::memory_order_acquire); }
  bool markCycles() const { return markCycles_.load(std::memory_order_relaxed); }

  // ---- events; `name` is the tensor name and selects the row --------------------------------
  void negotiateStart(const std::string& name, OpType op);     // "NEGOTIATE_ALLREDUCE" begin
  void negotiateRankReady(const std::string& name, int rank);  // tick "<rank>", args {rank}
  void negotiateEnd(const std::string& name);
  void opStart(const std::string& name, OpType op);                          // "ALLREDUCE" begin
  void activityStart(const std::string& name, const std::string& activity);  // nested begin
  void activityEnd(const std::string& name);
  void opEnd(const std::string& name, DataType dtype, const std::vector<int64_t>& shape);
  // Instant "CYCLE_START" for the whole process; a no-op unless started with markCycles.
  void markCycleStart();

  // Events dropped because the queue was full, since the last start().
  uint64_t droppedEvents() const;

  // Blocks until every event queued before the call is written and the file is valid JSON again
  // (normally well under a millisecond; gives up after 10 s if the disk hangs). No-op if inactive.
  void flush();

  // The first I/O error the writer met since the last start() (a failed write stops further
  // writes to that file; events are then discarded); ok otherwise.
  Status writeStatus() const;

  // Diagnostics: how many times the writer thread has woken up since the last start(). While no
  // events arrive it stays asleep (at most one wake-up per second), which tests check.
  uint64_t writerWakeups() const;

 private:
  struct Event;
  struct Impl;

  void push(Event&& event);
  Status begin(const std::string& path, bool markCycles, int rank, const Reset* reset);

  std::atomic<bool> active_{false};
  std::atomic<bool> markCycles_{false};
  std::unique_ptr<Impl> impl_;  // lives as long as the Timeline, so racing producers stay safe
};

}  // namespace kolo
