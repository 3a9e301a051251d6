"""FakeReleaseWatch: the idle check's release watch, set by the test."""

from __future__ import annotations

from gitopsbot.core.fleet.model import ClusterSpec
from gitopsbot.ports.release_watch import ReleaseWatch


class FakeReleaseWatch(ReleaseWatch):
    """The release watch for tests: ``healthy`` and ``change`` are set by the test;
    ``followed`` lists the clusters ``follow`` was asked for."""

    def __init__(self, *, healthy: bool = True) -> None:
        self.is_healthy = healthy
        self.changed: set[str] = set()
        self.followed: list[str] = []

    def follow(self, spec: ClusterSpec) -> None:
        if spec.name not in self.followed:
            self.followed.append(spec.name)

    def healthy(self, cluster: str) -> bool:
        return self.is_healthy and cluster in self.followed

    def change(self, cluster: str) -> None:
        """As the watch does on an event: the next pass looks at the release."""
        self.changed.add(cluster)

    def take_change(self, cluster: str) -> bool:
        found = cluster in self.changed
        self.changed.discard(cluster)
        return found
