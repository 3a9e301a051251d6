"""Signed charts: which ``chartKeyrings`` entry of gitopsbot.yaml covers a chart repository,
and what the verification of a chart archive's provenance file found, as the plan shows it
and the apply judges it (docs/plan.md, "Digests"; docs/fleet-repo.md, "Signed charts").

An entry covers the repository URLs it is a prefix of, by whole path segments
(``https://charts.example.com/stable`` covers ``…/stable`` and ``…/stable/gpu``, not
``…/stable-old``); the longest such prefix wins. The adapters fetch the provenance file and
run ``helm verify`` (``adapters.chart_provenance``); this module decides nothing about
GnuPG, only what a result means:

- a repository no entry covers: ``not required`` (shown only when some entry exists, so a
  fleet without ``chartKeyrings`` sees the plan it always saw);
- covered and verified: who signed it, with which key, from which keyring;
- covered and not verified (no provenance file, a signer not in the keyring, an archive the
  signature does not cover): the plan's ``CHART-PROVENANCE`` deny, and at apply a block
  naming the chart, its version, its repository and what to fix. Nothing is applied.

Pure: settings and strings in, values out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gitopsbot.core.fleet.keyrings_settings import normalised_prefix as normalised_prefix
from gitopsbot.core.fleet.model import ChartKeyring, Location
from gitopsbot.core.policy import Verdict
from gitopsbot.core.policy.code_rules import CHART_PROVENANCE

RULE = CHART_PROVENANCE.id


def covers(prefix: str, repo_url: str) -> bool:
    """Whether ``prefix`` covers ``repo_url`` (by whole path segments)."""
    want, url = normalised_prefix(prefix), normalised_prefix(repo_url)
    return url == want or url.startswith(want + "/")


@dataclass(frozen=True, slots=True)
class Requirement:
    """The entry that covers a repository: its index in ``chartKeyrings`` and the entry."""

    index: int
    entry: ChartKeyring

    @property
    def where(self) -> str:
        """``chartKeyrings[0] (https://charts.example.com)``, for messages."""
        return f"chartKeyrings[{self.index}] ({self.entry.repository})"


def requirement(repo_url: str, keyrings: Sequence[ChartKeyring]) -> Requirement | None:
    """The entry covering ``repo_url`` (the longest prefix), None when none does."""
    found = [
        Requirement(i, entry)
        for i, entry in enumerate(keyrings)
        if covers(entry.repository, repo_url)
    ]
    if not found:
        return None
    return max(found, key=lambda r: (len(normalised_prefix(r.entry.repository)), -r.index))


@dataclass(frozen=True, slots=True)
class Provenance:
    """What the fetch found of the archive's provenance. ``required``: an entry covers the
    repository (``where`` names it, ``keyring`` its file); then either ``signer`` (and
    ``fingerprint``) or ``problem`` (one line: what is wrong and what to fix)."""

    required: bool
    where: str = ""
    keyring: str = ""
    signer: str = ""
    fingerprint: str = ""
    problem: str = ""

    @property
    def failed(self) -> bool:
        return self.required and (bool(self.problem) or not self.signer)

    def line(self, repo_url: str = "") -> str:
        """The plan's line (Markdown)."""
        if not self.required:
            covered = f" for {repo_url}" if repo_url else ""
            return f"provenance: not required (no chartKeyrings entry{covered})"
        if self.failed:
            return (
                f"provenance: **NOT VERIFIED** with the keyring {self.keyring} ({self.where}): "
                f"{self.problem or 'no signer found'}; the apply will block this chart"
            )
        return (
            f"provenance: verified, signed by {self.signer} (key {self.fingerprint}) in the "
            f"keyring {self.keyring} ({self.where})"
        )

    def to_json(self) -> dict[str, str]:
        state = "not required" if not self.required else "failed" if self.failed else "verified"
        out = {"state": state}
        for key, value in (
            ("where", self.where),
            ("keyring", self.keyring),
            ("signer", self.signer),
            ("fingerprint", self.fingerprint),
            ("problem", self.problem),
        ):
            if value:
                out[key] = value
        return out


def from_json(data: Mapping[str, Any]) -> Provenance:
    """``Provenance.to_json`` read back (a plan's record). ValueError when it is not one."""
    state = str(data.get("state", ""))
    if state not in ("not required", "failed", "verified"):
        raise ValueError(f"provenance state {state!r}")
    return Provenance(
        required=state != "not required",
        where=str(data.get("where", "")),
        keyring=str(data.get("keyring", "")),
        signer=str(data.get("signer", "")),
        fingerprint=str(data.get("fingerprint", "")),
        problem=str(data.get("problem", "")),
    )


def verdict(provenance: Provenance | None, where: Location | None) -> Verdict | None:
    """The plan's deny when a required verification failed."""
    if provenance is None or not provenance.failed:
        return None
    return CHART_PROVENANCE.deny(
        f"the chart's provenance is not verified with the keyring "
        f"{provenance.keyring} ({provenance.where}): {provenance.problem or 'no signer found'}",
        where,
    )


def failure(provenance: Provenance | None, what: str) -> str:
    """The apply's block for ``what`` (``chart X V from SOURCE``), "" when it may go on."""
    if provenance is None or not provenance.failed:
        return ""
    return (
        f"blocked: {what}: provenance not verified with the keyring {provenance.keyring} "
        f"({provenance.where}): {provenance.problem or 'no signer found'}; nothing applied"
    )
