"""Signed charts: a chart source whose ``fetch`` verifies the archive's provenance file with
the keyring gitopsbot.yaml's ``chartKeyrings`` requires for its repository (docs/fleet-repo.md,
"Signed charts"; ``core.planning.provenance`` decides which entry applies and what a result means).

The provenance file comes from where the archive came from: ``<archive URL>.prov`` over HTTP
(helm's convention), the manifest's provenance layer in an OCI registry (``helm pull
--prov``), ``<archive>.prov`` beside a local archive. Real ``helm verify`` judges it
(``HelmCli.verify``), on the very archive file ``fetch`` returns, the one the apply installs:
nothing is fetched a second time. helm's reasons become one line saying what to fix. The
keyring is a public one: a file holding a private key is refused without being used.

A provenance file the repository cannot serve now (5xx, a timeout) is ``ChartUnavailable``
(the pass retries); everything else is a result, shown by the plan and judged by the apply.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from gitopsbot.adapters.helm import HelmCli
from gitopsbot.core.charts.chart import Chart, ChartIndex
from gitopsbot.core.fleet.model import ChartKeyring
from gitopsbot.core.planning import provenance as core
from gitopsbot.errors import (
    ChartInvalid,
    ChartNotFound,
    ChartUnavailable,
    ConfigError,
    HelmError,
    HelmTimeout,
)
from gitopsbot.ports.charts import ChartArchive, ChartArchives, ChartSource, ProvenanceFiles

_SIGNER = re.compile(r"^Signed by: (.+)$", re.MULTILINE)
_FINGERPRINT = re.compile(r"^Using Key With Fingerprint: (\S+)$", re.MULTILINE)
# helm's reasons (helm 3 and 4 say the same), and what to do about each.
_REASONS: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(r"unknown entity"),
        "it is signed by a key that is not in the keyring: add the publisher's public key to "
        "the keyring (gpg --export), or find out who signed this chart",
    ),
    (
        re.compile(r"sum does not match"),
        "the archive is not the one its provenance file signs (its sha256 differs): the "
        "archive or its .prov was changed after signing; have the chart re-published signed",
    ),
    (
        re.compile(r"signature block not found|failed to decode|not a signed|parse"),
        "the .prov is not a signed provenance file; have the chart re-published signed "
        "(helm package --sign)",
    ),
    (
        re.compile(r"load keyring|keyring"),
        "the keyring cannot be read: give a public keyring file (gpg --export > pubring.gpg)",
    ),
)
# OpenPGP packet tags of a secret key (RFC 4880, 4.3): 5 (secret key), 7 (secret subkey).
_SECRET_TAGS = frozenset({5, 7})


def keyring_problem(path: Path) -> str:
    """Why ``path`` is no public keyring helm can read ("" when it looks like one): missing,
    empty, or a private key (never used: the bot needs the public half only)."""
    try:
        with path.open("rb") as handle:
            head = handle.read(1)
    except OSError as exc:
        return f"cannot read {path}: {exc.strerror or exc}"
    if not head:
        return f"{path} is empty"
    byte = head[0]
    tag = byte & 0x3F if byte & 0x40 else (byte & 0x3C) >> 2
    if not byte & 0x80:
        return f"{path} is not a binary OpenPGP keyring (give gpg --export, without --armor)"
    if tag in _SECRET_TAGS:
        return (
            f"{path} holds a private key: give the public keyring only "
            "(gpg --export, not --export-secret-keys)"
        )
    return ""


def check_keyrings(keyrings: Sequence[ChartKeyring]) -> None:
    """At start: every keyring a public keyring file, else a ConfigError naming the entry."""
    for i, entry in enumerate(keyrings):
        problem = keyring_problem(Path(entry.keyring))
        if problem:
            raise ConfigError(f"gitopsbot.yaml: chartKeyrings[{i}] ({entry.repository}): {problem}")


def reason(helm_error: str) -> str:
    """helm verify's failure as what to fix (helm's own words when unknown)."""
    for pattern, text in _REASONS:
        if pattern.search(helm_error):
            return text
    tail = helm_error.split("Error:", 1)[-1] if "Error:" in helm_error else helm_error
    return "helm verify: " + " ".join(tail.split())[:300]


class SignedCharts(ChartSource, ChartArchives):
    """``ChartSource`` and ``ChartArchives`` over ``charts`` whose ``fetch`` verifies the
    archive's provenance (module docstring). ``helm``: made on first verification."""

    def __init__(
        self,
        charts: ChartSource,
        keyrings: Sequence[ChartKeyring],
        helm: Callable[[], HelmCli],
    ) -> None:
        self._charts = charts
        self._keyrings = tuple(keyrings)
        self._helm_factory = helm
        self._helm: HelmCli | None = None

    def index(self, repo_url: str, name: str = "") -> ChartIndex:
        return self._charts.index(repo_url, name)

    def chart(self, repo_url: str, name: str, version: str) -> Chart:
        return self._charts.chart(repo_url, name, version)

    def fetch(self, repo_url: str, name: str, version: str) -> ChartArchive:
        archive = self._archives().fetch(repo_url, name, version)
        return replace(archive, provenance=self.verify(repo_url, name, version, archive))

    def kept(self, repo_url: str, name: str, version: str, digest: str) -> ChartArchive:
        # The archive the apply admitted (verified then), pinned by its digest.
        return self._archives().kept(repo_url, name, version, digest)

    def close(self) -> None:
        close = getattr(self._charts, "close", None)
        if close is not None:
            close()

    def _archives(self) -> ChartArchives:
        if not isinstance(self._charts, ChartArchives):
            raise ChartUnavailable("the chart source keeps no archives")
        return self._charts

    def verify(
        self, repo_url: str, name: str, version: str, archive: ChartArchive
    ) -> core.Provenance:
        """What verifying ``archive`` with the keyring its repository requires found."""
        need = core.requirement(repo_url, self._keyrings)
        if need is None:
            return core.Provenance(required=False)
        keyring = need.entry.keyring
        found = core.Provenance(required=True, where=need.where, keyring=keyring)
        if archive.path.is_dir():
            problem = "a chart directory has no provenance: give the signed archive and its .prov"
            return replace(found, problem=problem)
        unusable = keyring_problem(Path(keyring))
        if unusable:
            return replace(found, problem=unusable)
        signed = self._provenance(repo_url, name, version)
        if isinstance(signed, str):
            return replace(found, problem=signed)
        if signed is None:
            return replace(
                found,
                problem=f"{archive.source} has no provenance file (.prov): have the chart "
                f"published signed (helm package --sign), or remove {need.where} from "
                "gitopsbot.yaml",
            )
        if self._helm is None:
            self._helm = self._helm_factory()
        try:
            report = self._helm.verify(
                archive.path, signed, keyring=Path(keyring), filename=f"{name}-{version}.tgz"
            )
        except HelmTimeout as exc:
            raise ChartUnavailable(str(exc)) from None
        except HelmError as exc:
            return replace(found, problem=f"{archive.source}: {reason(str(exc))}")
        signer, fingerprint = _SIGNER.search(report), _FINGERPRINT.search(report)
        if signer is None:
            return replace(found, problem=f"helm verify named no signer: {report.strip()[:200]}")
        return replace(
            found,
            signer=signer.group(1).strip(),
            fingerprint=fingerprint.group(1) if fingerprint is not None else "",
        )

    def _provenance(self, repo_url: str, name: str, version: str) -> bytes | str | None:
        """The provenance file, None when there is none, or why it could not be read."""
        if not isinstance(self._charts, ProvenanceFiles):
            return "its chart source serves no provenance files"
        try:
            return self._charts.provenance(repo_url, name, version)
        except (ChartNotFound, ChartInvalid) as exc:
            return f"its provenance file cannot be read: {exc}"
