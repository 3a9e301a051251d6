"""The Cluster port's waits (``wait_deployment_ready``, ``wait_for_change``), run against
FakeCluster (blocking waits on), KubeCluster on the emulator and on the real control plane
(``cluster_target``).

Covers: a ready Deployment returns at once; one that becomes ready during the wait returns
ready well before the timeout; one that does not returns the last (falsy) view once the
timeout passed; a missing one is KubeNotFound. A change of a watched object during the wait
is True well before the timeout; a change of another object, or none, is False after the
timeout; a change made after the caller's read but before the wait (``since``) is True at
once. On the emulator, watches cut by fault injection change none of these answers.

Assertions are on the value returned and on its coming before the timeout, never on ratios.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from gitopsbot.errors import KubeNotFound
from gitopsbot.testing import FakeCluster
from tests.executor.adapters.conftest import Target
from tests.kube_pods import path as rest_path
from tests.kube_pods import running_pods

LONG = 30.0  # a timeout the waits below must not reach
EARLY = 15.0  # "well before LONG": far above the few hundred ms a change takes to arrive


@pytest.fixture
def target(cluster_target: Target) -> Target:
    if isinstance(cluster_target.impl, FakeCluster):
        cluster_target.impl.blocking_waits = True  # waits take real time here
    return cluster_target


@pytest.fixture
def later() -> Iterator[Callable[[float, Callable[[], None]], None]]:
    """``later(seconds, action)``: run ``action`` on a thread after ``seconds``; the test
    fails if an action raised."""
    threads: list[threading.Thread] = []
    errors: list[BaseException] = []

    def schedule(seconds: float, action: Callable[[], None]) -> None:
        def run() -> None:
            time.sleep(seconds)
            try:
                action()
            except Exception as e:  # noqa: BLE001 - reported by the fixture, not lost on the thread
                errors.append(e)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        threads.append(thread)

    yield schedule
    for thread in threads:
        thread.join(timeout=60)
    if errors:
        raise errors[0]


def _deployment(ns: str, name: str) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "c", "image": "busybox:1"}]},
            },
        },
    }


def _cm(ns: str, name: str, **data: str) -> dict[str, Any]:
    meta = {"name": name, "namespace": ns}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}


def _unready_deployment(target: Target, name: str) -> None:
    """A Deployment nothing rolls out until ``_roll_out`` (the fake's and the emulator's
    instant roll-out held back; the real server has no kubelet to run its pod)."""
    impl, ns = target.impl, target.namespace
    if isinstance(impl, FakeCluster):
        impl.instant_deployments = False
    elif target.server is not None and target.server.emulator is not None:
        target.server.emulator.kubelet.exclude("Deployment", ns, name)
    impl.create(_deployment(ns, name))


def _roll_out(target: Target, name: str, done: threading.Event) -> None:
    """What a controller and kubelet would do for that Deployment, from another thread."""
    impl, ns, server = target.impl, target.namespace, target.server
    if isinstance(impl, FakeCluster):
        current = impl.get("apps/v1", "Deployment", ns, name)
        assert current is not None
        generation = current["metadata"]["generation"]
        counts = dict.fromkeys(("replicas", "updatedReplicas", "readyReplicas"), 1)
        status = {"observedGeneration": generation, **counts, "availableReplicas": 1}
        impl.put({**current, "status": status})
        return
    assert server is not None
    if server.emulator is not None:
        current = server.get("apps/v1", "Deployment", ns, name)
        assert current is not None
        status = {
            "observedGeneration": current["metadata"]["generation"],
            "replicas": 1,
            "updatedReplicas": 1,
            "readyReplicas": 1,
            "availableReplicas": 1,
        }
        server.request(
            "PATCH",
            rest_path("apps/v1", "Deployment", ns, name) + "/status",
            {"status": status},
            content_type="application/merge-patch+json",
        )
        return
    # The real Deployment controller reports it available once its pod runs and is ready.
    with running_pods(server):
        done.wait(LONG)


def test_ready_deployment_returns_at_once(target: Target) -> None:
    cluster, ns = target.impl, target.namespace
    _unready_deployment(target, "ctl")
    done = threading.Event()
    roll = threading.Thread(target=_roll_out, args=(target, "ctl", done), daemon=True)
    roll.start()
    try:
        deadline = time.monotonic() + LONG
        while not cluster.deployment_ready(ns, "ctl"):  # made ready before the wait
            assert time.monotonic() < deadline, "the Deployment never rolled out"
            time.sleep(0.05)
        began = time.monotonic()
        ready = cluster.wait_deployment_ready(ns, "ctl", timeout=LONG)
        assert ready and ready.name == "ctl"
        assert time.monotonic() - began < 2.0  # one read, no watch
    finally:
        done.set()
        roll.join(timeout=LONG)


def test_deployment_becoming_ready_during_the_wait(
    target: Target, later: Callable[[float, Callable[[], None]], None]
) -> None:
    cluster, ns = target.impl, target.namespace
    _unready_deployment(target, "ctl")
    assert not cluster.deployment_ready(ns, "ctl")
    done = threading.Event()
    later(0.5, lambda: _roll_out(target, "ctl", done))
    began = time.monotonic()
    try:
        ready = cluster.wait_deployment_ready(ns, "ctl", timeout=LONG)
    finally:
        done.set()
    took = time.monotonic() - began
    assert ready, ready.message
    assert took < EARLY, f"returned after {took:.1f}s of a {LONG}s timeout"


def test_deployment_not_ready_by_the_timeout(target: Target) -> None:
    cluster, ns = target.impl, target.namespace
    _unready_deployment(target, "ctl")
    began = time.monotonic()
    view = cluster.wait_deployment_ready(ns, "ctl", timeout=1.0)
    took = time.monotonic() - began
    assert not view and view.name == "ctl" and view.message
    assert 0.9 <= took < EARLY
    with pytest.raises(KubeNotFound):
        cluster.wait_deployment_ready(ns, "nope", timeout=1.0)


def test_a_change_during_the_wait(
    target: Target, later: Callable[[float, Callable[[], None]], None]
) -> None:
    cluster, ns = target.impl, target.namespace
    cluster.create(_cm(ns, "a", v="1"))
    cluster.create(_cm(ns, "b", v="1"))
    later(0.5, lambda: cluster.patch_merge("v1", "ConfigMap", ns, "a", {"data": {"v": "2"}}))
    began = time.monotonic()
    assert cluster.wait_for_change("v1", "ConfigMap", ns, names=["a"], timeout=LONG) is True
    assert time.monotonic() - began < EARLY
    # Every ConfigMap of the namespace: a new one counts.
    later(0.5, lambda: cluster.create(_cm(ns, "c", v="1")))
    began = time.monotonic()
    assert cluster.wait_for_change("v1", "ConfigMap", ns, timeout=LONG) is True
    assert time.monotonic() - began < EARLY


def test_no_change_of_the_watched_objects(
    target: Target, later: Callable[[float, Callable[[], None]], None]
) -> None:
    cluster, ns = target.impl, target.namespace
    cluster.create(_cm(ns, "a", v="1"))
    cluster.create(_cm(ns, "b", v="1"))
    later(0.3, lambda: cluster.patch_merge("v1", "ConfigMap", ns, "b", {"data": {"v": "2"}}))
    began = time.monotonic()
    assert cluster.wait_for_change("v1", "ConfigMap", ns, names=["a"], timeout=1.5) is False
    assert 1.4 <= time.monotonic() - began < EARLY
    assert cluster.wait_for_change("v1", "ConfigMap", ns, names=["a"], timeout=0) is False


def test_a_change_after_the_callers_read_is_not_missed(target: Target) -> None:
    cluster, ns = target.impl, target.namespace
    cluster.create(_cm(ns, "a", v="1"))
    cluster.create(_cm(ns, "b", v="1"))
    read = {
        name: cluster.get("v1", "ConfigMap", ns, name)["metadata"]["resourceVersion"]
        for name in ("a", "b")
    }
    cluster.patch_merge("v1", "ConfigMap", ns, "b", {"data": {"v": "2"}})  # before the wait
    began = time.monotonic()
    assert cluster.wait_for_change("v1", "ConfigMap", ns, since=read, timeout=LONG) is True
    assert time.monotonic() - began < EARLY
    # Deleted since the read counts too; the same versions as stored do not.
    cluster.delete("v1", "ConfigMap", ns, "a")
    assert cluster.wait_for_change("v1", "ConfigMap", ns, since={"a": read["a"]}, timeout=0)
    now = cluster.get("v1", "ConfigMap", ns, "b")["metadata"]["resourceVersion"]
    assert not cluster.wait_for_change("v1", "ConfigMap", ns, since={"b": now}, timeout=0.5)


# -- watches cut by the emulator's fault injection ---------------------------------------


@pytest.fixture
def emulated(target: Target) -> Target:
    if target.server is None or target.server.emulator is None:
        pytest.skip("fault injection is the emulator's")
    return target


def test_dropped_watches_still_see_the_deployment_ready(
    emulated: Target, later: Callable[[float, Callable[[], None]], None]
) -> None:
    assert emulated.server is not None
    emulated.server.api.faults.drop_watches(path="*deployments*", after=0.2)
    cluster, ns = emulated.impl, emulated.namespace
    _unready_deployment(emulated, "ctl")
    later(1.5, lambda: _roll_out(emulated, "ctl", threading.Event()))
    began = time.monotonic()
    ready = cluster.wait_deployment_ready(ns, "ctl", timeout=LONG)
    assert ready, ready.message
    assert time.monotonic() - began < EARLY
    # Timed out through drops: still the last view, not an error.
    _unready_deployment(emulated, "other")
    assert not cluster.wait_deployment_ready(ns, "other", timeout=1.0)


def test_dropped_watches_still_see_a_change(
    emulated: Target, later: Callable[[float, Callable[[], None]], None]
) -> None:
    assert emulated.server is not None
    emulated.server.api.faults.drop_watches(path="*configmaps*", after=0.2)
    cluster, ns = emulated.impl, emulated.namespace
    cluster.create(_cm(ns, "a", v="1"))
    later(1.5, lambda: cluster.patch_merge("v1", "ConfigMap", ns, "a", {"data": {"v": "2"}}))
    began = time.monotonic()
    assert cluster.wait_for_change("v1", "ConfigMap", ns, names=["a"], timeout=LONG) is True
    assert time.monotonic() - began < EARLY
    assert cluster.wait_for_change("v1", "ConfigMap", ns, names=["a"], timeout=1.0) is False
