"""Journals on the state branch: one commit per step transition, through the Repo port.

Layout of the state branch (``gitopsbot/state`` by default; docs/executor.md):

- ``clusters/<name>/journal.yaml``: the current (or last) operation of the cluster
- ``clusters/<name>/queued.yaml``: the one operation waiting its turn (absent when none)
- ``clusters/<name>/history/<op id>.yaml``: finished and superseded operations
- ``clusters/<name>/backups/<op id>/values.yaml`` and ``tf-state.yaml``: R6, secrets masked
- ``clusters/<name>/seen``: the last watched-branch commit the bot has taken into account
- ``clusters/<name>/manual-revision.yaml``: a Helm revision made outside the bot after its
  last operation (reported, never undone)
- ``clusters/<name>/pass-failure.yaml``: passes fail before or outside an operation (an
  unreachable cluster, a missing kube context): the error's first line and since when
- ``clusters/<name>/load-failure.yaml``: the newest commit for the cluster could not be
  loaded (nothing applied): the commit and the located reason
- ``clusters/<name>/evidence.json``: the waves' evidence of the cluster's journals, digested
  (``core.waves.wave_evidence``), written in the same commit as every change of ``journal.yaml``,
  ``queued.yaml`` or ``history/`` (``bot.evidence_store``)
- ``tools.yaml``: the helm and kubectl versions (and paths) ``run`` started with

Reads go to the branch's head as ``Repo.head`` reports it (the local commit when a push is
still pending), so a restart sees its own unpushed transitions. A failed push is not an error
here: the commit stays local and the next transition pushes both.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from datetime import datetime

from gitopsbot.bot import evidence_store
from gitopsbot.core.drift import record as drift_record
from gitopsbot.core.drift.record import DriftRecord
from gitopsbot.core.operations import manual_revision
from gitopsbot.core.operations.manual_revision import ManualRevision
from gitopsbot.core.records import journal as journal_mod
from gitopsbot.core.records import load_failure, pass_failure, tool_record
from gitopsbot.core.records.journal import Journal, OperationStatus, StepKind, StepState
from gitopsbot.core.records.load_failure import LoadFailure
from gitopsbot.core.records.pass_failure import PassFailure
from gitopsbot.core.records.tool_record import ToolRecord
from gitopsbot.errors import TransientError
from gitopsbot.ports.repo import Repo

log = logging.getLogger(__name__)
PARSED_CACHE = 64  # journals kept parsed, by content


def cluster_dir(cluster: str) -> str:
    return f"clusters/{cluster}"


class JournalStore:
    def __init__(self, repo: Repo, *, branch: str = "gitopsbot/state", push: bool = True) -> None:
        self._repo = repo
        self.branch = branch
        self._push = push
        self._unpushed = False  # a commit not pushed yet (see ``flush``)
        # Journals by their file's bytes: a pass reads the current one several times, and a
        # YAML parse costs tens of milliseconds. Journals are frozen, so sharing is safe.
        self._parsed: dict[bytes, Journal] = {}
        self._parsed_lock = threading.Lock()
        # The waves' summaries (bot.evidence_store): parsed ones, and the chart version an
        # operation's desired commit names, for the digests written with each record.
        self.summaries = evidence_store.Summaries()
        self.version_of: Callable[[Journal], str] = evidence_store.VersionReader(repo)

    # -- reading --------------------------------------------------------------------------

    @property
    def repo(self) -> Repo:
        """The fleet repository the state branch lives in."""
        return self._repo

    def _read(self, path: str) -> bytes | None:
        head = self._repo.head(self.branch)
        if head is None:
            return None
        return self._repo.read(head, path)

    def _journal(self, path: str) -> Journal | None:
        data = self._read(path)
        if data is None:
            return None
        return self.parse(data, path)

    def parse(self, data: bytes, path: str) -> Journal:
        """A journal file's bytes, parsed once (ValueError naming ``path`` when they do not
        parse)."""
        with self._parsed_lock:
            cached = self._parsed.get(data)
        if cached is not None:
            return cached
        try:
            journal = journal_mod.loads(data.decode("utf-8"))
        except (ValueError, KeyError) as e:
            raise ValueError(f"{self.branch}:{path}: {e}") from None
        with self._parsed_lock:
            if len(self._parsed) >= PARSED_CACHE:
                self._parsed.pop(next(iter(self._parsed)))
            self._parsed[data] = journal
        return journal

    def current(self, cluster: str) -> Journal | None:
        return self._journal(f"{cluster_dir(cluster)}/journal.yaml")

    def queued(self, cluster: str) -> Journal | None:
        return self._journal(f"{cluster_dir(cluster)}/queued.yaml")

    def history(self, cluster: str, op_id: str) -> Journal | None:
        found = self._journal(f"{cluster_dir(cluster)}/history/{op_id}.yaml")
        if found is None:
            current = self.current(cluster)
            if current is not None and current.op_id == op_id:
                return current
        return found

    def history_names(self, cluster: str) -> list[str]:
        """The file names under ``history/`` (``<op id>.yaml``), for the evidence of waves."""
        head = self._repo.head(self.branch)
        if head is None:
            return []
        return sorted(self._repo.tree(head).list(f"{cluster_dir(cluster)}/history"))

    def seen(self, cluster: str) -> str | None:
        head = self._repo.head(self.branch)
        if head is None:
            return None
        # Kept by the cluster directory's id: the waves read every cluster's (#29).
        return self.summaries.seen(self._repo.tree(head), cluster)

    def seen_reader(self) -> Callable[[str], str | None]:
        """``seen`` of any cluster at the state branch's head as of now, the head resolved
        once: for a judgement that asks it of every cluster of the fleet (#29)."""
        head = self._repo.head(self.branch)
        if head is None:
            return lambda cluster: None
        tree = self._repo.tree(head)
        return lambda cluster: self.summaries.seen(tree, cluster)

    def pass_failure(self, cluster: str) -> PassFailure | None:
        data = self._read(f"{cluster_dir(cluster)}/{pass_failure.FILE}")
        return None if data is None else pass_failure.loads(data.decode("utf-8", "replace"))

    def record_pass_failure(self, cluster: str, error: str, now: datetime) -> bool:
        """Record that a pass failed with ``error``; a commit only when the record changes.
        True when it committed."""
        found = pass_failure.observe(self.pass_failure(cluster), error, now)
        if found is None:
            return False
        self.commit(
            {f"{cluster_dir(cluster)}/{pass_failure.FILE}": pass_failure.dumps(found).encode()},
            f"{cluster}: passes fail: {found.error[:100]}",
        )
        return True

    def clear_pass_failure(self, cluster: str) -> bool:
        """A pass succeeded: remove the record, if any (one commit). True when it committed."""
        path = f"{cluster_dir(cluster)}/{pass_failure.FILE}"
        if self._read(path) is None:
            return False
        self.commit({path: None}, f"{cluster}: passes succeed again")
        return True

    def load_failure(self, cluster: str) -> LoadFailure | None:
        data = self._read(f"{cluster_dir(cluster)}/{load_failure.FILE}")
        return None if data is None else load_failure.loads(data.decode("utf-8", "replace"))

    def clear_load_failure(self, cluster: str) -> bool:
        """A newer commit for the cluster loaded: remove the record, if any (one commit).
        True when it committed."""
        path = f"{cluster_dir(cluster)}/{load_failure.FILE}"
        if self._read(path) is None:
            return False
        self.commit({path: None}, f"{cluster}: the newest commit loads again")
        return True

    def manual_revision(self, cluster: str) -> ManualRevision | None:
        data = self._read(f"{cluster_dir(cluster)}/{manual_revision.FILE}")
        return None if data is None else manual_revision.loads(data.decode("utf-8", "replace"))

    def record_manual_revision(self, cluster: str, found: ManualRevision | None) -> bool:
        """Keep the record in step with ``found`` (None: remove it); a commit only when it
        changes. True when it committed."""
        path = f"{cluster_dir(cluster)}/{manual_revision.FILE}"
        known = self.manual_revision(cluster)
        if found is None:
            if self._read(path) is None:
                return False
            self.commit({path: None}, f"{cluster}: the release is the bot's again")
            return True
        # The same record: nothing to commit. A revision looked at while helm was still making
        # it (a watch's event brings the look at once, #29) reads "Preparing upgrade"; once
        # helm finished, its description and time change, and the record follows.
        if known is not None and manual_revision.dumps(known) == manual_revision.dumps(found):
            return False
        self.commit(
            {path: manual_revision.dumps(found).encode()},
            f"{cluster}: release revision {found.revision} made outside the bot",
        )
        return True

    def drift(self, cluster: str) -> DriftRecord | None:
        """The last drift ``run`` found (docs/drift.md), for ``status``; None: none."""
        data = self._read(f"{cluster_dir(cluster)}/{drift_record.FILE}")
        return None if data is None else drift_record.loads(data.decode("utf-8", "replace"))

    def record_drift(self, cluster: str, found: DriftRecord | None) -> bool:
        """Keep ``drift.yaml`` in step with ``found`` (None: no drift); a commit only when the
        drift changes (its digest). True when it committed."""
        path = f"{cluster_dir(cluster)}/{drift_record.FILE}"
        if found is None:
            if self._read(path) is None:
                return False
            self.commit({path: None}, f"{cluster}: no drift")
            return True
        known = self.drift(cluster)
        if known is not None and known.digest == found.digest:
            return False
        self.commit({path: drift_record.dumps(found).encode()}, found.summary)
        return True

    def tools(self) -> ToolRecord | None:
        """The helm and kubectl the bot last started with (``tools.yaml``), if recorded."""
        data = self._read(tool_record.FILE)
        return None if data is None else tool_record.loads(data.decode("utf-8", "replace"))

    def record_tools(self, record: ToolRecord) -> bool:
        """Keep ``tools.yaml`` in step with ``record``: a commit only when it changes."""
        if self.tools() == record:
            return False
        self.commit({tool_record.FILE: tool_record.dumps(record).encode()}, record.describe())
        return True

    def clusters(self) -> list[str]:
        head = self._repo.head(self.branch)
        if head is None:
            return []
        return sorted(self._repo.tree(head).list("clusters"))

    def refresh(self) -> None:
        """Fetch the remote, for readers that watch (``gitopsbot status --watch``)."""
        self._repo.fetch()

    def head(self) -> str | None:
        return self._repo.head(self.branch)

    # -- writing --------------------------------------------------------------------------

    def save(
        self,
        journal: Journal,
        message: str,
        *,
        files: Mapping[str, bytes | None] | None = None,
        seen: str | None = None,
        push: bool = True,
    ) -> str:
        """Commit ``journal`` where its status puts it (queued.yaml for QUEUED, journal.yaml
        otherwise; a superseded one goes to history) plus ``files``; push, unless ``push`` is
        False: then the commit waits in the mirror for the next push (any later commit's, or
        ``flush``). Returns the sha."""
        base = cluster_dir(journal.cluster)
        text = journal_mod.dumps(journal).encode()
        self._known(text, journal)
        out: dict[str, bytes | None] = dict(files or {})
        if journal.status is OperationStatus.QUEUED:
            out[f"{base}/queued.yaml"] = text
        elif journal.status is OperationStatus.SUPERSEDED:
            out[f"{base}/history/{journal.op_id}.yaml"] = text
        else:
            out[f"{base}/journal.yaml"] = text
            if not journal.active:
                out[f"{base}/history/{journal.op_id}.yaml"] = text
        if seen is not None:
            out[f"{base}/seen"] = (seen + "\n").encode()
        subject = message + "".join(f"; {name} started" for name in self._starts(journal, message))
        return self.commit(
            out,
            f"{journal.cluster}: {subject}\n\nGitopsbot-Operation: {journal.op_id}",
            push=push,
        )

    def _starts(self, journal: Journal, message: str) -> list[str]:
        """The plain steps ``journal`` starts (running here, pending in the recorded journal)
        that ``message`` does not name: a step's start rides on the commit of the step before
        it (docs/executor.md), and the state branch's log should still say when each step
        started. Pool phases are left out: their message says the switch opened. The recorded
        journal is the one the pass read, already parsed (``_parsed``)."""
        if journal.status is not OperationStatus.RUNNING:
            return []
        before = self.current(journal.cluster)
        was = {s.name: s.state for s in before.steps} if before is not None else {}
        if before is None or before.op_id != journal.op_id:
            was = {}
        return [
            s.name
            for s in journal.steps
            if s.state is StepState.RUNNING
            and s.kind is not StepKind.POOL_PHASE
            and was.get(s.name, StepState.PENDING) is StepState.PENDING
            and f"{s.name} started" not in message
        ]

    def start(
        self, journal: Journal, message: str, files: Mapping[str, bytes | None] | None = None
    ) -> str:
        """Make a (formerly queued) operation the current one; the queue slot empties.
        ``files`` (its backup's) go in the same commit."""
        base = cluster_dir(journal.cluster)
        text = journal_mod.dumps(journal).encode()
        self._known(text, journal)
        return self.commit(
            {
                **(files or {}),
                f"{base}/journal.yaml": text,
                f"{base}/queued.yaml": None,
            },
            f"{journal.cluster}: {message}\n\nGitopsbot-Operation: {journal.op_id}",
        )

    def _known(self, text: bytes, journal: Journal) -> None:
        """``journal`` is what ``text`` parses to: the summary's digest needs no parse."""
        with self._parsed_lock:
            if len(self._parsed) >= PARSED_CACHE:
                self._parsed.pop(next(iter(self._parsed)))
            self._parsed[text] = journal

    def commit(self, files: Mapping[str, bytes | None], message: str, *, push: bool = True) -> str:
        """Commit ``files`` (with the waves' summaries of the clusters whose journals they
        change: ``bot.evidence_store``); push unless ``push`` is False."""
        files = evidence_store.with_summaries(self, files)
        sha = self._repo.commit_files(self.branch, files, message, parent=None)
        self._unpushed = True
        if push:
            self.flush()
        return sha

    def flush(self) -> None:
        """Push the commits still only in the mirror (a save with ``push=False``, or a push
        that failed transiently: the next transition pushes it)."""
        if not self._push or not self._unpushed:
            return
        try:
            self._repo.push(self.branch)
        except TransientError as e:  # kept locally; the next transition pushes it
            log.warning("state branch push deferred: %s", e)
            return
        self._unpushed = False

    @property
    def unpushed(self) -> bool:
        """Commits wait in the mirror for a push."""
        return self._push and self._unpushed
