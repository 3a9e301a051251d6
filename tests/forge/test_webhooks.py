"""Webhook receiver: per provider, signed deliveries nudge; unsigned or forged ones do not.

Aspects: GitHub X-Hub-Signature-256, GitLab X-Gitlab-Token, Gitea X-Gitea-Signature (and
Forgejo's header); push and merged pull-request events parse to the same WebhookEvent shape;
rejections answer 401 and log without the body; ping and tag pushes are accepted but ignored;
a signed but malformed body is 400; unknown paths 404.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from gitopsbot.adapters.webhooks import WebhookReceiver
from gitopsbot.core.forge.forge_types import PullRequestDraft
from gitopsbot.core.forge.webhook_events import (
    EventKind,
    WebhookEvent,
    WebhookProvider,
    gitea_signature,
    github_signature,
)

SECRET = "whsec-CANARY-7f3a"
BODY_CANARY = "BODY-CANARY-do-not-log"
SHA = "a" * 40
MERGE_SHA = "b" * 40


def push_payload(provider: str) -> dict[str, Any]:
    if provider == "gitlab":
        return {
            "object_kind": "push",
            "ref": "refs/heads/main",
            "checkout_sha": SHA,
            "after": SHA,
            "note": BODY_CANARY,
        }
    return {"ref": "refs/heads/main", "after": SHA, "before": "0" * 40, "note": BODY_CANARY}


def merged_payload(provider: str) -> dict[str, Any]:
    if provider == "gitlab":
        return {
            "object_kind": "merge_request",
            "object_attributes": {
                "iid": 7,
                "source_branch": "gitopsbot/a",
                "target_branch": "main",
                "action": "merge",
                "state": "merged",
                "last_commit": {"id": SHA},
                "merge_commit_sha": MERGE_SHA,
            },
        }
    return {
        "action": "closed",
        "number": 7,
        "pull_request": {
            "number": 7,
            "merged": True,
            "merge_commit_sha": MERGE_SHA,
            "head": {"ref": "gitopsbot/a", "sha": SHA},
            "base": {"ref": "main"},
        },
    }


EVENT_HEADER = {
    "github": ("X-GitHub-Event", {"push": "push", "pr": "pull_request", "ping": "ping"}),
    "gitlab": (
        "X-Gitlab-Event",
        {"push": "Push Hook", "pr": "Merge Request Hook", "ping": "System Hook"},
    ),
    "gitea": ("X-Gitea-Event", {"push": "push", "pr": "pull_request", "ping": "ping"}),
}


def signed(provider: str, kind: str, body: bytes, secret: str = SECRET) -> dict[str, str]:
    name, kinds = EVENT_HEADER[provider]
    headers = {name: kinds[kind], "Content-Type": "application/json"}
    if provider == "github":
        headers["X-Hub-Signature-256"] = github_signature(secret, body)
    elif provider == "gitlab":
        headers["X-Gitlab-Token"] = secret
    else:
        headers["X-Gitea-Signature"] = gitea_signature(secret, body)
    return headers


class Nudges:
    def __init__(self) -> None:
        self.events: list[WebhookEvent] = []
        self.arrived = threading.Event()

    def __call__(self, event: WebhookEvent) -> None:
        self.events.append(event)
        self.arrived.set()


Rx = tuple[WebhookReceiver, httpx.Client, "Nudges"]


@pytest.fixture
def receiver() -> Iterator[Rx]:
    nudges = Nudges()
    secrets = {"github": SECRET, "gitlab": SECRET, "gitea": SECRET}
    with WebhookReceiver(secrets, nudges) as rx, httpx.Client(base_url=rx.url) as client:
        yield rx, client, nudges


PROVIDERS = ["github", "gitlab", "gitea"]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_signed_push_nudges_with_the_branch_and_sha(receiver: Rx, provider: str) -> None:
    _rx, client, nudges = receiver
    body = json.dumps(push_payload(provider)).encode()
    answer = client.post(
        f"/webhooks/{provider}", content=body, headers=signed(provider, "push", body)
    )
    assert answer.status_code == 202
    assert nudges.arrived.wait(10)
    assert nudges.events == [WebhookEvent(WebhookProvider(provider), EventKind.PUSH, "main", SHA)]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_signed_merge_nudges_with_number_and_merge_sha(receiver: Rx, provider: str) -> None:
    _rx, client, nudges = receiver
    body = json.dumps(merged_payload(provider)).encode()
    answer = client.post(
        f"/webhooks/{provider}", content=body, headers=signed(provider, "pr", body)
    )
    assert answer.status_code == 202
    assert nudges.arrived.wait(10)
    (event,) = nudges.events
    assert (event.kind, event.branch, event.number, event.action) == (
        EventKind.PULL_REQUEST,
        "gitopsbot/a",
        7,
        "merged",
    )
    assert event.merged and event.merge_commit_sha == MERGE_SHA and event.base == "main"


# GitLab's token does not sign the body, so "tampered" only applies to GitHub and Gitea.
FORGERIES = [
    (p, f)
    for p in PROVIDERS
    for f in ("missing", "bad", "wrong-secret", "tampered")
    if (p, f) != ("gitlab", "tampered")
]


@pytest.mark.parametrize(("provider", "forgery"), FORGERIES)
def test_unsigned_or_forged_delivery_is_rejected_and_not_logged(
    receiver: Rx, provider: str, forgery: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    rx, client, nudges = receiver
    body = json.dumps(push_payload(provider)).encode()
    headers = signed(
        provider, "push", body, secret="other" if forgery == "wrong-secret" else SECRET
    )
    sig = {
        "github": "X-Hub-Signature-256",
        "gitlab": "X-Gitlab-Token",
        "gitea": "X-Gitea-Signature",
    }[provider]
    if forgery == "missing":
        del headers[sig]
    elif forgery == "bad":
        headers[sig] = "sha256=" + "0" * 64
    elif forgery == "tampered":
        body = body.replace(b"main", b"prod")
    answer = client.post(f"/webhooks/{provider}", content=body, headers=headers)
    assert answer.status_code == 401
    assert rx.stats.rejected == 1 and rx.stats.accepted == 0 and not nudges.events
    messages = [r.getMessage() for r in caplog.records if r.name == "gitopsbot.webhooks"]
    assert any("rejected" in m for m in messages)
    assert not [m for m in messages if BODY_CANARY in m or SECRET in m]


def test_gitlab_token_does_not_sign_the_body(receiver: Rx) -> None:
    """GitLab documents a shared token, not an HMAC: a body change is not detectable."""
    _rx, client, _nudges = receiver
    body = json.dumps(push_payload("gitlab")).encode()
    answer = client.post("/webhooks/gitlab", content=body, headers=signed("gitlab", "push", body))
    assert answer.status_code == 202


def test_forgejo_signature_header_is_accepted(receiver: Rx) -> None:
    _rx, client, nudges = receiver
    body = json.dumps(push_payload("gitea")).encode()
    headers = {"X-Forgejo-Event": "push", "X-Forgejo-Signature": gitea_signature(SECRET, body)}
    assert client.post("/webhooks/gitea", content=body, headers=headers).status_code == 202
    assert nudges.arrived.wait(10)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_ping_and_tag_pushes_are_accepted_but_ignored(receiver: Rx, provider: str) -> None:
    rx, client, nudges = receiver
    ping = json.dumps({"zen": "hi", "object_kind": "system"}).encode()
    assert (
        client.post(
            f"/webhooks/{provider}", content=ping, headers=signed(provider, "ping", ping)
        ).status_code
        == 202
    )
    tag = push_payload(provider) | {"ref": "refs/tags/v1"}
    body = json.dumps(tag).encode()
    assert (
        client.post(
            f"/webhooks/{provider}", content=body, headers=signed(provider, "push", body)
        ).status_code
        == 202
    )
    assert rx.stats.ignored == 2 and not nudges.events


def test_signed_but_malformed_body_is_400(receiver: Rx) -> None:
    _rx, client, nudges = receiver
    body = b'{"action": "closed"}'
    answer = client.post("/webhooks/github", content=body, headers=signed("github", "pr", body))
    assert answer.status_code == 400 and not nudges.events


def test_unknown_path_and_unconfigured_provider(receiver: Rx) -> None:
    _rx, client, _nudges = receiver
    assert client.post("/webhooks/bitbucket", content=b"{}").status_code == 404
    nudges2 = Nudges()
    with WebhookReceiver({"github": SECRET}, nudges2) as only_github:
        body = json.dumps(push_payload("gitea")).encode()
        answer = httpx.post(
            f"{only_github.url}/webhooks/gitea", content=body, headers=signed("gitea", "push", body)
        )
        assert answer.status_code == 401 and not nudges2.events


@pytest.mark.parametrize(
    "provider",
    [*PROVIDERS, pytest.param("realgitea", marks=[pytest.mark.realgitea, pytest.mark.slow])],
)
def test_local_forge_merge_delivers_a_signed_event(
    provider: str, request: pytest.FixtureRequest
) -> None:
    """End to end on loopback: the forge's merge click reaches the receiver's nudge (the
    local forges, and a real Gitea in the ``realgitea`` tier)."""
    from tests.forge.forge_harness import SERVERS, TOKEN, FakeClock, make_client

    kind = "gitea" if provider == "realgitea" else provider
    nudges = Nudges()
    with contextlib.ExitStack() as stack:
        rx = stack.enter_context(WebhookReceiver({kind: SECRET}, nudges))
        srv: Any = (
            request.getfixturevalue("real_gitea_repo")
            if provider == "realgitea"
            else stack.enter_context(SERVERS[provider](token=TOKEN))
        )
        srv.add_webhook(f"{rx.url}/webhooks/{kind}", SECRET)
        pr = make_client(srv, FakeClock()).open_or_update_pull_request(
            PullRequestDraft(branch="gitopsbot/a", base="main", title="t", body="b", marker="a/1")
        )
        merged = srv.merge(pr.number)
        # A real Gitea also announces the opening and the merge's push to main (pushes of the
        # repository's setup may arrive too: they are not counted); the local forges send the
        # merge only.
        sha = merged.merge_commit_sha
        expected = {(EventKind.PULL_REQUEST, "merged", "gitopsbot/a")}
        if provider == "realgitea":
            expected |= {(EventKind.PULL_REQUEST, "opened", "gitopsbot/a")}
            expected |= {(EventKind.PUSH, "", "main")}
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and _seen(nudges, sha) != expected:
            time.sleep(0.05)
        assert _seen(nudges, sha) == expected and not srv.hook_failures
    (event,) = _merges(nudges)
    assert (event.provider.value, event.number, event.branch, event.action) == (
        kind,
        pr.number,
        "gitopsbot/a",
        "merged",
    )
    assert event.merged and event.merge_commit_sha == merged.merge_commit_sha
    assert event.delivery  # a delivery id, for the logs


def _merges(nudges: Nudges) -> list[WebhookEvent]:
    return [e for e in nudges.events if e.action == "merged"]


def _seen(nudges: Nudges, merge_sha: str) -> set[tuple[EventKind, str, str]]:
    """Request events, and pushes of the merge commit."""
    return {
        (e.kind, e.action, e.branch)
        for e in nudges.events
        if e.kind is EventKind.PULL_REQUEST or e.sha == merge_sha
    }
