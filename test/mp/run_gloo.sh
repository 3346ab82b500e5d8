#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Starts NP ranks of a program over the Gloo transport on this host, the way kolorun will:
#
#   run_gloo.sh NP STORE_SERVER TIME_LIMIT_S PROGRAM [ARGS...]
#
# It starts STORE_SERVER (kolo-store-server) on 127.0.0.1 with a free port, then NP copies of
# PROGRAM with KOLO_RANK, KOLO_SIZE, KOLO_LOCAL_RANK, KOLO_LOCAL_SIZE, KOLO_CONTROLLER=gloo and
# KOLO_RENDEZVOUS_ADDR/PORT set, and waits for them. When a rank fails, or TIME_LIMIT_S passes,
# the remaining ranks are stopped (TERM, then KILL). Each rank's output is printed afterwards,
# prefixed with its rank. Exit status: 0 when every rank exited 0, else 1 (2 for bad usage).
# Temporary: kolorun replaces it.
set -u

if [ $# -lt 4 ]; then
  echo "usage: $0 NP STORE_SERVER TIME_LIMIT_S PROGRAM [ARGS...]" >&2
  exit 2
fi
np=$1 server=$2 limit=$3
shift 3
case "$np$limit" in *[!0-9]*) echo "$0: NP and TIME_LIMIT_S must be integers" >&2; exit 2 ;; esac

work=$(mktemp -d "${TMPDIR:-/tmp}/kolo_run_gloo.XXXXXX")
server_pid=""
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null; done
  [ -n "$server_pid" ] && kill -TERM "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

"$server" --host 127.0.0.1 --port 0 --ignore-stdin --max-seconds $((limit + 30)) \
  >"$work/port" 2>"$work/server.err" </dev/null &
server_pid=$!
port=""
for _ in $(seq 1 100); do
  port=$(head -n1 "$work/port" 2>/dev/null)
  [ -n "$port" ] && break
  kill -0 "$server_pid" 2>/dev/null || break
  sleep 0.1
done
if [ -z "$port" ]; then
  echo "$0: kolo-store-server did not start:" >&2
  cat "$work/server.err" >&2
  exit 1
fi

for ((r = 0; r < np; r++)); do
  KOLO_RANK=$r KOLO_SIZE=$np KOLO_LOCAL_RANK=$r KOLO_LOCAL_SIZE=$np KOLO_CONTROLLER=gloo \
    KOLO_RENDEZVOUS_ADDR=127.0.0.1 KOLO_RENDEZVOUS_PORT=$port \
    "$@" >"$work/rank$r.log" 2>&1 </dev/null &
  pids+=($!)
done

stop_all() {
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  for _ in $(seq 1 20); do
    alive=0
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ $alive -eq 0 ] && return
    sleep 0.1
  done
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null; done
}

failed=0
declare -A status
deadline=$((SECONDS + limit))
while :; do
  running=0
  for r in "${!pids[@]}"; do
    [ -n "${status[$r]+x}" ] && continue
    if kill -0 "${pids[$r]}" 2>/dev/null; then
      running=1
    else
      wait "${pids[$r]}"
      status[$r]=$?
      if [ "${status[$r]}" -ne 0 ]; then
        echo "$0: rank $r exited with status ${status[$r]}; stopping the others" >&2
        failed=1
      fi
    fi
  done
  [ $running -eq 0 ] && break
  if [ $failed -ne 0 ]; then stop_all; fi
  if [ $SECONDS -ge $deadline ]; then
    echo "$0: time limit of ${limit}s reached; stopping every rank" >&2
    failed=1
    stop_all
  fi
  sleep 0.1
done

for ((r = 0; r < np; r++)); do
  sed "s/^/[rank $r] /" "$work/rank$r.log"
done
exit $failed
