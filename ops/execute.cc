// execute: the data path of one batch. Why it is shaped like this:
//  - A batch of one tensor skips the fusion buffer (the copies would cost more than they save):
//    the collective runs in the output tensor itself.
//  - Where the transport reduces tensors where they lie (shared memory: allreduceSpans), a
//    fused allreduce skips the fusion buffer too: the segment's staging copies read the inputs
//    and write the outputs directly, which saves two passes over the batch's bytes (100 x
//    64 KiB at 2 ranks: about a quarter of the step). Joined ranks (zeros), prescaling (which
//    would have to write the inputs) and Adasum keep the fusion buffer.
//  - Scaling happens once on the packed buffer, so fused and unfused ops round identically.
//  - AVERAGE divides by the set size after the postscale (joined ranks count: they sent zeros).
//  - ADASUM runs ops/adasum over the packed buffer with the tensors' element counts, so the
//    dot products and norms are per tensor, not per buffer; pre/postscale apply as for a sum.
//    A joined rank's zeros leave the others' vectors unchanged (a zero vector has coefficient 1).
//  - Other allreduces take ops/hierarchical (timeline step HIERARCHICAL_ALLREDUCE) when the set
//    spans several hosts with equal member counts and its rule says so; scaling stays here.
#include "ops/execute.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "ops/adasum.h"
#include "ops/device_executor.h"
#include "ops/hierarchical.h"
#include "kernels/reduce_cpu.h"
#include "timeline/timeline.h"

namespace kolo::ops {
namespace {

// Records the same timeline step for every tensor of the batch.
class Steps {
 public:
  Steps(Timeline* tl, const std::vector<const Response*>& rs) : tl_(tl), rs_(rs) {}
  void begin(const std::string& activity) const {
    if (!on()) return;
    for (auto* r : rs_) tl_->activityStart(displayName(keyOf(*r)), activity);
  }
  void end() const {
    if (!on()) return;
    for (auto* r : rs_) tl_->activityEnd(displayName(keyOf(*r)));
  }

 private:
  bool on() const { return tl_ != nullptr && tl_->active(); }
  Timeline* tl_;
  const std::vector<const Response*>& rs_;
};

size_t rowBytes(const Response& r) {
  size_t row = sizeOf(r.dtype);
  for (size_t i = 1; i < r.shape.size(); ++i) row *= static_cast<size_t>(r.shape[i]);
  return row;
}

// Allocates an op's output through its allocator, or in its handle.
Status allocateOutput(TensorEntry& e, const std::vector<int64_t>& shape, size_t bytes,
                      void** out) {
  HandleState& h = *e.handle;
  h.outputShape = shape;
  if (e.allocate) {
    *out = e.allocate(bytes, shape);
    if (*out == nullptr && bytes > 0) {
      return Status(ErrorCode::kInvalidArgument,
                    std::string(toString(e.request.type)) + " '" + e.request.name +
                        "': the output allocator returned NULL for " + std::to_string(bytes) +
                        " bytes");
    }
  } else {
    h.ownedOutput.resize(bytes);
    *out = h.ownedOutput.data();
  }
  h.outputData = *out;
  return Status::ok();
}

void copyBytes(void* dst, const void* src, size_t n) {
  if (n > 0 && dst != src) std::memcpy(dst, src, n);
}

// Whether a (non-Adasum) allreduce of `bytes` takes ops/hierarchical's path on this set.
bool hierarchical(const ExecContext& ctx, size_t bytes) {
  if (ctx.hierarchy == nullptr || bytes == 0) return false;
  const HostLayout* layout = ctx.hierarchy->layout(*ctx.set);
  return layout != nullptr && useHierarchical(*ctx.algorithms, *layout, bytes);
}

Status runAllreduce(const ExecContext& ctx, const std::vector<const Response*>& rs,
                    const std::vector<TensorEntry*>& es, const Steps& steps) {
  const Response& first = *rs[0];
  const int n = static_cast<int>(ctx.set->ranks.size());
  const double post = averagedPostscale(first.postscale, first.reduceOp, n);
  const size_t elem = sizeOf(first.dtype);
  std::vector<size_t> counts(rs.size());
  for (size_t i = 0; i < rs.size(); ++i) counts[i] = elementsOf(rs[i]->shape);
  const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});

  if (n == 1) {
    // A set of one: the "reduction" is the identity; only the copy and the scaling remain.
    for (size_t i = 0; i < rs.size(); ++i) {
      if (es[i] == nullptr) continue;
      void* dst = es[i]->output.data != nullptr ? es[i]->output.data : es[i]->input.data;
      copyBytes(dst, es[i]->input.data, counts[i] * elem);
      scaleInPlace(dst, counts[i], first.dtype, first.prescale);  // rounds like n > 1
      scaleInPlace(dst, counts[i], first.dtype, post);
    }
    return Status::ok();
  }
  const bool unscaledInputs = first.prescale == 1.0 && first.reduceOp != ReduceOp::kAdasum;
  const bool everyInput =
      std::all_of(es.begin(), es.end(), [](const TensorEntry* e) { return e != nullptr; });
  if (unscaledInputs && everyInput &&
      spansAllreduceApplies(*ctx.set->transport, *ctx.algorithms, total * elem)) {
    std::vector<ReduceSpan> spans(rs.size());
    for (size_t i = 0; i < rs.size(); ++i) {
      spans[i].in = es[i]->input.data;
      spans[i].out = es[i]->output.data != nullptr ? es[i]->output.data : es[i]->input.data;
      spans[i].count = counts[i];
    }
    steps.begin(
        plannedStep(*ctx.set->transport, *ctx.algorithms, OpType::kAllreduce, total * elem));
    Status s = ctx.set->transport->allreduceSpans(spans, first.dtype, first.reduceOp);
    steps.end();
    if (!s.isOk()) return s;
    for (size_t i = 0; i < rs.size(); ++i) scaleInPlace(spans[i].out, counts[i], first.dtype, post);
    return Status::ok();
  }
  void* buf;
  const bool direct = rs.size() == 1 && es[0] != nullptr;
  if (direct) {
    TensorEntry& e = *es[0];
    buf = e.output.data != nullptr ? e.output.data : e.input.data;
    copyBytes(buf, e.input.data, total * elem);
  } else {
    buf = ctx.fusion->reserve(total * elem);
    if (buf == nullptr && total > 0) {
      return Status(ErrorCode::kInternal, "cannot allocate a fusion buffer of " +
                                              std::to_string(total * elem) + " bytes");
    }
    steps.begin("MEMCPY_IN_FUSION_BUFFER");
    size_t off = 0;
    for (size_t i = 0; i < rs.size(); ++i) {
      char* dst = static_cast<char*>(buf) + off * elem;
      if (es[i] != nullptr) {
        copyBytes(dst, es[i]->input.data, counts[i] * elem);
      } else if (counts[i] > 0) {
        std::memset(dst, 0, counts[i] * elem);  // a joined rank contributes zeros
      }
      off += counts[i];
    }
    steps.end();
  }
  scaleInPlace(buf, total, first.dtype, first.prescale);
  Status s;
  if (first.reduceOp == ReduceOp::kAdasum) {
    steps.begin("ADASUM_ALLREDUCE");
    s = adasumAllreduce(*ctx.set->transport, buf, counts, first.dtype);
  } else if (hierarchical(ctx, total * elem)) {
    steps.begin("HIERARCHICAL_ALLREDUCE");
    HostGroups* groups = nullptr;
    s = ctx.hierarchy->groups(*ctx.set, &groups);
    if (s.isOk()) {
      s = hierarchicalAllreduce(*groups, *ctx.algorithms, buf, total, first.dtype, first.reduceOp);
    }
  } else {
    steps.begin(
        plannedStep(*ctx.set->transport, *ctx.algorithms, OpType::kAllreduce, total * elem));
    s = ops::allreduce(*ctx.set->transport, *ctx.algorithms, buf, total, first.dtype,
                       first.reduceOp);
  }
  steps.end();
  if (!s.isOk()) return s;
  scaleInPlace(buf, total, first.dtype, post);
  if (!direct) {
    steps.begin("MEMCPY_OUT_FUSION_BUFFER");
    size_t off = 0;
    for (size_t i = 0; i < rs.size(); ++i) {
      if (es[i] != nullptr) {
        void* dst = es[i]->output.data != nullptr ? es[i]->output.data : es[i]->input.data;
        copyBytes(dst, static_cast<char*>(buf) + off * elem, counts[i] * elem);
      }
      off += counts[i];
    }
    steps.end();
  }
  return Status::ok();
}

Status runAllgather(const ExecContext& ctx, const std::vector<const Response*>& rs,
                    const std::vector<TensorEntry*>& es, const Steps& steps) {
  const int n = static_cast<int>(ctx.set->ranks.size());
  const int me = ctx.set->myIndex;
  // Rank r's block holds every tensor's rows from r, tensor after tensor.
  std::vector<size_t> blockBytes(n, 0);
  for (const Response* r : rs) {
    for (int k = 0; k < n; ++k) blockBytes[k] += static_cast<size_t>(r->rankDim0[k]) * rowBytes(*r);
  }
  std::vector<void*> outputs(rs.size());
  for (size_t i = 0; i < rs.size(); ++i) {
    std::vector<int64_t> shape = rs[i]->shape;
    if (shape.empty()) shape.push_back(1);
    shape[0] = std::accumulate(rs[i]->rankDim0.begin(), rs[i]->rankDim0.end(), int64_t{0});
    KOLO_RETURN_IF_ERROR(
        allocateOutput(*es[i], shape, static_cast<size_t>(shape[0]) * rowBytes(*rs[i]), &outputs[i]));
  }
  const size_t total = std::accumulate(blockBytes.begin(), blockBytes.end(), size_t{0});
  const std::string step = plannedStep(*ctx.set->transport, *ctx.algorithms, OpType::kAllgather, total);
  if (rs.size() == 1) {
    steps.begin(step);
    Status s = ops::allgatherv(*ctx.set->transport, *ctx.algorithms, es[0]->input.data,
                               blockBytes[me], outputs[0], blockBytes);
    steps.end();
    return s;
  }
  char* buf = static_cast<char*>(ctx.fusion->reserve(total));
  if (buf == nullptr && total > 0) {
    return Status(ErrorCode::kInternal, "cannot allocate a fusion buffer of " +
                                            std::to_string(total) + " bytes");
  }
  std::vector<size_t> blockOffset(n, 0);
  for (int k = 1; k < n; ++k) blockOffset[k] = blockOffset[k - 1] + blockBytes[k - 1];
  steps.begin("MEMCPY_IN_FUSION_BUFFER");
  size_t off = blockOffset[me];
  for (size_t i = 0; i < rs.size(); ++i) {
    size_t bytes = static_cast<size_t>(rs[i]->rankDim0[me]) * rowBytes(*rs[i]);
    copyBytes(buf + off, es[i]->input.data, bytes);
    off += bytes;
  }
  steps.end();
  steps.begin(step);
  Status s = ops::allgatherv(*ctx.set->transport, *ctx.algorithms, buf + blockOffset[me],
                             blockBytes[me], buf, blockBytes);
  steps.end();
  if (!s.isOk()) return s;
  steps.begin("MEMCPY_OUT_FUSION_BUFFER");
  std::vector<size_t> cursor = blockOffset;  // read position inside each rank's block
  for (size_t i = 0; i < rs.size(); ++i) {
    char* dst = static_cast<char*>(outputs[i]);
    for (int k = 0; k < n; ++k) {
      size_t bytes = static_cast<size_t>(rs[i]->rankDim0[k]) * rowBytes(*rs[i]);
      copyBytes(dst, buf + cursor[k], bytes);
      dst += bytes;
      cursor[k] += bytes;
    }
  }
  steps.end();
  return Status::ok();
}

Status runAlltoall(const ExecContext& ctx, const Response& r, TensorEntry& e, const Steps& steps) {
  const int n = static_cast<int>(ctx.set->ranks.size());
  const int me = ctx.set->myIndex;
  const size_t row = rowBytes(r);
  std::vector<size_t> sendBytes(n), recvBytes(n);
  std::vector<int32_t> received(n);
  int64_t rows = 0;
  for (int k = 0; k < n; ++k) {
    sendBytes[k] = static_cast<size_t>(r.splitMatrix[me * n + k]) * row;
    received[k] = static_cast<int32_t>(r.splitMatrix[k * n + me]);
    recvBytes[k] = static_cast<size_t>(received[k]) * row;
    rows += received[k];
  }
  std::vector<int64_t> shape = e.request.shape;
  shape[0] = rows;
  void* out;
  KOLO_RETURN_IF_ERROR(allocateOutput(e, shape, static_cast<size_t>(rows) * row, &out));
  e.handle->receivedSplits = received;
  size_t sent = 0;
  for (size_t b : sendBytes) sent += b;
  steps.begin(plannedStep(*ctx.set->transport, *ctx.algorithms, OpType::kAlltoall, sent));
  Status s = ops::alltoallv(*ctx.set->transport, *ctx.algorithms, e.input.data, sendBytes, out,
                            recvBytes);
  steps.end();
  return s;
}

Status runReducescatter(const ExecContext& ctx, const Response& r, TensorEntry& e,
                        const Steps& steps) {
  const int n = static_cast<int>(ctx.set->ranks.size());
  const int me = ctx.set->myIndex;
  const size_t rowElems = rowBytes(r) / sizeOf(r.dtype);
  const size_t dim0 = r.shape.empty() ? 1 : static_cast<size_t>(r.shape[0]);
  std::vector<size_t> rows = evenSplit(dim0, n);
  std::vector<size_t> counts(n);
  for (int k = 0; k < n; ++k) counts[k] = rows[k] * rowElems;
  const size_t total = dim0 * rowElems, elem = sizeOf(r.dtype);
  // The input is read-only for the caller: scale a staged copy.
  void* staged = ctx.fusion->reserve(total * elem);
  if (staged == nullptr && total > 0) {
    return Status(ErrorCode::kInternal, "cannot allocate a staging buffer");
  }
  copyBytes(staged, e.input.data, total * elem);
  scaleInPlace(staged, total, r.dtype, r.prescale);
  std::vector<int64_t> shape = r.shape.empty() ? std::vector<int64_t>{1} : r.shape;
  shape[0] = static_cast<int64_t>(rows[me]);
  void* out;
  KOLO_RETURN_IF_ERROR(allocateOutput(e, shape, counts[me] * elem, &out));
  steps.begin(plannedStep(*ctx.set->transport, *ctx.algorithms, OpType::kReducescatter,
                          total * elem));
  Status s = ops::reducescatter(*ctx.set->transport, *ctx.algorithms, staged, out, counts,
                                r.dtype, r.reduceOp);
  steps.end();
  if (!s.isOk()) return s;
  const double post = averagedPostscale(r.postscale, r.reduceOp, n);
  scaleInPlace(out, counts[me], r.dtype, post);
  return Status::ok();
}

}  // namespace

Status execute(const ExecContext& ctx, const std::vector<const Response*>& responses,
               const std::vector<TensorEntry*>& entries) {
  if (responses.empty()) return Status::ok();
  Steps steps(ctx.timeline, responses);
  const Response& first = *responses[0];
  for (size_t i = 0; i < entries.size(); ++i) {
    if (entries[i] == nullptr && first.type != OpType::kAllreduce) {
      return Status(ErrorCode::kInternal, "no local op for '" + responses[i]->name + "'");
    }
  }
  if (first.device >= 0) {
    if (ctx.device == nullptr) {
      return Status(ErrorCode::kUnsupported,
                    "'" + first.name + "' is a CUDA tensor but this runtime has no device path");
    }
    return ctx.device->execute(ctx, responses, entries);
  }
  switch (first.type) {
    case OpType::kAllreduce:
      return runAllreduce(ctx, responses, entries, steps);
    case OpType::kAllgather:
      return runAllgather(ctx, responses, entries, steps);
    case OpType::kBroadcast: {
      TensorEntry& e = *entries[0];
      steps.begin(plannedStep(*ctx.set->transport, *ctx.algorithms, OpType::kBroadcast,
                              e.input.byteSize()));
      Status s = ops::broadcast(*ctx.set->transport, *ctx.algorithms, e.input.data,
                                e.input.byteSize(), first.root);
      steps.end();
      return s;
    }
    case OpType::kAlltoall:
      return runAlltoall(ctx, first, *entries[0], steps);
    case OpType::kReducescatter:
      return runReducescatter(ctx, first, *entries[0], steps);
    default:
      return Status(ErrorCode::kInternal,
                    std::string("execute: no data path for ") + toString(first.type));
  }
}

}  // namespace kolo::ops
