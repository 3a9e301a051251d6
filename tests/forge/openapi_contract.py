"""An OpenAPI description as the contract of a forge provider and of its local forge.

``Recorder`` (an httpx transport) keeps every exchange a provider has; ``Description``
checks them: every request matches an operation of the description (method, path template,
query parameters and body), every answer validates against that operation's response for its
status. ``openapi-core`` does the validation: it reads OpenAPI 3.0 and 3.1 alike, finds the
operation of a request from its method and path, and checks parameters, bodies and responses
against that operation's schemas, resolving ``$ref``s itself. It does not refuse what an
operation does not declare, so two checks are added here: every query parameter and every
top-level body property a request sends is one its operation declares.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import httpx

Json = Any


def _deref(doc: Json, node: Json) -> Json:
    while isinstance(node, dict) and "$ref" in node:
        target = doc
        for part in node["$ref"].removeprefix("#/").split("/"):
            target = target[part.replace("~1", "/").replace("~0", "~")]
        node = target
    return node


@dataclass(frozen=True)
class Exchange:
    """One request the provider sent and the answer it got, as seen on the wire."""

    method: str
    url: str
    body: bytes
    status: int
    headers: Mapping[str, str]
    answer: bytes
    sent_headers: Mapping[str, str] = field(default_factory=dict)

    @property
    def path(self) -> str:
        return urlsplit(self.url).path

    @property
    def query(self) -> str:
        return urlsplit(self.url).query

    def __str__(self) -> str:
        return f"{self.method} {self.path} -> {self.status}"


class Recorder(httpx.BaseTransport):
    """An httpx transport that records every exchange and passes it on."""

    def __init__(self, inner: httpx.BaseTransport | None = None) -> None:
        self.inner = inner or httpx.HTTPTransport()
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
                dict(request.headers),
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


class Description:
    """One forge's REST description: ``title`` names it in messages, ``load`` reads it,
    ``prefix`` is the path of the API root on the server (``/api/v3``, ``/api/v1``),
    ``error_schema`` the body of an error the description documents once for every operation
    (rate limits, server errors, bad credentials), if it has one; ``null_is_unset``: a null in
    an answer stands for a property left out, where the description's generator marks no
    property nullable (Gitea's, go-swagger from Go types: the real Gitea answers
    ``"merged_at": null`` for an open pull request, which its description types a string)."""

    def __init__(
        self,
        title: str,
        load: Callable[[], Json],
        prefix: str,
        error_schema: str = "",
        *,
        null_is_unset: bool = False,
    ) -> None:
        self.title = title
        self._load = load
        self.prefix = prefix
        self.error_schema = error_schema
        self.null_is_unset = null_is_unset

    @cached_property
    def doc(self) -> Json:
        return self._load()

    @cached_property
    def api(self) -> Any:
        from openapi_core import Config, OpenAPI

        # The description is the forge's own, validated where it is made: not again here.
        return OpenAPI.from_dict(self.doc, config=Config(spec_validator_cls=None))

    @cached_property
    def server(self) -> str:
        """The server URL the description names first (requests are checked against it)."""
        servers = self.doc.get("servers") or [{"url": "https://forge.example"}]
        return str(servers[0]["url"]).rstrip("/")

    @cached_property
    def _templates(self) -> list[tuple[re.Pattern[str], str]]:
        """The paths as patterns, templates with fewer parameters first (a literal segment
        beats a parameter, as the forges' routers do)."""
        ordered = sorted(self.doc["paths"], key=lambda t: (t.count("{"), t))
        return [(re.compile("^" + re.sub(r"\{[^}/]+\}", "[^/]+", t) + "$"), t) for t in ordered]

    def path_template(self, path: str) -> str | None:
        return next((t for pattern, t in self._templates if pattern.match(path)), None)

    def api_path(self, path: str) -> str:
        return path.removeprefix(self.prefix)

    def _request(
        self,
        method: str,
        path: str,
        args: Mapping[str, str],
        body: bytes,
        headers: Mapping[str, str] | None = None,
    ) -> Any:
        from openapi_core.testing import MockRequest

        # openapi-core matches the server URL too: the one the description names.
        root = urlsplit(self.server)
        host = f"{root.scheme}://{root.netloc}" if root.netloc else "https://forge.example"
        url, sent = root.path + path, dict(headers or {})
        return MockRequest(
            host, method.lower(), url, args=dict(args), headers=sent, data=body or None
        )

    def request_problems(
        self,
        method: str,
        path: str,
        query: str,
        body: bytes,
        headers: Mapping[str, str] | None = None,
    ) -> list[str]:
        """What in one request (``path`` below the API root) matches no operation."""
        from openapi_core.exceptions import OpenAPIError

        template = self.path_template(path)
        if template is None:
            return [f"{method} {path}: no path of {self.title}"]
        doc = self.doc
        item = doc["paths"][template]
        operation = item.get(method.lower())
        if operation is None:
            return [f"{method} {template}: {self.title} has no such operation"]
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
        try:
            self.api.validate_request(self._request(method, path, args, body, headers))
        except OpenAPIError as err:
            problems.append(f"{where}: {_summary(err)}")
        return problems

    def response_problems(self, ex: Exchange) -> list[str]:
        """What in one answer its operation's response schema for its status refuses."""
        from openapi_core.exceptions import OpenAPIError
        from openapi_core.testing import MockResponse

        path = self.api_path(ex.path)
        template = self.path_template(path)
        if template is None or ex.status == 304:  # a 304 has no body
            return []
        operation = self.doc["paths"][template].get(ex.method.lower())
        if operation is None:
            return []
        where = f"{ex}, {template}"
        declared = {str(k) for k in operation.get("responses", {})}
        if str(ex.status) not in declared and "default" not in declared:
            if ex.status in (401, 403, 429) or ex.status >= 500:
                # Rate limits, server errors and bad credentials apply to every operation: the
                # description documents them once, if at all.
                return self._error_problems(where, ex.answer)
            return [f"{where}: {self.title} documents no {ex.status} for this operation"]
        query = dict(parse_qsl(ex.query, keep_blank_values=True))
        request = self._request(ex.method, path, query, ex.body, ex.sent_headers)
        content_type = ex.headers.get("content-type", "application/json").split(";")[0]
        answer = ex.answer
        if self.null_is_unset and answer:
            answer = json.dumps(_without_nulls(json.loads(answer))).encode()
        response = MockResponse(answer, status_code=ex.status, content_type=content_type)
        try:
            self.api.validate_response(request, response)
        except OpenAPIError as err:
            return [f"{where}: {_summary(err)}"]
        return []

    def _error_problems(self, where: str, answer: bytes) -> list[str]:
        if not self.error_schema:
            return []
        from openapi_schema_validator import OAS30Validator

        schema = self.doc["components"]["schemas"][self.error_schema]
        try:
            body = json.loads(answer)
        except ValueError:
            return [f"{where}: not JSON"]
        return [f"{where}: {e.message}" for e in OAS30Validator(schema).iter_errors(body)]

    def exchange_problems(
        self, exchanges: Iterable[Exchange], *, answers: bool = True
    ) -> list[str]:
        """Every request against the description; with ``answers``, every answer against its
        operation's response for that status."""
        problems: list[str] = []
        for ex in exchanges:
            problems += self.request_problems(
                ex.method, self.api_path(ex.path), ex.query, ex.body, ex.sent_headers
            )
            if answers:
                problems += self.response_problems(ex)
        return list(dict.fromkeys(problems))


def _without_nulls(value: Json) -> Json:
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value
