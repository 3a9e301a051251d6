"""Shared builders for the GPU canary tests."""

from __future__ import annotations

from typing import Any

from gitopsbot.core.fleet.model import (
    ClusterSpec,
    Environment,
    PoolPolicy,
    ReleaseSpec,
    RolloutPolicy,
)
from gitopsbot.core.rollouts.canary_smoke import CanarySmoke

NS = "tensor-fusion-sys"


def spec(pool: str = "a", namespace: str = NS) -> ClusterSpec:
    return ClusterSpec(
        name="c1",
        environment=next(iter(Environment)),
        release=ReleaseSpec(
            chart_repo_url="https://charts.example",
            chart_name="tensor-fusion",
            version="1.8.7",
            release_name="tensor-fusion",
            namespace=namespace,
        ),
        values={"cluster": {"name": "tf"}},
        rollout=RolloutPolicy(pools=(PoolPolicy(name=pool, canary_batch_percentage=25),)),
    )


def smoke(timeout: int = 60, **meta: Any) -> CanarySmoke:
    return CanarySmoke(
        manifest={
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "ignored", **meta},
            "spec": {"containers": [{"name": "cuda", "image": "nvidia/cuda:12-base"}]},
        },
        timeout_seconds=timeout,
    )
