# SPDX-License-Identifier: Apache-2.0
"""setuptools hook: metadata lives in pyproject.toml. The only logic here: a wheel built from a
checkout carries libkolo.so when one is at hand ($KOLO_LIBRARY, kolo/libkolo.so, or the most
recently built ../../build*/bindings/c/libkolo.so), so the installed package finds its library
in its own folder. Without one the package still installs and looks for libkolo.so at import
(see kolo/_lib.py)."""

import glob
import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


def _library():
    env = os.environ.get("KOLO_LIBRARY")
    if env and os.path.isfile(env):
        return env
    own = os.path.join(HERE, "kolo", "libkolo.so")
    if os.path.isfile(own):
        return own
    root = os.path.dirname(os.path.dirname(HERE))
    built = glob.glob(os.path.join(root, "build*", "bindings", "c", "libkolo.so"))
    built = [b for b in built if os.path.isfile(b)]
    return max(built, key=os.path.getmtime) if built else None


class BuildPyWithLibrary(build_py):
    def run(self):
        super().run()
        lib = _library()
        if lib is None:
            print("kolo: no libkolo.so found; the package will look for it at import time")
            return
        target = os.path.join(self.build_lib, "kolo", "libkolo.so")
        if os.path.abspath(lib) != os.path.abspath(target):
            shutil.copyfile(lib, target)  # follows the .so -> .so.0 -> .so.0.1.0 links
            os.chmod(target, 0o755)
        print("kolo: bundled %s" % lib)


setup(cmdclass={"build_py": BuildPyWithLibrary})
