#!/usr/bin/env python3
"""Fails when a floor uses a floor above its own, or test/bench code: by #include, by include
directory, by compiling another floor's file, or by link; and when the Python packages import
each other.

kolo is built in floors, bottom to top (DESIGN.md "Floors"); each is its own CMake library and
may use only the floors below it (and itself):

    base < kernels < rendezvous < transport < timeline < ops < bootstrap < core < bindings

A file's floor is its top-level folder. Static libraries do not stop an upward call by
themselves (a symbol a lower floor takes from a higher one links whenever the final binary links
both), so this check is what holds the direction. Three parts:

includes  Every #include (and #include_next) of a floor's C/C++/CUDA source (SOURCES below:
          .c .cc .cpp .cxx .h .hh .hpp .hxx .cu .cuh .inl .inc .ipp .tcc) is read as the
          preprocessor reads it: comments removed (`#include /*x*/ "core/x.h"`), backslash-newline
          splices joined, `# include` with spaces, nothing inside a comment or a raw string. It
          is resolved as the compiler would: a quoted include against the including file's
          folder first ("../ops/x.h", "sub/x.h"; an explicit ./ or ../ path always so), then
          against the repository root ("ops/x.h"); an angle include against the root
          (<ops/x.h>). One that lands in a floor above the file's fails, and so does one that
          lands in any top-level folder that is not a floor (test/, bench/, examples/,
          scripts/...): library floors never include test or tool code. An include of a macro
          (`#include SOME_HEADER`) fails: use a literal path (the tree has none to allow).
          Headers outside the repository (system, spdlog, gloo, the generated kolo/) and
          third_party/ (vendored dependencies) are not checked. Includes are not resolved
          through CMake include directories: the CMake part refuses any directory that would
          let a bare "x.h" reach a floor above instead.
CMake     Every CMakeLists.txt and *.cmake in the tree (build trees, those holding a
          CMakeCache.txt, skipped) is parsed for targets (add_library, add_executable; a floor
          is declared with kolo_add_floor(NAME BELOW), third_party/cmake/KoloFloors.cmake,
          which makes kolo_NAME and links it to kolo_BELOW). A target belongs to the top-level
          folder that defines it; one defined at the root (kolo_engine) or imported stands for
          what it links. For each target of a floor it reads
            links        target_link_libraries, link_libraries(), the LINK_LIBRARIES and
                         INTERFACE_LINK_LIBRARIES properties, $<TARGET_...:x> in a source or
                         include list: a target of a higher floor or of a non-floor folder
                         fails, and so does a kolo_add_floor of a name missing from FLOORS;
            paths        its sources (add_library/add_executable, target_sources, the SOURCES
                         properties) and include directories (target_include_directories,
                         include_directories(), the *INCLUDE_DIRECTORIES properties,
                         -I/-isystem/-iquote/-idirafter in target_compile_options,
                         add_compile_options() and COMPILE_OPTIONS): one in a higher floor's
                         folder or a non-floor folder fails (the root, third_party/, the
                         target's own floor and those below are fine; generator expressions
                         are read through, $<INSTALL_INTERFACE:...> and the build tree skipped).
                         link_libraries(), include_directories() and add_compile_options() count
                         for their folder's floor, at the root and in third_party/ (which the
                         root includes) for every floor;
            variables    ${X} is expanded from set(), list(APPEND/PREPEND) and foreach() of the
                         same file (and PROJECT_SOURCE_DIR, CMAKE_CURRENT_SOURCE_DIR and the
                         like); one left unexpanded in a floor target's links or paths fails
                         unless it is a system library's variable (EXTERNAL_VARIABLES below)
                         that the tree never set()s; a target name the check cannot expand
                         fails in a floor's folder, the root or third_party/ (the body of
                         kolo_add_floor, whose kolo_${name} is every floor and whose
                         kolo_${below} is read at each call, excepted).
          Unknown names (system and third-party libraries) are not checked.
Python    bindings/python (the `kolo` package) never imports the launcher package
          `kolo_launcher`, and bindings/launcher (`kolo_launcher` and the `kolorun` script)
          never imports `kolo` (their README.md "May use"): every *.py there, and every script
          with a python #! line, is parsed with `ast`; import, from-import (at any depth:
          inside functions too) and importlib.import_module/__import__ of a literal name count;
          a file there that does not parse fails.

bench/, test/ and examples/ sit above every floor and are not checked themselves. Exit status 0
when everything points down or sideways, 1 with one line per violation otherwise
(file:line, what it includes, compiles or links, which floor points up to which).

Usage: scripts/check_layers.py [REPO_ROOT]
       scripts/check_layers.py --self-test   (every violating form planted in a scratch copy of
                                              this tree is found; the unplanted copy passes)
"""

import ast
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
    return {d for d in os.listdir(root)
            if not d.startswith(".") and os.path.isdir(os.path.join(root, d))}


def _walk(top):
    """(folder, file names) under top, sorted, without hidden folders, caches and build trees."""
    for dirpath, dirnames, names in os.walk(top):
        dirnames[:] = sorted(d for d in dirnames
                             if not d.startswith(".") and d not in ("CMakeFiles", "__pycache__")
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
_DIRECTIVE = re.compile(r"#\s*include(?:_next)?(?![\w$])\s*(.*)$")
_LITERAL = re.compile(r'(["<])([^">]*)[">]')
_code_cache = {}


def code_lines(text):
    """(line number, text) of each logical line of C/C++ source, as the preprocessor sees it:
    comments replaced by a space, backslash-newline splices joined (the line numbered by its
    first physical line), the body of a raw string left out."""
    cached = _code_cache.get(text)
    if cached is not None:
        return cached
    out, cur, start, line = [], [], 1, 1
    for m in _TOKEN.finditer(text):
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
    """Yields a Violation for each include of a floor's source that points up or out, or names
    a macro."""
    folders = _top_folders(root) | set(FLOORS)
    for floor in FLOORS:
        for dirpath, names in _walk(os.path.join(root, floor)):
            for name in names:
                if not name.endswith(SOURCES):
                    continue
                path = os.path.join(dirpath, name)
                rel_path = os.path.relpath(path, root)
                with open(path, encoding="utf-8", errors="replace") as f:
                    text = f.read()
                for number, line in code_lines(text):
                    m = _DIRECTIVE.match(line.lstrip())
                    if not m:
                        continue
                    operand = m.group(1).strip()
                    literal = _LITERAL.match(operand)
                    if not literal:
                        yield Violation(rel_path, number, "#include %s" % operand, floor,
                                        operand, reason="an include of a macro (or of nothing): "
                                        "this check cannot tell which file it names; use a "
                                        "literal path")
                        continue
                    bracket, header = literal.group(1), literal.group(2).strip()
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
_INCLUDE_FLAGS = ("-isystem", "-iquote", "-idirafter", "-I")
# Property -> what its values are, for set_target_properties and set_property(TARGET ...).
_PROPERTIES = {"LINK_LIBRARIES": "link", "INTERFACE_LINK_LIBRARIES": "link",
               "SOURCES": "source", "INTERFACE_SOURCES": "source",
               "INCLUDE_DIRECTORIES": "dir", "INTERFACE_INCLUDE_DIRECTORIES": "dir",
               "INTERFACE_SYSTEM_INCLUDE_DIRECTORIES": "dir",
               "COMPILE_OPTIONS": "option", "INTERFACE_COMPILE_OPTIONS": "option"}
_SOURCE_DIRS = ("PROJECT_SOURCE_DIR", "CMAKE_SOURCE_DIR", "kolo_SOURCE_DIR")
_CURRENT_DIRS = ("CMAKE_CURRENT_SOURCE_DIR", "CMAKE_CURRENT_LIST_DIR")
_BINARY_DIRS = ("PROJECT_BINARY_DIR", "CMAKE_BINARY_DIR", "CMAKE_CURRENT_BINARY_DIR",
                "kolo_BINARY_DIR")
_BUILD_TREE = os.path.join(os.sep, "<build tree>")
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


def cmake_calls(text):
    """Yields (command in lower case, [(argument word, its line)], line) for each command call
    in CMake text."""
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
    for dirpath, names in _walk(root):
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


class _Target:
    def __init__(self, folder, imported):
        self.folder, self.imported, self.links = folder, imported, []


class _Use:
    """One word a target (or a folder's targets) uses: kind 'link', 'source', 'dir' or
    'option'."""

    def __init__(self, subject, kind, word, expanded, unknown, allowed, rel, line, fdir, command):
        self.subject, self.kind, self.word, self.expanded = subject, kind, word, expanded
        self.unknown, self.allowed = unknown, allowed
        self.rel, self.line, self.fdir, self.command = rel, line, fdir, command


def _read_cmake(root):
    """Everything the CMake part reads: targets, aliases, uses, the variables the tree set()s,
    kolo_add_floor calls of unknown floors and computed target names."""
    targets, aliases, uses, set_anywhere, problems = {}, {}, [], set(), []
    for path in cmake_files(root):
        rel = os.path.relpath(path, root)
        folder = rel.split(os.sep, 1)[0] if os.sep in rel else ""
        fdir = os.path.dirname(path)
        floor_file = folder in RANK or folder in EXTERNAL or folder == ""
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        variables = {name: root for name in _SOURCE_DIRS}
        variables.update({name: fdir for name in _CURRENT_DIRS})
        variables.update({name: _BUILD_TREE for name in _BINARY_DIRS})
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
            if command == "set" and args:
                values = args[1:]
                if "CACHE" in values:
                    values = values[:values.index("CACHE")]
                values = [v for v in values if v != "PARENT_SCOPE"]
                variables[args[0]] = ";".join(values)
                set_anywhere.add(args[0])
                continue
            if command == "unset" and args:
                variables.pop(args[0], None)
                continue
            if command == "list" and len(args) > 1 and args[0] in ("APPEND", "PREPEND"):
                old = [variables[args[1]]] if variables.get(args[1]) else []
                new = args[2:]
                variables[args[1]] = ";".join(old + new if args[0] == "APPEND" else new + old)
                set_anywhere.add(args[1])
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

            def use(subject, kind, i):
                word, wline = words[i]
                expanded, unknown = _expand(word, variables)
                uses.append(_Use(subject, kind, word, expanded, unknown, params, rel, wline,
                                 fdir, command))

            def options(subject, first, end=None):
                """Compile options from words[first:end]: a bare -I (-isystem...) takes the
                next word as an include directory."""
                i, end = first, len(words) if end is None else min(end, len(words))
                while i < end:
                    if _strip_genex(args[i]) in _INCLUDE_FLAGS and i + 1 < end:
                        use(subject, "dir", i + 1)
                        i += 2
                    else:
                        use(subject, "option", i)
                        i += 1

            # Directory-wide commands: every target of this folder (of every floor at the root
            # and in third_party/, which the root includes).
            if command in ("include_directories", "link_libraries", "add_compile_options"):
                if folder in RANK or folder in EXTERNAL or folder == "":
                    subject = ("directory", folder if folder in RANK else "")
                    if command == "add_compile_options":
                        options(subject, 0)
                        continue
                    kind = "dir" if command == "include_directories" else "link"
                    for i in range(len(words)):
                        if args[i] not in _PATH_KEYWORDS:
                            use(subject, kind, i)
                continue
            if command not in ("add_library", "add_executable", "kolo_add_floor",
                               "target_sources", "target_include_directories",
                               "target_link_libraries", "target_compile_options",
                               "set_target_properties", "set_property") or not args:
                continue

            # The targets this call is about, and where their arguments start.
            if command == "set_property":
                if args[0] != "TARGET":
                    continue
                end = args.index("PROPERTY") if "PROPERTY" in args else len(args)
                names = [a for a in args[1:end] if a not in ("APPEND", "APPEND_STRING")]
            elif command == "set_target_properties":
                end = args.index("PROPERTIES") if "PROPERTIES" in args else len(args)
                names = args[:end]
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
                        rel, line, "%s(%s ...)" % (command, name), folder or "(root)", name,
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
                for i in range(1, len(words)):
                    if args[i] not in _PATH_KEYWORDS:
                        use(name, "source", i)
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
                for i in range(1, len(words)):
                    if args[i] not in _LINK_KEYWORDS:
                        use(subjects[0], "link", i)
            elif command in ("target_sources", "target_include_directories"):
                kind = "source" if command == "target_sources" else "dir"
                skip = False
                for i in range(1, len(words)):
                    if skip:
                        skip = False
                    elif args[i] in ("FILE_SET", "TYPE"):
                        skip = True
                    elif args[i] not in _PATH_KEYWORDS:
                        use(subjects[0], kind, i)
            elif command == "target_compile_options":
                options(subjects[0], 1)
            else:
                # set_property(TARGET T... PROPERTY P V...): one property, every value after it;
                # set_target_properties(T... PROPERTIES P V P V...): one value each.
                if command == "set_property":
                    pairs = [(end + 1, len(args))]
                else:
                    pairs = [(i, i + 2) for i in range(end + 1, len(args), 2)]
                for at, stop in pairs:
                    kind = _PROPERTIES.get(args[at]) if at < len(args) else None
                    for subject in subjects if kind else ():
                        if kind == "option":
                            options(subject, at + 1, stop)
                        else:
                            for i in range(at + 1, min(stop, len(words))):
                                use(subject, kind, i)
    return targets, aliases, uses, set_anywhere, problems


def cmake_violations(root):
    """Yields a Violation for each link, source or include directory of a floor's target that
    points to a higher floor or out of the library, each variable or target name there that the
    check cannot follow, and each kolo_add_floor of a floor this check does not know."""
    targets, aliases, uses, set_anywhere, problems = _read_cmake(root)
    external = EXTERNAL_VARIABLES - set_anywhere
    folders = _top_folders(root) | set(FLOORS)

    def canonical(name):
        seen = set()
        while name in aliases and name not in seen:
            seen.add(name)
            name = aliases[name]
        return name

    def link_names(u):
        """The target names a use links: every name of a link word that is not a path, and
        $<TARGET_...:x> of any word."""
        text = _UNEXPANDED.sub("", u.expanded)
        if u.kind == "link":
            return [n for token in text.split(";") if "/" not in token
                    for n in _NAME.findall(token)]
        return [m.strip() for m in _TARGET_GENEX.findall(text)]

    for u in uses:
        t = targets.get(canonical(u.subject)) if isinstance(u.subject, str) else None
        if t is not None:
            t.links.extend(link_names(u))

    def stands_for(name, seen):
        """The top-level folders a target brings: its own, or a root or imported target's
        links'."""
        t = targets.get(canonical(name))
        if t is None or name in seen:
            return set()
        if t.folder and not t.imported:
            return {t.folder}
        seen = seen | {name}
        out = set()
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
        verb = {"link": "links", "source": "compiles", "dir": "has include directory",
                "option": "has compile option"}[u.kind]
        return Violation(u.rel, u.line, "%s %s %s" % (label(u), verb, u.word), floor, shown,
                         reason="%s is a variable this check cannot follow for floor '%s' (not "
                         "set() in this file, nor a system library's: EXTERNAL_VARIABLES in "
                         "scripts/check_layers.py); write the target or path itself" %
                         (shown, floor))

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
        paths = []  # (what it is, the path)
        for token in _strip_genex(u.expanded).split(";"):
            if u.kind == "option":
                flag = next((f for f in _INCLUDE_FLAGS if token.startswith(f)), None)
                if flag and len(token) > len(flag):
                    paths.append(("compile option", token[len(flag):]))
            elif u.kind == "link":
                if "/" in token and not token.startswith("-"):
                    paths.append(("links", token))
            elif token:
                paths.append(("compiles" if u.kind == "source" else "include directory", token))
        for what, path in paths:
            bad = unfollowed(u, path)
            if bad:
                yield variable_violation(u, floor, bad)
                continue
            if _UNEXPANDED.search(path):
                continue  # a system library's path
            full = os.path.normpath(os.path.join(u.fdir, path))
            rel = os.path.relpath(full, root)
            if rel == os.pardir or rel.startswith(os.pardir + os.sep) or rel == os.curdir:
                continue  # outside the repository (system, build tree), or its root
            folder = rel.split(os.sep, 1)[0]
            if (what != "include directory" and os.sep not in rel) or folder not in folders:
                continue  # a file at the root, or a folder the tree does not have
            if not _forbidden(floor, folder):
                continue
            shown = rel.replace(os.sep, "/") + ("/" if what == "include directory" else "")
            if what == "compiles":
                text = "%s compiles %s" % (label(u), u.word)
            elif what == "links":
                text = "%s links %s" % (label(u), u.word)
            else:
                text = "%s has %s %s" % (label(u), what, u.word)
            if shown.rstrip("/") != u.word.rstrip("/"):
                text += " (= %s)" % shown
            yield Violation(u.rel, u.line, text, floor, folder)
        # What it links: by name, through the target that name stands for.
        for dep in link_names(u):
            d = targets.get(canonical(dep))
            direct = d is not None and bool(d.folder) and not d.imported
            if u.command == "kolo_add_floor":
                what = "kolo_add_floor(%s %s) links %s to %s" % (u.subject[len("kolo_"):],
                                                                 u.word, u.subject, dep)
            else:
                what = "%s links %s" % (label(u), dep)
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


def main(argv):
    root = argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(__file__), os.pardir)
    root = os.path.abspath(root)
    if not os.path.isdir(os.path.join(root, "base")):
        print("check_layers: %s has no base/ folder: not a kolo checkout" % root)
        return 1
    includes = list(include_violations(root))
    cmake = list(cmake_violations(root))
    python = list(python_violations(root))
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
    """The files this check reads from the tree at src (sources, CMake files, Python files and
    scripts), without build trees or hidden folders."""
    for dirpath, names in _walk(src):
        out = os.path.join(dst, os.path.relpath(dirpath, src))
        os.makedirs(out, exist_ok=True)
        for name in names:
            if (name.endswith(SOURCES + (".py", ".cmake")) or name == "CMakeLists.txt"
                    or "." not in name):
                path = os.path.join(dirpath, name)
                if os.path.isfile(path):
                    shutil.copy(path, os.path.join(out, name))


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


def _found(root):
    return [v.key() for v in include_violations(root)] + \
        [v.key() for v in cmake_violations(root)] + [v.key() for v in python_violations(root)]


def _append(line):
    return lambda old: old + line


# Allowed: down, sideways, relative down, a same-named folder beside the file (the compiler takes
# that one first), system, third-party and generated headers; includes in comments, raw strings
# and __has_include; include directories at the root, in the floor, below it, in the build tree
# and the install tree; a system library's variable; a set() variable naming a floor below;
# relative imports and find_spec in the Python packages.
_ALLOWED = {
    "transport/planted_ok/ops/x.h": "",
    "transport/planted_ok/beside.h": "",
    "transport/planted_ok/ok.cc":
        '#include "base/status.h"\n#include "../../base/status.h"\n'
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
        '#if __has_include("core/runtime.h")\n#endif\n',
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
        'foreach(f ok.cc beside.h)\n  target_sources(kolo_transport PRIVATE ${f})\nendforeach()\n',
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
         _append("target_link_libraries(kolo_rendezvous PRIVATE ${KOLO_NCCL_LIBRARY})\n"),
         "${KOLO_NCCL_LIBRARY}", "rendezvous", "${KOLO_NCCL_LIBRARY}",
         "a variable this check cannot follow",
         {"CMakeLists.txt": _append("set(KOLO_NCCL_LIBRARY kolo_core)\n")}),
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
        status, out = _run(root)
        if status != 0:
            errors.append("the unplanted tree fails:\n" + out)

        for rel, text in _ALLOWED.items():
            _write(root, rel, text)
        status, out = _run(root)
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
            found = _found(root)
            status, out = _run(root)
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
