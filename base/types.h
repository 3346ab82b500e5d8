// SPDX-License-Identifier: Apache-2.0
// Data types, reduction ops and op types. Values are part of the C ABI (kolo.h); append only.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kolo {

enum class DataType : int32_t {
  kUInt8 = 0,
  kInt8 = 1,
  kUInt16 = 2,
  kInt16 = 3,
  kInt32 = 4,
  kInt64 = 5,
  kFloat16 = 6,
  kBFloat16 = 7,
  kFloat32 = 8,
  kFloat64 = 9,
  kBool = 10,
};
constexpr int kNumDataTypes = 11;

enum class ReduceOp : int32_t {
  kSum = 0,
  kAverage = 1,
  kMin = 2,
  kMax = 3,
  kProduct = 4,
  // Adaptive summation (Maleki et al. 2020, Horovod's Adasum): allreduce of float tensors only
  // (ops/adasum.h). Not an element-wise op: reduce_cpu never sees it.
  kAdasum = 5,
  // Internal only (never accepted from the C API): bitwise AND on integer types, used by the
  // response-cache round.
  kBitAnd = 100,
};

enum class OpType : int32_t {
  kAllreduce = 0,
  kAllgather = 1,
  kBroadcast = 2,
  kAlltoall = 3,
  kReducescatter = 4,
  kBarrier = 5,
  kJoin = 6,
  // Process-set changes: collectives over every rank (set 0), each its own request kind. The
  // rank list (add) or the set id (remove) travels in Request::splits and Response::shape.
  kAddProcessSet = 7,
  kRemoveProcessSet = 8,
};
inline constexpr OpType kLastOpType = OpType::kRemoveProcessSet;

const char* toString(DataType t);
const char* toString(ReduceOp op);
const char* toString(OpType op);  // "allreduce", "allgather", ...

size_t sizeOf(DataType t);
bool isFloatingPoint(DataType t);  // fp16, bf16, fp32, fp64
bool isValid(DataType t);
bool isValidUserOp(ReduceOp op);  // the six public ops (sum .. product, adasum)

}  // namespace kolo
