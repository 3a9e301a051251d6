"""End-to-end fixtures: the story world (sandbox + Git remote + local GitHub + fleet), the
bot wired to it as ``gitopsbot run`` wires it, and helpers to read Git, Helm and the
cluster. Everything is real on loopback: helm 4 and kubectl binaries, git and its
http-backend, the API emulator and the controller simulator (gitopsbot/sandbox/story.py).

``story_backend`` runs a story once on the API emulator and once on the real control plane
(tests/conftest.py ``control_plane``; the ``realkube`` tier): the same test, two clusters."""

from __future__ import annotations

import faulthandler
import json
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from gitopsbot.bot.reconciler import PassResult
from gitopsbot.core.records.journal import Journal, PhaseState
from gitopsbot.sandbox.gitremote import HTTP_BACKEND, _git_exec_path
from gitopsbot.sandbox.story import StoryOptions, StoryWorld
from gitopsbot.sandbox.story_bot import BotRunner

RELEASE = "tensor-fusion-sys"
NS = "tensor-fusion-sys"
OLD_IMAGE = "tensorfusion/tensor-fusion-hypervisor:2.13.0"
NEW_IMAGE = "tensorfusion/tensor-fusion-hypervisor:2.15.0"


def _requirements() -> str:
    if shutil.which("git") is None:
        return "git is not installed"
    if not _git_exec_path().is_file() and not HTTP_BACKEND.is_file():
        return "git-http-backend is not installed"
    return ""


@pytest.fixture(autouse=True)
def _needs_git() -> None:
    reason = _requirements()
    if reason:
        pytest.skip(reason)


@pytest.fixture(autouse=True)
def _uses_binaries(binaries: dict[str, Path]) -> None:
    """The pinned helm 4 and kubectl (tests/conftest.py) must be available."""


@dataclass
class Watch:
    """Records the bot's passes; ``until`` blocks until one matches (or times out)."""

    passes: list[tuple[PassResult, Journal | None]] = field(default_factory=list)
    changed: threading.Condition = field(default_factory=threading.Condition)

    def __call__(self, result: PassResult, journal: Journal | None) -> None:
        with self.changed:
            self.passes.append((result, journal))
            self.changed.notify_all()

    def until(
        self,
        what: str,
        match: Callable[[PassResult, Journal | None], bool],
        timeout: float = 180.0,
    ) -> tuple[PassResult, Journal | None]:
        deadline = time.monotonic() + timeout
        seen = 0
        with self.changed:
            while True:
                for result, journal in self.passes[seen:]:
                    if match(result, journal):
                        return result, journal
                seen = len(self.passes)
                left = deadline - time.monotonic()
                if left <= 0:
                    last = self.passes[-1][0] if self.passes else None
                    pytest.fail(f"timed out waiting for {what}; last pass: {last}")
                self.changed.wait(min(left, 1.0))


def held_by_window(pool: str) -> Callable[[PassResult, Journal | None], bool]:
    """A pass where ``pool``'s phase waits for its window while the pools before it are done."""

    def match(result: PassResult, journal: Journal | None) -> bool:
        if journal is None or result.action != "pools":
            return False
        step = f"pool/{pool}/hypervisor"
        try:
            phase = journal.phase(step)
        except KeyError:
            return False
        return phase.state is PhaseState.PENDING and f"{step} wait" in result.detail

    return match


def stop_within(stop: Callable[[], None], what: str, timeout: float = 90.0) -> None:
    """Run ``stop`` with a deadline: a hang in shutdown is reported with every thread's
    stack instead of blocking the suite."""
    worker = threading.Thread(target=stop, name=f"stop {what}", daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        faulthandler.dump_traceback(all_threads=True)
        pytest.fail(f"{what} did not stop within {timeout:.0f}s (thread stacks on stderr)")


BACKENDS = ["emulator", pytest.param("realkube", marks=pytest.mark.realkube)]


@pytest.fixture(scope="module", params=BACKENDS)
def story_backend(request: pytest.FixtureRequest) -> dict[str, Any]:
    """The StoryOptions fields that choose the cluster: none for the emulator, the session's
    real control plane for ``realkube`` (the world deletes what it made there when it stops)."""
    if request.param == "realkube":
        return {"control_plane": request.getfixturevalue("control_plane")}
    return {}


@pytest.fixture
def make_world(tmp_path: Path) -> Iterator[Callable[..., StoryWorld]]:
    """``make_world(**StoryOptions fields)``: a started world, stopped after the test."""
    worlds: list[StoryWorld] = []

    def make(**changes: object) -> StoryWorld:
        options = StoryOptions(state_dir=tmp_path / f"world{len(worlds)}", **changes)  # type: ignore[arg-type]
        world = StoryWorld(options)
        worlds.append(world)
        return world.start()

    yield make
    for world in worlds:
        stop_within(world.stop, "the story world")


@pytest.fixture
def make_bot() -> Iterator[Callable[..., BotRunner]]:
    """``make_bot(world, **BotRunner options)``: a started bot, stopped after the test."""
    bots: list[BotRunner] = []

    def make(world: StoryWorld, **kwargs: object) -> BotRunner:
        bot = BotRunner(world, **kwargs)  # type: ignore[arg-type]
        bots.append(bot)
        return bot.start()

    yield make
    for bot in bots:
        stop_within(bot.stop, "the bot")


def helm_history(world: StoryWorld) -> list[dict[str, object]]:
    out = world.helm("history", RELEASE, "--namespace", NS, "--output", "json")
    history: list[dict[str, object]] = json.loads(out)
    return history


def crd_text(world: StoryWorld, name: str) -> str:
    crd = world.store().get("apiextensions.k8s.io/v1", "CustomResourceDefinition", None, name)
    assert crd is not None, f"CRD {name} is missing"
    return json.dumps(crd)


def pool_policies(world: StoryWorld) -> dict[str, dict[str, object]]:
    """Pool name → the TensorFusionCluster's nodePoolRollingUpdatePolicy, as the controller
    reads it (F1: the switches and batch settings it acts on)."""
    found = world.store().list("tensor-fusion.ai/v1", "TensorFusionCluster")
    assert found, "no TensorFusionCluster"
    out: dict[str, dict[str, object]] = {}
    for pool in (found[0].get("spec") or {}).get("gpuPools") or []:
        template = pool.get("specTemplate") or {}
        manager = template.get("nodeManagerConfig") or {}
        out[str(pool["name"])] = dict(manager.get("nodePoolRollingUpdatePolicy") or {})
    return out
