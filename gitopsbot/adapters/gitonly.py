"""Git-only mode: the Forge port for teams without a forge API, built on the Repo port alone.

A proposal is a branch (``gitopsbot/<cluster>/<version>`` by convention, any branch works).
Its ``PLAN.md`` — ``clusters/<cluster>/PLAN.md`` for a proposal branch, so that two proposals
for different clusters never conflict on merge; ``PLAN.md`` at the root for other branches —
carries the plan, the bot's comments and the check statuses, rendered for people, with the
machine state in a one-line JSON header. Every write is a commit on the branch whose message
carries the title and plan (plus the ``Gitopsbot-Proposal`` trailer), pushed with the Repo's
retry. A proposal is *merged* when its branch head is an ancestor of its base branch; the
merge commit is the first commit of the base (first-parent) that contains it.

Reads see the repository as of the last ``Repo.fetch`` (the reconcile pass fetches first).
Writes to a merged proposal are skipped: a commit after the merge would make the branch look
unmerged. Request numbers are stable hashes of the branch name.
"""

from __future__ import annotations

import json
import logging
import re
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from gitopsbot.core.fleet.commit_classes import PROPOSAL_PREFIX, parse_proposal_branch
from gitopsbot.core.forge.forge_types import (
    CommentInfo,
    CommitState,
    CommitStatus,
    PullRequestDraft,
    PullRequestInfo,
    PullRequestState,
    find_marker,
    with_marker,
)
from gitopsbot.errors import ForgeFailed, ForgeNotFound
from gitopsbot.ports.forge import Forge, RecordsRequestsInGit
from gitopsbot.ports.repo import Repo

log = logging.getLogger(__name__)

PLAN_FILE = "PLAN.md"
_HEADER_RE = re.compile(r"\A<!-- gitopsbot-proposal (\{.*\}) -->\n")
_MERGE_SEARCH = 500  # base-branch commits searched for the merge commit


def plan_path(branch: str) -> str:
    """Where a branch's PLAN.md lives."""
    proposal = parse_proposal_branch(branch)
    return f"clusters/{proposal.cluster}/{PLAN_FILE}" if proposal else PLAN_FILE


def request_number(branch: str) -> int:
    """A stable positive number for a branch (what ``#N`` is on a forge)."""
    return (zlib.crc32(branch.encode()) & 0x7FFFFFFF) or 1


@dataclass(frozen=True, slots=True)
class _Check:
    """A row of PLAN.md's Checks table: a status and the commit it was set on ("" for the
    commit that carries the file, whose sha cannot be written inside it)."""

    status: CommitStatus
    sha: str = ""


@dataclass(frozen=True, slots=True)
class _Proposal:
    """What PLAN.md's header holds."""

    base: str
    title: str
    body: str
    marker: str
    labels: tuple[str, ...] = ()
    comments: dict[str, str] = field(default_factory=dict)
    statuses: dict[str, _Check] = field(default_factory=dict)  # by context
    closed: bool = False

    def to_json(self) -> str:
        data = {
            "base": self.base,
            "title": self.title,
            "body": self.body,
            "marker": self.marker,
            "labels": list(self.labels),
            "comments": self.comments,
            "statuses": {
                context: {
                    "state": str(check.status.state),
                    "description": check.status.description,
                    "sha": check.sha,
                    "target_url": check.status.target_url,
                }
                for context, check in sorted(self.statuses.items())
            },
            "closed": self.closed,
        }
        # One line, and no "-->" inside the HTML comment that holds it.
        return json.dumps(data, sort_keys=True).replace(">", "\\u003e")

    @staticmethod
    def from_json(text: str) -> _Proposal:
        data = json.loads(text)
        return _Proposal(
            base=str(data["base"]),
            title=str(data["title"]),
            body=str(data["body"]),
            marker=str(data["marker"]),
            labels=tuple(str(x) for x in data.get("labels", ())),
            comments={str(k): str(v) for k, v in data.get("comments", {}).items()},
            statuses={
                str(k): _Check(
                    CommitStatus(
                        CommitState(str(v["state"])),
                        str(v["description"]),
                        str(k),
                        str(v.get("target_url", "")),
                    ),
                    str(v["sha"]),
                )
                for k, v in data.get("statuses", {}).items()
            },
            closed=bool(data.get("closed", False)),
        )

    def render(self) -> str:
        lines = [f"<!-- gitopsbot-proposal {self.to_json()} -->", f"# {self.title}", ""]
        if self.closed:
            lines += ["**Closed without merging.**", ""]
        if self.labels:
            lines += ["Labels: " + ", ".join(f"`{x}`" for x in self.labels), ""]
        lines += [self.body.rstrip(), ""]
        if self.statuses:
            lines += [
                "## Checks",
                "",
                "| check | state | description | commit |",
                "|---|---|---|---|",
            ]
            for context, check in sorted(self.statuses.items()):
                description = check.status.description.replace("|", "\\|")
                commit = check.sha[:10] or "this commit"
                lines.append(f"| `{context}` | {check.status.state} | {description} | {commit} |")
            lines.append("")
        for marker, body in sorted(self.comments.items()):
            lines += [f"## Comment `{marker}`", "", body.rstrip(), ""]
        return "\n".join(lines)


class GitOnlyForge(Forge, RecordsRequestsInGit):
    """``Forge`` over a ``Repo``: branches are requests, PLAN.md is the conversation."""

    def __init__(self, repo: Repo, *, branch_prefix: str = PROPOSAL_PREFIX) -> None:
        self._repo = repo
        self._prefix = branch_prefix

    # -- reading ---------------------------------------------------------------------------

    def _load(self, branch: str) -> tuple[_Proposal, str] | None:
        head = self._repo.head(branch)
        if head is None:
            return None
        data = self._repo.read(head, plan_path(branch))
        if data is None:
            return None
        m = _HEADER_RE.match(data.decode("utf-8", errors="replace"))
        if m is None:
            return None
        try:
            return _Proposal.from_json(m.group(1)), head
        except (ValueError, KeyError, TypeError, AttributeError):
            log.warning("git-only: unreadable %s on %s; ignored", plan_path(branch), branch)
            return None

    def _merge_commit(self, head: str, base: str) -> tuple[str, datetime] | None:
        base_head = self._repo.head(base)
        if base_head is None or not self._repo.is_ancestor(head, base_head):
            return None
        for commit in self._repo.log(base, None, _MERGE_SEARCH):
            if self._repo.is_ancestor(head, commit.sha):
                return commit.sha, commit.time
        return base_head, self._repo.log(base, None, 1)[-1].time  # older than the search

    def _info(self, branch: str, proposal: _Proposal, head: str) -> PullRequestInfo:
        merged = self._merge_commit(head, proposal.base)
        if merged is not None:
            state = PullRequestState.MERGED
        elif proposal.closed:
            state = PullRequestState.CLOSED
        else:
            state = PullRequestState.OPEN
        mergeable: bool | None = None
        base_head = self._repo.head(proposal.base)
        if state is PullRequestState.OPEN and base_head is not None:
            # Fast-forwardable is certain; anything else needs a merge we do not try here.
            mergeable = True if self._repo.is_ancestor(base_head, head) else None
        tag = find_marker(proposal.body)
        return PullRequestInfo(
            number=request_number(branch),
            branch=branch,
            base=proposal.base,
            title=proposal.title,
            state=state,
            head_sha=head,
            url=f"branch:{branch}",
            body=proposal.body,
            marker=tag.marker if tag else proposal.marker,
            merge_commit_sha=merged[0] if merged else "",
            merged_at=merged[1] if merged else None,
            mergeable=mergeable,
            labels=proposal.labels,
        )

    def _owns(self, sha: str, proposal: _Proposal, head: str) -> bool:
        """True when ``sha`` is one of the proposal's own commits (on it, not on its base)."""
        if not self._repo.is_ancestor(sha, head):
            return False
        base_head = self._repo.head(proposal.base)
        return base_head is None or not self._repo.is_ancestor(sha, base_head)

    def _branch_of(self, number: int) -> str:
        for branch in self._repo.branches(self._prefix):
            if request_number(branch) == number and self._load(branch) is not None:
                return branch
        raise ForgeNotFound(f"git-only: no proposal #{number}")

    # -- writing ---------------------------------------------------------------------------

    def _save(
        self, branch: str, proposal: _Proposal, summary: str, *, parent: str | None = None
    ) -> str:
        path = plan_path(branch)
        text = proposal.render().encode()
        head = parent or self._repo.head(branch)
        if head is not None and self._repo.read(head, path) == text:
            return head  # nothing changed: no commit, no push
        trailer = ""
        found = parse_proposal_branch(branch)
        if found is not None:
            trailer = f"\n\n{found.trailer}"
        message = f"{proposal.title}\n\n{summary}{trailer}\n"
        self._repo.commit_files(branch, {path: text}, message, parent=parent)
        return self._repo.push(branch)

    def _proposal_for(self, draft: PullRequestDraft) -> _Proposal:
        """The request as ``open_or_update_pull_request`` records it (the body marked)."""
        body = draft.marked_body
        loaded = self._load(draft.branch)
        if loaded is not None and loaded[0].marker == draft.marker:
            old = loaded[0]
            return replace(
                old,
                base=draft.base,
                title=draft.title,
                body=body,
                labels=tuple(dict.fromkeys((*old.labels, *draft.labels))),
                closed=False,
            )
        return _Proposal(
            base=draft.base, title=draft.title, body=body, marker=draft.marker, labels=draft.labels
        )

    # -- RecordsRequestsInGit --------------------------------------------------------------

    def request_files(
        self, draft: PullRequestDraft, *, status: CommitStatus | None = None
    ) -> dict[str, bytes]:
        proposal = self._proposal_for(draft)
        if status is not None:
            # The status of the commit that carries this file: its sha cannot be inside it,
            # so it is left empty ("this commit"); set_status compares the status alone.
            proposal = replace(
                proposal, statuses={**proposal.statuses, status.context: _Check(status)}
            )
        return {plan_path(draft.branch): proposal.render().encode()}

    # -- Forge port ------------------------------------------------------------------------

    def find_pull_request(self, branch: str, marker: str) -> PullRequestInfo | None:
        loaded = self._load(branch)
        if loaded is None or loaded[0].marker != marker:
            return None
        info = self._info(branch, *loaded)
        return info if info.state is PullRequestState.OPEN else None

    def open_or_update_pull_request(self, draft: PullRequestDraft) -> PullRequestInfo:
        branch, base, marker = draft.branch, draft.base, draft.marker
        loaded = self._load(branch)
        start: str | None = None
        if self._repo.head(branch) is None:
            # A new proposal branch starts at the base, with the plan as its first commit.
            start = self._repo.head(base)
            if start is None:
                raise ForgeFailed(f"git-only: base branch {base!r} does not exist")
        if loaded is not None and loaded[0].marker == marker:
            done = self._info(branch, *loaded)
            if done.state is PullRequestState.MERGED:
                # Already merged: writing now would make the branch look unmerged.
                return done
        if loaded is not None and loaded[0].marker != marker and not loaded[0].closed:
            other = self._info(branch, *loaded)
            if other.state is PullRequestState.OPEN:
                raise ForgeFailed(
                    f"git-only: {branch} already carries an open proposal without our marker"
                )
        proposal = self._proposal_for(draft)
        self._save(branch, proposal, proposal.body, parent=start)
        loaded = self._load(branch)
        assert loaded is not None
        return self._info(branch, *loaded)

    def get_pull_request(self, number: int) -> PullRequestInfo:
        branch = self._branch_of(number)
        loaded = self._load(branch)
        assert loaded is not None
        return self._info(branch, *loaded)

    def _update(self, number: int, change: _Proposal, summary: str) -> None:
        branch = self._branch_of(number)
        loaded = self._load(branch)
        assert loaded is not None
        if self._info(branch, *loaded).state is PullRequestState.MERGED:
            log.info("git-only: #%d is merged; %s not recorded on its branch", number, summary)
            return
        self._save(branch, change, summary)

    def _current(self, number: int) -> _Proposal:
        loaded = self._load(self._branch_of(number))
        assert loaded is not None
        return loaded[0]

    def upsert_comment(self, number: int, *, marker: str, body: str) -> CommentInfo:
        proposal = self._current(number)
        text = with_marker(body, marker)
        comments = {**proposal.comments, marker: text}
        self._update(number, replace(proposal, comments=comments), f"Comment {marker}")
        return CommentInfo(id=request_number(marker), body=text, url=f"branch:{marker}")

    def set_status(self, sha: str, status: CommitStatus) -> None:
        context = status.context
        for branch in self._repo.branches(self._prefix):
            loaded = self._load(branch)
            if loaded is None or not self._owns(sha, loaded[0], loaded[1]):
                continue
            proposal = loaded[0]
            old = proposal.statuses.get(context)
            # Same verdict still on this branch's history: recording it again would only
            # move the head and invite another pass.
            if old is not None and old.status == status:
                return
            statuses = {**proposal.statuses, context: _Check(status, sha)}
            self._update(
                request_number(branch),
                replace(proposal, statuses=statuses),
                f"Status {context}: {status.state} — {status.description}",
            )
            return
        log.info("git-only: status %s for %s: no proposal branch holds it", context, sha[:10])

    def add_labels(self, number: int, labels: Sequence[str]) -> None:
        proposal = self._current(number)
        merged = tuple(dict.fromkeys((*proposal.labels, *labels)))
        if merged != proposal.labels:
            self._update(number, replace(proposal, labels=merged), "Labels: " + ", ".join(labels))

    def list_merged_since(self, since: datetime) -> list[PullRequestInfo]:
        out: list[PullRequestInfo] = []
        for branch in self._repo.branches(self._prefix):
            loaded = self._load(branch)
            if loaded is None:
                continue
            info = self._info(branch, *loaded)
            if info.merged_at is not None and info.merged_at >= since:
                out.append(info)
        return sorted(out, key=lambda i: (i.merged_at or since, i.number))

    def close_pull_request(self, number: int, comment: str = "") -> None:
        proposal = self._current(number)
        comments = dict(proposal.comments)
        if comment:
            comments["closing"] = comment
        self._update(number, replace(proposal, closed=True, comments=comments), "Close")
