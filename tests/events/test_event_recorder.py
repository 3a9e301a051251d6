"""The recorder never slows or fails a pass: ``happened`` only queues (bounded, the oldest
dropped); a hung or failing API server costs a short timeout on the recorder's own thread and
one log line per cluster; a secret in a failing helm step's error never reaches an Event."""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gitopsbot.adapters.kube_events import KubeEvents
from gitopsbot.bot.announcer import Announcer
from gitopsbot.bot.event_recorder import EventRecorder
from gitopsbot.bot.steps.executor import Executor
from gitopsbot.core.fleet.model import ClusterSpec
from gitopsbot.core.notices import kube_events as ke
from gitopsbot.core.notices.happenings import Happening, HappeningKind
from gitopsbot.core.notices.kube_events import ObjectRef
from gitopsbot.core.operations import operation
from gitopsbot.core.records.journal import OperationKind, OperationStatus, StepState
from gitopsbot.core.rollouts import tf_objects as tf
from gitopsbot.errors import HelmFailed, KubeForbidden, KubeServerError
from gitopsbot.sandbox.apiserver import ApiServer
from gitopsbot.testing import FakeCluster, FakeEvents, FakeHelm
from tests.core.plan_builders import cluster, desired_values
from tests.events.conftest import install_objects
from tests.executor.test_helm_step_secrets import TOKEN, Source
from tests.kube_pods import KubeServer

NOW = datetime(2026, 12, 3, 9, 0, tzinfo=UTC)
TFC = "gpu-cluster-eu"


def spec() -> ClusterSpec:
    return cluster(values=desired_values(cluster={"name": TFC}))


def step(n: int, kind: HappeningKind = HappeningKind.STEP_STARTED) -> Happening:
    return Happening(kind, spec().name, "op-1", OperationKind.UPGRADE, "a" * 40, step=f"s{n}")


def recorder(events: FakeEvents | KubeEvents, **kwargs: int) -> EventRecorder:
    return EventRecorder(lambda _c, _s: spec(), lambda _spec: events, now=lambda: NOW, **kwargs)


def tfc_ref() -> ObjectRef:
    return ObjectRef(tf.TF, "TensorFusionCluster", TFC)


def test_happenings_become_events_in_order() -> None:
    fake = FakeEvents()
    fake.add("TensorFusionCluster", TFC)
    rec = recorder(fake)
    for n in range(5):
        rec.happened(step(n))
    assert rec.flush(5)
    rec.close()
    notes = [e.spec.note for e in fake.recorded(tfc_ref())]
    assert notes == [f"upgrade op-1: step s{n} started" for n in range(5)]


def test_a_full_queue_drops_the_oldest_with_a_log_line(caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeEvents()
    fake.add("TensorFusionCluster", TFC)
    gate = threading.Event()
    fake.delay = 0.0
    rec = recorder(fake, capacity=3)
    original = fake.emit

    entered = threading.Event()

    def blocked(*args: object, **kwargs: object) -> None:
        entered.set()
        gate.wait(5)
        original(*args, **kwargs)  # type: ignore[arg-type]

    fake.emit = blocked  # type: ignore[method-assign]
    with caplog.at_level(logging.WARNING):
        rec.happened(step(0))  # taken by the thread, blocked in emit
        assert entered.wait(5)
        for n in range(1, 6):
            rec.happened(step(n))  # s1, s2 dropped: s3..s5 stay
    gate.set()
    assert rec.flush(5)
    rec.close()
    assert rec.dropped == 2
    assert "Events queue full" in caplog.text
    notes = [e.spec.note.split()[3] for e in fake.recorded(tfc_ref())]
    assert notes == ["s0", "s3", "s4", "s5"]


def test_failures_are_logged_once_per_cluster_and_dropped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake = FakeEvents()
    fake.add("TensorFusionCluster", TFC)
    fake.fail(KubeServerError("create Event: HTTP 500 InternalError"), times=3)
    fake.fail(KubeForbidden("events.events.k8s.io is forbidden: cannot create"), times=1)
    rec = recorder(fake)
    with caplog.at_level(logging.WARNING):
        for n in range(5):
            rec.happened(step(n))
        assert rec.flush(5)
    rec.close()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2, warnings  # one for the 500s, one for the 403
    assert [e.spec.note.split()[3] for e in fake.recorded(tfc_ref())] == ["s4"]


def test_an_absent_tensorfusioncluster_costs_one_line(caplog: pytest.LogCaptureFixture) -> None:
    rec = recorder(FakeEvents())  # nothing to regard
    with caplog.at_level(logging.WARNING):
        for n in range(3):
            rec.happened(step(n))
        assert rec.flush(5)
    rec.close()
    assert len([r for r in caplog.records if "KubeNotFound" in r.getMessage()]) == 1


@pytest.fixture
def hung_server() -> Iterator[str]:
    """An API server that accepts connections and never answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join()
        for conn in held:
            conn.close()
        listener.close()


def _kubeconfig(tmp_path: Path, url: str) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: c, cluster: {{server: '{url}'}}}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    return path


def test_a_hung_api_server_does_not_slow_the_pass(
    hung_server: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    adapter = KubeEvents.from_kubeconfig(
        _kubeconfig(tmp_path, hung_server), instance="r", request_timeout_seconds=0.3
    )
    rec = recorder(adapter)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING):
        for n in range(8):
            rec.happened(step(n))  # the pass's thread
        told = time.monotonic() - started
        assert told < 0.25, f"happened() took {told:.3f}s for 8 happenings"  # < 1 timeout
        # The recorder's thread: each Event costs one timeout (0.3 s), then is dropped.
        assert rec.flush(20)
    rec.close()
    adapter.close()
    assert len([r for r in caplog.records if "KubeServerError" in r.getMessage()]) == 1


def test_500s_from_the_emulator_are_dropped_and_the_next_event_goes_through(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    api = ApiServer()
    api.start()
    try:
        uids = install_objects(_server(api, tmp_path), TFC, f"{TFC}-shared")
        rule = api.faults.error(500, path="/apis/events.k8s.io/*", method="POST", times=3)
        adapter = KubeEvents.from_kubeconfig(api.write_kubeconfig(tmp_path / "kc"), instance="r")
        rec = recorder(adapter)
        started = time.monotonic()
        with caplog.at_level(logging.WARNING):
            for n in range(4):
                rec.happened(step(n))
            assert rec.flush(10)
        rec.close()
        assert time.monotonic() - started < 5
        assert rule.hits == 3
        [event] = adapter.recorded(tfc_ref())
        assert event.spec.note.split()[3] == "s3"
        assert event.regarding.uid == uids["TensorFusionCluster"]
        adapter.close()
    finally:
        api.stop()
    assert len([r for r in caplog.records if "KubeServerError" in r.getMessage()]) == 1


def _server(api: ApiServer, tmp_path: Path) -> KubeServer:
    return KubeServer("emulator", api.url, api.write_kubeconfig(tmp_path / "k"), "default",
                      emulator=api)  # fmt: skip


def test_a_secret_in_a_failing_helm_step_never_reaches_an_event() -> None:
    """The canary: helm's error carries the resolved secret; the step's detail, the
    happenings and every Event note have it masked."""
    helm = FakeHelm()
    helm.fail(
        "upgrade",
        HelmFailed(f"helm upgrade tensor-fusion-sys: exit 1: Error: bad agent token {TOKEN}"),
    )
    s = spec()
    journal = operation.new_operation(
        kind=OperationKind.UPGRADE, cluster=s.name, desired_sha="a" * 40, created_at=NOW,
        policy=s.rollout,
    )  # fmt: skip
    executor = Executor(cluster=FakeCluster(), helm=helm, secrets=Source())
    out = executor.run(journal.step("helm-upgrade"), journal, s, now=NOW)
    assert out.state is StepState.FAILED
    fake = FakeEvents()
    fake.add("TensorFusionCluster", TFC)
    rec = recorder(fake)
    announcer = Announcer([rec])
    running = replace(journal, status=OperationStatus.RUNNING)
    announcer.announce(running)
    failed = replace(journal.step("helm-upgrade"), state=out.state, detail=out.detail,
                     started_at=NOW, finished_at=NOW)  # fmt: skip
    steps = tuple(failed if st.name == failed.name else st for st in journal.steps)
    told = announcer.announce(
        replace(running, steps=steps, status=OperationStatus.FAILED, failure=out.detail)
    )
    assert rec.flush(5)
    rec.close()
    events = fake.recorded(tfc_ref())
    assert [e.spec.reason for e in events] == ["Started", "StepStarted", "StepFailed", "Failed"]
    assert "bad agent token ***" in events[2].spec.note
    assert all(TOKEN not in e.spec.note for e in events)
    assert all(TOKEN not in h.summary() for h in told)


def test_a_token_shaped_word_is_masked_in_a_note() -> None:
    leaked = "ghp_" + "a1B2" * 9
    h = replace(step(0, HappeningKind.STEP_FAILED), detail=f"401 with token {leaked}")
    note = ke.event_of(h).note
    assert leaked not in note and note.endswith("401 with token ***")


def test_the_adapter_masks_the_secrets_it_is_given(tmp_path: Path) -> None:
    """As ``app.event_recorder`` wires it: the cluster's resolved secrets and the forge's."""
    api = ApiServer()
    api.start()
    try:
        install_objects(_server(api, tmp_path), TFC, f"{TFC}-shared")
        adapter = KubeEvents.from_kubeconfig(
            api.write_kubeconfig(tmp_path / "kc"), instance="r", secrets=lambda: [TOKEN, "x"]
        )
        said = ke.EventSpec("StepFailed", "Warning", "Upgrade", f"helm: token {TOKEN} x refused")
        adapter.emit(tfc_ref(), said, at=NOW)
        [event] = adapter.recorded(tfc_ref())
        assert event.spec.note == "helm: token *** *** refused"
        adapter.close()
    finally:
        api.stop()
