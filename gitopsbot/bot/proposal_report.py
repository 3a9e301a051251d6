"""What a proposal pass did: one ``Proposal`` per cluster's (or wave's) target version and
the pass's ``PassReport`` (for logs and the ``propose`` command); the proposer
(``bot.proposer``) makes them, ``bot.proposal_request`` each ``Proposal``."""

from __future__ import annotations

from dataclasses import dataclass, field

from gitopsbot.core.proposing.proposals import ProposalDecision


def plan_marker(cluster: str) -> str:
    """The marker of the plan comment ``gitopsbot comment`` keeps on a request."""
    return f"plan/{cluster}"


@dataclass(frozen=True, slots=True)
class Proposal:
    """What a pass did for one cluster's target version."""

    cluster: str
    version: str
    branch: str
    number: int
    url: str
    decision: str  # the plan's policy decision
    head: str = ""  # the branch head after this pass (its status is set)
    opened: bool = False
    updated: bool = False  # request text, labels or branch changed


@dataclass(slots=True)
class PassReport:
    """The outcome of ``Proposer.run_once`` (for logs and the ``propose`` command)."""

    head: str = ""
    enabled: bool = True
    proposals: list[Proposal] = field(default_factory=list)
    closed: list[tuple[int, str]] = field(default_factory=list)  # (number, reason)
    decisions: tuple[ProposalDecision, ...] = ()  # the per-cluster ones
    problems: list[str] = field(default_factory=list)
    ledger_written: bool = False
    notes: list[str] = field(default_factory=list)  # the failedVersions requests opened

    @property
    def changed(self) -> bool:
        return (
            any(p.opened or p.updated for p in self.proposals)
            or bool(self.closed)
            or self.ledger_written
            or bool(self.notes)
        )

    def lines(self) -> list[str]:
        out = [f"fleet at {self.head[:12]}" if self.head else "fleet not read"]
        if not self.enabled:
            out.append("proposals are disabled (proposals.enabled: false)")
        for p in self.proposals:
            what = "opened" if p.opened else "updated" if p.updated else "unchanged"
            out.append(f"{p.cluster}: {p.version} #{p.number} {what} ({p.decision}) {p.url}")
        for number, reason in self.closed:
            out.append(f"closed #{number}: {reason}")
        for d in self.decisions:
            for s in d.skipped:
                out.append(f"{d.cluster}: skipped {s.version}: {s.reason}")
            for n in d.notes:
                out.append(f"{d.cluster}: {n}")
        out += self.notes
        out += [f"problem: {p}" for p in self.problems]
        return out
