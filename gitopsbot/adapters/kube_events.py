"""The Events port over the Kubernetes API (``events.k8s.io/v1``), through the client's
``ApiClient`` (auth, TLS and proxy of the cluster's connection), like ``adapters.leases``.

Plain JSON: the bytes posted are the ones ``core.notices.kube_events.event_body`` made. The object
an Event regards is read (GET) for its uid, remembered for five minutes. One request per
call, no retries, a short timeout: ``bot.event_recorder`` posts from its own thread and drops
what fails.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

from kubernetes.client import ApiClient

from gitopsbot.adapters.kube_request import kubeconfig_client, read, resource_path
from gitopsbot.adapters.redaction import redact_secrets
from gitopsbot.core.notices import kube_events as ke
from gitopsbot.errors import KubeInvalid, KubeNotFound
from gitopsbot.ports.events import Events

_EVENTS = "/apis/events.k8s.io/v1/namespaces/{namespace}/events"
_PLURALS = {"TensorFusionCluster": "tensorfusionclusters", "GPUPool": "gpupools"}
# How long a regarded object's uid is trusted: a TensorFusionCluster deleted and made again
# gets a new one, and kubectl describe shows only the Events of the uid it has.
UID_SECONDS = 300.0


class KubeEvents(Events):
    """Events over one API server. ``instance`` is the Events'
    ``reportingInstance`` (the replica's identity); ``secrets()`` the values masked in every
    note (the ones resolved for the cluster, the forge's), on top of what the adapters
    masked before the text reached a journal."""

    def __init__(
        self,
        api_client: ApiClient,
        *,
        instance: str,
        controller: str = ke.REPORTING_CONTROLLER,
        request_timeout_seconds: float = 3.0,
        secrets: Callable[[], Iterable[str]] = tuple,
    ) -> None:
        self._client = api_client
        self._secrets = secrets
        self._instance = instance
        self._controller = controller
        self._timeout = request_timeout_seconds
        self._uids: dict[tuple[str, str, str, str], tuple[str, float]] = {}
        self._series = ke.Series()
        self._lock = threading.Lock()
        self._last_nanos = 0

    @classmethod
    def from_kubeconfig(
        cls, path: Path | str, context: str = "", *, instance: str, **kwargs: Any
    ) -> KubeEvents:
        return cls(kubeconfig_client(path, context), instance=instance, **kwargs)

    def close(self) -> None:
        self._client.close()  # type: ignore[no-untyped-call]

    def emit(self, regarding: ke.ObjectRef, event: ke.EventSpec, *, at: datetime) -> None:
        event = replace(event, note=ke.note_of(redact_secrets(event.note, self._secrets())))
        ref = self._with_uid(regarding)
        ns = ref.event_namespace
        with self._lock:
            previous = self._series.previous(ref, event)
        if previous is not None:
            name, count = previous
            patch = ke.series_patch(count + 1, at)
            try:
                self._send("PATCH", f"{_EVENTS.format(namespace=ns)}/{name}", patch,
                           what=f"patch Event {ns}/{name}",
                           content_type="application/merge-patch+json")  # fmt: skip
            except KubeNotFound:  # expired (the server keeps Events for an hour): anew
                pass
            else:
                with self._lock:
                    self._series.posted(ref, event, name, count + 1)
                return
        with self._lock:
            self._last_nanos = max(ke.nanos_of(at), self._last_nanos + 1)
            name = ke.event_name(ref, self._last_nanos)
        body = ke.event_body(
            ref, event, name=name, at=at, controller=self._controller, instance=self._instance
        )
        self._send("POST", _EVENTS.format(namespace=ns), body, what=f"create Event {ns}/{name}")
        with self._lock:
            self._series.posted(ref, event, name)

    def recorded(self, regarding: ke.ObjectRef) -> list[ke.RecordedEvent]:
        ns = regarding.event_namespace
        what = f"list Events {ns}"
        data = self._send("GET", _EVENTS.format(namespace=ns), None, what=what)
        try:
            items = json.loads(data).get("items")
            if not isinstance(items, list):
                raise ValueError("no items")
            found = [ke.recorded_of(i) for i in items if isinstance(i, dict)]
        except (ValueError, AttributeError) as e:
            raise KubeInvalid(f"{what}: unreadable answer: {e}") from None
        found = [e for e in found if ke.is_about(e, regarding)]
        return sorted(found, key=lambda e: (e.event_time, e.name))

    def _with_uid(self, ref: ke.ObjectRef) -> ke.ObjectRef:
        if ref.uid:
            return ref
        key = (ref.api_version, ref.kind, ref.namespace, ref.name)
        with self._lock:
            uid, read_at = self._uids.get(key, ("", 0.0))
        if not uid or time.monotonic() - read_at > UID_SECONDS:
            plural = _PLURALS.get(ref.kind) or ref.kind.lower() + "s"
            path = resource_path(
                ref.api_version, plural, bool(ref.namespace), ref.namespace or None, ref.name
            )
            data = self._send("GET", path, None, what=f"{ref.kind} {ref.name}")
            try:
                uid = str(json.loads(data)["metadata"]["uid"])
            except (ValueError, KeyError, TypeError) as e:
                raise KubeInvalid(f"{ref.kind} {ref.name}: unreadable answer: {e}") from None
            with self._lock:
                self._uids[key] = (uid, time.monotonic())
        return ke.ObjectRef(ref.api_version, ref.kind, ref.name, ref.namespace, uid)

    def _send(
        self, method: str, path: str, body: Any, *, what: str, content_type: str = ""
    ) -> bytes:
        if body is not None and not content_type:
            content_type = "application/json"
        return read(
            self._client, method, path, what=what, body=body,
            content_type=content_type or None, timeout=self._timeout,
        )  # fmt: skip
