"""core.canary_smoke: pod name, node pick, manifest, judgement."""

from __future__ import annotations

import re

from gitopsbot.core.fleet.model import PoolPolicy
from gitopsbot.core.rollouts import canary_smoke as cs
from gitopsbot.core.rollouts.canary_smoke import CanarySmoke, CanaryVerdict, NodeView
from tests.canary_smoke.helpers import smoke


def test_pod_name_is_deterministic_short_and_dns_safe() -> None:
    a = cs.pod_name("op-20261204-1", "Training_Pool")
    assert a == cs.pod_name("op-20261204-1", "Training_Pool")
    assert a != cs.pod_name("op-20261204-2", "Training_Pool")
    assert a != cs.pod_name("op-20261204-1", "other")
    long = cs.pod_name("x", "p" * 200)
    for name in (a, long, cs.pod_name("x", "___")):
        assert len(name) <= 63
        assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name), name


def test_applies_to_canary_pools_by_default_or_the_listed_ones() -> None:
    canary = PoolPolicy(name="a", canary_batch_percentage=10)
    plain = PoolPolicy(name="b")
    default = CanarySmoke(manifest={})
    assert default.applies_to(canary) and not default.applies_to(plain)
    listed = CanarySmoke(manifest={}, pools=("b",))
    assert listed.applies_to(plain) and not listed.applies_to(canary)


def _hv(node: str, image: str, phase: str = "Running") -> tuple[str, str, tuple[str, ...]]:
    return (f"hypervisor-{node}", phase, (image,))


def test_pick_node_takes_the_first_updated_running_node() -> None:
    nodes = [
        NodeView("n3", True, (_hv("n3", "hv:2"),)),
        NodeView("n1", True, (_hv("n1", "hv:1"),)),  # not updated
        NodeView("n0", False, (_hv("n0", "hv:2"),)),  # GPUNode not Running
        NodeView("n2", True, (_hv("n2", "hv:2", "Pending"),)),  # replacement starting
        NodeView("n4", True, (_hv("n4", "hv:2"), _hv("n4x", "hv:1"))),  # two pods
    ]
    assert cs.updated_nodes(nodes, "hv:2") == [("n3", "hypervisor-n3")]
    assert cs.pick_node(nodes, "hv:2") == "n3"
    assert cs.pick_node(nodes, "hv:9") is None
    assert cs.pick_node(nodes, "") is None


def test_smoke_pod_is_enabled_marked_pinned_and_renamed() -> None:
    s = smoke(labels={"app": "smoke"}, generateName="x-")
    s.manifest["spec"]["nodeSelector"] = {"gpu": "yes"}
    pod = cs.smoke_pod(
        s, name="gitopsbot-gpu-canary-a-1", namespace="ns", gpupool="tf-a", node="n3",
        op_id="op-1", pool="a",
    )  # fmt: skip
    meta = pod["metadata"]
    assert meta["name"] == "gitopsbot-gpu-canary-a-1" and meta["namespace"] == "ns"
    assert "generateName" not in meta
    assert meta["labels"] == {
        "app": "smoke",
        "tensor-fusion.ai/enabled": "true",
        "tensor-fusion.ai/gpupool": "tf-a",
        "gitopsbot.io/smoke": "gpu-path",
        "gitopsbot.io/pool": "a",
    }
    assert meta["annotations"]["tensor-fusion.ai/gpupool"] == "tf-a"
    assert meta["annotations"]["gitopsbot.io/operation"] == "op-1"
    assert pod["spec"]["nodeSelector"] == {"gpu": "yes", "kubernetes.io/hostname": "n3"}
    assert pod["spec"]["restartPolicy"] == "Never"
    assert cs.node_of(pod) == "n3"
    # The fleet's manifest is not changed by making the pod.
    assert s.manifest["metadata"]["name"] == "ignored"


def _pod(phase: str, **terminated: object) -> dict[str, object]:
    state = {"terminated": terminated} if terminated else {"running": {}}
    return {"status": {"phase": phase, "containerStatuses": [{"state": state}]}}


def test_judge_and_exit_message() -> None:
    assert cs.judge(None, waited=0, timeout=10) is CanaryVerdict.RUNNING
    assert cs.judge(None, waited=10, timeout=10) is CanaryVerdict.FAILED
    assert cs.judge(_pod("Pending"), waited=3, timeout=10) is CanaryVerdict.RUNNING
    assert cs.judge(_pod("Running"), waited=10, timeout=10) is CanaryVerdict.FAILED
    assert cs.judge(_pod("Succeeded"), waited=99, timeout=10) is CanaryVerdict.PASSED
    assert cs.judge(_pod("Failed"), waited=0, timeout=10) is CanaryVerdict.FAILED
    assert cs.exit_message(_pod("Failed", message="cuda error 999\n")) == "cuda error 999"
    assert cs.exit_message(_pod("Failed", reason="OOMKilled")) == "OOMKilled"
    assert cs.exit_message(_pod("Failed", exitCode=3)) == "exit code 3"
    assert cs.exit_message({"status": {"message": "evicted"}}) == "evicted"
    waiting = {
        "status": {"containerStatuses": [{"state": {"waiting": {"reason": "ErrImagePull"}}}]}
    }
    assert cs.exit_message(waiting) == "ErrImagePull"


def test_messages_name_pod_node_and_why() -> None:
    ev = cs.CanaryEvidence(pod="p", namespace="ns", node="n3", phase="Running")
    assert "timed out after 12s on node n3 (Running)" in cs.verdict_message(
        CanaryVerdict.FAILED, ev, 12.5
    )
    failed = cs.CanaryEvidence(pod="p", namespace="ns", node="n3", phase="Failed", exit_message="x")
    assert cs.verdict_message(CanaryVerdict.FAILED, failed, 1) == (
        "GPU canary smoke pod p failed on node n3: x"
    )
    assert failed.as_dict() == {
        "pod": "p", "namespace": "ns", "node": "n3", "phase": "Failed", "exitMessage": "x"
    }  # fmt: skip
