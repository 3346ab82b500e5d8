// SPDX-License-Identifier: Apache-2.0
#include "base/status.h"

namespace kolo {

const char* toString(ErrorCode code) {
  switch (code) {
    case ErrorCode::kOk: return "OK";
    case ErrorCode::kInvalidArgument: return "INVALID_ARGUMENT";
    case ErrorCode::kMismatch: return "MISMATCH";
    case ErrorCode::kDuplicateName: return "DUPLICATE_NAME";
    case ErrorCode::kTimeout: return "TIMEOUT";
    case ErrorCode::kPeerLost: return "PEER_LOST";
    case ErrorCode::kAborted: return "ABORTED";
    case ErrorCode::kShutdown: return "SHUTDOWN";
    case ErrorCode::kNotInitialized: return "NOT_INITIALIZED";
    case ErrorCode::kUnsupported: return "UNSUPPORTED";
    case ErrorCode::kStalled: return "STALLED";
    case ErrorCode::kInternal: return "INTERNAL";
    case ErrorCode::kIo: return "IO";
    case ErrorCode::kJoined: return "JOINED";
  }
  return "UNKNOWN";
}

std::string Status::toString() const {
  if (isOk()) return "OK";
  return std::string(kolo::toString(code_)) + ": " + message_;
}

}  // namespace kolo
