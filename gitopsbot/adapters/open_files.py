"""The process's limit of open descriptors, raised to what the system allows for ``run``.

A replica holding 1,000 clusters keeps thousands of sockets (each cluster's API connections
and its release watch, the Git remote, the webhook and metrics servers); a soft limit of
1,024 (many hosts' and some container runtimes' default) would fail them one by one. Go
raises its soft limit to the hard one at start (since 1.19), as do most servers; so does
``run``. The hard limit is never touched: that is the operator's.
"""

from __future__ import annotations

import logging
import resource

log = logging.getLogger(__name__)


def raise_soft_limit() -> tuple[int, int]:
    """Set the soft ``RLIMIT_NOFILE`` to the hard one; returns (before, after). A system
    that refuses keeps the old limit, with a warning: the bot still runs, at a smaller
    fleet."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft == hard:
        return soft, soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError) as e:
        log.warning("open files: the soft limit stays %d (the hard one is %d): %s", soft, hard, e)
        return soft, soft
    log.debug("open files: soft limit %d raised to %d", soft, hard)
    return soft, hard
