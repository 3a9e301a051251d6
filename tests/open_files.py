"""Tests' way to hold more than 1,024 descriptors, as a bot watching 1,000 clusters' releases
does (#29): ``select()`` refuses any descriptor past 1,024, so code that waits on one must use
``poll``. ``past(1100)`` opens descriptors until the next one opened is past that number
(raising the soft RLIMIT_NOFILE to the hard limit first), and closes them afterwards."""

from __future__ import annotations

import contextlib
import os
import resource
from collections.abc import Iterator

import pytest


@contextlib.contextmanager
def past(number: int = 1100) -> Iterator[None]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = number + 64
    if hard != resource.RLIM_INFINITY and hard < wanted:
        pytest.skip(f"RLIMIT_NOFILE hard limit {hard} is below {wanted}")
    if soft != resource.RLIM_INFINITY and soft < wanted:
        resource.setrlimit(
            resource.RLIMIT_NOFILE, (wanted if hard == resource.RLIM_INFINITY else hard, hard)
        )
    held: list[int] = []
    try:
        while True:
            fd = os.open(os.devnull, os.O_RDONLY)
            held.append(fd)
            if fd >= number:
                break
        yield
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
