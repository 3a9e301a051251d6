"""sandbox/simulator/smoke.py: the GPU-path stand-in's judgement, as a pure function."""

from __future__ import annotations

from typing import Any

from gitopsbot.sandbox.simulator.smoke import BREAK_ANNOTATION, is_smoke, outcome, pending, status

TFC = {
    "metadata": {"name": "tf"},
    "spec": {
        "gpuPools": [
            {
                "name": "a",
                "specTemplate": {
                    "componentConfig": {"hypervisor": {"image": "hv:2"}, "worker": {"image": "w:2"}}
                },
            }
        ]
    },
}


def _pool(worker: str = "w:2") -> dict[str, Any]:
    return {
        "metadata": {"name": "tf-a", "labels": {"tensor-fusion.ai/managed-by": "tf"}},
        "spec": {"componentConfig": {"hypervisor": {"image": "hv:2"}, "worker": {"image": worker}}},
    }


def _hv(node: str, image: str, phase: str = "Running") -> dict[str, Any]:
    return {
        "metadata": {"name": f"hypervisor-{node}"},
        "spec": {"nodeName": node, "containers": [{"image": image}]},
        "status": {"phase": phase},
    }


def _smoke(node: str = "n1", **annotations: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "s",
            "labels": {"gitopsbot.io/smoke": "gpu-path", "tensor-fusion.ai/gpupool": "tf-a"},
            "annotations": annotations,
        },
        "spec": {"nodeSelector": {"kubernetes.io/hostname": node}, "containers": [{"name": "c"}]},
    }


def _judge(
    pod: dict[str, Any], *, worker: str = "w:2", broken: frozenset[str] = frozenset()
) -> tuple[bool, str]:
    return outcome(
        pod,
        tfcs=[TFC],
        gpupools=[_pool(worker)],
        hypervisors=[_hv("n1", "hv:2"), _hv("n2", "hv:1"), _hv("n3", "hv:2", "Pending")],
        broken_images=broken,
    )


def test_outcomes() -> None:
    assert _judge(_smoke()) == (True, "GPU call ok on node n1: hypervisor hv:2, worker w:2")
    assert _judge(_smoke("n2")) == (
        False,
        "node n2 not updated: hypervisor runs hv:1, the pool's new image is hv:2",
    )
    assert _judge(_smoke("n3")) == (False, "node n3: hypervisor hypervisor-n3 is Pending")
    assert _judge(_smoke("n9")) == (False, "node n9: 0 hypervisor pods, expected 1")
    assert _judge(_smoke(), worker="w:1") == (
        False,
        "worker runs w:1, the pool's new worker image is w:2",
    )
    ok, message = _judge(_smoke(), broken=frozenset({"w:2"}))
    assert not ok and message.endswith("broken GPU path for image w:2")
    ok, message = _judge(_smoke(**{BREAK_ANNOTATION: "nope"}))
    assert not ok and message == "GPU call failed on node n1 via worker w:2: nope"
    lost = _smoke()
    lost["metadata"]["labels"]["tensor-fusion.ai/gpupool"] = "tf-b"
    assert _judge(lost) == (False, "no worker: GPUPool tf-b not found")


def test_status_and_selection() -> None:
    pod = _smoke()
    assert is_smoke(pod) and pending(pod)
    done = status(pod, False, "why", "2026-12-04T18:00:00Z")
    assert done["phase"] == "Failed"
    assert done["containerStatuses"][0]["state"]["terminated"]["message"] == "why"
    assert not pending({**pod, "status": done})
    assert not is_smoke({"metadata": {"labels": {}}})
