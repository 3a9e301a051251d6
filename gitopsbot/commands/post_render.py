"""`gitopsbot post-render` (placeholder until its issue lands; exits 2)."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser("post-render", help="(not built yet)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    sys.stderr.write("gitopsbot post-render: not built yet\n")
    return 2
