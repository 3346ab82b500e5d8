# SPDX-License-Identifier: Apache-2.0
"""The driver side of test_run_hosts.py: runs in the launcher namespace, calls kolo.run or
KoloRunner with network-namespace hosts and prints one line "OUTCOME <json>"."""

import json
import os
import sys

import kolo
from kolo.runner import KoloRunner


def work(scale):
    import numpy as np

    import kolo
    kolo.init()
    total = kolo.allreduce(np.array([kolo.rank() + 1.0]), op=kolo.Sum)
    return {"rank": kolo.rank(), "size": kolo.size(), "host": os.environ["KOLO_HOSTNAME"],
            "netns": os.stat("/proc/self/ns/net").st_ino, "sum": float(total[0]) * scale,
            "secret_hidden": "KOLO_RUN_SECRET" not in os.environ}


def fails(rank, how):
    import numpy as np

    import kolo
    kolo.init()
    kolo.barrier()
    if kolo.rank() == rank:
        if how == "exit":
            os._exit(3)  # dies without a word
        raise ValueError("rank %d is unhappy" % rank)
    kolo.allreduce(np.ones(4), name="after")  # fails or is stopped: the peer is gone
    return kolo.rank()


def main(case, a, b):
    hosts = "%s:2,%s:2" % (a, b)
    try:
        if case == "ok":
            value = kolo.run(work, args=(2.0,), np=4, hosts=hosts, network_interface="kolo0")
        elif case == "runner":
            value = KoloRunner(np=0, hosts="%s:1,%s:1" % (a, b),
                               network_interface="kolo0").run(work, scale=1.0)
        else:
            value = kolo.run(fails, args=(3, case), np=4, hosts=hosts, network_interface="kolo0",
                             env={"KOLO_TIMEOUT_SECONDS": "5"}, timeout=120)
        print("OUTCOME " + json.dumps({"ok": True, "value": value}), flush=True)
    except Exception as e:  # noqa: B902 - the test reads the message
        print("OUTCOME " + json.dumps({"ok": False, "type": type(e).__name__, "error": str(e)}),
              flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:4])
