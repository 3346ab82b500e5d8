// SPDX-License-Identifier: Apache-2.0
// The host-staged CUDA path (design and contract in host_staged_executor.h). The one layout
// question is where each tensor sits in the pinned buffer: every input, then every planned
// output, each starting on a 64-byte boundary. An allreduce or broadcast runs in place on its
// staged input, so what comes back is the input region; the ops that allocate their outputs
// (allgather, alltoall, reducescatter) give the host backend the pinned output region through
// the proxy's allocator, at the size the plan says, and that region comes back.
#include "ops/device/host_staged_executor.h"

#include <cuda_runtime_api.h>

#include <vector>

#include "kernels/cuda_util.h"
#include "ops/batch_plan.h"
#include "ops/device/cuda_device.h"
#include "ops/execute.h"
#include "ops/process_set.h"
#include "transport/poll_support.h"

namespace kolo {
namespace {

constexpr size_t kStagingAlign = 64;

size_t aligned(size_t n) { return (n + kStagingAlign - 1) / kStagingAlign * kStagingAlign; }

class HostStagedExecutor final : public CudaDeviceBase {
 public:
  HostStagedExecutor(const Config& cfg, std::shared_ptr<CudaDeviceChoice> choice)
      : CudaDeviceBase(cfg, std::move(choice)) {}
  ~HostStagedExecutor() override {
    if (stream_ != nullptr) {
      cuda::DeviceGuard g(streamDevice_);
      (void)cudaStreamDestroy(stream_);
    }
  }

  const char* name() const override { return "host"; }
  Status execute(const ops::ExecContext& ctx, const std::vector<const Response*>& rs,
                 const std::vector<TensorEntry*>& es) override;

 private:
  Status streamOn(int device);
  // Records an event on stream_ after the work queued so far, waits for it (bounded), and
  // returns it in *event (optional).
  Status waitQueued(int device, Deadline deadline, std::shared_ptr<void>* event = nullptr);
  Status copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, int device);

  cudaStream_t stream_ = nullptr;
  int streamDevice_ = -1;
  cuda::PinnedBuffer staging_;
};

Status HostStagedExecutor::streamOn(int device) {
  if (stream_ != nullptr) return Status::ok();
  KOLO_RETURN_IF_ERROR(cuda::check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking),
                                   "cudaStreamCreateWithFlags", device));
  streamDevice_ = device;
  return Status::ok();
}

Status HostStagedExecutor::waitQueued(int device, Deadline deadline, std::shared_ptr<void>* event) {
  std::shared_ptr<void> done;
  KOLO_RETURN_IF_ERROR(cuda::makeEvent(device, &done));
  KOLO_RETURN_IF_ERROR(
      cuda::check(cudaEventRecord(cuda::eventOf(done), stream_), "cudaEventRecord", device));
  Backoff backoff;
  for (;;) {
    bool finished = false;
    KOLO_RETURN_IF_ERROR(
        cuda::queryEvent(cuda::eventOf(done), &finished, "host-staged copies", device));
    if (finished) break;
    if (Clock::now() >= deadline) {
      return Status(ErrorCode::kTimeout, "host-staged copies on " + deviceName(device) +
                                             " did not complete within the transport timeout");
    }
    backoff.pause();
  }
  if (event != nullptr) *event = std::move(done);
  return Status::ok();
}

Status HostStagedExecutor::copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                                int device) {
  if (bytes == 0 || dst == nullptr || src == nullptr) return Status::ok();
  return cuda::check(cudaMemcpyAsync(dst, src, bytes, kind, stream_),
                     kind == cudaMemcpyDeviceToHost ? "cudaMemcpyAsync (stage to host)"
                                                    : "cudaMemcpyAsync (back to the device)",
                     device);
}

Status HostStagedExecutor::execute(const ops::ExecContext& ctx,
                                   const std::vector<const Response*>& rs,
                                   const std::vector<TensorEntry*>& es) {
  if (rs.empty()) return Status::ok();
  int device = -1;
  KOLO_RETURN_IF_ERROR(executionDevice(&device));
  cuda::DeviceGuard g(device);
  KOLO_RETURN_IF_ERROR(g.status());
  KOLO_RETURN_IF_ERROR(streamOn(device));
  ops::BatchPlan plan;
  KOLO_RETURN_IF_ERROR(
      ops::planBatch(rs, es, static_cast<int>(ctx.set->ranks.size()), ctx.set->myIndex, {}, &plan));
  const size_t m = es.size();
  const bool allocates = !plan.outputs.empty();

  // The pinned layout: inputs, then planned outputs.
  std::vector<size_t> inOff(m, 0), outOff(m, 0), inBytes(m, 0);
  size_t total = 0;
  for (size_t i = 0; i < m; ++i) {
    inBytes[i] = es[i] != nullptr ? es[i]->input.byteSize() : 0;
    inOff[i] = total;
    total += aligned(inBytes[i]);
  }
  for (size_t i = 0; allocates && i < m; ++i) {
    outOff[i] = total;
    total += aligned(plan.outputs[i].bytes);
  }
  void* mem = nullptr;
  KOLO_RETURN_IF_ERROR(staging_.reserve(total, &mem));
  char* host = static_cast<char*>(mem);

  // 2. Inputs to the host, after the producers' work.
  for (TensorEntry* e : es) {
    if (e == nullptr || !e->readyEvent) continue;
    KOLO_RETURN_IF_ERROR(cuda::check(cudaStreamWaitEvent(stream_, cuda::eventOf(e->readyEvent), 0),
                                     "cudaStreamWaitEvent (producer's ready event)", device));
  }
  for (size_t i = 0; i < m; ++i) {
    if (es[i] == nullptr) continue;
    KOLO_RETURN_IF_ERROR(
        copy(host + inOff[i], es[i]->input.data, inBytes[i], cudaMemcpyDeviceToHost, device));
  }
  KOLO_RETURN_IF_ERROR(waitQueued(device, ctx.set->transport->deadlineFromNow()));

  // 3. The host backend on proxies of the entries.
  std::vector<TensorEntry> proxies(m);
  std::vector<TensorEntry*> staged(m, nullptr);
  for (size_t i = 0; i < m; ++i) {
    if (es[i] == nullptr) continue;  // a joined rank: the host backend fills zeros
    TensorEntry& p = proxies[i];
    p.request = es[i]->request;
    p.input = es[i]->input;
    p.input.data = inBytes[i] > 0 ? host + inOff[i] : nullptr;
    p.input.device = kCpuDevice;
    p.input.stream = nullptr;
    p.output = TensorView();  // in place
    p.handle = std::make_shared<HandleState>();
    if (allocates) {
      char* out = host + outOff[i];
      p.allocate = [out](size_t, const std::vector<int64_t>&) { return static_cast<void*>(out); };
    }
    staged[i] = &p;
  }
  KOLO_RETURN_IF_ERROR(ops::executeOnHost(ctx, rs, staged));

  // 4. Device outputs, the results back, one completion event.
  std::vector<void*> outputs;
  KOLO_RETURN_IF_ERROR(allocateDeviceOutputs(plan, es, device, &outputs));
  for (size_t i = 0; i < m; ++i) {
    if (es[i] == nullptr) continue;
    void* dst = plan.type == OpType::kBroadcast ? es[i]->input.data : outputs[i];
    const char* src = host + (allocates ? outOff[i] : inOff[i]);
    const size_t bytes = allocates ? plan.outputs[i].bytes : inBytes[i];
    KOLO_RETURN_IF_ERROR(copy(dst, src, bytes, cudaMemcpyHostToDevice, device));
  }
  std::shared_ptr<void> done;
  KOLO_RETURN_IF_ERROR(waitQueued(device, ctx.set->transport->deadlineFromNow(), &done));
  for (TensorEntry* e : es) {
    if (e == nullptr) continue;
    e->handle->completionEvent = done;
    e->handle->completionDevice = device;
  }
  return Status::ok();
}

}  // namespace

Status createHostStagedExecutor(const Config& cfg, std::unique_ptr<ops::DeviceExecutor>* out,
                                std::shared_ptr<CudaDeviceChoice> choice) {
  *out = std::make_unique<HostStagedExecutor>(cfg, std::move(choice));
  return Status::ok();
}

}  // namespace kolo
