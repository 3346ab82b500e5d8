# SPDX-License-Identifier: Apache-2.0
"""--hold-replacements for the elastic test workers (elastic_worker.py, elastic_trainer_worker.py):
the only host's first death is forgiven and kolorun starts a replacement there at once; a test
that checks the job ends on the survivors keeps it out, whatever the machine's speed."""

import os
import time


def add_argument(parser):
    parser.add_argument("--hold-replacements", type=int, default=-1,
                        help="N: a worker with id >= N (started after the first round, as a "
                             "replacement) waits 60 s before its init, so it joins no round of "
                             "a job that ends sooner (kolorun stops it then)")


def hold(args):
    """Call before the worker's init: sleeps 60 s in a replacement worker when asked to."""
    if 0 <= args.hold_replacements <= int(os.environ.get("KOLO_ELASTIC_WORKER_ID", "-1")):
        time.sleep(60)
