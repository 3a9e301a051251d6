"""`gitopsbot post-render --policy FILE`: the Helm post-renderer the bot installs (F1).

helm runs it on every ``upgrade``/``install`` the bot starts (helm 3: ``--post-renderer``
with a wrapper executable; helm 4: a bot-private ``postrenderer/v1`` plugin). It reads the
rendered manifests on stdin and writes them to stdout with each TensorFusionCluster pool's
``nodePoolRollingUpdatePolicy`` replaced by the Git policy, every ``autoUpdate*`` switch
closed. See docs/rollout-policy.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from gitopsbot.core.postrender import PostRenderError, decode_policy, rewrite_manifests


def register(sub: Any) -> None:
    p = sub.add_parser(
        "post-render",
        help="Helm post-renderer: pin the Git rollout policy, switches closed (internal)",
        description=(
            "Read rendered Kubernetes manifests on stdin, write them to stdout with every "
            "TensorFusionCluster pool's nodePoolRollingUpdatePolicy set from the policy file "
            "and every autoUpdate* switch false. helm runs this during the bot's upgrades; "
            "see docs/rollout-policy.md."
        ),
    )
    p.add_argument(
        "--policy",
        required=True,
        metavar="FILE",
        help="policy JSON written by the bot (format gitopsbot.post-render/v1)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    path = Path(args.policy)
    try:
        policy = decode_policy(path.read_text(encoding="utf-8"), source=str(path))
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
