// SPDX-License-Identifier: Apache-2.0
// Job-wide settings (job_settings.h): the list, its text and digest, the comparison that names
// what differs, and the two host-name exchanges that carry the digest.
#include "bootstrap/job_settings.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <utility>

#include "base/clock.h"
#include "base/little_endian.h"
#include "bootstrap/registry.h"
#include "bootstrap/topology.h"
#include "ops/collectives.h"

namespace kolo {
namespace {

constexpr size_t kDigestChars = 16;
// Rank numbers one message lists for a value before it says how many more hold it.
constexpr size_t kRanksNamed = 8;

std::string bytesOrUnset(size_t v) { return v == 0 ? std::string() : std::to_string(v); }

std::string shown(const std::string& value) {
  return value.empty() ? std::string("unset") : "'" + value + "'";
}

// "rank 1", "ranks 1, 3", "ranks 0, 1, ..., 7 and 5 more"
std::string rankList(const std::vector<int>& ranks) {
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size() && i < kRanksNamed; ++i) {
    out += (i == 0 ? "" : ", ") + std::to_string(ranks[i]);
  }
  if (ranks.size() > kRanksNamed) {
    out += " and " + std::to_string(ranks.size() - kRanksNamed) + " more";
  }
  return out;
}

// "KOLO_X=v\n"... back to settings; false when a line has no '='.
bool parseText(const std::string& text, std::vector<JobSetting>* out) {
  out->clear();
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(pos, end - pos);
    const size_t eq = line.find('=');
    if (eq == std::string::npos || eq == 0) return false;
    out->push_back({line.substr(0, eq), line.substr(eq + 1)});
    pos = end + 1;
  }
  return true;
}

std::string joinNames(const std::vector<JobSetting>& settings) {
  std::string out;
  for (const auto& s : settings) out += (out.empty() ? "" : ",") + s.name;
  return out;
}

// Ranks whose digest differs from ours share their whole text; textOfRank gets ours for the
// others (equal digest, equal text). `fetch(r)` reads rank r's text.
template <typename Fetch>
Status compareDigests(int rank, const std::string& mine, const std::vector<std::string>& digests,
                      Fetch fetch) {
  const std::string myDigest = settingsDigest(mine);
  std::map<std::string, std::string> textOfDigest{{myDigest, mine}};
  std::vector<std::string> texts(digests.size());
  for (size_t r = 0; r < digests.size(); ++r) {
    auto it = textOfDigest.find(digests[r]);
    if (it == textOfDigest.end()) {
      std::string text;
      KOLO_RETURN_IF_ERROR(fetch(static_cast<int>(r), &text));
      it = textOfDigest.emplace(digests[r], std::move(text)).first;
    }
    texts[r] = it->second;
  }
  Status s = compareSettings(rank, texts);
  if (s.isOk()) {
    return Status(ErrorCode::kInternal,
                  "job-wide settings: the digests differ between ranks but the texts agree");
  }
  return s;
}

}  // namespace

std::vector<JobSetting> jobSettings(const Config& cfg) {
  const ops::AlgorithmConfig& a = cfg.algorithms;
  return {
      {"KOLO_ALLREDUCE_ALGORITHM", ops::toString(a.allreduce)},
      {"KOLO_ALLGATHER_ALGORITHM", ops::toString(a.allgather)},
      {"KOLO_BROADCAST_ALGORITHM", ops::toString(a.broadcast)},
      {"KOLO_ALLTOALL_ALGORITHM", ops::toString(a.alltoall)},
      {"KOLO_REDUCESCATTER_ALGORITHM", ops::toString(a.reducescatter)},
      {"KOLO_ALLREDUCE_HD_MIN_BYTES", bytesOrUnset(a.allreduceCrossovers.hdMinBytes)},
      {"KOLO_ALLREDUCE_RING_MIN_BYTES", bytesOrUnset(a.allreduceCrossovers.ringMinBytes)},
      {"KOLO_SEGMENT_BYTES", std::to_string(a.segmentBytes)},
      {"KOLO_HIERARCHICAL_ALLREDUCE", ops::toString(a.hierarchicalAllreduce)},
      {"KOLO_FUSION_THRESHOLD", std::to_string(cfg.fusionThresholdBytes)},
      {"KOLO_FUSION_DIRECT_BYTES", std::to_string(cfg.fusionDirectBytes)},
      {"KOLO_CACHE_CAPACITY", std::to_string(cfg.cacheCapacity)},
      {"KOLO_CONTROL_PIGGYBACK_BYTES", std::to_string(cfg.controlPiggybackBytes)},
      {"KOLO_SHM", toString(cfg.shm)},
      {"KOLO_GPU_OPERATIONS", toString(cfg.gpuOperations)},
      {"KOLO_CONTROLLER", toString(resolveTransportKind(cfg))},
  };
}

std::string settingsText(const std::vector<JobSetting>& settings) {
  std::string out;
  for (const auto& s : settings) out += s.name + "=" + s.value + "\n";
  return out;
}

std::string settingsDigest(const std::string& text) {
  uint64_t h = 14695981039346656037ull;  // FNV-1a, 64 bits
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  static const char kHex[] = "0123456789abcdef";
  std::string out(kDigestChars, '0');
  for (size_t i = 0; i < kDigestChars; ++i) out[kDigestChars - 1 - i] = kHex[(h >> (4 * i)) & 15];
  return out;
}

Status compareSettings(int rank, const std::vector<std::string>& textOfRank) {
  KOLO_REQUIRE(rank >= 0 && static_cast<size_t>(rank) < textOfRank.size(), kInvalidArgument,
               "compareSettings: rank " + std::to_string(rank) + " outside [0, " +
                   std::to_string(textOfRank.size()) + ")");
  std::vector<JobSetting> mine;
  KOLO_REQUIRE(parseText(textOfRank[static_cast<size_t>(rank)], &mine), kInternal,
               "compareSettings: this rank's settings text does not parse");
  std::vector<std::vector<JobSetting>> all(textOfRank.size());
  std::vector<int> otherList;  // ranks whose list of variables is not ours (another version)
  for (size_t r = 0; r < textOfRank.size(); ++r) {
    if (!parseText(textOfRank[r], &all[r]) || joinNames(all[r]) != joinNames(mine)) {
      otherList.push_back(static_cast<int>(r));
    }
  }
  std::string message;
  const std::string here = " here (rank " + std::to_string(rank) + ")";
  for (size_t i = 0; i < mine.size(); ++i) {
    // Each other value, with its ranks, in the order of its first rank.
    std::vector<std::pair<std::string, std::vector<int>>> others;
    for (size_t r = 0; r < all.size(); ++r) {
      if (std::find(otherList.begin(), otherList.end(), static_cast<int>(r)) != otherList.end()) {
        continue;
      }
      const std::string& v = all[r][i].value;
      if (v == mine[i].value) continue;
      auto it =
          std::find_if(others.begin(), others.end(), [&](const auto& o) { return o.first == v; });
      if (it == others.end()) it = others.insert(others.end(), {v, {}});
      it->second.push_back(static_cast<int>(r));
    }
    if (others.empty()) continue;
    message += (message.empty() ? "" : "; ") + mine[i].name +
               " differs between ranks: " + shown(mine[i].value) + here;
    for (const auto& [value, ranks] : others) {
      message += ", " + shown(value) + " on " + rankList(ranks);
    }
  }
  if (!otherList.empty()) {
    message += (message.empty() ? "" : "; ") + std::string("the job-wide settings of ") +
               rankList(otherList) + " name other variables than this rank's (rank " +
               std::to_string(rank) + "): every rank must run the same kolo";
  }
  if (message.empty()) return Status::ok();
  return Status(ErrorCode::kInvalidArgument,
                message + "; job-wide settings must be equal on every rank");
}

Status exchangeHostsAndSettings(Store& store, int rank, int size, const std::string& host,
                                const std::string& settings, std::chrono::milliseconds timeout,
                                std::vector<std::string>* hosts) {
  KOLO_REQUIRE(hosts != nullptr, kInvalidArgument, "exchangeHostsAndSettings: hosts is null");
  const Deadline deadline = deadlineAfter(timeout);
  const std::string digest = settingsDigest(settings);
  std::string published = host;
  published.push_back('\0');  // a host name never holds one
  published += digest;
  std::vector<std::string> values;
  KOLO_RETURN_IF_ERROR(exchangeHostnames(store, rank, size, published, timeout, &values));
  std::vector<std::string> names(values.size()), digests(values.size());
  bool equal = true;
  for (size_t r = 0; r < values.size(); ++r) {
    const size_t nul = values[r].find('\0');
    names[r] = values[r].substr(0, nul);
    if (nul == std::string::npos) {
      return Status(ErrorCode::kInvalidArgument,
                    "rank " + std::to_string(r) + " published its host name without a digest of " +
                        "its job-wide settings: every rank must run the same kolo");
    }
    digests[r] = values[r].substr(nul + 1);
    equal = equal && digests[r] == digest;
  }
  if (!equal) {
    KOLO_RETURN_IF_ERROR(store.set("settings/" + std::to_string(rank),
                                   std::vector<uint8_t>(settings.begin(), settings.end())));
    return compareDigests(rank, settings, digests, [&](int r, std::string* text) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      std::vector<uint8_t> v;
      KOLO_RETURN_IF_ERROR(
          store.get("settings/" + std::to_string(r), &v, std::max(left, left.zero())));
      text->assign(v.begin(), v.end());
      return Status::ok();
    });
  }
  *hosts = std::move(names);
  return Status::ok();
}

Status exchangeHostsAndSettings(Transport& t, const std::string& host, const std::string& settings,
                                std::vector<std::string>* hosts) {
  KOLO_REQUIRE(hosts != nullptr, kInvalidArgument, "exchangeHostsAndSettings: hosts is null");
  constexpr size_t kHost = 256, kLength = 8, kSlot = kHost + kDigestChars + kLength;
  const size_t n = static_cast<size_t>(t.size());
  ops::AlgorithmConfig ring;  // fixed here: the settings that choose one are being compared
  ring.allgather = ops::Algorithm::kRing;
  std::vector<uint8_t> send(kSlot, 0), recv(kSlot * n, 0);
  std::memcpy(send.data(), host.data(), std::min(host.size(), kHost - 1));
  const std::string digest = settingsDigest(settings);
  std::memcpy(send.data() + kHost, digest.data(), kDigestChars);
  storeLe(send.data() + kHost + kDigestChars, settings.size(), static_cast<int>(kLength));
  KOLO_RETURN_IF_ERROR(
      ops::allgatherv(t, ring, send.data(), kSlot, recv.data(), std::vector<size_t>(n, kSlot)));
  std::vector<std::string> names, digests;
  size_t longest = 0;
  for (size_t r = 0; r < n; ++r) {
    const char* slot = reinterpret_cast<const char*>(recv.data()) + r * kSlot;
    names.emplace_back(slot, strnlen(slot, kHost));
    digests.emplace_back(slot + kHost, kDigestChars);
    longest = std::max<size_t>(
        longest, loadLe(recv.data() + r * kSlot + kHost + kDigestChars, static_cast<int>(kLength)));
  }
  if (std::all_of(digests.begin(), digests.end(), [&](const auto& d) { return d == digest; })) {
    *hosts = std::move(names);
    return Status::ok();
  }
  // Every rank saw the same digests, so every rank takes part in this second allgather.
  std::vector<uint8_t> textSend(longest, 0), textRecv(longest * n, 0);
  std::memcpy(textSend.data(), settings.data(), settings.size());
  KOLO_RETURN_IF_ERROR(ops::allgatherv(t, ring, textSend.data(), longest, textRecv.data(),
                                       std::vector<size_t>(n, longest)));
  return compareDigests(t.rank(), settings, digests, [&](int r, std::string* text) {
    const char* slot = reinterpret_cast<const char*>(textRecv.data()) + r * longest;
    text->assign(slot, strnlen(slot, longest));
    return Status::ok();
  });
}

}  // namespace kolo
