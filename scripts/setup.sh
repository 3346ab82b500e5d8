#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Idempotent set-up for a fresh Debian 12 machine: installs the missing Debian packages, builds
# kolo (RelWithDebInfo, CUDA/NCCL when /usr/local/cuda has them) and installs it into /usr/local
# (libkolo.so, kolo.h, the CMake package, kolorun, the Python package for /usr/bin/python3).
# Usage: scripts/setup.sh [--run]   (--run: then run the main job, a 2-rank job on this machine)
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  libopenmpi-dev openmpi-bin libgloo-dev catch2 libspdlog-dev
  python3 python3-torch python3-numpy python3-pytest python3-cloudpickle python3-yaml python3-setuptools
  python3-pip python3-tqdm openssh-server openssh-client iproute2 procps
  clang libclang-rt-14-dev
  mkdocs mkdocs-material mkdocstrings mkdocstrings-python-handlers python3-matplotlib
)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

BUILD_DIR="${KOLO_BUILD_DIR:-build}"
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build "$BUILD_DIR" -j "$(nproc)"
$SUDO cmake --install "$BUILD_DIR" >/dev/null
$SUDO ldconfig
echo "setup: kolo installed ($(command -v kolorun || echo 'kolorun not on PATH'))"

if [ "${1:-}" = "--run" ]; then
  exec scripts/main_job.sh
fi
