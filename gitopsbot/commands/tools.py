"""`gitopsbot tools`: where the pinned helm 4, helm 3 and kubectl are, and a line for a shell.

They live in the cache (``adapters.binaries``: verified against pinned SHA-256 digests); the
sandbox, the demo and ``run --download-binaries`` use them. ``--shell`` prints an
``export PATH=...`` line for ``eval``: one directory of links named helm (helm 4), helm4,
helm3 and kubectl, so commands that ``sandbox up`` prints work as printed.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import Any

from gitopsbot.app import pinned
from gitopsbot.commands import SUMMARIES
from gitopsbot.errors import BinaryUnavailable

EPILOG = """\
examples:
  gitopsbot tools                             # versions and paths; exit 1 if one is not fetched
  gitopsbot tools --fetch                     # fetch and verify the missing ones first
  eval "$(gitopsbot tools --fetch --shell)"   # then helm, helm3 and kubectl are on PATH
  gitopsbot tools --json kubectl              # {"tools": {"kubectl": {"path": ...}}, ...}

helm is helm 4 (as `run --download-binaries` runs it); helm 3 is helm3 on PATH.
exit status: 0 every tool asked for is in the cache, 1 one is not and --fetch was not given,
2 bad options or the fetch failed (docs/commands.md#exit-statuses).
"""


def register(sub: Any) -> None:
    p = sub.add_parser(
        "tools",
        help=SUMMARIES["tools"],
        description="Print the paths of the pinned, verified helm 4, helm 3 and kubectl the "
        "sandbox, the demo and `run --download-binaries` use, or a shell line that puts them "
        "on PATH.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "tools",
        nargs="*",
        metavar="TOOL",
        help=f"only these: {', '.join(pinned.TOOLS)} (default: all)",
    )
    p.add_argument("--fetch", action="store_true", help="fetch and verify missing ones first")
    form = p.add_mutually_exclusive_group()
    form.add_argument(
        "--shell",
        action="store_true",
        help='print `export PATH=DIR:"$PATH"` for eval (DIR holds helm, helm4, helm3, kubectl)',
    )
    form.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    unknown = [t for t in args.tools if t not in pinned.TOOLS]
    if unknown:
        sys.stderr.write(
            f"gitopsbot tools: unknown tool(s) {', '.join(unknown)}; "
            f"choose from {', '.join(pinned.TOOLS)}\n"
        )
        return 2
    names = [t for t in pinned.TOOLS if not args.tools or t in args.tools]
    try:
        found = [pinned.find(name, fetch=args.fetch) for name in names]
    except BinaryUnavailable as e:
        sys.stderr.write(f"gitopsbot tools: --fetch: {e}\n")
        return 2
    present = {t.name: t.path for t in found if t.path is not None}
    directory = pinned.path_directory(present) if present else None
    missing = [t.name for t in found if t.path is None]
    if args.json:
        print(json.dumps(_as_json(found, directory), indent=2))
    elif args.shell:
        if directory is not None and not missing:
            # Quoted once for the shell that evals it; "$PATH" is expanded there, not here.
            print(f'export PATH={shlex.quote(str(directory))}:"$PATH"')
    else:
        print(_as_text(found, directory, missing, args.tools))
    if missing:
        sys.stderr.write(
            f"gitopsbot tools: not fetched yet: {', '.join(missing)}; fetch and verify with "
            f"`gitopsbot tools --fetch {' '.join(missing)}`\n"
        )
        return 1
    return 0


def _as_json(found: list[pinned.PinnedTool], directory: Path | None) -> dict[str, Any]:
    return {
        "tools": {
            t.name: {
                "version": t.version,
                "path": str(t.path) if t.path else None,
                "namesOnPath": list(t.names_on_path),
            }
            for t in found
        },
        "pathDirectory": str(directory) if directory else None,
    }


def _as_text(
    found: list[pinned.PinnedTool], directory: Path | None, missing: list[str], asked: list[str]
) -> str:
    lines = [
        f"{t.name:<8} {t.version:<8} {t.path or 'not fetched yet'}"
        f"  (on PATH as {', '.join(t.names_on_path)})"
        for t in found
    ]
    if directory is not None and not missing:
        lines += [
            "",
            f"links to them: {directory}; put it on PATH with",
            f'  eval "$({shlex.join(["gitopsbot", "tools", "--shell", *asked])})"',
        ]
    return "\n".join(lines)
