// SPDX-License-Identifier: Apache-2.0
/* kolo.h - the C API of kolo, the one stable boundary of the library (C99).
 *
 * Contract for every function below:
 *  - Returns a kolo_status_t (KOLO_OK == 0) unless documented otherwise; never aborts the
 *    process. On failure, kolo_last_error() returns a message for this thread (valid until the
 *    next kolo call on the same thread).
 *  - Thread safety: every function may be called from any thread after kolo_init.
 *  - Ownership: tensors passed to an op are borrowed; the caller keeps their memory alive and
 *    unmodified until the op's handle completes. Handles are integers owned by the runtime until
 *    kolo_handle_release; a released, unknown or forged handle gives KOLO_ERR_INVALID_ARGUMENT.
 *  - Blocking: the *_async functions validate their arguments on the calling thread and return
 *    at once, except that input refused for this rank alone (a scalar to gather, alltoall
 *    splits that do not fit, a broadcast root out of range, a NULL or malformed tensor, an
 *    output that does not match, a non-finite scale; kolo_refuse) waits up to a second while
 *    the refusal fails the op on the other ranks too; kolo_handle_wait blocks up to its timeout;
 *    kolo_init blocks until every rank has joined the rendezvous (KOLO_START_TIMEOUT),
 *    collective set management blocks until the change is agreed by every rank.
 *  - Names: each op carries a name, unique among this rank's ops in flight, identical across
 *    ranks for the same logical op (1..1024 bytes of UTF-8, no NUL). NULL or "" is accepted only
 *    where noted (barrier, join). A grouped allreduce's members are named "<name>.<index>", so
 *    its name may be at most 1024 - len(".<n-1>") bytes. "__barrier", "__join",
 *    "__process_set.add" and "__process_set.remove" are kolo's own ops' names, reserved.
 */
#ifndef KOLO_H_
#define KOLO_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(KOLO_BUILDING_LIBRARY)
#define KOLO_API __attribute__((visibility("default")))
#else
#define KOLO_API
#endif

/* ---- status codes (mirror kolo::ErrorCode) ---------------------------------------------- */
typedef enum {
  KOLO_OK = 0,
  KOLO_ERR_INVALID_ARGUMENT = 1,
  KOLO_ERR_MISMATCH = 2,
  KOLO_ERR_DUPLICATE_NAME = 3,
  KOLO_ERR_TIMEOUT = 4,
  KOLO_ERR_PEER_LOST = 5,
  KOLO_ERR_ABORTED = 6,
  KOLO_ERR_SHUTDOWN = 7,
  KOLO_ERR_NOT_INITIALIZED = 8,
  KOLO_ERR_UNSUPPORTED = 9,
  KOLO_ERR_STALLED = 10,
  KOLO_ERR_INTERNAL = 11,
  KOLO_ERR_IO = 12,
  KOLO_ERR_JOINED = 13
} kolo_status_t;

/* ---- data types and reduction ops (mirror kolo::DataType / kolo::ReduceOp) -------------- */
typedef enum {
  KOLO_UINT8 = 0,
  KOLO_INT8 = 1,
  KOLO_UINT16 = 2,
  KOLO_INT16 = 3,
  KOLO_INT32 = 4,
  KOLO_INT64 = 5,
  KOLO_FLOAT16 = 6,
  KOLO_BFLOAT16 = 7,
  KOLO_FLOAT32 = 8,
  KOLO_FLOAT64 = 9,
  KOLO_BOOL = 10
} kolo_dtype_t;

typedef enum {
  KOLO_SUM = 0,
  KOLO_AVERAGE = 1,
  KOLO_MIN = 2,
  KOLO_MAX = 3,
  KOLO_PRODUCT = 4,
  /* Adaptive summation (Horovod's Adasum): allreduce / grouped allreduce of float16, bfloat16,
     float32 and float64 host tensors only; any rank count. See README "Adasum". */
  KOLO_ADASUM = 5
} kolo_reduce_op_t;
#define KOLO_OP_ADASUM KOLO_ADASUM /* the spelling used in the Adasum issue */

#define KOLO_MAX_DIMS 16
#define KOLO_CPU_DEVICE (-1)
#define KOLO_GLOBAL_PROCESS_SET 0

/* A dense, contiguous (row-major) tensor. Not owned by kolo. */
typedef struct {
  void* data;            /* may be NULL only when the tensor has zero elements */
  kolo_dtype_t dtype;
  int32_t ndim;          /* 0..KOLO_MAX_DIMS; 0 = scalar */
  const int64_t* shape;  /* ndim entries, each >= 0 */
  int32_t device;        /* KOLO_CPU_DEVICE or a CUDA device ordinal */
  void* stream;          /* CUDA: the producer's cudaStream_t (NULL = default stream) */
} kolo_tensor_t;

typedef int64_t kolo_handle_t; /* > 0 when valid */

/* Called exactly once when the op completes, always from kolo's own thread, after the round
 * that completed it: never inside a round, never on the submitting thread (even when the op
 * completed before the submission returned), never on a thread inside kolo_handle_wait (such a
 * thread may run the rounds that complete other ops, and may hold locks a callback takes; while
 * a callback waits for such a lock, the waiter runs the rounds it needs itself, unless
 * KOLO_CALLER_ROUNDS=0). Only after kolo_shutdown, with no kolo thread left, does it run on the
 * thread that attached it. The op's status and output are readable inside the callback
 * (kolo_handle_status, _output); kolo_handle_wait and kolo_handle_poll report the op done only
 * once the callback has returned, so a caller may free cb_user right after its wait. Should
 * not block for long (callbacks run one after another on one thread): it may submit ops, call
 * kolo_handle_poll, _status, _output, _release and kolo_handle_wait on its own handle; a wait
 * for another op that is not done, kolo_add_process_set / kolo_remove_process_set and
 * kolo_shutdown return KOLO_ERR_INVALID_ARGUMENT there at once (kolo's thread would wait for
 * itself). kolo_shutdown waits for a callback that is running to return (it ends kolo's thread):
 * do not call it while holding a lock that a callback of a pending op takes. */
typedef void (*kolo_callback_t)(kolo_handle_t handle, kolo_status_t status, void* user);

/* Output allocator for ops whose output size is known only after negotiation (allgather,
 * alltoall, reducescatter). Called once from the kolo thread with the output's shape; returns
 * memory of at least bytes bytes that stays valid until the caller releases it, or NULL to fail
 * the op with KOLO_ERR_INVALID_ARGUMENT (on this rank only: the collective still runs, into a
 * scratch buffer here, so the other ranks get their results). Pass NULL as allocator to let the handle own the
 * output (read it with kolo_handle_output; freed by kolo_handle_release). For an input on a
 * CUDA device the allocator must return memory on that device. */
typedef void* (*kolo_alloc_fn)(void* user, size_t bytes, int32_t ndim, const int64_t* shape);

/* ---- lifecycle ------------------------------------------------------------------------------ */
KOLO_API int kolo_init(void);          /* again after shutdown works; twice: KOLO_OK, no-op */
KOLO_API int kolo_shutdown(void);      /* idempotent; pending ops fail with the cause */
/* 1 or 0; 0 in a child fork()ed after init (a DataLoader worker): the parent's runtime does not
 * run there, and its ops fail saying so, while the topology below keeps the parent's values
 * (as Horovod's forked workers: hvd.rank() shards their data). */
KOLO_API int kolo_is_initialized(void);
KOLO_API const char* kolo_last_error(void);
KOLO_API const char* kolo_status_string(int status); /* "PEER_LOST", ... */
KOLO_API const char* kolo_version(void);

/* ---- topology (-1 before init; the parent's values in a forked child) ------------------------ */
KOLO_API int kolo_rank(void);
KOLO_API int kolo_size(void);
KOLO_API int kolo_local_rank(void);
KOLO_API int kolo_local_size(void);
KOLO_API int kolo_cross_rank(void);
KOLO_API int kolo_cross_size(void);

/* ---- what was built / what is in use (1 or 0) --------------------------------------------- */
KOLO_API int kolo_mpi_built(void);
KOLO_API int kolo_gloo_built(void);
/* NCCL_VERSION_CODE of the NCCL headers kolo was built against (e.g. 22809 for 2.28.9), or 0. */
KOLO_API int kolo_nccl_built(void);
KOLO_API int kolo_cuda_built(void);
KOLO_API int kolo_mpi_enabled(void);  /* the job was set up over MPI (also under shm) */
KOLO_API int kolo_gloo_enabled(void); /* the job was set up over Gloo (also under shm) */
/* NCCL carries CUDA tensors: a device is visible and KOLO_GPU_OPERATIONS is not "host" (0 on
 * the host-staged path, which a build without NCCL always takes). */
KOLO_API int kolo_nccl_enabled(void);
/* The data transport: "shm" (ranks on one host, over MPI or Gloo), "mpi", "gloo", "loopback"
 * (a job of one); "" before init. */
KOLO_API const char* kolo_transport_name(void);

/* ---- collectives (all asynchronous; see the contract at the top) --------------------------- */
/* output == NULL or output->data == input->data: in place. Otherwise output must match input's
 * dtype, shape and device. prescale multiplies the input before, postscale the result after
 * the reduction; AVERAGE divides by the set size after postscale. */
KOLO_API int kolo_allreduce_async(const char* name, const kolo_tensor_t* input,
                                  const kolo_tensor_t* output, kolo_reduce_op_t op,
                                  double prescale, double postscale, int32_t process_set,
                                  kolo_callback_t cb, void* cb_user, kolo_handle_t* handle);

/* n tensors negotiated and completed as one op (one handle); tensor i is named "name.i"
 * internally. outputs may be NULL (all in place). */
KOLO_API int kolo_grouped_allreduce_async(const char* name, int32_t n,
                                          const kolo_tensor_t* inputs,
                                          const kolo_tensor_t* outputs, kolo_reduce_op_t op,
                                          double prescale, double postscale,
                                          int32_t process_set, kolo_callback_t cb,
                                          void* cb_user, kolo_handle_t* handle);

/* Concatenates every rank's input along dimension 0 (dim 0 may differ per rank; the other
 * dimensions must match). */
KOLO_API int kolo_allgather_async(const char* name, const kolo_tensor_t* input,
                                  kolo_alloc_fn alloc, void* alloc_user, int32_t process_set,
                                  kolo_callback_t cb, void* cb_user, kolo_handle_t* handle);

/* In place: root's tensor is copied into every rank's tensor (same dtype and shape). root is a
 * rank of the process set (its index in the set's sorted rank list). */
KOLO_API int kolo_broadcast_async(const char* name, const kolo_tensor_t* tensor, int32_t root,
                                  int32_t process_set, kolo_callback_t cb, void* cb_user,
                                  kolo_handle_t* handle);

/* splits[i] rows of dim 0 go to set rank i (n_splits == set size, sum <= dim 0: as Horovod,
 * rows past the sum are not sent); splits == NULL divides dim 0 evenly (it must be divisible).
 * kolo_handle_received_splits gives the rows received from each rank. */
KOLO_API int kolo_alltoall_async(const char* name, const kolo_tensor_t* input,
                                 const int32_t* splits, int32_t n_splits, kolo_alloc_fn alloc,
                                 void* alloc_user, int32_t process_set, kolo_callback_t cb,
                                 void* cb_user, kolo_handle_t* handle);

/* Reduces across ranks, then rank r keeps rows [offset_r, offset_r + rows_r) of dim 0, where the
 * first (dim0 % size) ranks get one extra row. */
KOLO_API int kolo_reducescatter_async(const char* name, const kolo_tensor_t* input,
                                      kolo_reduce_op_t op, double prescale, double postscale,
                                      kolo_alloc_fn alloc, void* alloc_user, int32_t process_set,
                                      kolo_callback_t cb, void* cb_user, kolo_handle_t* handle);

/* Completes when every rank of the set has called it. */
KOLO_API int kolo_barrier_async(int32_t process_set, kolo_callback_t cb, void* cb_user,
                                kolo_handle_t* handle);

/* This rank has no more data: until every rank joined, it takes part in others' allreduces
 * with zeros (sum, average, Adasum) or the op's identity (min: +inf or the type's largest value,
 * max: -inf or its lowest, product: 1), so it never changes their result beyond counting in an
 * average. Completes when all ranks joined; kolo_handle_join_result gives the last rank to join
 * (the same on every rank). */
KOLO_API int kolo_join_async(kolo_callback_t cb, void* cb_user, kolo_handle_t* handle);

/* ---- refusing an op this rank cannot submit ------------------------------------------------ */
typedef enum {
  KOLO_COLLECTIVE_ALLREDUCE = 0,
  KOLO_COLLECTIVE_GROUPED_ALLREDUCE = 1,
  KOLO_COLLECTIVE_ALLGATHER = 2,
  KOLO_COLLECTIVE_BROADCAST = 3,
  KOLO_COLLECTIVE_ALLTOALL = 4,
  KOLO_COLLECTIVE_REDUCESCATTER = 5
} kolo_collective_t;

/* A check of this rank's own input failed before it could call the collective `op` named `name`
 * (a framework's dtype, layout or argument check) while the set's other ranks do call it. The op
 * goes to negotiation without a tensor, and on every rank of the set it fails with
 * KOLO_ERR_INVALID_ARGUMENT "<op> '<name>': rank R could not submit it: <reason>", instead of
 * the others waiting for this rank until the stall shutdown. The calls above refuse this way
 * themselves when this rank's own tensor, output, scales or splits are wrong. group_size: the
 * member count of a grouped allreduce (its members are "name.0" ...), ignored otherwise.
 * KOLO_OK once sent (after waiting up to a second for the agreed error, so that a retry under
 * the same name works on every rank alike); an error when nothing was sent (not initialized,
 * a bad name or set, the name already in flight on this rank). */
KOLO_API int kolo_refuse(kolo_collective_t op, const char* name, int32_t group_size,
                         int32_t process_set, const char* reason);

/* ---- handles ------------------------------------------------------------------------------------ */
KOLO_API int kolo_handle_poll(kolo_handle_t h, int* done);
/* timeout_seconds < 0 waits without limit (the runtime's own timeouts still apply).
 * Returns the op's status, or KOLO_ERR_TIMEOUT if the op had not completed in time (the op
 * goes on; wait again or release). */
KOLO_API int kolo_handle_wait(kolo_handle_t h, double timeout_seconds);
/* The op's status once done (KOLO_ERR_TIMEOUT while still running is NOT returned here:
 * *status = -1 while running). error_text stays valid until release. */
KOLO_API int kolo_handle_status(kolo_handle_t h, int* status, const char** error_text);
/* Owned output (allocator was NULL): data pointer and shape (up to KOLO_MAX_DIMS entries). For a
 * device op the data is device memory on the input's device. */
KOLO_API int kolo_handle_output(kolo_handle_t h, void** data, int32_t* ndim, int64_t* shape);
/* Device ops (input on a CUDA device): *event receives the cudaEvent_t recorded on kolo's
 * stream after the op's device work, for cudaStreamWaitEvent on a consumer stream; it stays
 * valid until kolo_handle_release. NULL for host ops. The handle must be done (else
 * KOLO_ERR_INVALID_ARGUMENT). By default kolo completes a device handle only after that work
 * finished, so waiting on the event is an ordering guarantee, not a second wait. With
 * KOLO_ASYNC_COMPLETION=1 (or HOROVOD_ENABLE_ASYNC_COMPLETION=1) a device handle completes as
 * soon as its work is queued: the host does not block on the device, and the consumer MUST
 * order its stream after the event (kolo_handle_stream_wait) before it reads the output or
 * writes the input. A device failure found later aborts the runtime: later ops fail with it. */
KOLO_API int kolo_handle_cuda_event(kolo_handle_t h, void** event);
/* Makes `stream` (a cudaStream_t; NULL = the default stream of the op's device) wait for the op's
 * device work: cudaStreamWaitEvent on the completion event above. The host does not block. A
 * no-op for host ops. The handle must be done (else KOLO_ERR_INVALID_ARGUMENT); KOLO_ERR_IO
 * with CUDA's message if CUDA refuses. */
KOLO_API int kolo_handle_stream_wait(kolo_handle_t h, void* stream);
/* alltoall: rows received from each rank (n = set size). */
KOLO_API int kolo_handle_received_splits(kolo_handle_t h, int32_t* splits, int32_t n);
KOLO_API int kolo_handle_join_result(kolo_handle_t h, int32_t* last_joined_rank);
/* Forgets the handle (and frees its owned output). Releasing a running op is allowed: the op
 * completes in the background and its result is dropped. */
KOLO_API int kolo_handle_release(kolo_handle_t h);

/* ---- process sets ---------------------------------------------------------------------------- */
/* Collective over ALL ranks (every rank passes the same sorted list). id 0 is the global set;
 * new ids are deterministic (1, 2, ... in creation order, never reused). */
KOLO_API int kolo_add_process_set(const int32_t* ranks, int32_t n, int32_t* id);
KOLO_API int kolo_remove_process_set(int32_t id);
/* Size of the set, this rank's index in it (-1 if not a member). */
KOLO_API int kolo_process_set_size(int32_t id, int32_t* size);
KOLO_API int kolo_process_set_rank(int32_t id, int32_t* rank);
/* Writes up to cap ranks; *n = set size. */
KOLO_API int kolo_process_set_ranks(int32_t id, int32_t* ranks, int32_t cap, int32_t* n);

/* ---- timeline --------------------------------------------------------------------------------- */
KOLO_API int kolo_start_timeline(const char* path, int mark_cycles);
KOLO_API int kolo_stop_timeline(void);

#ifdef __cplusplus
}
#endif

#endif /* KOLO_H_ */
