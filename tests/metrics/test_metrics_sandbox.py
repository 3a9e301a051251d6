"""``/metrics`` scraped over real HTTP while a real ``gitopsbot run --metrics-listen`` upgrades
the sandbox (docs/metrics.md): `sandbox up`, the bot started as a user starts it (a
subprocess, real git, real helm against the API emulator, the controller simulator rolling
the pools), one merged upgrade (chart 1.8.0 → 1.8.7 with its hypervisor image), and every
scrape parsed with prometheus_client's text parser.

Aspects: the values move: the last-success timestamp advances pass after pass; the operations
counter goes from nothing to one succeeded upgrade; each pool's rollout progress goes from
below 1 (or absent) to 1; step durations are observed for the helm upgrade; windows are open
(the sandbox's pools have none) and no merge is queued at the end; ``/readyz`` is 200 once
the baseline pass is done; SIGTERM stops the process cleanly and the port closes.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.sandbox.test_sandbox_run_bot import _env, cli, git, port_open

ROOT = Path(__file__).resolve().parents[2]
INSTALLED, TARGET = "1.8.0", "1.8.7"
OLD_IMAGE = "tensorfusion/tensor-fusion-hypervisor:2.13.0"
NEW_IMAGE = "tensorfusion/tensor-fusion-hypervisor:2.15.0"  # 1.8.7's default: no R4 ack
CLUSTER = "sandbox"
POOLS = ("shared", "pool-2")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(url: str) -> Samples:
    r = httpx.get(f"{url}/metrics", timeout=10)
    assert r.status_code == 200, r.text
    out: Samples = {}
    for family in text_string_to_metric_families(r.text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def sample(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


class Bot:
    """A ``gitopsbot run`` process; its output lines, read as they come."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path) -> None:
        self.proc = subprocess.Popen(
            argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    def metrics_url(self, timeout: float = 120.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                found = re.search(r"metrics at (http://\S+)/metrics", line)
                if found:
                    return found.group(1)
            assert self.proc.poll() is None, self.output()
            time.sleep(0.1)
        raise AssertionError(f"no metrics address: {self.output()}")

    def output(self) -> str:
        return "".join(self.lines[-60:])


@pytest.mark.usefixtures("binaries")
def test_metrics_move_during_a_sandbox_rollout(tmp_path: Path) -> None:
    (tmp_path / "home").mkdir()
    state_dir = tmp_path / "sbx"
    up = cli(
        tmp_path,
        *("sandbox", "up", "--state-dir", str(state_dir)),
        *("--pools", "2", "--nodes", "2", "--chart-version", INSTALLED),
    )
    state: dict[str, Any] = {}
    bot: Bot | None = None
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        state = json.loads((state_dir / "sandbox.json").read_text())
        fleet_url, password = state["services"]["git"], state["credentials"]["git_password"]
        clone = tmp_path / "fleet"
        user = state["credentials"]["git_username"]
        parts = urlsplit(fleet_url)
        authed = parts._replace(netloc=f"{user}:{password}@{parts.netloc}").geturl()
        git(tmp_path, "clone", "--quiet", authed, str(clone), cwd=tmp_path)

        argv = [
            sys.executable, "-m", "gitopsbot", "run", "--download-binaries",
            "--fleet-url", fleet_url, "--kubeconfig", state["kubeconfig"],
            "--metrics-listen", "127.0.0.1:0",
        ]  # fmt: skip
        env = _env(tmp_path, GITOPSBOT_GIT_TOKEN=password, PYTHONUNBUFFERED="1")
        env["PYTHONPATH"] = str(ROOT)
        bot = Bot(argv, env, tmp_path)
        url = bot.metrics_url()
        last = "gitopsbot_reconcile_last_success_timestamp_seconds"

        # The baseline pass: a first success, and ready.
        first = _wait(bot, url, lambda s: sample(s, last, cluster=CLUSTER), "a first good pass")
        assert httpx.get(f"{url}/readyz", timeout=5).text.strip() == "ok"
        assert httpx.get(f"{url}/healthz", timeout=5).status_code == 200
        before = scrape(url)
        ops = "gitopsbot_operations_total"
        succeeded = {"cluster": CLUSTER, "kind": "upgrade", "result": "succeeded"}
        assert sample(before, ops, **succeeded) is None
        progress = "gitopsbot_pool_rollout_progress_ratio"
        seen: dict[str, list[float]] = {p: [] for p in POOLS}

        # The user's change: chart 1.8.7 with its hypervisor image.
        release = clone / "clusters" / CLUSTER / "release.yaml"
        release.write_text(
            release.read_text().replace(f"  version: {INSTALLED}\n", f"  version: {TARGET}\n")
        )
        values = clone / "clusters" / CLUSTER / "values.yaml"
        assert OLD_IMAGE in values.read_text()
        values.write_text(values.read_text().replace(OLD_IMAGE, NEW_IMAGE))
        git(tmp_path, "commit", "--quiet", "-am", f"tensor-fusion {TARGET}", cwd=clone)
        git(tmp_path, "push", "--quiet", "origin", "main", cwd=clone)

        def done(s: Samples) -> float | None:
            for pool in POOLS:
                v = sample(s, progress, cluster=CLUSTER, pool=pool, component="hypervisor")
                if v is not None and (not seen[pool] or seen[pool][-1] != v):
                    seen[pool].append(v)
            failed = sample(s, ops, cluster=CLUSTER, kind="upgrade", result="failed")
            assert failed is None, f"the upgrade failed: {bot.output() if bot else ''}"
            return sample(s, ops, **succeeded)

        _wait(bot, url, done, "the upgrade to succeed", timeout=600, every=0.2)
        after = scrape(url)
        assert sample(after, ops, **succeeded) == 1
        for pool in POOLS:
            assert seen[pool] and seen[pool][-1] == 1.0, (pool, seen)
            assert sample(after, progress, cluster=CLUSTER, pool=pool, component="hypervisor") == 1
        # 0 → 1: absent before the upgrade, below 1 while it rolled (the simulator moves a
        # batch of 50 % at a time), 1 at the end.
        assert (
            sample(before, progress, cluster=CLUSTER, pool=POOLS[0], component="hypervisor") is None
        )
        assert any(v < 1 for pool in POOLS for v in seen[pool]), seen
        steps = "gitopsbot_step_duration_seconds_count"
        assert (sample(after, steps, step_kind="helm-upgrade") or 0) >= 1  # fleet-wide (#29)
        for pool in POOLS:
            # No window in the sandbox's rollout.yaml: always open.
            assert sample(after, "gitopsbot_pool_window_open", cluster=CLUSTER, pool=pool) == 1
        assert sample(after, "gitopsbot_queued_merges", cluster=CLUSTER) == 0
        passes = "gitopsbot_reconcile_duration_seconds_count"
        assert (sample(after, passes, cluster=CLUSTER) or 0) > (
            sample(before, passes, cluster=CLUSTER) or 0
        )

        at_end = sample(after, last, cluster=CLUSTER)
        assert at_end is not None and at_end > first
        # Idle now: the cluster rests (docs/decisions.md#resting-clusters), no periodic pass
        # before its next idle look, ten minutes away with its release watched.
        resting = "gitopsbot_scheduler_clusters_resting"
        _wait(bot, url, lambda s: sample(s, resting) == 1 or None, "the cluster at rest")
        rested = sample(scrape(url), last, cluster=CLUSTER)
        assert rested is not None
        # A push touching the cluster, no webhook (none is configured): the fleet poll (every
        # 5 s in the sandbox) fetches, sees it, and wakes the cluster; its pass records it.
        rollout = clone / "clusters" / CLUSTER / "rollout.yaml"
        text = rollout.read_text()
        assert "\nmaxParallelPools: 1\n" in text
        rollout.write_text(
            text.replace("\nmaxParallelPools: 1\n", "\nmaxParallelPools: 1\npaused: true\n")
        )
        git(tmp_path, "commit", "--quiet", "-am", "pause the sandbox", cwd=clone)
        git(tmp_path, "push", "--quiet", "origin", "main", cwd=clone)
        _wait(
            bot, url, lambda s: (sample(s, last, cluster=CLUSTER) or 0) > rested or None,
            "the woken cluster's pass", timeout=120,
        )  # fmt: skip
        git(tmp_path, "fetch", "--quiet", "origin", cwd=clone)
        state_log = git(tmp_path, "log", "--format=%s", "origin/gitopsbot/state", cwd=clone)
        assert f"{CLUSTER}: pause edits up to" in state_log, state_log

        bot.proc.send_signal(signal.SIGTERM)
        bot.proc.wait(120)
        bot._reader.join(10)
        assert bot.proc.returncode == 0, bot.output()
        assert "stopped cleanly" in bot.output()
        port = int(urlsplit(url).port or 0)
        assert not port_open(port)
        print(f"\npool progress scraped: {seen}")
    finally:
        if bot is not None and bot.proc.poll() is None:
            bot.proc.kill()
            bot.proc.wait(30)
        down = cli(tmp_path, "sandbox", "down", "--state-dir", str(state_dir))
    assert down.returncode == 0, down.stdout + down.stderr


def _wait(
    bot: Bot,
    url: str,
    found: Any,
    what: str,
    *,
    timeout: float = 180.0,
    every: float = 0.5,
) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = found(scrape(url))
        if value:
            return value
        assert bot.proc.poll() is None, f"the bot exited: {bot.output()}"
        assert time.monotonic() < deadline, f"no {what} in {timeout:.0f}s: {bot.output()}"
        time.sleep(every)
