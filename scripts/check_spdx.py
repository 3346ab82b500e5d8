#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Fails when a tracked source file has no SPDX license line (LICENSE holds the text).

    /usr/bin/python3 scripts/check_spdx.py [REPO]

Source files: C, C++ and CUDA files and headers, Python, shell and CMake files, the two
extension-less scripts (.ci/run, bindings/launcher/kolorun) and the .in templates that are code.
The line must sit in the first three lines: "SPDX-License-Identifier: Apache-2.0" after the
comment mark. Exit status: 0 when every file has it, 1 otherwise (each file is named).
"""

import os
import re
import subprocess
import sys

LINE = "SPDX-License-Identifier: Apache-2.0"
SOURCE = re.compile(r"(\.(c|cc|h|cu|py|sh|cmake|toml)|CMakeLists\.txt|build_config\.h\.in)$")
SCRIPTS = {".ci/run", "bindings/launcher/kolorun"}


def main():
    repo = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(
        os.path.dirname(os.path.abspath(__file__)))
    files = subprocess.check_output(["git", "-C", repo, "ls-files"], text=True).split("\n")
    files = [f for f in files if f and (SOURCE.search(f) or f in SCRIPTS)
             and "/fuzz/corpus/" not in f and os.path.exists(os.path.join(repo, f))]
    missing = []
    for f in files:
        with open(os.path.join(repo, f), encoding="utf-8", errors="replace") as fh:
            head = [fh.readline() for _ in range(3)]
        if not any(LINE in h for h in head):
            missing.append(f)
    for f in missing:
        print("%s: no '%s' line in its first three lines" % (f, LINE))
    print("spdx: %d source files, %d without the line" % (len(files), len(missing)))
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
