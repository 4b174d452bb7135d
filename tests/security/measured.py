"""Run `python -m kvcheck ARGS` and write this process's peak memory (KiB) where KVCHECK_PEAK_FILE says.

The security tests start kvcheck through this file, so that each attack's memory is kvcheck's own
(`ru_maxrss` of the process that did the work), measured by the kernel rather than estimated.
"""

import atexit
import os
import resource
import runpy
import sys


def _write_peak() -> None:
    with open(os.environ["KVCHECK_PEAK_FILE"], "w") as out:
        out.write(str(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss))


atexit.register(_write_peak)
sys.argv = ["kvcheck", *sys.argv[1:]]
runpy.run_module("kvcheck", run_name="__main__", alter_sys=True)
