"""KubeStore (adapters/kube_store.py) against the real control plane, and the same contract
against the API emulator over HTTP: the Store contract the controller simulator relies on.
Where the two servers differ, the test says what each does (docs/sandbox.md, "Where the
emulator differs from the real API server").

Aspects: watch events for create, modify and delete, in order, also across the server ending
each watch (resume from the resourceVersion); a watch restart that relists (after a broken
stream, or a resume answered 410 Gone) emits DELETED for an object deleted while no watch
ran; a custom kind installed after the watch started is picked up; create keeps a given
status (a second write to /status) and update_status writes only status, under the caller's
field manager; HTTP errors arrive as the emulator's ApiError subclasses (Conflict,
AlreadyExists, NotFound, Invalid).
"""

from __future__ import annotations

import copy
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gitopsbot.adapters import kube_store
from gitopsbot.adapters.kube_store import KubeStore
from gitopsbot.sandbox.apiserver import ApiServer
from gitopsbot.sandbox.apiserver.errors import (
    AlreadyExists,
    ApiError,
    Conflict,
    Invalid,
    NotFound,
)

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


@pytest.fixture(params=["emulator", pytest.param("realkube", marks=pytest.mark.realkube)])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Path, str]]:
    """(name, kubeconfig, a fresh namespace) on the real control plane or a new emulator."""
    if request.param == "realkube":
        plane = request.getfixturevalue("control_plane")
        namespace = request.getfixturevalue("realkube_namespace")
        yield "realkube", plane.write_kubeconfig(tmp_path / "kubeconfig"), namespace
        return
    with ApiServer() as api:
        api.store.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "t"}})
        yield "emulator", api.write_kubeconfig(tmp_path / "kubeconfig"), "t"


@pytest.fixture
def namespace(backend: tuple[str, Path, str]) -> str:
    return backend[2]


@pytest.fixture
def open_store(backend: tuple[str, Path, str]) -> Iterator[Callable[..., KubeStore]]:
    kubeconfig = backend[1]
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
    namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ns = namespace
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
    store.delete("v1", "ConfigMap", ns, "one")
    seen.wait_for(lambda ev: ("DELETED", "ConfigMap", "one") in ev)
    assert seen.of("one") == ["ADDED", "MODIFIED", "DELETED"]


def test_a_relist_after_a_broken_watch_reports_a_deletion_it_missed(
    open_store: Callable[..., KubeStore],
    namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ns = namespace
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


def test_an_expired_watch_relists_and_reports_what_vanished(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The emulator only: it expires a resume on demand (store.compact(): 410 Gone as an ERROR
    # event, as a real server does after etcd compaction, which it runs every 5 minutes).
    monkeypatch.setattr(kube_store, "WATCH_SECONDS", 1)
    resumed, gate = threading.Event(), threading.Event()
    lists: list[str] = []
    watch, relist = kube_store._Watcher._watch, KubeStore.list_with_version

    def held_watch(self: Any, rv: str) -> str:
        if lists and len(lists) == 1:  # the resume after the first stream: hold it
            resumed.set()
            gate.wait(20)
        return watch(self, rv)

    def counted_list(self: KubeStore, *args: Any, **kwargs: Any) -> Any:
        items, rv = relist(self, *args, **kwargs)
        lists.append(rv)
        return items, rv

    monkeypatch.setattr(kube_store._Watcher, "_watch", held_watch)
    monkeypatch.setattr(KubeStore, "list_with_version", counted_list)
    with ApiServer() as api:
        api.store.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "t"}})
        api.store.create(_cm("t", "doomed"))
        store = KubeStore.from_kubeconfig(
            api.write_kubeconfig(tmp_path / "kubeconfig"), watch_kinds=[("v1", "ConfigMap")]
        )
        try:
            seen = Recorder()
            store.subscribe(seen)
            seen.wait_for(lambda ev: ("ADDED", "ConfigMap", "doomed") in ev)
            assert resumed.wait(10)  # the first stream ended; its resume waits
            api.store.delete("v1", "ConfigMap", "t", "doomed")
            api.store.compact()
            gate.set()
            seen.wait_for(lambda ev: ("DELETED", "ConfigMap", "doomed") in ev)
            assert len(lists) == 2  # the resume expired (410) and was followed by a relist
        finally:
            store.close()


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
    open_store: Callable[..., KubeStore], backend: tuple[str, Path, str]
) -> None:
    ns = backend[2]
    real = backend[0] == "realkube"
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
        # An update without a resourceVersion: the real server refuses it for a custom
        # resource (422 "must be specified for an update"); the emulator takes it.
        unconditional = copy.deepcopy(status)
        del unconditional["metadata"]["resourceVersion"]
        if real:
            with pytest.raises(Invalid):
                store.update_status(unconditional, manager="sim-test")
        else:
            store.update_status(unconditional, manager="sim-test")
        seen.wait_for(lambda ev: ev.count(("MODIFIED", "Widget", "w")) >= 3)
        assert seen.of("w")[0] == "ADDED"
    finally:
        store.delete(
            "apiextensions.k8s.io/v1", "CustomResourceDefinition", None, f"widgets.{group}"
        )
    # The kind is no longer served: what the watch knew is reported gone.
    seen.wait_for(lambda ev: ("DELETED", "Widget", "w") in ev, timeout=60)


def test_http_errors_are_the_emulators_api_errors(
    open_store: Callable[..., KubeStore], namespace: str
) -> None:
    ns = namespace
    store = open_store()
    made = store.create(_cm(ns, "c"))
    with pytest.raises(AlreadyExists):
        store.create(_cm(ns, "c"))
    store.update(made)  # unchanged: same resourceVersion
    changed = dict(made, data={"v": "2"})
    store.update(changed)
    with pytest.raises(Conflict):
        store.update(dict(made, data={"v": "3"}))  # made's resourceVersion is stale now
    with pytest.raises(NotFound):
        store.create(_cm("no-such-namespace", "c"))
    with pytest.raises(NotFound):
        store.list("example.invalid/v1", "Nothing")
    assert store.get("v1", "ConfigMap", ns, "absent") is None
    assert store.delete("v1", "ConfigMap", ns, "absent") is None


def test_where_the_emulator_differs_from_the_real_server(
    backend: tuple[str, Path, str], open_store: Callable[..., KubeStore]
) -> None:
    """Each line: what the real server does, and what the emulator does instead."""
    name, _, ns = backend
    real = name == "realkube"
    store = open_store()
    # A DELETE answers a Status for most kinds (the object only where the registry says
    # ReturnDeletedObject, e.g. Pods); the emulator echoes the object.
    store.create(_cm(ns, "gone"))
    echoed = store.delete("v1", "ConfigMap", ns, "gone")
    assert (echoed is None) is real
    # metadata.name must be a DNS subdomain; the emulator takes any name.
    if real:
        with pytest.raises(Invalid):
            store.create(_cm(ns, "Not_A_Name"))
    else:
        store.create(_cm(ns, "Not_A_Name"))
    # ServiceAccount admission refuses a pod naming an account that does not exist.
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": ns},
        "spec": {
            "serviceAccountName": "missing",
            "containers": [{"name": "c", "image": "busybox:1"}],
        },
    }
    if real:
        with pytest.raises(ApiError) as refused:
            store.create(copy.deepcopy(pod))
        assert refused.value.code == 403
    else:
        store.create(copy.deepcopy(pod))
        store.delete("v1", "Pod", ns, "p")
    # A pod's status gets defaults the server derives (qosClass); the emulator keeps it as
    # written. Binding (the scheduler's pods/binding) exists only on the real server.
    del pod["spec"]["serviceAccountName"]
    made = store.create(copy.deepcopy(pod))
    assert ("qosClass" in (made.get("status") or {})) is real
    if real:
        store.bind(ns, "p", "some-node")
        bound = store.get("v1", "Pod", ns, "p")
        assert bound is not None and bound["spec"]["nodeName"] == "some-node"
    else:
        with pytest.raises(ApiError):
            store.bind(ns, "p", "some-node")
    # A graceful delete of a pod on a node waits for its kubelet to confirm (here: forever);
    # the emulator deletes at once.
    on_node = copy.deepcopy(pod)
    on_node["metadata"]["name"] = "q"
    on_node["spec"]["nodeName"] = "some-node"
    store.create(on_node)
    last = store.delete("v1", "Pod", ns, "q", grace_period_seconds=30)
    left = store.get("v1", "Pod", ns, "q")
    if real:
        assert last is not None and left is not None
        assert left["metadata"].get("deletionTimestamp")
        store.delete("v1", "Pod", ns, "q")  # grace period 0: what the simulated kubelet does
    else:
        assert left is None
    assert store.get("v1", "Pod", ns, "q") is None
