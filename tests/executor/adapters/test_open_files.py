"""``run`` raises its soft limit of open descriptors to the hard one (#29): a replica of 1,000
clusters holds thousands of sockets. In a child process, whose limits are its own."""

from __future__ import annotations

import json
import subprocess
import sys

CHILD = """
import json, resource
from gitopsbot.adapters import open_files
resource.setrlimit(resource.RLIMIT_NOFILE, (256, {hard}))
before, after = open_files.raise_soft_limit()
print(json.dumps([before, after, resource.getrlimit(resource.RLIMIT_NOFILE)]))
"""


def _child(hard: int) -> list[object]:
    out = subprocess.run(
        [sys.executable, "-c", CHILD.format(hard=hard)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    found: list[object] = json.loads(out.stdout)
    return found


def test_the_soft_limit_goes_up_to_the_hard_one_and_the_hard_one_stays() -> None:
    assert _child(4096) == [256, 4096, [4096, 4096]]


def test_nothing_changes_when_soft_is_hard_already() -> None:
    assert _child(256) == [256, 256, [256, 256]]
