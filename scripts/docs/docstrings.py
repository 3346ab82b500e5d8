# SPDX-License-Identifier: Apache-2.0
"""Checks that every public name of kolo's Python API has a docstring.

It loads kolo, kolo.torch, kolo.elastic, kolo.torch.elastic, kolo.torch.trainer and
kolo.torch.lightning from bindings/python with griffe. Griffe is the static loader that
mkdocstrings uses, so a name this check sees is a name the API page renders. The public names
are each module's __all__, with each alias resolved to where it is defined. Each public class
that kolo defines adds its public methods, properties and class attributes. The instance
attributes set in __init__ are left out, as are members inherited from torch, Lightning or the
standard library.

It also reads docs/api/python.md. Each public name must appear there exactly once, through a
`::: module` directive and its `members:` list.

Each docstring is also parsed as Google style, as the page renders it. A parser warning, such
as an Args entry without a type, fails the check, because it fails `mkdocs build --strict`.

It prints how many names it checked. It exits with status 1 when a name lacks a docstring, a
docstring has a parser warning, or the page misses a name, and lists each such `module.name`.
`--self-test` loads a scratch package with an undocumented function, class and method, and a
badly formed Args entry, and checks that each is reported.

Usage: python3 scripts/docs/docstrings.py [--self-test] [--root DIR]
"""

import argparse
import logging
import os
import re
import sys
import tempfile
import textwrap

from griffe.dataclasses import Kind
from griffe.docstrings.parsers import Parser, parse
from griffe.loader import GriffeLoader

MODULES = ["kolo", "kolo.torch", "kolo.elastic", "kolo.torch.elastic", "kolo.torch.trainer",
           "kolo.torch.lightning"]
PAGE = os.path.join("docs", "api", "python.md")
MEMBER_KINDS = ("function", "property", "class-attribute")


def _load(search_path, modules):
    loader = GriffeLoader(search_paths=[search_path])
    for name in modules:
        loader.load_module(name.split(".")[0])
    loader.resolve_aliases(implicit=False, external=False)
    return loader.modules_collection


def _get(collection, path):
    top, _, rest = path.partition(".")
    obj = collection[top]
    return obj[rest] if rest else obj


def _target(obj):
    """The object an alias points to, or None when it points outside the loaded packages."""
    while obj.is_alias:
        try:
            obj = obj.target
        except Exception:  # noqa: BLE001 - griffe raises AliasResolutionError and others
            return None
    return obj


def _documented(obj):
    return obj.docstring is not None and obj.docstring.value.strip() != ""


def _member_kind(member):
    if member.kind is Kind.FUNCTION:
        return "function"
    if member.kind is Kind.ATTRIBUTE:
        if "property" in member.labels:
            return "property"
        if "class-attribute" in member.labels:
            return "class-attribute"
    if member.kind is Kind.CLASS:
        return "function"  # a nested class: checked as a member, like a method
    return None


def public_names(collection, modules):
    """Yields (shown_name, object) for each public name: the __all__ entries of each module and
    the public members of each public class that the loaded packages define. Objects are
    resolved (no aliases); a name whose alias leaves the packages yields None."""
    seen = set()
    for mod_path in modules:
        module = _get(collection, mod_path)
        if not _documented(module):
            yield mod_path, module
        for name in sorted(module.exports or ()):
            if name not in module.members:
                yield "%s.%s (in __all__, not defined)" % (mod_path, name), None
                continue
            obj = _target(module.members[name])
            if obj is None or obj.kind is Kind.MODULE:
                continue  # a submodule is listed in MODULES; an external name is not ours
            if obj.path in seen:
                continue  # a re-export of a name already checked
            seen.add(obj.path)
            yield "%s.%s" % (mod_path, name), obj
            if obj.kind is Kind.CLASS:
                for member_name, member in obj.members.items():
                    if member_name.startswith("_") or member.is_alias:
                        continue
                    if _member_kind(member) in MEMBER_KINDS:
                        yield "%s.%s.%s" % (mod_path, name, member_name), member


class _Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def parse_warnings(obj):
    """The warnings of griffe's Google-style parser for obj's docstring: what fails
    `mkdocs build --strict`, such as an Args entry without a type or a name that is not a
    parameter."""
    collect = _Collect()
    logger = logging.getLogger("griffe.docstrings.google")
    logger.addHandler(collect)
    propagate, logger.propagate = logger.propagate, False
    try:
        parse(obj.docstring, Parser.google)
    finally:
        logger.removeHandler(collect)
        logger.propagate = propagate
    return collect.messages


def undocumented(collection, modules):
    """Returns (count checked, [names without a docstring], [docstring parse warnings])."""
    count, missing, warnings = 0, [], []
    for shown, obj in public_names(collection, modules):
        count += 1
        if obj is None or not _documented(obj):
            missing.append(shown)
            continue
        warnings.extend("%s: %s" % (shown, w) for w in parse_warnings(obj))
    return count, missing, warnings


_DIRECTIVE = re.compile(r"^:::\s+(\S+)\s*$")


def page_directives(text):
    """Parses the mkdocstrings directives of a page: [(identifier, options dict)]."""
    import yaml

    lines = text.splitlines()
    out = []
    in_fence = False
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith("```"):
            in_fence = not in_fence
        match = None if in_fence else _DIRECTIVE.match(line)
        i += 1
        if not match:
            continue
        block = []
        while i < len(lines) and (lines[i].startswith(" ") or lines[i].strip() == ""):
            if lines[i].strip() == "" and (i + 1 >= len(lines)
                                           or not lines[i + 1].startswith(" ")):
                break
            block.append(lines[i])
            i += 1
        config = yaml.safe_load(textwrap.dedent("\n".join(block))) if block else None
        out.append((match.group(1), (config or {}).get("options") or {}))
    return out


def page_problems(collection, modules, page_text):
    """Returns the problems of the API page: public names that it never shows or shows twice."""
    shown = {}  # object path -> [where]
    problems = []
    for ident, options in page_directives(page_text):
        try:
            obj = _target(_get(collection, ident))
        except KeyError:
            problems.append("%s: the page names an object that does not exist" % ident)
            continue
        if obj is None:
            continue
        members = options.get("members")
        if obj.kind is not Kind.MODULE:
            shown.setdefault(obj.path, []).append(ident)
            continue
        if members is None:
            names = [n for n in obj.members if not n.startswith("_")
                     and (not obj.members[n].is_alias or n in (obj.exports or ()))]
        else:
            names = members or []
        for name in names:
            if name not in obj.members:
                problems.append("%s.%s: listed on the page, not defined" % (ident, name))
                continue
            target = _target(obj.members[name])
            if target is not None and target.kind is not Kind.MODULE:
                shown.setdefault(target.path, []).append("%s.%s" % (ident, name))
    for mod_path in modules:
        module = _get(collection, mod_path)
        for name in sorted(module.exports or ()):
            target = _target(module.members[name]) if name in module.members else None
            if target is None or target.kind is Kind.MODULE:
                continue
            if target.path not in shown:
                problems.append("%s.%s: not shown on %s" % (mod_path, name, PAGE))
    for path, where in sorted(shown.items()):
        if len(where) > 1:
            problems.append("%s: shown %d times (%s)" % (path, len(where), ", ".join(where)))
    return problems


_SCRATCH = {
    "scratch/__init__.py": '''
        """A scratch package."""
        from scratch.impl import Documented, Undocumented, documented, undocumented
        __all__ = ["Documented", "Undocumented", "documented", "undocumented"]
    ''',
    "scratch/impl.py": '''
        """Its implementation."""

        def documented():
            """Has a docstring."""

        def undocumented():
            pass

        class Undocumented:
            def method(self):
                """Has a docstring."""

        class Documented:
            """Has a docstring."""

            def method(self):
                pass

            @property
            def prop(self):
                """Has a docstring."""

            def _private(self):
                pass

            def typed(self, x):
                """Has an Args entry without a type.

                Args:
                    x: a parameter.
                """
    ''',
}


def self_test():
    """Checks that the check reports an undocumented function, class and method."""
    with tempfile.TemporaryDirectory() as tmp:
        for rel, text in _SCRATCH.items():
            path = os.path.join(tmp, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(textwrap.dedent(text).lstrip())
        collection = _load(tmp, ["scratch"])
        count, missing, warnings = undocumented(collection, ["scratch"])
        page = "::: scratch\n    options:\n      members: [documented, Documented]\n"
        problems = page_problems(collection, ["scratch"], page)
    want = ["scratch.Documented.method", "scratch.Undocumented", "scratch.undocumented"]
    want_page = ["scratch.Undocumented: not shown on %s" % PAGE,
                 "scratch.undocumented: not shown on %s" % PAGE]
    ok = (sorted(missing) == want and count == 8 and sorted(problems) == want_page
          and len(warnings) == 1 and "scratch.Documented.typed" in warnings[0])
    print("self-test: %d names checked, reported %s; page problems %s; docstring warnings %s"
          % (count, sorted(missing), sorted(problems), warnings))
    if not ok:
        print("self-test FAILED: expected %s and %s" % (want, want_page))
        return 1
    print("self-test passed")
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--self-test", action="store_true",
                        help="check that the check reports undocumented names")
    parser.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), help="the repository root (default: this checkout)")
    args = parser.parse_args(argv)
    if args.self_test:
        return self_test()
    collection = _load(os.path.join(args.root, "bindings", "python"), MODULES)
    count, missing, warnings = undocumented(collection, MODULES)
    with open(os.path.join(args.root, PAGE)) as f:
        problems = page_problems(collection, MODULES, f.read())
    print("checked %d public names of %s" % (count, ", ".join(MODULES)))
    for name in missing:
        print("no docstring: %s" % name)
    for warning in warnings:
        print("docstring: %s" % warning)
    for problem in problems:
        print("API page: %s" % problem)
    if missing or warnings or problems:
        print("FAILED: %d names without a docstring, %d docstring warnings, %d API page "
              "problems" % (len(missing), len(warnings), len(problems)))
        return 1
    print("OK: every public name has a well-formed docstring and appears once on %s" % PAGE)
    return 0


if __name__ == "__main__":
    sys.exit(main())
