#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Fails when a floor's compiled code takes a kolo symbol that only a floor above it defines:
the built archives' own word on the floors' direction, independent of scripts/check_layers.py.

kolo's floors (DESIGN.md "Floors"; FLOORS in scripts/check_layers.py), bottom to top:

    base < kernels < rendezvous < transport < timeline < ops < bootstrap < core < bindings

check_layers.py reads the sources and the CMake files; this check reads what the compiler made
of them, after the build. In BUILD_DIR, a floor's code is every static archive under its folder
(base/libkolo_base.a, kernels/libkolo_kernels.a and kernels/libkolo_cuda_kernels.a, ...) and
every object file of a target there that is not an archive (bindings/c's libkolo.so objects,
timeline/'s kolo-timeline-repair); a folder that is not a floor (test/, bench/...) counts by its
archives (test/support/libkolo_test_support.a). `nm -P` lists each one's symbols. A floor's
undefined symbol that is kolo's (a C++ name in namespace kolo, mangled _ZN4kolo... and its
vtable, typeinfo, guard variable, thunk forms; or a C name kolo_...) and that no file of the
floor itself or of a floor below defines (globally, weak definitions included), but a floor
above or a non-floor folder does, is a violation: the linker resolves it from the higher
floor's objects in the final binary, so nothing else stops it. Each is printed with the symbol
(demangled with c++filt when there is one, and mangled), the lower floor and the file that
takes it, and the higher floor (the lowest that defines it) and the file that defines it.

Not seen: a symbol defined nowhere in the build (a floor's code not built, a system library's),
names outside namespace kolo (a template of std instantiated on kolo types is defined where
used), what a header gives without a symbol (inline functions, types, macros, constants:
check_layers.py's includes), and archives older than their sources (run it after the build).
A floor with nothing built (an INTERFACE library, a part configured out, CUDA without a GPU
toolkit) is listed and skipped; a build with no floor built at all fails.

Exit status 0 when every floor's kolo symbols come from itself or below, 1 with one line per
symbol otherwise, 2 when it cannot check (no build, nm failed).

Usage: scripts/check_symbols.py [BUILD_DIR] [--nm NM] [--cxxfilt CXXFILT]   (default: build)
       scripts/check_symbols.py --self-test [--cxx CXX] [--ar AR] [--nm NM]
           (compiles small archives in a scratch build tree with CXX and AR: an upward call, an
           upward vtable, a floor's call into test code and a loose object's upward call are
           each found and named; downward calls, weak duplicates, missing and empty floors pass)
"""

import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_layers import FLOORS, ORDER, RANK  # noqa: E402 (the one list of floors)

# A call offset of a thunk (h<offset>_ or v<offset>_<offset>_), and the prefixes of special
# names around an entity: vtable, VTT, typeinfo, typeinfo name, TLS init and wrapper, construction
# vtable, guard variable, reference temporary, thunks, and a local entity's Z<function>E.
_CALL_OFFSET = r"(?:hn?\d+_|vn?\d+_n?\d+_)"
_KOLO = re.compile(r"_Z(?:T[VTISHWC]|GV|GR|T%s|Tc%s%s|Z)*N[rVKRO]*4kolo|kolo_" %
                   ((_CALL_OFFSET,) * 3))
# nm -P -A: "file[member]: name type [value size]" (no member for an object file).
_LINE = re.compile(r"^(?P<file>.*?)(?:\[(?P<member>[^\]]*)\])?: (?P<name>\S+) (?P<type>\S)")
_UNDEFINED = "Uwv"  # undefined; weak undefined (function, object)
_DEFINED = set("TDBRVWCGSAIiu")  # global definitions (weak, common, unique, ifunc included)
_NOT_BUILT = ("CMakeFiles", "Testing")


def is_kolo(name):
    return _KOLO.match(name) is not None


def _units(build, folder, loose):
    """The files of a build tree's top-level folder whose symbols count: its static archives
    and, when loose, the object files of its targets that are not archives."""
    top = os.path.join(build, folder)
    archives, object_dirs = [], []
    for dirpath, dirnames, names in os.walk(top):
        dirnames.sort()
        archives.extend(os.path.join(dirpath, n) for n in sorted(names) if n.endswith(".a"))
        if os.path.basename(dirpath) == "CMakeFiles":
            object_dirs.extend(os.path.join(dirpath, d) for d in dirnames if d.endswith(".dir"))
    if not loose:
        return archives
    built = {os.path.basename(a)[3:-2] for a in archives if os.path.basename(a).startswith("lib")}
    objects = []
    for d in object_dirs:
        if os.path.basename(d)[:-len(".dir")] in built:
            continue  # an archive's objects: read in the archive
        for dirpath, dirnames, names in os.walk(d):
            dirnames.sort()
            objects.extend(os.path.join(dirpath, n) for n in sorted(names)
                           if n.endswith((".o", ".obj")))
    return archives + objects


def read_symbols(nm, build, files):
    """({defined global name: where}, {undefined name: where}) of files, `where` the first file
    (file[member], relative to build) that defines or takes it; an undefined name a file of the
    same set defines is left out. Raises RuntimeError when nm fails."""
    defined, undefined = {}, {}
    if not files:
        return defined, undefined
    run = subprocess.run([nm, "-P", "-A"] + files, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, universal_newlines=True, errors="replace")
    if run.returncode != 0:
        raise RuntimeError("%s -P -A failed (%d): %s" % (nm, run.returncode, run.stderr.strip()))
    for line in run.stdout.splitlines():
        m = _LINE.match(line)
        if not m:
            continue
        kind, name = m.group("type"), m.group("name")
        if kind not in _UNDEFINED and kind not in _DEFINED:
            continue
        where = os.path.relpath(m.group("file"), build)
        if m.group("member"):
            where += "[%s]" % m.group("member")
        if kind in _UNDEFINED:
            undefined.setdefault(name, where)
        else:
            defined.setdefault(name, where)
    for name in list(undefined):
        if name in defined:
            del undefined[name]
    return defined, undefined


def _demangle(cxxfilt, names):
    if not names or not cxxfilt:
        return {}
    try:
        run = subprocess.run([cxxfilt], input="\n".join(names) + "\n", stdout=subprocess.PIPE,
                             universal_newlines=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return {}
    out = run.stdout.splitlines()
    return dict(zip(names, out)) if len(out) == len(names) else {}


def check(build, nm="nm", cxxfilt=None):
    """(violations [(floor, where, name, provider, provider's where)], the floors read, those
    with nothing built). Raises RuntimeError when nm fails."""
    folders = sorted(d for d in os.listdir(build) if os.path.isdir(os.path.join(build, d))
                     and d not in _NOT_BUILT and not d.startswith("."))
    symbols = collections.OrderedDict()  # folder -> (defined, undefined)
    read, missing = [], []
    for floor in FLOORS:
        files = _units(build, floor, loose=True) if floor in folders else []
        if files:
            symbols[floor] = read_symbols(nm, build, files)
            read.append(floor)
        else:
            missing.append(floor)
    for folder in folders:
        if folder not in RANK:
            files = _units(build, folder, loose=False)
            if files:
                symbols[folder] = read_symbols(nm, build, files)

    violations = []
    for floor in read:
        below = [f for f in read if RANK[f] <= RANK[floor]]
        above = [f for f in read if RANK[f] > RANK[floor]] + [f for f in symbols if f not in RANK]
        for name, where in sorted(symbols[floor][1].items()):
            if not is_kolo(name) or any(name in symbols[f][0] for f in below):
                continue
            for provider in above:
                if name in symbols[provider][0]:
                    violations.append((floor, where, name, provider,
                                       symbols[provider][0][name]))
                    break
    return violations, read, missing


def main(argv):
    args = list(argv[1:])
    options = {"--nm": "nm", "--cxxfilt": None}
    for flag in options:
        if flag in args:
            at = args.index(flag)
            if at + 1 >= len(args):
                print("check_symbols: %s needs a value" % flag)
                return 2
            options[flag] = args[at + 1] or options[flag]  # an empty one: the default
            del args[at:at + 2]
    nm = options["--nm"]
    cxxfilt = options["--cxxfilt"]
    if cxxfilt is None:  # binutils' c++filt beside nm, else on PATH
        beside = os.path.join(os.path.dirname(shutil.which(nm) or nm), "c++filt")
        cxxfilt = beside if os.path.isfile(beside) else shutil.which("c++filt")
    build = os.path.abspath(args[0] if args else "build")
    if not os.path.isdir(build):
        print("check_symbols: %s is not a folder (give the build tree)" % build)
        return 2
    try:
        violations, read, missing = check(build, nm, cxxfilt)
    except (OSError, RuntimeError) as e:
        print("check_symbols: cannot read the archives: %s" % e)
        return 2
    if not read:
        print("check_symbols: no floor's archive under %s (build it first: ninja -C %s)" %
              (build, build))
        return 2
    shown = _demangle(cxxfilt, sorted({v[2] for v in violations}))
    for floor, where, name, provider, defined_at in violations:
        symbol = "%s (%s)" % (shown[name], name) if shown.get(name, name) != name else name
        if provider in RANK:
            why = ("defined only above it, by floor '%s' (%s): floor '%s' may not use '%s'" %
                   (provider, defined_at, floor, provider))
        else:
            why = ("defined only in %s/ (%s), which is not a library floor" %
                   (provider, defined_at))
        print("%s: floor '%s' uses %s, %s" % (where, floor, symbol, why))
    skipped = (" (nothing built for %s: an INTERFACE library, configured out or not built)" %
               ", ".join(missing)) if missing else ""
    if violations:
        print("check_symbols: %d kolo symbol(s) a floor takes from above it; order: %s%s" %
              (len(violations), ORDER, skipped))
        return 1
    print("check_symbols: every floor's kolo symbols come from itself or below (%s read)%s" %
          (", ".join(read), skipped))
    return 0


# ---- self-test ---------------------------------------------------------------------------------

_SOURCES = {
    "shared.h": "namespace kolo {\ninline int shared() { static int n = 0; return ++n; }\n}\n",
    "lo.cc": '#include "shared.h"\nnamespace kolo { int lo() { return shared(); } }\n'
             "namespace other { int hi2(); }\nint other_ref() { return other::hi2(); }\n",
    "hi.cc": '#include "shared.h"\nnamespace kolo { int lo(); '
             "int hi() { return lo() + shared(); } }\n"
             "namespace other { int hi2() { return 2; } }\n",
    "widget.cc": "namespace kolo {\nstruct Widget { Widget() {} virtual ~Widget();"
                 " virtual int f(); };\nWidget::~Widget() {}\nint Widget::f() { return 2; }\n}\n",
    "up.cc": "namespace kolo { int hi(); int up() { return hi(); } }\n",
    "widget_use.cc": "namespace kolo {\nstruct Widget { Widget() {} virtual ~Widget();"
                     " virtual int f(); };\nint use() { Widget w; return w.f(); }\n}\n",
    "support.cc": "namespace kolo { int from_test() { return 3; } }\n",
    "uses_test.cc": "namespace kolo { int from_test(); int t() { return from_test(); } }\n",
    "c_api.cc": 'namespace kolo { int hi(); }\n'
                'extern "C" int kolo_planted() { return kolo::hi(); }\n',
    "uses_c.cc": 'extern "C" int kolo_planted();\nint c() { return kolo_planted(); }\n',
}


def _build_tree(tmp, layout, cxx, ar):
    """A scratch build tree: layout maps a path in it to the sources of the archive (*.a) or the
    object file it holds; an empty list makes an empty folder."""
    build = tempfile.mkdtemp(dir=tmp)
    for rel, sources in layout.items():
        path = os.path.join(build, rel)
        os.makedirs(os.path.dirname(path) if sources else path, exist_ok=True)
        objects = [os.path.join(tmp, "obj", s + ".o") for s in sources]
        if rel.endswith(".a"):
            subprocess.run([ar, "rcs", path] + objects, check=True)
        elif sources:
            shutil.copy(objects[0], path)
    return build


def self_test(argv):
    args = list(argv[1:])
    tools = {"--cxx": os.environ.get("CXX", "c++"), "--ar": "ar", "--nm": "nm"}
    for flag in tools:
        if flag in args[:-1]:
            tools[flag] = args[args.index(flag) + 1] or tools[flag]  # empty: the default
    cxx, ar, nm = tools["--cxx"], tools["--ar"], tools["--nm"]
    errors = []
    with tempfile.TemporaryDirectory() as tmp:
        os.makedirs(os.path.join(tmp, "obj"))
        for name, text in _SOURCES.items():
            with open(os.path.join(tmp, "obj", name), "w") as f:
                f.write(text)
        for name in _SOURCES:
            if not name.endswith(".cc"):
                continue
            try:
                subprocess.run([cxx, "-c", "-O0", "-fPIC", name, "-o", name + ".o"],
                               cwd=os.path.join(tmp, "obj"), check=True)
            except (OSError, subprocess.CalledProcessError) as e:
                print("check_symbols self-test: cannot compile with %s: %s" % (cxx, e))
                return 1
        allowed = {
            "base/libkolo_base.a": ["lo.cc"],
            "kernels": [],  # a floor with nothing built (an INTERFACE library)
            "core/libkolo_core.a": ["hi.cc", "widget.cc"],
            "timeline/libkolo_timeline.a": ["lo.cc"],
            # an archive target's objects are read in its archive, never loose
            "timeline/CMakeFiles/kolo_timeline.dir/up.cc.o": ["up.cc"],
            "bindings/c/CMakeFiles/kolo.dir/c_api.cc.o": ["c_api.cc"],
            "test/support/libkolo_test_support.a": ["support.cc"],
        }
        cases = [
            # (name, what to add to the allowed tree, phrases the output must hold)
            ("an upward call", {"base/libkolo_base.a": ["lo.cc", "up.cc"]},
             ["base/libkolo_base.a[up.cc.o]: floor 'base' uses kolo::hi() (_ZN4kolo2hiEv)",
              "by floor 'core' (core/libkolo_core.a[hi.cc.o])"]),
            ("an upward vtable", {"kernels/libkolo_kernels.a": ["widget_use.cc"]},
             ["floor 'kernels' uses vtable for kolo::Widget (_ZTVN4kolo6WidgetE)",
              "floor 'kernels' uses kolo::Widget::f()", "floor 'kernels' may not use 'core'"]),
            ("a call into test code", {"base/libkolo_base.a": ["lo.cc", "uses_test.cc"]},
             ["floor 'base' uses kolo::from_test()", "defined only in test/ "
              "(test/support/libkolo_test_support.a[support.cc.o])"]),
            ("a call into the C library", {"ops/libkolo_ops.a": ["uses_c.cc"]},
             ["ops/libkolo_ops.a[uses_c.cc.o]: floor 'ops' uses kolo_planted, defined only "
              "above it, by floor 'bindings' (bindings/c/CMakeFiles/kolo.dir/c_api.cc.o)"]),
            ("a loose object's upward call",
             {"rendezvous/CMakeFiles/tool.dir/tool.cc.o": ["up.cc"]},
             ["rendezvous/CMakeFiles/tool.dir/tool.cc.o: floor 'rendezvous' uses kolo::hi()",
              "floor 'rendezvous' may not use 'core'"]),
        ]
        status, out = _run(_build_tree(tmp, allowed, cxx, ar), nm)
        if status != 0 or "nothing built for kernels, rendezvous" not in out:
            errors.append("the allowed tree (down, weak duplicates, other namespaces, empty and "
                          "missing floors) returned %d:\n%s" % (status, out))
        for name, extra, phrases in cases:
            layout = dict(allowed)
            layout.update(extra)
            status, out = _run(_build_tree(tmp, layout, cxx, ar), nm)
            missing = [p for p in phrases if p not in out]
            if status != 1 or missing:
                errors.append("%s: returned %d, output lacks %r:\n%s" % (name, status, missing,
                                                                          out))
        status, out = _run(_build_tree(tmp, {"base": []}, cxx, ar), nm)
        if status != 2 or "no floor's archive" not in out:
            errors.append("a build with nothing built returned %d:\n%s" % (status, out))
    for e in errors:
        print("check_symbols self-test: " + e)
    if errors:
        return 1
    print("check_symbols self-test: ok (%d upward uses found; the allowed tree passes, an "
          "unbuilt one is refused)" % len(cases))
    return 0


def _run(build, nm):
    run = subprocess.run([sys.executable, os.path.abspath(__file__), build, "--nm", nm],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         universal_newlines=True)
    return run.returncode, run.stdout


if __name__ == "__main__":
    sys.exit(self_test(sys.argv[1:]) if sys.argv[1:2] == ["--self-test"] else main(sys.argv))
