"""`gitopsbot status`: where each cluster stands, read from the state branch in Git."""

from __future__ import annotations

import argparse
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gitopsbot import app
from gitopsbot.bot import report
from gitopsbot.bot.journal_store import JournalStore
from gitopsbot.core.phase_view import StepRow
from gitopsbot.errors import ConfigError, GitOpsBotError

EXAMPLES = """\
examples:
  gitopsbot status --fleet .                       # every cluster, from this clone
  gitopsbot status --fleet . --cluster <cluster>   # one cluster, every step
  gitopsbot status --fleet-url <fleet-url> --watch # live progress until Ctrl-C

  git clone <fleet-url> gpu-fleet
  gitopsbot status --fleet gpu-fleet               # state: ... from origin/gitopsbot/state ...

Reads only Git (the bot's state branch): it works from any machine with read access and
never talks to a cluster. --fleet PATH reads the clone as it is, without the network: its
local state branch if it has one, else origin/<state branch> as of its last `git fetch`.
--fleet-url URL fetches the branch now. The first line says which ref it read.
exit status: 0 printed (--watch: ended by Ctrl-C), 1 unknown cluster or --fleet not a Git
repository, 2 bad options or Git unavailable (docs/commands.md#exit-statuses).
"""


def register(sub: Any) -> None:
    p = sub.add_parser(
        "status",
        help="where each cluster stands (from Git)",
        description="Show each cluster's current or last operation, its steps and per-pool "
        "rollout progress, and any queued change, from the bot's state branch.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--fleet-url", metavar="URL", help="the fleet repository's Git URL")
    where.add_argument("--fleet", metavar="PATH", help="a local clone of the fleet repository")
    p.add_argument("--cluster", metavar="NAME", help="only this cluster")
    p.add_argument("--watch", action="store_true", help="refresh until interrupted")
    p.add_argument("--interval", type=float, default=5.0, help="seconds between refreshes")
    p.set_defaults(func=run)


def frame(
    store: JournalStore, cluster: str | None, now: datetime
) -> tuple[list[str | list[StepRow]], int]:
    """What one refresh shows: lines, and each operation's steps as rows (drawn as text by
    ``render``, as a live region with progress bars on a terminal)."""
    names = store.clusters()
    if cluster is not None and cluster not in names:
        known = ", ".join(names) or "none yet"
        return [f"cluster {cluster!r} has no record on the state branch (known: {known})"], 1
    out: list[str | list[StepRow]] = []
    for name in [cluster] if cluster else names:
        current = store.current(name)
        if current is None:
            out.append(
                f"{name}: no operation yet (watching since {(store.seen(name) or '?')[:12]})"
            )
        else:
            out.extend(report.head_lines(current))
            out.append(report.step_rows(current, now))
            out.extend(report.tail_lines(current))
        manual = store.manual_revision(name)
        if manual is not None:
            out.append(f"  ⚠ {manual.describe()}")
        failing = store.pass_failure(name)
        if failing is not None:
            out.append(f"  ⚠ {failing.describe()}")
        queued = store.queued(name)
        if queued is not None:
            out.append(f"  next: {report.headline(queued)} ({queued.op_id})")
    if not out:
        out.append("no cluster has a record on the state branch yet")
    tools = store.tools()  # recorded by `gitopsbot run` at start (docs/cluster-access.md)
    if tools is not None:
        out.append(tools.describe())
    return out, 0


def render(store: JournalStore, cluster: str | None, now: datetime) -> tuple[str, int]:
    items, code = frame(store, cluster, now)
    out: list[str] = []
    for item in items:
        out.extend([item] if isinstance(item, str) else report.row_lines(item))
    return "\n".join(out) + "\n", code


def run(args: argparse.Namespace) -> int:
    try:
        url = app.fleet_url(url=args.fleet_url, path=args.fleet)
        clone = Path(args.fleet).resolve() if args.fleet else None
        view = app.open_state(url, clone=clone)
    except ConfigError as e:
        sys.stderr.write(f"gitopsbot status: {e}\n")
        return 1
    except GitOpsBotError as e:
        sys.stderr.write(f"gitopsbot status: {e}\n")
        return 2
    try:
        return show(view.store, args, view.source)
    except GitOpsBotError as e:  # Git went away while watching: a message, not a traceback
        sys.stderr.write(f"gitopsbot status: {e}\n")
        return 1 if isinstance(e, ConfigError) else 2


def show(store: JournalStore, args: argparse.Namespace, source: str = "") -> int:
    """Print ``source`` (which ref is read: the first line) and each cluster's state; with
    ``--watch``, again every ``--interval`` seconds, until Ctrl-C: exit 0 at once."""
    if not args.watch:
        return _show(store, args, source)
    try:
        return _show(store, args, source)
    except KeyboardInterrupt:  # raised at a safe point, never inside a fetch (cli.py)
        pass
    except GitOpsBotError:
        if not app.interrupts.aborted():
            raise
        # Ctrl-C during a fetch: libgit2 fails at once (EINTR) before the handler runs.
    app.interrupts.settle()  # the way a watch ends: 0
    return 0


def _show(store: JournalStore, args: argparse.Namespace, source: str) -> int:
    if not args.watch:
        text, code = render(store, args.cluster, datetime.now(UTC))
        sys.stdout.write(f"{source}\n{text}" if source else text)
        return code
    if sys.stdout.isatty():
        return _watch_live(store, args, source)
    return _watch_lines(store, args, source)


def _watch_live(store: JournalStore, args: argparse.Namespace, source: str) -> int:
    """A terminal: one region redrawn in place (adapters/terminal.py)."""
    with app.LiveScreen(sys.stdout) as screen:
        while True:
            items, code = frame(store, args.cluster, datetime.now(UTC))
            screen.draw([source, *items] if source else items)
            if code:
                return code
            time.sleep(args.interval)
            store.refresh()


def _watch_lines(store: JournalStore, args: argparse.Namespace, source: str) -> int:
    """Logs and CI: everything once, then one time-stamped line per change."""
    text, code = render(store, args.cluster, datetime.now(UTC))
    sys.stdout.write(f"{source}\n{text}" if source else text)
    sys.stdout.flush()
    if code:
        return code
    seen: dict[str, str] = {}
    _changes(store, args.cluster, seen)  # what was just printed in full
    while True:
        time.sleep(args.interval)
        store.refresh()
        now = datetime.now(UTC)
        for line in _changes(store, args.cluster, seen, now):
            sys.stdout.write(f"{now:%H:%M:%S} {line}\n")
        sys.stdout.flush()


def _changes(
    store: JournalStore, cluster: str | None, seen: dict[str, str], now: datetime | None = None
) -> list[str]:
    out: list[str] = []
    when = now or datetime.now(UTC)
    for name in [cluster] if cluster else store.clusters():
        current = store.current(name)
        if current is not None:
            out.extend(report.change_lines(current, when, seen))
    return out
