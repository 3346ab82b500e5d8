// SPDX-License-Identifier: Apache-2.0
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
    if (!cb) settled_ = true;
  }
  if (!cb) {
    cv_.notify_all();
    return true;
  }
  // A round's completion (on the runtime's thread or a waiting user's) hands the callback to the
  // runtime's thread, to run after the round.
  handOffCallback(cb, final, &Progress::deferCallback);
  return true;
}

void HandleState::handOffCallback(const Callback& cb, const Status& final,
                                  bool (Progress::*handOff)(std::function<void()>)) {
  // The handle stays alive until the callback ran (a handle not owned by a shared_ptr, as in
  // tests, or one without a runtime thread left, runs it here).
  std::shared_ptr<HandleState> self = weak_from_this().lock();
  std::shared_ptr<Progress> p = progress_.lock();
  if (self && p && ((*p).*handOff)([self, cb, final] { self->runCallback(cb, final); })) return;
  runCallback(cb, final);
}

void HandleState::runCallback(const Callback& cb, const Status& final) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    callbackThread_ = std::this_thread::get_id();
  }
  cb(final);
  {
    std::lock_guard<std::mutex> lock(mu_);
    callbackThread_ = std::thread::id();
    settled_ = true;
  }
  cv_.notify_all();
}

bool HandleState::settledFor(std::thread::id self) const {
  return settled_ || (done_ && callbackThread_ == self);
}

bool HandleState::done() const {
  std::lock_guard<std::mutex> lock(mu_);
  return settledFor(std::this_thread::get_id());
}

bool HandleState::ready() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

void HandleState::advanceWhileWaiting(Deadline deadline) const {
  std::shared_ptr<Progress> p = progress_.lock();
  if (!p) return;
  while (!ready() && p->advance(deadline)) {
  }
}

Status HandleState::waitRefusal() const {
  std::shared_ptr<Progress> p = progress_.lock();
  if (!p || ready() || !p->onRuntimeThread()) return Status::ok();
  return Status(ErrorCode::kInvalidArgument,
                "a wait inside a completion callback (or an output allocator) for an op that is "
                "not done: it runs on kolo's own thread, the one that would complete the op "
                "(callbacks must not block)");
}

Status HandleState::wait(Deadline deadline) const {
  KOLO_RETURN_IF_ERROR(waitRefusal());
  advanceWhileWaiting(deadline);
  const auto self = std::this_thread::get_id();
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_until(lock, deadline, [&] { return settledFor(self); })) {
    return Status(ErrorCode::kTimeout, "the op did not complete within the wait timeout");
  }
  return status_;
}

Status HandleState::wait() const {
  KOLO_RETURN_IF_ERROR(waitRefusal());
  advanceWhileWaiting(Deadline::max());
  const auto self = std::this_thread::get_id();
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return settledFor(self); });
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
    settled_ = false;  // until the callback ran (runCallback): waits report the op done then
  }
  // A round completed the op between its submission and here (the C API attaches callbacks
  // right after the enqueue): the callback still goes to the runtime's thread, so a caller that
  // holds locks while it submits never runs it.
  handOffCallback(cb, final, &Progress::postCallback);
}

}  // namespace kolo
