#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds kolo with a sanitizer and runs a representative subset of the tests under it.
#
#   scripts/sanitize.sh address|thread [extra ctest arguments...]
#
#   address  AddressSanitizer + UndefinedBehaviorSanitizer (+ LeakSanitizer), in build-asan
#   thread   ThreadSanitizer, in build-tsan
#
# Only the targets the subset needs are built (the engine, the listed test programs, the store
# server), so each sanitizer fits in about 5 minutes on 2 cores. Runtime options and the
# suppressions (test/sanitizers/*.supp) reach every test through CTest (see
# test/sanitizers/README.md, which also says what the subset covers and why).
# Environment: KOLO_SANITIZE_BUILD_DIR (default build-asan / build-tsan), KOLO_JOBS (default 2),
# KOLO_SANITIZE_FULL=1 builds and runs every unit and mp test instead of the subset.
set -euo pipefail
cd "$(dirname "$0")/.."

kind="${1:-}"
shift || true
case "$kind" in
  address)
    sanitize="address,undefined"
    build_dir="${KOLO_SANITIZE_BUILD_DIR:-build-asan}"
    # The codec, the negotiation logic, the stores (TCP server and client, file store), the
    # reductions and ring collectives over loopback, the timeline writer, the whole runtime with
    # thread ranks, the fuzzers' regression cases, kolo's TCP point-to-point with thread ranks;
    # then the transports and the runtime (C API) as 2 real processes under mpirun and over Gloo.
    tests=(kolo_message_test kolo_negotiator_test kolo_response_cache_test kolo_store_test
           kolo_reduce_cpu_test kolo_ring_test kolo_timeline_test kolo_runtime_test
           kolo_fuzz_regressions_test kolo_tcp_transport_test)
    mp_regex='^kolo_mp_(transport|runtime)_(mpi|gloo)_np2$'
    mp_targets=(kolo_mp_transport_test kolo_mp_runtime_test kolo-store-server)
    ;;
  thread)
    sanitize="thread"
    build_dir="${KOLO_SANITIZE_BUILD_DIR:-build-tsan}"
    # Everything with threads: the coordinator and runtime (enqueue from many threads), the
    # timeline writer thread, the store server thread and blocking clients, the loopback, tcp
    # and Gloo transports with thread ranks (abort from another thread); then the runtime
    # (coordinator thread, C API) as 2 real processes over Gloo and under mpirun.
    tests=(kolo_runtime_test kolo_timeline_test kolo_store_test kolo_loopback_test
           kolo_tcp_transport_test kolo_gloo_transport_test)
    mp_regex='^kolo_mp_runtime_(mpi|gloo)_np2$'
    mp_targets=(kolo_mp_runtime_test)
    ;;
  *)
    echo "usage: $0 address|thread [ctest arguments...]" >&2
    exit 2
    ;;
esac

jobs="${KOLO_JOBS:-2}"
start=$(date +%s)
# CUDA/NCCL are off: the sanitizers do not instrument device code and the CUDA driver trips
# ASan's shadow memory. The benchmarks are not tests.
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DKOLO_SANITIZE="$sanitize" -DKOLO_WITH_CUDA=OFF -DKOLO_WITH_NCCL=OFF -DKOLO_BUILD_BENCH=OFF \
  -DKOLO_BUILD_TESTS=ON >/dev/null

if [ "${KOLO_SANITIZE_FULL:-0}" = 1 ]; then
  ninja -C "$build_dir" -j "$jobs"
else
  ninja -C "$build_dir" -j "$jobs" "${tests[@]}" "${mp_targets[@]}"
fi
built=$(date +%s)
echo "sanitize.sh: $kind build took $((built - start)) s"

status=0
if [ "${KOLO_SANITIZE_FULL:-0}" = 1 ]; then
  ctest --test-dir "$build_dir" --output-on-failure --timeout 600 -L 'unit|mp' "$@" || status=$?
else
  # The subset's unit programs run directly (each runs all its non-hidden cases, as CTest's
  # discovery would), two at a time, with the options CTest would give them; a failing
  # program's log is printed. Then the multi-process cases, through CTest, one at a time.
  # shellcheck disable=SC1090,SC1091
  source "$build_dir/test/kolo_sanitizer_env.sh"
  logs="$build_dir/sanitize-logs"
  rm -rf "$logs" && mkdir -p "$logs"
  run_program() {
    local t0
    t0=$(date +%s)
    if timeout 600 "$build_dir/test/$1" >"$logs/$1.log" 2>&1; then
      echo "passed: $1 in $(($(date +%s) - t0)) s: $(grep -E 'passed|test cases' "$logs/$1.log" |
        tail -n 1)"
    else
      echo "FAILED: $1 (log: $logs/$1.log)"
      cat "$logs/$1.log"
      return 1
    fi
  }
  export -f run_program
  export build_dir logs
  printf '%s\n' "${tests[@]}" | xargs -P "$jobs" -I{} bash -c 'run_program "$1"' _ {} || status=1
  ctest --test-dir "$build_dir" --output-on-failure --timeout 600 -R "$mp_regex" "$@" ||
    status=1
fi
end=$(date +%s)
echo "sanitize.sh: $kind tests took $((end - built)) s (total $((end - start)) s), status $status"
exit "$status"
