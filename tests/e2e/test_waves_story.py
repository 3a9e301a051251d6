"""Waves end to end with real clusters (issue 14 part 4): six sandbox clusters in three waves,
each its own API emulator and controller simulator with tensor-fusion 1.8.0 installed by real
helm (gitopsbot/sandbox/multi.py), a fleet repository on the sandbox's Git remote over HTTP,
and the bot as ``gitopsbot run`` builds it (``app.build_bot``: every cluster of the fleet, one
job each, real helm 4 and kubectl through one kubeconfig with a context per cluster).

- staging (``staging-eu1``), canary (``prod-canary-eu1``, ``prod-canary-us1``: production
  labelled ``tier: canary``), production (``prod-eu1``, ``prod-eu2``, ``prod-us1``); staging
  and canary soak a few seconds.
- One commit bumps all six to 1.8.7: staging applies at once, the others are blocked by the
  WAVES deny naming who is missing, the canaries start by themselves once staging is verified
  and soaked, production once the canaries are; Helm on all six then says 1.8.7.
- A halt in wave 2 stops wave 3: one canary's GPU node never gets its new hypervisor ready,
  its rollout stalls past ``stallTimeout`` and halts (``onFailure: halt``); production stays
  blocked naming that canary's trouble after the other canary has soaked, and Helm on the
  production clusters still says 1.8.0.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gitopsbot import app
from gitopsbot.app import drift as drift_app
from gitopsbot.bot.journal_store import JournalStore
from gitopsbot.core.drift.report import DriftReport
from gitopsbot.core.records.journal import (
    Journal,
    OperationKind,
    OperationStatus,
    StepKind,
    StepState,
)
from gitopsbot.sandbox.fleet_services import GIT_USER
from gitopsbot.sandbox.gitremote import GitRemote
from gitopsbot.sandbox.multi import MultiSandbox
from gitopsbot.sandbox.story import git
from gitopsbot.sandbox.story_fleet import StoryFleet, story_fleet_files
from tests.e2e.conftest import NEW_IMAGE, NS, OLD_IMAGE, RELEASE, stop_within

pytestmark = pytest.mark.slow

OLD, NEW = "1.8.0", "1.8.7"
SOAK = 3  # seconds, for staging and canary
STAGING = "staging-eu1"
CANARIES = ("prod-canary-eu1", "prod-canary-us1")
PRODUCTION = ("prod-eu1", "prod-eu2", "prod-us1")
CLUSTERS = (STAGING, *CANARIES, *PRODUCTION)
PASSWORD = "waves-git-password"  # a loopback-only Git remote made for this test
STATE = "gitopsbot/state"
SETTINGS = f"""\
watchedBranch: main
stateBranch: {STATE}
pollInterval: 2s
author:
  name: gitopsbot
  email: gitopsbot@sandbox.invalid
forge:
  kind: git-only
waves:
  - name: staging
    clusters:
      environment: staging
    soak: {SOAK}s
  - name: canary
    clusters:
      labels: {{tier: canary}}
    soak: {SOAK}s
  - name: production
    clusters:
      environment: production
"""

WAVES_DENIED = "WAVES promotion-follows-waves denied"  # the wave hold, as journals say it


class WaveWorld:
    """The six clusters, the fleet on the Git remote, a person's clone, the bot."""

    def __init__(
        self,
        root: Path,
        binaries: dict[str, Path],
        *,
        halting: str = "",
        names: tuple[str, ...] = CLUSTERS,
        settings: str = SETTINGS,
    ) -> None:
        self.root = root
        self.binaries = binaries
        self.halting = halting  # a canary whose pools halt on failure, stalling after 3s
        self.names = names  # the clusters of the fleet (others: tests/e2e/test_rotation_waves)
        self.settings = settings
        self.clusters = MultiSandbox(root / "clusters", names, pools=1, nodes=1)
        self.remote = GitRemote(root / "git", username=GIT_USER, password=PASSWORD)
        self.human = root / "fleet-clone"
        self.bot: app.Bot | None = None
        self.reader: JournalStore | None = None

    def start(self) -> WaveWorld:
        self.clusters.start()
        self.remote.start()
        source = self.root / "fleet-source"
        for path, text in self.fleet_files().items():
            target = source / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        self.remote.create_fleet_repo("fleet", source)
        authed = self.url.replace("http://", f"http://{GIT_USER}:{PASSWORD}@", 1)
        git("clone", "--quiet", authed, str(self.human), cwd=self.root)
        self.reader = JournalStore(
            app.password_mirror(
                self.url, self.root / "reader", username=GIT_USER, password=PASSWORD,
                author_name="reader", author_email="reader@sandbox.invalid",
            ),
            branch=STATE,
            push=False,
        )  # fmt: skip
        return self

    @property
    def url(self) -> str:
        return self.remote.repo_url("fleet")

    def fleet_files(self) -> dict[str, str]:
        files = {"gitopsbot.yaml": self.settings}
        for name in self.names:
            sandbox = self.clusters.sandboxes[name]
            assert sandbox.repo is not None
            halts = name == self.halting
            fleet = StoryFleet(
                chart_repo_url=sandbox.repo.url,
                kube_context=name,
                forge_api_url="",
                chart_version=OLD,
                hypervisor_image=OLD_IMAGE,
                pools=("shared",),
                nodes=1,
                batch_percentage=50,  # BATCH-100-PROD: never every node at once
                batch_interval="1s",
                on_failure="halt" if halts else "rollback",
                stall_timeout="3s" if halts else "2m",
                cluster=name,
            )
            for path, text in story_fleet_files(fleet).items():
                if path.endswith("release.yaml"):
                    environment = "staging" if name == STAGING else "production"
                    labels = "labels:\n  tier: canary\n" if name in CANARIES else ""
                    text = text.replace("environment: staging\n", f"environment: {environment}\n")
                    text += labels
                if path.endswith("values.yaml"):  # R5: two controller replicas in production
                    text = text.replace("replicaCount: 1\n", "replicaCount: 2\n")
                if path != "gitopsbot.yaml":
                    files[path] = text
        return files

    def run_options(self, clusters: tuple[str, ...] = (), cache: str = "bot") -> app.RunOptions:
        return app.RunOptions(
            fleet_url=self.url,
            kubeconfig=str(self.clusters.kubeconfig),
            clusters=clusters,
            cache=self.root / cache,
            helm=str(self.binaries["helm4"]),
            kubectl=str(self.binaries["kubectl"]),
            workers=2,
        )

    def start_bot(self, monkeypatch: pytest.MonkeyPatch) -> app.Bot:
        """``gitopsbot run`` over the whole fleet, in this process."""
        monkeypatch.setenv("GITOPSBOT_GIT_TOKEN", PASSWORD)
        bot = self.bot = app.build_bot(self.run_options())
        assert bot.clusters == tuple(sorted(self.names))
        bot.scheduler.set_clusters(bot.clusters)
        bot.scheduler.start()
        return bot

    def stop(self) -> None:
        if self.bot is not None:
            bot = self.bot
            self.bot = None

            def halt() -> None:
                bot.scheduler.shutdown(wait=True)
                bot.flush()
                bot.close()

            stop_within(halt, "the bot")
        self.remote.stop()
        self.clusters.stop()

    # -- what a person does and sees --------------------------------------------------------

    def bump_all(self) -> str:
        """One commit: every cluster to 1.8.7 with its new hypervisor image (R4)."""
        h = self.human
        for name in self.names:
            release = h / "clusters" / name / "release.yaml"
            text = release.read_text()
            assert f"  version: {OLD}\n" in text
            release.write_text(text.replace(f"  version: {OLD}\n", f"  version: {NEW}\n"))
            values = h / "clusters" / name / "values.yaml"
            values.write_text(values.read_text().replace(OLD_IMAGE, NEW_IMAGE))
        git("commit", "--quiet", "-am", f"every cluster to tensor-fusion {NEW}", cwd=h)
        git("push", "--quiet", "origin", "main", cwd=h)
        return git("rev-parse", "HEAD", cwd=h).strip()

    def helm_chart(self, name: str) -> str:
        out = self.clusters.helm(
            name, self.binaries["helm4"], "list", "--namespace", NS, "--output", "json"
        )
        releases = {r["name"]: r for r in json.loads(out)}
        assert releases[RELEASE]["status"] == "deployed", releases
        return str(releases[RELEASE]["chart"])

    def state_log(self) -> str:
        """The state branch's commit subjects, as a person's clone fetches them."""
        h = self.human
        git("fetch", "--quiet", "origin", f"+{STATE}:refs/remotes/origin/{STATE}", cwd=h)
        return git("log", "--format=%s", f"origin/{STATE}", cwd=h)

    def journals(self) -> dict[str, Journal | None]:
        assert self.reader is not None
        self.reader.refresh()
        return {name: self.reader.current(name) for name in self.names}

    def until(
        self,
        what: str,
        match: Callable[[dict[str, Journal | None]], bool],
        timeout: float = 60.0,
    ) -> dict[str, Journal | None]:
        deadline = time.monotonic() + timeout
        while True:
            found = self.journals()
            if match(found):
                return found
            if time.monotonic() > deadline:
                shown = {
                    n: (j.kind, j.status, j.failure[:200]) if j else None for n, j in found.items()
                }
                pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}: {shown}")
            time.sleep(0.5)

    def baselines(self) -> None:
        assert self.reader is not None
        reader = self.reader

        def seen(_found: dict[str, Journal | None]) -> bool:
            return all(reader.seen(name) is not None for name in self.names)

        self.until("every cluster's baseline", seen)


@pytest.fixture
def wave_world(
    tmp_path: Path, binaries: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[..., WaveWorld]]:
    worlds: list[WaveWorld] = []

    def make(**kwargs: Any) -> WaveWorld:
        world = WaveWorld(tmp_path / f"world{len(worlds)}", binaries, **kwargs)
        worlds.append(world)
        world.start()
        world.start_bot(monkeypatch)
        world.baselines()
        return world

    yield make
    for world in worlds:
        world.stop()


def _upgrade(j: Journal | None, op_id: str) -> Journal | None:
    return j if j is not None and j.op_id == op_id and j.kind is OperationKind.UPGRADE else None


def _status(j: Journal | None, op_id: str) -> OperationStatus | None:
    found = _upgrade(j, op_id)
    return found.status if found is not None else None


def _started(j: Journal) -> datetime:
    """When the operation first changed its cluster (CRDs, Helm): the backup before them is
    stamped with the time its pass began, before the gate judged the waves in that pass."""
    times = [s.started_at for s in j.steps if s.started_at and s.kind is not StepKind.BACKUP]
    assert times, f"{j.cluster}: no step started"
    return min(times)


def _verified(j: Journal) -> datetime:
    verify = [s for s in j.steps if s.kind is StepKind.VERIFY]
    assert verify and all(s.state is StepState.SUCCEEDED and s.finished_at for s in verify), j
    return max(s.finished_at for s in verify if s.finished_at is not None)


def test_three_waves_promote_one_version_in_order(wave_world: Callable[..., WaveWorld]) -> None:
    world = wave_world()
    assert {name: world.helm_chart(name) for name in CLUSTERS} == dict.fromkeys(
        CLUSTERS, f"tensor-fusion-{OLD}"
    )
    sha = world.bump_all()
    op = {name: f"{name}-{sha[:12]}" for name in CLUSTERS}

    # Staging goes at once; every later cluster is blocked by WAVES naming who is missing.
    def staging_running_others_blocked(found: dict[str, Journal | None]) -> bool:
        return _status(found[STAGING], op[STAGING]) is not None and all(
            _status(found[n], op[n]) is OperationStatus.BLOCKED for n in (*CANARIES, *PRODUCTION)
        )

    found = world.until(
        "staging to start and the others to be blocked", staging_running_others_blocked
    )
    staging = found[STAGING]
    assert staging is not None and staging.status is not OperationStatus.BLOCKED, staging
    for name in CANARIES:
        j = found[name]
        assert j is not None
        waits = f"{WAVES_DENIED}: wave canary waits for wave staging: {STAGING} "
        assert waits in j.failure, j.failure
    for name in PRODUCTION:
        j = found[name]
        assert j is not None
        assert f"{WAVES_DENIED}: wave production waits for wave staging: {STAGING} " in j.failure
        canaries = "; ".join(f"{c} not on {NEW} yet" for c in CANARIES)  # nothing applied yet
        assert f"; and for wave canary: {canaries}" in j.failure, j.failure

    # Every cluster ends on 1.8.7, wave after wave.
    def all_succeeded(found: dict[str, Journal | None]) -> bool:
        return all(_status(found[n], op[n]) is OperationStatus.SUCCEEDED for n in CLUSTERS)

    found = world.until("all six upgrades to succeed", all_succeeded, timeout=150)
    done = {name: j for name, j in found.items() if j is not None}
    soak = timedelta(seconds=SOAK)
    staging_soaked = _verified(done[STAGING]) + soak
    for name in CANARIES:
        assert _started(done[name]) >= staging_soaked, (name, _started(done[name]), staging_soaked)
    canaries_soaked = max(_verified(done[n]) for n in CANARIES) + soak
    for name in PRODUCTION:
        assert _started(done[name]) >= canaries_soaked, (
            name,
            _started(done[name]),
            canaries_soaked,
        )
    assert {name: world.helm_chart(name) for name in CLUSTERS} == dict.fromkeys(
        CLUSTERS, f"tensor-fusion-{NEW}"
    )
    log = world.state_log()
    for name in (*CANARIES, *PRODUCTION):
        assert f"upgrade {op[name]} started: no longer held by waves" in log, (name, log)
    assert f"upgrade {op[STAGING]} started: no longer held by waves" not in log


def test_a_halt_in_the_canary_wave_stops_production(wave_world: Callable[..., WaveWorld]) -> None:
    halting = CANARIES[1]
    world = wave_world(halting=halting)
    sim = world.clusters.sandboxes[halting].sim
    assert sim is not None
    nodes = [n["metadata"]["name"] for n in world.clusters.sandboxes[halting].store.list(
        "tensor-fusion.ai/v1", "GPUNode"
    )]  # fmt: skip
    assert len(nodes) == 1
    sim.config = replace(sim.config, broken_nodes=frozenset(nodes))  # never ready on the new image
    sha = world.bump_all()
    op = {name: f"{name}-{sha[:12]}" for name in CLUSTERS}

    def halted(found: dict[str, Journal | None]) -> bool:
        return _status(found[halting], op[halting]) is OperationStatus.FAILED

    found = world.until("the canary's rollout to halt", halted, timeout=90)
    failed = found[halting]
    assert failed is not None
    assert failed.remediation == "halt", failed
    assert "no progress for" in failed.failure and nodes[0] in failed.failure, failed.failure

    healthy = CANARIES[0]
    found = world.until(
        "the other canary to succeed",
        lambda found: _status(found[healthy], op[healthy]) is OperationStatus.SUCCEEDED,
    )
    healthy_verified = found[healthy]
    assert healthy_verified is not None
    soaked = _verified(healthy_verified) + timedelta(seconds=SOAK)
    # Production waits for the halted canary alone once staging and the other canary soaked.
    waits = re.escape(
        f"{WAVES_DENIED}: wave production waits for wave canary: {halting} halted at "
    )
    only_the_halt = re.compile(waits + r"\d\d:\d\d UTC$")

    def waits_for_the_halt_alone(found: dict[str, Journal | None]) -> bool:
        return all(
            (j := _upgrade(found[n], op[n])) is not None and only_the_halt.search(j.failure)
            for n in PRODUCTION
        )

    world.until("production to wait for the halted canary alone", waits_for_the_halt_alone)
    # Two polls and more past the soak: still blocked, nothing applied to production.
    time.sleep(max(0.0, (soaked - datetime.now(UTC)).total_seconds()) + 5)
    found = world.journals()
    for name in PRODUCTION:
        j = found[name]
        assert _status(j, op[name]) is OperationStatus.BLOCKED, j
        assert j is not None
        assert only_the_halt.search(j.failure), j.failure
        assert world.helm_chart(name) == f"tensor-fusion-{OLD}"
    assert world.helm_chart(STAGING) == world.helm_chart(healthy) == f"tensor-fusion-{NEW}"
    log = world.state_log()
    assert f"upgrade {op[healthy]} started: no longer held by waves" in log, log
    for name in PRODUCTION:
        assert f"upgrade {op[name]} started" not in log, log

    # Drift, as `gitopsbot drift` checks it (issue 28 item 2): the bump the waves hold back is
    # pending with its reason, never drift a request would undo by writing 1.8.0 into Git.
    checked = drift_app.check_fleet(world.run_options(PRODUCTION, "drift")).reports
    for name in PRODUCTION:
        report = checked[name]
        assert isinstance(report, DriftReport), report
        assert [i for i in report.items if i.what == "chart"] == [], report.lines()
        (chart,) = [p for p in report.pending if p.item.what == "chart"]
        assert (chart.item.desired, chart.item.observed) == (NEW, OLD)
        assert chart.why.startswith(f"operation {op[name]} blocked by policy (denied): "), chart.why
        assert f"{WAVES_DENIED}: wave production waits for wave canary: {halting}" in chart.why
