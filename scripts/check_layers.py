#!/usr/bin/env python3
"""Fails when a source file includes a header from a floor above its own.

kolo is built in floors, bottom to top (DESIGN.md "Floors"); each is its own CMake library and
may use only the floors below it (and itself):

    base < kernels < rendezvous < transport < timeline < ops < bootstrap < core < bindings

A file's floor is its top-level folder. Only quoted includes of kolo's own folders are checked
("base/status.h"); system and third-party headers are not. bench/, test/ and examples/ sit above
every floor and are not checked. Exit status 0 when every include points down or sideways, 1
with one line per upward include otherwise.

Usage: scripts/check_layers.py [REPO_ROOT]
       scripts/check_layers.py --self-test   (the check finds a planted upward include)
"""

import os
import re
import sys
import tempfile

FLOORS = ["base", "kernels", "rendezvous", "transport", "timeline", "ops", "bootstrap", "core",
          "bindings"]
RANK = {name: i for i, name in enumerate(FLOORS)}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
SOURCES = (".h", ".cc", ".cu", ".cpp", ".hpp")


def upward_includes(root):
    """Yields (path, line number, included header, its floor, the file's floor)."""
    for floor in FLOORS:
        top = os.path.join(root, floor)
        for dirpath, _, names in os.walk(top):
            for name in sorted(names):
                if not name.endswith(SOURCES):
                    continue
                path = os.path.join(dirpath, name)
                with open(path, encoding="utf-8", errors="replace") as f:
                    for number, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        target = m.group(1).split("/", 1)[0]
                        if target in RANK and RANK[target] > RANK[floor]:
                            yield os.path.relpath(path, root), number, m.group(1), target, floor


def main(argv):
    root = argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(__file__), os.pardir)
    root = os.path.abspath(root)
    if not os.path.isdir(os.path.join(root, "base")):
        print("check_layers: %s has no base/ folder: not a kolo checkout" % root)
        return 1
    bad = list(upward_includes(root))
    for path, number, header, target, floor in bad:
        print("%s:%d: includes %s: floor '%s' may not use '%s' (above it)" %
              (path, number, header, floor, target))
    if bad:
        print("check_layers: %d upward include(s); order: %s" % (len(bad), " < ".join(FLOORS)))
        return 1
    print("check_layers: every include points down (%s)" % " < ".join(FLOORS))
    return 0


def self_test():
    """Plants one upward and one downward include in a scratch tree: only the first is reported."""
    with tempfile.TemporaryDirectory() as root:
        for floor, text in (("base", '#include "base/a.h"\n'),
                            ("transport", '#include "base/a.h"\n  #  include "ops/x.h"\n'),
                            ("ops", '#include "transport/t.h"\n#include <vector>\n')):
            os.makedirs(os.path.join(root, floor, "sub"))
            with open(os.path.join(root, floor, "sub", "f.cc"), "w") as f:
                f.write(text)
        found = [(p, n, h) for p, n, h, _, _ in upward_includes(root)]
        want = [(os.path.join("transport", "sub", "f.cc"), 2, "ops/x.h")]
        if found != want:
            print("check_layers self-test: found %r, expected %r" % (found, want))
            return 1
        if main(["check_layers", root]) != 1:
            print("check_layers self-test: an upward include did not fail the check")
            return 1
    print("check_layers self-test: ok")
    return 0


if __name__ == "__main__":
    sys.exit(self_test() if sys.argv[1:] == ["--self-test"] else main(sys.argv))
