// SPDX-License-Identifier: Apache-2.0
// The MPI transport's abort channel (contract in mpi_internal.h).
//
// Why it exists: the socket transports tell their peers of an abort by closing the connections
// (and leave a note naming the cause, transport/abort_notes.h); MPI has nothing like a closed
// connection. A rank waiting on a peer that aborted learnt of it only at its own deadline, and a
// rank outside a process set whose members were busy waits up to the stall shutdown (30 minutes
// by default: core/coordinator.cc raises its deadline so a long sub-set batch is not mistaken
// for a failure). So an aborting rank now sends one short message, "code, text", to every
// other rank on a communicator of its own (an MPI_Comm_idup of the world, so it never matches
// kolo's or the program's messages), and every rank keeps one receive from MPI_ANY_SOURCE
// posted there, which each of its waits tests.
//
// Costs: one MPI_Test per poll of a wait (the receive matches nothing while the job is
// healthy); an abort sends size - 1 small messages (eager: they complete without the receiver),
// and only the rank that aborted first sends them (a rank aborting because it heard of another
// rank's abort stays quiet).
#include <algorithm>
#include <cstring>
#include <string>

#include "transport/mpi/mpi_internal.h"

namespace kolo::mpi_detail {
namespace {

// The note: a 4-byte error code, then the text (truncated to fit).
constexpr int kNoteBytes = 1024;

}  // namespace

Status AbortChannel::create(MPI_Comm comm, std::shared_ptr<AbortChannel>* out) {
  auto channel = std::shared_ptr<AbortChannel>(new AbortChannel());
  channel->comm_ = comm;
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(comm, &channel->rank_);
  MPI_Comm_size(comm, &channel->size_);
  channel->note_.assign(kNoteBytes, '\0');
  const int rc = MPI_Irecv(channel->note_.data(), kNoteBytes, MPI_BYTE, MPI_ANY_SOURCE, 0, comm,
                           &channel->recv_);
  if (rc != MPI_SUCCESS) return mpiError(rc, "MPI_Irecv (abort channel)");
  *out = std::move(channel);
  return Status::ok();
}

AbortChannel::~AbortChannel() {
  if (comm_ == MPI_COMM_NULL || mpiFinalized()) return;
  if (recv_ != MPI_REQUEST_NULL) {
    MPI_Cancel(&recv_);
    MPI_Wait(&recv_, MPI_STATUS_IGNORE);  // a cancelled receive completes locally
  }
  for (MPI_Request& r : sends_) {
    if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);  // eager: already on its way
  }
  MPI_Comm_free(&comm_);
}

void AbortChannel::announce(const Status& cause) {
  std::lock_guard<std::mutex> lock(mu_);
  if (announced_ || heard_.load() || comm_ == MPI_COMM_NULL || mpiFinalized()) return;
  announced_ = true;
  const std::string text = cause.message();
  sent_.assign(kNoteBytes, '\0');
  const auto code = static_cast<int32_t>(cause.code());
  std::memcpy(sent_.data(), &code, sizeof code);
  const size_t len = std::min(text.size(), static_cast<size_t>(kNoteBytes) - sizeof code);
  std::memcpy(sent_.data() + sizeof code, text.data(), len);
  const int bytes = static_cast<int>(sizeof code + len);
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    MPI_Request r = MPI_REQUEST_NULL;
    if (MPI_Isend(sent_.data(), bytes, MPI_BYTE, peer, 0, comm_, &r) == MPI_SUCCESS) {
      sends_.push_back(r);
    }
  }
}

bool AbortChannel::heard(Status* cause) {
  if (heard_.load()) {
    std::lock_guard<std::mutex> lock(mu_);
    *cause = heardCause_;
    return true;
  }
  std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
  if (!lock.owns_lock()) return false;  // another thread is testing or announcing
  if (recv_ == MPI_REQUEST_NULL || mpiFinalized()) return false;
  int done = 0;
  MPI_Status st;
  if (MPI_Test(&recv_, &done, &st) != MPI_SUCCESS || !done) return false;
  int bytes = 0;
  MPI_Get_count(&st, MPI_BYTE, &bytes);
  int32_t code = static_cast<int32_t>(ErrorCode::kAborted);
  if (bytes >= static_cast<int>(sizeof code)) std::memcpy(&code, note_.data(), sizeof code);
  const std::string text(note_.data() + sizeof code,
                         bytes > static_cast<int>(sizeof code) ? bytes - sizeof code : 0);
  const int source = st.MPI_SOURCE;
  const bool known = code > 0 && code <= static_cast<int32_t>(ErrorCode::kJoined);
  heardCause_ =
      Status(known ? static_cast<ErrorCode>(code) : ErrorCode::kAborted,
             "mpi: global rank " + std::to_string(source) + " aborted its runtime: " + text);
  heard_.store(true);
  *cause = heardCause_;
  return true;
}

}  // namespace kolo::mpi_detail
