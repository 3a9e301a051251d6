"""Who hears what the bot does: listeners of happenings and of passes.

A ``Listener`` is told each happening (``core.notices.happenings``) after its transition was
recorded on the state branch: Kubernetes Events, chat notifications, metrics and log lines are
listeners, wired in ``gitopsbot.app``. A ``PassListener`` is told when a reconcile pass of a
cluster ended (metrics: time since the last good pass; logs: pass finished).

Listeners are called on the pass's thread, after the record is safe: they must be quick
(a slow one posts from its own thread) and must not raise; ``bot.announcer`` logs and drops
what one raises, so a broken listener never fails a pass or repeats a step. Delivery is at
most once: a bot killed between the record and the call does not tell it again.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from gitopsbot.core.notices.happenings import Happening


class Listener(Protocol):
    def happened(self, happening: Happening) -> None: ...


class PassListener(Protocol):
    def pass_finished(
        self, cluster: str, *, action: str, detail: str, error: str, seconds: float
    ) -> None:
        """``action``: the pass's result (``idle``, ``started``, ``step`` …), ``""`` when it
        failed with ``error`` (the error's first line)."""
        ...


@runtime_checkable
class PassStartListener(Protocol):
    """A pass listener that also wants to hear when a pass begins (the log: "pass started");
    ``bot.announcer`` calls it on those of its pass listeners that have it."""

    def pass_started(self, cluster: str) -> None: ...
