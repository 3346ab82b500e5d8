#!/usr/bin/env python3
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
                                              this tree is found; the unplanted copy passes)
"""

import ast
import collections
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


# ---- self-test ---------------------------------------------------------------------------------

def _copy_tree(src, dst):
    """The files this check reads from the tree at src (every file of the floors and
    third_party/; elsewhere sources, CMake files, Python files and scripts), without build trees
    or hidden folders; and a scratch build tree, build/ (with a CMakeCache.txt), holding
    generated/kolo/build_config.h."""
    for dirpath, names in _walk(src):
        rel = os.path.relpath(dirpath, src)
        everything = rel.split(os.sep, 1)[0] in RANK or rel.split(os.sep, 1)[0] in EXTERNAL
        out = os.path.join(dst, rel)
        os.makedirs(out, exist_ok=True)
        for name in names:
            if (everything or name.endswith(SOURCES + (".py", ".cmake"))
                    or name == "CMakeLists.txt" or "." not in name):
                path = os.path.join(dirpath, name)
                if os.path.isfile(path):
                    shutil.copy(path, os.path.join(out, name))
    _write(dst, os.path.join("build", "CMakeCache.txt"), "")
    _write(dst, os.path.join("build", "generated", "kolo", "build_config.h"),
           "#pragma once\n#define KOLO_HAVE_MPI 1\n")


class _Link:
    """A planted symbolic link to `target` (relative to the link's folder)."""

    def __init__(self, target):
        self.target = target


def _write(root, rel, text):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if isinstance(text, _Link):
        os.symlink(text.target, path)
        return
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
    """main()'s exit status and output on the tree at root (with its scratch build tree), and
    the key of each violation."""
    found = check(os.path.realpath(root), os.path.join(root, "build"))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = report(*found)
    return status, out.getvalue(), [v.key() for part in found for v in part]


def _append(line):
    return lambda old: old + line


# Allowed: down, sideways, ./ beside, a same-named folder beside the file (the compiler takes
# that one first), system, third-party and generated headers (and what a third_party/ or
# generated header includes, when it points down from the floor including it), digraph, #import,
# #include_next and header-unit forms pointing down; includes in comments, raw strings,
# __has_include, README and markdown files and binary files nobody includes; include directories
# at the root, in the floor, below it, in the build tree and the install tree; forced and
# precompiled headers, link options, link directories, compile flags and $<TARGET_...:x> naming
# what is below; a root or third_party/ target made of floors below; a system library's
# variable; a set() variable naming a floor below; module include(), cmake_language other than
# CALL/EVAL/DEFER; relative imports and find_spec in the Python packages.
_ALLOWED = {
    "transport/planted_ok/ops/x.h": "",
    "transport/planted_ok/beside.h": "",
    "transport/planted_ok/ok.cc":
        '#include "base/status.h"\n'
        '#include "./beside.h"\n#include "beside.h"\n#include "ops/x.h"\n'
        '#include <transport/transport.h>\n#include "rendezvous/store.h"\n'
        '#include <vector>\n#include <sys/socket.h>\n#include <spdlog/spdlog.h>\n'
        '#include "kolo/build_config.h"\n#include <gloo/context.h>\n'
        '#include /* a comment */ "base/types.h" // and another\n'
        '#include \\\n  "base/clock.h"\n'
        '/* not compiled:\n#include "core/runtime.h"\n#include NOT_A_MACRO_INCLUDE\n*/\n'
        '// #include "ops/x.h"\n'
        'const char* kText = R"x(\n#include "core/runtime.h"\n)x";\n'
        'const int kMillion = 1\'000\'000; const char kQuote = \'"\';\n'
        '#if __has_include("core/runtime.h")\n#endif\n'
        '%:include "base/types.h"\n#import <base/clock.h>\n#include_next "base/tensor.h"\n'
        'import "base/log.h";\nimport kolo_module;\n'
        '#include "third_party/planted_ok.h"\n#include "planted_ok_generated.h"\n'
        '#include "transport/planted_ok/x.def"\n',
    "transport/planted_ok/x.def": '#include "rendezvous/store.h"\n',
    "transport/planted_ok/README.md": '#include "core/runtime.h"\n',
    "transport/planted_ok/notes.md": '#include "core/runtime.h"\n',
    "transport/planted_ok/blob.bin": '\0#include "core/runtime.h"\n',
    "third_party/planted_ok.h": '#pragma once\n#include "rendezvous/store.h"\n',
    "build/generated/planted_ok_generated.h": '#pragma once\n#include "base/status.h"\n',
    "third_party/cmake/PlantedOk.cmake":
        'add_library(kolo_planted_ok INTERFACE)\n'
        'target_include_directories(kolo_planted_ok INTERFACE ${PROJECT_SOURCE_DIR}/base)\n'
        'target_sources(kolo_planted_ok INTERFACE ${PROJECT_SOURCE_DIR}/rendezvous/store.cc)\n'
        'string(APPEND CMAKE_CXX_FLAGS " -I${PROJECT_SOURCE_DIR}")\n',
    "transport/planted_ok/CMakeLists.txt":
        'set(DOWN kolo_kernels)\nset(SRCS ok.cc beside.h)\n'
        'target_sources(kolo_transport PRIVATE ${SRCS} ../../transport/planted_ok/ok.cc)\n'
        'target_include_directories(kolo_transport SYSTEM PRIVATE ${PROJECT_SOURCE_DIR}\n'
        '  ${CMAKE_CURRENT_SOURCE_DIR}/../../base\n'
        '  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>\n'
        '  $<BUILD_INTERFACE:${PROJECT_BINARY_DIR}/generated> ${KOLO_NCCL_INCLUDE}\n'
        '  ../../rendezvous)\n'
        'target_link_libraries(kolo_transport PRIVATE ${DOWN} ${CMAKE_THREAD_LIBS_INIT} '
        '-Wl,--as-needed)\n'
        'target_compile_options(kolo_transport PRIVATE -I ${PROJECT_SOURCE_DIR}/kernels -O2\n'
        '  -isystem/usr/include/x -fsanitize=${KOLO_SANITIZE})\n'
        'set_target_properties(kolo_transport PROPERTIES COMPILE_OPTIONS "" '
        'INCLUDE_DIRECTORIES "${PROJECT_SOURCE_DIR}/base;${PROJECT_SOURCE_DIR}/timeline/..")\n'
        'foreach(f ok.cc beside.h)\n  target_sources(kolo_transport PRIVATE ${f})\nendforeach()\n'
        'target_link_libraries(kolo_transport PRIVATE kolo_planted_ok -lm)\n'
        'target_link_options(kolo_transport PRIVATE $<TARGET_FILE:kolo_kernels>\n'
        '  LINKER:--as-needed\n'
        '  -Wl,--version-script=${CMAKE_CURRENT_SOURCE_DIR}/ok.map -L${PROJECT_BINARY_DIR}/base\n'
        '  ${PROJECT_BINARY_DIR}/rendezvous/librendezvous_extra.a)\n'
        'target_link_directories(kolo_transport PRIVATE\n'
        '  ${CMAKE_CURRENT_BINARY_DIR}/../../rendezvous)\n'
        'target_precompile_headers(kolo_transport PRIVATE <vector> [["base/status.h"]] beside.h)\n'
        'target_compile_options(kolo_transport PRIVATE -include base/status.h\n'
        '  -imacros ${PROJECT_SOURCE_DIR}/kernels/copy.h --include=transport/transport.h)\n'
        'target_compile_definitions(kolo_transport PRIVATE K=$<TARGET_FILE_DIR:kolo_kernels>)\n'
        'string(APPEND CMAKE_CXX_FLAGS " -I${PROJECT_SOURCE_DIR}/rendezvous")\n'
        'set(CMAKE_SHARED_LINKER_FLAGS "${CMAKE_SHARED_LINKER_FLAGS} -lm -Wl,-z,defs")\n'
        'add_custom_command(TARGET kolo_transport POST_BUILD\n'
        '  COMMAND echo $<TARGET_FILE:kolo_base>)\n'
        'include(CheckCXXSourceCompiles)\n'
        'include(${PROJECT_SOURCE_DIR}/third_party/cmake/KoloSanitize.cmake)\n'
        'cmake_language(GET_MESSAGE_LOG_LEVEL planted_level)\n'
        'set_property(SOURCE ok.cc APPEND PROPERTY INCLUDE_DIRECTORIES\n'
        '  ${PROJECT_SOURCE_DIR}/base)\n'
        'set_property(DIRECTORY APPEND PROPERTY COMPILE_OPTIONS\n'
        '  -I${PROJECT_SOURCE_DIR}/timeline/..)\n',
    "bindings/python/kolo/planted_ok.py":
        "from . import common\nimport kolo.common\n\n\ndef f():\n    from .basics import init\n",
    "bindings/launcher/kolo_launcher/planted_ok.py":
        "import importlib.util\nfrom . import hosts\nimport kolo_launcher.hosts\n"
        "spec = importlib.util.find_spec('kolo')\n",
}


def _cases():
    """(name, file, its new text or a function of the old, the line that must be reported (or
    text on it), the floor, what it uses, a phrase the message must hold[, other files to plant
    with it, which must add nothing of their own])."""
    def replace(a, b):
        return lambda old: old.replace(a, b)

    return [
        ("plain quoted", "transport/planted.cc", '#include "base/status.h"\n'
         '  #  include "ops/x.h"\n', 2, "transport", "ops", 'includes "ops/x.h"'),
        ("relative ../", "transport/planted.cc", '#include "../ops/x.h"\n', 1,
         "transport", "..", "includes \"../ops/x.h\": an include path with a '..' segment"),
        ("relative ../../", "rendezvous/planted_sub/f.cc", '#include <vector>\n'
         '#include "../../core/runtime.h"\n', 2, "rendezvous", "..", "'..' segment"),
        # base/p1.cc's "../../core/runtime.h" is outside the repository beside the file, but
        # build/generated/../../core/runtime.h (the floors' PUBLIC include directory) is core's.
        ("'..' out of the tree, back in through build/generated", "base/p1.cc",
         '#include "../../core/runtime.h"\n', 1, "base", "..", "base/p1.cc:1: includes "
         "\"../../core/runtime.h\": an include path with a '..' segment"),
        ("'..' in an angle include", "base/p1.cc", '#include <../../core/runtime.h>\n', 1,
         "base", "..", "includes <../../core/runtime.h>"),
        ("'..' to a floor below", "transport/planted.cc", '#include "../base/status.h"\n',
         1, "transport", "..", "write it from the repository root"),
        ("'..' in the middle", "kernels/planted.cc", '#include "base/../core/runtime.h"\n',
         1, "kernels", "..", "'..' segment"),
        ("an absolute include", "kernels/planted.cc", '#include "/work/kolo/core/runtime.h"\n',
         1, "kernels", "/",
         "an absolute include path"),
        ("a digraph include", "base/planted.cc", '%:include "core/runtime.h"\n', 1, "base",
         "core", "base/planted.cc:1: includes \"core/runtime.h\""),
        ("a digraph include with spaces", "base/planted.h", '#pragma once\n  %:  include '
         '<ops/x.h>\n', 2, "base", "ops", "floor 'base' may not use 'ops'"),
        ("#import", "rendezvous/planted.cc", '#import "core/runtime.h"\n', 1, "rendezvous",
         "core", 'includes "core/runtime.h"'),
        ("#include_next", "timeline/planted.h", '#include_next <ops/x.h>\n', 1, "timeline",
         "ops", "includes <ops/x.h>"),
        ("#embed", "kernels/planted.cc", 'const char k[] = {\n#embed "core/runtime.h"\n};\n',
         2, "kernels", "core", "floor 'kernels' may not use 'core'"),
        ("a trigraph include", "kernels/planted.c", '??=include "ops/x.h"\n', 1, "kernels",
         "ops", "kernels/planted.c:1:"),
        ("a C++20 header unit", "ops/planted.cc", 'import "core/runtime.h";\n', 1, "ops",
         "core", "floor 'ops' may not use 'core'"),
        ("a macro #import", "base/planted.cc", '#import KOLO_UP\n', 1, "base", "KOLO_UP",
         "use a literal path"),
        # Every file of a floor's folder is read, whatever its name, in hidden folders too (not
        # README*, *.md or CMake files); and any file an include reaches, even binary or
        # documentation, in third_party/ or in the build tree's generated/ too.
        ("a hidden folder", "ops/.planted/x.h", '#include "core/runtime.h"\n', 1, "ops", "core",
         "ops/.planted/x.h:1:"),
        ("a NUL byte in a source", "kernels/planted.cc", '\0#include "core/runtime.h"\n', 1,
         "kernels", "core", "kernels/planted.cc:1:"),
        ("an included binary file", "base/planted.bin", '\0\x01\n#include "core/runtime.h"\n', 2,
         "base", "core", "(reached from base/planted.cc)",
         {"base/planted.cc": '#include "base/planted.bin"\n'}),
        ("an included markdown file", "base/planted.md", '#include "core/runtime.h"\n', 1,
         "base", "core", "base/planted.md:1: includes \"core/runtime.h\" (reached from "
         "base/planted.cc)", {"base/planted.cc": '#include "base/planted.md"\n'}),
        ("a header in third_party/", "third_party/planted.h", '#include "core/runtime.h"\n', 1,
         "base", "core", "third_party/planted.h:1: includes \"core/runtime.h\" (reached from "
         "base/planted.cc): floor 'base' may not use 'core'",
         {"base/planted.cc": '#include "third_party/planted.h"\n'}),
        ("a generated header", "build/generated/planted.h",
         '#pragma once\n#include "core/runtime.h"\n', 2, "timeline", "core",
         "build/generated/planted.h:2: includes \"core/runtime.h\" (reached from "
         "timeline/planted.cc)", {"timeline/planted.cc": '#include "planted.h"\n'}),
        ("a symbolic link to a floor above", "base/planted.cc",
         '#include "base/planted_link.h"\n', 1, "base", "core", "(= core/planted_target.h)",
         {"core/planted_target.h": "", "base/planted_link.h": _Link("../core/planted_target.h")}),
        ("a linked folder", "kernels/planted.cc",
         '#include "kernels/planted_up/planted_target.h"\n', 1, "kernels", "core",
         "(= core/planted_target.h)",
         {"core/planted_target.h": "", "kernels/planted_up": _Link("../core")}),
    ] + [
        ("a %s file" % (ext or "extensionless"), "base/planted" + ext,
         '#include "core/runtime.h"\n', 1, "base", "core", "base/planted%s:1:" % ext)
        for ext in (".def", ".inc", ".ipp", ".tcc", ".hpp", ".cuh", ".inl", ".txt", "")
    ] + [
        ("angle", "kernels/planted.cc", "#include <ops/x.h>\n", 1, "kernels", "ops",
         "includes <ops/x.h>"),
        ("test header", "ops/planted.h", '#pragma once\n#include "test/support/x.h"\n', 2,
         "ops", "test", "may not use test/"),
        ("bench header", "core/planted/f.cc", '#include "bench/b.h"\n', 1,
         "core", "bench", "may not use bench/"),
        ("test header, angle", "bindings/c/planted.cc", "#include <test/x.h>\n", 1,
         "bindings", "test", "includes <test/x.h>"),
        ("a .c file", "kernels/planted.c", '#include "ops/x.h"\n', 1, "kernels", "ops",
         "kernels/planted.c:1:"),
        ("a .cxx file", "kernels/planted.cxx", '#include "core/runtime.h"\n', 1, "kernels",
         "core", "kernels/planted.cxx:1:"),
        ("a .hh file", "timeline/planted.hh", '#include "ops/x.h"\n', 1, "timeline", "ops",
         "timeline/planted.hh:1:"),
        ("a comment inside the include", "ops/planted.cc",
         '#include "base/status.h"\n#include /*x*/ "core/runtime.h"\n', 2, "ops", "core",
         "floor 'ops' may not use 'core'"),
        ("a spliced include", "bootstrap/planted.cc", '#include \\\n  "core/runtime.h"\n', 1,
         "bootstrap", "core", 'includes "core/runtime.h"'),
        ("a macro include", "timeline/planted.cc",
         '#define KOLO_UP "core/runtime.h"\n#include KOLO_UP\n', 2, "timeline", "KOLO_UP",
         "use a literal path"),
        ("upward link", "transport/CMakeLists.txt",
         _append("target_link_libraries(kolo_transport PUBLIC kolo_ops)\n"),
         "target_link_libraries(kolo_transport PUBLIC kolo_ops)", "transport", "ops",
         "kolo_transport links kolo_ops: floor 'transport' may not use 'ops'"),
        ("upward link through kolo_engine", "base/CMakeLists.txt",
         _append("target_link_libraries(kolo_base  # planted\n"
                 "  PRIVATE $<BUILD_INTERFACE:kolo_engine>)\n"),
         "$<BUILD_INTERFACE:kolo_engine>", "base", "core",
         "kolo_base links kolo_engine (which brings core/)"),
        ("upward link through an alias", "kernels/CMakeLists.txt",
         _append("target_link_libraries(kolo_kernels PRIVATE kolo::kolo)\n"),
         "kolo::kolo", "kernels", "bindings", "floor 'kernels' may not use 'bindings'"),
        ("link to test code", "ops/CMakeLists.txt",
         _append("target_link_libraries(kolo_ops PRIVATE kolo_test_support)\n"),
         "kolo_test_support", "ops", "test", "may not use test/"),
        ("floor declared above", "timeline/CMakeLists.txt",
         replace('kolo_add_floor(timeline "transport")', 'kolo_add_floor(timeline "core")'),
         'kolo_add_floor(timeline "core")', "timeline", "core",
         "kolo_add_floor(timeline core) links kolo_timeline to kolo_core"),
        ("floor missing from FLOORS", "extra/CMakeLists.txt",
         'kolo_add_floor(extra "core")\n', 1, "extra", "extra",
         "'extra' is not a floor of this check's order"),
        ("a set() variable in a link list", "base/CMakeLists.txt",
         _append("set(UP kolo_core)\ntarget_link_libraries(kolo_base PUBLIC ${UP})\n"),
         "${UP}", "base", "core", "kolo_base links kolo_core (from ${UP}): floor 'base' "
         "may not use 'core'"),
        ("an unknown variable in a link list", "timeline/CMakeLists.txt",
         _append("target_link_libraries(kolo_timeline PRIVATE ${KOLO_UPPER})\n"),
         "${KOLO_UPPER}", "timeline", "${KOLO_UPPER}", "a variable this check cannot follow"),
        ("a system variable the tree set()s", "rendezvous/CMakeLists.txt",
         _append("target_link_libraries(kolo_rendezvous PRIVATE ${MPI_C_LIBRARIES})\n"),
         "${MPI_C_LIBRARIES}", "rendezvous", "${MPI_C_LIBRARIES}",
         "a variable this check cannot follow",
         {"CMakeLists.txt": _append("set(MPI_C_LIBRARIES kolo_core)\n")}),
        ("a computed target name", "kernels/CMakeLists.txt",
         _append("target_link_libraries(kolo_${KOLO_FLOOR} PUBLIC kolo_core)\n"),
         "kolo_${KOLO_FLOOR}", "kernels", "kolo_${KOLO_FLOOR}", "a target name this check "
         "cannot expand"),
        ("link_libraries() in a floor's folder", "rendezvous/CMakeLists.txt",
         _append("link_libraries(kolo_engine)\n"), "link_libraries", "rendezvous", "core",
         "link_libraries() in rendezvous/ links kolo_engine (which brings core/)"),
        ("a link property", "timeline/CMakeLists.txt",
         _append("set_target_properties(kolo_timeline PROPERTIES POSITION_INDEPENDENT_CODE ON\n"
                 "  INTERFACE_LINK_LIBRARIES kolo_ops)\n"), "INTERFACE_LINK_LIBRARIES",
         "timeline", "ops", "kolo_timeline links kolo_ops"),
        ("an include directory above", "base/CMakeLists.txt",
         _append("target_include_directories(kolo_base PRIVATE ${PROJECT_SOURCE_DIR}/core)\n"),
         "target_include_directories", "base", "core",
         "kolo_base has include directory ${PROJECT_SOURCE_DIR}/core (= core/): floor 'base' "
         "may not use 'core'", {"base/planted.cc": '#include "runtime.h"\n'}),
        ("an include directory, relative in a generator expression", "kernels/CMakeLists.txt",
         _append("target_include_directories(kolo_kernels PUBLIC\n"
                 "  $<BUILD_INTERFACE:${CMAKE_CURRENT_SOURCE_DIR}/../ops/device>)\n"),
         "BUILD_INTERFACE", "kernels", "ops", "(= ops/device/)"),
        ("an include directory of test code", "ops/CMakeLists.txt",
         _append("target_include_directories(kolo_ops PRIVATE ../test/support)\n"),
         "../test/support", "ops", "test", "may not use test/"),
        ("include_directories() in a floor's folder", "transport/CMakeLists.txt",
         _append("include_directories(BEFORE ../core)\n"), "include_directories", "transport",
         "core", "include_directories() in transport/ has include directory ../core"),
        ("include_directories() at the root", "CMakeLists.txt",
         _append("include_directories(${PROJECT_SOURCE_DIR}/bench)\n"), "/bench)", "base",
         "bench", "include_directories() in the root (every floor)"),
        ("an include directory in kolo_add_floor's body", "third_party/cmake/KoloFloors.cmake",
         replace("    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>\n",
                 "    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>\n"
                 "    ${PROJECT_SOURCE_DIR}/bootstrap\n"),
         "${PROJECT_SOURCE_DIR}/bootstrap", "base", "bootstrap",
         "kolo_${name} (every floor: kolo_add_floor's body) has include directory"),
        ("a link in kolo_add_floor's body", "third_party/cmake/KoloFloors.cmake",
         replace("PUBLIC kolo_${below})", "PUBLIC kolo_${below} kolo_engine)"),
         "kolo_${below} kolo_engine", "base", "core",
         "kolo_${name} (every floor: kolo_add_floor's body) "
         "links kolo_engine (which brings core/)"),
        ("an include directory through -I", "rendezvous/CMakeLists.txt",
         _append("target_compile_options(kolo_rendezvous PRIVATE -Wall "
                 "-I${PROJECT_SOURCE_DIR}/transport/tcp)\n"), "-Wall", "rendezvous",
         "transport", "compile option -I${PROJECT_SOURCE_DIR}/transport/tcp"),
        ("an include directory property", "kernels/CMakeLists.txt",
         _append("set_property(TARGET kolo_kernels APPEND PROPERTY INCLUDE_DIRECTORIES\n"
                 "  ${PROJECT_SOURCE_DIR}/base ${PROJECT_SOURCE_DIR}/timeline)\n"),
         "/timeline)", "kernels", "timeline", "floor 'kernels' may not use 'timeline'"),
        ("an include directory variable", "bootstrap/CMakeLists.txt",
         _append("target_include_directories(kolo_bootstrap PRIVATE ${KOLO_SOMEWHERE})\n"),
         "${KOLO_SOMEWHERE}", "bootstrap", "${KOLO_SOMEWHERE}",
         "a variable this check cannot follow"),
        ("a source of a floor above", "base/CMakeLists.txt",
         _append("target_sources(kolo_base PRIVATE ../core/runtime.cc)\n"),
         "../core/runtime.cc", "base", "core",
         "kolo_base compiles ../core/runtime.cc (= core/runtime.cc): floor 'base' may not use "
         "'core'"),
        ("a library of another floor's source", "ops/CMakeLists.txt",
         _append("add_library(kolo_ops_extra STATIC select.cc\n"
                 "  ${PROJECT_SOURCE_DIR}/core/coordinator.cc)\n"), "/core/coordinator.cc",
         "ops", "core", "kolo_ops_extra compiles ${PROJECT_SOURCE_DIR}/core/coordinator.cc"),
        ("a source in a set() list", "transport/tcp/CMakeLists.txt",
         _append("set(MORE tcp_socket.cc ../../timeline/timeline.cc)\n"
                 "target_sources(kolo_transport PRIVATE ${MORE})\n"), "${MORE}", "transport",
         "timeline", "(= timeline/timeline.cc)"),
        ("another floor's objects", "kernels/CMakeLists.txt",
         _append("target_sources(kolo_kernels PRIVATE $<TARGET_OBJECTS:kolo_transport>)\n"),
         "TARGET_OBJECTS", "kernels", "transport", "kolo_kernels links kolo_transport"),
        # A target defined at the root or in third_party/ (or imported) brings what it is made
        # of: its sources, include directories and files, as well as its links.
        ("a root library of a floor above's sources", "base/CMakeLists.txt",
         _append("target_link_libraries(kolo_base PRIVATE helper)\n"), "helper", "base",
         "core", "kolo_base links helper (which brings core/)",
         {"CMakeLists.txt": _append("add_library(helper OBJECT core/negotiator.cc)\n")}),
        ("a third_party library with an include directory above", "kernels/CMakeLists.txt",
         _append("target_link_libraries(kolo_kernels PUBLIC kolo_planted_inc)\n"),
         "kolo_planted_inc", "kernels", "ops",
         "kolo_kernels links kolo_planted_inc (which brings ops/)",
         {"third_party/cmake/Planted.cmake": "add_library(kolo_planted_inc INTERFACE)\n"
          "target_include_directories(kolo_planted_inc INTERFACE ${PROJECT_SOURCE_DIR}/ops)\n"}),
        ("an imported archive of a floor above", "rendezvous/CMakeLists.txt",
         _append("target_link_libraries(kolo_rendezvous PRIVATE planted::core)\n"),
         "planted::core", "rendezvous", "core", "links planted::core (which brings core/)",
         {"CMakeLists.txt": _append("add_library(planted::core STATIC IMPORTED)\n"
                                    "set_target_properties(planted::core PROPERTIES\n"
                                    "  IMPORTED_LOCATION ${PROJECT_BINARY_DIR}/core/libkolo_core.a)"
                                    "\n")}),
        # $<TARGET_...:x> in link options and anywhere else; other ways to link.
        ("a link option naming a target above", "base/CMakeLists.txt",
         _append("target_link_options(kolo_base PUBLIC $<TARGET_FILE:kolo_core>)\n"),
         "TARGET_FILE", "base", "core",
         "kolo_base links kolo_core: floor 'base' may not use 'core'"),
        ("a LINKER: option", "kernels/CMakeLists.txt",
         _append('target_link_options(kolo_kernels PRIVATE\n'
                 '  "LINKER:--whole-archive,$<TARGET_LINKER_FILE:kolo_ops>")\n'), "LINKER:",
         "kernels", "ops", "kolo_kernels links kolo_ops"),
        ("a link option with an archive of the build tree", "timeline/CMakeLists.txt",
         _append("set_property(TARGET kolo_timeline APPEND PROPERTY LINK_OPTIONS\n"
                 "  ${PROJECT_BINARY_DIR}/ops/libkolo_ops.a)\n"), "libkolo_ops.a", "timeline",
         "ops", "(= ops/libkolo_ops.a in the build tree)"),
        ("a -Wl, link word", "kernels/CMakeLists.txt",
         _append("target_link_libraries(kolo_kernels PRIVATE\n"
                 "  -Wl,--whole-archive,${PROJECT_BINARY_DIR}/core/libkolo_core.a)\n"),
         "-Wl,", "kernels", "core", "(= core/libkolo_core.a in the build tree)"),
        ("-lNAME of a floor above", "transport/CMakeLists.txt",
         _append("target_link_libraries(kolo_transport PRIVATE -lkolo_bootstrap)\n"),
         "-lkolo_bootstrap", "transport", "bootstrap", "kolo_transport links kolo_bootstrap"),
        ("a link directory in the build tree above", "rendezvous/CMakeLists.txt",
         _append("target_link_directories(kolo_rendezvous PRIVATE\n"
                 "  ${CMAKE_CURRENT_BINARY_DIR}/../timeline)\n"), "/../timeline",
         "rendezvous", "timeline", "(= timeline/ in the build tree)"),
        ("a path that leaves the build tree", "base/CMakeLists.txt",
         _append("target_include_directories(kolo_base PRIVATE ${PROJECT_BINARY_DIR}/../core)\n"),
         "PROJECT_BINARY_DIR", "base", "${PROJECT_BINARY_DIR}/../core",
         "it leaves the build tree"),
        ("a generator expression of another command", "kernels/CMakeLists.txt",
         _append("add_custom_command(TARGET kolo_kernels POST_BUILD\n"
                 "  COMMAND echo $<TARGET_FILE:kolo_core>)\n"), "TARGET_FILE", "kernels", "core",
         "add_custom_command() in kernels/ uses kolo_core"),
        ("a generator expression in a compile definition", "ops/CMakeLists.txt",
         _append("target_compile_definitions(kolo_ops PRIVATE UP=$<TARGET_FILE_DIR:kolo_core>)\n"),
         "TARGET_FILE_DIR", "ops", "core", "kolo_ops uses kolo_core"),
        ("a generator expression in another property", "timeline/CMakeLists.txt",
         _append("set_target_properties(kolo_timeline PROPERTIES\n"
                 "  LINK_DEPENDS $<TARGET_FILE:kolo_ops>)\n"), "LINK_DEPENDS", "timeline",
         "ops", "kolo_timeline uses kolo_ops"),
        # Commands this check cannot read.
        ("cmake_language(CALL)", "base/CMakeLists.txt",
         _append("cmake_language(CALL target_link_libraries kolo_base PUBLIC kolo_core)\n"),
         "cmake_language", "base", "cmake_language", "cmake_language CALL, EVAL and DEFER"),
        ("cmake_language(EVAL) in a test's folder", "test/CMakeLists.txt",
         _append('cmake_language(EVAL CODE "target_link_libraries(kolo_base PUBLIC kolo_core)")'
                 '\n'), "cmake_language", "test", "cmake_language", "cmake_language(EVAL ...)"),
        ("cmake_language(DEFER)", "ops/CMakeLists.txt",
         _append("cmake_language(DEFER CALL target_link_libraries kolo_ops PUBLIC kolo_core)\n"),
         "cmake_language", "ops", "cmake_language", "cmake_language(DEFER ...)"),
        ("include() of a generated file", "base/CMakeLists.txt",
         _append("include(${PROJECT_BINARY_DIR}/planted.cmake)\n"), "planted.cmake", "base",
         "include", "it is in the build tree"),
        ("add_subdirectory() outside the tree", "kernels/CMakeLists.txt",
         _append("add_subdirectory(/tmp/planted planted)\n"), "/tmp/planted", "kernels",
         "add_subdirectory", "it is outside the source tree"),
        ("include() from a build tree inside the source tree", "transport/CMakeLists.txt",
         _append("include(${PROJECT_SOURCE_DIR}/build/planted.cmake)\n"), "planted.cmake",
         "transport", "include", "it is in a build tree (build/)"),
        ("a CMake file in a hidden folder", "ops/.planted/CMakeLists.txt",
         "target_link_libraries(kolo_ops PRIVATE kolo_core)\n", 1, "ops", "core",
         "kolo_ops links kolo_core"),
        ("a module folder in the build tree", "CMakeLists.txt",
         _append("list(APPEND CMAKE_MODULE_PATH ${CMAKE_BINARY_DIR}/modules)\n"), "/modules)",
         "(root)", "CMAKE_MODULE_PATH", "a module folder this check does not read"),
        # Compile options, flags and properties that include a file or add an include directory.
        ("a forced include", "base/CMakeLists.txt",
         _append("target_compile_options(kolo_base PRIVATE -include core/runtime.h)\n"),
         "-include", "base", "core", "kolo_base has forced include core/runtime.h"),
        ("a forced include joined to its flag", "kernels/CMakeLists.txt",
         _append("target_compile_options(kolo_kernels PRIVATE\n"
                 "  --include=${PROJECT_SOURCE_DIR}/ops/x.h)\n"), "--include=", "kernels", "ops",
         "has compile option --include=${PROJECT_SOURCE_DIR}/ops/x.h"),
        ("an include prefix option", "rendezvous/CMakeLists.txt",
         _append("target_compile_options(kolo_rendezvous PRIVATE\n"
                 "  -iprefix${PROJECT_SOURCE_DIR}/)\n"),
         "-iprefix", "rendezvous", "-iprefix${PROJECT_SOURCE_DIR}/", "an include prefix option"),
        ("a relative '..' in a compile option", "base/CMakeLists.txt",
         _append("target_compile_options(kolo_base PRIVATE -I../core)\n"), "-I../core", "base",
         "-I../core", "a relative path with '..'"),
        ("a precompiled header above", "base/CMakeLists.txt",
         _append("target_precompile_headers(kolo_base PRIVATE <core/runtime.h>)\n"),
         "target_precompile_headers", "base", "core",
         "kolo_base has precompiled header <core/runtime.h> (= core/runtime.h)"),
        ("a precompiled header of a floor above", "kernels/CMakeLists.txt",
         _append("target_precompile_headers(kolo_kernels REUSE_FROM kolo_ops)\n"), "REUSE_FROM",
         "kernels", "ops", "kolo_kernels links kolo_ops"),
        ("CMAKE_CXX_FLAGS in a floor's folder", "base/CMakeLists.txt",
         _append('string(APPEND CMAKE_CXX_FLAGS " -I${PROJECT_SOURCE_DIR}/core")\n'),
         "CMAKE_CXX_FLAGS", "base", "core", "string() in base/ has compile flags"),
        ("linker flags at the root", "CMakeLists.txt",
         _append('set(CMAKE_SHARED_LINKER_FLAGS "${CMAKE_SHARED_LINKER_FLAGS} '
                 '-lkolo_test_support")\n'), "CMAKE_SHARED_LINKER_FLAGS", "base", "test",
         "set() in the root (every floor) links kolo_test_support"),
        ("a source's include directory", "kernels/CMakeLists.txt",
         _append("set_source_files_properties(copy.cc PROPERTIES\n"
                 "  INCLUDE_DIRECTORIES ${PROJECT_SOURCE_DIR}/timeline)\n"), "/timeline)",
         "kernels", "timeline", "set_source_files_properties() in kernels/ has include directory"),
        ("a folder's compile options", "transport/CMakeLists.txt",
         _append("set_property(DIRECTORY APPEND PROPERTY COMPILE_OPTIONS\n"
                 "  -I${PROJECT_SOURCE_DIR}/ops)\n"), "-I${PROJECT_SOURCE_DIR}/ops", "transport",
         "ops", "set_property() in transport/ has compile option -I${PROJECT_SOURCE_DIR}/ops"),
        ("add_definitions() with an include directory", "timeline/CMakeLists.txt",
         _append("add_definitions(-DX=1 -I${PROJECT_SOURCE_DIR}/core)\n"), "add_definitions",
         "timeline", "core", "add_definitions() in timeline/ has compile option"),
        ("the kolo package imports kolo_launcher", "bindings/python/kolo/planted.py",
         "import os\n\n\ndef hosts():\n    from kolo_launcher.hosts import parse_hosts\n"
         "    return parse_hosts\n", 5, "bindings/python", "kolo_launcher",
         "bindings/python/ may not import kolo_launcher"),
        ("the kolo package imports kolo_launcher by name", "bindings/python/kolo/planted.py",
         "import importlib\nclass C:\n    m = importlib.import_module('kolo_launcher')\n", 3,
         "bindings/python", "kolo_launcher", "imports kolo_launcher"),
        ("the launcher imports kolo", "bindings/launcher/kolo_launcher/planted.py",
         "try:\n    import kolo.torch as k\nexcept ImportError:\n    k = None\n", 2,
         "bindings/launcher", "kolo", "bindings/launcher/ may not import kolo"),
        ("the kolorun script imports kolo", "bindings/launcher/kolorun",
         replace("import sys\n", "import sys\nfrom kolo import basics\n"), "from kolo import",
         "bindings/launcher", "kolo", "imports kolo: bindings/launcher/ may not import kolo"),
    ]


def self_test():
    """Each violating form, planted alone in a scratch copy of this tree, is the one finding
    (file, line, floors) and fails main() with a message naming it; the copy without plants and
    the planted files of allowed forms pass."""
    real = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir))
    errors = []
    cases = _cases()
    with tempfile.TemporaryDirectory() as root:
        _copy_tree(real, root)
        status, out, _ = _run(root)
        if status != 0:
            errors.append("the unplanted tree fails:\n" + out)

        for rel, text in _ALLOWED.items():
            _write(root, rel, text)
        status, out, _ = _run(root)
        if status != 0:
            errors.append("allowed forms were reported:\n" + out)
        for rel in _ALLOWED:
            os.remove(os.path.join(root, rel))
        shutil.rmtree(os.path.join(root, "transport", "planted_ok"))

        for case in cases:
            name, rel, text, line, floor, used, phrase = case[:7]
            plants = [(rel, text)] + sorted((case[7] if len(case) > 7 else {}).items())
            saved, new = [], None
            for prel, ptext in plants:
                path = os.path.join(root, prel)
                old = _read(root, prel) if os.path.exists(path) else None
                ptext = ptext(old) if callable(ptext) else ptext
                if ptext == old:
                    errors.append("%s: could not plant it in %s" % (name, prel))
                _write(root, prel, ptext)
                saved.append((prel, old))
                if new is None:
                    new = ptext
            if isinstance(line, str):
                line = _line_of(new, line)
            want = [(rel.replace("/", os.sep), line, floor, used)]
            status, out, found = _run(root)
            if found != want:
                errors.append("%s: found %r, expected %r" % (name, found, want))
            elif status != 1 or phrase not in out or "%s:%d:" % (want[0][0], line) not in out:
                errors.append("%s: main() returned %d; its output lacks %r:\n%s" %
                              (name, status, phrase, out))
            for prel, old in reversed(saved):
                if old is None:
                    os.remove(os.path.join(root, prel))
                else:
                    _write(root, prel, old)
    for e in errors:
        print("check_layers self-test: " + e)
    if errors:
        return 1
    print("check_layers self-test: ok (%d planted forms caught; the tree itself and the allowed "
          "forms pass)" % len(cases))
    return 0


if __name__ == "__main__":
    sys.exit(self_test() if sys.argv[1:] == ["--self-test"] else main(sys.argv))
