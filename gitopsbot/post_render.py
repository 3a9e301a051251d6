"""The Helm post-renderer's process: ``python -m gitopsbot.post_render --policy FILE`` (F1).

helm runs this on every ``upgrade``/``install`` the bot starts (helm 3: ``--post-renderer``
with the Python interpreter as executable; helm 4: a bot-private ``postrenderer/v1`` plugin;
``adapters/helm.py``). ``gitopsbot post-render`` (``commands/post_render.py``) runs the same
``run``; only the start differs.

Why a module of its own: ``python -m gitopsbot`` builds the whole command line, which imports
every command (kubernetes client, httpx, pygit2, apscheduler) and costs about a second of CPU
per upgrade (#13). This module imports ``core.charts.postrender`` and the standard library only,
and reads the policy with ``decode_policy_document``, so neither ``core.fleet.model`` nor PyYAML
is loaded; ``tests/executor/test_post_render_start.py`` keeps it so.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from gitopsbot.core.charts.postrender import (
    PostRenderError,
    decode_policy_document,
    rewrite_manifests,
)

DESCRIPTION = (
    "Read rendered Kubernetes manifests on stdin, write them to stdout with every "
    "TensorFusionCluster pool's nodePoolRollingUpdatePolicy set from the policy file "
    "and every autoUpdate* switch false. helm runs this during the bot's upgrades; "
    "see docs/rollout-policy.md."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--policy",
        required=True,
        metavar="FILE",
        help="policy JSON written by the bot (format gitopsbot.post-render/v1)",
    )


def run(policy_file: str) -> int:
    """stdin → stdout. 0: rewritten; 1: manifests or policy not understood; 2: policy file
    unreadable. helm aborts the upgrade on non-zero, so a broken policy never lands."""
    path = Path(policy_file)
    try:
        policy = decode_policy_document(path.read_text(encoding="utf-8"), source=str(path))
        result = rewrite_manifests(sys.stdin.read(), policy)
    except OSError as e:
        sys.stderr.write(f"gitopsbot post-render: cannot read {path}: {e.strerror}\n")
        return 2
    except PostRenderError as e:
        sys.stderr.write(f"gitopsbot post-render: {e}\n")
        return 1
    sys.stdout.write(result.text)
    for pool in result.unmatched_pools:
        sys.stderr.write(
            f"gitopsbot post-render: pool {pool!r} has no Git policy: switches closed, "
            "batch settings as rendered\n"
        )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gitopsbot post-render", description=DESCRIPTION)
    add_arguments(parser)
    args = parser.parse_args(argv)
    return run(args.policy)


if __name__ == "__main__":
    raise SystemExit(main())
