#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Every GPU check of kolo in one run, for a machine with a CUDA device and a CUDA + NCCL build
# (../shared/gpu/README.md: `bash .gpu-deps/build-gpu.sh` makes build-gpu/): the CTest label
# gpu (C++ and kolo.torch tests: NCCL, the host-staged path with ranks sharing one device,
# hierarchical over fake hosts, the auto fallback), then kolo-gpu-bench (the CUDA calls an op is
# made of, then kolo against ncclAllReduce from 4 B to 64 MiB), a timeline of small device ops,
# and every other test of the build (the Python suites against the machine's torch and Lightning).
#
#   scripts/gpu_checks.sh [BUILD_DIR [ARCHIVE_DIR]]      (defaults: build-gpu, $OUT)
#
# Each step's full output goes to BUILD_DIR/gpu-checks/<step>.log and its last lines to stdout;
# after each step the logs are packed into ARCHIVE_DIR/gpu-checks.tar.gz (one file: the device
# tool returns at most 8), so a run cut short still brings back what it did. The script goes on
# after a failed step and exits 1 if any failed. Bounded: each step has a timeout, and with
# GPU_CHECKS_UNTIL (seconds since the epoch) no step runs past that moment; steps that no
# longer fit are reported as not run.
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-gpu}
archive=${2:-${OUT:-}}
logs=$build/gpu-checks
mkdir -p "$logs"
failed=()
skipped=()
start=$(date +%s)
until=${GPU_CHECKS_UNTIL:-$((start + 100000))}

step() {  # step NAME TIMEOUT_SECONDS COMMAND...
  local name=$1 limit=$2
  shift 2
  local t0 rc left
  t0=$(date +%s)
  left=$((until - t0))
  if [ "$left" -lt 15 ]; then
    echo "== $name: not run (no time left)"
    skipped+=("$name")
    return
  fi
  [ "$limit" -le "$left" ] || limit=$left
  timeout "$limit" "$@" >"$logs/$name.log" 2>&1
  rc=$?
  echo "== $name: exit $rc in $(($(date +%s) - t0)) s (at $(($(date +%s) - start)) s)"
  tail -n "${TAIL_LINES:-12}" "$logs/$name.log"
  [ "$rc" -eq 0 ] || failed+=("$name")
  [ -z "$archive" ] || tar -czf "$archive/gpu-checks.tar.gz" -C "$build" gpu-checks
}

nvidia-smi -L 2>&1 | tee "$logs/device.log"
TAIL_LINES=40 step ctest_gpu 240 ctest --test-dir "$build" -L gpu -j4 --output-on-failure \
  --timeout 90
bench=$build/bench/kolo-gpu-bench
TAIL_LINES=30 step gpu_bench 120 "$bench" --calls 2000 --min 4 --max 64M --factor 4 --iters 200 \
  --warmup 20
step gpu_bench_no_caller_rounds 60 env KOLO_CALLER_ROUNDS=0 "$bench" --min 4 --max 4K \
  --factor 32 --iters 200 --warmup 20
step gpu_bench_async 60 env KOLO_ASYNC_COMPLETION=1 "$bench" --min 4 --max 4K --factor 32 \
  --iters 200 --warmup 20
# Where a small op's time goes: mean duration of each timeline activity over 200 ops of 4 KiB.
step gpu_timeline 60 env KOLO_TIMELINE="$logs/gpu-timeline.json" "$bench" --min 4K --max 4K \
  --iters 200 --warmup 20
step timeline_phases 30 "${KOLO_PYTHON:-python3}" - "$logs/gpu-timeline.json" <<'EOF'
import collections, json, sys
events = json.load(open(sys.argv[1]))["traceEvents"]
open_, total = {}, collections.defaultdict(list)
for e in events:
    key = (e.get("pid"), e.get("tid"))
    if e.get("ph") == "B":
        open_.setdefault(key, []).append(e)
    elif e.get("ph") == "E" and open_.get(key):
        b = open_[key].pop()
        total[b["name"]].append(e["ts"] - b["ts"])
for name, ds in sorted(total.items()):
    ds.sort()
    print("%-32s n=%4d median %8.1f us  mean %8.1f us" % (name, len(ds), ds[len(ds) // 2],
                                                         sum(ds) / len(ds)))
EOF
# Every other test of the build on this machine, the Python suites against its torch among them
# (its Lightning too: test_trainer runs Lightning's own Trainer with KoloStrategy where Lightning
# is installed). The build must have been configured with that interpreter, for the launcher and
# fault tests too (the GPU machines' /usr/bin/python3 has no pytest):
#   P=$(command -v python3); bash .gpu-deps/build-gpu.sh -DKOLO_PYTHON=$P \
#     -DKOLO_SYSTEM_PYTHON3=$P -DKOLO_FAULT_PYTHON3=$P
TAIL_LINES=40 step ctest_rest 400 ctest --test-dir "$build" -LE gpu -j8 --output-on-failure \
  --timeout 150
echo "== gpu_checks: $(($(date +%s) - start)) s; failed: ${failed[*]:-none};" \
  "not run: ${skipped[*]:-none}"
[ "${#failed[@]}" -eq 0 ] && [ "${#skipped[@]}" -eq 0 ]
