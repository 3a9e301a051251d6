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


def register(sub: Any) -> None:
    p = sub.add_parser("post-render", help=post_render.HELP, description=post_render.DESCRIPTION)
    post_render.add_arguments(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    return post_render.run(args.policy)
