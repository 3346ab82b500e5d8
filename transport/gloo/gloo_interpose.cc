// SPDX-License-Identifier: Apache-2.0
// kolo's forwarding implementations of Gloo's transport interfaces (see gloo_interpose.h).
//
// Aborting relies on two properties of Gloo's public UnboundBuffer API: abortWaitRecv and
// abortWaitSend may be called from any thread, and an abort that lands just before a wait
// starts still ends that wait (the installed Gloo keeps the request until the next wait takes
// it). A buffer that is registered when abortAll runs is aborted in both directions; one that
// is created later, or a wait that starts later, sees aborted() first.
// test/unit/gloo_interpose_test.cc checks the second property against the installed Gloo (an
// abort landing between WatchedBuffer's check of aborted() and the start of Gloo's wait), and
// GroupWaits and WatchedBuffer against their contracts.
#include "transport/gloo/gloo_interpose.h"

#include <gloo/common/error.h>

#include <algorithm>

namespace kolo::gloo_detail {

void GroupWaits::abortAll(const std::string& message) {
  std::lock_guard<std::mutex> lock(mu_);
  if (aborted_.load(std::memory_order_relaxed)) return;
  message_ = message;
  aborted_.store(true, std::memory_order_release);
  // Under mu_, so no buffer of the list is destroyed meanwhile. Gloo's abortWait* only takes
  // the buffer's own mutex.
  for (WatchedBuffer* b : live_) {
    b->abortWaitRecv();
    b->abortWaitSend();
  }
}

void GroupWaits::throwIfAborted() const {
  if (aborted()) throw ::gloo::IoException(message_);
}

void GroupWaits::add(WatchedBuffer* buffer) {
  std::lock_guard<std::mutex> lock(mu_);
  live_.push_back(buffer);
}

void GroupWaits::remove(WatchedBuffer* buffer) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = std::find(live_.begin(), live_.end(), buffer);
  if (it != live_.end()) {
    *it = live_.back();
    live_.pop_back();
  }
}

WatchedBuffer::WatchedBuffer(std::unique_ptr<gloo::transport::UnboundBuffer> inner,
                             std::shared_ptr<GroupWaits> waits)
    : gloo::transport::UnboundBuffer(inner->ptr, inner->size),
      inner_(std::move(inner)),
      waits_(std::move(waits)) {
  waits_->add(this);
}

WatchedBuffer::~WatchedBuffer() { waits_->remove(this); }

bool WatchedBuffer::waitRecv(int* rank, std::chrono::milliseconds timeout) {
  waits_->throwIfAborted();
  if (inner_->waitRecv(rank, timeout)) return true;
  waits_->throwIfAborted();
  return false;
}

bool WatchedBuffer::waitSend(int* rank, std::chrono::milliseconds timeout) {
  waits_->throwIfAborted();
  if (inner_->waitSend(rank, timeout)) return true;
  waits_->throwIfAborted();
  return false;
}

void WatchedBuffer::abortWaitRecv() { inner_->abortWaitRecv(); }
void WatchedBuffer::abortWaitSend() { inner_->abortWaitSend(); }

void WatchedBuffer::send(int dstRank, uint64_t slot, size_t offset, size_t nbytes) {
  waits_->throwIfAborted();
  inner_->send(dstRank, slot, offset, nbytes);
}

void WatchedBuffer::recv(int srcRank, uint64_t slot, size_t offset, size_t nbytes) {
  waits_->throwIfAborted();
  inner_->recv(srcRank, slot, offset, nbytes);
}

void WatchedBuffer::recv(std::vector<int> srcRanks, uint64_t slot, size_t offset, size_t nbytes) {
  waits_->throwIfAborted();
  inner_->recv(std::move(srcRanks), slot, offset, nbytes);
}

WatchedContext::WatchedContext(std::shared_ptr<gloo::transport::Context> inner,
                               std::shared_ptr<GroupWaits> waits)
    : gloo::transport::Context(inner->rank, inner->size),
      inner_(std::move(inner)),
      waits_(std::move(waits)) {}

std::unique_ptr<gloo::transport::Pair>& WatchedContext::getPair(int rank) {
  return inner_->getPair(rank);
}

std::unique_ptr<gloo::transport::Pair>& WatchedContext::createPair(int rank) {
  // Gloo's rendezvous sets the timeout on this context; the TCP pairs read their own context's
  // when they are made. A TCP pair waits for its first connection KOLO_GLOO_CONNECT_FACTOR times
  // its timeout (gloo/transport/tcp/pair.h, waitUntil; read at configure time), and uses the
  // timeout for nothing else kolo does (sync mode is never used): it gets that fraction, so that
  // a rank whose peer died while the group connects fails within the group's timeout.
  const std::chrono::milliseconds timeout = getTimeout();
  inner_->setTimeout(std::max(std::chrono::milliseconds(1), timeout / KOLO_GLOO_CONNECT_FACTOR));
  std::unique_ptr<gloo::transport::Pair>& pair = inner_->createPair(rank);
  inner_->setTimeout(timeout);  // the context's own waits (buffers) keep the whole timeout
  return pair;
}

std::unique_ptr<gloo::transport::UnboundBuffer> WatchedContext::createUnboundBuffer(void* ptr,
                                                                                    size_t size) {
  return std::make_unique<WatchedBuffer>(inner_->createUnboundBuffer(ptr, size), waits_);
}

WatchedDevice::WatchedDevice(std::shared_ptr<gloo::transport::Device> inner,
                             std::shared_ptr<GroupWaits> waits, std::chrono::milliseconds timeout)
    : inner_(std::move(inner)), waits_(std::move(waits)), timeout_(timeout) {}

std::shared_ptr<gloo::transport::Context> WatchedDevice::createContext(int rank, int size) {
  auto inner = inner_->createContext(rank, size);
  inner->setTimeout(timeout_);
  auto outer = std::make_shared<WatchedContext>(std::move(inner), waits_);
  outer->setTimeout(timeout_);
  return outer;
}

}  // namespace kolo::gloo_detail
