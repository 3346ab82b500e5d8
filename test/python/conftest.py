# SPDX-License-Identifier: Apache-2.0
"""Shared set-up of the Python suites. Every file runs under a launcher with N ranks
(`kolorun -np N /usr/bin/python3 -m pytest -x -q test/python/<file>`), so every rank runs the
same tests in the same order; a test that skips must skip on every rank (decide on size, not
rank). The package is imported from this checkout's bindings/python unless
KOLO_TEST_INSTALLED=1 (then the installed `kolo` is tested)."""

import os
import shutil
import sys
import tempfile

import pytest

_HERE = os.path.dirname(os.path.abspath(__file__))
_SOURCE = os.path.normpath(os.path.join(_HERE, "..", "..", "bindings", "python"))
if os.environ.get("KOLO_TEST_INSTALLED") != "1" and _SOURCE not in sys.path:
    sys.path.insert(0, _SOURCE)


@pytest.fixture(scope="session")
def kolo_world():
    """kolo initialized once per process (a pytest session is one rank of the job)."""
    import kolo
    kolo.init()
    yield kolo
    kolo.shutdown()


@pytest.fixture(scope="session")
def hvd(kolo_world):
    """kolo.torch, initialized (skips the suite when torch is missing)."""
    pytest.importorskip("torch", reason="PyTorch is not installed for this interpreter")
    import kolo.torch
    return kolo.torch


@pytest.fixture
def rank_dir():
    """A temporary folder of this rank's own (each rank is its own pytest process), removed
    after the test."""
    folder = tempfile.mkdtemp(prefix="kolo-test-")
    yield folder
    shutil.rmtree(folder, ignore_errors=True)
