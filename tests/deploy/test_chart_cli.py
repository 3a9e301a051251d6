"""The chart's `gitopsbot run` arguments against the real command line parser: a flag renamed
in gitopsbot/commands/run.py (or never added) fails here, not in a cluster."""

from __future__ import annotations

from gitopsbot import cli
from tests.deploy.chart_support import FLEET_URL, Helm, with_values


def test_gitopsbot_run_takes_the_arguments(helm4: Helm) -> None:
    """The arguments the chart renders are ones `gitopsbot run` accepts, with the meaning the
    chart gives them (the parser is the real one: a renamed flag fails here)."""
    c = helm4.render(
        with_values(logFormat="json", extraArgs=["--workers", "8"]), namespace="bots"
    ).container()
    args = cli.build_parser().parse_args(c["args"])
    assert args.command == "run"
    assert (args.fleet_url, args.branch) == (FLEET_URL, "main")
    assert args.webhook_listen == "0.0.0.0:8080"
    assert args.metrics_listen == "0.0.0.0:9090"
    assert args.log_format == "json"
    assert args.leases_namespace == "bots"
    assert args.workers == 8
    assert not args.kubeconfig  # in a pod without --kubeconfig: the ServiceAccount
