// SPDX-License-Identifier: Apache-2.0
#include "transport/abort_notes.h"

#include <algorithm>
#include <cstdlib>
#include <thread>

#include "transport/poll_support.h"

namespace kolo {
namespace {

constexpr char kNoteKey[] = "kolo/abort/";

struct Note {
  ErrorCode code = ErrorCode::kOk;
  int blamed = -1;
  std::string message;
};

bool parseNote(const std::vector<uint8_t>& bytes, Note* out) {
  std::string text(bytes.begin(), bytes.end());
  size_t a = text.find(':');
  size_t b = a == std::string::npos ? a : text.find(':', a + 1);
  if (b == std::string::npos) return false;
  int code = std::atoi(text.substr(0, a).c_str());
  if (code <= 0 || code > static_cast<int>(ErrorCode::kJoined)) return false;
  out->code = static_cast<ErrorCode>(code);
  out->blamed = std::atoi(text.substr(a + 1, b - a - 1).c_str());
  out->message = text.substr(b + 1);
  return true;
}

}  // namespace

AbortNotes::AbortNotes(std::shared_ptr<Store> store, int rank, std::vector<int> globalRanks)
    : store_(std::move(store)), rank_(rank), globalRanks_(std::move(globalRanks)) {}

std::string AbortNotes::describe(int groupRank) const {
  return describeGroupRank(groupRank, globalRanks_);
}

void AbortNotes::write(const Status& cause, int blamedRank) {
  if (!store_) return;
  const std::string text = std::to_string(static_cast<int>(cause.code())) + ":" +
                           std::to_string(blamedRank) + ":" + cause.message();
  store_->set(kNoteKey + std::to_string(rank_), std::vector<uint8_t>(text.begin(), text.end()))
      .ignore();
}

void AbortNotes::leave(const Status& cause) { write(cause, blamed_.load()); }

Status AbortNotes::relayed(int groupRank, const std::vector<uint8_t>& bytes, bool* settled) {
  if (settled != nullptr) *settled = true;
  Note note;
  // A note that blames this rank is from a peer waiting for us: we are alive, it says nothing.
  if (!parseNote(bytes, &note) || note.blamed == rank_) return Status::ok();
  // The blamed rank may itself be a survivor that timed out waiting for another (a provisional
  // note: at 5+ ranks rank 1 waits for 0, which waits for 3, which waits for the stopped 4).
  // Follow the blamed ranks' own notes: the first rank without one is the cause, as is one
  // whose note blames nobody (it failed on its own). A chain that comes back to a rank on it
  // is ranks waiting for each other with none of them lost: it says nothing.
  std::vector<int> chain = {rank_, groupRank};
  while (note.blamed >= 0 && note.blamed < static_cast<int>(globalRanks_.size()) &&
         std::find(chain.begin(), chain.end(), note.blamed) == chain.end()) {
    bool exists = false;
    std::vector<uint8_t> next;
    Note further;
    const std::string key = kNoteKey + std::to_string(note.blamed);
    if (!store_->check(key, &exists).isOk() || !exists ||
        !store_->get(key, &next, kNoteWait).isOk() || !parseNote(next, &further)) {
      // note.blamed left no note: it is the rank that was lost, or one about to time out too.
      if (settled != nullptr) *settled = false;
      break;
    }
    if (std::find(chain.begin(), chain.end(), further.blamed) != chain.end()) {
      return Status::ok();  // a cycle of waits
    }
    chain.push_back(note.blamed);
    note = further;
  }
  blamed_ = note.blamed >= 0 ? note.blamed : chain.back();
  // The note followed last was written by chain.back() (groupRank when none was followed).
  return Status(note.code, note.message + " (seen by " + describe(chain.back()) +
                               ", which then closed its connections)");
}

Status AbortNotes::explainLoss(int groupRank, const Status& direct) {
  blamed_ = groupRank;
  if (!store_ || groupRank < 0 || groupRank >= static_cast<int>(globalRanks_.size())) {
    return direct;
  }
  std::vector<uint8_t> note;
  if (!store_->get(kNoteKey + std::to_string(groupRank), &note, kNoteWait).isOk()) {
    return direct;  // no note: the peer itself died or closed its connections
  }
  Status s = relayed(groupRank, note);
  if (s.isOk()) blamed_ = groupRank;
  return s.isOk() ? direct : s;
}

Status AbortNotes::explainTimeout(const std::vector<int>& peers, const Status& direct,
                                  std::chrono::milliseconds grace) {
  blamed_ = peers.empty() ? -1 : peers.front();
  if (!store_ || peers.empty()) return direct;
  write(direct, blamed_.load());  // provisional: peers waiting for us learn whom we blame
  // A chain of notes that ends at a rank without one may still grow (that rank may be about to
  // time out too, and its note may close a cycle of waits): such an answer is kept while the
  // grace lasts and looked at again; one that ends at a note blaming nobody is final.
  const auto until = Clock::now() + grace;
  Status latest;
  int latestBlamed = peers.front();
  do {
    latest = Status::ok();
    for (int p : peers) {
      bool exists = false;
      if (!store_->check(kNoteKey + std::to_string(p), &exists).isOk()) return direct;
      std::vector<uint8_t> note;
      if (!exists || !store_->get(kNoteKey + std::to_string(p), &note, kNoteWait).isOk()) {
        continue;
      }
      bool settled = true;
      Status s = relayed(p, note, &settled);
      if (s.isOk()) continue;
      if (settled) return s;
      latest = s;
      latestBlamed = blamed_.load();
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  } while (Clock::now() < until);
  if (!latest.isOk()) {
    blamed_ = latestBlamed;
    return latest;
  }
  blamed_ = peers.front();
  return direct;
}

}  // namespace kolo
