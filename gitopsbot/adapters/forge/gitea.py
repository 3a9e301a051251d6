"""Gitea and Forgejo over REST API v1: pulls, issue comments, statuses, labels, reviews.

Endpoints (under /repos/{owner}/{repo}): pulls (list/create/get/edit), pulls/{n}/reviews,
issues/{n}/comments and issues/comments/{id}, issues/{n}/labels (by id; missing labels are
created first through /labels), statuses/{sha}, collaborators/{login}/permission (who may
give a comment command; the bot's token must be a repository admin to ask).
Auth: ``Authorization: token <token>``.
A duplicate pull request is refused with 409 "pull request already exists for these targets".

Pagination, as a real Gitea 1.27 answers (tests/forge, ``realgitea``): the pull list sends a
Link header; the label and review lists are paginated too (at most ``[api]
MAX_RESPONSE_ITEMS``, 50 by default, a page) but send only X-Total-Count, so those are read
page by page up to that count; an issue's comments are not paginated at all.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, ClassVar

from gitopsbot.adapters.forge.github import GitHubForge
from gitopsbot.core.forge.forge_types import PullRequestInfo

Json = Any
LABEL_COLOR = "#ededed"


class GiteaForge(GitHubForge):
    """Gitea/Forgejo: GitHub's shape (``GitHubForge``) with its own page parameter, no head
    filter on the pull list, its review states, and labels added by id."""

    KIND = "gitea"
    WRITERS: ClassVar[frozenset[str]] = frozenset({"admin", "owner", "write"})
    PAGE: ClassVar[Mapping[str, str | int]] = {"limit": 50}
    # An issue's comment list takes no page or limit (Gitea's API description): all at once.
    COMMENTS_PAGE: ClassVar[Mapping[str, str | int]] = {}
    MERGED_LIST: ClassVar[Mapping[str, str | int]] = {"sort": "recentupdate"}

    def _open_pulls_from(self, branch: str) -> list[PullRequestInfo]:
        # The list has no head filter; filter here (open requests are few).
        params: dict[str, str | int] = {"state": "open", **self.PAGE}
        pulls = self.http.pages(f"{self.repo}/pulls", params)
        return [self._pull(p) for p in pulls if p["head"]["ref"] == branch]

    def _counted_pages(self, path: str) -> Iterator[Json]:
        """A list whose pages carry X-Total-Count but no Link: page after page until the
        count is reached (or a page comes back empty)."""
        page, seen = 1, 0
        while True:
            answer = self.http.request("GET", path, params={**self.PAGE, "page": page})
            items = answer.body if isinstance(answer.body, list) else []
            yield from items
            seen += len(items)
            try:
                total = int(answer.headers.get("x-total-count", ""))
            except ValueError:
                return  # no count: one page is all we can know of
            if not items or seen >= total:
                return
            page += 1

    def _reviews(self, number: int) -> Iterator[Json]:
        return self._counted_pages(f"{self.repo}/pulls/{number}/reviews")

    @staticmethod
    def _verdict(review: Json) -> str | None:
        state = review.get("state")
        if state in ("APPROVED", "REQUEST_CHANGES") and not review.get("dismissed"):
            return str(state)
        return None

    def add_labels(self, number: int, labels: Sequence[str]) -> None:
        if not labels:
            return
        # Every page: a label missed here would be created a second time (Gitea allows two
        # labels of one name), and the request would carry both.
        ids = {lb["name"]: int(lb["id"]) for lb in self._counted_pages(f"{self.repo}/labels")}
        for name in labels:
            if name not in ids:
                created = self.http.send(
                    "POST", f"{self.repo}/labels", {"name": name, "color": LABEL_COLOR}
                )
                ids[name] = int(created.body["id"])
        payload = {"labels": [ids[n] for n in labels]}
        self.http.send("POST", f"{self.repo}/issues/{number}/labels", payload)
