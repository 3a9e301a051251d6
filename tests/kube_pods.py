"""The two API servers the kube tests run on, and pods that run on the real one.

``server`` is a fixture (a conftest or test module imports it to use it): the API server of
one test. By default it is ``emulator``, a fresh in-process API emulator, namespace
``default``; a test marked ``@ON_BOTH_SERVERS`` runs twice, once more on ``realkube``, the
session's real control plane (tests/conftest.py) with a fresh namespace. A test about the
emulator's internals (its store, fault injection, built-in kubelet) says so with
``@EMULATOR_ONLY``.

On the real server the namespace is deleted after the test; cluster-scoped objects are
shared by the whole session, so every CustomResourceDefinition a test made is deleted after
it (and with it every custom resource of its kinds) and waited for: the next test may make
one of the same name.

The real server has no scheduler and no kubelet: ``running_pods(server)`` stands in for
both while a test needs Deployments to become ready or Jobs to complete (the emulator's
built-in kubelet does this by itself).
"""

from __future__ import annotations

import json
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from gitopsbot.sandbox.apiserver import ApiServer

SERVERS = ["emulator", pytest.param("realkube", marks=pytest.mark.realkube)]
ON_BOTH_SERVERS = pytest.mark.parametrize("server", SERVERS, indirect=True)
EMULATOR_ONLY = pytest.mark.parametrize("server", ["emulator"], indirect=True)
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
NODE = "realkube-node"
CRD_GONE_SECONDS = 60.0

# Plurals that are not kind.lower() + "s" (only the kinds tests read back).
_PLURALS = {"Endpoints": "endpoints", "Ingress": "ingresses", "PriorityClass": "priorityclasses"}


@dataclass
class KubeServer:
    """One API server for one test: where it is, how to reach it, the test's namespace."""

    name: str  # "emulator" | "realkube"
    url: str
    kubeconfig: Path
    namespace: str
    token: str = ""
    ca_file: Path | None = None
    emulator: ApiServer | None = None

    @property
    def api(self) -> ApiServer:
        """The emulator itself: only for tests marked ``@EMULATOR_ONLY``."""
        if self.emulator is None:
            pytest.fail("this test reaches into the emulator: mark it @EMULATOR_ONLY")
        return self.emulator

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        accept: str = "application/json",
    ) -> Any:
        """One request over HTTP, as any client makes it; the decoded JSON. Errors raise."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Accept", accept)
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        if data is not None:
            req.add_header("Content-Type", content_type)
        context = ssl.create_default_context(cafile=str(self.ca_file)) if self.ca_file else None
        with urllib.request.urlopen(req, context=context, timeout=30) as resp:
            raw = resp.read()
        return json.loads(raw) if raw else None

    def get(
        self, api_version: str, kind: str, namespace: str | None, name: str
    ) -> dict[str, Any] | None:
        """The object as the server shows it over HTTP, or None."""
        try:
            found: dict[str, Any] = self.request("GET", path(api_version, kind, namespace, name))
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return None
            raise
        return found

    def list(
        self, api_version: str, kind: str, namespace: str | None = None, selector: str = ""
    ) -> list[dict[str, Any]]:
        query = f"?labelSelector={urllib.parse.quote(selector)}" if selector else ""
        items: list[dict[str, Any]] = self.request(
            "GET", path(api_version, kind, namespace) + query
        )["items"]
        return items


def path(api_version: str, kind: str, namespace: str | None, name: str = "") -> str:
    """The REST path of a kind (and object)."""
    base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    plural = _PLURALS.get(kind) or (
        kind.lower()[:-1] + "ies" if kind.endswith("y") else kind.lower() + "s"
    )
    where = f"/namespaces/{namespace}" if namespace else ""
    return f"{base}{where}/{plural}" + (f"/{name}" if name else "")


@pytest.fixture
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[KubeServer]:
    """The API server for this test: the emulator unless parametrised (``ON_BOTH_SERVERS``)."""
    with open_server(getattr(request, "param", "emulator"), request, tmp_path) as opened:
        yield opened


@contextmanager
def open_server(which: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[KubeServer]:
    """``server``'s body, for fixtures that choose the server among their own params."""
    if which == "emulator":
        api = ApiServer(bookmark_interval=0.2)
        api.start()
        try:
            config = api.write_kubeconfig(tmp_path / "kubeconfig")
            yield KubeServer("emulator", api.url, config, "default", emulator=api)
        finally:
            api.stop()
        return
    assert which == "realkube", which
    plane: Any = request.getfixturevalue("control_plane")
    namespace: str = request.getfixturevalue("realkube_namespace")
    config = plane.write_kubeconfig(tmp_path / "kubeconfig", namespace=namespace)
    real = KubeServer("realkube", plane.url, config, namespace, plane.admin_token, plane.ca_file)
    before = _crd_names(real)
    try:
        yield real
    finally:
        _delete_crds(real, _crd_names(real) - before)


def wait_served(server: KubeServer, api_version: str, plural: str) -> None:
    """Until discovery lists ``plural``: the real server serves a new CRD's kinds a little
    after it reports it Established (docs/sandbox.md, where the emulator differs)."""
    deadline = time.monotonic() + 10
    while True:
        try:
            found = server.request("GET", f"/apis/{api_version}")
            if any(r["name"] == plural for r in found["resources"]):
                return
        except urllib.error.HTTPError as e:
            if e.code != 404:
                raise
        if time.monotonic() > deadline:
            raise AssertionError(f"{plural}.{api_version} is not served")
        time.sleep(0.02)


def _crd_names(server: KubeServer) -> set[str]:
    return {c["metadata"]["name"] for c in server.request("GET", CRDS)["items"]}


def _delete_crds(server: KubeServer, names: set[str]) -> None:
    for name in names:
        try:
            server.request("DELETE", f"{CRDS}/{name}")
        except urllib.error.HTTPError as e:
            if e.code != 404:
                raise
    deadline = time.monotonic() + CRD_GONE_SECONDS
    while names & _crd_names(server):
        if time.monotonic() > deadline:
            raise AssertionError(f"CRDs {sorted(names & _crd_names(server))} were not deleted")
        time.sleep(0.1)


# ---------------------------------------------------------------- pods on the real server


@contextmanager
def running_pods(server: KubeServer, interval: float = 0.1) -> Iterator[None]:
    """While inside: every pod in the test's namespace is bound to a Node and reported
    Running and Ready (a Job's pod: Succeeded), and a deleted pod is confirmed gone, as a
    scheduler and kubelet would. Nothing to do on the emulator: its kubelet does this."""
    if server.emulator is not None:
        yield
        return
    try:
        server.request("POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node",
                                                 "metadata": {"name": NODE}})  # fmt: skip
    except urllib.error.HTTPError as e:
        if e.code != 409:  # another test made it: it is shared
            raise
    stop = threading.Event()
    failures: list[BaseException] = []

    def loop() -> None:
        while not stop.is_set():
            try:
                for pod in server.list("v1", "Pod", server.namespace):
                    _run_pod(server, pod)
            except urllib.error.HTTPError as e:
                if e.code not in (404, 409):  # raced with a controller: next round
                    failures.append(e)
                    return
            stop.wait(interval)

    thread = threading.Thread(target=loop, name="running-pods", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
    if failures:
        raise failures[0]


def _run_pod(server: KubeServer, pod: dict[str, Any]) -> None:
    meta, spec = pod["metadata"], pod["spec"]
    pod_path = path("v1", "Pod", meta["namespace"], meta["name"])
    if meta.get("deletionTimestamp"):
        server.request("DELETE", pod_path, {"gracePeriodSeconds": 0})
        return
    if not spec.get("nodeName"):
        binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": meta["name"]},
                   "target": {"apiVersion": "v1", "kind": "Node", "name": NODE}}  # fmt: skip
        server.request("POST", pod_path + "/binding", binding)
    if pod.get("status", {}).get("phase", "Pending") != "Pending":
        return
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    job = any(o.get("kind") == "Job" for o in meta.get("ownerReferences") or [])
    done = {"exitCode": 0, "reason": "Completed", "startedAt": now, "finishedAt": now}
    state = {"terminated": done} if job else {"running": {"startedAt": now}}
    ready = "False" if job else "True"
    conditions = [
        {"type": t, "status": s, "lastTransitionTime": now}
        for t, s in (("PodScheduled", "True"), ("Initialized", "True"),
                     ("ContainersReady", ready), ("Ready", ready))
    ]  # fmt: skip
    status = {
        "phase": "Succeeded" if job else "Running",
        "hostIP": "10.0.0.1",
        "podIP": "10.1.0.1",
        "startTime": now,
        "conditions": conditions,
        "containerStatuses": [
            {
                "name": c["name"],
                "image": c["image"],
                "imageID": "",
                "ready": not job,
                "started": not job,
                "restartCount": 0,
                "state": state,
            }
            for c in spec["containers"]
        ],
    }
    server.request(
        "PATCH",
        pod_path + "/status",
        {"status": status},
        content_type="application/merge-patch+json",
    )
