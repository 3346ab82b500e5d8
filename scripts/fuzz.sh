#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the libFuzzer targets with Clang (ASan + UBSan + coverage) and runs each for a bounded
# time from its checked-in seed corpus; then the Python host-list fuzzer. Exits non-zero when any
# target finds a crash (the crashing input is left in $KOLO_FUZZ_OUT/<target>/).
#
#   scripts/fuzz.sh [seconds per target]          (default 30; KOLO_FUZZ_SECONDS also works)
#
# Environment: KOLO_FUZZ_BUILD_DIR (default build-fuzz), KOLO_FUZZ_OUT (default
# $KOLO_FUZZ_BUILD_DIR/fuzz-out: the grown corpora, crash artifacts and logs; the checked-in
# corpus is only read), KOLO_JOBS (compile jobs, default 2), KOLO_FUZZ_TARGETS (subset, e.g.
# "message config"), CLANG_CXX / CLANG_CC (default clang++-14 / clang-14).
# See test/fuzz/README.md for the targets and their properties.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

seconds="${1:-${KOLO_FUZZ_SECONDS:-30}}"
build_dir="${KOLO_FUZZ_BUILD_DIR:-build-fuzz}"
out="${KOLO_FUZZ_OUT:-$build_dir/fuzz-out}"
jobs="${KOLO_JOBS:-2}"
targets=(${KOLO_FUZZ_TARGETS:-message config store_protocol store_client hostlist})
cxx="${CLANG_CXX:-clang++-14}"
cc="${CLANG_CC:-clang-14}"

start=$(date +%s)
native=()
for t in "${targets[@]}"; do
  [ "$t" = hostlist ] || native+=("fuzz_$t")
done
if [ ${#native[@]} -gt 0 ]; then
  # Only what the fuzzers link: the engine without MPI/Gloo/CUDA (no fuzzed code lives there).
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_C_COMPILER="$cc" \
    -DKOLO_BUILD_FUZZERS=ON -DKOLO_SANITIZE=address,undefined \
    -DKOLO_WITH_MPI=OFF -DKOLO_WITH_GLOO=OFF -DKOLO_WITH_CUDA=OFF -DKOLO_WITH_NCCL=OFF \
    -DKOLO_BUILD_BENCH=OFF -DKOLO_BUILD_TESTS=ON >/dev/null
  ninja -C "$build_dir" -j "$jobs" "${native[@]}"
fi
built=$(date +%s)
echo "fuzz.sh: build took $((built - start)) s"

# halt_on_error: the first report is the finding. Leak checking stays on (-detect_leaks=1).
export ASAN_OPTIONS="halt_on_error=1:abort_on_error=1:detect_leaks=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
corpus="$root/test/fuzz/corpus"
status=0
mkdir -p "$out"
for t in "${targets[@]}"; do
  work="$out/$t"
  rm -rf "$work"
  mkdir -p "$work/corpus" "$work/artifacts"
  log="$work/log.txt"
  t0=$(date +%s)
  if [ "$t" = hostlist ]; then
    if /usr/bin/python3 "$root/test/fuzz/fuzz_hostlist.py" --seconds "$seconds" \
        --artifacts "$work/artifacts" "$corpus/hostlist" >"$log" 2>&1; then
      result="ok"
    else
      result="FINDING"
    fi
    summary=$(tail -n 1 "$log")
  else
    dict=()
    [ -f "$root/test/fuzz/$t.dict" ] && dict=(-dict="$root/test/fuzz/$t.dict")
    # New inputs go to $work/corpus (first directory); the checked-in corpus is read only.
    if "$build_dir/test/fuzz/fuzz_$t" "$work/corpus" "$corpus/$t" "${dict[@]}" \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$work/artifacts/" >"$log" 2>&1; then
      result="ok"
    else
      result="FINDING"
    fi
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || true)
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1 || true)
    summary="${runs:-?} executions, ${cov:-cov: ?}, corpus $(ls "$work/corpus" | wc -l) new inputs"
  fi
  echo "fuzz.sh: $t: $result in $(( $(date +%s) - t0 )) s: $summary"
  if [ "$result" != ok ]; then
    status=1
    tail -n 40 "$log"
    ls -l "$work/artifacts"
  fi
done
echo "fuzz.sh: total $(( $(date +%s) - start )) s, status $status"
exit "$status"
