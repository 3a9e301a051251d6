"""What chat is told, decided purely (core.notifications): which happenings are events, which
targets want them (events, cluster globs), the pull request's link per forge, the token
bucket as a function of times, coalescing, and both wire formats."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gitopsbot.core.fleet.model import ForgeSettings, NotificationTarget, SecretRef
from gitopsbot.core.notices.happenings import Happening, HappeningKind
from gitopsbot.core.notices.notifications import (
    PAYLOAD_VERSION,
    Bucket,
    RateLimit,
    coalesce,
    event_of,
    full,
    matches,
    message_of,
    pull_request_url,
    slack_payload,
    take,
    webhook_payload,
)
from gitopsbot.core.records.journal import OperationKind

K = HappeningKind
AT = datetime(2026, 12, 3, 15, 0, tzinfo=UTC)


def happening(
    kind: HappeningKind,
    cluster: str = "prod-1",
    *,
    op_kind: OperationKind = OperationKind.UPGRADE,
    detail: str = "",
) -> Happening:
    return Happening(
        kind=kind,
        cluster=cluster,
        op_id=f"{cluster}-abc",
        op_kind=op_kind,
        desired_sha="a" * 40,
        pr_number=7,
        pool="a" if kind is K.POOL_HALTED else "",
        component="hypervisor" if kind is K.POOL_HALTED else "",
        step="pool/a/hypervisor" if kind is K.POOL_HALTED else "",
        progress=40 if kind is K.POOL_HALTED else None,
        detail=detail,
        at=AT,
    )


def target(on: tuple[str, ...] | None = None, clusters: tuple[str, ...] = ()) -> NotificationTarget:
    ref = SecretRef("gitopsbot.yaml:3: notifications[0].url", "env", "HOOK")
    if on is None:
        return NotificationTarget(0, "slack", ref, clusters=clusters, line=2)
    return NotificationTarget(0, "slack", ref, on=on, clusters=clusters, line=2)


@pytest.mark.parametrize(
    ("kind", "op_kind", "event"),
    [
        (K.POOL_HALTED, OperationKind.UPGRADE, "halted"),
        (K.FAILED, OperationKind.UPGRADE, "failed"),
        (K.BLOCKED, OperationKind.UPGRADE, "blocked"),
        (K.SUCCEEDED, OperationKind.UPGRADE, "succeeded"),
        (K.SUCCEEDED, OperationKind.ROLLBACK, "succeeded"),
        (K.STARTED, OperationKind.ROLLBACK, "rollback"),
        (K.STARTED, OperationKind.UPGRADE, None),
        (K.STEP_FAILED, OperationKind.UPGRADE, None),  # told by the operation's failure
        (K.POOL_PROGRESS, OperationKind.UPGRADE, None),
        (K.QUEUED, OperationKind.UPGRADE, None),
    ],
)
def test_events(kind: HappeningKind, op_kind: OperationKind, event: str | None) -> None:
    assert event_of(happening(kind, op_kind=op_kind)) == event


def test_matches_by_event_and_cluster_glob() -> None:
    t = target(on=("failed", "halted"), clusters=("prod-*", "lab"))
    assert matches(t, happening(K.FAILED, "prod-1"))
    assert matches(t, happening(K.POOL_HALTED, "lab"))
    assert not matches(t, happening(K.FAILED, "staging"))
    assert not matches(t, happening(K.SUCCEEDED, "prod-1"))
    assert not matches(t, happening(K.POOL_PROGRESS, "prod-1"))
    assert matches(target(), happening(K.SUCCEEDED, "anything"))


@pytest.mark.parametrize(
    ("kind", "url", "link"),
    [
        ("github", "https://api.github.com", "https://github.com/acme/fleet/pull/7"),
        ("github", "", "https://github.com/acme/fleet/pull/7"),
        ("github", "https://ghe.example.com/api/v3", "https://ghe.example.com/acme/fleet/pull/7"),
        (
            "gitlab",
            "https://gitlab.example.com",
            "https://gitlab.example.com/acme/fleet/-/merge_requests/7",
        ),
        ("gitlab", "", "https://gitlab.com/acme/fleet/-/merge_requests/7"),
        ("gitea", "http://127.0.0.1:3000/api/v1", "http://127.0.0.1:3000/acme/fleet/pulls/7"),
        ("gitea", "", ""),
        ("git-only", "", ""),
    ],
)
def test_pull_request_links(kind: str, url: str, link: str) -> None:
    forge = ForgeSettings(kind=kind, url=url, repository="acme/fleet")  # type: ignore[arg-type]
    assert pull_request_url(forge, 7) == link
    assert pull_request_url(forge, None) == ""


def test_token_bucket_is_a_function_of_times() -> None:
    limit = RateLimit(burst=2, every_seconds=10.0)
    b = full(limit, 100.0)
    b, wait = take(b, 100.0, limit)
    assert wait == 0
    b, wait = take(b, 100.0, limit)
    assert wait == 0
    b, wait = take(b, 100.0, limit)
    assert wait == pytest.approx(10.0)
    b, wait = take(b, 105.0, limit)
    assert wait == pytest.approx(5.0)
    b, wait = take(b, 110.0, limit)
    assert wait == 0 and b.tokens == pytest.approx(0.0)
    # Never more than the burst, however long it was idle.
    assert take(Bucket(0.0, 0.0), 1e6, limit)[0].tokens == pytest.approx(1.0)


def test_message_payloads() -> None:
    h = happening(K.POOL_HALTED, detail="no progress for 10m: node gpu-1 Pending")
    m = message_of(h, detail=h.detail, pr_url="https://github.com/acme/fleet/pull/7")
    assert m.event == "halted" and m.text.startswith("prod-1: upgrade prod-1-abc: pool a")
    slack = slack_payload(coalesce([m]))
    assert "<https://github.com/acme/fleet/pull/7|PR #7>" in slack["text"]
    assert slack["blocks"][0]["type"] == "section"
    body = webhook_payload(coalesce([m]))
    assert body["version"] == PAYLOAD_VERSION and body["dropped"] == 0
    (event,) = body["events"]
    assert event["event"] == "halted" and event["count"] == 1
    assert event["operation"] == {"id": "prod-1-abc", "kind": "upgrade"}
    assert event["pullRequest"] == {"number": 7, "url": "https://github.com/acme/fleet/pull/7"}
    assert event["detail"] == "no progress for 10m: node gpu-1 Pending"
    assert event["at"] == "2026-12-03T15:00:00+00:00"
    with pytest.raises(ValueError, match="not a notification event"):
        message_of(happening(K.POOL_PROGRESS), detail="")


def test_slack_text_is_escaped_and_detail_bounded() -> None:
    m = message_of(happening(K.FAILED), detail="<!channel> & " + "x" * 5000)
    text = slack_payload(coalesce([m]))["text"]
    assert "&lt;!channel&gt; &amp;" in text and "<!channel>" not in text
    assert len(m.detail) == 1500 and m.detail.endswith("…")


def test_identical_messages_coalesce_with_a_count() -> None:
    a = message_of(happening(K.POOL_HALTED, "prod-1"), detail="d")
    b = message_of(happening(K.POOL_HALTED, "prod-2"), detail="d")
    told = coalesce([a, a, b, a])
    assert [(t.message.cluster, t.count) for t in told] == [("prod-1", 3), ("prod-2", 1)]
    slack = slack_payload(told, dropped=2)
    assert slack["text"].startswith(
        "gitopsbot: 4 notifications, 2 identical ones coalesced, 2 older ones dropped"
    )
    assert "(×3)" in slack["text"]
    body = webhook_payload(told, dropped=2)
    assert [e["count"] for e in body["events"]] == [3, 1] and body["dropped"] == 2


def test_a_long_digest_is_bounded() -> None:
    many = [message_of(happening(K.FAILED, f"c{i}"), detail="") for i in range(50)]
    text = slack_payload(coalesce(many))["text"]
    assert text.count("\n• ") == 21 and "… and 30 more" in text
