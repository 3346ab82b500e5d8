// SPDX-License-Identifier: Apache-2.0
// Binomial-tree gather of variable-length byte blocks: the coordinator's request gather.
//
// Why a tree: a gather straight to the root costs the root n-1 receives in a row, so a round
// whose requests are new grows linearly with the rank count (every rank's list passes through
// rank 0's one receive queue). In the binomial tree the ranks pair off in ceil(log2 n) steps:
// in step k a rank whose relative rank v has bit k set (and no lower bit) sends everything it
// has gathered so far to v - 2^k and is done; the others receive from v + 2^k (if it exists)
// and append. The root ends with all n blocks after ceil(log2 n) message latencies; the bytes
// are the same as the direct gather's in total, and each block crosses log2 n links at most.
//
// Wire format of what a subtree sends: a uint64 length message, then that many bytes holding
// records of [int32 rank][uint64 length][bytes], one per rank of the subtree; the integers are
// little-endian (base/little_endian.h). The root checks every record (rank in range, seen once,
// lengths inside the message) and names the sender of a malformed one. Any rank count, any
// root. Blocking, like every ops function: each wait has the transport's timeout and a lost peer
// is named by the transport's error.
#include <cstring>

#include "base/little_endian.h"
#include "ops/collectives.h"
#include "ops/ring_internal.h"

namespace kolo::ops {
namespace {

constexpr uint32_t kTag = internal::kTagGather;
constexpr uint64_t kMaxBytes = uint64_t{1} << 32;  // a gathered message larger is malformed

void appendRecord(std::vector<uint8_t>* out, int32_t rank, const uint8_t* data, uint64_t len) {
  const size_t at = out->size();
  out->resize(at + sizeof(rank) + sizeof(len) + len);
  storeLe(out->data() + at, static_cast<uint32_t>(rank), sizeof(rank));
  storeLe(out->data() + at + sizeof(rank), len, sizeof(len));
  if (len > 0) std::memcpy(out->data() + at + sizeof(rank) + sizeof(len), data, len);
}

Status malformed(int from, const std::string& what) {
  return Status(ErrorCode::kInternal,
                "gather: the blocks from rank " + std::to_string(from) + " are malformed: " + what);
}

// Splits the records of `bytes` (received from rank `from`) into all[rank].
Status unpack(const std::vector<uint8_t>& bytes, int from, int n,
              std::vector<std::vector<uint8_t>>* all, std::vector<bool>* seen) {
  size_t at = 0;
  while (at < bytes.size()) {
    int32_t rank = 0;
    uint64_t len = 0;
    if (bytes.size() - at < sizeof(rank) + sizeof(len)) return malformed(from, "cut header");
    rank = static_cast<int32_t>(static_cast<uint32_t>(loadLe(bytes.data() + at, sizeof(rank))));
    len = loadLe(bytes.data() + at + sizeof(rank), sizeof(len));
    at += sizeof(rank) + sizeof(len);
    if (rank < 0 || rank >= n) return malformed(from, "rank " + std::to_string(rank));
    if ((*seen)[static_cast<size_t>(rank)]) {
      return malformed(from, "rank " + std::to_string(rank) + " twice");
    }
    if (len > bytes.size() - at) return malformed(from, "a record longer than the message");
    (*seen)[static_cast<size_t>(rank)] = true;
    (*all)[static_cast<size_t>(rank)].assign(bytes.begin() + static_cast<std::ptrdiff_t>(at),
                                             bytes.begin() + static_cast<std::ptrdiff_t>(at + len));
    at += len;
  }
  return Status::ok();
}

}  // namespace

Status binomialGatherv(Transport& t, const std::vector<uint8_t>& mine, int root,
                       std::vector<std::vector<uint8_t>>* all) {
  const int n = t.size();
  KOLO_REQUIRE(root >= 0 && root < n, kInvalidArgument,
               "gather: root " + std::to_string(root) + " outside group of " + std::to_string(n));
  KOLO_REQUIRE(t.rank() != root || all != nullptr, kInvalidArgument, "gather: null output");
  const int v = (t.rank() - root + n) % n;
  auto real = [&](int rel) { return (rel + root) % n; };
  std::vector<uint8_t> gathered;
  appendRecord(&gathered, t.rank(), mine.data(), mine.size());
  for (int mask = 1; mask < n; mask <<= 1) {
    if (v & mask) {
      uint8_t len[8];
      storeLe(len, gathered.size(), sizeof(len));
      return t.exchange({sendOp(real(v - mask), kTag, len, sizeof(len)),
                         sendOp(real(v - mask), kTag, gathered.data(), gathered.size())});
    }
    if (v + mask >= n) continue;
    const int child = real(v + mask);
    uint8_t lenBytes[8];
    KOLO_RETURN_IF_ERROR(t.exchange({recvOp(child, kTag, lenBytes, sizeof(lenBytes))}));
    const uint64_t len = loadLe(lenBytes, sizeof(lenBytes));
    if (len > kMaxBytes) return malformed(child, "announced " + std::to_string(len) + " bytes");
    const size_t at = gathered.size();
    gathered.resize(at + len);
    KOLO_RETURN_IF_ERROR(t.exchange({recvOp(child, kTag, gathered.data() + at, len)}));
  }
  // Only the root (v == 0) gets here: every other rank sent and returned in the loop.
  all->assign(static_cast<size_t>(n), {});
  std::vector<bool> seen(static_cast<size_t>(n), false);
  KOLO_RETURN_IF_ERROR(unpack(gathered, t.rank(), n, all, &seen));
  for (int r = 0; r < n; ++r) {
    if (!seen[static_cast<size_t>(r)]) return malformed(r, "its own block is missing");
  }
  return Status::ok();
}

}  // namespace kolo::ops
