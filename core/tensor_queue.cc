// SPDX-License-Identifier: Apache-2.0
#include "core/tensor_queue.h"

#include <algorithm>
#include <unordered_set>

namespace kolo {

namespace {
Status duplicate(const OpKey& key, bool refused) {
  std::string where = key.processSet == 0
                          ? ""
                          : " in process set " + std::to_string(key.processSet);
  if (refused) {
    return Status(ErrorCode::kDuplicateName,
                  "an earlier op named '" + key.name + "'" + where +
                      " was refused on this rank and the other ranks have not all submitted it "
                      "yet (it fails there once they have); use another name");
  }
  if (key.name.rfind("__process_set.", 0) == 0) {  // kolo's own names (runtime.cc): not chosen
    const bool add = key.name == "__process_set.add";
    return Status(ErrorCode::kDuplicateName,
                  std::string("another ") + (add ? "add_process_set" : "remove_process_set") +
                      " is already in flight on this rank (another thread's): one at a time per "
                      "rank; wait for it, then call again");
  }
  return Status(ErrorCode::kDuplicateName,
                "an op named '" + key.name + "' is already in flight" + where +
                    " on this rank; wait for it or use another name");
}
}  // namespace

Status TensorQueue::add(std::unique_ptr<TensorEntry> entry) {
  std::vector<std::unique_ptr<TensorEntry>> one;
  one.push_back(std::move(entry));
  return addGroup(std::move(one));
}

Status TensorQueue::addGroup(std::vector<std::unique_ptr<TensorEntry>> entries) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!closed_.isOk()) return closed_;
    std::unordered_set<OpKey, OpKeyHash> group;
    for (const auto& e : entries) {
      OpKey key = keyOf(e->request);
      auto held = entries_.find(key);
      if (held != entries_.end()) return duplicate(key, held->second.entry->refused);
      if (!group.insert(std::move(key)).second) return duplicate(keyOf(e->request), false);
    }
    for (auto& e : entries) {
      OpKey key = keyOf(e->request);
      e->enqueued = Clock::now();
      const size_t at = order_.size();
      order_.push_back(e.get());
      fresh_.push_back(key);
      entries_.emplace(std::move(key), Slot{std::move(e), at});
    }
    woken_ = true;
  }
  cv_.notify_one();
  return Status::ok();
}

bool TensorQueue::waitForWork(Deadline deadline, const std::function<bool()>& shouldWake) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_until(lock, deadline, [&] { return woken_ || !fresh_.empty() || shouldWake(); });
  woken_ = false;
  return !fresh_.empty();
}

void TensorQueue::notify() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    woken_ = true;
  }
  cv_.notify_one();
}

void TensorQueue::clearNew() {
  std::lock_guard<std::mutex> lock(mu_);
  fresh_.clear();
}

TensorEntry* TensorQueue::find(const OpKey& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(key);
  return it == entries_.end() ? nullptr : it->second.entry.get();
}

std::unique_ptr<TensorEntry> TensorQueue::remove(const OpKey& name) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(name);
  if (it == entries_.end()) return nullptr;
  auto entry = std::move(it->second.entry);
  order_[it->second.at] = nullptr;
  ++holes_;
  entries_.erase(it);
  fresh_.erase(std::remove(fresh_.begin(), fresh_.end(), name), fresh_.end());
  if (holes_ > 64 && holes_ * 2 > order_.size()) compact();
  return entry;
}

void TensorQueue::compact() {
  size_t kept = 0;
  for (TensorEntry* e : order_) {
    if (e == nullptr) continue;
    entries_.at(keyOf(e->request)).at = kept;
    order_[kept++] = e;
  }
  order_.resize(kept);
  holes_ = 0;
}

std::vector<std::unique_ptr<TensorEntry>> TensorQueue::close(const Status& refusal) {
  std::lock_guard<std::mutex> lock(mu_);
  closed_ = refusal.isOk() ? Status(ErrorCode::kInternal, "the op queue is closed") : refusal;
  std::vector<std::unique_ptr<TensorEntry>> out;
  for (TensorEntry* e : order_) {
    if (e != nullptr) out.push_back(std::move(entries_.at(keyOf(e->request)).entry));
  }
  entries_.clear();
  order_.clear();
  holes_ = 0;
  fresh_.clear();
  return out;
}

size_t TensorQueue::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

void TensorQueue::forEach(const std::function<void(TensorEntry&)>& fn) {
  std::lock_guard<std::mutex> lock(mu_);
  for (TensorEntry* e : order_) {
    if (e != nullptr) fn(*e);
  }
}

}  // namespace kolo
