# SPDX-License-Identifier: Apache-2.0
"""The checkout's root and the pages a user reads: README.md and every docs/**/*.md.

Shared by snippets.py and prose.py, which check the same pages by default.
"""

import os

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def user_pages():
    """README.md, then every Markdown file under docs/, as absolute paths."""
    files = [os.path.join(REPO, "README.md")]
    for root, dirs, names in os.walk(os.path.join(REPO, "docs")):
        dirs.sort()
        files += [os.path.join(root, n) for n in sorted(names) if n.endswith(".md")]
    return files
