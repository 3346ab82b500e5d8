# SPDX-License-Identifier: Apache-2.0
"""Single-process checks of the pure-Python parts (no kolo.init): op names, argument rules,
dtype tables, compression, library lookup, errors before init."""

import os
import subprocess
import sys
import threading

import numpy as np
import pytest


def test_name_maker_counters_per_op_and_set():
    from kolo.common import _NameMaker
    names = _NameMaker()
    assert names.make("allreduce", None) == "allreduce.noname.0"
    assert names.make("allreduce", None) == "allreduce.noname.1"
    assert names.make("allgather", None) == "allgather.noname.0"
    assert names.make("allreduce", None, 3) == "allreduce.noname.ps3.0"
    assert names.make("allreduce", None) == "allreduce.noname.2"
    assert names.make("broadcast", "w.0") == "broadcast.w.0"
    names.reset()
    assert names.make("allreduce", None) == "allreduce.noname.0"
    for bad in (3, b"x", "", "a\0b", "x" * 1100):
        with pytest.raises(ValueError):
            names.make("allreduce", bad)


def test_name_maker_is_thread_safe():
    from kolo.common import _NameMaker
    names = _NameMaker()
    out = []

    def work():
        out.extend(names.make("allreduce", None) for _ in range(1000))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(out)) == 4000


def test_ops_and_average_rules():
    from kolo import _lib, common
    assert common.to_c_op(common.Sum) == _lib.C_SUM
    assert common.to_c_op(common.Average) == _lib.C_AVERAGE
    assert common.to_c_op(common.Product) == _lib.C_PRODUCT
    assert common.to_c_op(common.Adasum) == _lib.C_ADASUM
    for bad in (17, None, True, "Sum"):
        with pytest.raises(ValueError):
            common.to_c_op(bad)
    assert common.handle_average_backwards_compatibility(None, None) == common.Average
    assert common.handle_average_backwards_compatibility(common.Max, None) == common.Max
    with pytest.warns(DeprecationWarning):
        assert common.handle_average_backwards_compatibility(None, False) == common.Sum
    with pytest.raises(ValueError):
        common.handle_average_backwards_compatibility(common.Sum, True)
    assert common.check_scale(np.float32(2), "x") == 2.0
    with pytest.raises(ValueError):
        common.check_scale(True, "x")
    err = common.KoloInternalError("boom", _lib.ERR_MISMATCH)
    assert isinstance(err, RuntimeError) and err.status == _lib.ERR_MISMATCH
    assert err.status_name == "MISMATCH"
    assert common.HorovodInternalError is common.KoloInternalError


def test_numpy_dtype_table():
    from kolo import _lib
    from kolo.numpy_ops import NumpyAdapter
    for dt, code in ((np.uint8, _lib.UINT8), (np.uint16, _lib.UINT16), (np.int64, _lib.INT64),
                     (np.float16, _lib.FLOAT16), (np.bool_, _lib.BOOL)):
        t = NumpyAdapter.describe(np.zeros((2, 3), dtype=dt), "x")
        assert t.dtype == code and t.ndim == 2 and t.shape[0] == 2 and t.shape[1] == 3
        assert t.device == _lib.CPU_DEVICE
    assert NumpyAdapter.describe(np.zeros((0, 3)), "x").data is None
    with pytest.raises(ValueError, match="complex"):
        NumpyAdapter.describe(np.zeros(2, dtype=np.complex128), "x")
    with pytest.raises(ValueError, match="dimensions"):
        NumpyAdapter.describe(np.zeros((1,) * 17), "x")


def test_torch_dtype_table_and_devices():
    torch = pytest.importorskip("torch")
    from kolo import _lib
    from kolo.torch._adapter import TorchAdapter, dtype_code
    assert dtype_code(torch.bfloat16) == _lib.BFLOAT16
    assert dtype_code(torch.float16) == _lib.FLOAT16
    assert dtype_code(torch.bool) == _lib.BOOL
    assert dtype_code(torch.complex64) is None
    t = TorchAdapter.describe(torch.zeros(4, 5, dtype=torch.int16), "x")
    assert (t.dtype, t.ndim, t.shape[1], t.device) == (_lib.INT16, 2, 5, _lib.CPU_DEVICE)
    with pytest.raises(ValueError, match="meta"):
        TorchAdapter.describe(torch.zeros(2, device="meta"), "x")
    with pytest.raises(ValueError, match="sparse"):
        TorchAdapter.describe(torch.zeros(2, 2).to_sparse(), "x")
    assert TorchAdapter.to_int_list(torch.tensor([1, 2], dtype=torch.int32)) == [1, 2]
    assert TorchAdapter.to_int_list([np.int64(3), 4]) == [3, 4]
    with pytest.raises(ValueError):
        TorchAdapter.to_int_list([1.5])


def test_compression():
    torch = pytest.importorskip("torch")
    from kolo.torch.compression import Compression
    x = torch.linspace(0, 1, 7, dtype=torch.float64)
    c, ctx = Compression.fp16.compress(x)
    assert c.dtype == torch.float16
    back = Compression.fp16.decompress(c, ctx)
    assert back.dtype == torch.float64
    torch.testing.assert_close(back, x, atol=1e-3, rtol=1e-3)
    i = torch.arange(3)
    c, ctx = Compression.fp16.compress(i)
    assert c is i and Compression.fp16.decompress(c, ctx) is i
    c, ctx = Compression.none.compress(x)
    assert c is x and Compression.none.decompress(c, ctx) is x


def test_process_set_objects():
    from kolo.process_sets import ProcessSet, global_process_set
    ps = ProcessSet([3, 1, 2])
    assert ps.ranks == [1, 2, 3] and ps.process_set_id is None
    assert ps.size() is None and ps.rank() is None and ps.included() is None
    assert global_process_set.process_set_id == 0
    for bad in ([1, 1], [-1], ["a"], 5):
        with pytest.raises(ValueError):
            ProcessSet(bad)
    # An empty rank list fails in Python, before the runtime (not even initialized here).
    from kolo.process_sets import add_process_set
    with pytest.raises(ValueError, match=r"^add_process_set: the rank list is empty"):
        add_process_set([])
    ps.process_set_id = 4
    assert ps.root_index(3) == 2
    with pytest.raises(ValueError, match="not a member"):
        ps.root_index(0)


def test_before_init_errors():
    code = (
        "import kolo, numpy as np\n"
        "assert not kolo.is_initialized()\n"
        "for fn in (kolo.rank, kolo.size, kolo.local_rank):\n"
        "    try:\n"
        "        fn()\n"
        "    except ValueError as e:\n"
        "        assert 'init' in str(e)\n"
        "    else:\n"
        "        raise SystemExit('no error')\n"
        "try:\n"
        "    kolo.allreduce(np.ones(2))\n"
        "except ValueError as e:\n"
        "    assert 'initialized' in str(e), e\n"
        "else:\n"
        "    raise SystemExit('no error')\n"
        "kolo.shutdown()\n"
        "print('ok')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, env=_env())
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_library_lookup_errors():
    env = _env()
    env["KOLO_LIBRARY"] = "/nonexistent/libkolo.so"
    out = subprocess.run([sys.executable, "-c", "import kolo"], capture_output=True, text=True,
                         timeout=120, env=env)
    assert out.returncode != 0
    assert "KOLO_LIBRARY" in out.stderr and "/nonexistent/libkolo.so" in out.stderr


def _env():
    env = dict(os.environ)
    src = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", "..", "bindings",
                                        "python"))
    if os.environ.get("KOLO_TEST_INSTALLED") != "1":
        env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    for var in [v for v in env if v.startswith("KOLO_") and v != "KOLO_LIBRARY"]:
        env.pop(var)
    return env


def test_pyproject_lists_every_package():
    """pip installs only the packages pyproject.toml names: each folder of kolo/ with an
    __init__.py must be there (kolo.elastic and kolo.torch.elastic were missing)."""
    import tomllib
    root = os.path.join(os.path.dirname(__file__), "..", "..", "bindings", "python")
    with open(os.path.join(root, "pyproject.toml"), "rb") as f:
        listed = set(tomllib.load(f)["tool"]["setuptools"]["packages"])
    found = set()
    for folder, _, files in os.walk(os.path.join(root, "kolo")):
        if "__init__.py" in files:
            found.add(os.path.relpath(folder, root).replace(os.sep, "."))
    assert found == listed, (sorted(found), sorted(listed))
