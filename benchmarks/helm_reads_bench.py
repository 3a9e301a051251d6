"""Benchmark (issue 13): reading a Helm release with helm against reading Helm's storage.

A release of the sandbox chart (examples/charts/tensor-fusion-<version>, installed then
upgraded: two revisions, the real record size) on the sandbox's API emulator in this
process, or on the cluster of ``--kubeconfig``. Then, in alternating rounds (load on the
machine falls on both), the reads a pass makes, through two HelmCli objects: one spawning
helm (``helm history --max 1`` for status, ``helm get values``), one reading the release
Secrets through the Kubernetes API (``releases=HelmStorage(...)``, as ``gitopsbot run``
wires it). Each round checks that both read the same. Prints the wall-clock median of each
read and the helm/storage ratio.

    python benchmarks/helm_reads_bench.py [--rounds 15] [--helm helm4|helm3]
                                          [--kubeconfig PATH --namespace NS]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from gitopsbot.ports.helm import UpgradeRequest

ROOT = Path(__file__).resolve().parent.parent
CHARTS = ROOT / "examples" / "charts"
VALUES = {"cluster": {"extraPools": [{"name": "training"}]}}
RELEASE = "tf-reads-bench"


def timed(action: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    result = action()
    return time.perf_counter() - start, result


def reads(helm: Any, namespace: str) -> dict[str, Callable[[], Any]]:
    """What a pass reads of one release: intake and the backup (status + values), and an
    upgrade's own three (the step's history, the pending check and the result: status)."""
    return {
        "status": lambda: helm.status(RELEASE, namespace),
        "get_values": lambda: helm.get_values(RELEASE, namespace),
        "status + get_values": lambda: (
            helm.status(RELEASE, namespace),
            helm.get_values(RELEASE, namespace),
        ),
        "an upgrade's reads (history + 2 status)": lambda: (
            helm.history(RELEASE, namespace),
            helm.status(RELEASE, namespace),
            helm.status(RELEASE, namespace),
        ),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Time HelmCli's release reads through helm (a process each) against "
        "reads of Helm's Secret storage through the Kubernetes API (HelmStorage).",
    )
    parser.add_argument("--rounds", type=int, default=15, help="rounds of each (default 15)")
    parser.add_argument("--helm", choices=("helm4", "helm3"), default="helm4")
    parser.add_argument("--chart-versions", default="1.8.0,1.8.7", help="installed in order")
    parser.add_argument("--kubeconfig", help="a cluster to use instead of the API emulator")
    parser.add_argument("--namespace", default="default", help="with --kubeconfig")
    args = parser.parse_args(argv)

    from gitopsbot import settings
    from gitopsbot.adapters import binaries
    from gitopsbot.adapters.helm import HelmCli
    from gitopsbot.adapters.helm_storage import HelmStorage
    from gitopsbot.adapters.kube import KubeCluster, RetryPolicy
    from gitopsbot.ports.helm import ChartRef
    from gitopsbot.sandbox.apiserver import ApiServer

    charts = [CHARTS / f"tensor-fusion-{v}" for v in args.chart_versions.split(",")]
    for chart in charts:
        if not (chart / "Chart.yaml").is_file():
            print(f"{chart} is absent")
            return 1
    binary = binaries.ensure(args.helm, settings.cache_dir())
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="helm-reads-")))
        if args.kubeconfig:
            kubeconfig, namespace, where = Path(args.kubeconfig), args.namespace, "--kubeconfig"
        else:
            api = stack.enter_context(ApiServer())
            kubeconfig, namespace, where = (
                api.write_kubeconfig(tmp / "kubeconfig"),
                "default",
                ("API emulator in this process"),
            )
        kube = KubeCluster.from_kubeconfig(kubeconfig, retry=RetryPolicy(attempts=1))
        stack.callback(kube.close)
        via_helm = HelmCli(binary, home=tmp / "helm", kubeconfig=kubeconfig)
        via_storage = HelmCli(
            binary, home=tmp / "storage", kubeconfig=kubeconfig, releases=HelmStorage(kube)
        )
        for chart in charts:
            version = chart.name.rsplit("-", 1)[1]
            via_helm.upgrade(UpgradeRequest(
                release=RELEASE, namespace=namespace, chart=ChartRef(path=str(chart)),
                version=version, values=VALUES, description=f"bench {version}",
            ))  # fmt: skip
        ways = {"helm": reads(via_helm, namespace), "storage": reads(via_storage, namespace)}
        times: dict[tuple[str, str], list[float]] = {}
        for _ in range(args.rounds):
            for name in ways["helm"]:
                answers = []
                for way, actions in ways.items():
                    seconds, answer = timed(actions[name])
                    times.setdefault((way, name), []).append(seconds)
                    answers.append(answer)
                if answers[0] != answers[1]:
                    print(f"{name}: helm and storage read different answers")
                    return 1
        print(f"release reads, {via_helm.version}, {where}, {args.rounds} rounds (median ms):")
        print(f"  {'read':<42} {'helm':>8} {'storage':>8} {'helm/storage':>13}")
        for name in ways["helm"]:
            helm_ms = statistics.median(times["helm", name]) * 1000
            storage_ms = statistics.median(times["storage", name]) * 1000
            ratio = helm_ms / storage_ms
            print(f"  {name:<42} {helm_ms:8.1f} {storage_ms:8.1f} {ratio:12.1f}x")
        if args.kubeconfig:  # a person's cluster: the release is theirs to remove
            print(f"left release {namespace}/{RELEASE}: helm uninstall {RELEASE} -n {namespace}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
