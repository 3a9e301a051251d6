"""Which clusters a push to the watched branch concerns (issue 29: a webhook wakes the
clusters its push touched, not the whole fleet). Pure.

A path under ``clusters/<name>/`` concerns that cluster alone. Anything else (``gitopsbot.yaml``:
waves, ``clearedVersions``, the forge; ``policies/``; a file the loader reads for every
cluster) may concern every cluster, so the push wakes them all, as before. The clusters a push
does not wake are still reached by their poll: a wake-up is a shortcut, never the only way.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

CLUSTERS = "clusters/"


def touched(paths: Iterable[str], clusters: Collection[str]) -> frozenset[str] | None:
    """The clusters of ``clusters`` the changed ``paths`` concern; None when a path may
    concern them all (or names a cluster this replica does not know)."""
    out: set[str] = set()
    for path in paths:
        if not path.startswith(CLUSTERS):
            return None
        name = path[len(CLUSTERS) :].split("/", 1)[0]
        if name not in clusters:
            return None  # a new cluster, or one another replica serves: everyone looks
        out.add(name)
    return frozenset(out)
