// SPDX-License-Identifier: Apache-2.0
#include "core/fusion_planner.h"

#include <algorithm>
#include <limits>
#include <set>

namespace kolo {
namespace {

constexpr uint64_t kOverflow = std::numeric_limits<uint64_t>::max();

// Multiplies sizes that came over the wire; any negative factor or overflow gives kOverflow, which
// no threshold admits.
uint64_t mul(uint64_t a, int64_t b) {
  if (a == kOverflow || b < 0) return kOverflow;
  uint64_t ub = static_cast<uint64_t>(b);
  if (ub != 0 && a > kOverflow / ub) return kOverflow;
  return a * ub;
}

uint64_t elements(const std::vector<int64_t>& shape, size_t from) {
  uint64_t n = 1;
  for (size_t i = from; i < shape.size(); ++i) n = mul(n, shape[i]);
  return n;
}

uint64_t rawBytes(const Response& r) {
  if (r.kind != Response::Kind::kOk || !isValid(r.dtype)) return 0;
  const int64_t width = static_cast<int64_t>(sizeOf(r.dtype));
  switch (r.type) {
    case OpType::kAllreduce:
    case OpType::kBroadcast:
    case OpType::kReducescatter:
      return mul(elements(r.shape, 0), width);
    case OpType::kAllgather: {
      uint64_t rows = 0;
      for (int64_t d : r.rankDim0) {
        if (d < 0 || rows > kOverflow - static_cast<uint64_t>(d)) return kOverflow;
        rows += static_cast<uint64_t>(d);
      }
      uint64_t perRow = mul(elements(r.shape, 1), width);
      if (rows > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return kOverflow;
      return mul(perRow, static_cast<int64_t>(rows));
    }
    default:
      return 0;
  }
}

bool fusible(const Response& r) {
  return r.kind == Response::Kind::kOk &&
         (r.type == OpType::kAllreduce || r.type == OpType::kAllgather) && rawBytes(r) != kOverflow;
}

}  // namespace

size_t payloadBytes(const Response& r) {
  uint64_t b = rawBytes(r);
  return b == kOverflow || b > std::numeric_limits<size_t>::max() ? 0 : static_cast<size_t>(b);
}

bool canFuse(const Response& a, const Response& b) {
  if (!fusible(a) || !fusible(b) || a.type != b.type || a.dtype != b.dtype ||
      a.device != b.device || a.processSet != b.processSet) {
    return false;
  }
  if (a.type == OpType::kAllgather) return true;
  return a.reduceOp == b.reduceOp && a.prescale == b.prescale && a.postscale == b.postscale &&
         a.joinedRanks == b.joinedRanks;
}

std::vector<FusionBatch> planFusion(const std::vector<Response>& responses, int64_t thresholdBytes,
                                    int /*worldSize*/, int64_t directBytes) {
  const size_t n = responses.size();
  std::vector<uint64_t> bytes(n);
  for (size_t i = 0; i < n; ++i) bytes[i] = rawBytes(responses[i]);
  const uint64_t threshold = thresholdBytes > 0 ? static_cast<uint64_t>(thresholdBytes) : 0;

  std::vector<bool> assigned(n, false);
  if (directBytes > 0) {
    // Tensors that are big on their own are taken out first; they run without copies.
    for (size_t i = 0; i < n; ++i) {
      if (fusible(responses[i]) && responses[i].group < 0 &&
          bytes[i] >= static_cast<uint64_t>(directBytes)) {
        assigned[i] = true;
      }
    }
  }
  std::vector<bool> direct = assigned;
  std::vector<FusionBatch> batches;
  for (size_t i = 0; i < n; ++i) {
    if (direct[i]) {
      FusionBatch alone;
      alone.indices = {i};
      alone.bytes = payloadBytes(responses[i]);
      batches.push_back(std::move(alone));
      continue;
    }
    if (assigned[i]) continue;
    assigned[i] = true;
    std::vector<size_t> members = {i};
    uint64_t total = bytes[i];
    const Response& head = responses[i];
    bool open = fusible(head) && threshold > 0 && total <= threshold;

    // The unassigned members of `group` from index `from` on that may join this batch.
    auto groupMembers = [&](int32_t group, size_t from, uint64_t* sum) {
      std::vector<size_t> found;
      *sum = 0;
      for (size_t k = from; k < n; ++k) {
        if (!assigned[k] && responses[k].group == group && canFuse(head, responses[k])) {
          // Stop as soon as the group cannot fit; the checks keep the sum from wrapping.
          if (bytes[k] > threshold || *sum > threshold - bytes[k]) {
            *sum = kOverflow;
            break;
          }
          found.push_back(k);
          *sum += bytes[k];
        }
      }
      return found;
    };
    auto take = [&](const std::vector<size_t>& ks, uint64_t sum) {
      for (size_t k : ks) {
        assigned[k] = true;
        members.push_back(k);
      }
      total += sum;
    };

    if (open && head.group >= 0) {
      uint64_t sum;
      auto mates = groupMembers(head.group, i + 1, &sum);
      if (sum != kOverflow && sum <= threshold - total) take(mates, sum);
    }
    std::set<int32_t> skippedGroups;  // groups that did not fit whole: keep them together later
    for (size_t j = i + 1; open && j < n; ++j) {
      const Response& r = responses[j];
      if (assigned[j] || !canFuse(head, r)) continue;
      int32_t g = r.group;
      if (g >= 0 && g != head.group) {
        if (skippedGroups.count(g)) continue;
        uint64_t sum;
        auto mates = groupMembers(g, j, &sum);
        if (sum != kOverflow && sum <= threshold - total) {
          take(mates, sum);
        } else {
          skippedGroups.insert(g);
        }
        continue;
      }
      if (bytes[j] <= threshold - total) take({j}, bytes[j]);
    }

    FusionBatch batch;
    std::sort(members.begin(), members.end());
    for (size_t k : members) batch.bytes += payloadBytes(responses[k]);
    batch.indices = std::move(members);
    batches.push_back(std::move(batch));
  }
  return batches;
}

}  // namespace kolo
