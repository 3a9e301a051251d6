"""The one way a request reaches the API server through the official client's ``ApiClient``.

The cluster adapter (kube.py), the Lease adapter (leases.py), the Events adapter
(kube_events.py) and the simulator's store (kube_store.py) build, send and check a request the
same way, so it lives here: ``send`` (the bare request), ``open_checked`` and ``read_checked``
(a failure raised as the caller's error, through ``Failures``), ``read`` (the bot's error tree,
``error_for``), ``retrying`` (the bounded retries of what is safe to repeat, ``RetryPolicy``),
and the watch stream's lines, the discovery document and the REST paths. Each adapter keeps
its own errors where they differ: the store raises the emulator's, a watch its own two.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import config as kube_config
from kubernetes.client import ApiClient, Configuration
from kubernetes.client.exceptions import ApiException

from gitopsbot.errors import (
    ConfigError,
    KubeConflict,
    KubeError,
    KubeFailed,
    KubeForbidden,
    KubeInvalid,
    KubeNotFound,
    KubeServerError,
    KubeTooManyRequests,
    TransientError,
)

# The retries are the Cluster adapter's (the others send once): its log, as before.
log = logging.getLogger("gitopsbot.adapters.kube")

MESSAGE_LIMIT = 256  # kopf's cap on server text in our messages
TYPED_PATCH_FAILURE = "failed to create typed patch object"

Body = bytes | str | None
Headers = Mapping[str, str] | None


def send(
    client: ApiClient,
    method: str,
    path: str,
    *,
    query: Iterable[tuple[str, str]] = (),
    body: Any = None,
    content_type: str | None = None,
    timeout: float | tuple[float, float],
    accept: str = "application/json",
) -> Any:
    """Send one request (bearer token from the client's configuration) and return the
    client's response, unread. ``ApiException`` and transport errors reach the caller."""
    headers = {"Accept": accept}
    if content_type:
        headers["Content-Type"] = content_type
    _, url, all_headers, serialized, _ = client.param_serialize(
        method=method,
        resource_path=path,
        query_params=list(query),
        header_params=headers,
        body=body,
        auth_settings=["BearerToken"],
    )
    return client.call_api(
        method, url, header_params=all_headers, body=serialized, _request_timeout=timeout
    )


# ---------------------------------------------------------------------- checked requests


@dataclass(frozen=True, slots=True)
class Failures:
    """How a caller words a failed request: ``status(code, body, headers)`` for an HTTP
    answer outside 2xx (or the client's ``ApiException``), ``transport(error)`` for a request
    that got no answer (urllib3's errors, ``OSError``)."""

    status: Callable[[int, Body, Headers], Exception]
    transport: Callable[[Exception], Exception]


@contextmanager
def _mapped(failures: Failures) -> Iterator[None]:
    try:
        yield
    except ApiException as e:
        raise failures.status(e.status or 0, e.body, e.headers) from None
    except (urllib3.exceptions.HTTPError, OSError) as e:
        raise failures.transport(e) from None


def open_checked(
    client: ApiClient, method: str, path: str, *, failures: Failures, **request: Any
) -> Any:
    """``send``, and the response unread (a watch streams it) once its status is 2xx."""
    with _mapped(failures):
        response = send(client, method, path, **request)
    if not 200 <= response.status < 300:
        raise failures.status(response.status, response.read(), response.headers)
    return response


def read_checked(
    client: ApiClient, method: str, path: str, *, failures: Failures, **request: Any
) -> bytes:
    """``send``, and the body read (a transport error while reading is a failure too)."""
    with _mapped(failures):
        response = send(client, method, path, **request)
        data: bytes = response.read() or b""
    if not 200 <= response.status < 300:
        raise failures.status(response.status, data, response.headers)
    return data


def kube_failures(what: str) -> Failures:
    """The bot's error tree (``errors.Kube*``) for a request described by ``what``."""
    return Failures(
        status=lambda status, body, headers: error_for(status, body, headers, what=what),
        transport=lambda e: KubeServerError(f"{what}: transport error: {type(e).__name__}"),
    )


def read(client: ApiClient, method: str, path: str, *, what: str, **request: Any) -> bytes:
    """One request's body; a failure as ``errors.Kube*`` naming ``what``."""
    return read_checked(client, method, path, failures=kube_failures(what), **request)


def error_for(status: int, body: Body, headers: Headers, *, what: str) -> KubeError:
    """Map an HTTP failure to the error tree. The server's text is truncated; for Secrets
    (whose 422 text can echo values) it is dropped altogether, except for 401/403: RBAC's
    refusal names only the user, verb, resource and namespace, and says what to grant."""
    reason, message = status_text(body)
    keep = "Secret" not in what or status in (401, 403)
    detail = message[:MESSAGE_LIMIT] if keep else ""
    text = f"{what}: HTTP {status} {reason}".rstrip() + (f": {detail}" if detail else "")
    if status == 404:
        return KubeNotFound(text)
    if status == 409:
        return KubeConflict(text)
    if status == 422:
        return KubeInvalid(text)
    if status in (401, 403):
        return KubeForbidden(text)
    if status == 429:
        return KubeTooManyRequests(text, retry_after=_retry_after(headers))
    if status == 500 and message.startswith(TYPED_PATCH_FAILURE):
        # A real kube-apiserver answers a server-side apply whose value has the wrong type,
        # or names a field the schema lacks, with a 500 from building the typed patch (not a
        # 422): the same request fails the same way every time, so it is not retried.
        return KubeInvalid(text)
    if status >= 500 or status == 0:
        return KubeServerError(text, retry_after=_retry_after(headers))
    return KubeFailed(text)


def status_text(body: Body) -> tuple[str, str]:
    """(reason, message) from a ``kind: Status`` body; other bodies are not trusted."""
    if not body:
        return "", ""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return "", ""
    if not isinstance(data, dict) or data.get("kind") != "Status":
        return "", ""
    return str(data.get("reason") or ""), str(data.get("message") or "")


def _retry_after(headers: Headers) -> float | None:
    if not headers:
        return None
    value = headers.get("Retry-After") or headers.get("retry-after")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


# ---------------------------------------------------------------------- retries


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Bounded retries for transient API failures (429, 5xx, transport)."""

    attempts: int = 5
    base_delay_seconds: float = 0.5
    max_delay_seconds: float = 10.0

    def delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.max_delay_seconds)
        return float(min(self.base_delay_seconds * (2**attempt), self.max_delay_seconds))


def retrying(
    once: Callable[[], bytes],
    *,
    method: str,
    what: str,
    policy: RetryPolicy,
    sleep: Callable[[float], None],
) -> bytes:
    """``once()`` again after a transient failure, while the policy allows and repeating is
    safe; the last failure reaches the caller."""
    attempt = 0
    while True:
        try:
            return once()
        except TransientError as e:
            # A POST that failed with 5xx may have happened; only 429 is safe to repeat.
            # A 409 (stale resourceVersion, field-manager conflict) answers the same to the
            # same request: the caller reads again.
            retryable = not isinstance(e, KubeConflict) and (
                method != "POST" or isinstance(e, KubeTooManyRequests)
            )
            attempt += 1
            if not retryable or attempt >= policy.attempts:
                raise
            delay = policy.delay(attempt - 1, e.retry_after)
            log.info("kube: %s: %s; retry %d in %.1fs", what, e, attempt, delay)
            sleep(delay)


# ---------------------------------------------------------------------- watches and discovery


def watch_query(version: str, timeout_seconds: int) -> list[tuple[str, str]]:
    """The query of a watch from ``version`` that the server ends after ``timeout_seconds``."""
    return [
        ("watch", "1"),
        ("resourceVersion", version),
        ("allowWatchBookmarks", "true"),
        ("timeoutSeconds", str(timeout_seconds)),
    ]


def stream_lines(response: Any) -> Iterator[bytes]:
    """The newline-separated JSON events of a watch stream, as they arrive."""
    pending = b""
    for chunk in response.stream(amt=None, decode_content=False):
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            if line.strip():
                yield line
    if pending.strip():
        yield pending


@dataclass(frozen=True, slots=True)
class Served:
    """A kind as discovery lists it: its plural, its scope, whether it has ``/status``."""

    plural: str
    namespaced: bool
    status: bool

    def path(self, api_version: str, namespace: str | None, name: str | None) -> str:
        """The REST path of the collection (``name`` None) or of one object; ``namespace``
        counts only for a namespaced kind (None: across all namespaces)."""
        return resource_path(api_version, self.plural, self.namespaced, namespace, name)


def discovery_path(api_version: str) -> str:
    """The legacy discovery document of a group-version (``/api/v1``, ``/apis/<g>/<v>``)."""
    return "/api/v1" if api_version == "v1" else f"/apis/{api_version}"


def served_kinds(document: Mapping[str, Any]) -> dict[str, Served]:
    """kind → how it is served, from a discovery document (subresources left out)."""
    entries = document.get("resources") or []
    with_status = {str(e.get("name", "")).split("/")[0] for e in entries
                   if str(e.get("name", "")).endswith("/status")}  # fmt: skip
    kinds: dict[str, Served] = {}
    for entry in entries:
        name = str(entry.get("name", ""))
        if "/" in name or not entry.get("kind"):
            continue  # subresources
        kinds[str(entry["kind"])] = Served(name, bool(entry.get("namespaced")), name in with_status)
    return kinds


def resource_path(
    api_version: str, plural: str, namespaced: bool, namespace: str | None, name: str | None
) -> str:
    """The REST path of a collection (``name`` None) or of one object."""
    base = discovery_path(api_version)
    if namespaced and namespace:
        base += f"/namespaces/{namespace}"
    base += f"/{plural}"
    return f"{base}/{name}" if name else base


# ---------------------------------------------------------------------- kubeconfig


def configuration_from_kubeconfig(path: Path | str, context: str = "") -> Configuration:
    """The client configuration of one kubeconfig context (the current one when ""), with
    urllib3's own retries off: it would retry 429/503 with Retry-After on its own, sleeping
    where nobody sees it; each adapter decides about retries itself. The client's
    ``ConfigException``, ``OSError`` or ``ValueError`` reaches the caller to word."""
    configuration = Configuration()
    kube_config.load_kube_config(  # type: ignore[no-untyped-call]
        config_file=str(path),
        context=context or None,
        client_configuration=configuration,
        persist_config=False,
    )
    configuration.retries = False
    return configuration


KUBECONFIG_ERRORS = (kube_config.ConfigException, OSError, ValueError)


def kubeconfig_client(path: Path | str, context: str = "") -> ApiClient:
    """A client of one kubeconfig context; a kubeconfig it cannot use is a ``ConfigError``
    naming the file and the vendor's first line (short, and it names no secret)."""
    try:
        configuration = configuration_from_kubeconfig(path, context)
    except KUBECONFIG_ERRORS as err:
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise ConfigError(f"cannot use kubeconfig {path}: {reason}") from None
    return ApiClient(configuration)
