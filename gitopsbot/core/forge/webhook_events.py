"""Webhook deliveries from GitHub, GitLab and Gitea/Forgejo: verification and parsing.

Pure: bytes and headers in, a verdict or a ``WebhookEvent`` out. The receiver
(gitopsbot.adapters.webhooks) does the HTTP; this module decides what a delivery means.

Verification, per provider documentation:
* GitHub: ``X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the raw body, keyed by the secret>``;
* GitLab: ``X-Gitlab-Token: <the secret itself>`` (compared in constant time);
* Gitea: ``X-Gitea-Signature: <hex HMAC-SHA256 of the raw body>`` (Forgejo:
  ``X-Forgejo-Signature``, same value).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class WebhookProvider(StrEnum):
    GITHUB = "github"
    GITLAB = "gitlab"
    GITEA = "gitea"


class EventKind(StrEnum):
    PUSH = "push"
    PULL_REQUEST = "pull_request"


@dataclass(frozen=True, slots=True)
class WebhookEvent:
    """What a delivery tells the reconcile loop; a nudge, not a source of truth."""

    provider: WebhookProvider
    kind: EventKind
    branch: str  # the pushed branch, or the request's source branch
    sha: str  # the pushed commit, or the request's head commit
    number: int | None = None  # pull/merge request number (iid on GitLab)
    action: str = ""  # provider's action, normalised: opened, updated, closed, merged, ...
    merged: bool = False
    merge_commit_sha: str = ""
    base: str = ""
    delivery: str = ""  # the provider's delivery id, for logs


class PayloadError(ValueError):
    """The delivery verified but its body is not the event it claims to be."""


def github_signature(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def gitea_signature(secret: str, body: bytes) -> str:
    return hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def verify(provider: WebhookProvider, headers: Mapping[str, str], body: bytes, secret: str) -> str:
    """ "" when the delivery is authentic, else the reason it is not (never the secret).

    ``headers`` keys are lower-case. An empty secret rejects everything: unsigned
    deliveries are never accepted.
    """
    if not secret:
        return "no webhook secret configured for " + provider.value
    if provider is WebhookProvider.GITHUB:
        given = headers.get("x-hub-signature-256", "")
        expected = github_signature(secret, body)
    elif provider is WebhookProvider.GITLAB:
        given = headers.get("x-gitlab-token", "")
        expected = secret
    else:
        given = headers.get("x-gitea-signature") or headers.get("x-forgejo-signature") or ""
        expected = gitea_signature(secret, body)
    if not given:
        return "missing signature header"
    if not hmac.compare_digest(given.strip().encode(), expected.encode()):
        return "bad signature"
    return ""


def event_name(provider: WebhookProvider, headers: Mapping[str, str]) -> str:
    if provider is WebhookProvider.GITHUB:
        return headers.get("x-github-event", "")
    if provider is WebhookProvider.GITLAB:
        return headers.get("x-gitlab-event", "")
    return headers.get("x-gitea-event") or headers.get("x-forgejo-event") or ""


def delivery_id(provider: WebhookProvider, headers: Mapping[str, str]) -> str:
    for key in (
        "x-github-delivery",
        "x-gitlab-event-uuid",
        "x-gitea-delivery",
        "x-forgejo-delivery",
    ):
        if headers.get(key):
            return headers[key]
    return ""


def parse(
    provider: WebhookProvider, headers: Mapping[str, str], body: bytes
) -> WebhookEvent | None:
    """The event in a verified delivery; None for events the bot ignores (ping, tags, ...)."""
    name = event_name(provider, headers)
    try:
        data = json.loads(body)
    except ValueError:
        raise PayloadError("body is not JSON") from None
    if not isinstance(data, dict):
        raise PayloadError("body is not a JSON object")
    delivery = delivery_id(provider, headers)
    try:
        if provider is WebhookProvider.GITLAB:
            return _gitlab(name, data, delivery)
        return _github_like(provider, name, data, delivery)
    except (KeyError, TypeError, AttributeError) as err:
        raise PayloadError(f"{name or 'event'} payload lacks {err}") from None


def _branch(ref: str) -> str | None:
    return ref.removeprefix("refs/heads/") if ref.startswith("refs/heads/") else None


def _github_like(
    provider: WebhookProvider, name: str, data: dict[str, Any], delivery: str
) -> WebhookEvent | None:
    if name == "push":
        branch = _branch(str(data["ref"]))
        if branch is None:
            return None  # a tag
        return WebhookEvent(
            provider, EventKind.PUSH, branch, str(data.get("after") or ""), delivery=delivery
        )
    if name == "pull_request":
        pr = data["pull_request"]
        merged = bool(pr.get("merged"))
        action = str(data.get("action") or "")
        if action == "closed" and merged:
            action = "merged"
        elif action in ("synchronize", "synchronized"):
            action = "updated"
        return WebhookEvent(
            provider,
            EventKind.PULL_REQUEST,
            str(pr["head"]["ref"]),
            str(pr["head"].get("sha") or ""),
            number=int(data.get("number") or pr["number"]),
            action=action,
            merged=merged,
            merge_commit_sha=str(pr.get("merge_commit_sha") or "") if merged else "",
            base=str(pr["base"]["ref"]),
            delivery=delivery,
        )
    return None


_GITLAB_ACTIONS = {
    "open": "opened",
    "update": "updated",
    "merge": "merged",
    "close": "closed",
    "reopen": "reopened",
}


def _gitlab(name: str, data: dict[str, Any], delivery: str) -> WebhookEvent | None:
    kind = data.get("object_kind") or ""
    if name == "Push Hook" or kind == "push":
        branch = _branch(str(data["ref"]))
        if branch is None:
            return None
        sha = str(data.get("checkout_sha") or data.get("after") or "")
        return WebhookEvent(WebhookProvider.GITLAB, EventKind.PUSH, branch, sha, delivery=delivery)
    if name == "Merge Request Hook" or kind == "merge_request":
        attrs = data["object_attributes"]
        merged = attrs.get("state") == "merged"
        action = str(attrs.get("action") or "")
        return WebhookEvent(
            WebhookProvider.GITLAB,
            EventKind.PULL_REQUEST,
            str(attrs["source_branch"]),
            str((attrs.get("last_commit") or {}).get("id") or ""),
            number=int(attrs["iid"]),
            action=_GITLAB_ACTIONS.get(action, action),
            merged=merged,
            merge_commit_sha=str(attrs.get("merge_commit_sha") or "") if merged else "",
            base=str(attrs.get("target_branch") or ""),
            delivery=delivery,
        )
    return None
