"""The pull request of one cluster's drift (docs/drift.md): its branch, marker, title, body and
edits. Pure: a ``DriftReport`` and the cluster's files in, texts out.

Two kinds, chosen in gitopsbot.yaml (``drift.onDrift``):

- ``propose-git`` makes Git match the cluster: release.yaml's chart version, values.yaml's
  non-secret values, rollout.yaml's batch settings, as the cluster has them. What Git cannot
  hold (a secret, switches opened by hand, the CRDs, images set outside the values, a value
  the cluster removed) is listed for a person; nothing secret is written.
- ``propose-reapply`` re-applies Git: the request bumps ``rotation`` in credentials.yaml, the
  existing way to make the bot apply the release again (docs/fleet-repo.md); merging it is
  the team's explicit decision to change the cluster.

Either way the body lists every item of the drift (secret-free: ``DriftItem`` never holds a
secret) and its digest, so a changed drift updates the request. What is pending (a change Git
holds back, a value the bot pinned itself) is listed as such and never edited.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gitopsbot.core.drift.report import ABSENT, DriftItem, DriftReport
from gitopsbot.core.fleet import yamledit
from gitopsbot.core.fleet.secrets import MASK

BRANCH_PREFIX = "gitopsbot-drift/"
CREDENTIALS = "credentials.yaml"


def branch(cluster: str) -> str:
    return f"{BRANCH_PREFIX}{cluster}"


def marker(cluster: str) -> str:
    return f"drift:{cluster}"


@dataclass(frozen=True, slots=True)
class DriftProposal:
    title: str
    body: str
    # Cluster file name (release.yaml, ...) → its new text; only files that change.
    edits: Mapping[str, str]
    message: str


def _holds_mask(value: Any) -> bool:
    if isinstance(value, Mapping):
        return any(_holds_mask(v) for v in value.values())
    if isinstance(value, list):
        return any(_holds_mask(v) for v in value)
    return bool(value == MASK)


def _writable(item: DriftItem) -> bool:
    return (
        bool(item.git_file and item.git_path) and not item.removed and not _holds_mask(item.value)
    )


def git_edits(report: DriftReport, files: Mapping[str, str]) -> dict[str, str]:
    """Each cluster file whose text changes to match the cluster (``files``: name → text)."""
    out: dict[str, str] = {}
    for item in report.items:
        if not _writable(item):
            continue
        text = out.get(item.git_file, files.get(item.git_file, ""))
        out[item.git_file] = yamledit.set_value(text, item.git_path, item.value)
    return {name: text for name, text in out.items() if text != files.get(name, "")}


def reapply_edits(files: Mapping[str, str]) -> dict[str, str]:
    """credentials.yaml with ``rotation`` one higher (written when the cluster has none)."""
    text = files.get(CREDENTIALS, "")
    current = yamledit.get_value(text, "rotation") if text.strip() else None
    rotation = current if isinstance(current, int) and not isinstance(current, bool) else 0
    if not text.strip():
        return {CREDENTIALS: f"rotation: {rotation + 1}\n"}
    return {CREDENTIALS: yamledit.set_value(text, "rotation", rotation + 1)}


def _table(items: tuple[DriftItem, ...]) -> list[str]:
    out = ["| what | where | Git | cluster |", "|---|---|---|---|"]
    for i in items:
        cells = [i.what, i.where, i.desired, i.observed]
        out.append(
            "| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in cells) + " |"
        )
    return out


def proposal(report: DriftReport, files: Mapping[str, str], *, reapply: bool) -> DriftProposal:
    """The request for ``report`` (which has drift)."""
    cluster = report.cluster
    edits = reapply_edits(files) if reapply else git_edits(report, files)
    kind = "re-apply Git" if reapply else "make Git match the cluster"
    lines = [
        f"gitopsbot found that `{cluster}` differs from Git ({len(report.items)} "
        f"{'item' if len(report.items) == 1 else 'items'}):",
        "",
        *_table(report.items),
        "",
    ]
    if report.unchecked:
        lines += ["Not compared: " + "; ".join(report.unchecked) + ".", ""]
    if report.pending:
        # A change Git holds back or a value the bot pinned: shown, never proposed away.
        lines += [
            "Pending, not drift (this request leaves them alone): "
            + "; ".join(p.line() for p in report.pending)
            + ".",
            "",
        ]
    if reapply:
        lines += [
            f"This request would **re-apply Git**: it bumps `rotation` in "
            f"`clusters/{cluster}/{CREDENTIALS}`, and merging it makes the bot apply the "
            "release again from Git (chart, values, secrets, the pinned pool policy), as any "
            "merge does. Close it to keep the cluster as it is.",
        ]
        added = [i.where for i in report.items if i.what == "values" and i.desired == ABSENT]
        if added:
            lines += [
                "",
                "Values the cluster has and Git lacks ("
                + ", ".join(f"`{p}`" for p in added)
                + "): policy rule R8 denies applying Git over them (Helm would reset them). "
                "Add them to values.yaml first, or remove them on the cluster.",
            ]
    else:
        written = [i for i in report.items if _writable(i)]
        kept = [i for i in report.items if not _writable(i)]
        lines += [
            "This request would **make Git match the cluster**"
            + (
                ": " + ", ".join(f"`{i.git_file}` `{i.git_path}`" for i in written) + "."
                if written
                else ": nothing Git holds differs."
            )
        ]
        if kept:
            lines += [
                "",
                "Not written (a person decides: set it in Git, or undo it on the cluster): "
                + "; ".join(f"{i.what} {i.where}" for i in kept)
                + ".",
            ]
        lines += [
            "",
            "Merging applies the edited files like any merge: the release is applied again "
            "with them, and the pool policy pinned.",
        ]
    lines += ["", f"Drift digest: `{report.digest()}`; this request is updated while the drift "
              "changes and closed by the bot when it is gone."]  # fmt: skip
    title = f"Drift on {cluster}: {kind}"
    message = f"{title}\n\n" + "\n".join(f"- {i.line()}" for i in report.items) + "\n"
    return DriftProposal(title, "\n".join(lines) + "\n", edits, message)
