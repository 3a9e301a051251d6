"""Which replica works on which cluster: the fleet spread over the live replicas (pure).

The fleet is cut into a fixed number of shards (``shard_of``: a stable hash of the cluster's
name, modulo the count), one Lease per shard. Every replica keeps a membership Lease and the
shard Leases assigned to it; each retry period it reads the live members and calls ``plan``
with the shards. All replicas read the same members from the API server, so they compute the
same ``assign``ment and converge on it without talking to each other: each takes the free
Leases of the shards assigned to it and releases, at a step boundary, those it holds that are
now assigned to another (a replica joined). A cluster is worked on by the holder of its shard.
Lease writes no longer grow with the fleet: (replicas + shards) per retry period.

``assign`` is rendezvous (highest random weight) hashing with a bound: items (shards), in name
order, go to the member ranking highest for them that has fewer than
``ceil(items / members)`` already. Without the bound HRW spreads unevenly on a dozen
items; with it nobody holds more than its share. A member joining or leaving moves few
items: those that rank it highest (and, through the bound, a few more).

The shard Lease's name carries the shard count (``gitopsbot-shard-12-3``), so replicas run
with different counts never mistake one Lease for another; ``covers`` says which clusters a
shard Lease of any count guards, ``cluster_lease`` names the per-cluster Lease of versions
before shards (still honoured, docs/leases.md#migration).

The Lease rules themselves (who may take a Lease when) stay ``core.replicas.lease``'s; a plan names
items, the keeper decides per Lease.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

CLUSTER_PREFIX = "gitopsbot-cluster-"  # one Lease per cluster: before shards, and while migrating
SHARD_PREFIX = "gitopsbot-shard-"
REPLICA_PREFIX = "gitopsbot-replica-"
PROPOSER_LEASE = "gitopsbot-proposer"
ROLE_LABEL = "gitopsbot.io/role"
CLUSTER_LABEL = "gitopsbot.io/cluster"  # the fleet's name, unsanitised, as a label value
ROLE_REPLICA = "replica"
ROLE_CLUSTER = "cluster"
ROLE_SHARD = "shard"
SHARDS_LABEL = "gitopsbot.io/shards"  # the count, on shard and membership Leases
SHARD_LABEL = "gitopsbot.io/shard"  # the shard's index, on a shard Lease

# 12 divides evenly over 1, 2, 3, 4 and 6 replicas; with 3 replicas and a 4 s retry period
# that is (3 + 12) / 4 = 3.75 Lease writes/s in all (docs/leases.md#how-many-writes).
DEFAULT_SHARDS = 12
MAX_SHARDS = 64  # past this a shard guards too few clusters to be worth its writes

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


def check_shards(count: int) -> int:
    """``count`` when it is a sane shard count (1 to ``MAX_SHARDS``); ValueError otherwise."""
    if not 1 <= count <= MAX_SHARDS:
        raise ValueError(f"the shard count must be between 1 and {MAX_SHARDS}, not {count}")
    return count


def shard_of(cluster: str, count: int) -> int:
    """The shard of ``cluster`` among ``count``: the same in every process and version."""
    digest = hashlib.sha256(cluster.encode()).digest()
    return int.from_bytes(digest[:8], "big") % count


def shard_lease(count: int, index: int) -> str:
    """The Lease of shard ``index`` of ``count`` (``gitopsbot-shard-12-3``)."""
    return f"{SHARD_PREFIX}{count}-{index}"


def shard_labels(count: int, index: int) -> dict[str, str]:
    return {ROLE_LABEL: ROLE_SHARD, SHARDS_LABEL: str(count), SHARD_LABEL: str(index)}


def shard_key(labels: Mapping[str, str]) -> tuple[int, int] | None:
    """(count, index) from a shard Lease's labels; None when they do not say a valid one."""
    try:
        count, index = int(labels.get(SHARDS_LABEL, "")), int(labels.get(SHARD_LABEL, ""))
    except ValueError:
        return None
    return (count, index) if 0 <= index < count else None


def covers(key: tuple[int, int], cluster: str) -> bool:
    """Whether the shard Lease ``key`` (count, index), of any count, guards ``cluster``."""
    count, index = key
    return shard_of(cluster, count) == index


def score(cluster: str, member: str) -> int:
    """The rendezvous weight of ``member`` for ``cluster`` (stable across processes)."""
    digest = hashlib.sha256(f"{cluster}\0{member}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def share(clusters: int, members: int) -> int:
    """The most items (shards) one member takes: ceil(items / members)."""
    return math.ceil(clusters / members) if members else 0


def assign(clusters: Iterable[str], members: Iterable[str]) -> dict[str, str]:
    """item (shard) → member: every item to exactly one member, nobody above ``share``. The
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
    ``mine``: the items (shards) assigned to this replica."""

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
    """``clusters`` the items to share (the shard Leases' names), ``members`` the live
    replicas (``me`` counts as live whatever the list says), ``held`` the items whose Lease
    this replica holds, ``free`` those whose Lease nobody may count on (absent, released or
    expired, as this replica has observed it)."""
    everyone = set(members) | {me}
    wanted = set(clusters)
    mine = frozenset(c for c, m in assign(wanted, everyone).items() if m == me)
    held_set = set(held)
    # Held but no longer ours (a replica joined, or the cluster left the fleet): give it up.
    release = tuple(sorted(held_set - mine))
    take = tuple(sorted((mine - held_set) & set(free)))
    return Plan(take=take, release=release, mine=mine)
