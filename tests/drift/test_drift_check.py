"""bot.drift: the check only reads (its ports refuse writes), one cluster's failure does not
stop the others, and the per-cluster summary lines ``status`` can show."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gitopsbot.bot import drift as drift_check
from gitopsbot.bot.steps.executor import Executor
from gitopsbot.core.drift.report import DriftItem, DriftReport
from gitopsbot.core.fleet.model import ClusterSpec, Environment, ReleaseSpec, RolloutPolicy
from gitopsbot.errors import KubeServerError


class Stub:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        def call(*_args: Any, **_kwargs: Any) -> Any:
            self.calls.append(name)
            return None

        return call


def spec(name: str) -> ClusterSpec:
    release = ReleaseSpec("https://charts.example", "tensor-fusion", "1.8.7", "tf", "tf-sys")
    return ClusterSpec(name, Environment("staging"), release, {}, RolloutPolicy())


def test_the_ports_refuse_writes() -> None:
    cluster, helm = Stub(), Stub()
    executor = drift_check.read_only(Executor(cluster=cluster, helm=helm, secrets=Stub()))
    executor.cluster.get("v1", "Pod", "ns", "p")
    executor.helm.history("tf", "tf-sys")
    for write in ("apply", "patch_merge", "delete", "apply_crds", "mark_helm_release_failed"):
        with pytest.raises(AttributeError, match="only reads"):
            getattr(executor.cluster, write)
    for write in ("upgrade", "rollback", "pull"):
        with pytest.raises(AttributeError, match="only reads"):
            getattr(executor.helm, write)
    assert cluster.calls == ["get"] and helm.calls == ["history"]


def test_a_cluster_that_cannot_be_reached_does_not_stop_the_others() -> None:
    def executor_for(s: ClusterSpec) -> Executor:
        if s.name == "down":
            raise KubeServerError("connection refused\nmore")
        return Executor(cluster=Stub(), helm=Stub(), secrets=Stub())

    found = drift_check.check_clusters(
        [spec("down"), spec("up")], lambda _n: None, lambda _s: None, executor_for
    )
    assert found["down"] == "not checked: connection refused"
    up = found["up"]
    assert isinstance(up, DriftReport)
    assert [(i.what, i.observed) for i in up.items] == [("chart", "not installed")]


def test_summary_lines_for_status() -> None:
    item = DriftItem("values", "controller.replicas", "1", "2")
    lines = drift_check.summary_lines(
        {"b": DriftReport("b", (item,)), "a": DriftReport("a", ()), "c": "not checked: refused"}
    )
    assert lines == ["a: no drift", "b: drift (1: values)", "c: not checked: refused"]


def test_git_only_mode_reports_drift_without_a_request(tmp_path: Path) -> None:
    from gitopsbot.adapters.clock import SystemClock
    from gitopsbot.adapters.gitonly import GitOnlyForge
    from gitopsbot.app import drift as drift_app
    from gitopsbot.app.options import RunOptions
    from gitopsbot.core.fleet.model import BotSettings, DriftSettings

    settings = BotSettings(drift=DriftSettings(on_drift="propose-git"))
    repo: Any = Stub()

    def watch_with(forge: Any) -> Any:
        return drift_app.drift_watch(
            RunOptions(fleet_url="file:///nowhere", cache=tmp_path), repo=repo,
            bot_settings=settings, clock=SystemClock(), forge=forge, charts=Stub(),  # type: ignore[arg-type]
            access=Stub(), instance="test",  # type: ignore[arg-type]
        )  # fmt: skip

    assert watch_with(GitOnlyForge(repo)).proposer is None

    class ApiForge:  # a forge with an API: nothing of Git-only's request files
        pass

    assert watch_with(ApiForge()).proposer is not None


def test_a_replica_checks_only_the_clusters_whose_lease_it_holds() -> None:
    """drift × lease lost (docs/decisions.md): the replica that lost a cluster's Lease neither
    reads it nor reports it; the holder does."""
    from datetime import UTC, datetime

    from gitopsbot.bot.drift_watch import DriftWatch
    from gitopsbot.core.fleet.model import DriftSettings

    read: list[str] = []

    def executor_for(s: ClusterSpec) -> Executor:
        read.append(s.name)
        return Executor(cluster=Stub(), helm=Stub(), secrets=Stub())

    held = {"kept"}
    watch = DriftWatch(
        settings=DriftSettings(),
        specs=lambda: {"kept": spec("kept"), "lost": spec("lost")},
        journal_for=lambda _n: None,
        chart_for=lambda _s: None,
        executor_for=executor_for,
        now=lambda: datetime(2026, 12, 6, tzinfo=UTC),
        may_act=lambda name: name in held,
    )
    assert set(watch.check_once()) == {"kept"}
    assert read == ["kept"]


def _watch(executor_for: Any, yield_to: Any, give_way_seconds: float = 30.0) -> Any:
    from datetime import UTC, datetime

    from gitopsbot.bot.drift_watch import DriftWatch
    from gitopsbot.core.fleet.model import DriftSettings

    return DriftWatch(
        settings=DriftSettings(),
        specs=lambda: {"a": spec("a"), "b": spec("b")},
        journal_for=lambda _n: None,
        chart_for=lambda _s: None,
        executor_for=executor_for,
        now=lambda: datetime(2026, 12, 6, tzinfo=UTC),
        yield_to=yield_to,
        give_way_seconds=give_way_seconds,
    )


def test_drift_gives_way_to_woken_passes_before_each_cluster() -> None:
    """drift × a woken pass (docs/decisions.md, #29): each cluster's check waits while the
    scheduler says a woken cluster's pass waits or runs, and starts once it says none does."""
    events: list[str] = []
    busy = {"a": 3, "b": 2}  # how many looks say "urgent" before each check may start
    order = iter(["a", "b"])
    current = [next(order)]

    def yield_to() -> bool:
        name = current[0]
        if busy[name] > 0:
            busy[name] -= 1
            events.append(f"wait {name}")
            return True
        return False

    def executor_for(s: ClusterSpec) -> Executor:
        events.append(f"check {s.name}")
        current[0] = next(order, s.name)
        return Executor(cluster=Stub(), helm=Stub(), secrets=Stub())

    assert set(_watch(executor_for, yield_to).check_once()) == {"a", "b"}
    assert events == ["wait a"] * 3 + ["check a"] + ["wait b"] * 2 + ["check b"]


def test_drift_gives_way_for_a_bounded_time_only() -> None:
    """Woken passes all the time (a fleet rolling out) slow drift down; they never stop it."""
    looks: list[int] = []
    checked: list[str] = []

    def executor_for(s: ClusterSpec) -> Executor:
        checked.append(s.name)
        return Executor(cluster=Stub(), helm=Stub(), secrets=Stub())

    watch = _watch(executor_for, lambda: looks.append(1) is None, give_way_seconds=0.2)
    assert set(watch.check_once()) == {"a", "b"}
    assert checked == ["a", "b"]
    assert len(looks) >= 4  # it did wait before each (at 50 ms a look), then went ahead


def test_a_check_under_way_gives_way_before_each_of_its_reads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """drift × a woken pass that comes during a check (#29): the read-only ports call
    ``before_read`` before each read, and ``run``'s drift hands them its give-way, which
    waits while the scheduler says a woken pass waits or runs."""
    events: list[str] = []

    class Recording(Stub):
        def __getattr__(self, name: str) -> Any:
            def call(*_args: Any, **_kwargs: Any) -> Any:
                events.append(f"read {name}")

            return call

    ports = drift_check.read_only(
        Executor(cluster=Recording(), helm=Recording(), secrets=Stub()),
        before_read=lambda: events.append("give way"),
    )
    ports.helm.history("tf", "tf-sys")
    ports.cluster.get("v1", "Pod", "ns", "p")
    assert events == ["give way", "read history", "give way", "read get"]

    handed: list[Any] = []

    def check_clusters(specs: Any, *args: Any, before_read: Any = None, **kw: Any) -> Any:
        handed.append(before_read)
        return {s.name: "not checked: test" for s in specs}

    monkeypatch.setattr(drift_check, "check_clusters", check_clusters)
    looks = {"n": 0}

    def yield_to() -> bool:
        looks["n"] += 1
        return looks["n"] <= 3  # urgent for three looks, then not

    watch = _watch(lambda s: Executor(cluster=Stub(), helm=Stub(), secrets=Stub()), lambda: False)
    watch.check_once({"a"})
    (before_read,) = handed
    watch.yield_to = yield_to
    before_read()  # what a read of the check does first
    assert looks["n"] == 4  # it waited through three urgent looks, went on at the fourth
