// SPDX-License-Identifier: Apache-2.0
// Internal to the MPI transport: how kolo's DataType x ReduceOp map onto MPI datatypes and ops.
//
// Built-in MPI types and ops cover the integers, bool and float/double sums and products.
// float16 and bfloat16 have no MPI type: they travel as 2-byte contiguous types named
// "kolo_float16"/"kolo_bfloat16" and reduce through user-defined ops that call
// kernels::reduceInto (fp32 accumulation, round to nearest even). float/double MIN and MAX also
// use the user-defined ops, because MPI's built-in ones do not propagate NaN as kolo promises,
// and so do 8/16-bit integer sums, which Open MPI 4.1's op/avx saturates instead of wrapping.
// Thread safety: immutable after create(); shared by a transport and the ones split from it.
#pragma once

// kolo uses MPI's C API only; keep the C++ bindings (and their link dependency) out.
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <memory>
#include <string>

#include "base/status.h"
#include "base/types.h"

namespace kolo::mpi_detail {

// "MPI_Iallreduce failed: <MPI's error string>" with the given code.
Status mpiError(int rc, const std::string& what, ErrorCode code = ErrorCode::kIo);

// Whether MPI_Finalize ran (MPI objects may no longer be freed or used then).
inline bool mpiFinalized() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  return finalized != 0;
}

class MpiReductions {
 public:
  // Creates the derived types and ops (a local call; MPI must be initialized).
  static Status create(std::shared_ptr<const MpiReductions>* out);
  ~MpiReductions();
  MpiReductions(const MpiReductions&) = delete;
  MpiReductions& operator=(const MpiReductions&) = delete;

  // The MPI type for a dtype (as element type for reductions).
  MPI_Datatype type(DataType dtype) const;
  // The (type, op) pair for a reduction; kInvalidArgument for combinations kolo does not define
  // (kBitAnd on floating point).
  Status map(DataType dtype, ReduceOp op, MPI_Datatype* type, MPI_Op* mpiOp) const;

 private:
  MpiReductions() = default;
  MPI_Datatype half_ = MPI_DATATYPE_NULL;
  MPI_Datatype bfloat_ = MPI_DATATYPE_NULL;
  MPI_Op sum_ = MPI_OP_NULL, min_ = MPI_OP_NULL, max_ = MPI_OP_NULL, prod_ = MPI_OP_NULL;
};

}  // namespace kolo::mpi_detail
