#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Checks that the user docs read easily: short sentences and a short README.

    /usr/bin/python3 scripts/docs/prose.py [FILE.md ...] [--report]

Without FILE arguments it reads README.md and every docs/**/*.md. For each page it counts the
words of each sentence of the prose: code blocks, tables, headings, HTML comments and
mkdocstrings lines are left out, inline code counts as one word, and a link counts as its text.
A page fails when its mean sentence is 20 words or more, or when one sentence is over 50 words
(each such sentence is printed with its line). README.md also fails past 200 lines. A file
outside docs/ fails when a relative link points to no file (mkdocs checks the links in docs/).
--self-test checks planted pages: a long sentence, a high mean and a long README must fail, and
a page of short sentences with code, tables and links must pass.
--report prints every page's line count, sentence count and mean, and exits 0 whatever it finds.
Exit status: 0 when every page passes, 1 otherwise.
"""

import argparse
import os
import re
import sys

from pages import REPO, user_pages

MEAN_LIMIT, LONG_LIMIT, README_LINES = 20, 50, 200


def prose_lines(text):
    """Yields (line number, text) of a page, with "" for each line that is not prose."""
    text = re.sub(r"<!--.*?-->", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    fence = None
    for n, line in enumerate(text.split("\n"), 1):
        s = line.strip()
        m = re.match(r"(`{3,}|~{3,})", s)
        if fence:
            if m and s.strip(fence[0]) == "" and len(s) >= len(fence):
                fence = None
            yield n, ""
        elif m:
            fence = m.group(1)
            yield n, ""
        elif s.startswith(("|", "#", ":::", "<")):
            yield n, ""
        else:
            yield n, line


ITEM = re.compile(r"^\s*([-*+]|\d+\.)\s+")


def sentences(text):
    """Returns [(first line, words)] of the sentences of a page.

    A sentence ends at ".", "!" or "?" before a space or the line's end, and also where a
    paragraph, list item, table or heading ends.
    """
    out, cur, first = [], [], None

    def close():
        nonlocal cur, first
        if cur:
            out.append((first, cur))
        cur, first = [], None

    for n, line in prose_lines(text):
        if not line.strip() or ITEM.match(line):
            close()
        line = ITEM.sub("", line)
        line = re.sub(r"`[^`]*`", "X", line)
        line = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", line)
        for piece in re.split(r"(?<=[.!?])\s+", line):
            words = piece.split()
            if not words:
                continue
            if first is None:
                first = n
            cur += words
            if re.search(r"[.!?]$", piece.strip()):
                close()
    close()
    return [(n, w) for n, w in out if len(w) > 2]


def check(path, report):
    text = open(path, encoding="utf-8").read()
    rel = os.path.relpath(path, REPO)
    lines = text.count("\n")
    sents = sentences(text)
    problems = []
    mean = sum(len(w) for _, w in sents) / len(sents) if sents else 0.0
    if report:
        print("%-32s %5d lines %4d sentences, mean %4.1f words, longest %d"
              % (rel, lines, len(sents), mean, max((len(w) for _, w in sents), default=0)))
    if mean >= MEAN_LIMIT:
        problems.append("%s: mean sentence %.1f words (limit: under %d)" % (rel, mean, MEAN_LIMIT))
    for n, w in sents:
        if len(w) > LONG_LIMIT:
            problems.append("%s:%d: a sentence of %d words (limit %d): %s ..."
                            % (rel, n, len(w), LONG_LIMIT, " ".join(w[:12])))
    if os.path.basename(path) == "README.md" and os.path.dirname(path) == REPO \
            and lines > README_LINES:
        problems.append("%s: %d lines (limit %d)" % (rel, lines, README_LINES))
    if not path.startswith(os.path.join(REPO, "docs") + os.sep):  # mkdocs checks docs/ itself
        for n, line in prose_lines(text):
            for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", line):
                if "://" not in target and not target.startswith("mailto:") and \
                        not os.path.exists(os.path.join(os.path.dirname(path), target)):
                    problems.append("%s:%d: a link to %s, which does not exist" % (rel, n, target))
    return problems


def self_test():
    """Plants pages that must fail and one that must pass; returns the exit status."""
    import tempfile
    d = tempfile.mkdtemp(prefix="kolo-prose-self-")
    short = "This sentence is short. Another one follows here.\n\n- An item.\n- Another item.\n"
    cases = {
        "long.md": (short + " ".join(["word"] * 60) + ".\n", True),
        "mean.md": (" ".join(["word"] * 25) + ". " + " ".join(["word"] * 30) + ".\n", True),
        "link.md": (short + "See [it](no-such-page.md).\n", True),
        "good.md": (short + "| a | b |\n|---|---|\n| " + "x " * 80 + "| y |\n\n```text\n"
                    + "code " * 90 + "\n```\n\nSee [the page](long.md) for `a b c d`.\n", False),
    }
    bad = []
    for name, (text, should_fail) in cases.items():
        path = os.path.join(d, name)
        open(path, "w").write(text)
        if bool(check(path, False)) != should_fail:
            bad.append(name)
    global REPO
    saved, REPO = REPO, d
    try:
        path = os.path.join(d, "README.md")
        open(path, "w").write(short * 60)
        if not check(path, False):
            bad.append("README.md of 300 lines")
    finally:
        REPO = saved
    print("prose self-test: %s" % ("FAILED: " + ", ".join(bad) if bad else "all planted cases judged"))
    return 1 if bad else 0


def main():
    if "--self-test" in sys.argv[1:]:
        return self_test()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*")
    ap.add_argument("--report", action="store_true")
    a = ap.parse_args()
    files = [os.path.abspath(f) for f in a.files] or user_pages()
    problems = []
    for f in files:
        problems += check(f, a.report)
    for p in problems:
        print(p)
    print("prose: %d pages, %d problems" % (len(files), len(problems)))
    return 0 if a.report or not problems else 1


if __name__ == "__main__":
    sys.exit(main())
