"""GitHub's published descriptions hold the webhooks of the local forge and the bot's parser.

(The REST side, every request of the GitHub provider and every answer of the local GitHub
forge in the provider contract tests, is checked by the ``harness`` fixture in conftest.py.)

* every webhook the local GitHub forge sends validates against GitHub's webhooks
  description, its headers and its body;
* the bot's webhook parser accepts the description's own payloads for the events it reads:
  the ``ping`` example as it is, and for ``push`` and ``pull_request`` (whose entries carry no
  example) a payload made from the description's schema with only what it requires, each
  field its documented example; a parser that read a field GitHub may leave out would fail;
* the checks themselves refuse what GitHub's description does not have, so a provider that
  drifted from GitHub would fail the contract tests.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from gitopsbot.core.forge.forge_types import PullRequestDraft
from gitopsbot.core.forge.webhook_events import EventKind, WebhookProvider, github_signature, parse
from gitopsbot.sandbox.forges.github import GitHubForge as GitHubServer
from tests.forge import github_openapi
from tests.forge.forge_harness import TOKEN, FakeClock, make_client

SECRET = "whsec-CANARY-openapi"

pytestmark = pytest.mark.usefixtures("descriptions")


@pytest.fixture(scope="module")
def descriptions() -> None:
    github_openapi.require()


class Capturing(GitHubServer):
    """The local GitHub forge, keeping its deliveries instead of sending them."""

    def __init__(self) -> None:
        super().__init__(token=TOKEN)
        self.sent: list[tuple[dict[str, str], bytes]] = []

    def _deliver(self, url: str, headers: dict[str, str], body: bytes) -> None:
        # What urllib adds on the wire (base.LocalForge._deliver).
        self.sent.append(({**headers, "Content-Type": "application/json"}, body))


def test_the_local_forges_merged_webhook_is_as_github_describes_it() -> None:
    with Capturing() as srv:
        srv.add_webhook("http://127.0.0.1:9/hook", SECRET)
        pr = make_client(srv, FakeClock()).open_or_update_pull_request(
            PullRequestDraft(branch="gitopsbot/a", base="main", title="t", body="b", marker="a/1")
        )
        srv.approve(pr.number, "alice")
        merged = srv.merge(pr.number)
    ((headers, body),) = srv.sent
    assert github_openapi.webhook_problems(headers, body) == []
    event = parse(WebhookProvider.GITHUB, {k.lower(): v for k, v in headers.items()}, body)
    assert event is not None and event.merged and event.action == "merged"
    assert event.merge_commit_sha == merged.merge_commit_sha
    assert headers["X-Hub-Signature-256"] == github_signature(SECRET, body)


# -- the description's own payloads ---------------------------------------------------------

_FORMATS = {
    "date-time": "2026-01-01T00:00:00Z",
    "uri": "https://github.example/x",
    "uri-template": "https://github.example/x{/y}",
    "email": "octocat@github.example",
}


def payload(doc: Any, schema: Any, depth: int = 0) -> Any:
    """An instance of ``schema`` with only its required properties, each its documented
    example where it has one."""
    schema = github_openapi._deref(doc, schema)
    assert depth < 40, "the schema nests deeper than a payload does"
    for key in ("const", "example"):
        if key in schema:
            return schema[key]
    if schema.get("examples"):
        return schema["examples"][0]
    if schema.get("enum"):
        return next((v for v in schema["enum"] if v is not None), None)
    if "allOf" in schema:
        merged: dict[str, Any] = {}
        for part in schema["allOf"]:
            merged.update(payload(doc, part, depth + 1))
        return merged
    for key in ("oneOf", "anyOf"):
        if key in schema:
            choices = [github_openapi._deref(doc, c) for c in schema[key]]
            choice = next((c for c in choices if c.get("type") != "null"), choices[0])
            return payload(doc, choice, depth + 1)
    kind = schema.get("type", "object")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object":
        props = schema.get("properties", {})
        return {
            name: payload(doc, props.get(name, {}), depth + 1)
            for name in schema.get("required", ())
        }
    if kind == "array":
        count = schema.get("minItems", 0)
        return [payload(doc, schema.get("items", {}), depth + 1) for _ in range(count)]
    if kind == "string":
        return _FORMATS.get(schema.get("format", ""), "x")
    return {"integer": 1, "number": 1, "boolean": False, "null": None}[kind]


def delivery(name: str) -> tuple[dict[str, str], bytes]:
    """The webhook ``name`` of GitHub's description: its headers from the documented
    examples, its body the description's example or one made from its schema."""
    doc = github_openapi._load(github_openapi.WEBHOOKS)
    post = doc["webhooks"][name]["post"]
    content = post["requestBody"]["content"]["application/json"]
    example = (content.get("examples") or {}).get("default")
    data = (
        github_openapi._deref(doc, example)["value"]
        if example is not None
        else payload(doc, content["schema"])
    )
    body = json.dumps(data).encode()
    headers = {p["name"]: str(p.get("example", "")) for p in post.get("parameters", ())}
    # The header's documented example is "issues" for every event: the event is the first
    # word of the operation ("pull-request/opened").
    headers["X-Github-Event"] = post["operationId"].split("/")[0].replace("-", "_")
    headers["X-Hub-Signature-256"] = github_signature(SECRET, body)
    headers["Content-Type"] = "application/json"
    return headers, body


def test_the_parser_ignores_githubs_own_ping_example() -> None:
    headers, body = delivery("ping")
    assert github_openapi.webhook_problems(headers, body) == []
    assert parse(WebhookProvider.GITHUB, {k.lower(): v for k, v in headers.items()}, body) is None


@pytest.mark.parametrize(
    ("name", "action"),
    [
        ("push", ""),
        ("pull-request-opened", "opened"),
        ("pull-request-synchronize", "updated"),
        ("pull-request-reopened", "reopened"),
        ("pull-request-closed", "closed"),
    ],
)
def test_the_parser_accepts_the_least_github_describes(name: str, action: str) -> None:
    headers, body = delivery(name)
    assert github_openapi.webhook_problems(headers, body) == []  # the payload is GitHub's
    data = json.loads(body)
    if name == "push":
        data["ref"] = "refs/heads/main"  # the documented example is not a branch
        body = json.dumps(data).encode()
    event = parse(WebhookProvider.GITHUB, {k.lower(): v for k, v in headers.items()}, body)
    assert event is not None
    if name == "push":
        assert (event.kind, event.branch, event.sha) == (EventKind.PUSH, "main", data["after"])
        return
    pr = data["pull_request"]
    assert event.kind is EventKind.PULL_REQUEST and event.action == action
    assert (event.number, event.branch, event.base) == (
        data["number"],
        pr["head"]["ref"],
        pr["base"]["ref"],
    )


# -- the checks refuse what GitHub does not have --------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "query", "body", "says"),
    [
        ("GET", "/repos/o/r/pulls", "per_page=100&state=merged", b"", "state"),
        ("GET", "/repos/o/r/pulls", "limit=50", b"", "'limit' is not one it takes"),
        ("GET", "/repos/o/r/merge_requests", "", b"", "no path of GitHub's REST API"),
        ("PUT", "/repos/o/r/issues/comments/5", "", b'{"body": "x"}', "no such operation"),
        ("POST", "/repos/o/r/statuses/abc", "", b'{"state": "failed"}', "state"),
        ("PATCH", "/repos/o/r/pulls/3", "", b'{"description": "x"}', "'description' is not"),
    ],
)
def test_the_request_check_refuses_what_github_does_not_describe(
    method: str, path: str, query: str, body: bytes, says: str
) -> None:
    problems = github_openapi.request_problems(method, path, query, body)
    assert problems and says in "\n".join(problems), problems


def test_the_answer_check_refuses_what_github_does_not_describe() -> None:
    with GitHubServer(token=TOKEN) as srv:
        recorder = github_openapi.Recorder()
        forge = make_client(srv, FakeClock(), transport=recorder)
        pr = forge.open_or_update_pull_request(
            PullRequestDraft(branch="gitopsbot/a", base="main", title="t", body="b", marker="a/1")
        )
        forge.upsert_comment(pr.number, marker="plan", body="plan")
    assert github_openapi.exchange_problems(recorder.exchanges) == []
    (created,) = [e for e in recorder.exchanges if e.method == "POST" and "comments" in e.url]
    answer = json.loads(created.answer)
    del answer["node_id"]
    broken = github_openapi.Exchange(
        created.method,
        created.url,
        created.body,
        created.status,
        created.headers,
        json.dumps(answer).encode(),
    )
    problems = github_openapi.exchange_problems([broken])
    assert problems and "'node_id' is a required property" in problems[0], problems
