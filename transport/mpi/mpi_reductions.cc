// SPDX-License-Identifier: Apache-2.0
// MPI user-defined reductions for kolo. MPI hands a user function only (in, inout, len, type),
// with no user pointer, so the function recovers kolo's DataType from the MPI type itself:
// MPI_FLOAT/MPI_DOUBLE by handle, our 16-bit types by the name we gave them at creation. One
// function per ReduceOp is instantiated from a template so the op needs no lookup either.
#include "transport/mpi/mpi_reductions.h"

#include <cstdio>
#include <cstring>
#include <utility>

#include "kernels/reduce_cpu.h"

namespace kolo::mpi_detail {
namespace {

constexpr const char* kHalfName = "kolo_float16";
constexpr const char* kBfloatName = "kolo_bfloat16";

// Returns false for a type these ops were never registered with (cannot happen: kolo only
// passes the types map() returned).
bool dtypeOf(MPI_Datatype type, DataType* out) {
  const std::pair<MPI_Datatype, DataType> builtin[] = {
      {MPI_FLOAT, DataType::kFloat32},   {MPI_DOUBLE, DataType::kFloat64},
      {MPI_UINT8_T, DataType::kUInt8},   {MPI_INT8_T, DataType::kInt8},
      {MPI_UINT16_T, DataType::kUInt16}, {MPI_INT16_T, DataType::kInt16}};
  for (const auto& b : builtin) {
    if (type == b.first) {
      *out = b.second;
      return true;
    }
  }
  char name[MPI_MAX_OBJECT_NAME] = {0};
  int len = 0;
  if (MPI_Type_get_name(type, name, &len) != MPI_SUCCESS) return false;
  if (std::strcmp(name, kHalfName) == 0) {
    *out = DataType::kFloat16;
    return true;
  }
  if (std::strcmp(name, kBfloatName) == 0) {
    *out = DataType::kBFloat16;
    return true;
  }
  return false;
}

template <ReduceOp kOp>
void userReduce(void* in, void* inout, int* len, MPI_Datatype* type) {
  DataType dtype;
  if (len == nullptr || *len <= 0 || !dtypeOf(*type, &dtype)) return;
  // MPI's contract is inout = in (op) inout; every kolo op is commutative.
  kernels::reduceInto(inout, in, static_cast<size_t>(*len), dtype, kOp);
}

Status makeHalfType(const char* name, MPI_Datatype* out) {
  int rc = MPI_Type_contiguous(2, MPI_BYTE, out);
  if (rc != MPI_SUCCESS) return mpiError(rc, "MPI_Type_contiguous");
  rc = MPI_Type_set_name(*out, name);
  if (rc != MPI_SUCCESS) return mpiError(rc, "MPI_Type_set_name");
  rc = MPI_Type_commit(out);
  if (rc != MPI_SUCCESS) return mpiError(rc, "MPI_Type_commit");
  return Status::ok();
}

}  // namespace

Status mpiError(int rc, const std::string& what, ErrorCode code) {
  char text[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) {
    std::snprintf(text, sizeof(text), "MPI error %d", rc);
  }
  return Status(code, "mpi: " + what + " failed: " + text);
}

Status MpiReductions::create(std::shared_ptr<const MpiReductions>* out) {
  std::shared_ptr<MpiReductions> r(new MpiReductions());
  KOLO_RETURN_IF_ERROR(makeHalfType(kHalfName, &r->half_));
  KOLO_RETURN_IF_ERROR(makeHalfType(kBfloatName, &r->bfloat_));
  struct {
    MPI_User_function* fn;
    MPI_Op* op;
  } ops[] = {{&userReduce<ReduceOp::kSum>, &r->sum_},
             {&userReduce<ReduceOp::kMin>, &r->min_},
             {&userReduce<ReduceOp::kMax>, &r->max_},
             {&userReduce<ReduceOp::kProduct>, &r->prod_}};
  for (auto& o : ops) {
    int rc = MPI_Op_create(o.fn, /*commute=*/1, o.op);
    if (rc != MPI_SUCCESS) return mpiError(rc, "MPI_Op_create");
  }
  *out = std::move(r);
  return Status::ok();
}

MpiReductions::~MpiReductions() {
  // After MPI_Finalize every MPI object is gone already and no call is allowed.
  if (mpiFinalized()) return;
  for (MPI_Op* op : {&sum_, &min_, &max_, &prod_}) {
    if (*op != MPI_OP_NULL) MPI_Op_free(op);
  }
  for (MPI_Datatype* t : {&half_, &bfloat_}) {
    if (*t != MPI_DATATYPE_NULL) MPI_Type_free(t);
  }
}

MPI_Datatype MpiReductions::type(DataType dtype) const {
  switch (dtype) {
    case DataType::kUInt8:
      return MPI_UINT8_T;
    case DataType::kInt8:
      return MPI_INT8_T;
    case DataType::kUInt16:
      return MPI_UINT16_T;
    case DataType::kInt16:
      return MPI_INT16_T;
    case DataType::kInt32:
      return MPI_INT32_T;
    case DataType::kInt64:
      return MPI_INT64_T;
    case DataType::kFloat16:
      return half_;
    case DataType::kBFloat16:
      return bfloat_;
    case DataType::kFloat32:
      return MPI_FLOAT;
    case DataType::kFloat64:
      return MPI_DOUBLE;
    case DataType::kBool:
      return MPI_C_BOOL;
  }
  return MPI_DATATYPE_NULL;
}

Status MpiReductions::map(DataType dtype, ReduceOp op, MPI_Datatype* type, MPI_Op* mpiOp) const {
  KOLO_REQUIRE(isValid(dtype), kInvalidArgument, "mpi: invalid data type");
  *type = this->type(dtype);
  const bool isHalf = dtype == DataType::kFloat16 || dtype == DataType::kBFloat16;
  const bool isFloat = isFloatingPoint(dtype);
  // Open MPI 4.1's vectorized op component (op/avx) adds 8- and 16-bit integers with
  // saturation; kolo promises wrap-around, so those sums go through our own op.
  const bool narrowInt = !isFloat && sizeOf(dtype) <= 2;
  if (dtype == DataType::kBool) {
    // bool: sum/max = logical OR, min/product/bitand = logical AND (reduce_cpu.h).
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAverage:
      case ReduceOp::kMax:
        *mpiOp = MPI_LOR;
        return Status::ok();
      case ReduceOp::kMin:
      case ReduceOp::kProduct:
      case ReduceOp::kBitAnd:
        *mpiOp = MPI_LAND;
        return Status::ok();
      case ReduceOp::kAdasum:  // not an MPI op: ops/adasum runs it
        break;
    }
    return Status(ErrorCode::kInvalidArgument, "mpi: invalid reduce op");
  }
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:  // the division happens later, as a postscale
      *mpiOp = isHalf || narrowInt ? sum_ : MPI_SUM;
      return Status::ok();
    case ReduceOp::kProduct:
      *mpiOp = isHalf ? prod_ : MPI_PROD;
      return Status::ok();
    case ReduceOp::kMin:
      *mpiOp = isFloat ? min_ : MPI_MIN;
      return Status::ok();
    case ReduceOp::kMax:
      *mpiOp = isFloat ? max_ : MPI_MAX;
      return Status::ok();
    case ReduceOp::kBitAnd:
      if (isFloat) {
        return Status(ErrorCode::kInvalidArgument,
                      std::string("mpi: bitwise AND is not defined for ") + toString(dtype));
      }
      *mpiOp = MPI_BAND;
      return Status::ok();
    case ReduceOp::kAdasum:
      break;
  }
  return Status(ErrorCode::kInvalidArgument, "mpi: invalid reduce op");
}

}  // namespace kolo::mpi_detail
