"""Drift on a schedule, inside ``gitopsbot run`` (docs/drift.md): every ``drift.interval`` each
cluster this replica works on is checked (``bot.drift``, read only), each at its own instant in
the interval (``core.drift.schedule``: spread, never the whole fleet at once), and the result
is told: a log line, the ``gitopsbot_drift_items`` gauge, a Warning Event ``Drifted`` on the
TensorFusionCluster when the drift is new or changed, ``clusters/<name>/drift.yaml`` on the
state branch (for ``status``; a commit only when the drift changes), and, with ``onDrift:
propose-git`` or ``propose-reapply``, the cluster's drift pull request
(``bot.drift_proposer``).

It never changes the cluster. Its own thread, its own executors (a pass's are not shared), and
Git through the bot's serialised repository.

It is background work: before each cluster's check it gives way while a woken cluster's pass
waits or runs (``yield_to``, the scheduler's ``urgent``), for at most ``GIVE_WAY_SECONDS``, so a
merge's first action does not queue behind drift's API requests and Git lock (#29: at 1,000
clusters the checks spread over the interval run all the time, and a merge that met one took
1.1–1.7 s instead of 0.6); and before each read of a check already under way, for at most
``GIVE_WAY_READ_SECONDS``. The bounds keep drift from starving while a fleet rolls out.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import datetime

from gitopsbot.bot import drift as drift_check
from gitopsbot.bot.background_job import BackgroundJob
from gitopsbot.bot.drift_proposer import DriftProposer
from gitopsbot.bot.steps.executor import Executor
from gitopsbot.core.charts.chart import Chart
from gitopsbot.core.drift import record as drift_record
from gitopsbot.core.drift import report as drift
from gitopsbot.core.drift import schedule as drift_schedule
from gitopsbot.core.drift.record import DriftRecord
from gitopsbot.core.fleet.model import ClusterSpec, DriftSettings
from gitopsbot.core.notices.kube_events import ObjectRef
from gitopsbot.core.records.journal import Journal
from gitopsbot.core.rollouts import tf_objects as tf
from gitopsbot.errors import GitOpsBotError
from gitopsbot.ports.events import Events

log = logging.getLogger(__name__)

FIRST_CHECK_SECONDS = 60.0  # after start: the first passes go first
RESCHEDULE_SECONDS = 60.0  # how often the schedule looks for clusters added or gone
GIVE_WAY_SECONDS = 5.0  # the longest a check waits for woken passes (module doc)
GIVE_WAY_READ_SECONDS = 1.0  # and each of its reads, once it has begun
GIVE_WAY_LOOK_SECONDS = 0.05


class DriftWatch(BackgroundJob):
    def __init__(
        self,
        *,
        settings: DriftSettings,
        specs: Callable[[], Mapping[str, ClusterSpec]],
        journal_for: Callable[[str], Journal | None],
        chart_for: Callable[[ClusterSpec], Chart | None],
        executor_for: Callable[[ClusterSpec], Executor],
        now: Callable[[], datetime],
        gauge: Callable[[str, int | None], None] | None = None,
        events_for: Callable[[ClusterSpec], Events | None] | None = None,
        proposer: DriftProposer | None = None,
        may_act: Callable[[str], bool] | None = None,
        record: Callable[[str, DriftRecord | None], bool] | None = None,
        fetch: Callable[[], None] | None = None,
        journals_for: Callable[[str], Sequence[Journal]] | None = None,
        spec_at: Callable[[str, str], ClusterSpec | None] | None = None,
        yield_to: Callable[[], bool] | None = None,
        give_way_seconds: float = GIVE_WAY_SECONDS,
    ) -> None:
        super().__init__("drift")
        self.settings = settings
        self._specs = specs
        self._journal_for = journal_for
        self._chart_for = chart_for
        self._executor_for = executor_for
        self._now = now
        self._gauge = gauge
        self._events_for = events_for
        self.proposer = proposer
        self._may_act = may_act
        self._record = record
        self._fetch = fetch
        self._journals_for = journals_for
        self._spec_at = spec_at
        self.yield_to = yield_to
        self._give_way_seconds = give_way_seconds
        self._told: dict[str, str] = {}  # cluster → the drift digest last told by an Event

    def check_once(self, only: Collection[str] | None = None) -> dict[str, drift.DriftReport | str]:
        """One round over the clusters (``only`` those, when given); each told as the module
        doc says."""
        if self._fetch is not None:  # Git of now: the watched branch, the state branch
            self._fetch()
        specs = [
            s
            for name, s in sorted(self._specs().items())
            if (only is None or name in only) and (self._may_act is None or self._may_act(name))
        ]
        found: dict[str, drift.DriftReport | str] = {}
        for spec in specs:
            self._give_way()
            found.update(
                drift_check.check_clusters(
                    [spec],
                    self._journal_for,
                    self._chart_for,
                    self._executor_for,
                    journals_for=self._journals_for,
                    spec_at=self._spec_at,
                    before_read=self._give_way_to_read,
                )
            )
            self._tell(spec, found[spec.name])
        return found

    def _give_way_to_read(self) -> None:
        """Before each read of a check under way: a woken pass that came meanwhile goes
        first too (a check takes a dozen reads; #29: one begun just before a merge's webhook
        still cost it 0.6 s), for at most ``GIVE_WAY_READ_SECONDS`` a read."""
        self._give_way(min(self._give_way_seconds, GIVE_WAY_READ_SECONDS))

    def _give_way(self, most: float | None = None) -> None:
        """Wait while woken passes wait or run, at most ``give_way_seconds`` (module doc)."""
        if self.yield_to is None:
            return
        end = time.monotonic() + (self._give_way_seconds if most is None else most)
        while self.yield_to() and time.monotonic() < end:
            if self._stop.wait(GIVE_WAY_LOOK_SECONDS):
                return

    def _tell(self, spec: ClusterSpec, report: drift.DriftReport | str) -> None:
        if not isinstance(report, drift.DriftReport):
            log.warning("%s: drift %s", spec.name, report)
            if self._gauge is not None:
                self._gauge(spec.name, None)
            return
        if self._gauge is not None:
            self._gauge(spec.name, len(report.items))
        if report.drifted:
            log.warning("%s", "; ".join(report.lines()))
            self._event(spec, report)
        else:
            self._told.pop(spec.name, None)
        if report.pending:  # a change Git holds back, the bot's own pins: told, not drift
            log.info("%s: pending, not drift: %s", spec.name,
                     "; ".join(p.line() for p in report.pending))  # fmt: skip
        if self._record is not None:  # for `status`, which reads Git only
            try:
                self._record(
                    spec.name, drift_record.of(report, self._now()) if report.drifted else None
                )
            except GitOpsBotError as e:
                log.warning("%s: drift not recorded on the state branch: %s", spec.name, e)
        if self.proposer is not None and self.settings.on_drift != "report":
            try:
                request = self.proposer.reconcile(report)
            except GitOpsBotError as e:
                log.warning("%s: drift request not updated: %s", spec.name, e)
                return
            if request.action != "none":
                log.info("%s", request.line())

    def _event(self, spec: ClusterSpec, report: drift.DriftReport) -> None:
        digest = report.digest()
        if self._events_for is None or self._told.get(spec.name) == digest:
            return  # told already: the same drift is not an Event every interval
        try:
            events = self._events_for(spec)
            if events is not None:
                ref = ObjectRef(tf.TF, "TensorFusionCluster", tf.tfc_name(spec))
                events.emit(ref, drift.event_of(report), at=self._now())
        except GitOpsBotError as e:
            log.warning("%s: drift Event not posted: %s", spec.name, e)
            return
        self._told[spec.name] = digest

    # -- the schedule ------------------------------------------------------------------------

    def start(self, first_after: float = FIRST_CHECK_SECONDS) -> None:
        if self.settings.enabled:
            super().start(first_after)

    def _run(self, first_after: float) -> None:
        """Each cluster at its own instant in the interval (``core.drift.schedule``): the
        checks due together run as one round; the fleet is asked again at least every
        ``RESCHEDULE_SECONDS`` for clusters added or gone."""
        interval = float(self.settings.interval_seconds)
        not_before = self._now().timestamp() + first_after
        schedule: dict[str, float] = {}
        wait = 0.0
        while not self._stop.wait(wait):
            now = self._now().timestamp()
            try:
                names = sorted(self._specs())
                schedule = drift_schedule.plan(
                    names, schedule, interval=interval, now=now, not_before=not_before
                )
                due = drift_schedule.due(schedule, now)
                if due:
                    self.check_once(set(due))
                    schedule = drift_schedule.after_check(schedule, due, interval, now)
            except Exception:  # never let the thread die: the next instant tries again
                log.exception("drift check failed")
                # A failed round is not retried at once: each due cluster waits its turn.
                due = drift_schedule.due(schedule, now)
                schedule = drift_schedule.after_check(schedule, due, interval, now)
            wait = drift_schedule.wake_in(
                schedule, self._now().timestamp(), least=1.0,
                most=min(RESCHEDULE_SECONDS, interval),
            )  # fmt: skip
