#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The main job (README "Quick start"): trains a small PyTorch model on 2 ranks with kolorun
# (examples/pytorch_train.py, which exits non-zero if the model did not learn), then runs the C
# example (examples/allreduce.c) on 2 ranks. scripts/setup.sh --run ends with it.
#
# Uses the installed kolorun and Python package when they are there, else the source tree's
# (bindings/launcher/kolorun, bindings/python) with the library of $KOLO_BUILD_DIR (build).
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR="${KOLO_BUILD_DIR:-build}"
case "$BUILD_DIR" in /*) ;; *) BUILD_DIR="$PWD/$BUILD_DIR" ;; esac
PYTHON="${KOLO_PYTHON:-/usr/bin/python3}"
NP="${KOLO_MAIN_JOB_NP:-2}"

if command -v kolorun >/dev/null 2>&1; then
  KOLORUN=(kolorun)
else
  KOLORUN=("$PYTHON" bindings/launcher/kolorun)
fi
if [ -e "$BUILD_DIR/bindings/c/libkolo.so" ]; then
  export KOLO_LIBRARY="$BUILD_DIR/bindings/c/libkolo.so"
fi
if ! "$PYTHON" -c "import kolo.torch" >/dev/null 2>&1; then
  export PYTHONPATH="$PWD/bindings/python${PYTHONPATH:+:$PYTHONPATH}"
fi

echo "== main job 1/2: PyTorch training on $NP ranks" \
  "(${KOLORUN[*]} -np $NP $PYTHON examples/pytorch_train.py)"
"${KOLORUN[@]}" -np "$NP" "$PYTHON" examples/pytorch_train.py

C_EXAMPLE="$BUILD_DIR/examples/kolo-example-allreduce"
if [ ! -x "$C_EXAMPLE" ]; then
  echo "main_job: $C_EXAMPLE is missing; build it with: cmake --build $BUILD_DIR" >&2
  exit 1
fi
echo "== main job 2/2: the C example on $NP ranks (${KOLORUN[*]} -np $NP $C_EXAMPLE)"
"${KOLORUN[@]}" -np "$NP" "$C_EXAMPLE"
echo "== main job: done"
