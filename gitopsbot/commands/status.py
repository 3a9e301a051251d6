"""`gitopsbot status`: where each cluster stands, read from the state branch in Git."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gitopsbot import app
from gitopsbot.bot import report
from gitopsbot.bot import waves as bot_waves
from gitopsbot.bot.journal_store import JournalStore
from gitopsbot.commands import SUMMARIES
from gitopsbot.commands.options import add_fleet_source
from gitopsbot.core.fleet.model import Fleet
from gitopsbot.core.records import node_states
from gitopsbot.core.records.journal import Journal
from gitopsbot.core.records.load_failure import LoadFailure
from gitopsbot.core.records.pass_failure import PassFailure
from gitopsbot.core.rollouts.phase_view import StepRow
from gitopsbot.core.waves import promotion, promotion_gate
from gitopsbot.errors import ConfigError, GitOpsBotError

EXAMPLES = """\
examples:
  gitopsbot status --fleet .                       # every cluster, from this clone
  gitopsbot status --fleet . --cluster <cluster>   # one cluster, every step
  gitopsbot status --fleet-url <fleet-url> --watch # live progress until Ctrl-C
  gitopsbot status --fleet . --json                # one JSON document (steps, phases, nodes)

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
        help=SUMMARIES["status"],
        description="Show each cluster's current or last operation, its steps and per-pool "
        "rollout progress, and any queued change, from the bot's state branch.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_fleet_source(p)
    p.add_argument("--cluster", metavar="NAME", help="only this cluster")
    shown = p.add_mutually_exclusive_group()
    shown.add_argument("--watch", action="store_true", help="refresh until interrupted")
    shown.add_argument(
        "--json", action="store_true", help="one JSON document: steps, phases and their nodes"
    )
    p.add_argument("--interval", type=float, default=5.0, help="seconds between refreshes")
    p.set_defaults(func=run)


@dataclass(frozen=True, slots=True)
class Waves:
    """What grouping by wave needs: the fleet at the watched branch (its ``waves:`` and each
    cluster's environment and labels) and the chart version of an operation's commit."""

    fleet: Fleet
    version_of: Callable[[Journal], str]


def frame(
    store: JournalStore, cluster: str | None, now: datetime, waves: Waves | None = None
) -> tuple[list[str | list[StepRow]], int]:
    """What one refresh shows: lines, and each operation's steps as rows (drawn as text by
    ``render``, as a live region with progress bars on a terminal). With ``waves`` (and the
    fleet has ``waves:``), the clusters are grouped by wave, each wave headed by where its
    clusters stand (``core.waves.promotion_gate.wave_heading``)."""
    names = store.clusters()
    if cluster is not None and cluster not in names:
        known = ", ".join(names) or "none yet"
        return [f"cluster {cluster!r} has no record on the state branch (known: {known})"], 1
    out: list[str | list[StepRow]] = []
    if cluster is None and waves is not None and waves.fleet.settings.waves:
        out.extend(_by_wave(store, names, now, waves))
    else:
        for name in [cluster] if cluster else names:
            out.extend(_cluster(store, name, now))
    if not out:
        out.append("no cluster has a record on the state branch yet")
    tools = store.tools()  # recorded by `gitopsbot run` at start (docs/cluster-access.md)
    if tools is not None:
        out.append(tools.describe())
    return out, 0


def _by_wave(
    store: JournalStore, names: list[str], now: datetime, waves: Waves
) -> list[str | list[StepRow]]:
    fleet = waves.fleet
    groups = promotion.fleet_by_wave(fleet.settings.waves, fleet.clusters.values())
    out: list[str | list[StepRow]] = []
    try:
        evidence = bot_waves.read_evidence(store, fleet.clusters, waves.version_of)
    except bot_waves.EvidenceUnreadable as e:
        out.append(f"waves: the evidence cannot be read ({e})")
        evidence = {}
    recorded = set(names)
    for group in groups:
        out.append(promotion_gate.wave_heading(group, evidence, now))
        for name in group.clusters:  # why the wave's latest changes wait, first
            held = promotion_gate.held_message(store.current(name))
            if held:
                out.append(f"  hold: {name}: {held}")
        for name in group.clusters:
            if name in recorded:
                out.extend(_cluster(store, name, now))
            else:
                out.append(f"{name}: no record on the state branch yet")
    gone = [n for n in names if n not in fleet.clusters]
    if gone:
        out.append("not in the fleet on the watched branch:")
        for name in gone:
            out.extend(_cluster(store, name, now))
    return out


def _cluster(store: JournalStore, name: str, now: datetime) -> list[str | list[StepRow]]:
    out: list[str | list[StepRow]] = []
    current = store.current(name)
    # The newest merge not loaded comes right after the head line: the operation shown
    # below it is an older commit's, not this merge's.
    unloaded = store.load_failure(name)
    not_loaded = [f"  ⚠ {unloaded.describe()}"] if unloaded is not None else []
    if current is None:
        out.append(f"{name}: no operation yet (watching since {(store.seen(name) or '?')[:12]})")
        out.extend(not_loaded)
    else:
        out.extend(report.head_lines(current))
        out.extend(not_loaded)
        out.append(report.step_rows(current, now))
        out.extend(report.tail_lines(current))
    manual = store.manual_revision(name)
    if manual is not None:
        out.append(f"  ⚠ {manual.describe()}")
    drifted = store.drift(name)  # recorded by run's drift schedule (docs/drift.md)
    if drifted is not None:
        out.append(f"  ⚠ {drifted.describe()}")
    failing = store.pass_failure(name)
    if failing is not None:
        out.append(f"  ⚠ {failing.describe()}")
    queued = store.queued(name)
    if queued is not None:
        out.append(f"  next: {report.headline(queued)} ({queued.op_id})")
        if queued.queue.behind:
            out.append(
                f"  then: {queued.queue.behind[:12]}, merged after it, waits until it starts "
                "(a rotation runs alone, R17)"
            )
    return out


def render(
    store: JournalStore, cluster: str | None, now: datetime, waves: Waves | None = None
) -> tuple[str, int]:
    items, code = frame(store, cluster, now, waves)
    out: list[str] = []
    for item in items:
        # Each node of a hypervisor phase, with its batch and since (issue #18).
        out.extend([item] if isinstance(item, str) else report.row_lines(item, nodes_at=now))
    return "\n".join(out) + "\n", code


def as_json(store: JournalStore, cluster: str | None, now: datetime) -> tuple[dict[str, Any], int]:
    """What ``status --json`` prints: each cluster's current operation with its steps, and
    for a pool phase its progress, summary and per-node records (``core.records.node_states``
    journal form, issue #18), and the queued one. Exit status as ``frame``."""
    names = store.clusters()
    if cluster is not None and cluster not in names:
        return {"error": f"cluster {cluster!r} has no record on the state branch"}, 1
    clusters: dict[str, Any] = {}
    for name in [cluster] if cluster else names:
        current, queued = store.current(name), store.queued(name)
        unloaded, failing = store.load_failure(name), store.pass_failure(name)
        clusters[name] = {
            "operation": None if current is None else _operation_json(current, now),
            "queued": None if queued is None else {"op_id": queued.op_id},
            "not_loaded": None if unloaded is None else _since_json(unloaded, sha=unloaded.sha),
            "pass_failure": None if failing is None else _since_json(failing),
        }
    return {"clusters": clusters}, 0


def _since_json(found: LoadFailure | PassFailure, **extra: str) -> dict[str, str]:
    return {**extra, "error": found.error, "since": found.since.isoformat()}


def _operation_json(journal: Journal, now: datetime) -> dict[str, Any]:
    steps = []
    for row, step in zip(report.step_rows(journal, now), journal.steps, strict=True):
        entry: dict[str, Any] = {
            "name": row.name,
            "state": str(row.state),
            "started_at": None if step.started_at is None else step.started_at.isoformat(),
            "finished_at": None if step.finished_at is None else step.finished_at.isoformat(),
            "detail": row.detail,
        }
        if row.progress is not None:
            entry["phase"] = {
                "state": row.phase_state,
                "progress": row.progress,
                "summary": row.summary,
            }
        if row.nodes:
            counts = node_states.counts(row.nodes)
            entry["nodes"] = {
                "summary": node_states.summary(row.nodes),
                "counts": {str(state): n for state, n in counts.items()},
                "records": node_states.to_data(row.nodes),
            }
        steps.append(entry)
    return {
        "op_id": journal.op_id,
        "kind": str(journal.kind),
        "status": str(journal.status),
        "desired_sha": journal.desired_sha,
        "pr_number": journal.pr_number,
        "failure": journal.failure,
        "steps": steps,
    }


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
    waves = None
    if view.fleet is not None and view.repo is not None:
        waves = Waves(view.fleet, bot_waves.version_reader(view.repo))
    try:
        return show(view.store, args, view.source, waves)
    except GitOpsBotError as e:  # Git went away while watching: a message, not a traceback
        sys.stderr.write(f"gitopsbot status: {e}\n")
        return 1 if isinstance(e, ConfigError) else 2


def show(
    store: JournalStore, args: argparse.Namespace, source: str = "", waves: Waves | None = None
) -> int:
    """Print ``source`` (which ref is read: the first line) and each cluster's state; with
    ``--watch``, again every ``--interval`` seconds, until Ctrl-C: exit 0 at once."""
    if not args.watch:
        return _show(store, args, source, waves)
    try:
        return _show(store, args, source, waves)
    except KeyboardInterrupt:  # raised at a safe point, never inside a fetch (cli.py)
        pass
    except GitOpsBotError:
        if not app.interrupts.aborted():
            raise
        # Ctrl-C during a fetch: libgit2 fails at once (EINTR) before the handler runs.
    app.interrupts.settle()  # the way a watch ends: 0
    return 0


def _show(
    store: JournalStore, args: argparse.Namespace, source: str, waves: Waves | None = None
) -> int:
    if getattr(args, "json", False):
        doc, code = as_json(store, args.cluster, datetime.now(UTC))
        sys.stdout.write(json.dumps({"source": source, **doc}, indent=2) + "\n")
        return code
    if not args.watch:
        text, code = render(store, args.cluster, datetime.now(UTC), waves)
        sys.stdout.write(f"{source}\n{text}" if source else text)
        return code
    if sys.stdout.isatty():
        return _watch_live(store, args, source, waves)
    return _watch_lines(store, args, source, waves)


def _watch_live(
    store: JournalStore, args: argparse.Namespace, source: str, waves: Waves | None = None
) -> int:
    """A terminal: one region redrawn in place (adapters/terminal.py)."""
    with app.LiveScreen(sys.stdout) as screen:
        while True:
            items, code = frame(store, args.cluster, datetime.now(UTC), waves)
            screen.draw([source, *items] if source else items)
            if code:
                return code
            time.sleep(args.interval)
            store.refresh()


def _watch_lines(
    store: JournalStore, args: argparse.Namespace, source: str, waves: Waves | None = None
) -> int:
    """Logs and CI: everything once, then one time-stamped line per change."""
    text, code = render(store, args.cluster, datetime.now(UTC), waves)
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
