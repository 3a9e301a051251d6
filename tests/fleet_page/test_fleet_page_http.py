"""The fleet page over real HTTP and a real state branch (adapters.fleet_page served by the
metrics server, read by bot.fleet_reads through ``status``'s JournalStore; docs/fleet-page.md).

Aspects: markup in a cluster, pool or step is shown as text, never as markup; a journal
that cannot be read and an absent state branch are said in place (200, the rest of the
fleet still listed), an unknown cluster is a 404 page; read-only (POST is 405, HEAD has no
body); a drawing that fails is a page saying so, never a traceback; off by default (404)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry

from gitopsbot import app
from gitopsbot.adapters import fleet_page
from gitopsbot.adapters.fleet_page import FleetPages
from gitopsbot.adapters.metrics_server import MetricsServer
from gitopsbot.bot import fleet_reads
from gitopsbot.cli import main
from gitopsbot.core.fleet.model import Component
from gitopsbot.core.records import journal as journal_mod
from gitopsbot.core.records.journal import Step, StepKind, StepState
from gitopsbot.core.replicas.health import Verdict
from gitopsbot.core.views.fleet_view import FleetSnapshot
from tests.executor.test_status_from_clone import bare_remote, fleet_source, seen
from tests.test_live_view import journal_at

__all__ = ["fleet_source"]  # a fixture, used by name

T0 = datetime(2026, 3, 1, 2, 0, tzinfo=UTC)
NOW = T0 + timedelta(seconds=50)
MARKUP = '<script>alert("x")</script>'


def ok() -> Verdict:
    return Verdict(True, "ok")


def serve(url: str, tmp_path: Path) -> MetricsServer:
    view = app.open_state(url, tmp_path / "cache")
    pages = FleetPages(lambda: fleet_reads.snapshot(view.store, lambda: view.fleet), lambda: NOW)
    return MetricsServer(CollectorRegistry(), ok, ok, fleet=pages)


def dump(j: journal_mod.Journal) -> str:
    return journal_mod.dump_yaml(journal_mod.to_dict(j))


@pytest.fixture
def marked_up() -> journal_mod.Journal:
    """A journal whose cluster, pool and step detail carry markup."""
    j = journal_at(50, T0)
    name = f"pool/{MARKUP}/hypervisor"
    steps = (
        replace(j.steps[0], detail=f"helm said {MARKUP}"),
        Step(name, StepKind.POOL_PHASE, StepState.RUNNING, started_at=T0, pool=MARKUP,
             component=Component.HYPERVISOR),
    )  # fmt: skip
    return replace(j, steps=steps, phases=(replace(j.phases[0], step=name),))


def test_markup_is_shown_as_text(
    tmp_path: Path, fleet_source: Path, marked_up: journal_mod.Journal
) -> None:
    files = {**seen("alpha"), "clusters/alpha/journal.yaml": dump(marked_up)}
    url = bare_remote(tmp_path, fleet_source, files=files)
    with serve(url, tmp_path) as server:
        page = httpx.get(f"{server.url}/fleet/clusters/alpha", timeout=10)
        overview = httpx.get(f"{server.url}/fleet", timeout=10)
    assert page.status_code == 200 and overview.status_code == 200
    for r in (page, overview):
        assert "<script" not in r.text
        assert r.headers["content-security-policy"].startswith("default-src 'none'")
    assert "helm said &lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;" in page.text
    assert "Pool &lt;script&gt;" in page.text
    assert 'class="batch">batch 2/2<' in page.text  # the pool's line is there, as text


def test_an_unreadable_journal_is_said_in_place(tmp_path: Path, fleet_source: Path) -> None:
    files = {
        **seen("alpha", "beta"),
        "clusters/alpha/journal.yaml": "op_id: [unclosed\n",
        "clusters/beta/journal.yaml": dump(replace(journal_at(100, T0), cluster="beta")),
    }
    url = bare_remote(tmp_path, fleet_source, files=files)
    with serve(url, tmp_path) as server:
        overview = httpx.get(f"{server.url}/fleet", timeout=10)
        alpha = httpx.get(f"{server.url}/fleet/clusters/alpha", timeout=10)
    assert overview.status_code == 200 and alpha.status_code == 200
    assert "the records cannot be read: gitopsbot/state:clusters/alpha/journal.yaml" in (
        overview.text
    )
    assert "upgrade op-live — succeeded" in overview.text  # beta, still shown
    assert "Traceback" not in overview.text + alpha.text
    assert "the records cannot be read" in alpha.text


def test_an_absent_state_branch_and_an_unknown_cluster(tmp_path: Path, fleet_source: Path) -> None:
    url = bare_remote(tmp_path, fleet_source)
    with serve(url, tmp_path) as server:
        overview = httpx.get(f"{server.url}/fleet", timeout=10)
        unknown = httpx.get(f"{server.url}/fleet/clusters/%3Cb%3Enope", timeout=10)
    assert overview.status_code == 200
    assert "no gitopsbot/state branch yet: the bot has recorded nothing" in overview.text
    assert unknown.status_code == 404
    assert "Cluster &lt;b&gt;nope" in unknown.text and "<b>" not in unknown.text


def test_read_only_and_no_traceback(
    tmp_path: Path, fleet_source: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = bare_remote(tmp_path, fleet_source, files=seen("alpha"))
    with serve(url, tmp_path) as server:
        post = httpx.post(f"{server.url}/fleet", timeout=10)
        head = httpx.head(f"{server.url}/fleet", timeout=10)

        def broken(*args: object, **kwargs: object) -> str:
            raise RuntimeError("secret-ish detail /etc/x")

        monkeypatch.setattr(fleet_page, "render_fleet", broken)
        failed = httpx.get(f"{server.url}/fleet", timeout=10)
    assert post.status_code == 405 and post.headers["allow"] == "GET, HEAD"
    assert head.status_code == 200 and head.content == b""
    assert failed.status_code == 500
    assert "the fleet page could not be drawn (RuntimeError)" in failed.text
    assert "secret-ish" not in failed.text and "Traceback" not in failed.text


@pytest.fixture
def plain_server() -> Iterator[MetricsServer]:
    with MetricsServer(CollectorRegistry(), ok, ok) as server:
        yield server


def test_off_by_default(plain_server: MetricsServer) -> None:
    assert httpx.get(f"{plain_server.url}/fleet", timeout=10).status_code == 404
    assert not plain_server.serves_fleet


def test_the_page_needs_the_metrics_port(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--fleet-url", "file:///nowhere", "--fleet-page"]) == 2
    assert "--fleet-page is served on --metrics-listen: give both" in capsys.readouterr().err


def test_one_read_serves_the_requests_of_a_few_seconds() -> None:
    reads: list[datetime] = []
    clock = [NOW]

    def read() -> FleetSnapshot:
        reads.append(clock[0])
        return FleetSnapshot("state: test", "gitopsbot/state", None)

    pages = FleetPages(read, lambda: clock[0], reuse_seconds=5)
    with MetricsServer(CollectorRegistry(), ok, ok, fleet=pages) as server:
        for _ in range(3):
            assert httpx.get(f"{server.url}/fleet", timeout=10).status_code == 200
        clock[0] = NOW + timedelta(seconds=5)
        httpx.get(f"{server.url}/fleet/clusters/alpha", timeout=10)
    assert reads == [NOW, NOW + timedelta(seconds=5)]
