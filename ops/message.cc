// SPDX-License-Identifier: Apache-2.0
#include "ops/message.h"

#include <cmath>

#include <cstring>

#include "base/little_endian.h"

namespace kolo {

std::string opLabel(OpType type, const OpKey& key) {
  std::string s = std::string(toString(type)) + " '" + key.name + "'";
  if (key.processSet != 0) s += " in process set " + std::to_string(key.processSet);
  return s;
}

std::string displayName(const OpKey& key) {
  if (key.processSet == 0) return key.name;
  return key.name + "@ps" + std::to_string(key.processSet);
}

namespace {

// Magic numbers as they appear in the byte stream: "KOLQ" / "KOLR". Different magics make a
// response list fed to the request decoder (or vice versa) fail at byte 0 instead of parsing as
// nonsense.
constexpr uint8_t kRequestMagic[4] = {'K', 'O', 'L', 'Q'};
constexpr uint8_t kResponseMagic[4] = {'K', 'O', 'L', 'R'};
constexpr uint8_t kVersion = 3;  // 2: Request.refusal; 3: TuningParams.hierarchicalAllreduce

// Smallest possible encodings (every vector and string empty). Used to cap list counts by the
// remaining bytes before reserving memory.
constexpr size_t kMinRequestBytes = 13 * 4 + 2 * 8;   // 13 int32-sized fields + 2 doubles
constexpr size_t kMinResponseBytes = 16 * 4 + 2 * 8;  // 16 int32-sized fields + 2 doubles

// Little-endian on any host (base/little_endian.h).
class Writer {
 public:
  explicit Writer(size_t reserve) { buf_.reserve(reserve); }
  void u8(uint8_t v) { buf_.push_back(v); }
  void u32(uint32_t v) { appendLe(&buf_, v, 4); }
  void u64(uint64_t v) { appendLe(&buf_, v, 8); }
  void i32(int32_t v) { u32(static_cast<uint32_t>(v)); }
  void i64(int64_t v) { u64(static_cast<uint64_t>(v)); }
  void f64(double v) {
    uint64_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    u64(bits);
  }
  void boolean(bool v) { u8(v ? 1 : 0); }
  void str(const std::string& s) {
    u32(static_cast<uint32_t>(s.size()));
    buf_.insert(buf_.end(), s.begin(), s.end());
  }
  void vec64(const std::vector<int64_t>& v) {
    u32(static_cast<uint32_t>(v.size()));
    for (int64_t x : v) i64(x);
  }
  void vec32(const std::vector<int32_t>& v) {
    u32(static_cast<uint32_t>(v.size()));
    for (int32_t x : v) i32(x);
  }
  std::vector<uint8_t> take() { return std::move(buf_); }

 private:
  std::vector<uint8_t> buf_;
};

// Every read checks the remaining length first; the first failure records what was being read
// and where, and all later reads fail too, so callers can check once per record.
class Reader {
 public:
  Reader(const uint8_t* data, size_t n) : data_(data), n_(n) {}

  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }
  size_t remaining() const { return n_ - pos_; }
  size_t pos() const { return pos_; }
  void fail(const std::string& what) {
    if (ok()) error_ = what + " at byte " + std::to_string(pos_);
  }

  bool bytes(size_t count, const char* what, const uint8_t** out) {
    if (!ok()) return false;
    if (count > remaining()) {
      fail(std::string("truncated reading ") + what + " (" + std::to_string(count) +
           " bytes needed, " + std::to_string(remaining()) + " left)");
      return false;
    }
    *out = data_ + pos_;
    pos_ += count;
    return true;
  }
  uint32_t u32(const char* what) {
    const uint8_t* p;
    if (!bytes(4, what, &p)) return 0;
    return static_cast<uint32_t>(loadLe(p, 4));
  }
  uint64_t u64(const char* what) {
    const uint8_t* p;
    if (!bytes(8, what, &p)) return 0;
    return loadLe(p, 8);
  }
  int32_t i32(const char* what) { return static_cast<int32_t>(u32(what)); }
  int64_t i64(const char* what) { return static_cast<int64_t>(u64(what)); }
  double f64(const char* what) {
    uint64_t bits = u64(what);
    double v;
    std::memcpy(&v, &bits, sizeof v);
    return v;
  }
  bool boolean(const char* what) {
    const uint8_t* p;
    if (!bytes(1, what, &p)) return false;
    if (*p > 1) fail(std::string("bad bool ") + std::to_string(*p) + " for " + what);
    return *p == 1;
  }
  // A count of elements each at least elemBytes long; must fit in what remains.
  uint32_t count(size_t elemBytes, const char* what) {
    uint32_t c = u32(what);
    if (ok() && static_cast<uint64_t>(c) * elemBytes > remaining()) {
      fail(std::string("count ") + std::to_string(c) + " for " + what + " exceeds the " +
           std::to_string(remaining()) + " bytes left");
      return 0;
    }
    return ok() ? c : 0;
  }
  std::string str(const char* what) {
    uint32_t len = count(1, what);
    const uint8_t* p;
    if (!bytes(len, what, &p)) return {};
    return std::string(reinterpret_cast<const char*>(p), len);
  }
  std::vector<int64_t> vec64(const char* what) {
    uint32_t c = count(8, what);
    std::vector<int64_t> v;
    v.reserve(c);
    for (uint32_t i = 0; i < c && ok(); ++i) v.push_back(i64(what));
    return v;
  }
  std::vector<int32_t> vec32(const char* what) {
    uint32_t c = count(4, what);
    std::vector<int32_t> v;
    v.reserve(c);
    for (uint32_t i = 0; i < c && ok(); ++i) v.push_back(i32(what));
    return v;
  }

  // Enums: read the raw int32 and accept only listed values.
  OpType opType() {
    int32_t v = i32("op type");
    if (ok() && (v < 0 || v > static_cast<int32_t>(kLastOpType))) {
      fail("bad op type " + std::to_string(v));
    }
    return ok() ? static_cast<OpType>(v) : OpType::kAllreduce;
  }
  DataType dataType() {
    int32_t v = i32("dtype");
    if (ok() && !isValid(static_cast<DataType>(v))) fail("bad dtype " + std::to_string(v));
    return ok() ? static_cast<DataType>(v) : DataType::kFloat32;
  }
  ReduceOp reduceOp() {
    int32_t v = i32("reduce op");
    bool valid =
        isValidUserOp(static_cast<ReduceOp>(v)) || v == static_cast<int32_t>(ReduceOp::kBitAnd);
    if (ok() && !valid) fail("bad reduce op " + std::to_string(v));
    return ok() ? static_cast<ReduceOp>(v) : ReduceOp::kSum;
  }
  Response::Kind kind() {
    int32_t v = i32("response kind");
    if (ok() && v != 0 && v != 1) fail("bad response kind " + std::to_string(v));
    return ok() ? static_cast<Response::Kind>(v) : Response::Kind::kOk;
  }
  ErrorCode errorCode() {
    int32_t v = i32("error code");
    if (ok() && (v < 0 || v > static_cast<int32_t>(ErrorCode::kJoined))) {
      fail("bad error code " + std::to_string(v));
    }
    return ok() ? static_cast<ErrorCode>(v) : ErrorCode::kOk;
  }
  void header(const uint8_t (&magic)[4]) {
    const uint8_t* p;
    if (!bytes(4, "magic", &p)) return;
    if (std::memcmp(p, magic, 4) != 0) {
      pos_ = 0;
      fail("bad magic");
      return;
    }
    if (!bytes(1, "version", &p)) return;
    if (*p != kVersion) fail("unsupported version " + std::to_string(*p));
  }
  void end() {
    if (ok() && remaining() != 0) fail(std::to_string(remaining()) + " trailing bytes");
  }

 private:
  const uint8_t* data_;
  size_t n_;
  size_t pos_ = 0;
  std::string error_;
};

// The OpSpec a Request and its Response share, in the same wire order in both messages.
void writeOpFields(Writer& w, const OpSpec& r) {
  w.i32(static_cast<int32_t>(r.type));
  w.str(r.name);
  w.i32(static_cast<int32_t>(r.dtype));
  w.vec64(r.shape);
  w.i32(static_cast<int32_t>(r.reduceOp));
  w.f64(r.prescale);
  w.f64(r.postscale);
  w.i32(r.root);
  w.i32(r.device);
  w.i32(r.processSet);
}

void readOpFields(Reader& rd, OpSpec* op) {
  OpSpec& r = *op;
  r.type = rd.opType();
  r.name = rd.str("name");
  r.dtype = rd.dataType();
  r.shape = rd.vec64("shape");
  r.reduceOp = rd.reduceOp();
  r.prescale = rd.f64("prescale");
  r.postscale = rd.f64("postscale");
  r.root = rd.i32("root");
  r.device = rd.i32("device");
  r.processSet = rd.i32("process set");
}

void writeRequest(Writer& w, const Request& r) {
  w.i32(r.rank);
  writeOpFields(w, r);
  w.vec64(r.splits);
  w.i32(r.groupId);
  w.i32(r.groupSize);
  w.str(r.refusal);
}

Request readRequest(Reader& rd) {
  Request r;
  r.rank = rd.i32("request rank");
  readOpFields(rd, &r);
  r.splits = rd.vec64("splits");
  r.groupId = rd.i32("group id");
  r.groupSize = rd.i32("group size");
  r.refusal = rd.str("refusal");
  return r;
}

void writeResponse(Writer& w, const Response& r) {
  w.i32(static_cast<int32_t>(r.kind));
  writeOpFields(w, r);
  w.vec64(r.rankDim0);
  w.vec64(r.splitMatrix);
  w.vec32(r.joinedRanks);
  w.i32(r.lastJoinedRank);
  w.i32(static_cast<int32_t>(r.errorCode));
  w.str(r.error);
  w.i32(r.group);
}

Response readResponse(Reader& rd) {
  Response r;
  r.kind = rd.kind();
  readOpFields(rd, &r);
  r.rankDim0 = rd.vec64("rank dim0");
  r.splitMatrix = rd.vec64("split matrix");
  r.joinedRanks = rd.vec32("joined ranks");
  r.lastJoinedRank = rd.i32("last joined rank");
  r.errorCode = rd.errorCode();
  r.error = rd.str("error");
  r.group = rd.i32("group");
  return r;
}

std::string sender(int32_t fromRank, bool haveRank, int32_t decodedRank, const char* fallback) {
  if (fromRank >= 0) return "rank " + std::to_string(fromRank);
  if (haveRank) return "rank " + std::to_string(decodedRank);
  return fallback;
}

}  // namespace

const char* toString(Response::Kind kind) {
  switch (kind) {
    case Response::Kind::kOk:
      return "ok";
    case Response::Kind::kError:
      return "error";
  }
  return "unknown-kind";
}

std::vector<uint8_t> encode(const RequestList& list) {
  size_t estimate = 16;
  for (const Request& r : list.requests) {
    estimate += kMinRequestBytes + r.name.size() + r.refusal.size() +
                8 * (r.shape.size() + r.splits.size());
  }
  Writer w(estimate);
  for (uint8_t b : kRequestMagic) w.u8(b);
  w.u8(kVersion);
  w.i32(list.rank);
  w.boolean(list.shutdown);
  w.u32(static_cast<uint32_t>(list.requests.size()));
  for (const Request& r : list.requests) writeRequest(w, r);
  return w.take();
}

std::vector<uint8_t> encode(const ResponseList& list) {
  size_t estimate = 16 + list.shutdownReason.size();
  for (const Response& r : list.responses) {
    estimate += kMinResponseBytes + r.name.size() + r.error.size() +
                8 * (r.shape.size() + r.rankDim0.size() + r.splitMatrix.size()) +
                4 * r.joinedRanks.size();
  }
  Writer w(estimate);
  for (uint8_t b : kResponseMagic) w.u8(b);
  w.u8(kVersion);
  w.boolean(list.shutdown);
  w.str(list.shutdownReason);
  w.u32(static_cast<uint32_t>(list.responses.size()));
  for (const Response& r : list.responses) writeResponse(w, r);
  w.boolean(list.hasTuning);
  if (list.hasTuning) {
    w.i64(list.tuning.fusionThresholdBytes);
    w.f64(list.tuning.cycleTimeMs);
    w.i64(list.tuning.allreduceHdMinBytes);
    w.i64(list.tuning.allreduceRingMinBytes);
    w.boolean(list.tuning.active);
    w.i32(static_cast<int32_t>(list.tuning.hierarchicalAllreduce));
  }
  return w.take();
}

Status decode(const uint8_t* data, size_t n, RequestList* out, int32_t fromRank) {
  Reader rd(data, n);
  RequestList list;
  rd.header(kRequestMagic);
  list.rank = rd.i32("list rank");
  bool haveRank = rd.ok();
  list.shutdown = rd.boolean("shutdown flag");
  uint32_t count = rd.count(kMinRequestBytes, "request count");
  list.requests.reserve(count);
  for (uint32_t i = 0; i < count && rd.ok(); ++i) list.requests.push_back(readRequest(rd));
  rd.end();
  if (!rd.ok()) {
    return Status(ErrorCode::kInternal,
                  "malformed request list from " +
                      sender(fromRank, haveRank, list.rank, "an unknown rank") + ": " + rd.error());
  }
  *out = std::move(list);
  return Status::ok();
}

Status decode(const uint8_t* data, size_t n, ResponseList* out, int32_t fromRank) {
  Reader rd(data, n);
  ResponseList list;
  rd.header(kResponseMagic);
  list.shutdown = rd.boolean("shutdown flag");
  list.shutdownReason = rd.str("shutdown reason");
  uint32_t count = rd.count(kMinResponseBytes, "response count");
  list.responses.reserve(count);
  for (uint32_t i = 0; i < count && rd.ok(); ++i) list.responses.push_back(readResponse(rd));
  list.hasTuning = rd.boolean("tuning flag");
  if (list.hasTuning) {
    list.tuning.fusionThresholdBytes = rd.i64("tuning fusion threshold");
    list.tuning.cycleTimeMs = rd.f64("tuning cycle time");
    list.tuning.allreduceHdMinBytes = rd.i64("tuning halving-doubling crossover");
    list.tuning.allreduceRingMinBytes = rd.i64("tuning ring crossover");
    list.tuning.active = rd.boolean("tuning active flag");
    const int32_t hierarchical = rd.i32("tuning hierarchical allreduce");
    if (rd.ok() && (hierarchical < static_cast<int32_t>(ops::Hierarchical::kAuto) ||
                    hierarchical > static_cast<int32_t>(ops::Hierarchical::kOff))) {
      rd.fail("bad tuning hierarchical allreduce " + std::to_string(hierarchical));
    }
    if (rd.ok()) list.tuning.hierarchicalAllreduce = static_cast<ops::Hierarchical>(hierarchical);
    const TuningParams& t = list.tuning;
    if (rd.ok() && (t.fusionThresholdBytes < 0 || !std::isfinite(t.cycleTimeMs) ||
                    t.cycleTimeMs < 0 || t.allreduceHdMinBytes < 0 ||
                    t.allreduceRingMinBytes < 0)) {
      rd.fail("bad tuning parameters (a negative size or a cycle time that is not a finite, "
              "non-negative number)");
    }
  }
  rd.end();
  if (!rd.ok()) {
    return Status(ErrorCode::kInternal, "malformed response list from " +
                                            sender(fromRank, false, 0, "the coordinator") + ": " +
                                            rd.error());
  }
  *out = std::move(list);
  return Status::ok();
}

}  // namespace kolo
