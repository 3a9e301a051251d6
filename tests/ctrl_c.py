"""Run a command and stop it as a person does with Ctrl-C once it is running:
``python tests/ctrl_c.py SETTLE LIMIT -- COMMAND...``.

SIGINT goes to the command alone SETTLE seconds after its first line of output (it is past
its start-up: imports, reading the fleet), or after LIMIT seconds if it says nothing; SIGKILL
60 seconds later if it is still running. Its output is copied to this process's stdout; the
exit status is the command's (128 + the signal if one ended it), as ``timeout
--preserve-status`` gives it. A fixed delay instead sent the SIGINT into the interpreter's
start-up on a loaded machine (a traceback and 130 where the command stops cleanly)."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading


def main(argv: list[str]) -> int:
    settle, limit = float(argv[0]), float(argv[1])
    command = argv[argv.index("--") + 1 :]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert proc.stdout is not None
    spoke = threading.Event()

    def copy() -> None:
        assert proc.stdout is not None
        for line in iter(proc.stdout.readline, b""):
            sys.stdout.buffer.write(line)
            sys.stdout.buffer.flush()
            spoke.set()

    copier = threading.Thread(target=copy, daemon=True)
    copier.start()
    spoke.wait(limit)
    try:
        proc.wait(settle if spoke.is_set() else 0)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    copier.join(5)
    return proc.returncode if proc.returncode >= 0 else 128 - proc.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
