#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Makes one machine look like several hosts to kolo, for the hierarchical-allreduce tests and
# benchmarks: run by a launcher (kolorun, or mpirun) that set KOLO_RANK (or OMPI_COMM_WORLD_RANK),
# it gives this rank the host name "fakehostH" with H = rank / PER_HOST, the matching
# KOLO_LOCAL_RANK / KOLO_LOCAL_SIZE (so KOLO_SHM=auto does not put one segment over every rank),
# and Gloo on the loopback interface (the fake names do not resolve), then execs the program.
#
#   kolorun -np 4 test/mp/fake_hosts.sh 2 PROGRAM [ARGS...]
set -eu
per_host=$1
shift
rank=${KOLO_RANK:-${OMPI_COMM_WORLD_RANK:-}}
if [ -z "$rank" ]; then
  echo "$0: neither KOLO_RANK nor OMPI_COMM_WORLD_RANK is set (run it under kolorun or mpirun)" >&2
  exit 2
fi
KOLO_HOSTNAME=fakehost$((rank / per_host))
KOLO_LOCAL_RANK=$((rank % per_host))
KOLO_LOCAL_SIZE=$per_host
KOLO_GLOO_IFACE=lo
export KOLO_HOSTNAME KOLO_LOCAL_RANK KOLO_LOCAL_SIZE KOLO_GLOO_IFACE
exec "$@"
