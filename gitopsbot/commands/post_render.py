"""`gitopsbot post-render --policy FILE`: the Helm post-renderer the bot installs (F1).

It reads the rendered manifests on stdin and writes them to stdout with each
TensorFusionCluster pool's ``nodePoolRollingUpdatePolicy`` replaced by the Git policy, every
``autoUpdate*`` switch closed. See docs/rollout-policy.md.

helm itself runs ``python -m gitopsbot.post_render`` (``gitopsbot/post_render.py``), which
starts without the rest of the command line (#13); this subcommand runs the same code.
"""

from __future__ import annotations

import argparse
from typing import Any

from gitopsbot import post_render
from gitopsbot.commands import SUMMARIES

EPILOG = """\
examples:
  # what helm does during the bot's upgrades: the rendered chart through the pinned policy
  echo '{"format": "gitopsbot.post-render/v1", "pools": [{"name": "shared",
    "batchPercentage": 10, "batchIntervalSeconds": 120, "maxDurationSeconds": 7200}]}' > policy.json
  helm template tf examples/charts/tensor-fusion-1.8.7 > rendered.yaml
  gitopsbot post-render --policy policy.json < rendered.yaml > post-rendered.yaml
  diff rendered.yaml post-rendered.yaml          # exit 1: they differ, the pools' switches closed

exit status: 0 manifests written, 1 the manifests or the policy cannot be understood, 2 the
policy file cannot be read (helm aborts the upgrade on non-zero).
"""


def register(sub: Any) -> None:
    p = sub.add_parser(
        "post-render",
        help=SUMMARIES["post_render"],
        description=post_render.DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    post_render.add_arguments(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    return post_render.run(args.policy)
