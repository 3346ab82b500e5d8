# SPDX-License-Identifier: Apache-2.0
"""kolo_launcher: the pure-Python implementation behind `kolorun`, kolo's job launcher.

Standard library only (Python >= 3.9), so it runs on any node without torch or a build
(--config-file alone imports PyYAML, when given).
Modules, one concern each:
  args          command line: the option table, --help text, flag -> KOLO_* variables
  config_file   --config-file: horovodrun's YAML file, under the command line's flags
  hosts         host lists (-H, --hostfile), which hosts are this machine, interface addresses
  topology      rank / local_rank / cross_rank assignment (Horovod's rules)
  store_server  the rendezvous key-value store served over TCP (protocol of rendezvous/store.h)
  ssh           the command line that starts a rank on another host, and its remote watcher
  workers       one rank's process: start, exit status without reaping, group signals
  orphan_guard  the helper process that stops the local ranks when kolorun is killed -9
  output        rank-prefixed forwarding of worker output
  gloo_run      Gloo mode: serve the store, start every rank, supervise, stop
  mpi_run       MPI mode: build (and exec) the Open MPI mpirun command line
  main          the entry point `kolorun` calls
"""

__version__ = "0.1.0"
