// SPDX-License-Identifier: Apache-2.0
// Job-wide settings: the knobs every rank must hold the same value of, compared at init.
//
// Some knobs change which messages a collective or a control round sends: the algorithm of each
// collective, the allreduce crossovers and the ring segment, the fusion threshold (every rank
// plans the same batches from the agreed response list), the response cache's capacity (the
// control round's byte vector has a slot per entry), the piggyback bytes, the hierarchical
// allreduce, KOLO_SHM, the GPU path and the transport. Ranks that disagree on one of them do
// not fail cleanly later: they send messages of other sizes or to other peers, and fail with
// "a 28-byte message met a receive posted for 12 bytes" or a timeout that names no cause. So
// bootstrap compares them before the transport is built, at no extra cost: a digest of this
// rank's settings rides in the host-name exchange that init does anyway ("host/<rank>" in the
// store, or the host-name allgather without one). Only when digests differ do the ranks share
// their full settings (a second exchange) to name what differs.
//
// Left out on purpose (they may differ per rank): who and where a rank is (rank, sizes,
// KOLO_HOSTNAME, the rendezvous address and directory, KOLO_GLOO_IFACE, the round), timing
// (KOLO_START_TIMEOUT, KOLO_CYCLE_TIME, KOLO_TIMEOUT_SECONDS, KOLO_HEARTBEAT_SECONDS, the stall
// times: they pace this rank's own waits, not the messages), KOLO_CALLER_ROUNDS and
// KOLO_ASYNC_COMPLETION (which thread runs a round, when a CUDA handle completes here), the
// autotune knobs (only rank 0's are read; its choices reach every rank in a round's response
// list), the timeline and the log level.
//
// Thread safety: pure functions, except the exchanges, which block on the store or transport.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "base/config.h"
#include "base/status.h"
#include "rendezvous/store.h"
#include "transport/transport.h"

namespace kolo {

// One job-wide knob as this rank holds it: the KOLO_ variable and its canonical value ("" when
// unset and the default is computed later, as the allreduce crossovers' measured table).
struct JobSetting {
  std::string name;
  std::string value;
};

// The job-wide settings of `cfg`, in a fixed order. KOLO_CONTROLLER is the resolved transport
// (auto becomes mpi or gloo), so "auto" on one rank and "gloo" on another agree.
std::vector<JobSetting> jobSettings(const Config& cfg);

// "KOLO_X=value\n" per setting: the text ranks compare, and its digest (16 hex digits).
std::string settingsText(const std::vector<JobSetting>& settings);
std::string settingsDigest(const std::string& text);

// Compares every rank's settings text (textOfRank[r], r in [0, size)) with this rank's. Ok when
// all are equal; otherwise kInvalidArgument naming each variable that differs, the value here
// and the ranks that hold each other value: "KOLO_ALLREDUCE_ALGORITHM differs between ranks:
// 'auto' here (rank 0), 'recursive_doubling' on rank 1; job-wide settings must be equal on
// every rank". A text that does not parse is named as such.
Status compareSettings(int rank, const std::vector<std::string>& textOfRank);

// The host-name exchange with the settings check: publishes "<host>\0<digest>" under
// "host/<rank>" (exchangeHostnames), fills *hosts with every rank's host name, and fails with
// compareSettings' error when any digest differs (each rank then publishes its whole text
// under "settings/<rank>" and reads one rank of each other digest). Blocks until every rank
// published, at most `timeout`.
Status exchangeHostsAndSettings(Store& store, int rank, int size, const std::string& host,
                                const std::string& settings, std::chrono::milliseconds timeout,
                                std::vector<std::string>* hosts);

// The same without a store: one ring allgather over `t` of host name (truncated to 255 bytes,
// as ops::gatherStrings), digest and text length; a second one of the texts when digests
// differ. Collective over every rank of `t`.
Status exchangeHostsAndSettings(Transport& t, const std::string& host, const std::string& settings,
                                std::vector<std::string>* hosts);

}  // namespace kolo
