"""Posting to a real local HTTP receiver (adapters.chat_notifier): the Slack and the generic
JSON formats arrive; targets hear only their events and clusters; a burst of 50 halts costs a
bounded number of posts whose text says how many; 500 then 200 is retried; 429 waits for
Retry-After; a receiver that hangs never holds up the announcing pass; a full queue drops the
oldest and says so once; the canary secret (resolved for the cluster, then seen in a failing
step's detail) reaches neither the receiver, nor a log line, nor an exception, and neither
does the webhook URL's token."""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from datetime import UTC, datetime

import httpx
import pytest

from gitopsbot.adapters.chat_notifier import Notifier, SecretMemory, WebhookClient
from gitopsbot.bot.announcer import Announcer
from gitopsbot.core.fleet.model import ForgeSettings, NotificationTarget, SecretRef
from gitopsbot.core.notices.happenings import Happening, HappeningKind
from gitopsbot.core.notices.notifications import PAYLOAD_VERSION, RateLimit
from gitopsbot.core.records import journal as J
from gitopsbot.core.records.journal import OperationKind
from tests.notifications.receiver import Receiver

K = HappeningKind
AT = datetime(2026, 12, 3, 15, 0, tzinfo=UTC)
HOOK_TOKEN = "XOXB-hook-token-4242"
CANARY = "canary-Tk52m-agent-token"
FAST = RateLimit(burst=5, every_seconds=60.0, gather_seconds=0.05)
GITHUB = ForgeSettings(kind="github", url="https://api.github.com", repository="acme/fleet")


def target(
    index: int = 0,
    kind: str = "slack",
    on: tuple[str, ...] = ("halted", "failed", "rollback", "blocked", "succeeded"),
    clusters: tuple[str, ...] = (),
) -> NotificationTarget:
    ref = SecretRef(f"gitopsbot.yaml:{3 + index}: notifications[{index}].url", "env", "HOOK")
    return NotificationTarget(index, kind, ref, on=on, clusters=clusters, line=2 + index)  # type: ignore[arg-type]


def happening(kind: HappeningKind, cluster: str = "prod-1", detail: str = "") -> Happening:
    return Happening(
        kind=kind,
        cluster=cluster,
        op_id=f"{cluster}-abc",
        op_kind=OperationKind.UPGRADE,
        desired_sha="a" * 40,
        pr_number=7,
        detail=detail,
        at=AT,
    )


def client(**kwargs: object) -> WebhookClient:
    kwargs.setdefault("backoff_seconds", 0.05)
    kwargs.setdefault("timeout", httpx.Timeout(2.0))
    return WebhookClient(**kwargs)  # type: ignore[arg-type]


def notifier(receiver: Receiver, *targets: NotificationTarget, **kwargs: object) -> Notifier:
    pairs = [(t, f"{receiver.url}/hooks/{t.index}/{HOOK_TOKEN}") for t in targets]
    kwargs.setdefault("limit", FAST)
    kwargs.setdefault("client", client())
    return Notifier(pairs, forge=GITHUB, **kwargs)  # type: ignore[arg-type]


def test_slack_and_generic_json_arrive(receiver: Receiver) -> None:
    n = notifier(receiver, target(0, "slack"), target(1, "webhook"))
    try:
        n.happened(happening(K.FAILED, detail="helm upgrade: exit 1: timed out"))
        assert n.flush(10)
    finally:
        n.close()
    by_path = {r.path.split("/")[2]: r.json for r in receiver.received}
    slack, hook = by_path["0"], by_path["1"]
    assert set(slack) == {"text", "blocks"}
    assert slack["text"] == (
        "*failed* prod-1: upgrade prod-1-abc failed: helm upgrade: exit 1: timed out "
        "<https://github.com/acme/fleet/pull/7|PR #7>"
    )
    assert hook["version"] == PAYLOAD_VERSION
    (event,) = hook["events"]
    assert event["event"] == "failed" and event["cluster"] == "prod-1"
    assert event["operation"] == {"id": "prod-1-abc", "kind": "upgrade"}
    assert event["pullRequest"]["url"] == "https://github.com/acme/fleet/pull/7"


def test_filter_by_event_kind_and_cluster(receiver: Receiver) -> None:
    n = notifier(receiver, target(0, "webhook", on=("failed", "blocked"), clusters=("prod-*",)))
    try:
        n.happened(happening(K.POOL_HALTED, "prod-1"))  # not subscribed
        n.happened(happening(K.FAILED, "staging"))  # not a prod cluster
        n.happened(happening(K.STEP_STARTED, "prod-1"))  # not notable
        n.happened(happening(K.BLOCKED, "prod-2", detail="R3 refuses"))
        assert n.flush(10)
    finally:
        n.close()
    events = [e for body in receiver.bodies() for e in body["events"]]
    assert [(e["event"], e["cluster"]) for e in events] == [("blocked", "prod-2")]


def test_a_burst_of_50_halts_is_a_bounded_number_of_posts(receiver: Receiver) -> None:
    limit = RateLimit(burst=2, every_seconds=60.0, gather_seconds=0.5)
    n = notifier(receiver, target(0, "slack"), limit=limit)
    try:
        for _ in range(50):
            n.happened(happening(K.POOL_HALTED, detail="no progress for 10m"))
        for i in range(30):  # and 30 different clusters at once
            n.happened(happening(K.POOL_HALTED, f"prod-{i + 10}", detail="no progress for 10m"))
        assert n.flush(10)
    finally:
        n.close()
    texts = [b["text"] for b in receiver.bodies()]
    assert 1 <= len(texts) <= 2, texts
    joined = "\n".join(texts)
    assert "(×50)" in joined and "49 identical ones coalesced" in joined
    assert "… and 11 more" in joined  # 1 + 30 lines, 20 shown


def test_the_rate_limit_holds_back_and_says_what_was_not_posted(
    receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    limit = RateLimit(burst=1, every_seconds=3600.0, gather_seconds=0.0)
    n = notifier(receiver, target(0, "slack"), limit=limit)
    n.happened(happening(K.FAILED, "prod-1"))
    assert n.flush(10)
    n.happened(happening(K.FAILED, "prod-2"))  # the bucket is empty for an hour
    with caplog.at_level(logging.WARNING):
        n.close(timeout=0.3)
    assert len(receiver.received) == 1
    assert "notifications[0] (slack): 1 notification(s) not posted: stopping" in caplog.text


def test_500_then_200_is_retried(receiver: Receiver) -> None:
    receiver.script = [(500, {}), (502, {})]
    n = notifier(receiver, target(0, "webhook"))
    try:
        n.happened(happening(K.SUCCEEDED))
        assert n.flush(10)
    finally:
        n.close()
    assert len(receiver.received) == 3 and n.posts == 1
    assert receiver.received[0].body == receiver.received[2].body


def test_429_waits_for_retry_after(receiver: Receiver) -> None:
    receiver.script = [(429, {"Retry-After": "1"})]
    n = notifier(receiver, target(0, "slack"))
    try:
        n.happened(happening(K.SUCCEEDED))
        assert n.flush(10)
    finally:
        n.close()
    first, second = receiver.received
    assert second.at - first.at >= 0.95 and n.posts == 1


def test_retries_are_bounded_and_the_log_names_the_target_only(
    receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    receiver.script = [(503, {})] * 10
    n = notifier(receiver, target(0, "slack"), client=client(attempts=3))
    with caplog.at_level(logging.DEBUG):
        n.happened(happening(K.FAILED))
        assert n.flush(10)
        n.close()
    assert len(receiver.received) == 3 and n.posts == 0
    assert (
        "gitopsbot.yaml:2: notifications[0] (slack): HTTP 503 (3 attempts); "
        "1 notification(s) not delivered"
    ) in caplog.text
    assert HOOK_TOKEN not in caplog.text


def test_a_retry_after_past_the_bound_is_given_up(
    receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    receiver.script = [(429, {"Retry-After": "3600"})]
    n = notifier(receiver, target(0, "slack"))
    with caplog.at_level(logging.WARNING):
        n.happened(happening(K.FAILED))
        assert n.flush(10)
        n.close()
    assert len(receiver.received) == 1
    assert "Retry-After 3600s is past the 60s the bot waits" in caplog.text


def _failing_journal() -> J.Journal:
    j = J.Journal(
        op_id="prod-1-abc",
        kind=J.OperationKind.UPGRADE,
        cluster="prod-1",
        desired_sha="a" * 40,
        created_at=AT,
        status=J.OperationStatus.RUNNING,
        pr_number=7,
        steps=(J.Step("helm-upgrade", J.StepKind.HELM_UPGRADE),),
    )
    return j


def _failed(j: J.Journal, detail: str) -> J.Journal:
    step = replace(
        j.step("helm-upgrade"),
        state=J.StepState.FAILED,
        started_at=AT,
        finished_at=AT,
        detail=detail,
    )
    return replace(j.with_step(step), status=J.OperationStatus.FAILED, failure=detail)


def test_a_hanging_receiver_never_holds_up_the_pass(
    receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    receiver.hang.set()
    n = notifier(
        receiver,
        target(0, "slack"),
        target(1, "webhook"),
        client=client(attempts=1, timeout=httpx.Timeout(2.0)),
    )
    announcer = Announcer([n])
    running = _failing_journal()
    announcer.announce(running)
    started = time.monotonic()
    told = announcer.announce(_failed(running, "helm upgrade: exit 1"))
    elapsed = time.monotonic() - started
    assert any(h.kind is K.FAILED for h in told)
    assert elapsed < 0.5, f"announcing took {elapsed:.3f}s (the receiver hangs for 2 s)"
    with caplog.at_level(logging.WARNING):
        assert n.flush(10)
        n.close()
    assert "notifications[0] (slack): timed out (1 attempts)" in caplog.text
    receiver.released.set()


def test_a_full_queue_drops_the_oldest_and_says_so_once(
    receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    receiver.hang.set()
    n = notifier(
        receiver,
        target(0, "webhook"),
        queue_size=5,
        client=client(attempts=1, timeout=httpx.Timeout(1.0)),
        limit=RateLimit(burst=5, every_seconds=60.0, gather_seconds=0.0),
    )
    with caplog.at_level(logging.WARNING):
        n.happened(happening(K.FAILED, "first"))
        deadline = time.monotonic() + 5
        while not receiver.received and time.monotonic() < deadline:
            time.sleep(0.01)
        for i in range(20):  # while the first post hangs
            n.happened(happening(K.FAILED, f"c{i}"))
        receiver.hang.clear()
        receiver.released.set()
        assert n.flush(10)
        n.close()
    assert caplog.text.count("queue full (5)") == 1
    last = receiver.bodies()[-1]
    assert last["dropped"] == 15 and len(last["events"]) == 5
    assert [e["cluster"] for e in last["events"]] == [f"c{i}" for i in range(15, 20)]


def test_the_canary_secret_never_leaves(
    receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    memory = SecretMemory()

    class Resolver:
        def resolve_all(self, refs: object) -> dict[str, str]:
            return {"agent.enrollToken": CANARY}

    # The executor's secrets go through the memory (as gitopsbot.app wires it): resolved for prod-1.
    assert memory.recording("prod-1", Resolver()).resolve_all([]) == {"agent.enrollToken": CANARY}
    receiver.script = [(500, {})]
    n = notifier(
        receiver,
        target(0, "slack"),
        target(1, "webhook"),
        secrets_for=memory.values,
    )
    announcer = Announcer([n])
    running = _failing_journal()
    detail = (
        f'helm upgrade: Error: spec.token: Invalid value: "{CANARY}" '
        f"(posting to {receiver.url}/hooks/0/{HOOK_TOKEN})"
    )
    with caplog.at_level(logging.DEBUG):
        announcer.announce(running)
        announcer.announce(_failed(running, detail))
        assert n.flush(10)
        n.close()
    raw = receiver.raw()
    assert b'Invalid value: \\"***\\"' in raw or b'Invalid value: \\"***\\"' in raw, raw
    assert CANARY.encode() not in raw
    assert HOOK_TOKEN.encode() not in b"\n".join(r.body for r in receiver.received)
    assert CANARY not in caplog.text and HOOK_TOKEN not in caplog.text
    assert n.posts == 2


def test_a_registry_password_in_a_helm_error_reaches_notifications_masked(
    receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ``chartRegistries`` password, quoted by a helm error in a failing step's detail,
    reaches the chat masked: ``gitopsbot run`` gives the notifier (and Kubernetes Events)
    ``app.bot.masked_secrets``, the forge's secrets and the registries' passwords (#30)."""
    from gitopsbot.app.bot import masked_secrets
    from gitopsbot.app.clusters import registry_logins
    from gitopsbot.core.fleet.settings_file import parse_settings

    password = "reg-canary-Qx81-pass"
    monkeypatch.setenv("GITOPSBOT_TEST_REGISTRY_PASSWORD", password)
    settings = parse_settings(
        "chartRegistries:\n- host: registry.example.com\n  username: reader\n"
        "  password: {env: GITOPSBOT_TEST_REGISTRY_PASSWORD}\n"
    )
    n = notifier(
        receiver, target(0, "slack"), secrets=masked_secrets(settings, registry_logins(settings))
    )
    running = _failing_journal()
    detail = (
        "helm upgrade: Error: failed to authorize: "
        f"https://reader:{password}@registry.example.com/v2/charts/tensor-fusion: 401"
    )
    announcer = Announcer([n])
    announcer.announce(running)
    announcer.announce(_failed(running, detail))
    assert n.flush(10)
    n.close()
    raw = receiver.raw()
    assert b"reader:***@registry.example.com" in raw, raw
    assert password.encode() not in raw
