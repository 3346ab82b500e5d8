#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Runs the code blocks of README.md and docs/, so every snippet a user copies is proven.

    /usr/bin/python3 scripts/docs/snippets.py [FILE.md ...] [--build-dir DIR] [--check-only]
                                              [--timeout S] [--list]

Without FILE arguments it reads README.md and every docs/**/*.md. Each fenced block is one of:
- python: written to a file and run as `kolorun -np 2 /usr/bin/python3 FILE`;
- bash or sh: run with `bash -euo pipefail`;
- c: compiled against kolo.h and libkolo.so of the build tree, then run with `kolorun -np 2`;
- any block preceded by `<!-- file: NAME -->`: written to NAME for later blocks, not run;
- any block preceded by `<!-- not-run: REASON -->`: skipped, and counted as such;
- a bash block preceded by `<!-- in-checkout: REASON -->`: run in the checkout itself, for a
  read-only command that needs the real paths (the layer checks resolve links).
A block of another language without a marker is an error, and so is a marker without a name
or a reason, an indented code block written with four spaces, or a line of a block that runs
or is written wider than 90 columns (the page shows about that many without scrolling).

Blocks of one page run in order, in one scratch directory that holds links to the
repository's top-level entries, so `examples/x.py` and `build/...` work as relative paths.
PATH starts with shims: `kolorun` (the source tree's launcher) and `python3` (/usr/bin/python3,
the Debian Python with torch). PYTHONPATH, KOLO_LIBRARY, PKG_CONFIG_PATH and LD_LIBRARY_PATH
point at the source and build trees, so the snippets test this checkout, not an installed copy.

Exit status: 0 when every block ran and exited 0, 1 otherwise (each failure prints the block's
place and the tail of its output), 2 for a usage error. --check-only validates the markers and
runs nothing. --self-test plants a page with each kind of fault in a scratch directory and
checks that each one is reported. A block is killed with its process group after --timeout seconds (default 180).
"""

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from pages import REPO, user_pages

RUNNABLE = {"python", "bash", "sh", "c"}
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)")
MAX_COLUMNS = 90
MARKER = re.compile(r"^\s*<!--\s*(not-run|file|in-checkout):\s*(.*?)\s*-->\s*$")


class Block:
    """One fenced block: where it is, its language, its text and its marker."""

    def __init__(self, path, line, lang, text, marker):
        self.path, self.line, self.lang, self.text = path, line, lang, text
        self.kind, self.arg = marker if marker else ("run", "")

    def where(self):
        return "%s:%d" % (os.path.relpath(self.path, REPO), self.line)


def parse(path):
    """Returns (blocks, errors) of one Markdown file."""
    lines = open(path, encoding="utf-8").read().split("\n")
    blocks, errors = [], []
    i, in_list_or_para = 0, False
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            if (lines[i].startswith("    ") and lines[i].strip() and i > 0
                    and not lines[i - 1].strip() and not in_list_or_para):
                errors.append("%s:%d: an indented code block; use a fence with a language"
                              % (os.path.relpath(path, REPO), i + 1))
            stripped = lines[i].strip()
            if stripped:
                in_list_or_para = bool(re.match(r"^([-*+]|\d+\.)\s", stripped)) or (
                    in_list_or_para and lines[i].startswith(" "))
            i += 1
            continue
        indent, fence, lang = m.group(1), m.group(2), m.group(3).lower()
        start = i
        body = []
        i += 1
        while i < len(lines) and not (lines[i].strip().startswith(fence[0] * len(fence))
                                      and lines[i].strip().strip(fence[0]) == ""):
            line = lines[i]
            body.append(line[len(indent):] if line.startswith(indent) else line.lstrip())
            i += 1
        if i == len(lines):
            errors.append("%s:%d: a fence that is never closed"
                          % (os.path.relpath(path, REPO), start + 1))
        i += 1
        prev = start - 1
        while prev >= 0 and not lines[prev].strip():
            prev -= 1
        marker = None
        mm = MARKER.match(lines[prev]) if prev >= 0 else None
        if mm:
            marker = (mm.group(1), mm.group(2))
        block = Block(path, start + 1, lang, "\n".join(body) + "\n", marker)
        if marker and not marker[1]:
            errors.append("%s: `<!-- %s: -->` needs a %s"
                          % (block.where(), marker[0],
                             "file name" if marker[0] == "file" else "reason"))
        elif marker and marker[0] == "file" and ("/" in marker[1] or marker[1].startswith(".")):
            errors.append("%s: file name %r must be a plain name" % (block.where(), marker[1]))
        elif marker and marker[0] == "in-checkout" and lang not in ("bash", "sh"):
            errors.append("%s: in-checkout is for bash blocks" % block.where())
        elif not marker and lang not in RUNNABLE:
            errors.append("%s: a %s block with neither <!-- not-run: REASON --> nor "
                          "<!-- file: NAME --> before it" % (block.where(), lang or "plain"))
        if block.kind != "not-run":
            for k, line in enumerate(body):
                if len(line) > MAX_COLUMNS:
                    errors.append("%s: line %d of the block has %d columns; at most %d fit the "
                                  "page without scrolling" % (block.where(), k + 1, len(line),
                                                              MAX_COLUMNS))
        blocks.append(block)
        in_list_or_para = False
    return blocks, errors


def make_env(build_dir, shims):
    """The environment snippets run in: shims first on PATH, the source and build trees."""
    env = dict(os.environ)
    os.makedirs(shims, exist_ok=True)
    kolorun = os.path.join(shims, "kolorun")
    with open(kolorun, "w") as f:
        f.write("#!/bin/sh\nexec /usr/bin/python3 %s \"$@\"\n"
                % os.path.join(REPO, "bindings", "launcher", "kolorun"))
    os.chmod(kolorun, 0o755)
    py = os.path.join(shims, "python3")
    if not os.path.exists(py):
        os.symlink("/usr/bin/python3", py)
    libdir = os.path.join(build_dir, "bindings", "c")
    with open(os.path.join(shims, "kolo.pc"), "w") as f:
        f.write("Name: kolo\nDescription: kolo (build tree)\nVersion: 0\n"
                "Libs: -L%s -lkolo\nCflags: -I%s\n" % (libdir, os.path.join(REPO, "bindings", "c")))
    env["PATH"] = shims + os.pathsep + env.get("PATH", "")
    env["PYTHONPATH"] = os.path.join(REPO, "bindings", "python")
    env["KOLO_LIBRARY"] = os.path.join(libdir, "libkolo.so")
    env["PKG_CONFIG_PATH"] = shims
    env["LD_LIBRARY_PATH"] = libdir + (":" + env["LD_LIBRARY_PATH"]
                                       if env.get("LD_LIBRARY_PATH") else "")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def scratch_dir(base, page):
    """A directory holding links to the repository's top-level entries."""
    d = tempfile.mkdtemp(prefix=os.path.basename(page).replace(".md", "") + "-", dir=base)
    for name in os.listdir(REPO):
        if name not in (".git",):
            os.symlink(os.path.join(REPO, name), os.path.join(d, name))
    return d


def command(block, n, cwd):
    """Writes the block's file in cwd and returns the command that runs it."""
    if block.lang == "python":
        name = "snippet_%d.py" % n
        open(os.path.join(cwd, name), "w").write(block.text)
        return ["kolorun", "-np", "2", "/usr/bin/python3", name]
    if block.lang == "c":
        name = "snippet_%d" % n
        open(os.path.join(cwd, name + ".c"), "w").write(block.text)
        return ["sh", "-c", "cc -std=c99 -Wall -Werror %s.c $(pkg-config --cflags --libs kolo) "
                "-o %s && kolorun -np 2 ./%s" % (name, name, name)]
    path = os.path.join(cwd, "snippet_%d.sh" % n)
    open(path, "w").write(block.text)
    return ["bash", "-euo", "pipefail", path]


def run(block, cmd, cwd, env, timeout):
    """Runs one block in its own process group; returns (ok, seconds, output)."""
    t0 = time.time()
    p = subprocess.Popen(cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         start_new_session=True)
    try:
        out, _ = p.communicate(timeout=timeout)
        ok = p.returncode == 0
        note = "" if ok else "\n(exit status %d)" % p.returncode
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        ok, note = False, "\n(killed after %d s)" % timeout
    return ok, time.time() - t0, out.decode("utf-8", "replace") + note


SELF_TEST_PAGE = """# planted

```yaml
unmarked: true
```

<!-- not-run: -->
```text
a marker without a reason
```

    an indented block

<!-- file: ok.txt -->
```text
written
```

```bash
test -f ok.txt
```

```bash
echo planted failure; exit 3
```

```python
print("ran")  # xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx
```
"""


def self_test():
    """Checks that unmarked blocks, empty reasons, indented blocks and failures are caught."""
    d = tempfile.mkdtemp(prefix="kolo-snippets-self-")
    try:
        page = os.path.join(d, "planted.md")
        open(page, "w").write(SELF_TEST_PAGE)
        blocks, errors = parse(page)
        want = ["a yaml block with neither", "needs a reason", "an indented code block",
                "columns; at most"]
        missing = [w for w in want if not any(w in e for e in errors)]
        if len(blocks) != 6:
            missing.append("6 blocks (found %d)" % len(blocks))
        env = dict(os.environ, PATH=os.environ.get("PATH", ""))
        cwd = os.path.join(d, "run")
        os.makedirs(cwd)
        open(os.path.join(cwd, "ok.txt"), "w").write("written\n")
        results = [run(b, command(b, n, cwd), cwd, env, 30)[0]
                   for n, b in enumerate(blocks) if b.lang == "bash"]
        if results != [True, False]:
            missing.append("bash blocks pass then fail (got %s)" % results)
        for m in missing:
            print("self-test: not caught: %s" % m)
        print("snippets self-test: %s" % ("FAILED" if missing else "every planted fault caught"))
        return 1 if missing else 0
    finally:
        shutil.rmtree(d, ignore_errors=True)


def main():
    if "--self-test" in sys.argv[1:]:
        return self_test()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*")
    ap.add_argument("--build-dir", default=os.path.join(REPO, "build"))
    ap.add_argument("--check-only", action="store_true")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--timeout", type=float, default=180)
    a = ap.parse_args()
    files = [os.path.abspath(f) for f in a.files] or user_pages()
    pages, errors = [], []
    for f in files:
        if not os.path.exists(f):
            print("snippets: no such file: %s" % f, file=sys.stderr)
            return 2
        blocks, errs = parse(f)
        pages.append((f, blocks))
        errors += errs
    for e in errors:
        print("MARKER " + e)
    if a.list:
        for f, blocks in pages:
            for b in blocks:
                print("%-40s %-8s %-8s %s" % (b.where(), b.lang or "-", b.kind, b.arg))
    counts = {"run": 0, "file": 0, "not-run": 0, "failed": 0}
    if not a.check_only and not a.list:
        base = tempfile.mkdtemp(prefix="kolo-snippets-")
        env = make_env(os.path.abspath(a.build_dir), os.path.join(base, "shims"))
        try:
            for f, blocks in pages:
                cwd = None
                for n, b in enumerate(blocks):
                    if b.kind == "not-run":
                        counts["not-run"] += 1
                        continue
                    cwd = cwd or scratch_dir(base, f)
                    if b.kind == "file":
                        path = os.path.join(cwd, b.arg)
                        if os.path.islink(path):  # a link into the checkout: never write there
                            os.unlink(path)
                        open(path, "w").write(b.text)
                        os.chmod(path, 0o755)
                        counts["file"] += 1
                        continue
                    where = REPO if b.kind == "in-checkout" else cwd
                    ok, secs, out = run(b, command(b, n, cwd), where, env, a.timeout)
                    counts["run"] += 1
                    print("%s %s (%s, %.1f s)" % ("PASS" if ok else "FAIL", b.where(), b.lang,
                                                  secs), flush=True)
                    if not ok:
                        counts["failed"] += 1
                        tail = out.strip().split("\n")[-40:]
                        print("  | " + "\n  | ".join(tail))
        finally:
            shutil.rmtree(base, ignore_errors=True)
    print("snippets: %d files, %d blocks run, %d failed, %d written as files, %d marked not-run, "
          "%d marker errors" % (len(files), counts["run"], counts["failed"], counts["file"],
                                counts["not-run"], len(errors)))
    return 1 if errors or counts["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
