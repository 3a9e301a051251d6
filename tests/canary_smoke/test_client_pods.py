"""The canary batch's pod check does not take the bot's own GPU canary smoke pod for a client
pod of the pool: it has the client labels (the webhook must give it a worker), and a Failed
smoke pod judged as a client kept the canary check waiting instead of the GPU canary halting
the pool (found by tests/canary_smoke/test_canary_story.py)."""

from __future__ import annotations

from gitopsbot.core.rollouts import canary_smoke as cs
from gitopsbot.core.rollouts import tf_objects as tf
from tests.canary_smoke.helpers import smoke


def test_the_smoke_pod_is_not_a_client_pod() -> None:
    pod = cs.smoke_pod(
        smoke(), name="gitopsbot-gpu-canary-a-x", namespace="ns", gpupool="tf-a", node="n1",
        op_id="op", pool="a",
    )  # fmt: skip
    app = {"metadata": {"name": "app", "labels": {"tensor-fusion.ai/gpupool": "tf-a"}}}
    assert pod["metadata"]["labels"]["tensor-fusion.ai/gpupool"] == "tf-a"
    assert tf.client_pods("tf-a", [pod, app]) == [app]
