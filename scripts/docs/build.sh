#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the docs site (mkdocs.yml, pages in docs/) with --strict: a broken link, a page missing
# from the navigation or a failed mkdocstrings lookup fails the build. Output: build/site, or the
# directory given as $1. Needs Debian's mkdocs, mkdocs-material, mkdocstrings and
# mkdocstrings-python-handlers (scripts/setup.sh installs them). Debian installs the material
# theme under /usr/share/mkdocs/themes, which is not on Python's path: this script adds it.
# Serve it while writing: scripts/docs/build.sh serve (http://127.0.0.1:8000).
set -euo pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH="/usr/share/mkdocs/themes${PYTHONPATH:+:$PYTHONPATH}"
if [ "${1:-}" = "serve" ]; then
  exec /usr/bin/python3 -m mkdocs serve --strict --dev-addr 127.0.0.1:8000
fi
exec /usr/bin/python3 -m mkdocs build --strict --site-dir "$(realpath -m "${1:-build/site}")"
