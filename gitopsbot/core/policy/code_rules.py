"""The rules decided in code rather than in ``policies/*.yaml``: each one's code, readable name,
procedure rule and what it asks, written once here, and the one way their denies are built.

A rule decided in code is as visible as a rule written as data: its verdict carries the name
and the link to its paragraph in docs/policies.md, because ``CodeRule.deny`` is the only way to
make one (tests/core/test_rule_names.py holds every ``Verdict`` built outside the policy
package to that, and every rule here to a paragraph).
"""

from __future__ import annotations

from dataclasses import dataclass

from gitopsbot.core.fleet.model import Location
from gitopsbot.core.policy.verdicts import Outcome, Severity, Verdict, rule_doc


@dataclass(frozen=True, slots=True)
class CodeRule:
    """A deny the bot decides in code: ``id`` (the code), ``name`` (``NAME_FORMAT``),
    ``procedure`` (the procedure rule it enforces), ``description`` (what it asks)."""

    id: str
    name: str
    procedure: str
    description: str = ""

    @property
    def doc(self) -> str:
        return rule_doc(self.id, self.name)

    def deny(self, message: str, location: Location | None = None) -> Verdict:
        return Verdict(
            rule_id=self.id,
            severity=Severity.DENY,
            outcome=Outcome.DENIED,
            procedure=self.procedure,
            message=message,
            description=self.description,
            location=location,
            name=self.name,
            doc=self.doc,
        )


WAVES = CodeRule(
    "WAVES",
    "promotion-follows-waves",
    "waves",
    "A chart version reaches a wave only after the earlier waves ran it, soaked.",
)
ROTATION_ALONE = CodeRule("ROTATION-ALONE", "rotate-in-own-change", "R17")
CHART_DIGEST = CodeRule(
    "CHART-DIGEST",
    "chart-archive-pinned",
    "R8",
    "the chart archive must be the one release.yaml pins",
)
CHART_PROVENANCE = CodeRule(
    "CHART-PROVENANCE",
    "chart-provenance-verified",
    "R8",
    "a chart from a repository chartKeyrings covers must be signed by a key of its keyring",
)

CODE_RULES = (WAVES, ROTATION_ALONE, CHART_DIGEST, CHART_PROVENANCE)
