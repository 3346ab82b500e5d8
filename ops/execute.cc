// SPDX-License-Identifier: Apache-2.0
// execute: the host backend of the batch plan. ops/batch_plan.cc lays the batch out (slots,
// copies, zero slots, outputs, scale factors, splits: the same plan the device backend in
// ops/device carries out); this file moves the bytes with kernels::copyBytes and runs the
// collectives over the set's Transport, recording each step on the timeline.
// Why it is shaped like this:
//  - A batch of one tensor skips the fusion buffer (the copies would cost more than they save):
//    the collective runs in the output tensor itself.
//  - Where the transport reduces tensors where they lie (shared memory: allreduceSpans), a
//    fused allreduce skips the fusion buffer too: the segment's staging copies read the inputs
//    and write the outputs directly, which saves two passes over the batch's bytes (100 x
//    64 KiB at 2 ranks: about a quarter of the step). Joined ranks (zeros), prescaling (which
//    would have to write the inputs) and Adasum keep the fusion buffer.
//  - Scaling happens once on the packed buffer, so fused and unfused ops round identically.
//  - AVERAGE divides by the set size after the postscale (joined ranks count: they sent zeros).
//    For MIN, MAX and PRODUCT a joined rank sends the op's identity instead (+inf or the type's
//    largest value, -inf or its lowest, 1), so it never changes the others' result.
//  - ADASUM runs ops/adasum over the packed buffer with the tensors' element counts, so the
//    dot products and norms are per tensor, not per buffer; pre/postscale apply as for a sum.
//    A joined rank's zeros leave the others' vectors unchanged (a zero vector has coefficient 1).
//  - Other allreduces take ops/hierarchical (timeline step HIERARCHICAL_ALLREDUCE) when the set
//    spans several hosts with equal member counts and its rule says so; scaling stays here.
#include "ops/execute.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "kernels/copy.h"
#include "kernels/reduce_cpu.h"
#include "ops/adasum.h"
#include "ops/batch_plan.h"
#include "ops/device_executor.h"
#include "ops/hierarchical.h"
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

// The data path's bulk copy (kernels/copy.h), skipped where a tensor already lies in place.
void copyUnlessInPlace(void* dst, const void* src, size_t n) {
  if (dst != src) kernels::copyBytes(dst, src, n);
}

// The host's storage for an output the handle owns.
Status ownOnHost(HandleState& h, size_t bytes, void** out) {
  h.ownedOutput.resize(bytes);
  *out = h.ownedOutput.data();
  return Status::ok();
}

// The plan's fusion buffer, or kInternal naming its size.
Status reserveFusion(const ExecContext& ctx, size_t bytes, const char* what, char** out) {
  *out = static_cast<char*>(ctx.fusion->reserve(bytes));
  if (*out == nullptr && bytes > 0) {
    return Status(ErrorCode::kInternal, std::string("cannot allocate a ") + what + " of " +
                                            std::to_string(bytes) + " bytes");
  }
  return Status::ok();
}

// The plan's copies into the working buffer, and a joined rank's zero slots.
void packIn(const BatchPlan& p, const std::vector<TensorEntry*>& es, char* buf) {
  for (const PlanCopy& c : p.copyIn) {
    copyUnlessInPlace(buf + c.bufferOffset,
                      static_cast<const char*>(es[c.tensor]->input.data) + c.tensorOffset, c.bytes);
  }
  for (const PlanCopy& c : p.zeroFill) std::memset(buf + c.bufferOffset, 0, c.bytes);
}

// A joined rank's slots hold zeros after packIn: the identity of sum, average and Adasum. For
// min, max and product they get the op's identity, after the prescale so that scaling cannot
// move it (a joined rank's zeros won every max of negative values).
void fillJoinedSlots(const BatchPlan& p, char* buf) {
  if (kernels::zeroIsIdentity(p.op)) return;
  for (const PlanCopy& c : p.zeroFill) {
    kernels::fillIdentity(buf + c.bufferOffset, c.bytes / p.elemSize, p.dtype, p.op);
  }
}

void unpackOut(const BatchPlan& p, const std::vector<void*>& outputs, const char* buf) {
  for (const PlanCopy& c : p.copyOut) {
    copyUnlessInPlace(static_cast<char*>(outputs[c.tensor]) + c.tensorOffset, buf + c.bufferOffset,
                      c.bytes);
  }
}

// Whether a (non-Adasum) allreduce of `bytes` takes ops/hierarchical's path on this set.
bool hierarchical(const ExecContext& ctx, size_t bytes) {
  if (ctx.hierarchy == nullptr || bytes == 0) return false;
  const HostLayout* layout = ctx.hierarchy->layout(*ctx.set);
  return layout != nullptr && useHierarchical(*ctx.algorithms, *layout, bytes);
}

Status runAllreduce(const ExecContext& ctx, const BatchPlan& p, const std::vector<TensorEntry*>& es,
                    const Steps& steps) {
  const std::vector<void*> outputs = [&] {
    std::vector<void*> o(es.size(), nullptr);
    for (size_t i = 0; i < es.size(); ++i) o[i] = es[i] != nullptr ? outputOf(*es[i]) : nullptr;
    return o;
  }();
  if (p.setSize == 1) {
    // A set of one: the "reduction" is the identity; only the copy and the scaling remain.
    for (size_t i = 0; i < es.size(); ++i) {
      if (es[i] == nullptr) continue;
      copyUnlessInPlace(outputs[i], es[i]->input.data, p.counts[i] * p.elemSize);
      kernels::scaleInPlace(outputs[i], p.counts[i], p.dtype, p.prescale);  // rounds like n > 1
      kernels::scaleInPlace(outputs[i], p.counts[i], p.dtype, p.postscale);
    }
    return Status::ok();
  }
  const size_t bytes = p.count * p.elemSize;
  const bool unscaledInputs = p.prescale == 1.0 && p.op != ReduceOp::kAdasum;
  const bool everyInput =
      std::all_of(es.begin(), es.end(), [](const TensorEntry* e) { return e != nullptr; });
  if (unscaledInputs && everyInput &&
      spansAllreduceApplies(*ctx.set->transport, *ctx.algorithms, bytes)) {
    std::vector<ReduceSpan> spans(es.size());
    for (size_t i = 0; i < es.size(); ++i) {
      spans[i].in = es[i]->input.data;
      spans[i].out = outputs[i];
      spans[i].count = p.counts[i];
    }
    steps.begin(plannedStep(*ctx.set->transport, *ctx.algorithms, OpType::kAllreduce, bytes));
    Status s = ctx.set->transport->allreduceSpans(spans, p.dtype, p.op);
    steps.end();
    if (!s.isOk()) return s;
    for (size_t i = 0; i < es.size(); ++i) {
      kernels::scaleInPlace(spans[i].out, p.counts[i], p.dtype, p.postscale);
    }
    return Status::ok();
  }
  char* buf = static_cast<char*>(outputs[0]);
  if (p.fused) {
    KOLO_RETURN_IF_ERROR(reserveFusion(ctx, p.bufferBytes, "fusion buffer", &buf));
    steps.begin("MEMCPY_IN_FUSION_BUFFER");
    packIn(p, es, buf);
    steps.end();
  } else {
    packIn(p, es, buf);  // out of place: the input into the output, where the collective runs
  }
  kernels::scaleInPlace(buf, p.count, p.dtype, p.prescale);
  fillJoinedSlots(p, buf);
  Status s;
  if (p.op == ReduceOp::kAdasum) {
    steps.begin("ADASUM_ALLREDUCE");
    s = adasumAllreduce(*ctx.set->transport, buf, p.counts, p.dtype);
  } else if (hierarchical(ctx, bytes)) {
    steps.begin("HIERARCHICAL_ALLREDUCE");
    HostGroups* groups = nullptr;
    s = ctx.hierarchy->groups(*ctx.set, &groups);
    if (s.isOk()) {
      s = hierarchicalAllreduce(*groups, *ctx.algorithms, buf, p.count, p.dtype, p.op);
    }
  } else {
    steps.begin(plannedStep(*ctx.set->transport, *ctx.algorithms, OpType::kAllreduce, bytes));
    s = ops::allreduce(*ctx.set->transport, *ctx.algorithms, buf, p.count, p.dtype, p.op);
  }
  steps.end();
  if (!s.isOk()) return s;
  kernels::scaleInPlace(buf, p.count, p.dtype, p.postscale);
  if (p.fused) {
    steps.begin("MEMCPY_OUT_FUSION_BUFFER");
    unpackOut(p, outputs, buf);
    steps.end();
  }
  return Status::ok();
}

Status runAllgather(const ExecContext& ctx, const BatchPlan& p, const std::vector<TensorEntry*>& es,
                    const Steps& steps) {
  std::vector<void*> outputs;
  KOLO_RETURN_IF_ERROR(allocateOutputs(p, es, ownOnHost, &outputs));
  const std::string step =
      plannedStep(*ctx.set->transport, *ctx.algorithms, OpType::kAllgather, p.collectiveBytes);
  if (!p.fused) {
    steps.begin(step);
    Status s = ops::allgatherv(*ctx.set->transport, *ctx.algorithms, es[0]->input.data,
                               p.blockBytes[p.me], outputs[0], p.blockBytes);
    steps.end();
    return s;
  }
  char* buf = nullptr;
  KOLO_RETURN_IF_ERROR(reserveFusion(ctx, p.bufferBytes, "fusion buffer", &buf));
  steps.begin("MEMCPY_IN_FUSION_BUFFER");
  packIn(p, es, buf);
  steps.end();
  steps.begin(step);
  Status s = ops::allgatherv(*ctx.set->transport, *ctx.algorithms, buf + p.blockOffset[p.me],
                             p.blockBytes[p.me], buf, p.blockBytes);
  steps.end();
  if (!s.isOk()) return s;
  steps.begin("MEMCPY_OUT_FUSION_BUFFER");
  unpackOut(p, outputs, buf);
  steps.end();
  return Status::ok();
}

Status runAlltoall(const ExecContext& ctx, const BatchPlan& p, TensorEntry& e, const Steps& steps) {
  std::vector<void*> outputs;
  KOLO_RETURN_IF_ERROR(allocateOutputs(p, {&e}, ownOnHost, &outputs));
  steps.begin(
      plannedStep(*ctx.set->transport, *ctx.algorithms, OpType::kAlltoall, p.collectiveBytes));
  Status s = ops::alltoallv(*ctx.set->transport, *ctx.algorithms, e.input.data, p.sendBytes,
                            outputs[0], p.recvBytes);
  steps.end();
  return s;
}

Status runReducescatter(const ExecContext& ctx, const BatchPlan& p, TensorEntry& e,
                        const Steps& steps) {
  // The input is read-only for the caller: scale a staged copy.
  char* staged = nullptr;
  KOLO_RETURN_IF_ERROR(reserveFusion(ctx, p.bufferBytes, "staging buffer", &staged));
  packIn(p, {&e}, staged);
  kernels::scaleInPlace(staged, p.count, p.dtype, p.prescale);
  std::vector<void*> outputs;
  KOLO_RETURN_IF_ERROR(allocateOutputs(p, {&e}, ownOnHost, &outputs));
  steps.begin(
      plannedStep(*ctx.set->transport, *ctx.algorithms, OpType::kReducescatter, p.collectiveBytes));
  Status s = ops::reducescatter(*ctx.set->transport, *ctx.algorithms, staged, outputs[0],
                                p.rankCounts, p.dtype, p.op);
  steps.end();
  if (!s.isOk()) return s;
  kernels::scaleInPlace(outputs[0], p.rankCounts[p.me], p.dtype, p.postscale);
  return Status::ok();
}

}  // namespace

Status execute(const ExecContext& ctx, const std::vector<const Response*>& responses,
               const std::vector<TensorEntry*>& entries) {
  if (responses.empty()) return Status::ok();
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
  return executeOnHost(ctx, responses, entries);
}

Status executeOnHost(const ExecContext& ctx, const std::vector<const Response*>& responses,
                     const std::vector<TensorEntry*>& entries) {
  if (responses.empty()) return Status::ok();
  Steps steps(ctx.timeline, responses);
  BatchPlan plan;
  KOLO_RETURN_IF_ERROR(planBatch(responses, entries, static_cast<int>(ctx.set->ranks.size()),
                                 ctx.set->myIndex, PlanOptions{}, &plan));
  switch (plan.type) {
    case OpType::kAllreduce:
      return runAllreduce(ctx, plan, entries, steps);
    case OpType::kAllgather:
      return runAllgather(ctx, plan, entries, steps);
    case OpType::kBroadcast: {
      TensorEntry& e = *entries[0];
      steps.begin(plannedStep(*ctx.set->transport, *ctx.algorithms, OpType::kBroadcast,
                              plan.collectiveBytes));
      Status s = ops::broadcast(*ctx.set->transport, *ctx.algorithms, e.input.data,
                                plan.collectiveBytes, plan.root);
      steps.end();
      return s;
    }
    case OpType::kAlltoall:
      return runAlltoall(ctx, plan, *entries[0], steps);
    case OpType::kReducescatter:
      return runReducescatter(ctx, plan, *entries[0], steps);
    default:
      return Status(ErrorCode::kInternal,
                    std::string("execute: no data path for ") + toString(plan.type));
  }
}

}  // namespace kolo::ops
