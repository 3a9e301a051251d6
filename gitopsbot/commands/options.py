"""The options several commands share: which cluster and refs of the fleet repository
(``plan``, ``rehearse``), where the fleet repository is (``--fleet-url``/``--fleet``) and
where charts are read from (``--chart-dir``)."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_cluster_refs(p: argparse.ArgumentParser) -> None:
    """--cluster, --fleet and the refs of its baseline and desired state (plan, rehearse)."""
    p.add_argument("--cluster", required=True, metavar="NAME", help="cluster under clusters/")
    p.add_argument(
        "--fleet", default=".", metavar="PATH", help="fleet repository (default: current dir)"
    )
    p.add_argument(
        "--from",
        dest="from_ref",
        metavar="REF",
        help="Git ref of the fleet repository used as the deployed baseline",
    )
    p.add_argument(
        "--to",
        dest="to_ref",
        metavar="REF",
        help="Git ref holding the desired state (default: the files on disk)",
    )


def add_fleet_source(
    p: argparse.ArgumentParser, clone: str = "a local clone of the fleet repository"
) -> None:
    """Where the fleet repository is: --fleet-url URL or --fleet PATH (``clone`` its help),
    one of them required."""
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--fleet-url", metavar="URL", help="the fleet repository's Git URL")
    where.add_argument("--fleet", metavar="PATH", help=clone)


def add_chart_dir(
    p: argparse.ArgumentParser,
    what: str = "read charts from this directory/archive instead of the network (repeatable)",
) -> None:
    """--chart-dir (repeatable): charts read from disk; ``what`` is its help line."""
    p.add_argument(
        "--chart-dir",
        action="append",
        default=[],
        metavar="DIR",
        type=Path,
        help=what,
    )
