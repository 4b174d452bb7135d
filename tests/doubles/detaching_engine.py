"""An engine wrapper that leaves a detached daemon behind, the way issue 14's attack did.

    detaching_engine.py MARKERS {term|ignore-term} {stay|exit} PROGRAM [ARG...]

Before it becomes PROGRAM (exec), it double-forks a daemon: the daemon leaves the engine's session
(setsid), drops the engine's output (stdin, stdout and stderr on /dev/null), binds a TCP port on
loopback and listens, writes "PID PORT" to MARKERS/<its pid> (MARKERS is a folder, so several
engines can share it), and sleeps; with `ignore-term` it ignores SIGTERM. The middle process exits
at once, so the daemon is an orphan before anyone could see whose it was. With `exit` the wrapper
does not become PROGRAM: it exits with status 1 once the daemon is listening, the engine ending by
itself and leaving the daemon behind.
"""

import os
import signal
import socket
import sys

markers, term, after, *program = sys.argv[1:]
os.makedirs(markers, exist_ok=True)
ready_r, ready_w = os.pipe()

middle = os.fork()
if middle == 0:
    os.setsid()
    if os.fork() != 0:
        os._exit(0)  # the middle process: the daemon is orphaned at once
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    if term == "ignore-term":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    marker = os.path.join(markers, str(os.getpid()))
    with open(marker + ".tmp", "w") as out:
        out.write(f"{os.getpid()} {server.getsockname()[1]}")
    os.rename(marker + ".tmp", marker)
    os.write(ready_w, b"x")
    os.close(ready_w)
    os.close(ready_r)
    while True:
        signal.pause()

os.waitpid(middle, 0)
os.close(ready_w)
os.read(ready_r, 1)  # the daemon is listening (or gone: end of file)
os.close(ready_r)
if after == "exit":
    print("RuntimeError: the engine gave up and left its daemon running", flush=True)
    sys.exit(1)
os.execvp(program[0], program)
