// SPDX-License-Identifier: Apache-2.0
// TensorQueue: keys per (process set, name), duplicates refused, and closing: the entries come
// back in arrival order and every later add is refused with the closing status (the coordinator
// closes the queue when it stops, so nothing can be stranded in it).
#include "core/tensor_queue.h"

#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <vector>

using namespace kolo;

namespace {
std::unique_ptr<TensorEntry> entry(const std::string& name, int32_t set = 0) {
  auto e = std::make_unique<TensorEntry>();
  e->request.name = name;
  e->request.processSet = set;
  e->handle = std::make_shared<HandleState>();
  return e;
}
}  // namespace

TEST_CASE("tensor queue: the same name in two sets is two ops, twice in one set is refused") {
  TensorQueue q;
  REQUIRE(q.add(entry("g")).isOk());
  REQUIRE(q.add(entry("g", 3)).isOk());
  Status dup = q.add(entry("g", 3));
  CHECK(dup.code() == ErrorCode::kDuplicateName);
  CHECK(dup.message().find("'g' is already in flight in process set 3") != std::string::npos);
  CHECK(q.size() == 2);
  // A name held by a refusal (Runtime::refuse) says so: nothing on this rank to wait for.
  auto refused = entry("r");
  refused->refused = true;
  REQUIRE(q.add(std::move(refused)).isOk());
  dup = q.add(entry("r"));
  CHECK(dup.code() == ErrorCode::kDuplicateName);
  CHECK(dup.message().find("'r' was refused on this rank") != std::string::npos);
  // kolo's own process-set names were not the caller's choice: the message says what is busy.
  REQUIRE(q.add(entry("__process_set.add")).isOk());
  dup = q.add(entry("__process_set.add"));
  CHECK(dup.code() == ErrorCode::kDuplicateName);
  CHECK(dup.message() ==
        "another add_process_set is already in flight on this rank (another thread's): one at a "
        "time per rank; wait for it, then call again");
}

TEST_CASE("tensor queue: close returns the entries in arrival order and refuses later adds") {
  TensorQueue q;
  REQUIRE(q.add(entry("a")).isOk());
  std::vector<std::unique_ptr<TensorEntry>> group;
  group.push_back(entry("b"));
  group.push_back(entry("c"));
  REQUIRE(q.addGroup(std::move(group)).isOk());
  auto out = q.close(Status(ErrorCode::kAborted, "the runtime aborted earlier: rank 1 was lost"));
  REQUIRE(out.size() == 3);
  CHECK(out[0]->request.name == "a");
  CHECK(out[1]->request.name == "b");
  CHECK(out[2]->request.name == "c");
  CHECK(q.size() == 0);
  Status late = q.add(entry("late"));
  CHECK(late.code() == ErrorCode::kAborted);
  CHECK(late.message().find("rank 1 was lost") != std::string::npos);
  std::vector<std::unique_ptr<TensorEntry>> more;
  more.push_back(entry("late2"));
  CHECK(q.addGroup(std::move(more)).code() == ErrorCode::kAborted);
  CHECK(q.size() == 0);
}

TEST_CASE("tensor queue: removals in any order keep the others in arrival order") {
  // Enough removals to compact the arrival order several times, from the back, the middle and
  // the front; a removed name can be added again and then counts as the newest.
  TensorQueue q;
  std::vector<std::string> live;
  for (int i = 0; i < 1000; ++i) {
    REQUIRE(q.add(entry("t" + std::to_string(i))).isOk());
    live.push_back("t" + std::to_string(i));
  }
  auto drop = [&](size_t at) {
    REQUIRE(q.remove(OpKey{0, live[at]}) != nullptr);
    live.erase(live.begin() + static_cast<std::ptrdiff_t>(at));
  };
  for (int i = 0; i < 300; ++i) drop(live.size() - 1);
  for (int i = 0; i < 300; ++i) drop(live.size() / 2);
  for (int i = 0; i < 200; ++i) drop(0);
  CHECK(q.remove(OpKey{0, "t0"}) == nullptr);  // already gone
  REQUIRE(q.add(entry("t0")).isOk());
  live.push_back("t0");
  std::vector<std::string> seen;
  q.forEach([&](TensorEntry& e) { seen.push_back(e.request.name); });
  CHECK(seen == live);
  CHECK(q.size() == live.size());
  CHECK(q.find(OpKey{0, live[17]}) != nullptr);
  auto out = q.close(Status(ErrorCode::kShutdown, "shut down"));
  std::vector<std::string> closed;
  for (auto& e : out) closed.push_back(e->request.name);
  CHECK(closed == live);
}
