# SPDX-License-Identifier: Apache-2.0
"""Loads libkolo.so and declares the C API of bindings/c/kolo.h for ctypes.

Where the library is looked for, in order:
  1. $KOLO_LIBRARY (a path to the .so; an error if it does not exist),
  2. this package's own folder (kolo/libkolo.so; the CMake install copies it there),
  3. build trees next to the source checkout: for each folder above this file,
     <folder>/build*/bindings/c/libkolo.so (the most recently built one wins),
  4. ctypes.util.find_library("kolo") and the usual system library folders.
An ImportError lists every place that was tried.

Every function is declared with argtypes/restype. The library is opened with ctypes.CDLL, so
every call (kolo_handle_wait and kolo_init in particular) releases the GIL while it runs.
No callbacks or allocators are ever passed from Python: the kolo threads never call into the
interpreter.
"""

import ctypes
import ctypes.util
import glob
import os

# ---- constants mirrored from kolo.h ---------------------------------------------------------
OK = 0
ERR_INVALID_ARGUMENT = 1
ERR_MISMATCH = 2
ERR_DUPLICATE_NAME = 3
ERR_TIMEOUT = 4
ERR_PEER_LOST = 5
ERR_ABORTED = 6
ERR_SHUTDOWN = 7
ERR_NOT_INITIALIZED = 8
ERR_UNSUPPORTED = 9
ERR_STALLED = 10
ERR_INTERNAL = 11
ERR_IO = 12
ERR_JOINED = 13

UINT8, INT8, UINT16, INT16, INT32, INT64 = 0, 1, 2, 3, 4, 5
FLOAT16, BFLOAT16, FLOAT32, FLOAT64, BOOL = 6, 7, 8, 9, 10

C_SUM, C_AVERAGE, C_MIN, C_MAX, C_PRODUCT, C_ADASUM = 0, 1, 2, 3, 4, 5

# kolo_collective_t (kolo_refuse)
(COLL_ALLREDUCE, COLL_GROUPED_ALLREDUCE, COLL_ALLGATHER, COLL_BROADCAST, COLL_ALLTOALL,
 COLL_REDUCESCATTER) = 0, 1, 2, 3, 4, 5

MAX_DIMS = 16
CPU_DEVICE = -1
GLOBAL_PROCESS_SET = 0


class KoloTensor(ctypes.Structure):
    """kolo_tensor_t. Assigning a ctypes array to `shape` keeps the array alive with the struct."""

    _fields_ = [
        ("data", ctypes.c_void_p),
        ("dtype", ctypes.c_int),
        ("ndim", ctypes.c_int32),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("device", ctypes.c_int32),
        ("stream", ctypes.c_void_p),
    ]


# KoloTensor.shape's array type per dimension count (one element for a 0-d tensor), made once:
# describe() builds one for every tensor of every op.
_SHAPE_TYPES = [ctypes.c_int64 * max(1, n) for n in range(MAX_DIMS + 1)]


def shape_array(shape):
    """The ctypes int64 array of `shape` (at most MAX_DIMS entries) for KoloTensor.shape."""
    return _SHAPE_TYPES[len(shape)](*shape)


Handle = ctypes.c_int64
CallbackFn = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int, ctypes.c_void_p)
AllocFn = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int32,
                           ctypes.POINTER(ctypes.c_int64))

_i32 = ctypes.c_int32
_int = ctypes.c_int
_dbl = ctypes.c_double
_vp = ctypes.c_void_p
_cp = ctypes.c_char_p
_tp = ctypes.POINTER(KoloTensor)
_hp = ctypes.POINTER(Handle)
_i32p = ctypes.POINTER(ctypes.c_int32)
_intp = ctypes.POINTER(ctypes.c_int)
_i64p = ctypes.POINTER(ctypes.c_int64)

# name -> (restype, argtypes)
_SIGNATURES = {
    "kolo_init": (_int, []),
    "kolo_shutdown": (_int, []),
    "kolo_is_initialized": (_int, []),
    "kolo_last_error": (_cp, []),
    "kolo_status_string": (_cp, [_int]),
    "kolo_version": (_cp, []),
    "kolo_rank": (_int, []),
    "kolo_size": (_int, []),
    "kolo_local_rank": (_int, []),
    "kolo_local_size": (_int, []),
    "kolo_cross_rank": (_int, []),
    "kolo_cross_size": (_int, []),
    "kolo_mpi_built": (_int, []),
    "kolo_gloo_built": (_int, []),
    "kolo_nccl_built": (_int, []),
    "kolo_cuda_built": (_int, []),
    "kolo_mpi_enabled": (_int, []),
    "kolo_gloo_enabled": (_int, []),
    "kolo_nccl_enabled": (_int, []),
    "kolo_transport_name": (_cp, []),
    "kolo_allreduce_async": (_int, [_cp, _tp, _tp, _int, _dbl, _dbl, _i32, CallbackFn, _vp, _hp]),
    "kolo_grouped_allreduce_async": (
        _int, [_cp, _i32, _tp, _tp, _int, _dbl, _dbl, _i32, CallbackFn, _vp, _hp]),
    "kolo_allgather_async": (_int, [_cp, _tp, AllocFn, _vp, _i32, CallbackFn, _vp, _hp]),
    "kolo_broadcast_async": (_int, [_cp, _tp, _i32, _i32, CallbackFn, _vp, _hp]),
    "kolo_alltoall_async": (
        _int, [_cp, _tp, _i32p, _i32, AllocFn, _vp, _i32, CallbackFn, _vp, _hp]),
    "kolo_reducescatter_async": (
        _int, [_cp, _tp, _int, _dbl, _dbl, AllocFn, _vp, _i32, CallbackFn, _vp, _hp]),
    "kolo_barrier_async": (_int, [_i32, CallbackFn, _vp, _hp]),
    "kolo_join_async": (_int, [CallbackFn, _vp, _hp]),
    "kolo_refuse": (_int, [_int, _cp, _i32, _i32, _cp]),
    "kolo_handle_poll": (_int, [Handle, _intp]),
    "kolo_handle_wait": (_int, [Handle, _dbl]),
    "kolo_handle_status": (_int, [Handle, _intp, ctypes.POINTER(_cp)]),
    "kolo_handle_output": (_int, [Handle, ctypes.POINTER(_vp), _i32p, _i64p]),
    "kolo_handle_stream_wait": (_int, [Handle, _vp]),
    "kolo_handle_received_splits": (_int, [Handle, _i32p, _i32]),
    "kolo_handle_join_result": (_int, [Handle, _i32p]),
    "kolo_handle_release": (_int, [Handle]),
    "kolo_add_process_set": (_int, [_i32p, _i32, _i32p]),
    "kolo_remove_process_set": (_int, [_i32]),
    "kolo_process_set_size": (_int, [_i32, _i32p]),
    "kolo_process_set_rank": (_int, [_i32, _i32p]),
    "kolo_process_set_ranks": (_int, [_i32, _i32p, _i32, _i32p]),
    "kolo_start_timeline": (_int, [_cp, _int]),
    "kolo_stop_timeline": (_int, []),
}

NO_CALLBACK = CallbackFn()  # a NULL function pointer
NO_ALLOC = AllocFn()


def _candidates():
    """Yields (path, origin) pairs in search order; origin explains the ImportError."""
    env = os.environ.get("KOLO_LIBRARY")
    if env:
        yield env, "$KOLO_LIBRARY"
        return
    here = os.path.dirname(os.path.abspath(__file__))
    yield os.path.join(here, "libkolo.so"), "package folder"
    folder = os.path.dirname(here)
    seen = set()
    while folder not in seen:
        seen.add(folder)
        found = glob.glob(os.path.join(folder, "build*", "bindings", "c", "libkolo.so"))
        # A build folder being rebuilt can hold a dangling symlink: skip what cannot be stat'ed.
        found = [p for p in found if os.path.exists(p)]
        for path in sorted(found, key=os.path.getmtime, reverse=True):
            yield path, "build tree"
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    name = ctypes.util.find_library("kolo")
    if name:
        yield name, "ctypes.util.find_library"
    for d in ("/usr/local/lib", "/usr/lib", "/usr/local/lib64", "/usr/lib/x86_64-linux-gnu",
              "/usr/lib/aarch64-linux-gnu"):
        yield os.path.join(d, "libkolo.so"), "system folder"


def _open():
    tried = []
    for path, origin in _candidates():
        is_file = os.path.sep in path
        if is_file and not os.path.exists(path):
            tried.append("%s (%s: not found)" % (path, origin))
            continue
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            tried.append("%s (%s: %s)" % (path, origin, e))
    raise ImportError(
        "kolo: cannot load libkolo.so. Build it (ninja -C <build> kolo) and set KOLO_LIBRARY "
        "to its path, or install kolo with CMake. Tried:\n  " + "\n  ".join(tried))


def _declare(lib, where):
    missing = []
    for name, (restype, argtypes) in _SIGNATURES.items():
        try:
            fn = getattr(lib, name)
        except AttributeError:
            missing.append(name)
            continue
        fn.restype = restype
        fn.argtypes = argtypes
    if missing:
        raise ImportError("kolo: %s lacks the C API functions %s (an older or foreign build?)"
                          % (where, ", ".join(missing)))


lib, path = _open()
_declare(lib, path)


def last_error():
    """This thread's last error message from the C API (a str, possibly empty)."""
    msg = lib.kolo_last_error()
    return msg.decode("utf-8", "replace") if msg else ""


def status_string(code):
    s = lib.kolo_status_string(code)
    return s.decode("utf-8", "replace") if s else "STATUS_%d" % code
