"""Gitea and Forgejo over REST API v1: pulls, issue comments, statuses, labels, reviews.

Endpoints (under /repos/{owner}/{repo}): pulls (list/create/get/edit), pulls/{n}/reviews,
issues/{n}/comments and issues/comments/{id}, issues/{n}/labels (by id; missing labels are
created first through /labels), statuses/{sha}. Auth: ``Authorization: token <token>``.
A duplicate pull request is refused with 409 "pull request already exists for these targets".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from gitopsbot.adapters.forge.github import GitHubForge
from gitopsbot.core.forge_types import PullRequestInfo

Json = Any
LABEL_COLOR = "#ededed"


class GiteaForge(GitHubForge):
    """Gitea/Forgejo: GitHub's shape (``GitHubForge``) with its own page parameter, no head
    filter on the pull list, its review states, and labels added by id."""

    KIND = "gitea"
    PAGE: ClassVar[Mapping[str, str | int]] = {"limit": 50}
    MERGED_LIST: ClassVar[Mapping[str, str | int]] = {"sort": "recentupdate"}

    def _open_pulls_from(self, branch: str) -> list[PullRequestInfo]:
        # The list has no head filter; filter here (open requests are few).
        params: dict[str, str | int] = {"state": "open", **self.PAGE}
        pulls = self.http.pages(f"{self.repo}/pulls", params)
        return [self._pull(p) for p in pulls if p["head"]["ref"] == branch]

    @staticmethod
    def _verdict(review: Json) -> str | None:
        state = review.get("state")
        if state in ("APPROVED", "REQUEST_CHANGES") and not review.get("dismissed"):
            return str(state)
        return None

    def add_labels(self, number: int, labels: Sequence[str]) -> None:
        if not labels:
            return
        ids = {
            lb["name"]: int(lb["id"])
            for lb in self.http.pages(f"{self.repo}/labels", dict(self.PAGE))
        }
        for name in labels:
            if name not in ids:
                created = self.http.send(
                    "POST", f"{self.repo}/labels", {"name": name, "color": LABEL_COLOR}
                )
                ids[name] = int(created.body["id"])
        payload = {"labels": [ids[n] for n in labels]}
        self.http.send("POST", f"{self.repo}/issues/{number}/labels", payload)
