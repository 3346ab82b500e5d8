#!/usr/bin/env bash
# Builds kolo with its tests and runs every suite: CTest (unit, multi-process over MPI, Gloo and
# shared memory, launcher, Python, fault injection and soak; gpu tests skip without a device),
# then the sanitizer subsets (ASan+UBSan, TSan) and a bounded libFuzzer run. This is what CI
# runs (.ci/run). It stays within 25 minutes on 2 cores.
#
# While CTest runs, the sanitizer and fuzzer trees are compiled in the background under the
# SCHED_IDLE policy (nice 19 where chrt cannot set it): the compiler only gets the CPU time the
# tests leave idle (most multi-process tests wait on sockets, timeouts and killed peers), and a
# waking test preempts it at once. Their tests then run after CTest as before.
#
# Environment: KOLO_TEST_LABELS (a CTest label regex: only those CTest suites),
# KOLO_TEST_SKIP_SANITIZERS=1, KOLO_TEST_SKIP_FUZZ=1, KOLO_FUZZ_SECONDS (default 10 per target).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
stamp() { echo "== test.sh: $1 ($(( $(date +%s) - start )) s)"; }

scripts/setup.sh
stamp "built and installed"

BUILD_DIR="${KOLO_BUILD_DIR:-build}"
args=(--test-dir "$BUILD_DIR" --output-on-failure --timeout 600)
if [ -n "${KOLO_TEST_LABELS:-}" ]; then args+=(-L "$KOLO_TEST_LABELS"); fi

run_sanitizers=0
run_fuzz=0
if [ -z "${KOLO_TEST_LABELS:-}" ]; then
  [ "${KOLO_TEST_SKIP_SANITIZERS:-0}" = 1 ] || run_sanitizers=1
  [ "${KOLO_TEST_SKIP_FUZZ:-0}" = 1 ] || run_fuzz=1
fi
ahead_pid=""
ahead_log="$BUILD_DIR/build-ahead.log"
if [ $run_sanitizers = 1 ] || [ $run_fuzz = 1 ]; then
  idle=(nice -n 19)
  if chrt --idle 0 true 2>/dev/null; then idle=(chrt --idle 0); fi
  # Its own session (setsid), so that the trap below can stop the compilers too.
  RUN_SANITIZERS=$run_sanitizers RUN_FUZZ=$run_fuzz setsid "${idle[@]}" bash -c '
    set -e
    if [ "$RUN_SANITIZERS" = 1 ]; then
      KOLO_SANITIZE_BUILD_ONLY=1 scripts/sanitize.sh address
      KOLO_SANITIZE_BUILD_ONLY=1 scripts/sanitize.sh thread
    fi
    if [ "$RUN_FUZZ" = 1 ]; then KOLO_FUZZ_BUILD_ONLY=1 scripts/fuzz.sh; fi
  ' >"$ahead_log" 2>&1 &
  ahead_pid=$!
  # A failing CTest run ends the script: take the background build down with it.
  trap '[ -z "$ahead_pid" ] || kill -- "-$ahead_pid" 2>/dev/null || true' EXIT
fi

# Multi-process tests share 2 cores: one test at a time.
ctest "${args[@]}"
stamp "ctest passed"

if [ -n "$ahead_pid" ]; then
  ahead_rc=0
  wait "$ahead_pid" || ahead_rc=$?
  ahead_pid=""
  if [ $ahead_rc != 0 ]; then
    cat "$ahead_log"
    echo "test.sh: building the sanitizer/fuzzer trees failed ($ahead_rc)" >&2
    exit 1
  fi
  stamp "sanitizer and fuzzer trees built alongside CTest ($(grep -h 'build took' "$ahead_log" | tr '\n' ' '))"
fi

if [ -z "${KOLO_TEST_LABELS:-}" ]; then
  if [ "${KOLO_TEST_SKIP_SANITIZERS:-0}" != 1 ]; then
    scripts/sanitize.sh address
    stamp "AddressSanitizer + UndefinedBehaviorSanitizer subset passed"
    scripts/sanitize.sh thread
    stamp "ThreadSanitizer subset passed"
  fi
  if [ "${KOLO_TEST_SKIP_FUZZ:-0}" != 1 ]; then
    scripts/fuzz.sh "${KOLO_FUZZ_SECONDS:-10}"
    stamp "fuzzers ran without a crash"
  fi
fi
stamp "all tests passed"
