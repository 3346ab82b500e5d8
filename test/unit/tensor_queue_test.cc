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
