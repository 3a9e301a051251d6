"""The idle check's watch (docs/executor.md "The idle check"): each idle cluster's Helm
release followed through the API's watch, so a revision made outside the bot is seen at once
and the periodic look at the release can be stretched while the watch is healthy.

Implemented by ``gitopsbot.adapters.release_watch.ReleaseWatches`` (one event-loop thread for
every watch) and by ``gitopsbot.testing.FakeReleaseWatch``.
"""

from __future__ import annotations

from typing import Protocol

from gitopsbot.core.fleet.model import ClusterSpec


class ReleaseWatch(Protocol):
    def follow(self, spec: ClusterSpec) -> None:
        """Watch the release of ``spec`` (its release Secrets, metadata only) from now on;
        nothing when it is already watched. Never raises: a watch that cannot start is
        simply not healthy, and the idle check keeps its periodic look."""
        ...

    def healthy(self, cluster: str) -> bool:
        """Whether the cluster's watch is connected and heard from the server recently: a
        change to the release would be reported (``take_change``)."""
        ...

    def take_change(self, cluster: str) -> bool:
        """Whether the release changed (or may have: a re-list after 410 Gone or a broken
        watch) since the last call; cleared by the call."""
        ...
