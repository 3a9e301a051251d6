"""bot.drift: the check only reads (its ports refuse writes), one cluster's failure does not
stop the others, and the per-cluster summary lines ``status`` can show."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gitopsbot.bot import drift as drift_check
from gitopsbot.bot.steps.executor import Executor
from gitopsbot.core.drift import DriftItem, DriftReport
from gitopsbot.core.model import ClusterSpec, Environment, ReleaseSpec, RolloutPolicy
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
    from gitopsbot.core.model import BotSettings, DriftSettings

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
    from gitopsbot.core.model import DriftSettings

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
