"""Run `python -m kvcheck ARGS` and write this process's peak memory (KiB) where KVCHECK_PEAK_FILE says.

The security tests start kvcheck through this file, so that each attack's memory is kvcheck's own,
measured by the kernel rather than estimated: VmHWM, the peak resident set of this process's address
space (unlike ru_maxrss, which Linux carries over from the parent through fork and exec).
"""

import atexit
import os
import runpy
import sys


def _write_peak() -> None:
    with open("/proc/self/status") as status:
        peak_kib = next(line.split()[1] for line in status if line.startswith("VmHWM:"))
    with open(os.environ["KVCHECK_PEAK_FILE"], "w") as out:
        out.write(peak_kib)


atexit.register(_write_peak)
sys.argv = ["kvcheck", *sys.argv[1:]]
runpy.run_module("kvcheck", run_name="__main__", alter_sys=True)
