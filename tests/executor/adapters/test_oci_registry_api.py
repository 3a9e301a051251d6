"""The OCI registry API the chart source uses where helm has no command (a chart's tags, a
tag's manifest digest), against registries that answer as GHCR/Harbor do: a ``Bearer``
challenge answered at its realm with the login, tags over ``Link`` pages. The real registry
(htpasswd, Basic) is in test_helm_oci.py."""

from __future__ import annotations

import base64
import json

import httpx
import pytest

from gitopsbot.adapters.oci_registry import (
    RegistryApi,
    RegistryLogin,
    RegistryLogins,
    registry_config,
)
from gitopsbot.errors import ChartNotFound, ChartUnauthorized

HOST = "registry.example.com"
URL = f"oci://{HOST}/charts"
BASIC = "Basic " + base64.b64encode(b"bot:pw").decode()
CHALLENGE = (
    'Bearer realm="https://auth.example.com/token",service="registry.example.com",'
    'scope="repository:charts/tensor-fusion:pull"'
)


def _api(handler: httpx.MockTransport, password: str = "pw") -> RegistryApi:
    login = RegistryLogin(HOST, "bot", password, where=f"chartRegistries[0] (host {HOST})")
    return RegistryApi(RegistryLogins([login]), httpx.Client(transport=handler))


def _bearer_registry(seen: list[httpx.Request]) -> httpx.MockTransport:
    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        auth = request.headers.get("authorization", "")
        if request.url.host == "auth.example.com":
            if auth != BASIC:
                return httpx.Response(401)
            assert request.url.params["scope"] == "repository:charts/tensor-fusion:pull"
            return httpx.Response(200, json={"token": "t0ken"})
        if auth != "Bearer t0ken":
            return httpx.Response(401, headers={"www-authenticate": CHALLENGE})
        if request.url.path.endswith("/tags/list"):
            if request.url.params.get("last") == "1.8.0":
                return httpx.Response(200, json={"tags": ["1.8.7", "latest"]})
            link = '</v2/charts/tensor-fusion/tags/list?n=2&last=1.8.0>; rel="next"'
            return httpx.Response(200, json={"tags": ["1.5.0", "1.8.0"]}, headers={"link": link})
        if request.url.path.endswith("/manifests/1.8.0"):
            return httpx.Response(200, headers={"docker-content-digest": "sha256:" + "a" * 64})
        return httpx.Response(404)

    return httpx.MockTransport(handle)


def test_a_bearer_challenge_is_answered_with_the_login_and_pages_are_followed() -> None:
    seen: list[httpx.Request] = []
    api = _api(_bearer_registry(seen))
    assert api.tags(URL, "tensor-fusion") == ["1.5.0", "1.8.0", "1.8.7", "latest"]
    assert api.manifest_digest(URL, "tensor-fusion", "1.8.0") == "sha256:" + "a" * 64
    # One token for the scope, asked once: later requests carry it at once.
    assert sum(r.url.host == "auth.example.com" for r in seen) == 1
    with pytest.raises(ChartNotFound, match=r"chart tensor-fusion 9\.9\.9 is not in"):
        api.manifest_digest(URL, "tensor-fusion", "9.9.9")


def test_a_token_service_refusing_the_login_is_one_line_to_fix() -> None:
    api = _api(_bearer_registry([]), password="wrong")
    with pytest.raises(ChartUnauthorized) as refused:
        api.tags(URL, "tensor-fusion")
    assert str(refused.value) == (
        f"{URL}: the registry refused the login of user 'bot' (HTTP 401); check "
        f"chartRegistries[0] (host {HOST}) in gitopsbot.yaml: its username, and the password "
        "its secret reference holds, and restart the bot after changing the secret"
    )


def test_an_anonymous_pull_refused_says_to_add_a_login() -> None:
    api = RegistryApi(
        RegistryLogins(), httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(401)))
    )
    with pytest.raises(ChartUnauthorized, match="add a chartRegistries entry for host"):
        api.tags(URL, "tensor-fusion")


def test_helm_gets_only_the_registry_s_own_login() -> None:
    config = json.loads(registry_config(RegistryLogin(HOST, "bot", "pw")))
    assert config == {"auths": {HOST: {"auth": base64.b64encode(b"bot:pw").decode()}}}
    assert json.loads(registry_config(RegistryLogin(HOST))) == {"auths": {}}
