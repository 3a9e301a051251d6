"""The controller Deployment's Pods (simulator/controller_pods.py) and the console agent of
their ``cluster-agent`` container (simulator/agent.py), on the emulator's Store.

One Running, Ready Pod per replica of the current ReplicaSet, named, labelled and owned as the
ReplicaSet controller does; a rollout replaces them once rolled out. The agent logs connected
or rejected by ``SimConfig.console_tokens`` (changed at runtime), its token read from the
Secret the chart names; the token never appears in the store or in a log line. Over HTTP, the
kube adapter's ``container_log`` reads what R18 reads.
"""

from __future__ import annotations

import base64
import json
import logging
import re
from pathlib import Path
from typing import Any

import pytest

from gitopsbot.adapters.kube import KubeCluster
from gitopsbot.sandbox.apiserver import ApiServer
from gitopsbot.sandbox.apiserver.store import Store
from gitopsbot.sandbox.simulator import ControllerSim, ManualClock, SimConfig
from gitopsbot.sandbox.simulator.agent import ANNOTATION

NS = "tensor-fusion-sys"
CANARY = "canary-enroll-token-9c41f7e2"
Obj = dict[str, Any]
LABELS = {
    "app.kubernetes.io/name": "tensor-fusion",
    "app.kubernetes.io/component": "controller",
    "tensor-fusion.ai/component": "operator",
}


def _deployment(replicas: int = 1, *, agent: bool = True, plain_token: str = "") -> Obj:
    containers: list[Obj] = [{"name": "controller", "image": "op:1"}]
    if agent:
        token: Obj = (
            {"name": "ENROLL_TOKEN", "value": plain_token}
            if plain_token
            else {"name": "ENROLL_TOKEN",
                  "valueFrom": {"secretKeyRef": {"name": "tf-agent", "key": "enrollToken"}}}
        )  # fmt: skip
        env = [{"name": "AGENT_ID", "value": "lab-agent-7"}, token]
        containers.append({"name": "cluster-agent", "image": "agent:1", "env": env})
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "tf-controller", "namespace": NS, "labels": dict(LABELS)},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": dict(LABELS)},
            "template": {"metadata": {"labels": dict(LABELS)}, "spec": {"containers": containers}},
        },
    }


def _secret(token: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "tf-agent", "namespace": NS},
            "type": "Opaque", "stringData": {"enrollToken": token}}  # fmt: skip


class World:
    def __init__(self, config: SimConfig, store: Store | None = None) -> None:
        self.store = store or Store()
        self.store.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
        self.clock = ManualClock()
        self.sim = ControllerSim(self.store, config, clock=self.clock)

    def pods(self) -> list[Obj]:
        return self.store.list("v1", "Pod", NS)

    def restart(self, stamp: str) -> None:
        dep = self.store.get("apps/v1", "Deployment", NS, "tf-controller")
        assert dep is not None
        dep["spec"]["template"]["metadata"]["annotations"] = {"restartedAt": stamp}
        self.store.update(dep)

    def roll(self, delay: float) -> None:
        self.sim.settle()
        self.clock.advance(delay)
        self.sim.settle()


def test_one_running_pod_per_replica_replaced_by_a_rollout() -> None:
    w = World(SimConfig(controller_ready_delay=5.0))
    w.store.create(_deployment(replicas=2, agent=False))
    w.sim.settle()
    assert w.pods() == []  # not rolled out yet
    w.clock.advance(5.0)
    w.sim.settle()
    (rs,) = w.store.list("apps/v1", "ReplicaSet", NS)
    first = w.pods()
    assert len(first) == 2
    for pod in first:
        meta = pod["metadata"]
        suffix = r"-[bcdfghjklmnpqrstvwxz2456789]{5}"
        assert re.fullmatch(re.escape(rs["metadata"]["name"]) + suffix, meta["name"])
        assert meta["labels"] == {
            **LABELS,
            "pod-template-hash": rs["metadata"]["labels"]["pod-template-hash"],
        }
        assert meta["ownerReferences"][0]["uid"] == rs["metadata"]["uid"]
        assert meta["ownerReferences"][0]["kind"] == "ReplicaSet"
        assert meta["creationTimestamp"]
        status = pod["status"]
        assert status["phase"] == "Running"
        assert {"type": "Ready", "status": "True"} in status["conditions"]
        (cs,) = status["containerStatuses"]
        assert cs["ready"] and cs["started"] and cs["restartCount"] == 0
    w.restart("2026-12-04T10:00:00Z")
    w.sim.settle()
    assert [p["metadata"]["name"] for p in w.pods()] == [p["metadata"]["name"] for p in first]
    w.clock.advance(5.0)
    w.sim.settle()
    second = w.pods()
    assert len(second) == 2 and not {p["metadata"]["uid"] for p in second} & {
        p["metadata"]["uid"] for p in first
    }
    revision = "deployment.kubernetes.io/revision"
    current = max(w.store.list("apps/v1", "ReplicaSet", NS),
                  key=lambda r: int(r["metadata"]["annotations"][revision]))  # fmt: skip
    assert all(
        p["metadata"]["ownerReferences"][0]["uid"] == current["metadata"]["uid"] for p in second
    )
    # Scaled down: the newest extra goes.
    dep = w.store.get("apps/v1", "Deployment", NS, "tf-controller")
    assert dep is not None
    dep["spec"]["replicas"] = 1
    w.store.update(dep)
    w.roll(5.0)
    assert len(w.pods()) == 1


def _agent_lines(w: World) -> list[str]:
    return [p["metadata"]["annotations"][ANNOTATION] for p in w.pods()]


def test_agent_connects_or_is_rejected_by_the_console_tokens(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    w = World(SimConfig())
    w.store.create(_secret(CANARY))
    w.store.create(_deployment())
    w.sim.settle()
    (log,) = _agent_lines(w)
    assert re.fullmatch(
        r"\S+Z INFO cluster-agent starting, console enrollment as agent lab-agent-7\n"
        r"\S+Z INFO connected to TensorFusion console as agent lab-agent-7\n",
        log,
    )
    w.sim.set_console_tokens(frozenset({"another-token"}))
    w.restart("a")
    w.sim.settle()
    (log,) = _agent_lines(w)
    assert log.endswith(" ERROR enroll rejected by TensorFusion console: 401 unauthorized\n")
    w.sim.set_console_tokens(frozenset({"another-token", CANARY}))
    w.restart("b")
    w.sim.settle()
    (log,) = _agent_lines(w)
    assert log.endswith(" INFO connected to TensorFusion console as agent lab-agent-7\n")
    # The Secret emptied: no token.
    secret = w.store.get("v1", "Secret", NS, "tf-agent")
    assert secret is not None
    secret["data"] = {"enrollToken": base64.b64encode(b"").decode()}
    w.store.update(secret)
    w.restart("c")
    w.sim.settle()
    (log,) = _agent_lines(w)
    assert " ERROR no enroll token" in log

    # The canary is nowhere but in the Secret that holds it: no log, annotation, Event.
    objects, _ = w.store.dump()
    for obj in objects:
        if obj.get("kind") == "Secret":
            continue
        text = json.dumps(obj)
        assert CANARY not in text and base64.b64encode(CANARY.encode()).decode() not in text, obj[
            "kind"
        ]
    assert all(CANARY not in r.getMessage() for r in caplog.records)
    assert CANARY not in caplog.text


def test_plain_token_value_and_no_agent_container() -> None:
    w = World(SimConfig(console_tokens=frozenset({"plain-ok"})))
    w.store.create(_deployment(plain_token="plain-ok"))
    w.sim.settle()
    (log,) = _agent_lines(w)
    assert "connected to TensorFusion console as agent lab-agent-7" in log
    other = World(SimConfig())
    other.store.create(_deployment(agent=False))
    other.sim.settle()
    (pod,) = other.pods()
    assert ANNOTATION not in (pod["metadata"].get("annotations") or {})


def test_the_kube_adapter_reads_the_agent_log_over_http(tmp_path: Path) -> None:
    with ApiServer() as api:
        w = World(SimConfig(), store=api.store)
        api.store.create(_secret(CANARY))
        api.store.create(_deployment())
        w.sim.settle()
        (pod,) = w.pods()
        cluster = KubeCluster.from_kubeconfig(api.write_kubeconfig(tmp_path / "kubeconfig"))
        try:
            text = cluster.container_log(
                NS, pod["metadata"]["name"], "cluster-agent", tail_lines=20
            )
        finally:
            cluster.close()
    assert text.endswith(" INFO connected to TensorFusion console as agent lab-agent-7\n")
    assert CANARY not in text
