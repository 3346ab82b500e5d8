#!/usr/bin/env python3
"""Fails when a floor uses a floor above its own, or test/bench code, by #include or by link.

kolo is built in floors, bottom to top (DESIGN.md "Floors"); each is its own CMake library and
may use only the floors below it (and itself):

    base < kernels < rendezvous < transport < timeline < ops < bootstrap < core < bindings

A file's floor is its top-level folder. Static libraries do not stop an upward call by
themselves (a symbol a lower floor takes from a higher one links whenever the final binary links
both), so this check is what holds the direction. Two parts:

includes  Every #include of a floor's C++ source is resolved as the compiler would: a quoted
          include against the including file's folder first ("../ops/x.h", "sub/x.h"; an
          explicit ./ or ../ path always so), then against the repository root ("ops/x.h"); an
          angle include against the root (<ops/x.h>). One that lands in a floor above the file's
          fails, and so does one that lands in any top-level folder that is not a floor (test/,
          bench/, examples/, scripts/...): library floors never include test or tool code.
          Headers outside the repository (system, spdlog, gloo, the generated kolo/) and
          third_party/ (vendored dependencies) are not checked.
links     Every CMakeLists.txt and *.cmake in the tree (build trees, those holding a
          CMakeCache.txt, skipped) is parsed for targets (add_library, add_executable; a floor
          is declared with kolo_add_floor(NAME BELOW), third_party/cmake/KoloFloors.cmake,
          which makes kolo_NAME and links it to kolo_BELOW) and their target_link_libraries.
          A target belongs to the top-level folder that defines it; one defined at the root
          (kolo_engine) stands for what it links. A floor's target that links a target of a
          higher floor, or of a non-floor folder, fails; so does a kolo_add_floor of a name
          missing from FLOORS below. Imported and unknown names (system and third-party
          libraries) are not checked.

bench/, test/ and examples/ sit above every floor and are not checked themselves. Exit status 0
when everything points down or sideways, 1 with one line per violation otherwise
(file:line, what it includes or links, which floor points up to which).

Usage: scripts/check_layers.py [REPO_ROOT]
       scripts/check_layers.py --self-test   (every violating form planted in a scratch copy of
                                              this tree is found; the unplanted copy passes)
"""

import contextlib
import io
import os
import re
import shutil
import sys
import tempfile

FLOORS = ["base", "kernels", "rendezvous", "transport", "timeline", "ops", "bootstrap", "core",
          "bindings"]
RANK = {name: i for i, name in enumerate(FLOORS)}
# Vendored dependencies: neither a floor nor forbidden to one.
EXTERNAL = {"third_party"}
INCLUDE = re.compile(r'^\s*#\s*include\s*(["<])([^">]+)[">]')
SOURCES = (".h", ".cc", ".cu", ".cpp", ".hpp", ".cuh", ".inl")
ORDER = " < ".join(FLOORS)


class Violation:
    """One use of a floor above (or of a non-floor folder) by a floor."""

    def __init__(self, path, line, what, floor, used, via=None, reason=None):
        self.path, self.line, self.what = path, line, what
        self.floor, self.used, self.via, self.reason = floor, used, via, reason

    def key(self):
        return (self.path, self.line, self.floor, self.used)

    def __str__(self):
        via = " (which brings %s/)" % self.via if self.via else ""
        if self.reason:
            why = self.reason
        elif self.used in RANK:
            why = "floor '%s' may not use '%s' (above it)" % (self.floor, self.used)
        else:
            why = ("floor '%s' may not use %s/ (not a library floor: test, bench and tool code "
                   "stay out of the library)" % (self.floor, self.used))
        return "%s:%d: %s%s: %s" % (self.path, self.line, self.what, via, why)


def _forbidden(floor, folder):
    """True when a file or target of `floor` may not use `folder` (a top-level folder)."""
    if folder in RANK:
        return RANK[folder] > RANK[floor]
    return folder not in EXTERNAL


def _top_folders(root):
    return {d for d in os.listdir(root)
            if not d.startswith(".") and os.path.isdir(os.path.join(root, d))}


# ---- includes ----------------------------------------------------------------------------------

def resolve_include(root, path, bracket, header):
    """The repository-relative path an include names, or None when it names nothing of kolo's.

    `path` is the including file (absolute). Quoted: relative to its folder when written ./ or
    ../, or when that file exists; else relative to the root. Angle: relative to the root."""
    full = os.path.normpath(os.path.join(root, header))
    if bracket == '"':
        beside = os.path.normpath(os.path.join(os.path.dirname(path), header))
        if header.startswith(("./", "../")) or os.path.exists(beside):
            full = beside
    rel = os.path.relpath(full, root)
    if rel == os.pardir or rel.startswith(os.pardir + os.sep) or os.sep not in rel:
        return None  # outside the repository, or a file at its root
    return rel


def include_violations(root):
    """Yields a Violation for each include of a floor's source that points up or out."""
    folders = _top_folders(root) | set(FLOORS)
    for floor in FLOORS:
        for dirpath, dirnames, names in os.walk(os.path.join(root, floor)):
            dirnames.sort()
            for name in sorted(names):
                if not name.endswith(SOURCES):
                    continue
                path = os.path.join(dirpath, name)
                with open(path, encoding="utf-8", errors="replace") as f:
                    for number, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        bracket, header = m.group(1), m.group(2).strip()
                        rel = resolve_include(root, path, bracket, header)
                        if rel is None:
                            continue
                        folder = rel.split(os.sep, 1)[0]
                        if folder not in folders or not _forbidden(floor, folder):
                            continue
                        written = '"%s"' % header if bracket == '"' else "<%s>" % header
                        shown = rel.replace(os.sep, "/")
                        what = "includes %s" % written
                        if shown != header:
                            what += " (= %s)" % shown
                        yield Violation(os.path.relpath(path, root), number, what, floor, folder)


# ---- CMake links -------------------------------------------------------------------------------

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_BRACKET = re.compile(r"\[(=*)\[")
_NAME = re.compile(r"[A-Za-z0-9_.+\-]+(?:::[A-Za-z0-9_.+\-]+)*")
_VARIABLE = re.compile(r"\$\{[^}]*\}")
_LINK_KEYWORDS = {"PUBLIC", "PRIVATE", "INTERFACE", "LINK_PUBLIC", "LINK_PRIVATE",
                  "LINK_INTERFACE_LIBRARIES", "debug", "optimized", "general"}


def _skip_comment(text, i, line):
    """From a '#' at i: the index after the comment (a line or a #[[bracket]] one), and the line."""
    m = _BRACKET.match(text, i + 1)
    if m:
        end = text.find("]" + m.group(1) + "]", m.end())
        end = len(text) if end < 0 else end + len(m.group(1)) + 2
        return end, line + text.count("\n", i, end)
    end = text.find("\n", i)
    return (len(text) if end < 0 else end), line


def _arguments(text, i, line):
    """The words of a command's arguments from just after its '('; the index after its ')'."""
    words, cur, depth, n = [], [], 0, len(text)

    def flush():
        if cur:
            words.extend(w for w in "".join(cur).split(";") if w)
            del cur[:]

    while i < n:
        c = text[i]
        if c == "\n" or c in " \t\r":
            line += c == "\n"
            flush()
            i += 1
        elif c == "#":
            flush()
            i, line = _skip_comment(text, i, line)
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            cur.append(text[i + 1:j])
            line += text.count("\n", i, j)
            i = j + 1
        elif c == "[" and _BRACKET.match(text, i):
            m = _BRACKET.match(text, i)
            end = text.find("]" + m.group(1) + "]", m.end())
            end = n if end < 0 else end
            cur.append(text[m.end():end])
            line += text.count("\n", i, end)
            i = end + len(m.group(1)) + 2
        elif c == "(":
            flush()
            depth += 1
            i += 1
        elif c == ")":
            flush()
            i += 1
            if depth == 0:
                return words, i, line
            depth -= 1
        else:
            cur.append(c)
            i += 1
    flush()
    return words, i, line


def cmake_calls(text):
    """Yields (command in lower case, argument words, line) for each command call in CMake text."""
    i, n, line = 0, len(text), 1
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
            i += 1
        elif c == "#":
            i, line = _skip_comment(text, i, line)
        else:
            m = _IDENT.match(text, i)
            if not m:
                i += 1
                continue
            j = m.end()
            while j < n and text[j] in " \t":
                j += 1
            if j < n and text[j] == "(":
                start = line
                args, i, line = _arguments(text, j + 1, line)
                yield m.group(0).lower(), args, start
            else:
                i = m.end()


def cmake_files(root):
    """Every CMakeLists.txt and *.cmake of the tree, build trees and hidden folders left out."""
    for dirpath, dirnames, names in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames
                             if not d.startswith(".") and d not in ("CMakeFiles", "__pycache__")
                             and not os.path.exists(os.path.join(dirpath, d, "CMakeCache.txt")))
        for name in sorted(names):
            if name == "CMakeLists.txt" or name.endswith(".cmake"):
                yield os.path.join(dirpath, name)


class _Target:
    def __init__(self, folder, imported):
        self.folder, self.imported, self.links = folder, imported, []


def link_violations(root):
    """Yields a Violation for each link of a floor's target to a higher floor or out of the
    library, and for a kolo_add_floor of a floor this check does not know."""
    targets, aliases, links, unknown = {}, {}, [], []
    for path in cmake_files(root):
        rel = os.path.relpath(path, root)
        folder = rel.split(os.sep, 1)[0] if os.sep in rel else ""
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        for command, args, line in cmake_calls(text):
            if not args or "${" in args[0]:
                continue  # a function's body (kolo_${name}): its calls are seen at the call site
            if command in ("add_library", "add_executable"):
                if len(args) > 2 and args[1] == "ALIAS":
                    aliases[args[0]] = args[2]
                else:
                    targets[args[0]] = _Target(folder, "IMPORTED" in args[1:])
            elif command == "kolo_add_floor":
                name = "kolo_" + args[0]
                targets[name] = _Target(folder, False)
                if args[0] not in RANK:
                    unknown.append((rel, line, args[0]))
                if len(args) > 1 and args[1]:
                    what = "kolo_add_floor(%s %s) links %s to kolo_%s" % (
                        args[0], args[1], name, args[1])
                    links.append((name, "kolo_" + args[1], rel, line, what))
            elif command == "target_link_libraries":
                for word in args[1:]:
                    if word in _LINK_KEYWORDS:
                        continue
                    for dep in _NAME.findall(_VARIABLE.sub("", word)):
                        links.append((args[0], dep, rel, line,
                                      "%s links %s" % (args[0], dep)))
    for target, dep, _, _, _ in links:
        if target in targets:
            targets[target].links.append(dep)

    def canonical(name):
        seen = set()
        while name in aliases and name not in seen:
            seen.add(name)
            name = aliases[name]
        return name

    def stands_for(name, seen):
        """The top-level folders a target brings: its own, or a root target's links'."""
        t = targets.get(canonical(name))
        if t is None or t.imported or name in seen:
            return set()
        if t.folder:
            return {t.folder}
        seen = seen | {name}
        out = set()
        for dep in t.links:
            out |= stands_for(dep, seen)
        return out

    for rel, line, name in unknown:
        yield Violation(rel, line, "kolo_add_floor(%s ...)" % name, name, name,
                        reason="'%s' is not a floor of this check's order (FLOORS in %s)" %
                        (name, "scripts/check_layers.py"))
    for target, dep, rel, line, what in links:
        t = targets.get(canonical(target))
        if t is None or t.folder not in RANK:
            continue
        d = targets.get(canonical(dep))
        direct = d is not None and bool(d.folder)
        for folder in sorted(stands_for(dep, set()), key=lambda f: (RANK.get(f, -1), f)):
            if _forbidden(t.folder, folder):
                yield Violation(rel, line, what, t.folder, folder,
                                None if direct else folder)


def main(argv):
    root = argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(__file__), os.pardir)
    root = os.path.abspath(root)
    if not os.path.isdir(os.path.join(root, "base")):
        print("check_layers: %s has no base/ folder: not a kolo checkout" % root)
        return 1
    includes = list(include_violations(root))
    links = list(link_violations(root))
    for v in includes + links:
        print(v)
    if includes or links:
        print("check_layers: %d upward or outward include(s), %d link(s); order: %s "
              "(test/, bench/ and other non-floor folders are above every floor)" %
              (len(includes), len(links), ORDER))
        return 1
    print("check_layers: every include and link points down (%s)" % ORDER)
    return 0


# ---- self-test ---------------------------------------------------------------------------------

def _copy_tree(src, dst):
    """The sources and CMake files of the tree at src, without build trees or hidden folders."""
    for dirpath, dirnames, names in os.walk(src):
        dirnames[:] = [d for d in dirnames
                       if not d.startswith(".") and d not in ("CMakeFiles", "__pycache__")
                       and not os.path.exists(os.path.join(dirpath, d, "CMakeCache.txt"))]
        out = os.path.join(dst, os.path.relpath(dirpath, src))
        os.makedirs(out, exist_ok=True)
        for name in names:
            if name.endswith(SOURCES) or name == "CMakeLists.txt" or name.endswith(".cmake"):
                shutil.copy(os.path.join(dirpath, name), os.path.join(out, name))


def _write(root, rel, text):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def _read(root, rel):
    with open(os.path.join(root, rel)) as f:
        return f.read()


def _line_of(text, needle):
    for number, line in enumerate(text.splitlines(), 1):
        if needle in line:
            return number
    return None


def _run(root):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = main(["check_layers", root])
    return status, out.getvalue()


def self_test():
    """Each violating form, planted alone in a scratch copy of this tree, is the one finding
    (file, line, floors) and fails main() with a message naming it; the copy without plants and
    one planted file of allowed includes pass."""
    real = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir))
    errors = []
    with tempfile.TemporaryDirectory() as root:
        _copy_tree(real, root)
        status, out = _run(root)
        if status != 0:
            errors.append("the unplanted tree fails:\n" + out)

        # Allowed: down, sideways, relative down, a same-named folder beside the file (the
        # compiler takes that one first), system, third-party and generated headers.
        _write(root, "transport/planted_ok/ops/x.h", "")
        _write(root, "transport/planted_ok/beside.h", "")
        _write(root, "transport/planted_ok/ok.cc",
               '#include "base/status.h"\n#include "../../base/status.h"\n'
               '#include "./beside.h"\n#include "beside.h"\n#include "ops/x.h"\n'
               '#include <transport/transport.h>\n#include "rendezvous/store.h"\n'
               '#include <vector>\n#include <sys/socket.h>\n#include <spdlog/spdlog.h>\n'
               '#include "kolo/build_config.h"\n#include <gloo/context.h>\n')
        status, out = _run(root)
        if status != 0:
            errors.append("allowed includes were reported:\n" + out)
        shutil.rmtree(os.path.join(root, "transport", "planted_ok"))

        # (name, file, its new text or a function of the old, the line that must be reported,
        #  the floor, what it uses, a phrase the message must hold)
        def replace_floor_declaration(old):
            return old.replace('kolo_add_floor(timeline "transport")',
                               'kolo_add_floor(timeline "core")')

        cases = [
            ("plain quoted", "transport/planted.cc", '#include "base/status.h"\n'
             '  #  include "ops/x.h"\n', 2, "transport", "ops", 'includes "ops/x.h"'),
            ("relative ../", "transport/planted.cc", '#include "../ops/x.h"\n', 1,
             "transport", "ops", 'includes "../ops/x.h" (= ops/x.h)'),
            ("relative ../../", "rendezvous/planted_sub/f.cc", '#include <vector>\n'
             '#include "../../core/runtime.h"\n', 2, "rendezvous", "core",
             "floor 'rendezvous' may not use 'core'"),
            ("angle", "kernels/planted.cc", "#include <ops/x.h>\n", 1, "kernels", "ops",
             "includes <ops/x.h>"),
            ("test header", "ops/planted.h", '#pragma once\n#include "test/support/x.h"\n', 2,
             "ops", "test", "may not use test/"),
            ("bench header, relative", "core/planted/f.cc", '#include "../../bench/b.h"\n', 1,
             "core", "bench", "may not use bench/"),
            ("test header, angle", "bindings/c/planted.cc", "#include <test/x.h>\n", 1,
             "bindings", "test", "includes <test/x.h>"),
            ("upward link", "transport/CMakeLists.txt",
             lambda old: old + "target_link_libraries(kolo_transport PUBLIC kolo_ops)\n",
             "target_link_libraries(kolo_transport PUBLIC kolo_ops)", "transport", "ops",
             "kolo_transport links kolo_ops: floor 'transport' may not use 'ops'"),
            ("upward link through kolo_engine", "base/CMakeLists.txt",
             lambda old: old + "target_link_libraries(kolo_base  # planted\n"
                               "  PRIVATE $<BUILD_INTERFACE:kolo_engine>)\n",
             "# planted", "base", "core",
             "kolo_base links kolo_engine (which brings core/)"),
            ("upward link through an alias", "kernels/CMakeLists.txt",
             lambda old: old + "target_link_libraries(kolo_kernels PRIVATE kolo::kolo)\n",
             "kolo::kolo", "kernels", "bindings", "floor 'kernels' may not use 'bindings'"),
            ("link to test code", "ops/CMakeLists.txt",
             lambda old: old + "target_link_libraries(kolo_ops PRIVATE kolo_test_support)\n",
             "kolo_test_support", "ops", "test", "may not use test/"),
            ("floor declared above", "timeline/CMakeLists.txt", replace_floor_declaration,
             'kolo_add_floor(timeline "core")', "timeline", "core",
             "kolo_add_floor(timeline core) links kolo_timeline to kolo_core"),
            ("floor missing from FLOORS", "extra/CMakeLists.txt",
             'kolo_add_floor(extra "core")\n', 1, "extra", "extra",
             "'extra' is not a floor of this check's order"),
        ]
        for name, rel, text, line, floor, used, phrase in cases:
            path = os.path.join(root, rel)
            old = _read(root, rel) if os.path.exists(path) else None
            new = text(old) if callable(text) else text
            if new == old:
                errors.append("%s: could not plant it in %s" % (name, rel))
                continue
            _write(root, rel, new)
            if isinstance(line, str):
                line = _line_of(new, line)
            found = [v.key() for v in include_violations(root)]
            found += [v.key() for v in link_violations(root)]
            want = [(rel.replace("/", os.sep), line, floor, used)]
            status, out = _run(root)
            if found != want:
                errors.append("%s: found %r, expected %r" % (name, found, want))
            elif status != 1 or phrase not in out or "%s:%d:" % (want[0][0], line) not in out:
                errors.append("%s: main() returned %d; its output lacks %r:\n%s" %
                              (name, status, phrase, out))
            if old is None:
                os.remove(path)
            else:
                _write(root, rel, old)
    for e in errors:
        print("check_layers self-test: " + e)
    if errors:
        return 1
    print("check_layers self-test: ok (%d planted forms caught; the tree itself passes)" %
          len(cases))
    return 0


if __name__ == "__main__":
    sys.exit(self_test() if sys.argv[1:] == ["--self-test"] else main(sys.argv))
