// SPDX-License-Identifier: Apache-2.0
// The in-process store and the prefix view. The file and TCP stores live in file_store.cc and
// tcp_store.cc; what all of them share (counter encoding, deadlines) is in store_wire.h.
#include "rendezvous/store.h"

#include <condition_variable>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "rendezvous/store_wire.h"

namespace kolo {
namespace {

using namespace store_wire;

std::string quoteKeys(const std::vector<std::string>& keys) {
  std::string s;
  for (const auto& k : keys) s += (s.empty() ? "'" : ", '") + k + "'";
  return s;
}

// One map under one mutex; every waiter sleeps on the same condition variable, which set/add
// notify. Thread ranks in one process are few, so a broadcast per write is cheap.
class MemoryStore final : public Store {
 public:
  Status set(const std::string& key, const std::vector<uint8_t>& value) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      data_[key] = value;
    }
    cv_.notify_all();
    return Status::ok();
  }

  Status get(const std::string& key, std::vector<uint8_t>* value,
             std::chrono::milliseconds timeout) override {
    KOLO_REQUIRE(value != nullptr, kInvalidArgument, "store get: value must not be null");
    std::unique_lock<std::mutex> lock(mu_);
    auto found = [&] { return data_.count(key) != 0; };
    if (!cv_.wait_until(lock, deadlineAfter(timeout), found)) {
      return Status(ErrorCode::kTimeout, timeoutMessage(timeout, key, "memory store"));
    }
    *value = data_[key];
    return Status::ok();
  }

  Status add(const std::string& key, int64_t delta, int64_t* newValue) override {
    int64_t v = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = data_.find(key);
      if (it != data_.end() && !decodeCounter(it->second, &v)) {
        return Status(ErrorCode::kInvalidArgument, "store add: key '" + key + "' holds a " +
                                                       std::to_string(it->second.size()) +
                                                       "-byte value, not an 8-byte counter");
      }
      v = addWrapping(v, delta);
      data_[key] = encodeCounter(v);
    }
    cv_.notify_all();
    if (newValue != nullptr) *newValue = v;
    return Status::ok();
  }

  Status wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(mu_);
    auto missing = [&] {
      std::vector<std::string> m;
      for (const auto& k : keys) {
        if (data_.count(k) == 0) m.push_back(k);
      }
      return m;
    };
    if (!cv_.wait_until(lock, deadlineAfter(timeout), [&] { return missing().empty(); })) {
      return Status(ErrorCode::kTimeout, "timed out after " + std::to_string(timeout.count()) +
                                             " ms waiting for store key(s) " +
                                             quoteKeys(missing()) + " (memory store)");
    }
    return Status::ok();
  }

  Status check(const std::string& key, bool* exists) override {
    KOLO_REQUIRE(exists != nullptr, kInvalidArgument, "store check: exists must not be null");
    std::lock_guard<std::mutex> lock(mu_);
    *exists = data_.count(key) != 0;
    return Status::ok();
  }

  Status remove(const std::string& key) override {
    std::lock_guard<std::mutex> lock(mu_);
    data_.erase(key);
    return Status::ok();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::unordered_map<std::string, std::vector<uint8_t>> data_;
};

// Stateless apart from the prefix: thread safety and blocking are the base store's.
class PrefixStore final : public Store {
 public:
  PrefixStore(std::shared_ptr<Store> base, std::string prefix)
      : base_(std::move(base)), prefix_(std::move(prefix)) {}

  Status set(const std::string& key, const std::vector<uint8_t>& value) override {
    return base_->set(prefix_ + key, value);
  }
  Status get(const std::string& key, std::vector<uint8_t>* value,
             std::chrono::milliseconds timeout) override {
    return base_->get(prefix_ + key, value, timeout);
  }
  Status add(const std::string& key, int64_t delta, int64_t* newValue) override {
    return base_->add(prefix_ + key, delta, newValue);
  }
  Status wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    std::vector<std::string> full;
    full.reserve(keys.size());
    for (const auto& k : keys) full.push_back(prefix_ + k);
    return base_->wait(full, timeout);
  }
  Status check(const std::string& key, bool* exists) override {
    return base_->check(prefix_ + key, exists);
  }
  Status remove(const std::string& key) override { return base_->remove(prefix_ + key); }

 private:
  std::shared_ptr<Store> base_;
  std::string prefix_;
};

}  // namespace

std::shared_ptr<Store> makeMemoryStore() { return std::make_shared<MemoryStore>(); }

std::shared_ptr<Store> makePrefixStore(std::shared_ptr<Store> base, const std::string& prefix) {
  return std::make_shared<PrefixStore>(std::move(base), prefix);
}

Status makeGenerationStore(std::shared_ptr<Store> store, const std::string& name, int size,
                           std::shared_ptr<Store>* out) {
  int64_t ticket = 0;
  KOLO_RETURN_IF_ERROR(store->add(name + "/generation", 1, &ticket));
  const int64_t generation = (ticket - 1) / (size > 0 ? size : 1);
  *out = makePrefixStore(std::move(store), name + "/" + std::to_string(generation) + "/");
  return Status::ok();
}

}  // namespace kolo
