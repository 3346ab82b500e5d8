#include "core/tensor_queue.h"

#include <algorithm>

namespace kolo {

namespace {
Status duplicate(const OpKey& key) {
  std::string where = key.processSet == 0
                          ? ""
                          : " in process set " + std::to_string(key.processSet);
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
    for (size_t i = 0; i < entries.size(); ++i) {
      const OpKey key = keyOf(entries[i]->request);
      if (entries_.count(key)) return duplicate(key);
      for (size_t j = 0; j < i; ++j) {
        if (keyOf(entries[j]->request) == key) return duplicate(key);
      }
    }
    for (auto& e : entries) {
      OpKey key = keyOf(e->request);
      e->enqueued = Clock::now();
      order_.push_back(key);
      fresh_.push_back(key);
      entries_.emplace(std::move(key), std::move(e));
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
  return it == entries_.end() ? nullptr : it->second.get();
}

std::unique_ptr<TensorEntry> TensorQueue::remove(const OpKey& name) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(name);
  if (it == entries_.end()) return nullptr;
  auto entry = std::move(it->second);
  entries_.erase(it);
  auto pos = std::find(order_.begin(), order_.end(), name);
  if (pos != order_.end()) order_.erase(pos);
  fresh_.erase(std::remove(fresh_.begin(), fresh_.end(), name), fresh_.end());
  return entry;
}

std::vector<std::unique_ptr<TensorEntry>> TensorQueue::close(const Status& refusal) {
  std::lock_guard<std::mutex> lock(mu_);
  closed_ = refusal.isOk() ? Status(ErrorCode::kInternal, "the op queue is closed") : refusal;
  std::vector<std::unique_ptr<TensorEntry>> out;
  for (const auto& name : order_) out.push_back(std::move(entries_[name]));
  entries_.clear();
  order_.clear();
  fresh_.clear();
  return out;
}

size_t TensorQueue::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

void TensorQueue::forEach(const std::function<void(TensorEntry&)>& fn) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& name : order_) fn(*entries_.at(name));
}

}  // namespace kolo
