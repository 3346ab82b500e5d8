// SPDX-License-Identifier: Apache-2.0
// Internal to the Gloo transport: kolo's own implementations of three of Gloo's public transport
// interfaces (gloo::transport::Device, ::Context, ::UnboundBuffer), each forwarding to the TCP
// transport's object, so that kolo sees every buffer created for a group -- the batches' and
// those inside Gloo's own collectives -- and can interrupt their waits from any thread.
//
// Why: Gloo's UnboundBuffer::waitRecv/waitSend block with a timeout, but that timeout closes
// every connection of the context, and the only other way out of a wait is abortWaitRecv /
// abortWaitSend on that very buffer, which Gloo's collectives keep to themselves. A group's
// buffers are therefore created through WatchedContext (Gloo's rendezvous asks the device for
// its context, and gloo::Context::createUnboundBuffer asks that context for every buffer), and
// GroupWaits::abortAll interrupts all of them: a wait that returns "aborted" then throws
// gloo::IoException with the abort message, which Gloo's algorithms (they ignore the return
// value) pass up to their caller. Nothing here reaches past Gloo's public headers.
//
// Ownership: a WatchedDevice wraps a shared TCP device; every WatchedContext and WatchedBuffer
// holds the group's GroupWaits. Thread safety: GroupWaits is thread-safe; a buffer's
// abortWait* may be called from any thread (as in Gloo), everything else as in Gloo.
#pragma once

#include <gloo/transport/context.h>
#include <gloo/transport/device.h>
#include <gloo/transport/unbound_buffer.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace kolo::gloo_detail {

class WatchedBuffer;

// The live buffers of one group, and its abort.
class GroupWaits {
 public:
  // Every current and later wait, send and receive on this group's buffers throws
  // gloo::IoException(message). The first message wins. Thread-safe, idempotent.
  void abortAll(const std::string& message);
  bool aborted() const { return aborted_.load(std::memory_order_acquire); }
  // Throws gloo::IoException with the abort message once abortAll ran.
  void throwIfAborted() const;

  void add(WatchedBuffer* buffer);
  void remove(WatchedBuffer* buffer);

 private:
  std::mutex mu_;
  std::vector<WatchedBuffer*> live_;
  std::atomic<bool> aborted_{false};
  std::string message_;  // written once, before aborted_
};

// A TCP buffer behind Gloo's own interface; see the top of this file.
class WatchedBuffer final : public gloo::transport::UnboundBuffer {
 public:
  WatchedBuffer(std::unique_ptr<gloo::transport::UnboundBuffer> inner,
                std::shared_ptr<GroupWaits> waits);
  ~WatchedBuffer() override;

  using gloo::transport::UnboundBuffer::waitRecv;
  using gloo::transport::UnboundBuffer::waitSend;
  // As Gloo's: true when the operation completed, false when abortWait* interrupted the wait;
  // gloo::IoException when the operation failed, Gloo's timeout passed, or the group aborted.
  bool waitRecv(int* rank, std::chrono::milliseconds timeout) override;
  bool waitSend(int* rank, std::chrono::milliseconds timeout) override;
  void abortWaitRecv() override;
  void abortWaitSend() override;

  using gloo::transport::UnboundBuffer::recv;
  void send(int dstRank, uint64_t slot, size_t offset, size_t nbytes) override;
  void recv(int srcRank, uint64_t slot, size_t offset, size_t nbytes) override;
  void recv(std::vector<int> srcRanks, uint64_t slot, size_t offset, size_t nbytes) override;

 private:
  std::unique_ptr<gloo::transport::UnboundBuffer> inner_;
  std::shared_ptr<GroupWaits> waits_;
};

// The TCP transport context behind Gloo's interface: pairs are the TCP context's own, buffers
// are WatchedBuffers.
class WatchedContext final : public gloo::transport::Context {
 public:
  WatchedContext(std::shared_ptr<gloo::transport::Context> inner,
                 std::shared_ptr<GroupWaits> waits);

  std::unique_ptr<gloo::transport::Pair>& getPair(int rank) override;
  std::unique_ptr<gloo::transport::Pair>& createPair(int rank) override;
  std::unique_ptr<gloo::transport::UnboundBuffer> createUnboundBuffer(void* ptr,
                                                                      size_t size) override;

 private:
  std::shared_ptr<gloo::transport::Context> inner_;
  std::shared_ptr<GroupWaits> waits_;
};

// A TCP device whose contexts are WatchedContexts of one group (`timeout`: their pairs'
// connect timeout). The device itself (its listening socket and I/O thread) stays shared.
class WatchedDevice final : public gloo::transport::Device {
 public:
  WatchedDevice(std::shared_ptr<gloo::transport::Device> inner, std::shared_ptr<GroupWaits> waits,
                std::chrono::milliseconds timeout);

  std::string str() const override { return inner_->str(); }
  const std::string& getPCIBusID() const override { return inner_->getPCIBusID(); }
  int getInterfaceSpeed() const override { return inner_->getInterfaceSpeed(); }
  bool hasGPUDirect() const override { return inner_->hasGPUDirect(); }
  std::shared_ptr<gloo::transport::Context> createContext(int rank, int size) override;

 private:
  std::shared_ptr<gloo::transport::Device> inner_;
  std::shared_ptr<GroupWaits> waits_;
  std::chrono::milliseconds timeout_;
};

}  // namespace kolo::gloo_detail
