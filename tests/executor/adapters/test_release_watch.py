"""#29: ``ReleaseWatches`` (adapters/release_watch.py), the idle check's watch of Helm's
release Secrets, on the emulator and on the real control plane: a revision written while
idle is reported by the watch's own event (no periodic look), metadata only; all watches on
one thread, no child process. On the emulator (its store and faults): 410 Gone re-lists, a
failing watch is unhealthy at once and healthy again once the server answers."""

from __future__ import annotations

import json
import os
import socket
import ssl
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gitopsbot.adapters.kube import KubeCluster
from gitopsbot.adapters.kube_request import configuration_from_kubeconfig
from gitopsbot.adapters.release_watch import (
    IO_THREADS,
    METADATA_LIST,
    METADATA_WATCH,
    ReleaseWatches,
)
from gitopsbot.sandbox.apiserver import ApiServer
from tests import open_files
from tests.executor.adapters.test_cluster_contract import SECRET_VALUE, _helm_record, _helm_secret
from tests.kube_pods import ON_BOTH_SERVERS, KubeServer

WAIT = 20.0  # seconds an awaited event may take on a loaded machine


def wait_for(what: Callable[[], bool], timeout: float = WAIT) -> bool:
    """Until ``what`` holds (True), or False after ``timeout``: waits for an event only."""
    deadline = time.monotonic() + timeout
    while not what():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def client_threads() -> int:
    """This process's threads but the in-process emulator's (one per connection it serves)."""
    return sum("process_request" not in t.name for t in threading.enumerate())


def children() -> list[int]:
    """Processes whose parent is this one."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            status = Path(f"/proc/{entry}/status").read_text()
        except OSError:
            continue
        ppid = next((ln.split()[1] for ln in status.splitlines() if ln.startswith("PPid:")), "")
        if ppid == str(os.getpid()):
            found.append(int(entry))
    return found


class Changes:
    """``on_change`` as the scheduler's nudge: which clusters, in order."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.event = threading.Event()

    def __call__(self, cluster: str) -> None:
        self.seen.append(cluster)
        self.event.set()

    def wait(self) -> bool:
        found = self.event.wait(WAIT)
        self.event.clear()
        return found


@pytest.fixture
def changes() -> Changes:
    return Changes()


@pytest.fixture
def watches(changes: Changes) -> Iterator[ReleaseWatches]:
    made = ReleaseWatches(lambda spec: None, on_change=changes)  # type: ignore[arg-type,return-value]
    try:
        yield made
    finally:
        made.close()


@ON_BOTH_SERVERS
def test_a_revision_written_while_idle_is_reported_by_the_watch(
    server: KubeServer, kube: KubeCluster, watches: ReleaseWatches, changes: Changes
) -> None:
    ns = server.namespace
    kube.create(_helm_secret(ns, _helm_record(ns, "rel", 1, "deployed", "Install complete")))
    before_threads, before_children = client_threads(), children()
    configuration = configuration_from_kubeconfig(server.kubeconfig)
    for i in range(10):  # ten clusters' watches, the first one's release is "rel"
        watches.watch(f"c{i}", configuration, ns, "rel" if i == 0 else f"other{i}")
    assert wait_for(lambda: all(watches.healthy(f"c{i}") for i in range(10)))
    # one loop thread and its small executor (name resolution), not one per watch
    assert client_threads() - before_threads == watches.threads() <= 1 + IO_THREADS
    assert not watches.take_change("c0")  # the first list is not a change
    # a person's revision (as helm or kubectl write it), while the bot looks at nothing
    kube.create(_helm_secret(ns, _helm_record(ns, "rel", 2, "deployed", "break-glass")))
    assert changes.wait()
    assert changes.seen == ["c0"] and watches.take_change("c0")
    assert watches.requests == 20  # per cluster one list and one watch, nothing since
    assert not watches.take_change("c0")  # cleared
    assert watches.healthy("c0") and not watches.take_change("c1")
    state = watches.state("c0")
    assert state is not None and state.events == ["ADDED"] and state.lists == 1
    assert SECRET_VALUE not in repr(state)
    # the revision rewritten (helm's status labels): MODIFIED
    kube.create(_helm_secret(ns, _helm_record(ns, "rel", 3, "pending-upgrade", "upgrading")))
    assert changes.wait() and state.events == ["ADDED", "ADDED"]
    assert kube.mark_helm_release_failed(ns, "rel", 3, "helm died")
    assert changes.wait() and state.events == ["ADDED", "ADDED", "MODIFIED"]
    assert children() == before_children  # no helm, no kubectl: not one child process


def test_the_watches_of_clusters_given_up_stop(
    tmp_path: Path, watches: ReleaseWatches, changes: Changes
) -> None:
    """A replica that gave up or lost a shard keeps only its clusters' watches
    (``keep_only``): a given-up cluster's revision wakes nothing here, its holder's does."""
    with ApiServer(bookmark_interval=3600) as api:
        kube = KubeCluster.from_kubeconfig(api.write_kubeconfig(tmp_path / "kubeconfig"))
        configuration = configuration_from_kubeconfig(tmp_path / "kubeconfig")
        try:
            for name in ("c0", "c1"):
                watches.watch(name, configuration, "default", f"rel-{name}")
            assert wait_for(lambda: watches.healthy("c0") and watches.healthy("c1"))
            state = watches.state("c0")
            assert state is not None and state.task is not None
            watches.keep_only({"c1"})
            assert watches.state("c0") is None and not watches.healthy("c0")
            assert wait_for(lambda: state.task is not None and state.task.done())
            for name in ("c0", "c1"):
                rel = f"rel-{name}"
                kube.create(
                    _helm_secret("default", _helm_record("default", rel, 2, "deployed", "x"))
                )
            assert changes.wait()
            assert wait_for(lambda: "c1" in changes.seen)
            assert "c0" not in changes.seen
        finally:
            kube.close()


def test_the_emulator_serves_watches_on_descriptors_past_1024(
    tmp_path: Path, watches: ReleaseWatches, changes: Changes
) -> None:
    """The sandbox's API server in this process, its accepted sockets numbered past 1,024 as
    with 1,000 release watches: its check for a client gone used ``select()``, which refuses
    such a descriptor, so every watch broke at once and woke its cluster (#29: 5,000 breaks
    in five minutes at 1,000 clusters)."""
    with ApiServer(bookmark_interval=3600) as api, open_files.past(1100):
        configuration = configuration_from_kubeconfig(api.write_kubeconfig(tmp_path / "kc"))
        watches.watch("c0", configuration, "default", "rel")
        assert wait_for(lambda: watches.healthy("c0"))
        time.sleep(2.0)  # the server's loop checks the client every half second
        assert watches.counts() == (1, 0, 0) and changes.seen == []


def test_410_gone_lists_again_and_counts_as_a_change(
    tmp_path: Path, watches: ReleaseWatches, changes: Changes
) -> None:
    """The watch resumes from its resourceVersion (here every second: the server ends each
    watch after timeoutSeconds=1, with no bookmark); once the history is compacted past it,
    the server answers 410 Gone and the watch lists again: a change, since events may have
    been missed in between."""
    with ApiServer(bookmark_interval=3600) as api:
        kube = KubeCluster.from_kubeconfig(api.write_kubeconfig(tmp_path / "kubeconfig"))
        kube.create(_helm_secret("default", _helm_record("default", "rel", 1, "deployed", "x")))
        configuration = configuration_from_kubeconfig(tmp_path / "kubeconfig")
        watches_1s = ReleaseWatches(lambda spec: None, on_change=changes, watch_seconds=1)  # type: ignore[arg-type,return-value]
        try:
            watches_1s.watch("c0", configuration, "default", "rel")
            assert wait_for(lambda: watches_1s.healthy("c0"))
            state = watches_1s.state("c0")
            assert state is not None
            # another object moves the store on (the watch sees none of it), then compaction
            kube.create({"apiVersion": "v1", "kind": "ConfigMap",
                         "metadata": {"name": "unrelated", "namespace": "default"}})  # fmt: skip
            api.store.compact()
            assert changes.wait()
            assert state.events == ["RELIST"] and state.lists == 2
            assert watches_1s.take_change("c0") and watches_1s.healthy("c0")
        finally:
            watches_1s.close()
            kube.close()


def test_a_failing_watch_is_unhealthy_at_once_and_recovers(
    tmp_path: Path, changes: Changes
) -> None:
    with ApiServer(bookmark_interval=3600) as api:
        configuration = configuration_from_kubeconfig(api.write_kubeconfig(tmp_path / "kc"))
        watches = ReleaseWatches(
            lambda spec: None, on_change=changes, watch_seconds=1, backoff_max=0.2
        )  # type: ignore[arg-type,return-value]
        try:
            watches.watch("c0", configuration, "default", "rel")
            assert wait_for(lambda: watches.healthy("c0"))
            assert watches.counts() == (1, 0, 0)  # /metrics: one healthy, none broke yet
            rule = api.faults.error(503, path="/api/v1/namespaces/default/secrets*")
            # the next resume (within a second) is refused: unhealthy, the idle check lists
            assert wait_for(lambda: not watches.healthy("c0"))
            state = watches.state("c0")
            assert state is not None and "503" in state.error
            # A resting cluster is woken, so its pass sets its next look for a broken watch
            # (a minute, not ten); the wake-up is no change to read.
            assert wait_for(lambda: "c0" in changes.seen)
            assert watches.counts() == (0, 1, 1)
            api.faults.remove(rule)
            assert wait_for(lambda: watches.healthy("c0"))
            assert not watches.take_change("c0")  # resumed from its resourceVersion: no gap
        finally:
            watches.close()


@ON_BOTH_SERVERS
def test_the_server_streams_a_metadata_watch(server: KubeServer, kube: KubeCluster) -> None:
    """What the watch asks, on the wire: both servers send each event's object as a
    PartialObjectMetadata (the emulator as the real one), so no record crosses the wire."""
    ns = server.namespace
    listed = server.request("GET", f"/api/v1/namespaces/{ns}/secrets", accept=METADATA_LIST)
    kube.create(_helm_secret(ns, _helm_record(ns, "rel", 1, "deployed", "ok")))
    query = urllib.parse.urlencode({
        "watch": "true", "labelSelector": "owner=helm,name=rel", "timeoutSeconds": "1",
        "resourceVersion": listed["metadata"]["resourceVersion"],
    })  # fmt: skip
    req = urllib.request.Request(f"{server.url}/api/v1/namespaces/{ns}/secrets?{query}")
    req.add_header("Accept", METADATA_WATCH)
    if server.token:
        req.add_header("Authorization", f"Bearer {server.token}")
    context = ssl.create_default_context(cafile=str(server.ca_file)) if server.ca_file else None
    with urllib.request.urlopen(req, context=context, timeout=30) as resp:
        events = [json.loads(line) for line in resp.read().splitlines() if line.strip()]
    [added] = [e for e in events if e["type"] == "ADDED"]
    obj = added["object"]
    assert (obj["kind"], obj["apiVersion"]) == ("PartialObjectMetadata", "meta.k8s.io/v1")
    assert set(obj) == {"kind", "apiVersion", "metadata"}
    assert obj["metadata"]["labels"]["version"] == "1"
    assert SECRET_VALUE not in json.dumps(events)


def test_the_token_is_taken_afresh_at_each_connect_off_the_loop(
    tmp_path: Path, changes: Changes
) -> None:
    """An exec plugin's (or a rotated token file's) token: the configuration's refresh hook
    runs before every list and watch request, on the small executor, never on the loop."""
    with ApiServer(bookmark_interval=3600) as api:
        configuration = configuration_from_kubeconfig(api.write_kubeconfig(tmp_path / "kc"))
        calls: list[str] = []

        def refresh(conf: Any) -> None:  # what an exec plugin's hook does
            calls.append(threading.current_thread().name)
            conf.api_key["BearerToken"] = f"token-{len(calls)}"
            conf.api_key_prefix["BearerToken"] = "Bearer"

        configuration.refresh_api_key_hook = refresh
        watches = ReleaseWatches(lambda spec: None, on_change=changes, watch_seconds=1)  # type: ignore[arg-type,return-value]
        try:
            watches.watch("c0", configuration, "default", "rel")
            assert wait_for(lambda: len(calls) >= 2)  # the first watch, then its resume
            assert all(name.startswith("release-watches-io") for name in calls), calls
            assert watches.healthy("c0")
        finally:
            watches.close()


def test_a_quiet_watch_is_not_taken_for_a_stall_and_a_dead_peer_is_found_by_keepalive() -> None:
    """The real server sends no bookmark while nothing changes, so the stream's read timeout
    outlives the server's own end of the stream; a dead peer is left to TCP keepalive (every
    watch connection asks for it), which costs no request."""
    from gitopsbot.adapters import release_watch

    made = ReleaseWatches(lambda spec: None, watch_seconds=600)  # type: ignore[arg-type,return-value]
    assert made._read_timeout > 600
    options = release_watch._keepalive()
    assert (socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1) in options
    if hasattr(socket, "TCP_KEEPIDLE"):
        idle, interval, count = release_watch.KEEPALIVE[0]
        assert (socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, idle) in options
        assert idle + interval * count <= 60  # found within about a minute
