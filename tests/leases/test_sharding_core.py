"""core.sharding: the assignment of clusters to replicas, and each replica's plan (pure)."""

from __future__ import annotations

import math
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from gitopsbot.core.replicas.sharding import (
    assign,
    cluster_lease,
    lease_name,
    plan,
    replica_lease,
    share,
)

DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")

names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=12)
cluster_sets = st.sets(names, min_size=0, max_size=30)
member_sets = st.sets(names, min_size=1, max_size=6)


@settings(max_examples=200, deadline=None)
@given(cluster_sets, member_sets)
def test_every_cluster_has_exactly_one_member_and_nobody_more_than_its_share(
    clusters: set[str], members: set[str]
) -> None:
    out = assign(clusters, members)
    assert set(out) == clusters
    assert set(out.values()) <= members
    cap = share(len(clusters), len(members))
    assert cap == math.ceil(len(clusters) / len(members))
    for member in members:
        assert sum(1 for m in out.values() if m == member) <= cap


@settings(max_examples=100, deadline=None)
@given(cluster_sets, member_sets, st.randoms())
def test_the_assignment_depends_on_the_sets_not_their_order(
    clusters: set[str], members: set[str], rnd: object
) -> None:
    a, b = sorted(clusters), sorted(members)
    rnd.shuffle(a)  # type: ignore[attr-defined]
    rnd.shuffle(b)  # type: ignore[attr-defined]
    assert assign(a, b) == assign(sorted(clusters), sorted(members))


@settings(max_examples=100, deadline=None)
@given(st.sets(names, min_size=12, max_size=30), member_sets, names)
def test_a_member_joining_moves_a_bounded_part_of_the_fleet(
    clusters: set[str], members: set[str], newcomer: str
) -> None:
    if newcomer in members:
        return
    before = assign(clusters, members)
    after = assign(clusters, members | {newcomer})
    moved = [c for c in clusters if before[c] != after[c]]
    to_newcomer = [c for c in moved if after[c] == newcomer]
    # The newcomer gets its share at most; everything else that moves is the bound's ripple,
    # never the whole fleet reshuffled.
    assert len(to_newcomer) <= share(len(clusters), len(members) + 1)
    assert len(moved) < len(clusters) or len(members) == 0


@settings(max_examples=200, deadline=None)
@given(
    cluster_sets,
    member_sets,
    st.data(),
)
def test_a_plan_takes_only_free_clusters_of_its_own_and_releases_the_others(
    clusters: set[str], members: set[str], data: st.DataObject
) -> None:
    me = data.draw(st.sampled_from(sorted(members)))
    held = data.draw(st.sets(st.sampled_from(sorted(clusters)) if clusters else st.nothing()))
    free = data.draw(st.sets(st.sampled_from(sorted(clusters)) if clusters else st.nothing()))
    free -= held
    p = plan(clusters, members, me, held, free)
    assert set(p.take) <= free & p.mine
    assert not set(p.take) & held
    assert set(p.release) == held - p.mine
    # After the plan, no more than the share.
    after = (held - set(p.release)) | set(p.take)
    assert len(after) <= share(len(clusters), len(members))
    assert after <= p.mine


@settings(max_examples=100, deadline=None)
@given(cluster_sets, member_sets)
def test_replicas_that_see_the_same_members_never_want_the_same_cluster(
    clusters: set[str], members: set[str]
) -> None:
    wants = [plan(clusters, members, m, (), clusters).mine for m in members]
    assert sum(len(w) for w in wants) == len(clusters)
    assert set().union(*wants) == clusters


def test_a_replica_counts_itself_live_even_when_its_own_membership_is_not_listed() -> None:
    p = plan(["a", "b"], [], "me", (), ["a", "b"])
    assert p.take == ("a", "b")


def test_twelve_clusters_over_three_replicas_are_four_each() -> None:
    clusters = [f"gpu-{i:02d}" for i in range(12)]
    out = assign(clusters, ["r1", "r2", "r3"])
    assert sorted(list(out.values()).count(m) for m in ("r1", "r2", "r3")) == [4, 4, 4]
    out2 = assign(clusters, ["r1", "r3"])
    assert sorted(list(out2.values()).count(m) for m in ("r1", "r3")) == [6, 6]


@given(st.text(min_size=1, max_size=120))
def test_lease_names_are_dns_labels_and_distinct_when_sanitised(name: str) -> None:
    lease = cluster_lease(name)
    assert len(lease) <= 63 and DNS_LABEL.match(lease), lease
    if lease == f"gitopsbot-cluster-{name}":
        return
    assert re.search(r"-[0-9a-f]{8}\Z", lease)


def test_lease_names_examples() -> None:
    assert cluster_lease("staging-eu") == "gitopsbot-cluster-staging-eu"
    assert cluster_lease("Staging_EU") != cluster_lease("staging-eu")
    assert cluster_lease("Staging_EU").startswith("gitopsbot-cluster-staging-eu-")
    assert len(cluster_lease("x" * 80)) == 63
    assert cluster_lease("x" * 80) != cluster_lease("x" * 81)
    assert replica_lease("gitopsbot-7d9f-abc12").startswith("gitopsbot-replica-gitopsbot-7d9f")
    assert lease_name("p-", "a.b") != lease_name("p-", "a-b")


def test_a_cluster_s_shard_is_a_stable_hash_of_its_name() -> None:
    from collections import Counter

    from gitopsbot.core.replicas.sharding import shard_of

    # Fixed values: every process and every version must agree, or two replicas could hold
    # two shards guarding one cluster.
    assert [shard_of(f"gpu-{i:02d}", 12) for i in range(6)] == [5, 10, 4, 11, 3, 6]
    assert (shard_of("staging-eu", 12), shard_of("staging-eu", 16)) == (4, 12)
    spread = Counter(shard_of(f"cluster-{i}", 12) for i in range(1200))
    assert set(spread) == set(range(12))
    assert max(spread.values()) < 2 * min(spread.values())  # roughly even: ~100 each


@given(names, st.integers(min_value=1, max_value=64))
def test_a_shard_lease_of_any_count_covers_exactly_the_clusters_hashed_to_it(
    cluster: str, count: int
) -> None:
    from gitopsbot.core.replicas.sharding import (
        covers,
        shard_key,
        shard_labels,
        shard_lease,
        shard_of,
    )

    index = shard_of(cluster, count)
    assert 0 <= index < count
    assert covers((count, index), cluster)
    assert not any(covers((count, i), cluster) for i in range(count) if i != index)
    assert shard_key(shard_labels(count, index)) == (count, index)
    assert DNS_LABEL.match(shard_lease(count, index))


def test_shard_counts_are_bounded_and_labels_that_say_none_are_ignored() -> None:
    import pytest

    from gitopsbot.core.replicas.sharding import MAX_SHARDS, check_shards, shard_key

    assert check_shards(1) == 1 and check_shards(MAX_SHARDS) == MAX_SHARDS
    for bad in (0, -1, MAX_SHARDS + 1):
        with pytest.raises(ValueError, match="shard count"):
            check_shards(bad)
    assert shard_key({}) is None
    assert shard_key({"gitopsbot.io/shards": "12", "gitopsbot.io/shard": "12"}) is None
    assert shard_key({"gitopsbot.io/shards": "x", "gitopsbot.io/shard": "1"}) is None
