"""Proposals on a schedule, inside ``gitopsbot run`` (docs/proposals.md, issue 29).

The in-cluster bot is ``run``; before this, only a separately run ``gitopsbot propose`` opened
the new-version pull requests and, after a rollback in a wave, the failed-version one. Now
``run`` makes one proposal pass (``bot.proposer.Proposer.run_once``) every
``proposals.interval``, its first a minute after the start so the first passes go first.

One replica proposes: with Leases, the one holding the Lease of the fleet's first cluster
(``leader``), so two replicas never race to open the same request. Its own thread; Git
through the bot's serialised repository, so its pushes and the passes' never interleave. A
pass that fails is logged and tried again at the next interval; it never stops ``run``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from gitopsbot.bot.background_job import BackgroundJob
from gitopsbot.bot.proposal_report import PassReport

log = logging.getLogger(__name__)

FIRST_PASS_SECONDS = 60.0  # after start: the first reconcile passes go first


class ProposalWatch(BackgroundJob):
    def __init__(
        self,
        *,
        interval_seconds: float,
        run_once: Callable[[], PassReport],
        leader: Callable[[], bool] | None = None,
    ) -> None:
        super().__init__("proposals")
        self.interval_seconds = interval_seconds
        self._run_once = run_once
        self._leader = leader if leader is not None else (lambda: True)
        self.passes = 0  # passes made (tests and the log)

    def pass_once(self) -> PassReport | None:
        """One proposal pass, when this replica is the one that proposes; None otherwise."""
        if not self._leader():
            log.debug("proposals: another replica proposes (it holds the first cluster)")
            return None
        report = self._run_once()
        self.passes += 1
        if report.changed:
            for line in report.lines():
                log.info("proposals: %s", line)
        for problem in report.problems:
            log.warning("proposals: %s", problem)
        return report

    def start(self, first_after: float = FIRST_PASS_SECONDS) -> None:
        super().start(first_after)

    def _run(self, first_after: float) -> None:
        wait = first_after
        while not self._stop.wait(wait):
            try:
                self.pass_once()
            except Exception:  # never let the thread die: the next interval tries again
                log.exception("proposal pass failed")
            wait = self.interval_seconds
