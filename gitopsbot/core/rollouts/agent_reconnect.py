"""R18's confirmation: did the cluster agent reconnect with the new token?

The chart exposes no condition for the agent's connection (the ``cluster-agent`` container
has no readiness probe), so, as the product's page does by hand (``kubectl logs
deploy/<release>-controller -c cluster-agent --tail=20``), the bot reads that container's log
in every controller pod since the check started:

- a line saying the console refused it (``unauthorized``, ``forbidden``, ``invalid token``,
  ``token expired``/``revoked``, ``401``/``403``) fails the check at once;
- a line saying it connected or enrolled (``connected`` — not ``disconnected`` or ``not
  connected`` — or ``enrolled``) in every pod that runs the container, with the container
  ready, passes it;
- otherwise it waits, and fails after ``agentReconnectTimeout`` (credentials.yaml, default
  10m): a token that silently does not work must fail the operation, not pass it.

The patterns are what an agent of this kind prints, not a documented format of the
TensorFusion agent: docs/rotation.md says so. The detail never quotes a log line (a log may
carry more than it should); it names the pod and the pattern that matched. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

REJECTED = re.compile(
    r"\b(unauthori[sz]ed|forbidden|invalid (?:enroll )?token|token (?:is )?"
    r"(?:invalid|expired|revoked)|401|403)\b",
    re.IGNORECASE,
)
CONNECTED = re.compile(r"(?<!not )\b(connected|enrolled)\b", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class AgentPod:
    name: str
    ready: bool  # the cluster-agent container is ready (running, not restarting)
    log: str  # its log since the check started ("" when none or unreadable yet)
    deleting: bool = False


class Verdict(StrEnum):
    CONNECTED = "connected"
    WAIT = "wait"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class Judgement:
    verdict: Verdict
    detail: str


def judge(
    pods: Sequence[AgentPod], *, started_at: datetime, now: datetime, timeout_seconds: int
) -> Judgement:
    """The check's verdict from the controller pods that run a ``cluster-agent`` container."""
    live = [p for p in pods if not p.deleting]
    for pod in live:
        refused = REJECTED.search(pod.log)
        if refused:
            return Judgement(
                Verdict.FAILED,
                f"cluster-agent in pod {pod.name} was refused by the console (its log says "
                f"{refused.group(1).lower()!r}): the new agent token does not work",
            )
    waited = (now - started_at).total_seconds()
    if live and all(p.ready and CONNECTED.search(p.log) for p in live):
        names = ", ".join(p.name for p in live)
        return Judgement(Verdict.CONNECTED, f"cluster-agent reconnected ({names})")
    if waited >= timeout_seconds:
        if not live:
            why = "no controller pod runs a cluster-agent container (agent.agentId empty?)"
        else:
            quiet = [p.name for p in live if not (p.ready and CONNECTED.search(p.log))]
            why = f"no connection logged by cluster-agent in {', '.join(quiet)}"
        return Judgement(
            Verdict.FAILED, f"agent did not reconnect within {timeout_seconds}s: {why}"
        )
    return Judgement(Verdict.WAIT, "waiting for cluster-agent to reconnect")
