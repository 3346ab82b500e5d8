# SPDX-License-Identifier: Apache-2.0
"""`kolorun --check-build` (-cb): what this kolo was built with, in horovodrun's layout.

horovodrun --check-build prints a fixed block (version line, then "Available Frameworks",
"Available Controllers" and "Available Tensor Operations", one "[X] Name" or "[ ] Name" line
each) that scripts and people grep; kolorun prints the same block with kolo's answers:

  - Frameworks: PyTorch when this interpreter can import torch (kolo.torch needs nothing
    else: it is pure Python over libkolo.so); TensorFlow and MXNet never (kolo has no bindings
    for them).
  - Controllers and tensor operations: what libkolo.so reports (kolo_mpi_built,
    kolo_gloo_built, kolo_nccl_built); DDL and CCL never.

The launcher is standard library only, so the library is opened with ctypes. Where it is
looked for, in order: $KOLO_LIBRARY (when set, only there); next to an importable `kolo` package; build trees above
this package (<dir>/build*/bindings/c/libkolo.so, the newest first); the library folders of an
installed prefix (this package lives in <prefix>/share/kolo); ctypes.util.find_library.
When none loads, the library's rows are printed unchecked and a note on stderr says why.
"""

import ctypes
import ctypes.util
import glob
import importlib.util
import os
import sys

from . import __version__


def _candidates(environ):
    try:
        spec = importlib.util.find_spec("kolo")
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.submodule_search_locations:
        for d in spec.submodule_search_locations:
            yield os.path.join(d, "libkolo.so")
    here = os.path.dirname(os.path.realpath(__file__))
    folder = here
    for _ in range(4):
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        builds = glob.glob(os.path.join(parent, "build*", "bindings", "c", "libkolo.so"))
        builds.sort(key=lambda p: os.path.getmtime(p) if os.path.exists(p) else 0, reverse=True)
        yield from builds
        folder = parent
    prefix = os.path.normpath(os.path.join(here, os.pardir, os.pardir, os.pardir))
    for sub in ("lib", "lib64"):
        yield os.path.join(prefix, sub, "libkolo.so")
        yield from sorted(glob.glob(os.path.join(prefix, sub, "*-linux-gnu", "libkolo.so")))
    name = ctypes.util.find_library("kolo")
    if name:
        yield name


def load_library(environ=None):
    """(ctypes library, path) of the first libkolo.so that loads, or (None, reason)."""
    environ = os.environ if environ is None else environ
    tried = []
    explicit = environ.get("KOLO_LIBRARY")
    candidates = [explicit] if explicit else _candidates(environ)  # as kolo._lib: no fallback
    for path in candidates:
        if os.path.sep in path and not os.path.exists(path):
            tried.append("%s (not found)" % path)
            continue
        try:
            lib = ctypes.CDLL(path)
            for fn in ("kolo_mpi_built", "kolo_gloo_built", "kolo_nccl_built"):
                getattr(lib, fn).restype = ctypes.c_int
            lib.kolo_version.restype = ctypes.c_char_p
            return lib, path
        except (OSError, AttributeError) as e:
            tried.append("%s (%s)" % (path, e))
    return None, "cannot load libkolo.so (set KOLO_LIBRARY); tried: " + "; ".join(tried)


def _torch_available():
    try:
        return importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):
        return False


def report(environ=None):
    """(text printed on stdout, note for stderr or None)."""
    lib, where = load_library(environ)
    note = None
    if lib is not None:
        version = (lib.kolo_version() or b"").decode("utf-8", "replace") or __version__
        mpi, gloo, nccl = (bool(lib.kolo_mpi_built()), bool(lib.kolo_gloo_built()),
                           bool(lib.kolo_nccl_built()))
    else:
        version, mpi, gloo, nccl = __version__, False, False, False
        note = where

    def mark(flag):
        return "X" if flag else " "

    lines = [
        "kolo v%s:" % version,
        "",
        "Available Frameworks:",
        "    [ ] TensorFlow",
        "    [%s] PyTorch" % mark(_torch_available() and lib is not None),
        "    [ ] MXNet",
        "",
        "Available Controllers:",
        "    [%s] MPI" % mark(mpi),
        "    [%s] Gloo" % mark(gloo),
        "",
        "Available Tensor Operations:",
        "    [%s] NCCL" % mark(nccl),
        "    [ ] DDL",
        "    [ ] CCL",
        "    [%s] MPI" % mark(mpi),
        "    [%s] Gloo" % mark(gloo),
    ]
    return "\n".join(lines) + "\n", note


def print_report(verbose=False, environ=None):
    """Prints the block (after an empty line with --verbose, as horovodrun does)."""
    text, note = report(environ)
    if verbose:
        sys.stdout.write("\n")
    sys.stdout.write(text)
    sys.stdout.flush()
    if note:
        sys.stderr.write("kolorun: --check-build: %s\n" % note)
