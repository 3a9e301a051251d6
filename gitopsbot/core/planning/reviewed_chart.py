"""The reviewed chart is the applied chart: the digests a plan records, and the comparison
the apply makes with them (issue #30, docs/plan.md "Digests").

A plan records two digests of what it saw:

- the chart **archive**: ``sha256:<hex>`` of the ``.tgz`` as fetched (for a local chart
  directory, the digest of its files, ``adapters.chartrepo``);
- the **rendered manifests**: ``helm template`` of that archive with the cluster's values,
  every secret reference masked (``***``), normalised by ``manifests_digest``: each
  document parsed (comments, key order and formatting do not count), a Secret's ``data`` and
  ``stringData`` reduced to their sorted key names, documents sorted by apiVersion, kind,
  namespace and name, each written as canonical JSON; the sha256 of those lines.

The record is keyed by the cluster and the digest of the files the rendering depends on
(``release.yaml``, ``values.yaml``, ``credentials.yaml``: ``files_key``), so the apply finds
it for a merge commit, a squash or a rebase alike (the same files give the same key). At
apply, ``check`` compares what the bot fetched and rendered with the plan and with the
optional ``chart.digest`` pin of ``release.yaml``; any difference is a blocking failure line
naming both digests and where the chart came from. A provenance the fetch could not verify
with the keyring ``chartKeyrings`` requires (``core.planning.provenance``) blocks first.

Pure: texts and mappings in, values out.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gitopsbot.core.fleet import located_yaml
from gitopsbot.core.fleet.model import Location
from gitopsbot.core.planning import provenance as provenance_mod
from gitopsbot.core.policy import Verdict
from gitopsbot.core.policy.code_rules import CHART_DIGEST
from gitopsbot.core.records.journal import Journal, StepKind
from gitopsbot.errors import FleetError

PREFIX = "sha256:"
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
# The files a rendering depends on (rollout.yaml only feeds the post-renderer).
RENDER_FILES = ("release.yaml", "values.yaml", "credentials.yaml")
RECORDS_DIR = "reviewed"
# Rendered charts of the size of TensorFusion's (a few hundred KiB) with room to spare.
MANIFEST_LIMITS = located_yaml.YamlLimits(max_bytes=32 << 20, max_nodes=5_000_000)


def is_digest(text: str) -> bool:
    """``sha256:`` and 64 lowercase hex digits."""
    return _DIGEST.match(text) is not None


def archive_digest(hexdigest: str) -> str:
    """``sha256:<hex>`` of a bare hex digest (the chart source's); "" stays ""."""
    if not hexdigest:
        return ""
    return hexdigest if hexdigest.startswith(PREFIX) else PREFIX + hexdigest


PIN_RULE = CHART_DIGEST.id
PIN_NAME = CHART_DIGEST.name


def pin_verdict(pinned: str, archive: str, where: Location | None, source: str) -> Verdict | None:
    """The plan's deny when ``chart.digest`` pins another archive than the one read."""
    if not pinned or not archive or pinned == archive:
        return None
    return CHART_DIGEST.deny(
        f"chart.digest pins {pinned}, but the archive read from "
        f"{source or 'the chart repository'} is {archive}: the chart was re-published or "
        "the pin is wrong; fix chart.digest or the repository",
        where,
    )


def short(digest: str) -> str:
    """``sha256:0123456789ab…`` for one-line messages ("none" when empty)."""
    return f"{digest[: len(PREFIX) + 12]}…" if digest else "none"


def _normalised(doc: Any) -> Any:
    if not isinstance(doc, Mapping) or doc.get("kind") != "Secret":
        return doc
    out = dict(doc)
    for key in ("data", "stringData"):
        if isinstance(out.get(key), Mapping):
            # The key names stay (they are the chart's), never the values.
            out[key] = sorted(str(k) for k in out[key])
    return out


def _order(doc: Any) -> tuple[str, str, str, str]:
    if not isinstance(doc, Mapping):
        return ("", "", "", "")
    meta = doc.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    return (
        str(doc.get("apiVersion", "")),
        str(doc.get("kind", "")),
        str(meta.get("namespace", "")),
        str(meta.get("name", "")),
    )


def manifests_digest(rendered: str, *, source: str = "helm template") -> str:
    """The digest of ``rendered`` (a multi-document YAML stream) as normalised above.
    Raises ValueError when the stream does not parse."""
    try:
        docs = located_yaml.load_all(rendered, source, limits=MANIFEST_LIMITS)
    except FleetError as exc:
        raise ValueError(str(exc.problems[0]) if exc.problems else str(exc)) from None
    lines = sorted(
        (_order(d), json.dumps(_normalised(d), sort_keys=True, separators=(",", ":"), default=str))
        for d in docs
    )
    h = hashlib.sha256()
    for _, line in lines:
        h.update(line.encode("utf-8") + b"\n")
    return PREFIX + h.hexdigest()


def files_key(files: Mapping[str, bytes | None]) -> str:
    """The digest of a cluster's ``RENDER_FILES`` (name → bytes, None when absent)."""
    h = hashlib.sha256()
    for name in RENDER_FILES:
        data = files.get(name)
        h.update(name.encode() + (b"\0-" if data is None else b"\0+" + data) + b"\0")
    return h.hexdigest()


def record_path(cluster: str, key: str) -> str:
    """Where a plan's record lives on the state branch."""
    return f"{RECORDS_DIR}/{cluster}/{key}.json"


@dataclass(frozen=True, slots=True)
class ChartDigests:
    """What a plan (or an apply) saw of the target chart."""

    chart: str  # chart name
    version: str
    source: str  # where the archive came from (URL without credentials, or a local path)
    archive: str  # sha256:<hex>
    manifests: str = ""  # sha256:<hex>; "" when it could not be rendered
    render_problem: str = ""  # why not, for the plan's reader
    pinned: str = ""  # release.yaml chart.digest, when set
    manifest: str = ""  # an OCI chart's manifest digest (sha256:<hex>); "" for other sources
    # The provenance verification (core.provenance); None: gitopsbot.yaml has no
    # chartKeyrings, nothing is shown.
    provenance: provenance_mod.Provenance | None = None

    def lines(self) -> list[str]:
        """The plan's lines (Markdown)."""
        out = [f"chart archive: `{self.archive}` ({self.chart} {self.version} from {self.source})"]
        if self.manifest:
            out.append(f"OCI manifest: `{self.manifest}` (what the tag pointed at)")
        if self.manifests:
            out.append(f"rendered manifests: `{self.manifests}` (Secrets' data excluded)")
        else:
            out.append(f"rendered manifests: not rendered ({self.render_problem or 'no helm'})")
        if self.pinned:
            same = "matches" if self.pinned == self.archive else "DOES NOT MATCH"
            out.append(f"pinned by chart.digest: `{self.pinned}` ({same} the archive)")
        if self.provenance is not None:
            out.append(self.provenance.line())
        return out

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "chart": self.chart,
            "version": self.version,
            "source": self.source,
            "archive": self.archive,
            "manifests": self.manifests,
        }
        if self.render_problem:
            out["render_problem"] = self.render_problem
        if self.pinned:
            out["pinned"] = self.pinned
        if self.manifest:
            out["oci_manifest"] = self.manifest
        if self.provenance is not None:
            out["provenance"] = self.provenance.to_json()
        return out


@dataclass(frozen=True, slots=True)
class Reviewed:
    """A plan's record on the state branch: its digests, the files key, where it was made."""

    cluster: str
    key: str
    digests: ChartDigests
    planned_at: str = ""  # the commit the plan read (a request's head)
    request: int | None = None
    # The order records were written in for the cluster (1, 2, …; 0: written before #30's
    # pruning), what ``prunable`` keeps the newest of.
    seq: int = 0

    def dumps(self) -> str:
        data: dict[str, Any] = {
            "cluster": self.cluster,
            "files": self.key,
            **self.digests.to_json(),
            "planned_at": self.planned_at,
        }
        if self.request is not None:
            data["request"] = self.request
        if self.seq:
            data["seq"] = self.seq
        return json.dumps(data, sort_keys=True, indent=2) + "\n"


def loads(text: str) -> Reviewed:
    """A record written by ``Reviewed.dumps``. ValueError when it is not one."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError("not a mapping")
    try:
        digests = ChartDigests(
            chart=str(data["chart"]),
            version=str(data["version"]),
            source=str(data["source"]),
            archive=str(data["archive"]),
            manifests=str(data.get("manifests", "")),
            render_problem=str(data.get("render_problem", "")),
            pinned=str(data.get("pinned", "")),
            manifest=str(data.get("oci_manifest", "")),
            provenance=provenance_mod.from_json(data["provenance"])
            if isinstance(data.get("provenance"), dict)
            else None,
        )
        request = data.get("request")
        return Reviewed(
            cluster=str(data["cluster"]),
            key=str(data["files"]),
            digests=digests,
            planned_at=str(data.get("planned_at", "")),
            request=int(request) if request is not None else None,
            seq=int(data.get("seq") or 0),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"missing or bad field: {exc}") from None


def same_chart(record: Reviewed, fetched: ChartDigests) -> bool:
    return (record.digests.chart, record.digests.version) == (fetched.chart, fetched.version)


def for_version(records: Iterable[Reviewed], fetched: ChartDigests) -> Reviewed | None:
    """Among plans of other files, one that saw the same chart version: one that saw the
    fetched archive if any (the apply's archive was reviewed), else one that did not."""
    found = sorted((r for r in records if same_chart(r, fetched)), key=lambda r: r.key)
    same = [r for r in found if r.digests.archive == fetched.archive]
    pick = same or found
    return pick[0] if pick else None


@dataclass(frozen=True, slots=True)
class Judgement:
    """What the apply found: ``failure`` "" when it may go on; ``note`` says what was
    compared (recorded in the operation's verdicts)."""

    failure: str
    note: str


def check(
    *,
    fetched: ChartDigests,
    planned: Reviewed | None,
    exact: bool,
) -> Judgement:
    """Compare the chart the apply fetched (and rendered) with the plan's record and the
    ``chart.digest`` pin. ``exact``: the record is of these very files (else only of the
    same chart version: the manifests are not compared, the archive is)."""
    what = f"chart {fetched.chart} {fetched.version} from {fetched.source}"
    unsigned = provenance_mod.failure(fetched.provenance, what)
    if unsigned:
        return Judgement(unsigned, "")
    if fetched.pinned and fetched.pinned != fetched.archive:
        return Judgement(
            f"blocked: {what}: archive {fetched.archive} does not match chart.digest "
            f"{fetched.pinned} pinned in release.yaml; nothing applied. Check the chart "
            "repository, then fix chart.digest or the repository",
            "",
        )
    pin = " (matches chart.digest)" if fetched.pinned else ""
    if fetched.provenance is not None and fetched.provenance.required:
        pin += f" (signed by {fetched.provenance.signer})"
    if planned is None:
        return Judgement("", f"chart archive {fetched.archive}{pin}: no plan recorded for it")
    seen = planned.digests
    where = f"the plan of {planned.planned_at[:12] or 'this change'}"
    if planned.request is not None:
        where += f" (pull request #{planned.request})"
    if seen.archive != fetched.archive:
        return Judgement(
            f"blocked: {what}: archive {fetched.archive} differs from {seen.archive} that "
            f"{where} saw (from {seen.source}): the chart was re-published under the same "
            "version; nothing applied. Review it again (a new plan), or restore the archive",
            "",
        )
    if exact and seen.manifests and fetched.manifests and seen.manifests != fetched.manifests:
        return Judgement(
            f"blocked: {what}: rendered manifests {fetched.manifests} differ from "
            f"{seen.manifests} that {where} showed, with the same archive and files (a "
            "different helm, or a chart that renders differently each time); nothing applied. "
            "Make a new plan for this change",
            "",
        )
    if exact and seen.manifests and not fetched.manifests:
        return Judgement(
            f"blocked: {what}: the rendered manifests could not be compared with {where}'s "
            f"({fetched.render_problem or 'not rendered'}); nothing applied",
            "",
        )
    compared = "archive and rendered manifests" if exact and seen.manifests else "archive"
    note = f"chart archive {fetched.archive}{pin}: {compared} as in {where}"
    if seen.manifest and fetched.manifest and seen.manifest != fetched.manifest:
        # The bytes installed are the reviewed ones (the archive is compared above), so this
        # is not a block; but a tag pushed again is worth a reviewer's eye.
        note += (
            f"; WARNING: the tag now points at OCI manifest {fetched.manifest}, not "
            f"{seen.manifest} as at the plan: the chart was pushed again with the same archive"
        )
    elif seen.manifest and fetched.manifest:
        note += f", OCI manifest {fetched.manifest}"
    return Judgement("", note)


# The plans kept per cluster besides the ones a pending merge needs: the pull requests of the
# last weeks of a busy cluster (each request's plan is one record, edited in place).
KEEP_PER_CLUSTER = 20


def prunable(
    records: Iterable[Reviewed], *, needed: Iterable[str], keep: int = KEEP_PER_CLUSTER
) -> list[str]:
    """The keys of a cluster's records that may be deleted: every record but the ``keep``
    newest (by ``seq``; ties and unnumbered ones by key) and those whose key is in
    ``needed`` (the files of a merge still to be applied: the cluster's running or queued
    operation). docs/plan.md, "Pruning the records"."""
    wanted = set(needed)
    ordered = sorted(records, key=lambda r: (r.seq, r.key), reverse=True)
    return sorted(r.key for r in ordered[keep:] if r.key not in wanted)


def next_seq(records: Iterable[Reviewed]) -> int:
    """The ``seq`` of a cluster's next record."""
    return max((r.seq for r in records), default=0) + 1


def applied_archive(journals: Iterable[Journal], revision: int) -> tuple[str, str]:
    """(chart archive, operation id) of the operation whose Helm upgrade made ``revision``
    (its admitted ``chart_archive``); ("", "") when none recorded one: a revision installed
    by hand, by a bot before #30, or by a helm rollback."""
    for journal in journals:
        if not journal.chart_archive:
            continue
        for step in journal.steps:
            made = step.effect.helm_revision if step.effect is not None else 0
            if step.kind is StepKind.HELM_UPGRADE and made == revision:
                return journal.chart_archive, journal.op_id
    return "", ""
