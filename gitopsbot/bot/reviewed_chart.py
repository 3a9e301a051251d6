"""The reviewed chart is the applied chart, through the ports (``core.planning.reviewed_chart``
decides).

- At plan time (``gitopsbot comment``, a proposal): ``ReviewedCharts.digests`` fetches the
  target chart's archive, renders it (``helm template``, secrets masked) and returns what the
  plan shows; ``record`` writes it on the state branch under
  ``reviewed/<cluster>/<files key>.json`` (once per key and content).
- At apply (``bot.apply_gate``): ``admit`` fetches the archive of the merged version once,
  renders it the same way, finds the plan's record for the merged files (else for the same
  version), and either admits the operation with the archive's digest in its journal
  (``Journal.chart_archive``: the steps install that very file, ``Executor.chart_ref``) or
  blocks it with both digests. A rollback fetches nothing: helm rolls back to the stored
  revision, the chart applied then.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from gitopsbot.core.fleet import secrets as secrets_mod
from gitopsbot.core.fleet.model import ClusterSpec
from gitopsbot.core.planning import reviewed_chart as core
from gitopsbot.core.records import journal as journal_mod
from gitopsbot.core.records.journal import Journal, OperationKind, OperationStatus
from gitopsbot.errors import ChartInvalid, ChartNotFound, GitError, GitOpsBotError, HelmError
from gitopsbot.ports.charts import ChartArchive, ChartArchives, ManifestRenderer
from gitopsbot.ports.files import FileTree
from gitopsbot.ports.repo import Repo

log = logging.getLogger(__name__)


def render_files(tree: FileTree, cluster: str) -> dict[str, bytes | None]:
    """The cluster's files its rendering depends on (``core.planning.reviewed_chart.files_key``)."""
    return {name: tree.read(f"clusters/{cluster}/{name}") for name in core.RENDER_FILES}


def render_manifests(
    renderer: ManifestRenderer | None, archive: ChartArchive, spec: ClusterSpec
) -> tuple[str, str]:
    """(manifests digest, "") or ("", why it could not be rendered)."""
    if renderer is None:
        return "", "no helm to render with"
    rel = spec.release
    masked = {r.values_path: secrets_mod.MASK for r in spec.credentials.secrets}
    values = secrets_mod.merge_secrets(spec.values, masked)
    try:
        text = renderer.template(
            archive.path, release=rel.release_name, namespace=rel.namespace, values=values
        )
        return core.manifests_digest(text, source=f"helm template {archive.path.name}"), ""
    except (HelmError, ValueError) as exc:
        return "", " ".join(str(exc).split())[:300]


def chart_digests(
    archives: ChartArchives,
    renderer: ManifestRenderer | None,
    spec: ClusterSpec,
    archive: ChartArchive | None = None,
    *,
    render: bool = True,
) -> core.ChartDigests:
    """What a plan (the plan comment, a proposal, ``gitopsbot plan``) or the apply sees of
    ``spec``'s target chart. Raises ChartNotFound, ChartInvalid, ChartUnavailable when the
    archive cannot be fetched. ``render=False``: the manifests are not rendered (nothing
    would compare them)."""
    rel = spec.release
    archive = archive or archives.fetch(rel.chart_repo_url, rel.chart_name, rel.version)
    manifests, problem = render_manifests(renderer, archive, spec) if render else ("", "")
    return core.ChartDigests(
        chart=rel.chart_name,
        version=rel.version,
        source=archive.source,
        archive=archive.digest,
        manifests=manifests,
        render_problem=problem,
        pinned=rel.chart_digest,
        manifest=archive.manifest,
        provenance=archive.provenance,
    )


class ReviewedCharts:
    """Fetches, renders and records the target chart (module docstring)."""

    def __init__(
        self,
        archives: ChartArchives,
        renderer: ManifestRenderer | None,
        *,
        repo: Repo,
        state_branch: str,
    ) -> None:
        self.archives = archives
        self.renderer = renderer
        self.repo = repo
        self.state_branch = state_branch

    def render(self, archive: ChartArchive, spec: ClusterSpec) -> tuple[str, str]:
        """(manifests digest, "") or ("", why it could not be rendered)."""
        return render_manifests(self.renderer, archive, spec)

    def digests(
        self, spec: ClusterSpec, archive: ChartArchive | None = None, *, render: bool = True
    ) -> core.ChartDigests:
        """What a plan (or the apply) sees of ``spec``'s target chart (``chart_digests``)."""
        return chart_digests(self.archives, self.renderer, spec, archive, render=render)

    # -- the state branch ------------------------------------------------------------------

    def record(self, record: core.Reviewed) -> bool:
        """Write the plan's record on the state branch when its digests are new (the same
        digests planned again, from another request or pass, write nothing)."""
        path = core.record_path(record.cluster, record.key)
        head = self.repo.head(self.state_branch)
        before = self.repo.read(head, path) if head is not None else None
        if before is not None:
            try:
                was = core.loads(before.decode("utf-8"))
                if was.digests == record.digests and (was.planned_at or not record.planned_at):
                    return False
            except (ValueError, UnicodeDecodeError):
                pass  # not a record: written anew
        records = self._records(record.cluster)
        record = replace(record, seq=core.next_seq(records))
        files: dict[str, bytes | None] = {path: record.dumps().encode()}
        needed = self._pending_keys(record.cluster, head)
        if needed is not None:
            # Pruned in this very commit: no push of its own (docs/plan.md, "Pruning").
            others = [r for r in records if r.key != record.key]
            for key in core.prunable([*others, record], needed=needed):
                files[core.record_path(record.cluster, key)] = None
        pruned = len(files) - 1
        try:
            self.repo.commit_files(
                self.state_branch,
                files,
                f"{record.cluster}: plan of {record.digests.chart} {record.digests.version} "
                f"recorded ({core.short(record.digests.archive)})"
                + (f"; {pruned} older plan record(s) pruned" if pruned else "")
                + "\n",
                parent=None,
            )
            self.repo.push(self.state_branch)
        except GitError as exc:
            # The plan is still posted; the apply then finds no record of these files and
            # says so (docs/plan.md, "Digests").
            log.warning("%s: the plan's digests could not be recorded: %s", record.cluster, exc)
            return False
        return True

    def _pending_keys(self, cluster: str, head: str | None) -> set[str] | None:
        """The files keys of the cluster's merges still to be applied (its running and its
        queued operation, on the state branch at ``head``): their records are never pruned.
        None when one cannot be read: then nothing is pruned."""
        if head is None:
            return set()
        keys: set[str] = set()
        for name in ("journal.yaml", "queued.yaml"):
            try:
                raw = self.repo.read(head, f"clusters/{cluster}/{name}")
                if raw is None:
                    continue
                journal = journal_mod.loads(raw.decode("utf-8"))
                if journal.active:
                    tree = self.repo.tree(journal.desired_sha)
                    keys.add(core.files_key(render_files(tree, cluster)))
            except (GitOpsBotError, ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
                log.warning("%s: plan records not pruned: %s unreadable (%s)", cluster, name, exc)
                return None
        return keys

    def _records(self, cluster: str) -> list[core.Reviewed]:
        head = self.repo.head(self.state_branch)
        if head is None:
            return []
        out: list[core.Reviewed] = []
        directory = f"{core.RECORDS_DIR}/{cluster}"
        for name in self.repo.tree(head).list(directory):
            raw = self.repo.read(head, f"{directory}/{name}")
            try:
                out.append(core.loads(raw.decode("utf-8") if raw else ""))
            except (ValueError, UnicodeDecodeError) as exc:
                log.warning("%s/%s: not a plan record (%s); ignored", directory, name, exc)
        return out

    def planned(self, cluster: str, key: str) -> tuple[core.Reviewed | None, list[core.Reviewed]]:
        """The record of these files, and every record of the cluster."""
        records = self._records(cluster)
        exact = next((r for r in records if r.key == key), None)
        return exact, records

    # -- at apply --------------------------------------------------------------------------

    def admit(self, journal: Journal, spec: ClusterSpec) -> Journal:
        """``journal`` with the archive it will install (``chart_archive``) and what was
        compared, or BLOCKED. A rollback is admitted as it is (nothing fetched)."""
        if journal.kind is OperationKind.ROLLBACK:
            return journal
        rel = spec.release
        try:
            archive = self.archives.fetch(rel.chart_repo_url, rel.chart_name, rel.version)
        except (ChartNotFound, ChartInvalid) as exc:
            return _blocked(journal, f"blocked: chart {rel.chart_name} {rel.version}: {exc}")
        key = core.files_key(render_files(self.repo.tree(journal.desired_sha), spec.name))
        exact, records = self.planned(spec.name, key)
        # Only a plan of these very files compares the manifests (``core.check``): rendering
        # for nothing is a helm child on the way to a merge's first action (#29: 0.1 s).
        fetched = self.digests(
            spec, archive, render=exact is not None and bool(exact.digests.manifests)
        )
        planned = exact or core.for_version((r for r in records if r.key != key), fetched)
        found = core.check(fetched=fetched, planned=planned, exact=exact is not None)
        if found.failure:
            log.warning("%s: %s", journal.cluster, found.failure)
            return _blocked(journal, found.failure)
        if "WARNING" in found.note:
            log.warning("%s: %s", journal.cluster, found.note)
        return replace(
            journal,
            chart_archive=archive.digest,
            chart_manifest=archive.manifest,
            verdicts=(*journal.verdicts, found.note),
        )


def _blocked(journal: Journal, failure: str) -> Journal:
    return replace(journal, status=OperationStatus.BLOCKED, failure=failure[:900])
