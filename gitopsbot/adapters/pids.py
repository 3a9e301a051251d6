"""Whether a process id names a running process: signal 0, which needs no /proc."""

from __future__ import annotations

import os


def pid_exists(pid: int) -> bool:
    """Whether ``pid`` names a process (a zombie too). One of another user's counts: the
    kernel refuses to signal it only because it is not ours."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
