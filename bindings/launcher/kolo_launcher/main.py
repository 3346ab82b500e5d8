# SPDX-License-Identifier: Apache-2.0
"""The entry point of `kolorun`: parse the command line, check the placement, run the mode."""

import os
import sys

from .args import UsageError, parse
from .elastic_run import run_elastic
from .gloo_run import run_gloo
from .mpi_run import run_mpi
from .output import Console
from .topology import TopologyError, assign


def main(argv=None, environ=None):
    """Runs kolorun; returns its exit status."""
    argv = sys.argv[1:] if argv is None else argv
    environ = os.environ if environ is None else environ
    console = Console()
    try:
        opts = parse(argv, environ)
        if opts is None:  # --help / --version
            return 0
        if opts.elastic is None:
            assign(opts.hosts, opts.np)  # placement errors are usage errors in both modes
    except (UsageError, TopologyError) as e:
        console.message("%s\n(see kolorun --help)" % e)
        return 2
    for note in opts.notes:
        console.message(note)
    try:
        if opts.controller == "mpi":
            return run_mpi(opts, environ, console)
        if opts.elastic is not None:
            return run_elastic(opts, environ, console)
        return run_gloo(opts, environ, console)
    except KeyboardInterrupt:  # Ctrl-C before the ranks' signal handling was in place
        console.message("interrupted before the job started")
        return 130
