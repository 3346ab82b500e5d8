#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Fails when a floor uses a floor above its own, or test/bench code: by #include, by include
directory, forced or precompiled header, by compiling another floor's file, or by link; and when
the Python packages import each other.

kolo is built in floors, bottom to top (DESIGN.md "Floors"); each is its own CMake library and
may use only the floors below it (and itself):

    base < kernels < rendezvous < transport < timeline < ops < bootstrap < core < bindings

A file's floor is its top-level folder. Static libraries do not stop an upward call by
themselves (a symbol a lower floor takes from a higher one links whenever the final binary links
both), so this check is what holds the direction; scripts/check_symbols.py checks the built
archives independently. Three parts:

includes  Every file of a floor's folder is read (whatever its name: x.def, x.txt, none; hidden
          folders too), except README* and *.md files, CMake files, binary files (a NUL byte)
          not named as C/C++ sources, caches and build trees, as the preprocessor reads it:
          comments removed (`#include /*x*/ "core/x.h"`), backslash-newline splices joined, NUL
          bytes as spaces, nothing inside a comment or a raw string. A directive is
          `#include`, `#include_next`, `#import` or `#embed`, with `#` also as the digraph `%:`
          or the trigraph `??=` and spaces anywhere (`  %:  include`), or a C++20 header unit
          (`import "x.h";`). A path with a '..' segment fails, whatever it reaches: the compiler
          tries it against each folder it searches (beside the file, the root, the build tree's
          generated/, the floors' PUBLIC include directory), so base/p1.cc's
          "../../core/runtime.h" is outside the tree beside the file but core's through
          build/generated/../../; kolo's includes are written from the repository root. An
          absolute path fails too, and so does an include of a macro (`#include SOME_HEADER`):
          use a literal path (the tree has none to allow). The rest is resolved as the compiler
          would: a quoted include beside the including file first, then the repository root,
          then (with --build-dir) the build tree's include folders of the floors' targets
          (generated/), symbolic links followed. One that lands in a floor above the file's
          fails, and so does one that lands in any top-level folder that is not a floor (test/,
          bench/, examples/, scripts/, a hidden folder...): library floors never include test or
          tool code. A file reached in third_party/ or in the build tree's generated/ is read as
          part of the floor that includes it (its includes must point down from there), and a
          file a floor includes is read even where the walk skips it (binary, *.md, a hidden or
          build folder). Headers outside the repository and the build tree (system, spdlog,
          gloo) are not checked. Includes are not resolved through CMake include directories:
          the CMake part refuses any directory that would let a bare "x.h" reach a floor above.
CMake     Every CMakeLists.txt and *.cmake in the tree (hidden folders too; build trees, those
          holding a CMakeCache.txt, and .git skipped) is parsed for targets (add_library,
          add_executable; a floor is declared with kolo_add_floor(NAME BELOW),
          third_party/cmake/KoloFloors.cmake, which makes kolo_NAME and links it to
          kolo_BELOW). A target belongs to the top-level folder that defines it; one defined at
          the root (kolo_engine) or in third_party/, or imported, stands for what it is made
          of: the folders of its sources, include directories and files (IMPORTED_LOCATION...)
          and what it links (`add_library(helper OBJECT core/negotiator.cc)` at the root brings
          core/ to a floor that links helper). For each target of a floor it reads
            links        target_link_libraries, link_libraries(), the LINK_LIBRARIES,
                         INTERFACE_LINK_LIBRARIES and PRECOMPILE_HEADERS_REUSE_FROM properties,
                         target_precompile_headers(REUSE_FROM), -lNAME in a link word, link
                         option or flag, and $<TARGET_...:x> in any argument of the floor's
                         target_* commands and properties (target_link_options(kolo_base PUBLIC
                         $<TARGET_FILE:kolo_core>)) and of any other command in a floor's folder
                         (add_custom_command...): a target of a higher floor or of a non-floor
                         folder fails, and so does a kolo_add_floor of a name missing from FLOORS;
            paths        its sources (add_library/add_executable, target_sources, the SOURCES
                         properties), include directories (target_include_directories,
                         include_directories(), the *INCLUDE_DIRECTORIES properties,
                         -I/-isystem/-iquote/-idirafter/--include-directory in compile options),
                         forced and precompiled headers (-include/-imacros/--include,
                         target_precompile_headers, PRECOMPILE_HEADERS), link options and flags
                         (target_link_options, add_link_options(), LINK_OPTIONS, LINK_FLAGS;
                         LINKER:a,b and -Wl,a,b split) and link directories
                         (target_link_directories, link_directories(), -L): one in a higher
                         floor's folder or a non-floor folder fails, in the source tree or in
                         the build tree (${PROJECT_BINARY_DIR}/core/libkolo_core.a is core's);
                         the root, third_party/, the target's own floor and those below are
                         fine; generator expressions are read through, $<INSTALL_INTERFACE:...>
                         skipped. A path that leaves the build tree (${PROJECT_BINARY_DIR}/..),
                         a relative path with '..' in a compile or link option (the compiler
                         resolves it from its working folder) and an include-prefix option
                         (-iprefix, -iwithprefix) fail. Compile options are those of
                         target_compile_options, add_compile_options(), add_definitions(), the
                         COMPILE_OPTIONS and COMPILE_FLAGS properties of targets, folders
                         (set_property(DIRECTORY), set_directory_properties) and sources
                         (set_source_files_properties, set_property(SOURCE)), and the
                         CMAKE_<LANG>_FLAGS[_<CONFIG>] variables; link flags those of
                         CMAKE_<TYPE>_LINKER_FLAGS[_<CONFIG>] and CMAKE_<LANG>_STANDARD_LIBRARIES.
                         What is set for a folder counts for its floor, at the root and in
                         third_party/ (which the root includes) for every floor;
            variables    ${X} is expanded from set(), list(APPEND/PREPEND), string(APPEND/
                         PREPEND) and foreach() of the same file (and PROJECT_SOURCE_DIR,
                         CMAKE_CURRENT_SOURCE_DIR, PROJECT_BINARY_DIR and the like); one left
                         unexpanded in a floor target's links or paths fails unless it is a
                         system library's variable (EXTERNAL_VARIABLES below) that the tree
                         never set()s; a target name the check cannot expand fails in a floor's
                         folder, the root or third_party/ (the body of kolo_add_floor, whose
                         kolo_${name} is every floor and whose kolo_${below} is read at each
                         call, excepted);
            unreadable   cmake_language(CALL|EVAL|DEFER ...) fails in any CMake file of the tree
                         (it runs commands this check never sees; a test's folder may configure
                         a floor's target too); in a floor's folder, the root or third_party/,
                         include() of a file and add_subdirectory() outside the source tree or
                         in the build tree (written at configure time), or through a variable it
                         cannot expand, fail, and so does a CMAKE_MODULE_PATH entry there.
          Unknown names (system and third-party libraries) are not checked.
Python    bindings/python (the `kolo` package) never imports the launcher package
          `kolo_launcher`, and bindings/launcher (`kolo_launcher` and the `kolorun` script)
          never imports `kolo` (their README.md "May use"): every *.py there, and every script
          with a python #! line, is parsed with `ast`; import, from-import (at any depth:
          inside functions too) and importlib.import_module/__import__ of a literal name count;
          a file there that does not parse fails.

Not seen (scripts/README.md): #if branches (an include under #if 0 still counts), what a
compiler launcher or wrapper, a toolchain file or the command line adds, CMake code run through
function parameters outside the floors' files, and the uses a header makes without an include
(the symbols a floor's objects take from a higher floor are scripts/check_symbols.py's).

bench/, test/ and examples/ sit above every floor and are not checked themselves. Exit status 0
when everything points down or sideways, 1 with one line per violation otherwise
(file:line, what it includes, compiles or links, which floor points up to which).

Usage: scripts/check_layers.py [REPO_ROOT] [--build-dir BUILD_DIR]
                                         (with a build tree, includes found in its generated/
                                         are read as part of the floor including them)
       scripts/check_layers.py --self-test   (every violating form planted in a scratch copy of
                                              this tree is found; the unplanted copy passes:
                                              scripts/check_layers_selftest.py)
"""

import ast
import collections
import os
import re
import sys

FLOORS = ["base", "kernels", "rendezvous", "transport", "timeline", "ops", "bootstrap", "core",
          "bindings"]
RANK = {name: i for i, name in enumerate(FLOORS)}
# Vendored dependencies: neither a floor nor forbidden to one.
EXTERNAL = {"third_party"}
# Never walked: git's store, caches, CMake's per-target folders.
_SKIP_DIRS = (".git", "__pycache__", "CMakeFiles")
SOURCES = (".c", ".cc", ".cpp", ".cxx", ".h", ".hh", ".hpp", ".hxx", ".cu", ".cuh", ".inl",
           ".inc", ".ipp", ".tcc")
ORDER = " < ".join(FLOORS)
# Variables a floor's link list or include directories may leave unexpanded: what CMake's find
# modules and find_path/find_library in third_party/cmake/KoloDependencies.cmake set for the
# system libraries (Threads, dl, MPI, Gloo, CUDA, NCCL), and the install tree's include folder.
# The real CMakeLists name imported targets instead (Threads::Threads, MPI::MPI_C, gloo,
# CUDA::cudart, kolo_nccl_lib); one of these that the tree itself set()s is not trusted.
EXTERNAL_VARIABLES = {
    "CMAKE_THREAD_LIBS_INIT", "CMAKE_DL_LIBS",
    "MPI_C_LIBRARIES", "MPI_CXX_LIBRARIES", "MPI_C_INCLUDE_DIRS", "MPI_CXX_INCLUDE_DIRS",
    "MPI_C_INCLUDE_PATH", "MPI_CXX_INCLUDE_PATH",
    "KOLO_GLOO_LIBRARY", "KOLO_GLOO_INCLUDE",
    "CUDAToolkit_INCLUDE_DIRS", "CUDA_LIBRARIES", "CUDA_INCLUDE_DIRS",
    "KOLO_NCCL_LIBRARY", "KOLO_NCCL_INCLUDE",
    "CMAKE_INSTALL_INCLUDEDIR",
}
# (folder, the package it must never import, why): bindings/python/README.md and
# bindings/launcher/README.md, "May use".
PYTHON_RULES = [
    ("bindings/python", "kolo_launcher",
     "the kolo package starts kolorun as a program and never imports kolo_launcher (ranks do "
     "not have it on their path; bindings/python/README.md)"),
    ("bindings/launcher", "kolo",
     "the launcher uses no kolo code: Python's standard library only, libkolo.so through "
     "ctypes (bindings/launcher/README.md)"),
]


class Violation:
    """One use of a floor above (or of a non-floor folder) by a floor, or a use the check cannot
    follow (`reason` says which)."""

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
    """Every folder at the root, hidden ones included."""
    return {d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d))}


def _walk(top, hidden=False):
    """(folder, file names) under top, sorted, without caches, build trees and (unless hidden)
    hidden folders; never .git."""
    for dirpath, dirnames, names in os.walk(top):
        dirnames[:] = sorted(d for d in dirnames
                             if (hidden or not d.startswith(".")) and d not in _SKIP_DIRS
                             and not os.path.exists(os.path.join(dirpath, d, "CMakeCache.txt")))
        yield dirpath, sorted(names)


# ---- includes ----------------------------------------------------------------------------------

# The C/C++ tokens that matter to finding directives: splices, newlines, comments, string and
# character literals (raw strings included), numbers (whose ' separators are not quotes).
_TOKEN = re.compile(r"""
    (?P<splice>\\\r?\n)
  | (?P<newline>\n)
  | (?P<line>//(?:[^\n\\]|\\\r?\n|\\.?)*)
  | (?P<block>/\*[\s\S]*?(?:\*/|\Z))
  | (?P<raw>(?:u8|[uUL])?R"(?P<delim>[^()\\\s"]{0,16})\([\s\S]*?(?:\)(?P=delim)"|\Z))
  | (?P<string>(?:u8|[uUL])?"(?:[^"\\\n]|\\\r?\n|\\.)*"?)
  | (?P<number>\.?\d(?:'?[\w.]|[eEpP][+-])*)
  | (?P<char>'(?:[^'\\\n]|\\.)*'?)
  | (?P<word>\w+|[^\w\n\\/"'.]+|.)
""", re.VERBOSE)
_DIRECTIVE = re.compile(r"""
    (?:(?:\#|%:|\?\?=)\s*(?:include_next|include|import|embed)   # also as digraph, trigraph
     |(?:export\s+)?(?P<unit>import)(?=\s*["<]))                  # a C++20 header unit
    (?![\w$])\s*(?P<operand>.*)$""", re.VERBOSE)
_LITERAL = re.compile(r'(["<])([^">]*)[">]')
# Not read for includes: documentation and CMake files (the CMake part reads those).
_DOCS = (".md", ".markdown")
_code_cache = {}


def code_lines(text):
    """(line number, text) of each logical line of C/C++ source, as the preprocessor sees it:
    comments replaced by a space, backslash-newline splices joined (the line numbered by its
    first physical line), the body of a raw string left out; a NUL byte is a space (GCC ignores
    it)."""
    cached = _code_cache.get(text)
    if cached is not None:
        return cached
    out, cur, start, line = [], [], 1, 1
    for m in _TOKEN.finditer(text.replace("\0", " ")):
        kind, s = m.lastgroup, m.group(0)
        if kind == "newline":
            out.append((start, "".join(cur)))
            cur, line = [], line + 1
            start = line
            continue
        line += s.count("\n")
        if kind in ("line", "block"):
            cur.append(" ")
        elif kind == "raw":
            cur.append('R""')
        elif kind != "splice":
            cur.append(re.sub(r"\\\r?\n", "", s) if kind == "string" else s)
    out.append((start, "".join(cur)))
    _code_cache[text] = out
    return out


_directives_cache = {}


def directives(text):
    """(line number, keyword as written, operand, whether a C++20 header unit) of each include
    directive of C/C++ text (memoized)."""
    found = _directives_cache.get(text)
    if found is None:
        found = _directives_cache[text] = []
        for number, line in code_lines(text):
            line = line.lstrip()
            m = _DIRECTIVE.match(line)
            if m:
                found.append((number, line[:m.start("operand")].strip(),
                              m.group("operand").strip(), bool(m.group("unit"))))
    return found


def _inside(path, top):
    """path relative to the folder top when it lies inside it, else None."""
    rel = os.path.relpath(path, top)
    if rel == os.pardir or rel.startswith(os.pardir + os.sep):
        return None
    return rel


def resolve_include(root, path, bracket, header, build_dirs=()):
    """Where an include lands: ("repo", its repository-relative path), ("build", its absolute
    path) for a file found in one of build_dirs (the build tree's include directories), or None
    for a header of neither (system, spdlog, gloo) or a file at the root.

    Searched as the compiler does: a quoted include beside the including file `path` first,
    then (quoted or angle) the root, then build_dirs; the first that has the file wins, symbolic
    links followed. One found nowhere is taken beside the file when written ./, else at the
    root. `root` and build_dirs are real paths; `header` has no '..' segment (refused before)."""
    dirs = ([os.path.dirname(path)] if bracket == '"' else []) + [root] + list(build_dirs)
    for folder in dirs:
        full = os.path.join(folder, header)
        if os.path.isfile(full):
            break
    else:
        beside = bracket == '"' and header.startswith("./")
        full = os.path.join(os.path.dirname(path) if beside else root, header)
    full = os.path.realpath(full)
    if any(_inside(full, b) is not None for b in build_dirs):
        return "build", full
    rel = _inside(full, root)
    if rel is None or os.sep not in rel:
        return None
    return "repo", rel


def _floor_files(root, floor):
    """Every file of a floor's folder this part reads: all but documentation (README*, *.md)
    and CMake files; hidden folders included, .git, caches and build trees not."""
    for dirpath, names in _walk(os.path.join(root, floor), hidden=True):
        for name in names:
            if (name.startswith("README") or name.lower().endswith(_DOCS)
                    or name == "CMakeLists.txt" or name.endswith(".cmake")):
                continue
            path = os.path.join(dirpath, name)
            if os.path.isfile(path):
                yield path


def _read_source(path, included):
    """A file's text, or None for a binary file (a NUL byte) that is neither a C/C++ source by
    its name nor `included` by one (the compiler reads any file it is told to include, and
    ignores NUL bytes)."""
    with open(path, "rb") as f:
        data = f.read()
    if b"\0" in data and not included and not path.endswith(SOURCES):
        return None
    return data.decode("utf-8", errors="replace")


def include_violations(root, build_dirs=()):
    """Yields a Violation for each include of a floor's file that points up or out, has a '..'
    segment or an absolute path, or names a macro; and so for each file such an include reaches
    in third_party/ or build_dirs, read as part of the including floor."""
    root = os.path.realpath(root)
    build_dirs = [os.path.realpath(b) for b in build_dirs]
    folders = _top_folders(root) | set(FLOORS)
    # (path, the floor it is read for, who included it (None: a file of that floor's folder))
    todo = collections.deque((path, floor, None) for floor in FLOORS
                             for path in _floor_files(root, floor))
    done, resolved = set(), {}
    while todo:
        path, floor, origin = todo.popleft()
        key = (os.path.realpath(path), floor)
        if key in done:
            continue
        text = _read_source(path, origin is not None)
        if text is None:
            continue
        done.add(key)
        rel_path = _inside(path, root) or path
        for number, keyword, operand, unit in directives(text):
            literal = _LITERAL.match(operand)
            if not literal:
                if unit:
                    continue  # import of a module name, not of a file
                yield Violation(rel_path, number, "%s %s" % (keyword, operand), floor, operand,
                                reason="an include of a macro (or of nothing): this check "
                                "cannot tell which file it names; use a literal path")
                continue
            bracket, header = literal.group(1), literal.group(2).strip()
            written = '"%s"' % header if bracket == '"' else "<%s>" % header
            what = "includes %s" % written
            if origin is not None:
                what += " (reached from %s)" % origin
            if ".." in header.split("/"):
                yield Violation(rel_path, number, what, floor, "..", reason="an include path "
                                "with a '..' segment, which lands somewhere else for each "
                                "folder the compiler searches (beside the file, the root, "
                                "the build tree's generated/): write it from the repository "
                                "root (\"base/status.h\")")
                continue
            if header.startswith("/"):
                yield Violation(rel_path, number, what, floor, "/", reason="an absolute "
                                "include path: write it from the repository root")
                continue
            lookup = (os.path.dirname(path), bracket, header)
            found = resolved.get(lookup, False)
            if found is False:
                found = resolved[lookup] = resolve_include(root, path, bracket, header,
                                                           build_dirs)
            if found is None:
                continue
            where, rel = found
            here = origin or rel_path
            if where == "build":
                todo.append((rel, floor, here))  # a generated header: part of this floor
                continue
            folder = rel.split(os.sep, 1)[0]
            if folder in EXTERNAL:
                todo.append((os.path.join(root, rel), floor, here))
                continue
            if folder in RANK and not _forbidden(floor, folder):
                # read as its own floor's (done already, unless in a folder the walk skips)
                todo.append((os.path.join(root, rel), folder, here))
                continue
            if folder not in folders or not _forbidden(floor, folder):
                continue
            shown = rel.replace(os.sep, "/")
            if shown != header:
                what = what.replace(written, "%s (= %s)" % (written, shown), 1)
            yield Violation(rel_path, number, what, floor, folder)


# ---- CMake: links, sources, include directories --------------------------------------------------

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_BRACKET = re.compile(r"\[(=*)\[")
_NAME = re.compile(r"[A-Za-z0-9_.+\-]+(?:::[A-Za-z0-9_.+\-]+)*")
_VARIABLE = re.compile(r"\$(ENV|CACHE)?\{([^${}]*)\}")
_UNEXPANDED = re.compile(r"\x00\d+\x00")
_GENEX = re.compile(r"\$<([^<>]*)>")
_TARGET_GENEX = re.compile(r"\$<TARGET_[A-Z_]+:([^,<>]+)")
_LINK_KEYWORDS = {"PUBLIC", "PRIVATE", "INTERFACE", "LINK_PUBLIC", "LINK_PRIVATE",
                  "LINK_INTERFACE_LIBRARIES", "debug", "optimized", "general"}
_PATH_KEYWORDS = {"PUBLIC", "PRIVATE", "INTERFACE", "SYSTEM", "BEFORE", "AFTER", "BASE_DIRS",
                  "FILES", "STATIC", "SHARED", "MODULE", "OBJECT", "UNKNOWN", "IMPORTED",
                  "GLOBAL", "EXCLUDE_FROM_ALL", "WIN32", "MACOSX_BUNDLE"}
# Compile options that name an include directory, and those that name a file the compiler reads
# as if #included first, each alone (the path is the next word) or joined to its path; and those
# that build include directories from pieces (refused in a floor). Longest first.
_PREFIX_FLAGS = ("--include-prefix", "--include-with-prefix", "-iprefix", "-iwithprefix")
_INCLUDE_FLAGS = ("--include-directory=", "--include-directory", "-isystem", "-iquote",
                  "-idirafter", "-I")
_FILE_FLAGS = ("--include=", "--include", "--imacros=", "--imacros", "-include", "-imacros")
# Property -> what its values are, for set_target_properties, set_property(TARGET|DIRECTORY|
# SOURCE ...), set_directory_properties and set_source_files_properties; any other property's
# values are read for $<TARGET_...:x> only ("genex").
_PROPERTIES = {"LINK_LIBRARIES": "link", "INTERFACE_LINK_LIBRARIES": "link",
               "INTERFACE_LINK_LIBRARIES_DIRECT": "link", "PRECOMPILE_HEADERS_REUSE_FROM": "link",
               "SOURCES": "source", "INTERFACE_SOURCES": "source",
               "INCLUDE_DIRECTORIES": "dir", "INTERFACE_INCLUDE_DIRECTORIES": "dir",
               "INTERFACE_SYSTEM_INCLUDE_DIRECTORIES": "dir",
               "COMPILE_OPTIONS": "option", "INTERFACE_COMPILE_OPTIONS": "option",
               "COMPILE_FLAGS": "flags",
               "LINK_OPTIONS": "linkopt", "INTERFACE_LINK_OPTIONS": "linkopt",
               "STATIC_LIBRARY_OPTIONS": "linkopt", "LINK_FLAGS": "linkflags",
               "STATIC_LIBRARY_FLAGS": "linkflags",
               "LINK_DIRECTORIES": "linkdir", "INTERFACE_LINK_DIRECTORIES": "linkdir",
               "PRECOMPILE_HEADERS": "header", "INTERFACE_PRECOMPILE_HEADERS": "header"}
# An imported target's files and links (IMPORTED_LOCATION_<CONFIG> ...).
_IMPORTED_LINKS = ("IMPORTED_LOCATION", "IMPORTED_OBJECTS", "IMPORTED_IMPLIB", "IMPORTED_LINK_")
# Variables that give every target of their folder compile or link flags, include directories
# or libraries: CMAKE_<LANG>_FLAGS[_<CONFIG>], CMAKE_<TYPE>_LINKER_FLAGS[_<CONFIG>], ...
_FLAG_VARIABLES = [(re.compile(r"CMAKE_REQUIRED_\w*"), None),
                   (re.compile(r"CMAKE_\w*LINKER_FLAGS\w*"), "linkflags"),
                   (re.compile(r"CMAKE_\w+_STANDARD_LIBRARIES"), "linkflags"),
                   (re.compile(r"CMAKE_\w+_STANDARD_INCLUDE_DIRECTORIES"), "dir"),
                   (re.compile(r"CMAKE_\w+_FLAGS(?:_\w+)?"), "flags")]
# Each kind of use: how a message says it.
_VERBS = {"link": "links", "source": "compiles", "dir": "has include directory",
          "optdir": "has include directory", "header": "has forced include",
          "pch": "has precompiled header",
          "option": "has compile option", "flags": "has compile flags",
          "linkopt": "has link option", "linkflags": "has link flags",
          "linkdir": "has link directory", "genex": "uses"}
_SOURCE_DIRS = ("PROJECT_SOURCE_DIR", "CMAKE_SOURCE_DIR", "kolo_SOURCE_DIR")
_CURRENT_DIRS = ("CMAKE_CURRENT_SOURCE_DIR", "CMAKE_CURRENT_LIST_DIR")
_BINARY_DIRS = ("PROJECT_BINARY_DIR", "CMAKE_BINARY_DIR", "CMAKE_CURRENT_BINARY_DIR",
                "kolo_BINARY_DIR")
_BUILD_TREE = os.path.join(os.sep, "@build-tree@")  # no <> (read as a generator expression)
# A floor target kolo_add_floor's body configures: every floor (checked as the lowest).
_EVERY_FLOOR = "kolo_${name}"


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
    """The (word, line) of a command's arguments from just after its '('; the index after its
    ')'."""
    words, cur, depth, n = [], [], 0, len(text)
    state = [line, False]  # the current word's first line; whether it is quoted

    def flush():
        if cur:
            word = "".join(cur)
            if state[1]:  # a quoted or bracket argument is one word, even empty or with ';'
                words.append((word, state[0]))
            else:
                words.extend((w, state[0]) for w in word.split(";") if w)
            del cur[:]
            state[1] = False

    def add(s, quoted=False):
        if not cur:
            state[0] = line
        state[1] = state[1] or quoted
        cur.append(s)

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
            add(text[i + 1:j], True)
            line += text.count("\n", i, j)
            i = j + 1
        elif c == "[" and _BRACKET.match(text, i):
            m = _BRACKET.match(text, i)
            end = text.find("]" + m.group(1) + "]", m.end())
            end = n if end < 0 else end
            add(text[m.end():end], True)
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
            add(c)
            i += 1
    flush()
    return words, i, line


_calls_cache = {}


def cmake_calls(text):
    """[(command in lower case, [(argument word, its line)], line)] of each command call in
    CMake text (memoized: the self-test reads the same files many times)."""
    calls = _calls_cache.get(text)
    if calls is None:
        calls = _calls_cache[text] = list(_cmake_calls(text))
    return calls


def _cmake_calls(text):
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
    """Every CMakeLists.txt and *.cmake of the tree, hidden folders included, build trees and
    .git left out."""
    for dirpath, names in _walk(root, hidden=True):
        for name in names:
            if name == "CMakeLists.txt" or name.endswith(".cmake"):
                yield os.path.join(dirpath, name)


def _expand(word, variables, keep=False):
    """word with each ${X} replaced, innermost first, by variables[X]; with keep, an unknown one
    stays as written, else it becomes a \\0n\\0 mark. Returns (text, the unknown names)."""
    unknown = []

    def sub(m):
        if not m.group(1) and m.group(2) in variables:
            return variables[m.group(2)]
        if keep:
            return m.group(0)
        unknown.append(m.group(0) if m.group(1) else m.group(2))
        return "\x00%d\x00" % (len(unknown) - 1)

    for _ in range(16):
        new = _VARIABLE.sub(sub, word)
        if new == word:
            break
        word = new
    if not keep:
        word = _VARIABLE.sub(sub, word)  # what a cycle of set()s left
    return word, unknown


def _strip_genex(word):
    """A path with its generator expressions read through: $<INSTALL_INTERFACE:...> and
    $<TARGET_...:...> dropped, $<COND:value> taken as value."""
    def sub(m):
        body = m.group(1)
        if body.startswith(("INSTALL_INTERFACE:", "TARGET_")) or ":" not in body:
            return ""
        return body.split(":", 1)[1]

    for _ in range(16):
        new = _GENEX.sub(sub, word)
        if new == word:
            break
        word = new
    return word


def _option_flag(token):
    """('prefix', 'dir' or 'file', the path joined to the flag, '' when alone) for a compile
    option that names an include prefix, an include directory or a file the compiler reads
    first; (None, None) for another option."""
    for kind, flags in (("prefix", _PREFIX_FLAGS), ("dir", _INCLUDE_FLAGS),
                        ("file", _FILE_FLAGS)):
        for flag in flags:
            if token.startswith(flag):
                return kind, token[len(flag):]
    return None, None


def _link_pieces(token):
    """The linker arguments of a link option or flag: LINKER:a,b and -Wl,a,b split, and of an
    option -x=value its value."""
    if token.startswith("LINKER:"):
        pieces = token[len("LINKER:"):].split(",")
    elif token.startswith("-Wl,"):
        pieces = token[len("-Wl,"):].split(",")
    else:
        pieces = [token]
    return [p.split("=", 1)[1] if p.startswith("-") and "=" in p else p for p in pieces]


def _tokens(kind, text):
    """The items of a use's expanded text: a CMake list, or for flags (one string) its words."""
    return [t for t in re.split(r"[;\s]+" if kind in ("flags", "linkflags") else ";", text) if t]


def _property_kind(name):
    if name in _PROPERTIES:
        return _PROPERTIES[name]
    return "link" if name.startswith(_IMPORTED_LINKS) else "genex"


def _variable_kind(name):
    for pattern, kind in _FLAG_VARIABLES:
        if pattern.fullmatch(name):
            return kind
    return None


class _Target:
    def __init__(self, folder, imported):
        self.folder, self.imported, self.links, self.brings = folder, imported, [], set()


class _Use:
    """One word a target (or a folder's targets) uses: its kind is a key of _VERBS."""

    def __init__(self, subject, kind, word, expanded, unknown, allowed, rel, line, fdir, command):
        self.subject, self.kind, self.word, self.expanded = subject, kind, word, expanded
        self.unknown, self.allowed = unknown, allowed
        self.rel, self.line, self.fdir, self.command = rel, line, fdir, command


_HANDLED = {"add_library", "add_executable", "kolo_add_floor", "target_sources",
            "target_include_directories", "target_link_libraries", "target_compile_options",
            "target_link_options", "target_link_directories", "target_precompile_headers",
            "target_compile_definitions", "target_compile_features", "set_target_properties",
            "set_property", "set_directory_properties", "set_source_files_properties"}


def _read_cmake(root):
    """Everything the CMake part reads: targets, aliases, uses, the variables the tree set()s,
    and the problems found on the way (kolo_add_floor of unknown floors, computed target names,
    cmake_language, CMake files or module folders outside the source tree)."""
    targets, aliases, uses, set_anywhere, problems = {}, {}, [], set(), []
    for path in cmake_files(root):
        rel = os.path.relpath(path, root)
        folder = rel.split(os.sep, 1)[0] if os.sep in rel else ""
        fdir = os.path.dirname(path)
        floor_file = folder in RANK or folder in EXTERNAL or folder == ""
        # A directory-wide setting here reaches this floor's targets, or every floor's (at the
        # root and in third_party/, which the root includes).
        here = ("directory", folder if folder in RANK else "") if floor_file else None
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        variables = {name: root for name in _SOURCE_DIRS}
        variables.update({name: fdir for name in _CURRENT_DIRS})
        variables.update({name: _BUILD_TREE for name in _BINARY_DIRS})
        if os.path.basename(path) == "CMakeLists.txt" or folder not in EXTERNAL and folder:
            variables["CMAKE_CURRENT_BINARY_DIR"] = os.path.normpath(
                os.path.join(_BUILD_TREE, os.path.relpath(fdir, root)))
        function = None  # (name, parameters) of the function() being read
        for command, words, line in cmake_calls(text):
            args = [_expand(w, variables, keep=True)[0] for w, _ in words]
            if command in ("function", "macro") and args:
                function = (args[0].lower(), args[1:])
                continue
            if command in ("endfunction", "endmacro"):
                function = None
                continue
            in_floor_body = function is not None and function[0] == "kolo_add_floor"
            params = set(function[1]) if in_floor_body else set()
            where = folder or "(root)"

            def use(subject, kind, item):
                word, wline = item
                expanded, unknown = _expand(word, variables)
                uses.append(_Use(subject, kind, word, expanded, unknown, params, rel, wline,
                                 fdir, command))

            def options(subject, items):
                """Compile options: a flag alone (-I, -include...) takes the next word as its
                path."""
                i = 0
                while i < len(items):
                    flag, joined = _option_flag(_strip_genex(
                        _expand(items[i][0], variables, keep=True)[0]))
                    use(subject, "option", items[i])
                    if flag in ("dir", "file") and joined == "" and i + 1 < len(items):
                        use(subject, "optdir" if flag == "dir" else "header", items[i + 1])
                        i += 1
                    i += 1

            def by_kind(subject, kind, items):
                if kind == "option":
                    options(subject, items)
                else:
                    for item in items:
                        use(subject, kind, item)

            def outside(i):
                """Why the path of words[i] is one this check cannot read, or None."""
                expanded, unknown = _expand(words[i][0], variables)
                if unknown:
                    return "%s is a variable this check cannot follow" % ", ".join(
                        "${%s}" % n for n in unknown)
                for p in expanded.split(";"):
                    if p.startswith(_BUILD_TREE):
                        return "it is in the build tree (generated at configure time)"
                    full = os.path.realpath(os.path.join(fdir, p))
                    rel = _inside(full, root)
                    if rel is None:
                        return "it is outside the source tree"
                    while rel and rel != os.curdir:  # a build tree inside the source tree
                        if os.path.exists(os.path.join(root, rel, "CMakeCache.txt")):
                            return "it is in a build tree (%s/)" % rel.replace(os.sep, "/")
                        rel = os.path.dirname(rel)
                return None

            def setting(name, items):
                """set(), list(APPEND), string(APPEND) of a variable that reaches every target
                of the folder (compile and link flags), or of CMAKE_MODULE_PATH."""
                kind = _variable_kind(name)
                if kind and here:
                    for word, wline in items:
                        use(here, kind, (word, wline))
                if name == "CMAKE_MODULE_PATH" and floor_file:
                    for i in range(len(words)):
                        if words[i] in items and words[i][0] != "${CMAKE_MODULE_PATH}":
                            why = outside(i)
                            if why:
                                problems.append(Violation(
                                    rel, words[i][1], "CMAKE_MODULE_PATH gets %s" % words[i][0],
                                    where, "CMAKE_MODULE_PATH", reason="a module folder this "
                                    "check does not read: %s" % why))

            if command == "cmake_language" and args and args[0] in ("CALL", "EVAL", "DEFER"):
                # Anywhere: a test's CMake file may configure a floor's target too.
                problems.append(Violation(
                    rel, line, "cmake_language(%s ...)" % args[0], where, "cmake_language",
                    reason="cmake_language CALL, EVAL and DEFER run commands this check never "
                    "sees: call the command itself"))
                continue
            if command == "set" and args:
                values = args[1:]
                if "CACHE" in values:
                    values = values[:values.index("CACHE")]
                values = [v for v in values if v != "PARENT_SCOPE"]
                variables[args[0]] = ";".join(values)
                set_anywhere.add(args[0])
                setting(args[0], [words[i] for i in range(1, len(values) + 1)])
                continue
            if command == "unset" and args:
                variables.pop(args[0], None)
                continue
            if command == "list" and len(args) > 1 and args[0] in ("APPEND", "PREPEND"):
                old = [variables[args[1]]] if variables.get(args[1]) else []
                new = args[2:]
                variables[args[1]] = ";".join(old + new if args[0] == "APPEND" else new + old)
                set_anywhere.add(args[1])
                setting(args[1], words[2:])
                continue
            if command == "string" and len(args) > 1 and args[0] in ("APPEND", "PREPEND"):
                old, new = variables.get(args[1], ""), "".join(args[2:])
                variables[args[1]] = old + new if args[0] == "APPEND" else new + old
                set_anywhere.add(args[1])
                setting(args[1], words[2:])
                continue
            if command == "foreach" and args:
                items = args[1:]
                if items[:1] == ["IN"]:
                    items, mode = [], None
                    for a in args[2:]:
                        if a in ("LISTS", "ITEMS", "ZIP_LISTS"):
                            mode = a
                        elif mode == "LISTS":
                            items.extend(v for v in variables.get(a, "").split(";") if v)
                        else:
                            items.append(a)
                elif items[:1] == ["RANGE"]:
                    items = []
                variables[args[0]] = ";".join(items)
                continue
            if command in ("include", "add_subdirectory") and args:
                # A module by name (no '/', no .cmake) comes from CMAKE_MODULE_PATH (above).
                if floor_file and (command == "add_subdirectory" or "/" in args[0]
                                   or args[0].endswith(".cmake")):
                    why = outside(0)
                    if why:
                        problems.append(Violation(
                            rel, line, "%s(%s)" % (command, words[0][0]), where, command,
                            reason="a CMake file this check does not read: %s" % why))
                continue

            # Directory-wide commands: every target of this folder (of every floor at the root
            # and in third_party/, which the root includes).
            if command in ("include_directories", "link_libraries", "add_compile_options",
                           "add_definitions", "add_link_options", "link_directories"):
                if here:
                    kind = {"include_directories": "dir", "link_libraries": "link",
                            "add_compile_options": "option", "add_definitions": "option",
                            "add_link_options": "linkopt", "link_directories": "linkdir"}[command]
                    by_kind(here, kind, [words[i] for i in range(len(words))
                                         if args[i] not in _PATH_KEYWORDS])
                continue
            if command not in _HANDLED or not args:
                # Any other command of a floor's folder: its $<TARGET_...:x> name targets too.
                if folder in RANK:
                    for i in range(len(words)):
                        if "$<" in args[i]:
                            use(here, "genex", words[i])
                continue

            # The subjects this call is about (targets, or a folder's), and its properties.
            pairs = []  # (property, first value index, end)
            if command in ("set_property", "set_target_properties", "set_directory_properties",
                           "set_source_files_properties"):
                keyword = "PROPERTY" if command == "set_property" else "PROPERTIES"
                end = args.index(keyword) if keyword in args else len(args)
                if command == "set_property":
                    scope = args[0]
                    names = [a for a in args[1:end] if a not in ("APPEND", "APPEND_STRING")]
                    if end + 1 < len(args):
                        pairs = [(args[end + 1], end + 2, len(args))]
                else:
                    scope = {"set_target_properties": "TARGET",
                             "set_directory_properties": "DIRECTORY"}.get(command, "SOURCE")
                    names = args[:end]
                    pairs = [(args[i], i + 1, i + 2) for i in range(end + 1, len(args), 2)]
                if scope in ("DIRECTORY", "SOURCE"):
                    if not here:
                        continue
                    # Another folder's (DIRECTORY d, or a source's TARGET_DIRECTORY t): checked
                    # as every floor's, the strictest.
                    other = (scope == "DIRECTORY" and bool(names) or scope == "SOURCE"
                             and ("DIRECTORY" in names or "TARGET_DIRECTORY" in names))
                    subject = ("directory", "") if other else here
                    for prop, first, stop in pairs:
                        by_kind(subject, _property_kind(prop), words[first:min(stop, len(words))])
                    continue
                if scope != "TARGET":
                    continue
            else:
                names = args[:1]
            subjects = []
            for name in names:
                if "${" not in name:
                    subjects.append(name)
                elif in_floor_body and function[1] and name == "kolo_${%s}" % function[1][0]:
                    subjects.append(_EVERY_FLOOR)
                elif floor_file:
                    problems.append(Violation(
                        rel, line, "%s(%s ...)" % (command, name), where, name,
                        reason="a target name this check cannot expand (not set() in this "
                        "file): write the target's name"))
            if not subjects:
                continue
            if command in ("add_library", "add_executable"):
                name = subjects[0]
                if name == _EVERY_FLOOR:
                    continue  # the floors themselves are the kolo_add_floor calls
                if len(args) > 2 and args[1] == "ALIAS":
                    aliases[name] = args[2]
                    continue
                targets[name] = _Target(folder, "IMPORTED" in args[1:])
                by_kind(name, "source", [words[i] for i in range(1, len(words))
                                         if args[i] not in _PATH_KEYWORDS])
            elif command == "kolo_add_floor":
                name = "kolo_" + args[0]
                targets[name] = _Target(folder, False)
                if args[0] not in RANK:
                    problems.append(Violation(
                        rel, line, "kolo_add_floor(%s ...)" % args[0], args[0], args[0],
                        reason="'%s' is not a floor of this check's order (FLOORS in %s)" %
                        (args[0], "scripts/check_layers.py")))
                if len(args) > 1 and args[1]:
                    uses.append(_Use(name, "link", words[1][0], "kolo_" + args[1], [], set(),
                                     rel, words[1][1], fdir, command))
            elif command == "target_link_libraries":
                by_kind(subjects[0], "link", [words[i] for i in range(1, len(words))
                                              if args[i] not in _LINK_KEYWORDS])
            elif command in ("target_sources", "target_include_directories",
                             "target_link_directories", "target_link_options"):
                kind = {"target_sources": "source", "target_include_directories": "dir",
                        "target_link_directories": "linkdir",
                        "target_link_options": "linkopt"}[command]
                skip, items = False, []
                for i in range(1, len(words)):
                    if skip:
                        skip = False
                    elif args[i] in ("FILE_SET", "TYPE"):
                        skip = True
                    elif args[i] not in _PATH_KEYWORDS:
                        items.append(words[i])
                by_kind(subjects[0], kind, items)
            elif command == "target_precompile_headers":
                if args[1:2] == ["REUSE_FROM"]:
                    by_kind(subjects[0], "link", words[2:3])
                else:
                    by_kind(subjects[0], "pch", [words[i] for i in range(1, len(words))
                                                 if args[i] not in _PATH_KEYWORDS])
            elif command == "target_compile_options":
                options(subjects[0], [words[i] for i in range(1, len(words))
                                      if args[i] not in ("BEFORE",) + tuple(_LINK_KEYWORDS)])
            elif command in ("target_compile_definitions", "target_compile_features"):
                by_kind(subjects[0], "genex", words[1:])
            else:
                # set_property(TARGET T... PROPERTY P V...): one property, every value after it;
                # set_target_properties(T... PROPERTIES P V P V...): one value each.
                for prop, first, stop in pairs:
                    for subject in subjects:
                        by_kind(subject, _property_kind(prop), words[first:min(stop, len(words))])
    return targets, aliases, uses, set_anywhere, problems


def _cmake_landings(root, fdir, path, loose):
    """Where a path of a CMake use lands: [(top-level folder, path inside the tree, whether in
    the build tree)], empty outside both trees (system) and at either root; or a string saying
    why this check cannot tell. A relative path is taken from the CMake file's folder and, when
    loose (the compiler or linker resolves it, not CMake), from the root too."""
    if path.startswith(_BUILD_TREE):
        norm = os.path.normpath(path)
        if norm != _BUILD_TREE and not norm.startswith(_BUILD_TREE + os.sep):
            return ("it leaves the build tree, so where it lands depends on where the build "
                    "tree is")
        inner = norm[len(_BUILD_TREE) + 1:]
        return [(inner.split(os.sep, 1)[0], inner, True)] if inner else []
    if loose and not os.path.isabs(path) and ".." in re.split(r"[\\/]", path):
        return ("a relative path with '..' that the compiler or linker resolves from its "
                "working folder in the build tree, which this check cannot see: write it "
                "from ${PROJECT_SOURCE_DIR}")
    out = []
    for base in [fdir] + ([root] if loose and not os.path.isabs(path) else []):
        rel = _inside(os.path.realpath(os.path.join(base, path)), root)
        if rel is not None and rel != os.curdir:
            out.append((rel.split(os.sep, 1)[0], rel, False))
    return out


def _use_paths(u):
    """(what it is, the path, loose) for each path a use names (see _cmake_landings), and
    ('prefix', the option, None) for an include-prefix option."""
    tokens = _tokens(u.kind, _strip_genex(u.expanded))
    out = []
    for i, token in enumerate(tokens):
        if u.kind in ("option", "flags"):
            flag, joined = _option_flag(token)
            if flag == "prefix":
                out.append(("prefix", token, None))
            elif flag:
                what = "include directory" if flag == "dir" else "forced include"
                if joined:
                    out.append((what, joined, True))
                elif u.kind == "flags" and i + 1 < len(tokens):
                    out.append((what, tokens[i + 1], True))
        elif u.kind in ("link", "linkopt", "linkflags"):
            if u.kind == "link" and not token.startswith("-"):
                if "/" in token:
                    out.append(("links", token, False))
                continue
            for piece in _link_pieces(token):
                if piece.startswith("-L") and len(piece) > 2:
                    out.append(("link directory", piece[2:], True))
                elif "/" in piece and not piece.startswith("-"):
                    out.append(("links" if u.kind == "link" else "link option", piece, True))
        elif u.kind in ("optdir", "header"):
            out.append(("include directory" if u.kind == "optdir" else "forced include", token,
                        True))
        elif u.kind == "pch":
            if token[:1] in "<\"" and token[-1:] in ">\"":
                out.append(("precompiled header", token[1:-1], True))
            else:
                out.append(("precompiled header", token, False))
        elif u.kind in ("source", "dir", "linkdir"):
            out.append(({"source": "compiles", "dir": "include directory",
                         "linkdir": "link directory"}[u.kind], token, False))
    return out


def _link_names(u):
    """The target names a use links: each name of a link word that is not a path, each -lNAME
    of a link word, option or flag, and $<TARGET_...:x> of any word."""
    text = _UNEXPANDED.sub("", u.expanded)
    names = [m.strip() for m in _TARGET_GENEX.findall(text)]
    for token in _tokens(u.kind, text):
        if u.kind == "link" and not token.startswith("-"):
            if "/" not in token:
                names.extend(_NAME.findall(token))
        elif u.kind in ("link", "linkopt", "linkflags"):
            names.extend(p[2:] for p in _link_pieces(token) if p.startswith("-l") and p[2:])
    return list(dict.fromkeys(names))


def cmake_violations(root, read=None):
    """Yields a Violation for each link, source, include directory, forced include, link option
    or link directory of a floor's target that points to a higher floor or out of the library,
    each variable or target name there that the check cannot follow, each kolo_add_floor of a
    floor this check does not know, and each CMake construct it cannot read."""
    root = os.path.realpath(root)
    targets, aliases, uses, set_anywhere, problems = read or _read_cmake(root)
    external = EXTERNAL_VARIABLES - set_anywhere
    folders = _top_folders(root) | set(FLOORS)

    def canonical(name):
        seen = set()
        while name in aliases and name not in seen:
            seen.add(name)
            name = aliases[name]
        return name

    def stands_alone(t):
        """A target of a floor's (or test/, bench/...) folder stands for that folder; one
        defined at the root or in third_party/, or imported, for what it is made of."""
        return t.folder and t.folder not in EXTERNAL and not t.imported

    for u in uses:
        t = targets.get(canonical(u.subject)) if isinstance(u.subject, str) else None
        if t is None:
            continue
        t.links.extend(_link_names(u))
        if stands_alone(t):
            continue
        for _, path, loose in _use_paths(u):
            if loose is None or _UNEXPANDED.search(path):
                continue
            landings = _cmake_landings(root, u.fdir, path, loose)
            for folder, _, _ in landings if not isinstance(landings, str) else ():
                if folder in folders:
                    t.brings.add(folder)

    def stands_for(name, seen):
        """The top-level folders a target brings: its own, or a root, third_party or imported
        target's sources, include directories, files and links'."""
        t = targets.get(canonical(name))
        if t is None or name in seen:
            return set()
        if stands_alone(t):
            return {t.folder}
        seen = seen | {name}
        out = set(t.brings)
        for dep in t.links:
            out |= stands_for(dep, seen)
        return out

    def floor_of(subject):
        if subject == _EVERY_FLOOR:
            return FLOORS[0]
        if isinstance(subject, tuple):
            return subject[1] or FLOORS[0]
        t = targets.get(canonical(subject))
        return t.folder if t is not None and t.folder in RANK else None

    def label(u):
        if u.subject == _EVERY_FLOOR:
            return "kolo_${name} (every floor: kolo_add_floor's body)"
        if isinstance(u.subject, tuple):
            return "%s() in %s" % (u.command, u.subject[1] + "/" if u.subject[1] else
                                   "the root (every floor)")
        return u.subject

    def unfollowed(u, text):
        """The variables of text (\\0n\\0 marks) this check may not leave unexpanded."""
        names = [u.unknown[int(m[1:-1])] for m in _UNEXPANDED.findall(text)]
        return [n for n in names if n not in external and n not in u.allowed]

    def variable_violation(u, floor, names):
        shown = ", ".join(u.word if "\x00" in n else n if n.startswith("$") else "${%s}" % n
                          for n in names)  # a nested ${a${b}} is shown as written
        return Violation(u.rel, u.line, "%s %s %s" % (label(u), _VERBS[u.kind], u.word), floor,
                         shown, reason="%s is a variable this check cannot follow for floor "
                         "'%s' (not set() in this file, nor a system library's: "
                         "EXTERNAL_VARIABLES in scripts/check_layers.py); write the target or "
                         "path itself" % (shown, floor))

    for v in problems:
        yield v
    for u in uses:
        floor = floor_of(u.subject)
        if floor is None:
            continue
        if u.kind == "link":
            bad = unfollowed(u, _strip_genex(u.expanded))  # not a $<$<BOOL:${X}>:...> condition
            if bad:
                yield variable_violation(u, floor, bad)
                continue
        for what, path, loose in _use_paths(u):
            head = "%s %s %s" % (label(u), _VERBS[u.kind], u.word)
            if loose is None:
                yield Violation(u.rel, u.line, head, floor, u.word, reason="an include prefix "
                                "option this check cannot follow: name the include directory "
                                "(-I)")
                continue
            bad = unfollowed(u, path)
            if bad:
                yield variable_violation(u, floor, bad)
                continue
            if _UNEXPANDED.search(path):
                continue  # a system library's path
            landings = _cmake_landings(root, u.fdir, path, loose)
            if isinstance(landings, str):
                yield Violation(u.rel, u.line, head, floor, u.word, reason=landings)
                continue
            for folder, rel, built in landings:
                if what not in ("include directory", "link directory") and os.sep not in rel:
                    continue  # a file at the root
                if folder not in folders or not _forbidden(floor, folder):
                    continue
                shown = rel.replace(os.sep, "/") + ("/" if what.endswith("directory") else "")
                if u.kind in ("option", "flags", "linkopt", "linkflags"):
                    text = head  # the option as written
                elif what in ("compiles", "links"):
                    text = "%s %s %s" % (label(u), what, u.word)
                else:
                    text = "%s has %s %s" % (label(u), what, u.word)
                if built:
                    text += " (= %s in the build tree)" % shown
                elif shown.rstrip("/") != u.word.rstrip("/"):
                    text += " (= %s)" % shown
                yield Violation(u.rel, u.line, text, floor, folder)
                break  # one finding per path
        # What it links: by name, through the target that name stands for.
        for dep in _link_names(u):
            d = targets.get(canonical(dep))
            direct = d is not None and stands_alone(d)
            if u.command == "kolo_add_floor":
                what = "kolo_add_floor(%s %s) links %s to %s" % (u.subject[len("kolo_"):],
                                                                 u.word, u.subject, dep)
            else:
                linked = u.kind in ("link", "source", "linkopt", "linkflags")
                what = "%s %s %s" % (label(u), "links" if linked else "uses", dep)
                if dep not in u.word:
                    what += " (from %s)" % u.word
            for folder in sorted(stands_for(dep, set()), key=lambda f: (RANK.get(f, -1), f)):
                if _forbidden(floor, folder):
                    yield Violation(u.rel, u.line, what, floor, folder,
                                    None if direct else folder)


# ---- Python imports ----------------------------------------------------------------------------

def _python_files(root, folder):
    """The *.py files under folder, and the scripts there whose #! line runs python."""
    for dirpath, names in _walk(os.path.join(root, folder)):
        for name in names:
            path = os.path.join(dirpath, name)
            if name.endswith(".py"):
                yield path
            elif "." not in name and os.path.isfile(path):
                with open(path, "rb") as f:
                    first = f.readline(200)
                if first.startswith(b"#!") and b"python" in first:
                    yield path


def _imports(tree):
    """(module name, line) of each absolute import in a parsed module, at any depth."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0 and node.module:
                yield node.module, node.lineno
        elif isinstance(node, ast.Call) and node.args:
            f = node.func
            called = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
            arg = node.args[0]
            if (called in ("import_module", "__import__") and isinstance(arg, ast.Constant)
                    and isinstance(arg.value, str) and not arg.value.startswith(".")):
                yield arg.value, node.lineno


_imports_cache = {}


def _imports_of(text, rel):
    """_imports of a file's text (memoized: the self-test reads the same files many times), or
    the error that stops it parsing."""
    key = (rel, text)
    if key not in _imports_cache:
        try:
            _imports_cache[key] = list(_imports(ast.parse(text, rel)))
        except (SyntaxError, ValueError) as e:
            _imports_cache[key] = e
    return _imports_cache[key]


def python_violations(root):
    """Yields a Violation for each import of a package that PYTHON_RULES keeps out of a
    folder, and for each Python file there that does not parse."""
    for folder, banned, why in PYTHON_RULES:
        if not os.path.isdir(os.path.join(root, folder)):
            continue
        for path in _python_files(root, folder):
            rel = os.path.relpath(path, root)
            with open(path, encoding="utf-8", errors="replace") as f:
                text = f.read()
            imports = _imports_of(text, rel)
            if isinstance(imports, Exception):
                yield Violation(rel, getattr(imports, "lineno", None) or 1, "does not parse",
                                folder, None,
                                reason="%s: this check cannot read its imports" % imports)
                continue
            for module, line in imports:
                if module.split(".", 1)[0] == banned:
                    yield Violation(rel, line, "imports %s" % module, folder, banned,
                                    reason="%s/ may not import %s: %s" % (folder, banned, why))


def build_include_dirs(root, build, read=None):
    """The folders of the build tree `build` that a floor's target has as include directories
    (the floors' PUBLIC ${PROJECT_BINARY_DIR}/generated), those that exist."""
    targets, _, uses, _, _ = read or _read_cmake(os.path.realpath(root))
    out = []
    for u in uses:
        t = targets.get(u.subject) if isinstance(u.subject, str) else None
        floor = u.subject == _EVERY_FLOOR or isinstance(u.subject, tuple) or (
            t is not None and t.folder in RANK)
        if not floor or u.kind not in ("dir", "optdir", "option", "flags"):
            continue
        for what, path, loose in _use_paths(u):
            if loose is None or _UNEXPANDED.search(path):
                continue
            landings = _cmake_landings(root, u.fdir, path, loose)
            for _, inner, built in landings if not isinstance(landings, str) else ():
                full = os.path.join(build, inner)
                if built and what == "include directory" and os.path.isdir(full):
                    if full not in out:
                        out.append(full)
    return out


def main(argv):
    args = list(argv[1:])
    build = None
    if "--build-dir" in args:
        at = args.index("--build-dir")
        if at + 1 >= len(args):
            print("check_layers: --build-dir needs a folder")
            return 2
        build = os.path.abspath(args[at + 1])
        del args[at:at + 2]
    root = args[0] if args else os.path.join(os.path.dirname(__file__), os.pardir)
    root = os.path.realpath(root)
    if not os.path.isdir(os.path.join(root, "base")):
        print("check_layers: %s has no base/ folder: not a kolo checkout" % root)
        return 1
    return report(*check(root, build))


def check(root, build=None):
    """(include, CMake, Python violations) of the tree at root, with the build tree `build`'s
    include folders when given."""
    read = _read_cmake(root)
    build_dirs = build_include_dirs(root, build, read) if build else []
    return (list(include_violations(root, build_dirs)), list(cmake_violations(root, read)),
            list(python_violations(root)))


def report(includes, cmake, python):
    """Prints the violations and a summary; the exit status."""
    for v in includes + cmake + python:
        print(v)
    if includes or cmake or python:
        print("check_layers: %d upward or outward include(s), %d CMake link(s), source(s) or "
              "include directory(ies), %d Python import(s); order: %s (test/, bench/ and other "
              "non-floor folders are above every floor)" %
              (len(includes), len(cmake), len(python), ORDER))
        return 1
    print("check_layers: every include, source, include directory, link and Python import "
          "points down (%s)" % ORDER)
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        from check_layers_selftest import self_test
        sys.exit(self_test())
    sys.exit(main(sys.argv))
