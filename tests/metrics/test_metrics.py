"""Metrics from what the bot tells its listeners (adapters/metrics.py, docs/metrics.md).

Aspects: operations counted by cluster, kind and result; step durations from a step's start
and end happenings (skipped steps and unknown starts not observed); pool progress as a 0..1
ratio, reset when a new operation starts, halts counted; passes (duration, failures, last
success timestamp); windows and queued merges set by ``bot.gauges``, pools gone removed;
forge requests by endpoint class and status from ``ForgeHttp``'s hook with GitHub's and
GitLab's rate-limit headers; Lease ownership read at scrape time; each BotMetrics has its own
registry; every exposed name follows the Prometheus conventions.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import httpx
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gitopsbot.adapters.forge._http import ForgeCall, ForgeHttp, endpoint_class
from gitopsbot.adapters.metrics import BotMetrics
from gitopsbot.bot.gauges import PassGauges
from gitopsbot.bot.lease_keeper import LeaseTiming
from gitopsbot.bot.shard_keeper import ShardKeeper
from gitopsbot.core.fleet.model import MaintenanceWindow
from gitopsbot.core.notices.happenings import Happening, HappeningKind
from gitopsbot.core.records.journal import OperationKind
from gitopsbot.core.rollouts import windows
from gitopsbot.testing import FakeLeases

T0 = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)


@dataclass
class Clock:
    t: datetime = T0
    slept: list[float] = field(default_factory=list)

    def now(self) -> datetime:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)

    def monotonic(self) -> float:
        return self.t.timestamp()


def value(m: BotMetrics, name: str, **labels: str) -> float | None:
    return m.registry.get_sample_value(name, labels)


def happening(kind: HappeningKind, at: datetime | None = T0, **kw: object) -> Happening:
    base: dict[str, object] = {
        "kind": kind,
        "cluster": "lab",
        "op_id": "op-1",
        "op_kind": OperationKind.UPGRADE,
        "desired_sha": "a" * 40,
        "at": at,
    }
    base.update(kw)
    return Happening(**base)  # type: ignore[arg-type]


@pytest.fixture
def metrics() -> BotMetrics:
    return BotMetrics(Clock())


def test_operations_by_cluster_kind_and_result(metrics: BotMetrics) -> None:
    metrics.happened(happening(HappeningKind.STARTED))
    metrics.happened(happening(HappeningKind.SUCCEEDED))
    metrics.happened(happening(HappeningKind.FAILED, op_kind=OperationKind.ROLLBACK))
    metrics.happened(happening(HappeningKind.BLOCKED))
    metrics.happened(happening(HappeningKind.SUCCEEDED, op_id="op-2"))
    name = "gitopsbot_operations_total"
    assert value(metrics, name, cluster="lab", kind="upgrade", result="succeeded") == 2
    assert value(metrics, name, cluster="lab", kind="rollback", result="failed") == 1
    assert value(metrics, name, cluster="lab", kind="upgrade", result="blocked") == 1
    assert value(metrics, name, cluster="lab", kind="upgrade", result="failed") is None


def test_step_durations_from_start_and_end(metrics: BotMetrics) -> None:
    step = {"step": "helm-upgrade", "step_kind": "helm-upgrade"}
    metrics.happened(happening(HappeningKind.STEP_STARTED, **step))
    metrics.happened(happening(HappeningKind.STEP_SUCCEEDED, T0 + timedelta(seconds=42), **step))
    # Skipped, and ended without a start seen (a restart): not observed.
    backup = {"step": "backup", "step_kind": "backup"}
    metrics.happened(happening(HappeningKind.STEP_STARTED, **backup))
    metrics.happened(happening(HappeningKind.STEP_SKIPPED, **backup))
    metrics.happened(happening(HappeningKind.STEP_FAILED, step="crds", step_kind="crds"))
    name = "gitopsbot_step_duration_seconds"
    labels = {"step_kind": "helm-upgrade"}  # fleet-wide since #29 (scrape size)
    assert value(metrics, f"{name}_count", **labels) == 1
    assert value(metrics, f"{name}_sum", **labels) == 42
    assert value(metrics, f"{name}_bucket", **labels, le="30.0") == 0
    assert value(metrics, f"{name}_bucket", **labels, le="60.0") == 1
    assert value(metrics, f"{name}_count", step_kind="backup") is None
    assert value(metrics, f"{name}_count", step_kind="crds") is None


def test_pool_progress_ratio_reset_by_a_new_operation_and_halts(metrics: BotMetrics) -> None:
    pool = {"pool": "a-100", "component": "hypervisor", "step": "pool-a-100"}
    name = "gitopsbot_pool_rollout_progress_ratio"
    labels = {"cluster": "lab", "pool": "a-100", "component": "hypervisor"}
    metrics.happened(happening(HappeningKind.POOL_PROGRESS, progress=0, **pool))
    assert value(metrics, name, **labels) == 0
    metrics.happened(happening(HappeningKind.POOL_PROGRESS, progress=40, **pool))
    assert value(metrics, name, **labels) == 0.4
    metrics.happened(happening(HappeningKind.POOL_HALTED, progress=40, **pool))
    assert value(metrics, "gitopsbot_pool_halts_total", **labels) == 1
    metrics.happened(happening(HappeningKind.STARTED, op_id="op-2"))
    assert value(metrics, name, **labels) is None  # the new operation's pools start afresh
    metrics.happened(happening(HappeningKind.POOL_PROGRESS, progress=100, op_id="op-2", **pool))
    assert value(metrics, name, **labels) == 1


def test_passes_duration_failures_and_last_success() -> None:
    clock = Clock()
    metrics = BotMetrics(clock)
    metrics.pass_finished("lab", action="idle", detail="", error="", seconds=0.2)
    assert value(metrics, "gitopsbot_reconcile_last_success_timestamp_seconds", cluster="lab") == (
        T0.timestamp()
    )
    clock.t += timedelta(minutes=5)
    metrics.pass_finished("lab", action="", detail="", error="git fetch failed", seconds=3)
    assert value(metrics, "gitopsbot_reconcile_failures_total", cluster="lab") == 1
    # A failed pass leaves the last success where it was: alerts read its age.
    assert value(metrics, "gitopsbot_reconcile_last_success_timestamp_seconds", cluster="lab") == (
        T0.timestamp()
    )
    assert value(metrics, "gitopsbot_reconcile_duration_seconds_count", cluster="lab") == 2
    assert value(metrics, "gitopsbot_reconcile_duration_seconds_sum", cluster="lab") == 3.2


def test_windows_and_queued_merges(metrics: BotMetrics) -> None:
    metrics.pool_windows("lab", {"a": True, "b": False})
    metrics.queued_merges("lab", 1)
    assert value(metrics, "gitopsbot_pool_window_open", cluster="lab", pool="a") == 1
    assert value(metrics, "gitopsbot_pool_window_open", cluster="lab", pool="b") == 0
    assert value(metrics, "gitopsbot_queued_merges", cluster="lab") == 1
    metrics.pool_windows("lab", {"a": False})  # pool b left the rollout
    metrics.pool_windows("other", {"b": True})
    assert value(metrics, "gitopsbot_pool_window_open", cluster="lab", pool="a") == 0
    assert value(metrics, "gitopsbot_pool_window_open", cluster="lab", pool="b") is None
    assert value(metrics, "gitopsbot_pool_window_open", cluster="other", pool="b") == 1


def test_windows_open_by_pool_is_pure() -> None:
    nightly = windows.Window.of(
        MaintenanceWindow(cron="0 2 * * *", duration_seconds=3600, timezone="UTC"), ZoneInfo("UTC")
    )
    found = windows.open_by_pool({"a": nightly, "b": None}, datetime(2026, 3, 2, 2, 30, tzinfo=UTC))
    assert found == {"a": True, "b": True}
    assert windows.open_by_pool({"a": nightly}, T0) == {"a": False}


def test_leases_read_at_scrape_time(metrics: BotMetrics) -> None:
    held = {"lab"}
    metrics.watch_leases(lambda: ["lab", "prod"], lambda c: c in held, lambda: 3)
    assert value(metrics, "gitopsbot_cluster_lease_held", cluster="lab") == 1
    assert value(metrics, "gitopsbot_cluster_lease_held", cluster="prod") == 0
    assert value(metrics, "gitopsbot_replicas_seen") == 3
    held.add("prod")
    assert value(metrics, "gitopsbot_cluster_lease_held", cluster="prod") == 1


def test_each_instance_has_its_own_registry() -> None:
    a, b = BotMetrics(Clock()), BotMetrics(Clock())
    a.queued_merges("lab", 1)
    assert value(b, "gitopsbot_queued_merges", cluster="lab") is None


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("https://api.github.com/repos/acme/fleet/pulls/12", "pulls"),
        ("https://api.github.com/repos/acme/fleet/issues/12/comments", "comments"),
        ("https://api.github.com/repos/acme/fleet/issues/comments/99?x=1", "comments"),
        ("https://api.github.com/repos/acme/fleet/statuses/" + "f" * 40, "statuses"),
        ("https://gitlab.example.com/api/v4/projects/acme%2Ffleet/merge_requests/3/notes", "notes"),
        ("https://gitea.example.com/api/v1/repos/acme/fleet", "other"),
    ],
)
def test_endpoint_class_has_no_ids(path: str, expected: str) -> None:
    assert endpoint_class(path) == expected


def _forge(handler: httpx.MockTransport, provider: str = "github") -> ForgeHttp:
    return ForgeHttp(
        provider=provider,
        base_url="https://forge.example.com/api",
        token="tok-canary",
        auth_header=("Authorization", "Bearer tok-canary"),
        clock=Clock(),
        transport=handler,
        max_retries=0,
    )


def test_forge_requests_and_rate_limit_through_the_http_hook(metrics: BotMetrics) -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/pulls"):
            headers = {"X-RateLimit-Remaining": "4998", "X-RateLimit-Reset": "1772450000"}
            return httpx.Response(200, json=[], headers=headers)
        return httpx.Response(404, json={"message": "Not Found"}, headers={})

    http = _forge(httpx.MockTransport(answer))
    http.observe = metrics.forge_call
    http.get("repos/acme/fleet/pulls")
    with pytest.raises(Exception, match="404"):
        http.get("repos/acme/fleet/pulls/7/reviews")
    name = "gitopsbot_forge_requests_total"
    ok = {"forge": "github", "method": "GET", "endpoint": "pulls", "code": "200"}
    assert value(metrics, name, **ok) == 1
    missing = {"forge": "github", "method": "GET", "endpoint": "reviews", "code": "404"}
    assert value(metrics, name, **missing) == 1
    assert value(metrics, "gitopsbot_forge_rate_limit_remaining", forge="github") == 4998
    reset = "gitopsbot_forge_rate_limit_reset_timestamp_seconds"
    assert value(metrics, reset, forge="github") == 1772450000


def test_gitlab_rate_headers_and_no_answer() -> None:
    calls: list[ForgeCall] = []

    def answer(request: httpx.Request) -> httpx.Response:
        if "notes" in request.url.path:
            raise httpx.ConnectError("refused")
        return httpx.Response(200, json={}, headers={"RateLimit-Remaining": "1999"})

    http = _forge(httpx.MockTransport(answer), "gitlab")
    http.observe = calls.append
    http.get("projects/1/merge_requests/3")
    with pytest.raises(Exception, match="ConnectError"):
        http.get("projects/1/merge_requests/3/notes")
    assert [(c.endpoint, c.status, c.rate_remaining) for c in calls] == [
        ("merge_requests", 200, 1999),
        ("notes", 0, None),
    ]


def test_an_observer_that_raises_never_fails_the_request() -> None:
    http = _forge(httpx.MockTransport(lambda r: httpx.Response(200, json=[])))

    def broken(call: ForgeCall) -> None:
        raise RuntimeError("boom")

    http.observe = broken
    assert http.get("repos/a/b/labels") == []


def _families(metrics: BotMetrics) -> Iterator[tuple[str, str]]:
    text = generate_latest(metrics.registry).decode()
    for family in text_string_to_metric_families(text):
        yield family.name, family.type


def test_names_follow_the_prometheus_conventions(metrics: BotMetrics) -> None:
    metrics.watch_leases(lambda: ["lab"], lambda c: True, lambda: 1)
    found = dict(_families(metrics))
    assert found, "nothing exposed"
    for name, kind in found.items():
        assert name.startswith("gitopsbot_"), name
        if kind == "counter":  # the parser drops the _total suffix of the family
            assert not name.endswith("_total"), name
        if kind == "histogram":
            assert name.endswith("_seconds"), name
    counters = {n for n, k in found.items() if k == "counter"}
    assert counters == {
        "gitopsbot_operations",
        "gitopsbot_pool_halts",
        "gitopsbot_reconcile_failures",
        "gitopsbot_forge_requests",
    }


def test_release_watches_are_counted_at_scrape_time(metrics: BotMetrics) -> None:
    counts = [(3, 1, 2)]
    metrics.watch_release_watches(lambda: counts[0])
    found = {(s.name, tuple(s.labels.items())): s.value for f in text_string_to_metric_families(
        generate_latest(metrics.registry).decode()) for s in f.samples}  # fmt: skip
    assert found[("gitopsbot_release_watches", (("state", "healthy"),))] == 3
    assert found[("gitopsbot_release_watches", (("state", "broken"),))] == 1
    assert found[("gitopsbot_release_watch_breaks_total", ())] == 2
    counts[0] = (4, 0, 2)  # read afresh at each scrape
    assert (
        'gitopsbot_release_watches{state="healthy"} 4.0'
        in generate_latest(metrics.registry).decode()
    )
    assert dict(_families(metrics))["gitopsbot_release_watch_breaks"] == "counter"


def test_lease_gauges_follow_two_replicas_sharing_the_fleet() -> None:
    """As ``app.build_bot`` wires them: each replica's metrics read its ShardKeeper."""
    leases, clock = FakeLeases(), Clock()
    clusters = [f"gpu-{i}" for i in range(4)]
    timing = LeaseTiming(duration_seconds=15, renew_deadline_seconds=10, retry_period_seconds=2)
    keepers = [
        ShardKeeper(
            leases, namespace="ns", identity=n, clock=clock, clusters=clusters, timing=timing
        )
        for n in ("a", "b")
    ]
    scraped = []
    for keeper in keepers:
        m = BotMetrics(clock)
        m.watch_leases(lambda: clusters, keeper.held, lambda k=keeper: len(k.members))
        scraped.append(m)
    for _ in range(10):
        for keeper in keepers:
            keeper.step()
        clock.t += timedelta(seconds=2)
    for c in clusters:  # every cluster held by exactly one replica
        held = [value(m, "gitopsbot_cluster_lease_held", cluster=c) for m in scraped]
        assert sorted(held) == [0, 1], (c, held)
    assert [value(m, "gitopsbot_replicas_seen") for m in scraped] == [2, 2]


@dataclass
class _Journal:
    desired_sha: str
    active: bool = True
    steps: tuple[()] = ()  # no pool phase: no per-node gauge (tests/node_states)


@dataclass
class _Store:
    current_op: _Journal | None = None
    queued_op: _Journal | None = None

    def current(self, cluster: str) -> _Journal | None:
        return self.current_op

    def queued(self, cluster: str) -> _Journal | None:
        return self.queued_op


@dataclass
class _Rec:
    """What ``PassGauges`` reads of the reconciler."""

    store: _Store
    clock: Clock
    head_sha: str = "head-sha"
    asked: list[str] = field(default_factory=list)

    def head(self, branch: str) -> str:
        assert branch == "main"
        return self.head_sha

    @property
    def repo(self) -> _Rec:
        return self

    @property
    def settings(self) -> _Rec:
        return self

    watched_branch = "main"

    def spec_at(self, sha: str, cluster: str) -> str:
        self.asked.append(sha)
        return sha

    def pool_windows(self, spec: str) -> dict[str, windows.Window | None]:
        nightly = windows.Window.of(
            MaintenanceWindow(cron="0 2 * * *", duration_seconds=3600, timezone="UTC"),
            ZoneInfo("UTC"),
        )
        return {"a": nightly, "b": None}


def test_pass_gauges_read_the_windows_of_the_commit_being_applied(metrics: BotMetrics) -> None:
    rec = _Rec(_Store(), Clock())
    gauges = PassGauges(rec, metrics)  # type: ignore[arg-type]
    gauges.pass_finished("lab", action="idle", detail="", error="", seconds=0.1)
    assert rec.asked == ["head-sha"]  # idle: the watched branch's head
    assert value(metrics, "gitopsbot_queued_merges", cluster="lab") == 0
    assert value(metrics, "gitopsbot_pool_window_open", cluster="lab", pool="a") == 0  # 10:00
    assert value(metrics, "gitopsbot_pool_window_open", cluster="lab", pool="b") == 1
    rec.store.queued_op = _Journal("queued-sha")
    rec.clock.t = datetime(2026, 3, 3, 2, 30, tzinfo=UTC)  # inside the nightly window
    gauges.pass_finished("lab", action="queued", detail="", error="", seconds=0.1)
    assert rec.asked[-1] == "queued-sha"
    assert value(metrics, "gitopsbot_queued_merges", cluster="lab") == 1
    assert value(metrics, "gitopsbot_pool_window_open", cluster="lab", pool="a") == 1
    rec.store.current_op = _Journal("running-sha")
    gauges.pass_finished("lab", action="step", detail="", error="", seconds=0.1)
    assert rec.asked[-1] == "running-sha"


def test_drift_items_and_last_check(metrics: BotMetrics) -> None:
    metrics.drift("staging", 3)
    metrics.drift("production", None)
    get = metrics.registry.get_sample_value
    assert get("gitopsbot_drift_items", {"cluster": "staging"}) == 3
    assert get("gitopsbot_drift_items", {"cluster": "production"}) == -1
    assert get("gitopsbot_drift_last_check_timestamp_seconds", {"cluster": "staging"})
