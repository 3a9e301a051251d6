"""GitHub's published API descriptions as the contract of the GitHub provider and the local forge.

The descriptions are GitHub's own (github/rest-api-description, as npm ships them:
``@octokit/openapi`` for the REST API, ``@octokit/openapi-webhooks`` for webhooks), pinned in
tests/octokit/package.json and installed by ``npm ci --prefix tests/octokit`` (.ci/run). Where
they are not installed, the checks skip with that command, unless ``GITOPSBOT_OCTOKIT=require``
(CI), where they fail.

``openapi-core`` does the validation (tests/forge/openapi_contract.py): it reads OpenAPI 3.0
(the REST description, with its ``nullable``) and 3.1 (the webhooks description) alike and
resolves the descriptions' ``$ref``s itself, so the smaller ``api.github.com.json`` is read,
not its 73 MB dereferenced twin.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.forge.openapi_contract import Description, Exchange, Recorder, _deref, _summary

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


REST_API = Description(
    "GitHub's REST API", lambda: _load(REST), prefix="/api/v3", error_schema="basic-error"
)


def request_problems(method: str, path: str, query: str, body: bytes) -> list[str]:
    """What in one request (``path`` below the API root) GitHub's REST description refuses."""
    return REST_API.request_problems(method, path, query, body)


def exchange_problems(exchanges: Iterable[Exchange]) -> list[str]:
    """The GitHub provider's requests and the local forge's answers, against GitHub's REST
    description (the local forge serves it below /api/v3, as GitHub Enterprise Server)."""
    return REST_API.exchange_problems(exchanges)


__all__ = ["Exchange", "Recorder", "exchange_problems", "request_problems", "webhook_problems"]


@functools.cache
def webhooks_api() -> Any:
    from openapi_core import Config, OpenAPI

    return OpenAPI.from_dict(_load(WEBHOOKS), config=Config(spec_validator_cls=None))


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
