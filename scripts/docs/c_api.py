#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Generates the C API reference page, docs/api/c.md, from bindings/c/kolo.h.

It reads the header's top comment (the page's introduction), its section markers
(`/* ---- Title ---- */`) and the `/** ... */` or trailing `/**< ... */` comment of each
function, typedef, enum value, struct field and #define, then renders one Markdown page.

Modes (one is required):
  --write      write docs/api/c.md
  --check      exit 1 if docs/api/c.md differs from what --write would write
  --self-test  plant undocumented or unknown entries in scratch copies of the header and
               check that each one is reported, with its line

It fails (exit 1, one "kolo.h:LINE: ..." line per problem on stderr, nothing written) when an
entry lacks documentation, when a declaration, comment or section marker is one it does not
understand, or when a doc comment documents nothing. Python 3 standard library only.
"""

import argparse
import difflib
import os
import re
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HEADER = os.path.join(ROOT, "bindings", "c", "kolo.h")
PAGE = os.path.join(ROOT, "docs", "api", "c.md")

# The page's sections, in page order. A header section marker must name one of them.
SECTIONS = [
    "Lifecycle",
    "Topology",
    "Build and capability queries",
    "Collectives",
    "Refusing an op",
    "Handles",
    "Process sets",
    "Timeline",
    "Types",
    "Status codes",
    "Data types and reduction ops",
    "Constants",
]

# Preprocessor lines that carry no entry.
INCLUDE_GUARD = "KOLO_H_"
PP_IGNORED = re.compile(
    r"^#\s*(include\s*<[a-z0-9_./]+>|ifdef __cplusplus|endif|else"
    r"|if defined\(\w+\)|ifndef " + INCLUDE_GUARD + r")\s*$")
SECTION_MARKER = re.compile(r"^/\*\s*-{2,}\s*(.*?)\s*-*\s*\*/$", re.S)
IDENT = r"[A-Za-z_]\w*"
NOT_RUN = "<!-- not-run: a declaration. -->"


class Problem(Exception):
    """An entry the generator cannot document; `line` is 1-based."""

    def __init__(self, line, message):
        super().__init__(message)
        self.line = line
        self.message = message


class Entry:
    """One documented thing: a function, typedef, macro, enum value or struct field."""

    def __init__(self, kind, name, line, code, doc, section):
        self.kind = kind  # function, enum, struct, typedef, callback, macro, value, field
        self.name = name
        self.line = line
        self.code = code  # the declaration without comments
        self.doc = doc  # the documentation as Markdown ("" when missing)
        self.section = section
        self.members = []  # enum values / struct fields: Entry objects
        self.value = None  # an enum value's number
        self.ctype = None  # a struct field's type


# ---- reading the header -------------------------------------------------------------------

def line_of(text, pos):
    return text.count("\n", 0, pos) + 1


def comment_text(raw):
    """The Markdown inside a comment: markers and leading ` * ` removed, paragraphs kept."""
    body = raw[2:-2]
    if body.startswith("*<"):
        body = body[2:]
    elif body.startswith("*"):
        body = body[1:]
    lines = body.split("\n")
    out = [lines[0].strip()]
    for ln in lines[1:]:
        out.append(re.sub(r"^\s*\* ?", "", ln).rstrip() if re.match(r"^\s*\*", ln) else ln.strip())
    return "\n".join(out).strip()


def is_doc(raw):
    return raw.startswith("/**") and not raw.startswith("/**/")


def is_trailing_doc(raw):
    return raw.startswith("/**<")


def tokenize(text):
    """Splits the header into items: (kind, start, end, text).

    kind: 'comment', 'pp' (a preprocessor line, continuations joined), 'code' (a statement up to
    its ';' at brace depth 0, or 'extern "C" {' / a closing '}'), with inner comments kept in
    the code's text for the member parser.
    """
    items = []
    i, n = 0, len(text)
    at_line_start = True
    while i < n:
        c = text[i]
        if c == "\n":
            at_line_start = True
            i += 1
            continue
        if c in " \t":
            i += 1
            continue
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            items.append(("linecomment", i, j, text[i:j]))
            i = j
            continue
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            if j < 0:
                raise Problem(line_of(text, i), "an unterminated comment")
            items.append(("comment", i, j + 2, text[i:j + 2]))
            i = j + 2
            at_line_start = False
            continue
        if c == "#" and at_line_start:
            j = i
            while True:
                k = text.find("\n", j)
                k = n if k < 0 else k
                if text[j:k].rstrip().endswith("\\"):
                    j = k + 1
                    continue
                break
            seg = text[i:k]
            cut = seg.find("/*")
            if cut >= 0:  # a comment after the directive is an item of its own
                seg = seg[:cut]
                k = i + cut
            items.append(("pp", i, i + len(seg.rstrip()), seg.rstrip()))
            i = k
            at_line_start = False
            continue
        # Code: up to ';' at depth 0, skipping comments and strings.
        at_line_start = False
        j, depth = i, 0
        while j < n:
            if text.startswith("/*", j):
                k = text.find("*/", j + 2)
                if k < 0:
                    raise Problem(line_of(text, j), "an unterminated comment")
                j = k + 2
                continue
            if text.startswith("//", j):
                raise Problem(line_of(text, j), "a // comment inside a declaration: use /** */")
            ch = text[j]
            if ch == '"':
                k = text.find('"', j + 1)
                j = k + 1
                continue
            if ch == "#" and (j == 0 or text[j - 1] == "\n"):
                raise Problem(line_of(text, j), "a preprocessor line inside a declaration")
            if ch == "{":
                if depth == 0 and re.fullmatch(r'extern\s+"C"\s*', text[i:j]):
                    j += 1
                    break
                depth += 1
            elif ch == "}":
                if depth == 0:
                    j += 1
                    break
                depth -= 1
            elif ch == ";" and depth == 0:
                j += 1
                break
            j += 1
        else:
            raise Problem(line_of(text, i), "a declaration without its ';' at the end of the file")
        items.append(("code", i, j, text[i:j]))
        i = j
    return items


def strip_comments(code):
    return re.sub(r"/\*.*?\*/", "", code, flags=re.S)


def clean_code(code):
    """The declaration as written, comments removed, trailing spaces and blank lines dropped."""
    lines = [l.rstrip() for l in strip_comments(code).split("\n")]
    return "\n".join(l for l in lines if l.strip())


def parse_members(text, start, body, kind, problems):
    """Members of an enum (kind 'value') or struct (kind 'field') body starting at `start`."""
    members = []
    pending = None  # (doc, line) of a /** */ waiting for its member
    sep = "," if kind == "value" else ";"
    pos = 0
    cur_start = None
    cur = ""
    last = None  # the last finished member, for a trailing /**< */

    def finish():
        nonlocal cur, cur_start, pending, last
        decl = cur.strip()
        if not decl:
            cur, cur_start = "", None
            return
        ln = line_of(text, start + cur_start + (len(cur) - len(cur.lstrip())))
        doc = pending[0] if pending else ""
        pending = None
        if kind == "value":
            m = re.fullmatch(r"(" + IDENT + r")(?:\s*=\s*(-?(?:0x[0-9A-Fa-f]+|\d+)))?", decl)
            if not m:
                problems.append(Problem(ln, "an enum value kolo.h's generator does not understand: "
                                        + " ".join(decl.split())))
                cur, cur_start = "", None
                return
            e = Entry("value", m.group(1), ln, decl, doc, None)
            if m.group(2) is not None:
                e.value = int(m.group(2), 0)
            else:
                e.value = (members[-1].value + 1) if members else 0
        else:
            m = re.fullmatch(r"((?:const\s+)?" + IDENT + r"(?:\s*\*+\s*|\s+)(?:const\s*\*?\s*)*)("
                             + IDENT + r")(\[\w+\])?", " ".join(decl.split()))
            if not m:
                problems.append(Problem(ln, "a struct field kolo.h's generator does not "
                                        "understand: " + " ".join(decl.split())))
                cur, cur_start = "", None
                return
            e = Entry("field", m.group(2), ln, decl, doc, None)
            e.ctype = m.group(1).strip() + (m.group(3) or "")
        members.append(e)
        last = e
        cur, cur_start = "", None

    while pos < len(body):
        if body.startswith("/*", pos):
            k = body.find("*/", pos + 2)
            raw = body[pos:k + 2]
            ln = line_of(text, start + pos)
            if is_trailing_doc(raw):
                target = None
                if cur.strip():  # "NAME = 1 /**< doc */" before its comma: this member
                    target = "current"
                elif last is not None:
                    target = last
                doc = comment_text(raw)
                if target == "current":
                    pending = ((pending[0] + "\n\n" if pending else "") + doc, ln)
                elif target is None:
                    problems.append(Problem(ln, "a /**< */ comment that follows no member"))
                else:
                    target.doc = (target.doc + "\n\n" + doc).strip() if target.doc else doc
            elif is_doc(raw):
                if pending and not cur.strip():
                    problems.append(Problem(pending[1], "two doc comments for one member"))
                pending = (comment_text(raw), ln)
            else:
                problems.append(Problem(ln, "a plain comment inside a declaration: document "
                                        "members with /** */ before or /**< */ after them"))
            pos = k + 2
            continue
        ch = body[pos]
        if ch == sep:
            finish()
            pos += 1
            continue
        if cur_start is None and not ch.isspace():
            cur_start = pos
        if cur_start is not None:
            cur += ch
        pos += 1
    if cur.strip():
        if kind == "field":
            problems.append(Problem(line_of(text, start + cur_start), "a struct field without ';'"))
        else:
            finish()
    if pending:
        problems.append(Problem(pending[1], "a doc comment that documents no member"))
    return members


def parse(text):
    """Returns (intro, entries, problems) for the header text."""
    problems = []
    try:
        items = tokenize(text)
    except Problem as p:
        return "", [], [p]
    intro = None
    entries = []
    section = None
    pending = None  # (doc, line)
    names = {}

    def take_doc():
        nonlocal pending
        doc = pending[0] if pending else ""
        pending = None
        return doc

    def add(e):
        if e.name in names:
            problems.append(Problem(e.line, "%s is declared twice (first on line %d)"
                                    % (e.name, names[e.name])))
        names[e.name] = e.line
        if section is None:
            problems.append(Problem(e.line, "%s comes before any section marker "
                                    "(/* ---- Title ---- */)" % e.name))
        entries.append(e)

    idx = 0
    while idx < len(items):
        kind, start, end, raw = items[idx]
        idx += 1
        ln = line_of(text, start)
        if kind == "linecomment":
            if ln == 1 and raw.startswith("// SPDX-License-Identifier:"):
                continue
            problems.append(Problem(ln, "a // comment: use /** */ for documentation"))
            continue
        if kind == "comment":
            if intro is None and not entries and not is_doc(raw):
                intro = comment_text(raw)
                continue
            prev = items[idx - 2] if idx >= 2 else None
            if prev and prev[0] == "pp" and line_of(text, prev[1]) == ln \
                    and re.match(r"#\s*endif", prev[3]):
                continue  # "#endif /* KOLO_H_ */"
            m = SECTION_MARKER.match(raw)
            if m and not is_doc(raw):
                title = m.group(1)
                if title not in SECTIONS:
                    problems.append(Problem(ln, "section marker '%s' is not one of: %s"
                                            % (title, ", ".join(SECTIONS))))
                if pending:
                    problems.append(Problem(pending[1], "a doc comment that documents nothing"))
                    pending = None
                section = title
                continue
            if is_trailing_doc(raw):
                problems.append(Problem(ln, "a /**< */ comment outside an enum or struct: put "
                                        "/** */ before the entry"))
                continue
            if is_doc(raw):
                if pending:
                    problems.append(Problem(pending[1], "a doc comment that documents nothing"))
                pending = (comment_text(raw), ln)
                continue
            problems.append(Problem(ln, "a plain comment: use /** */ before an entry, or "
                                    "/* ---- Title ---- */ for a section"))
            continue
        if kind == "pp":
            d = raw.strip()
            if pending and re.match(r"#\s*if defined\(\w+\)$", d):
                # "#if defined(X) / #define N a / #else / #define N b / #endif": one macro N,
                # documented by the comment before the #if.
                group, j = [d], idx
                while j < len(items) and items[j][0] == "pp" and not re.match(
                        r"#\s*endif", items[j][3].strip()):
                    group.append(items[j][3].strip())
                    j += 1
                defs = [re.match(r"#\s*define\s+(" + IDENT + r")\b", g) for g in group[1:]
                        if not re.match(r"#\s*else$", g)]
                if j < len(items) and items[j][0] == "pp" and defs and all(defs) and len(
                        {x.group(1) for x in defs}) == 1:
                    group.append(items[j][3].strip())
                    add(Entry("macro", defs[0].group(1), ln, "\n".join(group), take_doc(),
                              section))
                    idx = j + 1
                    continue
            md = re.match(r"#\s*define\s+(" + IDENT + r")(\([^)]*\))?(.*)$", d, re.S)
            if md:
                if md.group(1) == INCLUDE_GUARD and not md.group(3).strip():
                    continue
                add(Entry("macro", md.group(1), ln, d, take_doc(), section))
                continue
            if PP_IGNORED.match(d):
                if pending:
                    problems.append(Problem(pending[1], "a doc comment that documents nothing"))
                    pending = None
                continue
            problems.append(Problem(ln, "a preprocessor line kolo.h's generator does not "
                                    "understand: " + d))
            continue
        # code
        flat = " ".join(strip_comments(raw).split())
        if re.fullmatch(r'extern "C" \{', flat) or flat == "}":
            if pending:
                problems.append(Problem(pending[1], "a doc comment that documents nothing"))
                pending = None
            continue
        code = clean_code(raw)
        m = re.match(r"typedef (enum|struct) \{(.*)\} (" + IDENT + r") ?;$", flat, re.S)
        if m:
            open_at = raw.index("{")
            close_at = raw.rindex("}")
            body = raw[open_at + 1:close_at]
            e = Entry(m.group(1), m.group(3), ln, code, take_doc(), section)
            e.members = parse_members(text, start + open_at + 1, body,
                                      "value" if m.group(1) == "enum" else "field", problems)
            add(e)
            continue
        if "/*" in raw:
            problems.append(Problem(line_of(text, start + raw.index("/*")),
                                    "a comment inside a declaration: put /** */ before it"))
        m = re.fullmatch(r"typedef [\w\s\*]+?\(\s*\*\s*(" + IDENT + r")\s*\)\s*\([^()]*\);", flat)
        if m:
            add(Entry("callback", m.group(1), ln, code, take_doc(), section))
            continue
        m = re.fullmatch(r"typedef (?:const )?" + IDENT + r"(?: ?\*)* ?(" + IDENT + r");", flat)
        if m:
            add(Entry("typedef", m.group(1), ln, code, take_doc(), section))
            continue
        m = re.fullmatch(r"KOLO_API (?:const )?" + IDENT + r"(?: ?\*)* ?(" + IDENT
                         + r") ?\([^()]*\);", flat)
        if m:
            add(Entry("function", m.group(1), ln, code, take_doc(), section))
            continue
        problems.append(Problem(ln, "a declaration kolo.h's generator does not understand: "
                                + (flat if len(flat) < 100 else flat[:97] + "...")))
        pending = None
    if pending:
        problems.append(Problem(pending[1], "a doc comment that documents nothing"))
    if intro is None:
        problems.append(Problem(1, "no top comment (the page's introduction)"))

    for e in entries:
        if not e.doc.strip():
            problems.append(Problem(e.line, "%s %s has no /** */ documentation" % (e.kind, e.name)))
        for mem in e.members:
            if not mem.doc.strip():
                what = "enum value" if mem.kind == "value" else "field"
                problems.append(Problem(mem.line, "%s %s (of %s) has no /** */ or /**< */ "
                                        "documentation" % (what, mem.name, e.name)))
    problems.sort(key=lambda p: p.line)
    return intro or "", entries, problems


# ---- rendering ----------------------------------------------------------------------------

def linkify(doc, anchors, own):
    """Links the first `name` of each entry or enum value to its heading on this page, and
    docs/x.md to that page (one level up)."""
    seen = {own}

    def code_span(m):
        name = m.group(1).rstrip("()")
        if name in anchors and name not in seen:
            seen.add(name)
            return "[`%s`](#%s)" % (m.group(1), anchors[name])
        return m.group(0)

    doc = re.sub(r"`([A-Za-z_]\w*(?:\(\))?)`", code_span, doc)
    doc = re.sub(r"\bdocs/([a-z0-9-]+\.md)(#[a-z0-9-]+)?", lambda m: "[%s](../%s%s)" % (
        m.group(1)[:-3].replace("-", " ").capitalize(), m.group(1), m.group(2) or ""), doc)
    return doc


def one_line(doc):
    return " ".join(doc.split()).replace("|", "\\|")


def render(intro, entries):
    anchors = {e.name: e.name.lower() for e in entries}
    for e in entries:  # an enum value links to its enum's heading
        for m in e.members:
            if e.kind == "enum":
                anchors.setdefault(m.name, e.name.lower())
    out = [
        "# C API reference",
        "",
        "<!-- Generated by scripts/docs/c_api.py from bindings/c/kolo.h. Do not edit: edit the "
        "header's comments, then run `/usr/bin/python3 scripts/docs/c_api.py --write`. -->",
        "",
        linkify(intro, anchors, None),
        "",
        "Terms such as rank and process set are defined in [Concepts](../concepts.md).",
        "",
    ]
    for title in SECTIONS:
        group = [e for e in entries if e.section == title]
        if not group:
            continue
        out += ["## " + title, ""]
        for e in group:
            out += ["### " + e.name, "", NOT_RUN, "```c", e.code, "```", ""]
            out += [linkify(e.doc, anchors, e.name), ""]
            if e.kind == "enum":
                out += ["| Name | Value | Meaning |", "| --- | --- | --- |"]
                for m in e.members:
                    out.append("| `%s` | %d | %s |" % (m.name, m.value,
                                                       one_line(linkify(m.doc, anchors, None))))
                out.append("")
            elif e.kind == "struct":
                out += ["| Field | Type | Meaning |", "| --- | --- | --- |"]
                for m in e.members:
                    out.append("| `%s` | `%s` | %s |" % (m.name, m.ctype,
                                                         one_line(linkify(m.doc, anchors, None))))
                out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


def build(header_path):
    """Returns (page text, problems) for a header file."""
    with open(header_path, encoding="utf-8") as f:
        text = f.read()
    intro, entries, problems = parse(text)
    return render(intro, entries), problems


def report(header_path, problems):
    rel = os.path.relpath(header_path, ROOT) if header_path.startswith(ROOT) else header_path
    for p in problems:
        print("%s:%d: %s" % (rel, p.line, p.message), file=sys.stderr)
    print("c_api.py: %d problem(s) in %s; every entry needs a /** */ comment (see the module "
          "docstring)" % (len(problems), rel), file=sys.stderr)


# ---- self-test ----------------------------------------------------------------------------

def self_test():
    """Plants one defect per scratch copy of the header and checks it is reported."""
    with open(HEADER, encoding="utf-8") as f:
        base = f.read()
    failures = []
    _, base_problems = build(HEADER)
    if base_problems:
        failures.append("the real header has problems: " +
                        "; ".join("%d: %s" % (p.line, p.message) for p in base_problems))

    def plant_after(pattern_before, anchor, new_line):
        """Inserts new_line after the last line matching `anchor` before the first line matching
        `pattern_before`; returns (text, 1-based line of the inserted line)."""
        lines = base.split("\n")
        end = next(i for i, l in enumerate(lines) if re.search(pattern_before, l))
        at = max(i for i in range(end) if re.search(anchor, lines[i]))
        lines.insert(at + 1, new_line)
        return "\n".join(lines), at + 2

    def plant_before_last(anchor, new_lines):
        """Inserts new_lines before the last line matching `anchor`; returns (text, 1-based
        line of new_lines[0])."""
        lines = base.split("\n")
        at = max(i for i, l in enumerate(lines) if re.search(anchor, l))
        lines[at:at] = new_lines
        return "\n".join(lines), at + 1

    end = r"^#ifdef __cplusplus"
    # (what, (text, line), [(offset from line, expected message start), ...]): exactly these.
    cases = [
        ("an undocumented function",
         plant_before_last(end, ["KOLO_API int kolo_selftest_plain(void);", ""]),
         [(0, "function kolo_selftest_plain has no")]),
        ("an undocumented enum value",
         plant_after(r"^\} kolo_status_t;", r"^typedef enum \{", "  KOLO_SELFTEST_VALUE = 98,"),
         [(0, "enum value KOLO_SELFTEST_VALUE (of kolo_status_t) has no")]),
        ("an undocumented struct field",
         plant_after(r"^\} kolo_tensor_t;", r"^typedef struct \{", "  int32_t selftest_field;"),
         [(0, "field selftest_field (of kolo_tensor_t) has no")]),
        ("an undocumented macro",
         plant_before_last(end, ["#define KOLO_SELFTEST_MACRO 7", ""]),
         [(0, "macro KOLO_SELFTEST_MACRO has no")]),
        ("an undocumented typedef",
         plant_before_last(end, ["typedef int32_t kolo_selftest_t;", ""]),
         [(0, "typedef kolo_selftest_t has no")]),
        ("a function without KOLO_API",
         plant_before_last(end, ["/** Documented, not exported. */",
                                 "int kolo_selftest_hidden(void);", ""]),
         [(1, "a declaration kolo.h's generator does not understand: int kolo_selftest_hidden")]),
        ("an unknown preprocessor line",
         plant_before_last(end, ["#pragma pack(1)", ""]),
         [(0, "a preprocessor line kolo.h's generator does not understand: #pragma pack(1)")]),
        ("a plain comment instead of a doc comment",
         plant_before_last(end, ["/* Not a doc comment. */",
                                 "KOLO_API int kolo_selftest_plain2(void);", ""]),
         [(0, "a plain comment"), (1, "function kolo_selftest_plain2 has no")]),
        ("a doc comment that documents nothing",
         plant_before_last(end, ["/** Orphan. */", ""]),
         [(0, "a doc comment that documents nothing")]),
        ("an unknown section marker",
         plant_before_last(end, ["/* ---- Odds and ends ---- */", ""]),
         [(0, "section marker 'Odds and ends' is not one of")]),
    ]
    with tempfile.TemporaryDirectory(prefix="kolo-c-api-selftest-") as tmp:
        for what, (text, line), expected in cases:
            path = os.path.join(tmp, "kolo.h")
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
            _, problems = build(path)
            got = ["%d: %s" % (p.line, p.message) for p in problems]
            ok = len(problems) == len(expected) and all(
                any(p.line == line + off and p.message.startswith(msg) for p in problems)
                for off, msg in expected)
            if ok:
                print("self-test: %s on line %d: reported" % (what, line))
            else:
                failures.append("%s on line %d: expected %s; got %s" % (
                    what, line, "; ".join("%d: %s..." % (line + o, m) for o, m in expected),
                    "; ".join(got) or "nothing"))
        # A documented function is accepted and rendered.
        text, _ = plant_before_last(r"^#ifdef __cplusplus",
                                    ["/** Planted and documented. */",
                                     "KOLO_API int kolo_selftest_ok(void);", ""])
        path = os.path.join(tmp, "kolo.h")
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        page, problems = build(path)
        if problems or "### kolo_selftest_ok" not in page or "Planted and documented." not in page:
            failures.append("a documented planted function was not accepted and rendered")
        else:
            print("self-test: a documented function: accepted and rendered")
    # --check notices a page that differs.
    page, _ = build(HEADER)
    if check_page(page, page + "stale\n", quiet=True) == 0 or check_page(page, page, quiet=True):
        failures.append("--check did not tell a stale page from a current one")
    else:
        print("self-test: --check tells a stale page from a current one")
    for f in failures:
        print("self-test FAILED: " + f, file=sys.stderr)
    return 1 if failures else 0


def check_page(expected, current, quiet=False):
    if current == expected:
        return 0
    if not quiet:
        diff = list(difflib.unified_diff(current.splitlines(), expected.splitlines(),
                                         "docs/api/c.md", "generated", lineterm="", n=1))
        for l in diff[:20]:
            print(l, file=sys.stderr)
        print("docs/api/c.md is out of date: run /usr/bin/python3 scripts/docs/c_api.py --write",
              file=sys.stderr)
    return 1


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="write docs/api/c.md")
    mode.add_argument("--check", action="store_true",
                      help="exit 1 if docs/api/c.md is stale or an entry is undocumented")
    mode.add_argument("--self-test", action="store_true",
                      help="check that planted undocumented entries are reported")
    args = ap.parse_args(argv)
    if args.self_test:
        return self_test()
    page, problems = build(HEADER)
    if problems:
        report(HEADER, problems)
        return 1
    if args.write:
        os.makedirs(os.path.dirname(PAGE), exist_ok=True)
        with open(PAGE, "w", encoding="utf-8") as f:
            f.write(page)
        print("c_api.py: wrote %s" % os.path.relpath(PAGE, ROOT))
        return 0
    try:
        with open(PAGE, encoding="utf-8") as f:
            current = f.read()
    except FileNotFoundError:
        current = ""
    return check_page(page, current)


if __name__ == "__main__":
    sys.exit(main())
