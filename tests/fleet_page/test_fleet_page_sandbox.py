"""The fleet page and the Grafana dashboard against a real ``gitopsbot run`` upgrading the
sandbox (docs/fleet-page.md, docs/metrics.md): `sandbox up` (real git, helm, the API
emulator and the controller simulator), the bot started as a user starts it with
``--metrics-listen --fleet-page`` and Leases, one merged upgrade (chart 1.8.0 → 1.8.7) whose
rollout.yaml holds the second pool (``paused: true``) and spaces the batches 12 s apart, then a
commit that lets the held pool go.

Aspects, as a person sees them in headless Chromium (screenshots kept under
test-artefacts/fleet-page/): the overview lists the cluster with its operation; while the
first pool rolls, its batch line moves (the page polled over HTTP sees more than one); the
held pool shows its reason; once resumed, the browser shows the pool's batch line changed
from nothing (held, pending) to its last batch with every node done, and the upgrade
succeeded; no credential of the sandbox (the Git password, the forge token) appears in any
page. Then every query of deploy/grafana's dashboard names metrics and labels the running
bot's /metrics really has (the few with no sample in a sandbox are listed with why)."""

from __future__ import annotations

import json
import re
import signal
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from tests.fleet_page import browser
from tests.metrics.promql_names import Exposition
from tests.metrics.test_metrics_sandbox import Bot
from tests.sandbox.test_sandbox_run_bot import _env, cli, git

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "gitopsbot-dashboard.json"
INSTALLED, TARGET = "1.8.0", "1.8.7"
OLD_IMAGE = "tensorfusion/tensor-fusion-hypervisor:2.13.0"
NEW_IMAGE = "tensorfusion/tensor-fusion-hypervisor:2.15.0"
CLUSTER = "sandbox"
FIRST, HELD = "pool/shared/hypervisor", "pool/pool-2/hypervisor"
# Families the dashboard shows that a one-cluster sandbox never fills, and why.
UNSAMPLED = {
    "gitopsbot_forge_rate_limit_remaining": "the sandbox's forge sends no rate-limit headers",
    "gitopsbot_forge_rate_limit_reset_timestamp_seconds": "the same",
    "gitopsbot_pool_halts_total": "nothing halts in this story",
    "gitopsbot_drift_items": "no drift check runs within the story (drift.interval)",
    "gitopsbot_drift_last_check_timestamp_seconds": "the same",
    "gitopsbot_reconcile_failures_total": "no pass fails",
}

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def fleet_page_url(bot: Bot, timeout: float = 120.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in list(bot.lines):
            found = re.search(r"fleet page at (http://\S+)/fleet", line)
            if found:
                return found.group(1)
        assert bot.proc.poll() is None, bot.output()
        time.sleep(0.1)
    raise AssertionError(f"no fleet page address: {bot.output()}")


def phase_section(page: str, step: str) -> str:
    found = re.search(rf'<section class="phase"[^>]*data-step="{re.escape(step)}">(.*?)</section>',
                      page, flags=re.S)  # fmt: skip
    return found.group(1) if found else ""


def batch_line(section: str) -> str:
    """The pool's line as read: its batch and its units done ("" when held before its
    first batch)."""
    batch = re.search(r'class="batch">([^<]*)<', section)
    units = re.search(r'class="units">([^<]*)<', section)
    return " · ".join(m.group(1) for m in (batch, units) if m)


@pytest.mark.usefixtures("binaries")
def test_the_fleet_page_and_the_dashboard_during_a_sandbox_rollout(tmp_path: Path) -> None:
    browser.require_browser()
    (tmp_path / "home").mkdir()
    state_dir = tmp_path / "sbx"
    up = cli(
        tmp_path,
        *("sandbox", "up", "--state-dir", str(state_dir)),
        *("--pools", "2", "--nodes", "2", "--chart-version", INSTALLED),
    )
    bot: Bot | None = None
    pages: list[str] = []  # every page fetched, for the canary
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        state: dict[str, Any] = json.loads((state_dir / "sandbox.json").read_text())
        fleet_url, password = state["services"]["git"], state["credentials"]["git_password"]
        secrets = [v for v in state["credentials"].values() if isinstance(v, str) and len(v) > 8]
        user = state["credentials"]["git_username"]
        parts = urlsplit(fleet_url)
        authed = parts._replace(netloc=f"{user}:{password}@{parts.netloc}").geturl()
        clone = tmp_path / "fleet"
        git(tmp_path, "clone", "--quiet", authed, str(clone), cwd=tmp_path)
        argv = [
            sys.executable, "-m", "gitopsbot", "run", "--download-binaries",
            "--fleet-url", fleet_url, "--kubeconfig", state["kubeconfig"],
            "--metrics-listen", "127.0.0.1:0", "--fleet-page",
            "--leases-namespace", "tensor-fusion-sys",
        ]  # fmt: skip
        env = _env(tmp_path, GITOPSBOT_GIT_TOKEN=password, PYTHONUNBUFFERED="1")
        env["PYTHONPATH"] = str(ROOT)
        bot = Bot(argv, env, tmp_path)
        base = fleet_page_url(bot)
        page_url = f"{base}/fleet/clusters/{CLUSTER}"

        def get(url: str, unknown_yet: bool = False) -> str:
            r = httpx.get(url, timeout=10)
            pages.append(r.text)
            if unknown_yet and r.status_code == 404:  # no record of the cluster yet
                return ""
            assert r.status_code == 200, (r.status_code, r.text[:500])
            return r.text

        def wait(
            what: str, found: Any, timeout: float = 300.0, every: float = 0.2, first: bool = False
        ) -> Any:
            deadline = time.monotonic() + timeout
            while True:
                value = found(get(page_url, unknown_yet=first))
                if value:
                    return value
                assert bot.proc.poll() is None, "the bot exited"
                assert time.monotonic() < deadline, f"no {what}: {bot.output()}"
                time.sleep(every)

        # Before any change: the cluster is listed (a first pass recorded it).
        # (Until its first pass is recorded, the cluster's page is a 404 that says so.)
        wait("a first record", lambda page: "Cluster sandbox" in page, first=True)
        overview = browser.visible_text(browser.dom(f"{base}/fleet"))
        assert CLUSTER in overview and "Fleet" in overview

        # The user's change: chart 1.8.7, and the second pool held in rollout.yaml.
        release = clone / "clusters" / CLUSTER / "release.yaml"
        release.write_text(
            release.read_text().replace(f"  version: {INSTALLED}\n", f"  version: {TARGET}\n")
        )
        values = clone / "clusters" / CLUSTER / "values.yaml"
        values.write_text(values.read_text().replace(OLD_IMAGE, NEW_IMAGE))
        rollout = clone / "clusters" / CLUSTER / "rollout.yaml"
        text = rollout.read_text()
        assert "\n  pool-2:\n" in text, text
        # Batches 12 s apart: longer than the page reuses a read (adapters/fleet_page.py),
        # so the line between two batches is on the page for a while.
        text, paced = re.subn(r"batchInterval: \S+", "batchInterval: 12s", text)
        assert paced == 2, text
        rollout.write_text(text.replace("\n  pool-2:\n", "\n  pool-2:\n    paused: true\n"))
        git(tmp_path, "commit", "--quiet", "-am", f"tensor-fusion {TARGET}, pool-2 held", cwd=clone)
        git(tmp_path, "push", "--quiet", "origin", "main", cwd=clone)

        # The first pool rolls: its line, as the page says it, moves.
        lines: list[str] = []

        def first_done(page: str) -> bool:
            line = batch_line(phase_section(page, FIRST))
            if line and (not lines or lines[-1] != line):
                lines.append(line)
            return "2/2 nodes done" in line

        wait("the first pool done", first_done)
        assert len(lines) >= 2, lines  # e.g. batch 1/2 · 0/2 → batch 2/2 · 2/2 nodes done

        # The held pool shows its reason, in the browser.
        wait("the held pool", lambda page: "paused in Git" in phase_section(page, HELD) or None)
        held_dom = browser.dom(page_url)
        held_text = browser.visible_text(held_dom)
        assert re.search(rf"held paused in Git \(clusters/{CLUSTER}/rollout.yaml", held_text), (
            held_text
        )
        held_line = batch_line(phase_section(held_dom, HELD))
        assert "nodes done" not in held_line, held_line
        browser.screenshot(page_url, "cluster-held", "1280,1600")
        if browser.AXE.is_file():  # the page with real data: no accessibility violation
            assert browser.axe(get(page_url), "sandbox-cluster-held") == []
        browser.screenshot(f"{base}/fleet", "fleet-held", "1280,700")

        # Let it go: the pool rolls to its end and the upgrade succeeds.
        rollout.write_text(text)
        git(tmp_path, "commit", "--quiet", "-am", "pool-2 may go", cwd=clone)
        git(tmp_path, "push", "--quiet", "origin", "main", cwd=clone)
        wait("the upgrade to succeed", lambda page: "upgrade" in page and "— succeeded" in page,
             timeout=600)  # fmt: skip
        done_dom = browser.dom(page_url)
        done_line = batch_line(phase_section(done_dom, HELD))
        assert done_line != held_line and done_line.endswith("2/2 nodes done"), done_line
        assert "upgrade" in browser.visible_text(done_dom)
        browser.screenshot(page_url, "cluster-succeeded", "1280,1600")
        get(f"{base}/fleet")

        # The canary: no sandbox credential on any page.
        for secret in secrets:
            assert not any(secret in page for page in pages), "a credential reached the page"

        # The dashboard: every query's metrics and labels exist on the running bot.
        exposition = Exposition(httpx.get(f"{base}/metrics", timeout=10).text)
        dashboard = json.loads(DASHBOARD.read_text())
        wrong: list[str] = []
        unsampled: set[str] = set()
        queries = 0
        for panel in dashboard["panels"]:
            for target in panel.get("targets", []):
                queries += 1
                bad, empty = exposition.problems(target["expr"], target.get("legendFormat", ""))
                wrong += [f"{panel['title']}: {b}" for b in bad]
                unsampled |= empty
        variable = dashboard["templating"]["list"][1]["definition"]
        assert "gitopsbot_reconcile_last_success_timestamp_seconds" in exposition.labels, variable
        assert queries > 20 and wrong == [], wrong
        assert unsampled <= set(UNSAMPLED), unsampled - set(UNSAMPLED)
        assert "gitopsbot_cluster_lease_held" in exposition.labels  # the Leases' panel

        bot.proc.send_signal(signal.SIGTERM)
        bot.proc.wait(120)
        assert bot.proc.returncode == 0, bot.output()
    finally:
        if bot is not None and bot.proc.poll() is None:
            bot.proc.kill()
            bot.proc.wait(30)
        down = cli(tmp_path, "sandbox", "down", "--state-dir", str(state_dir))
    assert down.returncode == 0, down.stdout + down.stderr
