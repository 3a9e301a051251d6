"""Which replica works on which cluster: the fleet spread over the live replicas (pure).

Every replica keeps a membership Lease and one Lease per cluster it works on; each retry
period it reads the live members and calls ``plan``. All replicas read the same members from
the API server, so they compute the same ``assign``ment and converge on it without talking to
each other: each takes the free Leases of the clusters assigned to it and releases, at a step
boundary, those it holds that are now assigned to another (a replica joined).

``assign`` is rendezvous (highest random weight) hashing with a bound: clusters, in name
order, go to the member ranking highest for them that has fewer than
``ceil(clusters / members)`` already. Without the bound HRW spreads unevenly on a dozen
clusters; with it nobody holds more than its share. A member joining or leaving moves few
clusters: those that rank it highest (and, through the bound, a few more).

The Lease rules themselves (who may take a Lease when) stay ``core.lease``'s; a plan names
clusters, the keeper decides per Lease.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass

CLUSTER_PREFIX = "gitopsbot-cluster-"
REPLICA_PREFIX = "gitopsbot-replica-"
PROPOSER_LEASE = "gitopsbot-proposer"
ROLE_LABEL = "gitopsbot.io/role"
CLUSTER_LABEL = "gitopsbot.io/cluster"  # the fleet's name, unsanitised, as a label value
ROLE_REPLICA = "replica"
ROLE_CLUSTER = "cluster"

_DNS_LABEL_MAX = 63
_NOT_DNS = re.compile(r"[^a-z0-9-]+")


def lease_name(prefix: str, name: str) -> str:
    """A Lease name for ``name`` that is a DNS label (RFC 1123: lowercase alphanumerics and
    '-', at most 63, starting and ending alphanumeric). When sanitising changed the name or it
    had to be cut, 8 hex digits of its SHA-256 are appended, so two names never share one."""
    clean = _NOT_DNS.sub("-", name.lower()).strip("-")
    full = f"{prefix}{clean}"
    if clean == name and len(full) <= _DNS_LABEL_MAX:
        return full
    suffix = hashlib.sha256(name.encode()).hexdigest()[:8]
    head = full[: _DNS_LABEL_MAX - len(suffix) - 1].rstrip("-")
    return f"{head}-{suffix}"


def cluster_lease(cluster: str) -> str:
    return lease_name(CLUSTER_PREFIX, cluster)


def replica_lease(identity: str) -> str:
    return lease_name(REPLICA_PREFIX, identity)


def score(cluster: str, member: str) -> int:
    """The rendezvous weight of ``member`` for ``cluster`` (stable across processes)."""
    digest = hashlib.sha256(f"{cluster}\0{member}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def share(clusters: int, members: int) -> int:
    """The most clusters one member takes: ceil(clusters / members)."""
    return math.ceil(clusters / members) if members else 0


def assign(clusters: Iterable[str], members: Iterable[str]) -> dict[str, str]:
    """cluster → member: every cluster to exactly one member, nobody above ``share``. The
    same sets give the same answer whatever their order. Empty when there are no members."""
    names = sorted(set(clusters))
    ranked_members = sorted(set(members))
    if not ranked_members:
        return {}
    cap = share(len(names), len(ranked_members))
    load = dict.fromkeys(ranked_members, 0)
    out: dict[str, str] = {}
    for cluster in names:
        ranked = sorted(ranked_members, key=lambda m: (-score(cluster, m), m))
        owner = next(m for m in ranked if load[m] < cap)
        out[cluster] = owner
        load[owner] += 1
    return out


@dataclass(frozen=True, slots=True)
class Plan:
    """What one replica does this period. ``take``: try to acquire (each Lease is taken only
    if free or expired, by the keeper); ``release``: give up once no pass is in flight;
    ``mine``: the clusters assigned to this replica."""

    take: tuple[str, ...]
    release: tuple[str, ...]
    mine: frozenset[str]


def plan(
    clusters: Collection[str],
    members: Collection[str],
    me: str,
    held: Collection[str],
    free: Collection[str],
) -> Plan:
    """``members`` the live replicas (``me`` counts as live whatever the list says), ``held``
    the clusters whose Lease this replica holds, ``free`` those whose Lease nobody may count on
    (absent, released or expired, as this replica has observed it)."""
    everyone = set(members) | {me}
    wanted = set(clusters)
    mine = frozenset(c for c, m in assign(wanted, everyone).items() if m == me)
    held_set = set(held)
    # Held but no longer ours (a replica joined, or the cluster left the fleet): give it up.
    release = tuple(sorted(held_set - mine))
    take = tuple(sorted((mine - held_set) & set(free)))
    return Plan(take=take, release=release, mine=mine)
