// SPDX-License-Identifier: Apache-2.0
// Status: the one error type of kolo. Every fallible function returns a [[nodiscard]] Status;
// ErrorCode maps 1:1 to the C API's kolo_status_t values and to Python exceptions.
#pragma once

#include <string>
#include <utility>

namespace kolo {

// Values are part of the C ABI (bindings/c/kolo.h mirrors them); append only.
enum class ErrorCode : int {
  kOk = 0,
  kInvalidArgument = 1,  // bad input detected on the caller's thread
  kMismatch = 2,         // ranks disagree about an op (dtype, shape, op, root, ...)
  kDuplicateName = 3,    // an op with this name is already in flight on this rank
  kTimeout = 4,          // a wait passed its deadline
  kPeerLost = 5,         // a peer died, closed its connection or stopped answering
  kAborted = 6,          // the runtime aborted after an earlier failure (message has the cause)
  kShutdown = 7,         // the runtime shut down before the op completed
  kNotInitialized = 8,   // called before init or after shutdown
  kUnsupported = 9,      // not built in / not available for this transport or device
  kStalled = 10,         // failed by the stall inspector
  kInternal = 11,        // a bug in kolo
  kIo = 12,              // file or socket error
  kJoined = 13,          // op not allowed while a rank has joined
};

const char* toString(ErrorCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(ErrorCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return Status(); }

  bool isOk() const { return code_ == ErrorCode::kOk; }
  explicit operator bool() const { return isOk(); }
  ErrorCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "PEER_LOST: rank 2 closed its connection" (just "OK" when ok).
  std::string toString() const;
  // Marks a Status as deliberately ignored.
  void ignore() const {}

 private:
  ErrorCode code_ = ErrorCode::kOk;
  std::string message_;
};

}  // namespace kolo

// The check macros (at most four, see DESIGN.md).
#define KOLO_RETURN_IF_ERROR(expr)              \
  do {                                          \
    ::kolo::Status kolo_status_ = (expr);       \
    if (!kolo_status_.isOk()) return kolo_status_; \
  } while (0)

// Returns Status(code, message) from the enclosing function when cond is false.
#define KOLO_REQUIRE(cond, code, message)                          \
  do {                                                             \
    if (!(cond)) return ::kolo::Status(::kolo::ErrorCode::code, (message)); \
  } while (0)
