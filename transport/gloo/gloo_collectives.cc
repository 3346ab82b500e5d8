// SPDX-License-Identifier: Apache-2.0
// The Gloo transport's native collectives: Gloo's own algorithms (ring allreduce, ring
// allgatherv, one-to-all broadcast, pairwise alltoallv), each bounded by the transport timeout.
//
// Gloo's algorithms are typed only by element size; the reduction is a callback, so every kolo
// dtype (fp16/bf16 and bool included) reduces through kernels::reduce3 with kolo's exact
// semantics. Byte-moving collectives use 1-byte elements. Each call gets the next tag of a
// sequence every rank advances identically, so consecutive collectives never share slots.
// Gloo reports failures by exception and leaves the context unusable afterwards, so a failure
// aborts the transport; a timeout in Gloo also closes every connection, which the peers see.
// abort() from another thread interrupts a collective through the group's buffers
// (gloo_interpose.h): its current wait throws the abort message.
#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/alltoallv.h>
#include <gloo/broadcast.h>

#include <numeric>

#include "kernels/reduce_cpu.h"
#include "transport/gloo/gloo_internal.h"

namespace kolo::gloo_detail {

template <typename Fn>
Status GlooTransport::runNative(const char* what, Fn&& fn) {
  KOLO_RETURN_IF_ERROR(checkUsable());
  std::string text;
  try {
    fn();
    return Status::ok();
  } catch (const std::exception& e) {
    text = glooMessage(e);
  } catch (...) {
    text = "unknown exception";
  }
  if (state_->abort.isSet()) return state_->abort.cause();
  // Gloo's messages name the peer's address, not its rank: ask Gloo which connections failed.
  // Any of them names a rank that really failed: a peer that aborted before us left a note
  // saying why (explainLoss relays it), one that died left none.
  const bool timedOut = text.find("Timed out") != std::string::npos;
  int peer = -1;
  if (!timedOut) {
    const std::vector<int> broken = state_->brokenPeers();
    if (!broken.empty()) peer = broken.front();
  }
  Status s =
      timedOut
          ? Status(ErrorCode::kTimeout, std::string("gloo: native ") + what + " timed out after " +
                                            std::to_string(timeout().count()) + " ms: " + text)
          : Status(ErrorCode::kPeerLost,
                   std::string("gloo: native ") + what + " failed" +
                       (peer >= 0 ? ", lost " + state_->describe(peer) : std::string()) + ": " +
                       text);
  if (peer >= 0) s = state_->notes->explainLoss(peer, s);
  state_->abortWith(s);
  return s;
}

Status GlooTransport::allreduce(void* data, size_t count, DataType dtype, ReduceOp op) {
  KOLO_RETURN_IF_ERROR(checkUsable());
  KOLO_REQUIRE(isValid(dtype), kInvalidArgument, "gloo: invalid data type");
  KOLO_REQUIRE(op != ReduceOp::kBitAnd || !isFloatingPoint(dtype), kInvalidArgument,
               std::string("gloo: bitwise AND is not defined for ") + toString(dtype));
  if (count == 0) return Status::ok();
  gloo::AllreduceOptions opts(state_->context);
  switch (sizeOf(dtype)) {
    case 1:
      opts.setOutput(static_cast<uint8_t*>(data), count);
      break;
    case 2:
      opts.setOutput(static_cast<uint16_t*>(data), count);
      break;
    case 4:
      opts.setOutput(static_cast<uint32_t*>(data), count);
      break;
    case 8:
      opts.setOutput(static_cast<uint64_t*>(data), count);
      break;
    default:
      return Status(ErrorCode::kUnsupported, "gloo: unexpected element size");
  }
  opts.setReduceFunction([dtype, op](void* out, const void* a, const void* b, size_t n) {
    kernels::reduce3(out, a, b, n, dtype, op);
  });
  opts.setTag(nextTag());
  opts.setTimeout(timeout());
  return runNative("allreduce", [&] { gloo::allreduce(opts); });
}

Status GlooTransport::allgatherv(const void* send, size_t sendBytes, void* recv,
                                 const std::vector<size_t>& recvBytes) {
  KOLO_RETURN_IF_ERROR(checkUsable());
  KOLO_REQUIRE(recvBytes.size() == static_cast<size_t>(state_->size), kInvalidArgument,
               "gloo: allgatherv needs one byte count per rank");
  const size_t mine = recvBytes[static_cast<size_t>(state_->rank)];
  KOLO_REQUIRE(sendBytes == mine, kInvalidArgument,
               "gloo: allgatherv send size differs from this rank's receive count");
  size_t offset = 0;
  for (int r = 0; r < state_->rank; ++r) offset += recvBytes[static_cast<size_t>(r)];
  const size_t total = std::accumulate(recvBytes.begin(), recvBytes.end(), size_t{0});
  if (total == 0) return Status::ok();  // every rank sees the same counts and skips
  auto* out = static_cast<uint8_t*>(recv);
  gloo::AllgathervOptions opts(state_->context);
  opts.setOutput(out, recvBytes);
  // Without an input Gloo assumes this rank's block is in place already: the aliasing case.
  if (send != out + offset) {
    opts.setInput(static_cast<uint8_t*>(const_cast<void*>(send)), sendBytes);
  }
  opts.setTag(nextTag());
  opts.setTimeout(timeout());
  return runNative("allgatherv", [&] { gloo::allgatherv(opts); });
}

Status GlooTransport::broadcast(void* data, size_t bytes, int root) {
  KOLO_RETURN_IF_ERROR(checkUsable());
  KOLO_REQUIRE(root >= 0 && root < state_->size, kInvalidArgument,
               "gloo: broadcast root " + std::to_string(root) + " is outside the group");
  if (bytes == 0) return Status::ok();
  gloo::BroadcastOptions opts(state_->context);
  opts.setOutput(static_cast<uint8_t*>(data), bytes);
  opts.setRoot(root);
  opts.setTag(nextTag());
  opts.setTimeout(timeout());
  return runNative("broadcast", [&] { gloo::broadcast(opts); });
}

Status GlooTransport::alltoallv(const void* send, const std::vector<size_t>& sendBytes, void* recv,
                                const std::vector<size_t>& recvBytes) {
  KOLO_RETURN_IF_ERROR(checkUsable());
  const size_t n = static_cast<size_t>(state_->size);
  KOLO_REQUIRE(sendBytes.size() == n && recvBytes.size() == n, kInvalidArgument,
               "gloo: alltoallv needs one send and one receive count per rank");
  const size_t me = static_cast<size_t>(state_->rank);
  KOLO_REQUIRE(sendBytes[me] == recvBytes[me], kInvalidArgument,
               "gloo: alltoallv block for this rank differs between send and receive");
  // Gloo needs real addresses even for empty buffers.
  uint8_t placeholder = 0;
  auto* in = send != nullptr ? static_cast<uint8_t*>(const_cast<void*>(send)) : &placeholder;
  auto* out = recv != nullptr ? static_cast<uint8_t*>(recv) : &placeholder;
  gloo::AlltoallvOptions opts(state_->context);
  opts.setInput(in, std::vector<int64_t>(sendBytes.begin(), sendBytes.end()));
  opts.setOutput(out, std::vector<int64_t>(recvBytes.begin(), recvBytes.end()));
  opts.setTag(nextTag());
  opts.setTimeout(timeout());
  return runNative("alltoallv", [&] { gloo::alltoallv(opts); });
}

}  // namespace kolo::gloo_detail
