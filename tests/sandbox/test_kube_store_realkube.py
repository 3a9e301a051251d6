"""KubeStore (adapters/kube_store.py) against the real control plane: the Store contract the
controller simulator relies on.

Aspects: watch events for create, modify and delete, in order, also across the server ending
each watch (resume from the resourceVersion); a watch restart that relists emits DELETED for
an object deleted while no watch ran; a custom kind installed after the watch started is
picked up; create keeps a given status (a second write to /status) and update_status writes
only status, under the caller's field manager; HTTP errors arrive as the emulator's
ApiError subclasses (Conflict, AlreadyExists, NotFound, Invalid).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gitopsbot.adapters import kube_store
from gitopsbot.adapters.kube_store import KubeStore
from gitopsbot.sandbox.apiserver.errors import AlreadyExists, Conflict, Invalid, NotFound

pytestmark = pytest.mark.realkube

Obj = dict[str, Any]
Event = tuple[str, str, str]  # (type, kind, name)
CRD = ("apiextensions.k8s.io/v1", "CustomResourceDefinition")


class Recorder:
    def __init__(self) -> None:
        self.events: list[Event] = []
        self.lock = threading.Condition()

    def __call__(self, etype: str, obj: Obj) -> None:
        with self.lock:
            self.events.append((etype, obj["kind"], obj["metadata"]["name"]))
            self.lock.notify_all()

    def wait_for(self, want: Callable[[list[Event]], bool], timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        with self.lock:
            while not want(self.events):
                left = deadline - time.monotonic()
                assert left > 0, f"timed out; events: {self.events}"
                self.lock.wait(min(left, 0.5))

    def of(self, name: str) -> list[str]:
        with self.lock:
            return [t for t, _, n in self.events if n == name]


def _wait(check: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.fixture
def kubeconfig(control_plane: Any, tmp_path: Path) -> Path:
    path: Path = control_plane.write_kubeconfig(tmp_path / "kubeconfig")
    return path


@pytest.fixture
def open_store(kubeconfig: Path) -> Iterator[Callable[..., KubeStore]]:
    stores: list[KubeStore] = []

    def make(*kinds: tuple[str, str]) -> KubeStore:
        store = KubeStore.from_kubeconfig(kubeconfig, watch_kinds=kinds)
        stores.append(store)
        return store

    yield make
    for store in stores:
        store.close()


def _cm(ns: str, name: str, value: str = "1") -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns},
        "data": {"v": value},
    }


def test_events_arrive_for_create_modify_delete_across_watch_restarts(
    open_store: Callable[..., KubeStore],
    realkube_namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ns = realkube_namespace
    # The server ends each watch after a second: the events below span several streams,
    # each resumed from the last resourceVersion seen.
    monkeypatch.setattr(kube_store, "WATCH_SECONDS", 1)
    store = open_store(("v1", "ConfigMap"))
    seen = Recorder()
    store.subscribe(seen)
    _wait(store.synced)
    made = store.create(_cm(ns, "one"))
    time.sleep(1.5)
    made["data"]["v"] = "2"
    store.update(made)
    time.sleep(1.5)
    assert store.delete("v1", "ConfigMap", ns, "one") is None  # gone at once: nothing echoed
    seen.wait_for(lambda ev: ("DELETED", "ConfigMap", "one") in ev)
    assert seen.of("one") == ["ADDED", "MODIFIED", "DELETED"]


def test_a_relist_after_a_broken_watch_reports_a_deletion_it_missed(
    open_store: Callable[..., KubeStore],
    realkube_namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ns = realkube_namespace
    store = open_store(("v1", "ConfigMap"))
    seen = Recorder()
    store.subscribe(seen)
    _wait(store.synced)
    store.create(_cm(ns, "doomed"))
    seen.wait_for(lambda ev: ("ADDED", "ConfigMap", "doomed") in ev)
    # Hold the next relist until the object is deleted: no watch runs meanwhile.
    gate, relisting = threading.Event(), threading.Event()
    original = KubeStore.list_with_version

    def held(self: KubeStore, *args: Any, **kwargs: Any) -> Any:
        relisting.set()
        gate.wait(20)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(KubeStore, "list_with_version", held)
    (watcher,) = store._watchers
    watcher.interrupt()  # the stream breaks, as a dropped connection does
    assert relisting.wait(20)
    monkeypatch.setattr(KubeStore, "list_with_version", original)
    store.delete("v1", "ConfigMap", ns, "doomed")
    gate.set()
    seen.wait_for(lambda ev: ("DELETED", "ConfigMap", "doomed") in ev)
    assert seen.of("doomed") == ["ADDED", "DELETED"]


def _crd(group: str) -> Obj:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"widgets.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "properties": {"size": {"type": "integer"}},
                                },
                                "status": {
                                    "type": "object",
                                    "properties": {"phase": {"type": "string"}},
                                },
                            },
                        }
                    },
                }
            ],
        },
    }


def test_a_custom_kind_installed_later_is_watched_and_status_is_a_subresource(
    open_store: Callable[..., KubeStore], realkube_namespace: str
) -> None:
    ns = realkube_namespace
    group = f"ks{os.urandom(3).hex()}.test.gitopsbot"
    widget = f"{group}/v1"
    store = open_store((widget, "Widget"))
    seen = Recorder()
    store.subscribe(seen)
    time.sleep(1.0)
    assert not store.synced()  # not served yet: the watch keeps trying
    with pytest.raises(NotFound):
        store.get(widget, "Widget", ns, "w")
    store.create(_crd(group))
    try:
        _wait(store.synced, timeout=30)
        # A given status is kept on create (a second write, to /status).
        made = store.create(
            {
                "apiVersion": widget,
                "kind": "Widget",
                "metadata": {"name": "w", "namespace": ns},
                "spec": {"size": 1},
                "status": {"phase": "Pending"},
            },
            manager="sim-test",
        )
        assert made["status"] == {"phase": "Pending"}
        # A write of the main resource keeps the stored status; /status changes only it.
        made["spec"]["size"], made["status"]["phase"] = 2, "Lost"
        updated = store.update(made, manager="sim-test")
        assert (updated["spec"]["size"], updated["status"]["phase"]) == (2, "Pending")
        updated["spec"]["size"], updated["status"]["phase"] = 3, "Running"
        status = store.update_status(updated, manager="sim-test")
        assert (status["spec"]["size"], status["status"]["phase"]) == (2, "Running")
        managers = {
            (e["manager"], e.get("subresource", "")) for e in status["metadata"]["managedFields"]
        }
        assert ("sim-test", "status") in managers and ("sim-test", "") in managers
        # A stale resourceVersion is a Conflict, as the emulator raises it.
        with pytest.raises(Conflict):
            store.update_status(made, manager="sim-test")
        seen.wait_for(lambda ev: ev.count(("MODIFIED", "Widget", "w")) >= 3)
        assert seen.of("w")[0] == "ADDED"
    finally:
        store.delete(
            "apiextensions.k8s.io/v1", "CustomResourceDefinition", None, f"widgets.{group}"
        )
    # The kind is no longer served: what the watch knew is reported gone.
    seen.wait_for(lambda ev: ("DELETED", "Widget", "w") in ev, timeout=60)


def test_http_errors_are_the_emulators_api_errors(
    open_store: Callable[..., KubeStore], realkube_namespace: str
) -> None:
    ns = realkube_namespace
    store = open_store()
    made = store.create(_cm(ns, "c"))
    with pytest.raises(AlreadyExists):
        store.create(_cm(ns, "c"))
    store.update(made)  # unchanged: same resourceVersion
    changed = dict(made, data={"v": "2"})
    store.update(changed)
    with pytest.raises(Conflict):
        store.update(dict(made, data={"v": "3"}))  # made's resourceVersion is stale now
    with pytest.raises(Invalid):
        store.create(_cm(ns, "Not_A_Name"))
    with pytest.raises(NotFound):
        store.create(_cm("no-such-namespace", "c"))
    with pytest.raises(NotFound):
        store.list("example.invalid/v1", "Nothing")
    assert store.get("v1", "ConfigMap", ns, "absent") is None
    assert store.delete("v1", "ConfigMap", ns, "absent") is None
