"""What the policy gate says: severities, outcomes, a rule as data, a verdict (with the
rule's code and readable name), and the decision a plan's verdicts fold into."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from gitopsbot.core.fleet.model import Location


class Severity(StrEnum):
    DENY = "deny"
    WARN = "warn"
    ACKNOWLEDGE = "acknowledge"


class Outcome(StrEnum):
    DENIED = "denied"
    NEEDS_ACK = "needs-acknowledgement"
    ACKNOWLEDGED = "acknowledged"
    WARNED = "warned"


class Decision(StrEnum):
    ALLOWED = "allowed"
    NEEDS_ACK = "needs-acknowledgement"
    DENIED = "denied"


@dataclass(frozen=True, slots=True)
class Rule:
    id: str
    description: str
    severity: Severity
    kind: str
    params: Mapping[str, Any] = field(default_factory=dict)
    procedure: str = ""  # the procedure rule it enforces: R2, F3...
    environments: tuple[str, ...] = ()  # empty: every environment
    link: str = ""
    source: str = ""  # file:line, for messages
    # A short name a person can read beside the code ("R4 hypervisor-image-pinned"), and
    # for a built-in rule where it is explained (docs/policies.md, "The rules explained").
    name: str = ""
    doc: str = ""


@dataclass(frozen=True, slots=True)
class Verdict:
    rule_id: str
    severity: Severity
    outcome: Outcome
    procedure: str
    message: str
    description: str = ""
    link: str = ""
    ack_reason: str = ""
    # Where the finding is written (values.yaml or rollout.yaml), when the loader knows.
    location: Location | None = None
    name: str = ""  # the rule's short name (``Rule.name``)
    doc: str = ""  # where it is explained (``Rule.doc``)

    @property
    def blocking(self) -> bool:
        return self.outcome in {Outcome.DENIED, Outcome.NEEDS_ACK}

    @property
    def label(self) -> str:
        """The code and the name, as every place that shows a verdict shows it."""
        return rule_label(self.rule_id, self.name)


RULES_DOC = "docs/policies.md"


NAME_FORMAT = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")


def rule_label(rule_id: str, name: str) -> str:
    """``R4 hypervisor-image-pinned``; the code alone for a rule without a name."""
    return f"{rule_id} {name}" if name else rule_id


def rule_doc(rule_id: str, name: str) -> str:
    """The paragraph that explains a built-in rule: its heading's anchor as GitHub and most
    Markdown renderers make it (lower case, spaces to hyphens, other punctuation dropped)."""
    slug = re.sub(r"[^a-z0-9 -]", "", rule_label(rule_id, name).lower()).replace(" ", "-")
    return f"{RULES_DOC}#{slug}"


def decide(verdicts: tuple[Verdict, ...]) -> Decision:
    """Deny always wins; then any unacknowledged rule; else allowed (warnings or not)."""
    if any(v.outcome == Outcome.DENIED for v in verdicts):
        return Decision.DENIED
    if any(v.outcome == Outcome.NEEDS_ACK for v in verdicts):
        return Decision.NEEDS_ACK
    return Decision.ALLOWED
