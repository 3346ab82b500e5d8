#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The self-test of scripts/check_layers.py: every violating form it knows, planted alone in a
scratch copy of this tree, is the one finding (file, line, floors) and fails its main() with a
message naming it; the copy without plants and the planted files of allowed forms pass.

Usage: scripts/check_layers_selftest.py   (also scripts/check_layers.py --self-test)
"""

import contextlib
import io
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_layers import EXTERNAL, RANK, SOURCES, _walk, check, report  # noqa: E402



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
    sys.exit(self_test())
