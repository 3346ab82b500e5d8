// SPDX-License-Identifier: Apache-2.0
// The auto device executor (design and contract in auto_executor.h): one route per process
// set, decided at its first device batch.
#include "ops/device/auto_executor.h"

#include <map>
#include <string>
#include <vector>

#include "base/log.h"
#include "ops/device/cuda_device.h"
#include "ops/device/host_staged_executor.h"
#include "ops/device/nccl_executor.h"
#include "ops/device_plan.h"
#include "ops/execute.h"
#include "ops/process_set.h"

namespace kolo {
namespace {

class AutoDeviceExecutor final : public CudaDeviceBase {
 public:
  AutoDeviceExecutor(const Config& cfg, std::shared_ptr<Store> store)
      : CudaDeviceBase(cfg), log_(makeLogger(cfg.rank, cfg.logLevel)) {
    // Neither creation fails (they make no CUDA call); a failure would surface at the first batch.
    (void)createNcclExecutor(cfg, std::move(store), &nccl_, choice_);
    (void)createHostStagedExecutor(cfg, &host_, choice_);
  }

  const char* name() const override { return "auto"; }

  Status execute(const ops::ExecContext& ctx, const std::vector<const Response*>& rs,
                 const std::vector<TensorEntry*>& es) override {
    ops::DeviceExecutor* route = nullptr;
    KOLO_RETURN_IF_ERROR(routeFor(*ctx.set, &route));
    return route->execute(ctx, rs, es);
  }

  Status poll() override {
    KOLO_RETURN_IF_ERROR(nccl_->poll());
    return host_->poll();
  }

  Status drain() override {
    Status first = nccl_->drain();
    Status second = host_->drain();
    return first.isOk() ? second : first;
  }

 private:
  Status routeFor(const ProcessSet& set, ops::DeviceExecutor** out) {
    auto it = routes_.find(set.id);
    if (it != routes_.end()) {
      *out = it->second;
      return Status::ok();
    }
    KOLO_REQUIRE(set.transport != nullptr && set.myIndex >= 0, kInternal,
                 "device batch of process set " + std::to_string(set.id) + " on a non-member");
    int device = -1;
    KOLO_RETURN_IF_ERROR(executionDevice(&device));
    std::vector<std::string> gpus;
    KOLO_RETURN_IF_ERROR(ops::gatherStrings(
        *set.transport, localHostname() + "/" + devicePciBusId(device), &gpus));
    std::map<std::string, size_t> firstMember;  // GPU -> first member driving it
    ops::DeviceExecutor* route = nccl_.get();
    for (size_t m = 0; m < gpus.size() && route == nccl_.get(); ++m) {
      auto [at, fresh] = firstMember.emplace(gpus[m], m);
      if (fresh) continue;
      route = host_.get();
      if (set.myIndex == 0) {
        log_->warn(
            "process set {}: ranks {} and {} both drive GPU {}, and NCCL refuses one "
            "communicator over ranks that share a GPU; this set's CUDA tensors go through pinned "
            "host memory over the CPU transport instead (as KOLO_GPU_OPERATIONS=host; "
            "KOLO_GPU_OPERATIONS=nccl forces NCCL)",
            set.id, set.ranks[at->second], set.ranks[m], gpus[m]);
      }
    }
    routes_[set.id] = route;
    *out = route;
    return Status::ok();
  }

  Logger log_;
  std::unique_ptr<ops::DeviceExecutor> nccl_, host_;
  std::map<int32_t, ops::DeviceExecutor*> routes_;  // process set id -> its executor
};

}  // namespace

Status createAutoDeviceExecutor(const Config& cfg, std::shared_ptr<Store> store,
                                std::unique_ptr<ops::DeviceExecutor>* out) {
  *out = std::make_unique<AutoDeviceExecutor>(cfg, std::move(store));
  return Status::ok();
}

}  // namespace kolo
