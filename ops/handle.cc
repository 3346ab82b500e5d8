#include "ops/handle.h"

namespace kolo {

bool HandleState::complete(const Status& status) {
  Callback cb;
  Status final;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (done_) return false;
    if (!status.isOk() && status_.isOk()) status_ = status;  // keep the first error
    if (--remainingParts_ > 0) return false;
    done_ = true;
    final = status_;
    cb = std::move(callback_);
  }
  cv_.notify_all();
  if (cb) cb(final);
  return true;
}

bool HandleState::done() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

void HandleState::advanceWhileWaiting(Deadline deadline) const {
  std::shared_ptr<Progress> p = progress_.lock();
  if (!p) return;
  while (!done() && p->advance(deadline)) {
  }
}

Status HandleState::wait(Deadline deadline) const {
  advanceWhileWaiting(deadline);
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_until(lock, deadline, [&] { return done_; })) {
    return Status(ErrorCode::kTimeout, "the op did not complete within the wait timeout");
  }
  return status_;
}

Status HandleState::wait() const {
  advanceWhileWaiting(Deadline::max());
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return done_; });
  return status_;
}

Status HandleState::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!done_) return Status(ErrorCode::kInternal, "the op is still running");
  return status_;
}

void HandleState::setCallback(Callback cb) {
  Status final;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!done_) {
      callback_ = std::move(cb);
      return;
    }
    final = status_;
  }
  cb(final);
}

}  // namespace kolo
