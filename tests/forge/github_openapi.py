"""GitHub's published API descriptions as the contract of the GitHub provider and the local forge.

The descriptions are GitHub's own (github/rest-api-description, as npm ships them:
``@octokit/openapi`` for the REST API, ``@octokit/openapi-webhooks`` for webhooks), pinned in
tests/octokit/package.json and installed by ``npm ci --prefix tests/octokit`` (.ci/run). Where
they are not installed, the checks skip with that command, unless ``GITOPSBOT_OCTOKIT=require``
(CI), where they fail.

``openapi-core`` does the validation: it reads OpenAPI 3.0 (the REST description, with its
``nullable``) and 3.1 (the webhooks description) alike, finds the operation of a request
from its method and path, and checks parameters, bodies and responses against that
operation's schemas, resolving the descriptions' ``$ref``s itself (so the smaller
``api.github.com.json`` is read, not its 73 MB dereferenced twin). It does not refuse what an
operation does not declare, so two checks are added here: every query parameter and every
top-level body property a request sends is one its operation declares.
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
OCTOKIT = ROOT / "tests" / "octokit" / "node_modules" / "@octokit"
REST = OCTOKIT / "openapi" / "generated" / "api.github.com.json"
WEBHOOKS = OCTOKIT / "openapi-webhooks" / "generated" / "api.github.com.json"
INSTALL = "npm ci --prefix tests/octokit"
GITHUB = "https://api.github.com"

Json = Any


def available() -> bool:
    """Whether the descriptions are installed; without them a test skips, or fails under
    GITOPSBOT_OCTOKIT=require."""
    if REST.exists() and WEBHOOKS.exists():
        return True
    if os.environ.get("GITOPSBOT_OCTOKIT") == "require":
        raise RuntimeError(f"GITOPSBOT_OCTOKIT=require: run `{INSTALL}`")
    return False


def require() -> None:
    if not available():
        pytest.skip(f"GitHub's API descriptions are not installed: run `{INSTALL}`")


@functools.cache
def _load(path: Path) -> Json:
    return json.loads(path.read_text())


@functools.cache
def rest_api() -> Any:
    from openapi_core import Config, OpenAPI

    # The description is GitHub's, validated where it is made: not again on every load.
    return OpenAPI.from_dict(_load(REST), config=Config(spec_validator_cls=None))


@functools.cache
def webhooks_api() -> Any:
    from openapi_core import Config, OpenAPI

    return OpenAPI.from_dict(_load(WEBHOOKS), config=Config(spec_validator_cls=None))


def _deref(doc: Json, node: Json) -> Json:
    while isinstance(node, dict) and "$ref" in node:
        target = doc
        for part in node["$ref"].removeprefix("#/").split("/"):
            target = target[part.replace("~1", "/").replace("~0", "~")]
        node = target
    return node


@functools.cache
def _templates() -> list[tuple[re.Pattern[str], str]]:
    """The REST paths as patterns, templates with fewer parameters first (a literal segment
    beats a parameter, as GitHub's router does)."""
    paths = _load(REST)["paths"]
    ordered = sorted(paths, key=lambda t: (t.count("{"), t))
    return [(re.compile("^" + re.sub(r"\{[^}/]+\}", "[^/]+", t) + "$"), t) for t in ordered]


def path_template(path: str) -> str | None:
    return next((t for pattern, t in _templates() if pattern.match(path)), None)


@dataclass(frozen=True)
class Exchange:
    """One request the provider sent and the answer it got, as seen on the wire."""

    method: str
    url: str
    body: bytes
    status: int
    headers: Mapping[str, str]
    answer: bytes

    @property
    def api_path(self) -> str:
        """The path below the API root (a GitHub Enterprise Server root ends in /api/v3)."""
        path = urlsplit(self.url).path
        return path.removeprefix("/api/v3")

    def __str__(self) -> str:
        return f"{self.method} {self.api_path} -> {self.status}"


class Recorder(httpx.BaseTransport):
    """An httpx transport that records every exchange and passes it on."""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()
        self.exchanges: list[Exchange] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        sent = request.read()
        response = self.inner.handle_request(request)
        answer = response.read()
        self.exchanges.append(
            Exchange(
                request.method,
                str(request.url),
                sent,
                response.status_code,
                {k.lower(): v for k, v in response.headers.items()},
                answer,
            )
        )
        return httpx.Response(
            response.status_code, headers=response.headers, content=answer, request=request
        )

    def close(self) -> None:
        self.inner.close()


def _summary(err: BaseException) -> str:
    """openapi-core's error as its class and the schema errors under it, one short line each
    (its own message quotes the whole body)."""
    name = getattr(err, "name", "")  # a parameter's
    lines = [f"{type(err).__name__} {name!r}" if name else type(err).__name__]
    cause: BaseException | None = err
    while cause is not None:
        errors = getattr(cause, "schema_errors", None)
        for e in errors or ():
            where = "/".join(str(p) for p in e.absolute_path)
            lines.append(f"  {where or '(value)'}: {e.message[:200]}")
        if not errors and cause is not err:
            lines.append(f"  {type(cause).__name__}: {str(cause)[:200]}")
        cause = cause.__cause__ or cause.__context__
    return "\n".join(lines)


def _properties(doc: Json, schema: Json) -> set[str]:
    """The properties a body schema names, through its oneOf/anyOf/allOf alternatives."""
    schema = _deref(doc, schema) or {}
    found = set(schema.get("properties", {}))
    for key in ("oneOf", "anyOf", "allOf"):
        for alternative in schema.get(key, ()):
            found |= _properties(doc, alternative)
    return found


def request_problems(method: str, path: str, query: str, body: bytes) -> list[str]:
    """What in one request matches no operation of GitHub's REST description."""
    from openapi_core.exceptions import OpenAPIError
    from openapi_core.testing import MockRequest

    template = path_template(path)
    if template is None:
        return [f"{method} {path}: no path of GitHub's REST API"]
    doc = _load(REST)
    item = doc["paths"][template]
    operation = item.get(method.lower())
    if operation is None:
        return [f"{method} {template}: GitHub's REST API has no such operation"]
    where = f"{method} {template} ({operation.get('operationId')})"
    problems = []
    params = [
        _deref(doc, p) for p in (*item.get("parameters", ()), *operation.get("parameters", ()))
    ]
    declared = {p["name"] for p in params if p["in"] == "query"}
    args = dict(parse_qsl(query, keep_blank_values=True))
    problems += [
        f"{where}: query parameter {k!r} is not one it takes" for k in args if k not in declared
    ]
    data = json.loads(body) if body else None
    if isinstance(data, dict):
        content = _deref(doc, operation.get("requestBody", {})).get("content", {})
        known = _properties(doc, content.get("application/json", {}).get("schema"))
        problems += [
            f"{where}: body property {k!r} is not one it takes" for k in data if k not in known
        ]
    request = MockRequest(GITHUB, method.lower(), path, args=args, data=body or None)
    try:
        rest_api().validate_request(request)
    except OpenAPIError as err:
        problems.append(f"{where}: {_summary(err)}")
    return problems


def response_problems(ex: Exchange) -> list[str]:
    """What in one answer of the local forge its operation's response schema refuses."""
    from openapi_core.exceptions import OpenAPIError
    from openapi_core.testing import MockRequest, MockResponse

    template = path_template(ex.api_path)
    if template is None or ex.status == 304:  # a 304 has no body; GitHub sends none either
        return []
    doc = _load(REST)
    operation = doc["paths"][template].get(ex.method.lower())
    if operation is None:
        return []
    where = f"{ex}, {template}"
    declared = {str(k) for k in operation.get("responses", {})}
    if str(ex.status) not in declared and "default" not in declared:
        if ex.status in (403, 429) or ex.status >= 500 or ex.status == 401:
            # Rate limits, server errors and bad credentials apply to every operation; GitHub
            # documents them once, with the basic-error body.
            return _basic_error_problems(where, ex.answer)
        return [f"{where}: GitHub documents no {ex.status} for this operation"]
    query = dict(parse_qsl(urlsplit(ex.url).query, keep_blank_values=True))
    request = MockRequest(GITHUB, ex.method.lower(), ex.api_path, args=query, data=ex.body or None)
    content_type = ex.headers.get("content-type", "application/json").split(";")[0]
    response = MockResponse(ex.answer, status_code=ex.status, content_type=content_type)
    try:
        rest_api().validate_response(request, response)
    except OpenAPIError as err:
        return [f"{where}: {_summary(err)}"]
    return []


def _basic_error_problems(where: str, answer: bytes) -> list[str]:
    from openapi_schema_validator import OAS30Validator

    schema = _load(REST)["components"]["schemas"]["basic-error"]
    try:
        body = json.loads(answer)
    except ValueError:
        return [f"{where}: not JSON"]
    return [f"{where}: {e.message}" for e in OAS30Validator(schema).iter_errors(body)]


def exchange_problems(exchanges: Iterable[Exchange]) -> list[str]:
    """Every request against the REST description, every answer against its operation's
    response for that status."""
    problems: list[str] = []
    for ex in exchanges:
        query = urlsplit(ex.url).query
        problems += request_problems(ex.method, ex.api_path, query, ex.body)
        problems += response_problems(ex)
    return list(dict.fromkeys(problems))


# -- webhooks ---------------------------------------------------------------------------------


@functools.cache
def webhook_names() -> dict[tuple[str, str], str]:
    """(event, action) → the webhooks description's name for it (``pull-request-closed``);
    action "" for events without actions (``push``, ``ping``)."""
    doc = _load(WEBHOOKS)
    names: dict[tuple[str, str], str] = {}
    for name, item in doc["webhooks"].items():
        post = item["post"]
        schema = _deref(doc, post["requestBody"]["content"]["application/json"]["schema"])
        action = _deref(doc, schema.get("properties", {}).get("action", {}))
        # operationId is "event-name/action" ("pull-request/closed") or the event ("push").
        event = str(post.get("operationId", name)).split("/")[0].replace("-", "_")
        for a in action.get("enum") or [""]:
            names[(event, a)] = name
    return names


def webhook_problems(headers: Mapping[str, str], body: bytes) -> list[str]:
    """What in one delivery the webhooks description refuses: its headers and its body."""
    from openapi_core.exceptions import OpenAPIError
    from openapi_core.testing import MockRequest

    lowered = {k.lower(): v for k, v in headers.items()}
    event = lowered.get("x-github-event", "")
    data = json.loads(body)
    name = webhook_names().get((event, str(data.get("action") or "")))
    if name is None:
        return [f"{event} {data.get('action')}: no webhook of GitHub's description"]

    class Delivery(MockRequest):
        pass

    delivery = Delivery(GITHUB, "post", "/", headers=dict(headers), data=body)
    delivery.name = name  # type: ignore[attr-defined]
    try:
        webhooks_api().validate_webhook_request(delivery)
    except OpenAPIError as err:
        return [f"webhook {name}: {_summary(err)}"]
    return []
