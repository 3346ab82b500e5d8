#!/usr/bin/env bash
# Builds kolo with its tests and runs every test suite (unit, multi-process over MPI and Gloo,
# launcher, Python). This is what CI runs (.ci/run). Set KOLO_TEST_LABELS to a CTest label
# regex to run a subset, e.g. KOLO_TEST_LABELS=unit.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
BUILD_DIR="${KOLO_BUILD_DIR:-build}"
args=(--test-dir "$BUILD_DIR" --output-on-failure --timeout 600)
if [ -n "${KOLO_TEST_LABELS:-}" ]; then args+=(-L "$KOLO_TEST_LABELS"); fi
# Multi-process tests share 2 cores: run them one at a time.
ctest "${args[@]}"
