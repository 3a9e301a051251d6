"""Credential rotation in the sandbox (issue 15, R17-R20), with real helm 4, kubectl, git and
the controller simulator over HTTP: a person pushes a change of ``credentials.yaml`` to main
and the bot runs a rotation operation.

- agent token (R18): helm upgrade with the token from its source, controller restart, and the
  cluster-agent's log read until it says connected; a token the console refuses fails the
  operation at once (never rolled back).
- vendor keys (R19): Secret ``tf-cloud-vendor-credentials`` replaced server-side, controller
  restarted and rolled out.
- GreptimeDB password (R20): helm upgrade, controller restart, and the hypervisor pods of the
  pool whose vector sidecar is on deleted in batches and recreated; the other pool untouched.

Each story carries canary values: they reach the cluster and nothing else (Git, the state
branch and its journal and backup, the forge, the bot's log, Events, files on disk).
"""

from __future__ import annotations

import base64
import json
import logging
import subprocess
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest

from gitopsbot import app
from gitopsbot.bot.journal_store import JournalStore
from gitopsbot.core.fleet.model import BotSettings
from gitopsbot.core.records.journal import (
    Journal,
    OperationKind,
    OperationStatus,
    StepKind,
    StepState,
)
from gitopsbot.sandbox.story import StoryWorld, git
from gitopsbot.sandbox.story_bot import BotRunner
from gitopsbot.sandbox.story_fleet import CLUSTER
from gitopsbot.sandbox.story_waits import finished_op, wait_for
from tests.e2e.conftest import NS

pytestmark = pytest.mark.slow

AGENT_OK = "canary-enroll-ok-4f1c9d2e"
AGENT_BAD = "canary-enroll-revoked-77a0b3"
ACCESS_KEY = "canary-vendor-ak-51e0"
SECRET_KEY = "canary-vendor-sk-9b3f"
GREPTIME = "canary-greptime-pw-c0d4"
CREDENTIALS = f"clusters/{CLUSTER}/credentials.yaml"


def push_credentials(world: StoryWorld, text: str, message: str) -> str:
    """A person commits ``credentials.yaml`` to main and pushes it (no pull request)."""
    h = world.human
    git("fetch", "--quiet", "origin", cwd=h)
    git("checkout", "--quiet", "main", cwd=h)
    git("merge", "--quiet", "--ff-only", "origin/main", cwd=h)
    path = h / CREDENTIALS
    path.write_text(text)
    git("add", CREDENTIALS, cwd=h)
    git("commit", "--quiet", "-m", message, cwd=h)
    git("push", "--quiet", "origin", "main", cwd=h)
    return git("rev-parse", "HEAD", cwd=h).strip()


def rotate_by_pull_request(world: StoryWorld, text: str, title: str) -> tuple[int, str]:
    """As a team does it: a branch changing credentials.yaml, a pull request with the plan
    comment (``gitopsbot comment``), merged. Returns (number, merge commit)."""
    h = world.human
    git("fetch", "--quiet", "origin", cwd=h)
    git("checkout", "--quiet", "-B", "rotate", "origin/main", cwd=h)
    (h / CREDENTIALS).write_text(text)
    git("add", CREDENTIALS, cwd=h)
    git("commit", "--quiet", "-m", title, cwd=h)
    git("push", "--quiet", "--force", "origin", "rotate", cwd=h)
    git("checkout", "--quiet", "main", cwd=h)
    assert world.forge is not None
    number = world.forge.new_pull(head="rotate", base="main", title=title, body="").number
    repo = world.git_repo("commenter")
    wiring = app.ProposalWiring(repo, world.forge_client(), BotSettings())
    _info, plan = app.proposer(wiring, "main", [], charts=world.chart_source()).comment(
        CLUSTER, number
    )
    assert plan.decision.value == "allowed", plan.verdicts
    assert any(s.kind.value == "agent-reconnect" for s in plan.steps)
    return number, world.merge(number)


def edit_values(world: StoryWorld, edit: Callable[[str], str], message: str) -> str:
    """A person commits an edit of values.yaml to main and pushes it."""
    h = world.human
    git("fetch", "--quiet", "origin", cwd=h)
    git("checkout", "--quiet", "main", cwd=h)
    git("merge", "--quiet", "--ff-only", "origin/main", cwd=h)
    path = h / "clusters" / CLUSTER / "values.yaml"
    path.write_text(edit(path.read_text()))
    git("commit", "--quiet", "-am", message, cwd=h)
    git("push", "--quiet", "origin", "main", cwd=h)
    return git("rev-parse", "HEAD", cwd=h).strip()


def _vector_on(values: str) -> str:
    assert "  extraPools:\n" in values
    return values.replace("  extraPools:\n", "  vectorPools: [shared]\n  extraPools:\n", 1)


def upgraded(world: StoryWorld) -> Journal:
    """The bot's upgrade 1.8.0 -> 1.8.7 from its pull request: the release now holds the
    fleet's values, so what follows changes the credentials alone."""
    world.merge(world.propose().number)
    j = wait_for(world, finished_op(OperationKind.UPGRADE), what="the upgrade", timeout=180)
    assert j.status is OperationStatus.SUCCEEDED
    return j


def finished_for(sha: str) -> Callable[[JournalStore], Journal | None]:
    """The operation of commit ``sha``, once finished."""

    def check(store: JournalStore) -> Journal | None:
        j = store.current(CLUSTER)
        done = j is not None and j.desired_sha == sha
        return (
            j if done and j.status in (OperationStatus.SUCCEEDED, OperationStatus.FAILED) else None
        )

    return check


def rotation_done(after: str = "") -> Callable[[JournalStore], Journal | None]:
    return finished_op(OperationKind.ROTATION, after=after)


def kinds(j: Journal) -> list[tuple[str, str]]:
    return [(s.kind.value, s.state.value) for s in j.steps]


def controller_restarted_at(world: StoryWorld) -> str:
    dep = world.store().get("apps/v1", "Deployment", NS, f"{NS}-controller")
    assert dep is not None
    annotations = dep["spec"]["template"]["metadata"].get("annotations") or {}
    return str(annotations.get("kubectl.kubernetes.io/restartedAt") or "")


def secret_value(world: StoryWorld, name: str, key: str) -> str:
    found = world.store().get("v1", "Secret", NS, name)
    assert found is not None, f"Secret {name} is missing"
    if key in (found.get("stringData") or {}):
        return str(found["stringData"][key])
    return base64.b64decode(found["data"][key]).decode()


def assert_nowhere(
    world: StoryWorld, binary: Path, canaries: Iterable[str], caplog: pytest.LogCaptureFixture
) -> None:
    """The canaries are in no Git object of the fleet repository (main, the state branch with
    its journals and backups, every other ref), no forge text, no log record, no Event and no
    file the story wrote outside the cluster's own store."""
    needles = [c.encode() for c in canaries]
    needles += [base64.b64encode(c.encode()) for c in canaries]
    assert world.remote is not None
    bare = world.remote.root / "fleet.git"
    every = subprocess.run(
        ["git", "-C", str(bare), "log", "--all", "-p", "--format=%H %s%n%b"],
        capture_output=True, check=True,
    ).stdout  # fmt: skip
    assert len(every) > 1000  # the log is read: main and the state branch are there
    assert not [n for n in needles if n in every], "a canary is in the fleet repository"
    assert world.forge is not None
    forge = world.forge
    forge_text = json.dumps(
        [forge.pulls, forge.comments, forge.statuses, forge.log], default=repr
    ).encode()
    assert not [n for n in needles if n in forge_text], "a canary is on the forge"
    logged = "\n".join(r.getMessage() + repr(r.__dict__) for r in caplog.records).encode()
    assert caplog.records and not [n for n in needles if n in logged], "a canary was logged"
    events = subprocess.run(
        [str(binary), "--kubeconfig", str(world.kubeconfig), "get", "events", "-A", "-o", "json"],
        capture_output=True, check=True,
    ).stdout  # fmt: skip
    assert not [n for n in needles if n in events], "a canary is in an Event"
    cluster_store = world.state_dir / "sandbox" / "cluster" / "apiserver-state.json"
    assert cluster_store.is_file()  # the API emulator's etcd: the cluster itself
    for path in _files(world.state_dir):
        if path == cluster_store:
            continue
        data = path.read_bytes()
        assert not [n for n in needles if n in data], f"a canary is in {path}"


def _files(root: Path) -> Iterable[Path]:
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink() and path.stat().st_size < 64 << 20:
            yield path


def test_agent_token_rotation_reconnects_and_a_refused_token_fails(
    make_world: Callable[..., StoryWorld],
    make_bot: Callable[..., BotRunner],
    binaries: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("TF_SANDBOX_AGENT_ID", "sandbox-agent-7")
    monkeypatch.setenv("TF_SANDBOX_ENROLL", AGENT_OK)
    world = make_world(window_lead_seconds=None)
    assert world.sandbox is not None
    world.sandbox.set_console_tokens(frozenset({AGENT_OK}))
    make_bot(world)
    upgraded(world)
    # The references added with the counter raised: rotated now (added alone: adoption).
    number, first = rotate_by_pull_request(
        world,
        "rotation: 1\n"
        "secrets:\n"
        "  agent.agentId:\n    env: TF_SANDBOX_AGENT_ID\n"
        "  agent.enrollToken:\n    env: TF_SANDBOX_ENROLL\n",
        "rotate the agent token (R18)",
    )
    j = wait_for(world, rotation_done(), what="the agent token rotation", timeout=180)
    assert j.desired_sha == first
    assert j.status is OperationStatus.SUCCEEDED, kinds(j)
    assert kinds(j) == [
        ("backup", "succeeded"),
        ("helm-upgrade", "succeeded"),
        ("controller-restart", "succeeded"),
        ("controller-ready", "succeeded"),
        ("agent-reconnect", "succeeded"),
        ("verify", "succeeded"),
    ]
    # The token is in the cluster, in the Secret the chart renders from the values.
    assert secret_value(world, f"{NS}-agent", "enrollToken") == AGENT_OK
    assert controller_restarted_at(world)

    # The vendor revoked the old token; the new one is not yet accepted by the console. The
    # bot's check reads the agent's refusal and fails the operation at once; nothing rolls
    # back (the old token would be refused too).
    monkeypatch.setenv("TF_SANDBOX_ENROLL", AGENT_BAD)
    again, second = rotate_by_pull_request(
        world,
        "rotation: 2\n"
        "secrets:\n"
        "  agent.agentId:\n    env: TF_SANDBOX_AGENT_ID\n"
        "  agent.enrollToken:\n    env: TF_SANDBOX_ENROLL\n",
        "rotate the agent token again (R18)",
    )
    failed = wait_for(world, rotation_done(after=j.op_id), what="the refused token", timeout=180)
    assert failed.desired_sha == second
    assert failed.status is OperationStatus.FAILED
    step = next(s for s in failed.steps if s.kind is StepKind.AGENT_RECONNECT)
    assert step.state is StepState.FAILED
    assert "refused" in step.detail or "rejected" in step.detail, step.detail
    history = json.loads(world.helm("history", NS, "--namespace", NS, "--output", "json"))
    assert not [h for h in history if "rollback" in str(h.get("description", "")).lower()]
    assert secret_value(world, f"{NS}-agent", "enrollToken") == AGENT_BAD  # not put back

    # Both pull requests carry the plan and the operation's progress, the failure included.
    assert world.forge is not None
    forge = world.forge

    def said(n: int) -> str:
        return "\n".join(c.body for c in list(forge.comments.values()) if c.number == n)

    _until(lambda: "— **failed**" in said(again), "the failure on the pull request", 60)
    assert "`agent-reconnect` | ✓ succeeded" in said(number)
    assert "Check the cluster-agent log reports a connection" in said(again)
    assert "`agent-reconnect` | ✗ failed" in said(again), said(again)
    assert_nowhere(world, binaries["kubectl"], [AGENT_OK, AGENT_BAD], caplog)


def test_vendor_keys_then_greptime_password_with_the_vector_sidecar_on_one_pool(
    make_world: Callable[..., StoryWorld],
    make_bot: Callable[..., BotRunner],
    binaries: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("TF_SANDBOX_AK", ACCESS_KEY)
    monkeypatch.setenv("TF_SANDBOX_SK", SECRET_KEY)
    monkeypatch.setenv("TF_SANDBOX_GREPTIME", GREPTIME)
    monkeypatch.setenv("TF_SANDBOX_GREPTIME_OLD", "greptime-old-password")
    world = make_world(window_lead_seconds=None, batch_percentage=34, batch_interval="2s")
    make_bot(world)
    upgraded(world)
    vendor = (
        "rotation: 1\n"
        "secrets:\n"
        "  cloudVendorCredentials.accessKey:\n    env: TF_SANDBOX_AK\n"
        "  cloudVendorCredentials.secretKey:\n    env: TF_SANDBOX_SK\n"
    )
    # The GreptimeDB password is referenced from the start, at its old source.
    old_greptime = "  greptime.password:\n    env: TF_SANDBOX_GREPTIME_OLD\n"
    first = push_credentials(world, vendor + old_greptime, "rotate the cloud vendor keys (R19)")
    j = wait_for(world, rotation_done(), what="the vendor key rotation", timeout=180)
    assert j.desired_sha == first
    assert j.status is OperationStatus.SUCCEEDED, kinds(j)
    assert kinds(j) == [
        ("backup", "succeeded"),
        ("helm-upgrade", "succeeded"),
        ("vendor-secret", "succeeded"),
        ("controller-restart", "succeeded"),
        ("controller-ready", "succeeded"),
        ("hypervisor-restart", "skipped"),  # the counter rotates GreptimeDB's too; vector off
        ("hypervisor-restart", "skipped"),
        ("verify", "succeeded"),
    ]
    assert secret_value(world, "tf-cloud-vendor-credentials", "ak") == ACCESS_KEY
    assert secret_value(world, "tf-cloud-vendor-credentials", "sk") == SECRET_KEY
    restarted = controller_restarted_at(world)
    assert restarted

    # A person turns the vector sidecar on in pool shared (the sandbox chart 1.8.7's
    # cluster.vectorPools; pool-2 keeps it off), a change of its own.
    on = edit_values(world, _vector_on, "the vector sidecar on in pool shared")
    v = wait_for(world, finished_for(on), what="the vector sidecar on", timeout=180)
    assert v.status is OperationStatus.SUCCEEDED
    _until(lambda: _vector(world, "shared"), "the GPUPool's enableVector")
    assert not _vector(world, "pool-2")
    before = {p: _hypervisors(world, p) for p in ("shared", "pool-2")}
    assert len(before["shared"]) == 3 and len(before["pool-2"]) == 3

    second = push_credentials(
        world, vendor + "  greptime.password:\n    env: TF_SANDBOX_GREPTIME\n",
        "rotate the GreptimeDB password (R20): its new source",
    )  # fmt: skip
    g = wait_for(world, rotation_done(after=j.op_id), what="the greptime rotation", timeout=240)
    assert g.desired_sha == second
    assert g.status is OperationStatus.SUCCEEDED, kinds(g)
    assert _vector(world, "shared"), "the rotation's helm upgrade turned the vector sidecar off"
    assert kinds(g) == [
        ("backup", "succeeded"),
        ("helm-upgrade", "succeeded"),
        ("controller-restart", "succeeded"),
        ("controller-ready", "succeeded"),
        ("hypervisor-restart", "succeeded"),
        ("hypervisor-restart", "skipped"),
        ("verify", "succeeded"),
    ]
    shared, other = (s for s in g.steps if s.kind is StepKind.HYPERVISOR_RESTART)
    assert (shared.pool, other.pool) == ("shared", "pool-2")
    assert "vector" in other.detail
    assert controller_restarted_at(world) != restarted
    after = {p: _hypervisors(world, p) for p in ("shared", "pool-2")}
    # Every hypervisor pod of shared is new (the controller recreated what the bot deleted);
    # pool-2's are the same pods.
    assert len(after["shared"]) == 3 and not set(after["shared"]) & set(before["shared"])
    assert after["pool-2"] == before["pool-2"]
    # In batches of ceil(34% of 3) = 2, then the last one once they are back and 2s passed.
    batches = [
        r.getMessage()
        for r in caplog.records
        if r.name == "gitopsbot.bot.steps.rotation" and "deleting" in r.getMessage()
    ]
    assert batches == [
        f"{CLUSTER}: pool shared: deleting 2 of 3 old hypervisor pod(s)",
        f"{CLUSTER}: pool shared: deleting 1 of 1 old hypervisor pod(s)",
    ]

    assert_nowhere(world, binaries["kubectl"], [ACCESS_KEY, SECRET_KEY, GREPTIME], caplog)


def _hypervisors(world: StoryWorld, pool: str) -> dict[str, str]:
    """uid → name of pool ``pool``'s hypervisor pods that are not being deleted."""
    label = {
        "tensor-fusion.ai/component": "hypervisor",
        f"tensor-fusion.ai/pool-tensor-fusion-{pool}": "true",
    }
    pods = world.store().list("v1", "Pod", NS)
    return {
        p["metadata"]["uid"]: p["metadata"]["name"]
        for p in pods
        if all((p["metadata"].get("labels") or {}).get(k) == v for k, v in label.items())
        and not p["metadata"].get("deletionTimestamp")
    }


def _vector(world: StoryWorld, pool: str) -> bool:
    gp = world.store().get("tensor-fusion.ai/v1", "GPUPool", None, f"tensor-fusion-{pool}")
    spec = (gp or {}).get("spec") or {}
    return bool(((spec.get("componentConfig") or {}).get("hypervisor") or {}).get("enableVector"))


def _until(check: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)
