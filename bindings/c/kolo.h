// SPDX-License-Identifier: Apache-2.0
/* `kolo.h` is the C API of kolo (C99). It is the one stable boundary of the library.
 *
 * The contract for every function:
 *
 * - Return value: a `kolo_status_t` (`KOLO_OK` == 0), unless the function's documentation says
 *   otherwise. No function aborts the process. After a failure, `kolo_last_error()` returns a
 *   message for this thread. The message stays valid until the next kolo call on the same thread.
 * - Thread safety: after `kolo_init`, every function may be called from any thread.
 * - Ownership: tensors passed to an op are borrowed. The caller keeps their memory alive and
 *   unmodified until the op's handle completes. Handles are integers that the runtime owns until
 *   `kolo_handle_release`. A released, unknown or forged handle gives `KOLO_ERR_INVALID_ARGUMENT`.
 * - Blocking: the `*_async` functions check their arguments on the calling thread and return at
 *   once. The exception is input refused for this rank alone: the call waits up to a second,
 *   while the refusal fails the op on the other ranks too. Such input is a scalar to gather,
 *   alltoall splits that do not fit, a broadcast root out of range, a NULL or malformed tensor,
 *   an output that does not match, or a non-finite scale. `kolo_refuse` waits the same way.
 *   `kolo_handle_wait` blocks up to its timeout. `kolo_init` blocks until every rank has joined
 *   the rendezvous (`KOLO_START_TIMEOUT`). Collective process-set changes block until every rank
 *   agrees on the change.
 * - Names: each op carries a name. It is unique among this rank's ops in flight. It is identical
 *   across ranks for the same logical op. A name is 1..1024 bytes of UTF-8 with no NUL. NULL or
 *   "" is accepted only where noted (barrier, join). A grouped allreduce names its members
 *   `<name>.<index>`, so its name may be at most 1024 - len(`.<n-1>`) bytes. The names
 *   `__barrier`, `__join`, `__process_set.add` and `__process_set.remove` are reserved for
 *   kolo's own ops.
 */
#ifndef KOLO_H_
#define KOLO_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Constants ---------------------------------------------------------------------------- */
/** Marks each exported function. It is empty in user code. The library's own build hides
 * every other symbol and sets this one to default visibility. */
#if defined(KOLO_BUILDING_LIBRARY)
#define KOLO_API __attribute__((visibility("default")))
#else
#define KOLO_API
#endif

/* ---- Status codes ------------------------------------------------------------------------- */
/** The result of a kolo function. The values mirror `kolo::ErrorCode` and are part of the ABI.
 * `kolo_status_string` gives each value's name. */
typedef enum {
  /** Success. */
  KOLO_OK = 0,
  /** Bad input, found on the calling thread: a NULL pointer, a bad name, an unknown handle or
   * process set, or a query on a handle whose op still runs. An op refused on one rank fails
   * with this code on every rank of its set. A blocking call inside a completion callback also
   * returns it. */
  KOLO_ERR_INVALID_ARGUMENT = 1,
  /** Ranks disagree about an op: its type, dtype, shape, reduce op, scales, root, device kind,
   * group size or process-set rank list. The message names the first difference and the ranks
   * that differ. */
  KOLO_ERR_MISMATCH = 2,
  /** An op with this name is already in flight on this rank; the submitting call returns it at
   * once. It also comes back while a refused op of that name still waits for the other ranks,
   * and for a second process-set change while one is in flight on this rank. */
  KOLO_ERR_DUPLICATE_NAME = 3,
  /** A wait passed its deadline. `kolo_handle_wait` returns it when the op is still running (the
   * op goes on). `kolo_init` returns it when the rendezvous passes `KOLO_START_TIMEOUT`. A
   * transport wait past its limit gives it too. */
  KOLO_ERR_TIMEOUT = 4,
  /** A peer died, closed its connection or stopped answering. */
  KOLO_ERR_PEER_LOST = 5,
  /** The runtime aborted after an earlier failure. The message holds the cause. */
  KOLO_ERR_ABORTED = 6,
  /** The runtime shut down before the op completed, on this rank or on another. The message
   * names who shut down. */
  KOLO_ERR_SHUTDOWN = 7,
  /** Called before `kolo_init`, after `kolo_shutdown`, or in a child process forked after
   * `kolo_init`. */
  KOLO_ERR_NOT_INITIALIZED = 8,
  /** The build, the transport or the device lacks the feature. Examples: a CUDA tensor in a
   * build without CUDA and NCCL, or Adasum on a CUDA tensor. */
  KOLO_ERR_UNSUPPORTED = 9,
  /** The stall inspector failed the op: some ranks did not submit it within
   * `KOLO_STALL_SHUTDOWN_TIME_SECONDS` (default 1800; 0 never fails an op). The message names
   * the missing ranks. */
  KOLO_ERR_STALLED = 10,
  /** A bug in kolo, such as an unexpected C++ exception caught at the API boundary. */
  KOLO_ERR_INTERNAL = 11,
  /** A file or socket error. Examples: a timeline file that cannot be opened, or CUDA refusing
   * `kolo_handle_stream_wait`. */
  KOLO_ERR_IO = 12,
  /** The op is not allowed while a rank has joined (`kolo_join_async`). Only allreduce and
   * barrier run then. Allgather, broadcast, alltoall, reducescatter and process-set changes fail
   * with this code. */
  KOLO_ERR_JOINED = 13
} kolo_status_t;

/* ---- Data types and reduction ops --------------------------------------------------------- */
/** The element type of a tensor. The values mirror `kolo::DataType`. */
typedef enum {
  KOLO_UINT8 = 0,    /**< Unsigned 8-bit integer. */
  KOLO_INT8 = 1,     /**< Signed 8-bit integer. */
  KOLO_UINT16 = 2,   /**< Unsigned 16-bit integer. */
  KOLO_INT16 = 3,    /**< Signed 16-bit integer. */
  KOLO_INT32 = 4,    /**< Signed 32-bit integer. */
  KOLO_INT64 = 5,    /**< Signed 64-bit integer. */
  KOLO_FLOAT16 = 6,  /**< IEEE 754 half precision. */
  KOLO_BFLOAT16 = 7, /**< bfloat16: 8 exponent bits, 7 mantissa bits. */
  KOLO_FLOAT32 = 8,  /**< IEEE 754 single precision. */
  KOLO_FLOAT64 = 9,  /**< IEEE 754 double precision. */
  KOLO_BOOL = 10     /**< Boolean, one byte per element. */
} kolo_dtype_t;

/** The reduction of an allreduce, grouped allreduce or reducescatter. The values mirror
 * `kolo::ReduceOp`. */
typedef enum {
  KOLO_SUM = 0,     /**< Elementwise sum. */
  KOLO_AVERAGE = 1, /**< Sum divided by the process set's size, after the postscale. */
  KOLO_MIN = 2,     /**< Elementwise minimum. */
  KOLO_MAX = 3,     /**< Elementwise maximum. */
  KOLO_PRODUCT = 4, /**< Elementwise product. */
  /** Adaptive summation (Horovod's Adasum). Allreduce and grouped allreduce only, on float16,
   * bfloat16, float32 and float64 host tensors. Any rank count works. See docs/adasum.md. */
  KOLO_ADASUM = 5
} kolo_reduce_op_t;
/** Another spelling of `KOLO_ADASUM`, with the same value. */
#define KOLO_OP_ADASUM KOLO_ADASUM

/* ---- Constants ---------------------------------------------------------------------------- */
/** The most dimensions a tensor may have (`kolo_tensor_t.ndim`). */
#define KOLO_MAX_DIMS 16
/** The `device` value of a host (CPU) tensor. */
#define KOLO_CPU_DEVICE (-1)
/** The id of the global process set, which holds every rank. */
#define KOLO_GLOBAL_PROCESS_SET 0

/* ---- Types -------------------------------------------------------------------------------- */
/** A dense, contiguous (row-major) tensor. kolo does not own it. */
typedef struct {
  void* data;            /**< The elements. May be NULL only when the tensor has zero elements. */
  kolo_dtype_t dtype;    /**< The element type. */
  int32_t ndim;          /**< The number of dimensions: 0..`KOLO_MAX_DIMS`; 0 is a scalar. */
  const int64_t* shape;  /**< `ndim` sizes, each >= 0. */
  int32_t device;        /**< `KOLO_CPU_DEVICE`, or a CUDA device ordinal. */
  void* stream;          /**< CUDA: the producer's `cudaStream_t` (NULL: the default stream). */
} kolo_tensor_t;

/** An op's handle: an integer, > 0 when valid. The runtime owns it until
 * `kolo_handle_release`. */
typedef int64_t kolo_handle_t;

/** Called exactly once when the op completes, with its handle, its status and `cb_user`.
 *
 * Which thread runs it: always kolo's own thread, after the round that completed the op. It
 * never runs inside a round. It never runs on the submitting thread, even when the op completed
 * before the submission returned. It never runs on a thread inside `kolo_handle_wait`. Such a
 * thread may run the rounds that complete other ops, and may hold locks a callback takes. While
 * a callback waits for such a lock, the waiter runs the rounds it needs itself, unless
 * `KOLO_CALLER_ROUNDS=0`. Only after `kolo_shutdown`, with no kolo thread left, does the callback
 * run on the thread that attached it.
 *
 * What it may do: the op's status and output are readable inside it (`kolo_handle_status`,
 * `kolo_handle_output`). `kolo_handle_wait` and `kolo_handle_poll` report the op done only once
 * the callback has returned, so a caller may free `cb_user` right after its wait. Callbacks run
 * one after another on one thread, so a callback should not block for long. It may submit ops.
 * It may call `kolo_handle_poll`, `kolo_handle_status`, `kolo_handle_output`,
 * `kolo_handle_release` and `kolo_handle_wait` on its own handle. Some calls return
 * `KOLO_ERR_INVALID_ARGUMENT` there at once, because kolo's thread would wait for itself: a wait
 * for another op that is not done, `kolo_add_process_set`, `kolo_remove_process_set` and
 * `kolo_shutdown`.
 *
 * `kolo_shutdown` waits for a running callback to return, because it ends kolo's thread. Do not
 * call it while holding a lock that a callback of a pending op takes. */
typedef void (*kolo_callback_t)(kolo_handle_t handle, kolo_status_t status, void* user);

/** Allocates the output of an op whose output size is known only after negotiation: allgather,
 * alltoall and reducescatter.
 *
 * kolo calls it once, from the kolo thread, with `alloc_user`, the size in bytes and the
 * output's shape. It returns memory of at least `bytes` bytes that stays valid until the caller
 * releases it. Returning NULL fails the op with `KOLO_ERR_INVALID_ARGUMENT` on this rank only.
 * The collective still runs here, into a scratch buffer, so the other ranks get their results.
 * For an input on a CUDA device, the allocator must return memory on that device.
 *
 * Pass NULL as the allocator to let the handle own the output. Read it with
 * `kolo_handle_output`; `kolo_handle_release` frees it. */
typedef void* (*kolo_alloc_fn)(void* user, size_t bytes, int32_t ndim, const int64_t* shape);

/* ---- Lifecycle ---------------------------------------------------------------------------- */
/** Starts the runtime and joins the rendezvous of all ranks. It blocks until every rank has
 * joined, at most `KOLO_START_TIMEOUT` seconds (`KOLO_ERR_TIMEOUT`). Settings come from the
 * environment; a malformed value gives `KOLO_ERR_INVALID_ARGUMENT`. A second call while
 * initialized returns `KOLO_OK` and does nothing. A call after `kolo_shutdown` starts a new
 * runtime. In a child forked after `kolo_init`, it starts a runtime of the child's own. */
KOLO_API int kolo_init(void);
/** Stops the runtime. Pending ops fail with the cause. It is idempotent: without a runtime it
 * returns `KOLO_OK`. In a child forked after `kolo_init` it does nothing, since the runtime is
 * the parent's. Inside a completion callback it returns `KOLO_ERR_INVALID_ARGUMENT`. */
KOLO_API int kolo_shutdown(void);
/** Returns 1 when the runtime runs in this process, else 0. It returns 0 in a child forked after
 * init, such as a DataLoader worker. The parent's runtime does not run there, and the child's
 * ops fail saying so. The topology functions keep the parent's values there, as Horovod's forked
 * workers do: `hvd.rank()` shards their data. */
KOLO_API int kolo_is_initialized(void);
/** Returns the message of the last failed call on this thread, as `CODE: message` (for example
 * `PEER_LOST: rank 2 closed its connection`). It is "" before any failure, and a successful
 * call does not clear it. It stays valid until the next kolo call on this thread. Never NULL. */
KOLO_API const char* kolo_last_error(void);
/** Returns the name of a status code: "OK", "PEER_LOST", and so on; "UNKNOWN" for a value that
 * is not a `kolo_status_t`. The string is static. */
KOLO_API const char* kolo_status_string(int status);
/** Returns kolo's version string, such as "0.1.0". The string is static. */
KOLO_API const char* kolo_version(void);

/* ---- Topology ----------------------------------------------------------------------------- */
/** Returns this process's rank in the job, 0..size-1. Like every topology function, it returns
 * -1 before `kolo_init` and after `kolo_shutdown`, and the parent's value in a child forked after
 * init. */
KOLO_API int kolo_rank(void);
/** Returns the number of ranks in the job; -1 without a runtime. */
KOLO_API int kolo_size(void);
/** Returns this rank's index among the ranks on its host, ordered by rank; -1 without a
 * runtime. */
KOLO_API int kolo_local_rank(void);
/** Returns the number of ranks on this rank's host; -1 without a runtime. */
KOLO_API int kolo_local_size(void);
/** Returns this rank's index among the ranks that share its local rank, ordered by rank. With
 * the usual placement, that is the index of its host. -1 without a runtime. These are Horovod's
 * definitions. */
KOLO_API int kolo_cross_rank(void);
/** Returns the number of ranks that share this rank's local rank. With the usual placement,
 * that is the number of hosts. -1 without a runtime. */
KOLO_API int kolo_cross_size(void);

/* ---- Build and capability queries --------------------------------------------------------- */
/** Returns 1 if kolo was built with MPI, else 0. */
KOLO_API int kolo_mpi_built(void);
/** Returns 1 if kolo was built with Gloo, else 0. */
KOLO_API int kolo_gloo_built(void);
/** Returns the `NCCL_VERSION_CODE` of the NCCL headers kolo was built against, or 0 without
 * NCCL. For example, 22809 means NCCL 2.28.9. */
KOLO_API int kolo_nccl_built(void);
/** Returns 1 if kolo was built with CUDA, else 0. */
KOLO_API int kolo_cuda_built(void);
/** Returns 1 if the job was set up over MPI, also when the data goes over shared memory; else
 * 0. */
KOLO_API int kolo_mpi_enabled(void);
/** Returns 1 if the job was set up over Gloo, also when the data goes over shared memory; else
 * 0. */
KOLO_API int kolo_gloo_enabled(void);
/** Returns 1 when NCCL carries CUDA tensors: a device is visible and `KOLO_GPU_OPERATIONS` is
 * not "host". It returns 0 on the host-staged path, which a build without NCCL always takes. */
KOLO_API int kolo_nccl_enabled(void);
/** Returns the data transport's name. It is "shm" for ranks on one host (over MPI or Gloo),
 * "mpi", "gloo", or "loopback" for a job of one. It is "" before init. */
KOLO_API const char* kolo_transport_name(void);

/* ---- Collectives -------------------------------------------------------------------------- */
/** Reduces `input` across the ranks of `process_set` with `op`. All collectives are
 * asynchronous: see the contract at the top.
 *
 * `output` NULL, or `output->data` equal to `input->data`, works in place. Otherwise `output`
 * must match the input's dtype, shape and device. `prescale` multiplies the input before the
 * reduction, `postscale` the result after it. `KOLO_AVERAGE` divides by the set size after the
 * postscale. `cb` (may be NULL) is called with `cb_user` on completion; `*handle` receives the
 * op's handle. */
KOLO_API int kolo_allreduce_async(const char* name, const kolo_tensor_t* input,
                                  const kolo_tensor_t* output, kolo_reduce_op_t op,
                                  double prescale, double postscale, int32_t process_set,
                                  kolo_callback_t cb, void* cb_user, kolo_handle_t* handle);

/** Allreduces `n` tensors, negotiated and completed as one op with one handle. Tensor i is named
 * `name.i` internally. `outputs` may be NULL: then all work in place. The other arguments are
 * those of `kolo_allreduce_async`. */
KOLO_API int kolo_grouped_allreduce_async(const char* name, int32_t n,
                                          const kolo_tensor_t* inputs,
                                          const kolo_tensor_t* outputs, kolo_reduce_op_t op,
                                          double prescale, double postscale,
                                          int32_t process_set, kolo_callback_t cb,
                                          void* cb_user, kolo_handle_t* handle);

/** Concatenates every rank's input along dimension 0. Dimension 0 may differ per rank; the
 * other dimensions must match. `alloc` receives the output (see `kolo_alloc_fn`). */
KOLO_API int kolo_allgather_async(const char* name, const kolo_tensor_t* input,
                                  kolo_alloc_fn alloc, void* alloc_user, int32_t process_set,
                                  kolo_callback_t cb, void* cb_user, kolo_handle_t* handle);

/** Copies the root's tensor into every rank's tensor, in place. All ranks pass the same dtype
 * and shape. `root` is a rank of the process set: its index in the set's sorted rank list. */
KOLO_API int kolo_broadcast_async(const char* name, const kolo_tensor_t* tensor, int32_t root,
                                  int32_t process_set, kolo_callback_t cb, void* cb_user,
                                  kolo_handle_t* handle);

/** Sends `splits[i]` rows of dimension 0 to set rank i. `n_splits` equals the set size, and the
 * sum is at most dimension 0. As in Horovod, rows past the sum are not sent. `splits` NULL
 * divides dimension 0 evenly, and it must be divisible. `kolo_handle_received_splits` gives the
 * rows received from each rank. */
KOLO_API int kolo_alltoall_async(const char* name, const kolo_tensor_t* input,
                                 const int32_t* splits, int32_t n_splits, kolo_alloc_fn alloc,
                                 void* alloc_user, int32_t process_set, kolo_callback_t cb,
                                 void* cb_user, kolo_handle_t* handle);

/** Reduces across ranks, then rank r keeps rows [offset_r, offset_r + rows_r) of dimension 0.
 * The first (dim0 % size) ranks get one extra row. */
KOLO_API int kolo_reducescatter_async(const char* name, const kolo_tensor_t* input,
                                      kolo_reduce_op_t op, double prescale, double postscale,
                                      kolo_alloc_fn alloc, void* alloc_user, int32_t process_set,
                                      kolo_callback_t cb, void* cb_user, kolo_handle_t* handle);

/** Completes when every rank of the set has called it. It takes no name. */
KOLO_API int kolo_barrier_async(int32_t process_set, kolo_callback_t cb, void* cb_user,
                                kolo_handle_t* handle);

/** Says that this rank has no more data. Until every rank has joined, this rank takes part in
 * the others' allreduces with a neutral value. That is zeros for sum, average and Adasum. For
 * the other ops it is the identity: +inf or the type's largest value for min, -inf or its lowest
 * for max, 1 for product. So it never changes their result, beyond counting in an average. The
 * op completes when all ranks have joined. `kolo_handle_join_result` then gives the last rank to
 * join, the same on every rank. */
KOLO_API int kolo_join_async(kolo_callback_t cb, void* cb_user, kolo_handle_t* handle);

/* ---- Refusing an op ----------------------------------------------------------------------- */
/** The collective that `kolo_refuse` refuses. */
typedef enum {
  KOLO_COLLECTIVE_ALLREDUCE = 0,         /**< `kolo_allreduce_async`. */
  KOLO_COLLECTIVE_GROUPED_ALLREDUCE = 1, /**< `kolo_grouped_allreduce_async`. */
  KOLO_COLLECTIVE_ALLGATHER = 2,         /**< `kolo_allgather_async`. */
  KOLO_COLLECTIVE_BROADCAST = 3,         /**< `kolo_broadcast_async`. */
  KOLO_COLLECTIVE_ALLTOALL = 4,          /**< `kolo_alltoall_async`. */
  KOLO_COLLECTIVE_REDUCESCATTER = 5      /**< `kolo_reducescatter_async`. */
} kolo_collective_t;

/** Refuses the collective `op` named `name` on this rank, while the set's other ranks do call
 * it. Use it when a check of this rank's own input failed before the call, such as a framework's
 * dtype, layout or argument check.
 *
 * The op goes to negotiation without a tensor. On every rank of the set it fails with
 * `KOLO_ERR_INVALID_ARGUMENT` and the message `<op> '<name>': rank R could not submit it:
 * <reason>`. Without it, the other ranks would wait for this rank until the stall shutdown. The
 * collective calls refuse this way themselves when this rank's tensor, output, scales or splits
 * are wrong.
 *
 * `group_size` is the member count of a grouped allreduce, whose members are `name.0` and so on.
 * It is ignored otherwise. Returns `KOLO_OK` once sent, after waiting up to a second for the
 * agreed error, so that a retry under the same name works alike on every rank. Returns an error
 * when nothing was sent: not initialized, a bad name or set, or the name already in flight on
 * this rank. */
KOLO_API int kolo_refuse(kolo_collective_t op, const char* name, int32_t group_size,
                         int32_t process_set, const char* reason);

/* ---- Handles ------------------------------------------------------------------------------ */
/** Sets `*done` to 1 if the op has completed, else 0. It never blocks. With a callback, the op
 * counts as done only once the callback has returned. `KOLO_ERR_INVALID_ARGUMENT` for a NULL
 * `done` or an unknown handle. */
KOLO_API int kolo_handle_poll(kolo_handle_t h, int* done);
/** Waits for the op and returns its status. `timeout_seconds` < 0 waits without limit; the
 * runtime's own timeouts still apply. A NaN timeout gives `KOLO_ERR_INVALID_ARGUMENT`. Returns
 * `KOLO_ERR_TIMEOUT` if the op had not completed in time. The op goes on: wait again, or release
 * it. */
KOLO_API int kolo_handle_wait(kolo_handle_t h, double timeout_seconds);
/** Reads the op's status once it is done into `*status`; -1 while it runs. It does not return
 * `KOLO_ERR_TIMEOUT` for a running op. `error_text` (may be NULL) receives the error message,
 * "" on success or while running. The text stays valid until the handle is released. */
KOLO_API int kolo_handle_status(kolo_handle_t h, int* status, const char** error_text);
/** Reads the owned output of a done op (one submitted with a NULL allocator): its data pointer
 * and its shape, up to `KOLO_MAX_DIMS` entries. Each out pointer may be NULL. For a device op,
 * the data is device memory on the input's device. A running op gives
 * `KOLO_ERR_INVALID_ARGUMENT`. */
KOLO_API int kolo_handle_output(kolo_handle_t h, void** data, int32_t* ndim, int64_t* shape);
/** For a device op (input on a CUDA device), `*event` receives the `cudaEvent_t` recorded on
 * kolo's stream after the op's device work. Use it for `cudaStreamWaitEvent` on a consumer
 * stream. It stays valid until `kolo_handle_release`. For host ops it is NULL. The handle must
 * be done, else `KOLO_ERR_INVALID_ARGUMENT`.
 *
 * By default, kolo completes a device handle only after that work finished. Waiting on the event
 * is then an ordering guarantee, not a second wait. With `KOLO_ASYNC_COMPLETION=1` (or
 * `HOROVOD_ENABLE_ASYNC_COMPLETION=1`), a device handle completes as soon as its work is queued.
 * The host does not block on the device then. The consumer MUST order its stream after the event
 * (`kolo_handle_stream_wait`) before it reads the output or writes the input. A device failure
 * found later aborts the runtime, and later ops fail with it. */
KOLO_API int kolo_handle_cuda_event(kolo_handle_t h, void** event);
/** Makes `stream` wait for the op's device work, through `cudaStreamWaitEvent` on the completion
 * event of `kolo_handle_cuda_event`. `stream` is a `cudaStream_t`; NULL is the default stream
 * of the op's device. The host does not block. It is a no-op for host ops. The handle must be
 * done, else `KOLO_ERR_INVALID_ARGUMENT`. `KOLO_ERR_IO` with CUDA's message if CUDA refuses. */
KOLO_API int kolo_handle_stream_wait(kolo_handle_t h, void* stream);
/** For a done alltoall, writes the rows received from each rank into `splits`. `n` is the
 * capacity of `splits` and must be at least the set size, else `KOLO_ERR_INVALID_ARGUMENT`. */
KOLO_API int kolo_handle_received_splits(kolo_handle_t h, int32_t* splits, int32_t n);
/** For a done join, sets `*last_joined_rank` to the last rank to join, the same on every rank.
 * `KOLO_ERR_INVALID_ARGUMENT` while the join runs. */
KOLO_API int kolo_handle_join_result(kolo_handle_t h, int32_t* last_joined_rank);
/** Forgets the handle and frees its owned output. Releasing a running op is allowed: the op
 * completes in the background and its result is dropped. An unknown handle gives
 * `KOLO_ERR_INVALID_ARGUMENT`. */
KOLO_API int kolo_handle_release(kolo_handle_t h);

/* ---- Process sets ------------------------------------------------------------------------- */
/** Creates a process set of the `n` ranks in `ranks` and writes its id to `*id`. It is collective
 * over ALL ranks: every rank passes the same sorted list. It blocks until every rank agrees. New
 * ids are deterministic: 1, 2, ... in creation order, never reused. Id 0 is the global set. A
 * NULL `ranks` or `id`, or `n` <= 0, gives `KOLO_ERR_INVALID_ARGUMENT`. */
KOLO_API int kolo_add_process_set(const int32_t* ranks, int32_t n, int32_t* id);
/** Removes the process set `id`. It is collective over all ranks and blocks until every rank
 * agrees. Ops pending on the set fail. The global set (id 0) cannot be removed:
 * `KOLO_ERR_INVALID_ARGUMENT`. */
KOLO_API int kolo_remove_process_set(int32_t id);
/** Writes the number of ranks in set `id` to `*size`. An unknown set gives
 * `KOLO_ERR_INVALID_ARGUMENT`. */
KOLO_API int kolo_process_set_size(int32_t id, int32_t* size);
/** Writes this rank's index in set `id` to `*rank`: -1 if it is not a member. */
KOLO_API int kolo_process_set_rank(int32_t id, int32_t* rank);
/** Writes up to `cap` of the set's ranks, in sorted order, to `ranks`; `*n` receives the set
 * size. */
KOLO_API int kolo_process_set_ranks(int32_t id, int32_t* ranks, int32_t cap, int32_t* n);

/* ---- Timeline ----------------------------------------------------------------------------- */
/** Starts writing the timeline, a Chrome trace-event JSON file, to `path`; see docs/timeline.md.
 * Rank 0 writes it. With `KOLO_TIMELINE_ALL_RANKS=1`, every rank writes its own file, with
 * `.<rank>` before the file's extension, or at the end. `mark_cycles` nonzero adds a
 * `CYCLE_START` event per coordinator round. Starting the active file again keeps its events
 * and only takes the new `mark_cycles`. Another active file is stopped first. An empty path
 * gives `KOLO_ERR_INVALID_ARGUMENT`. A file that cannot be opened, or that another timeline
 * writes, gives `KOLO_ERR_IO`. */
KOLO_API int kolo_start_timeline(const char* path, int mark_cycles);
/** Stops the timeline and closes its file, a valid JSON trace. `KOLO_OK` when none is active. */
KOLO_API int kolo_stop_timeline(void);

#ifdef __cplusplus
}
#endif

#endif /* KOLO_H_ */
