"""The REST API GitHub has and Gitea copies: one route table for the two local forges.

Gitea's API v1 follows GitHub's below ``/repos/{owner}/{repo}``: the same paths for pull
requests, their merge, reviews, issue comments, labels, commit statuses and a collaborator's
permission (Gitea merges with POST where GitHub PUTs). The handlers are each forge's dialect
(github.py, gitea.py): its JSON shapes, its refusals, its status codes.
"""

from __future__ import annotations

from gitopsbot.sandbox.forges.base import LocalForge
from gitopsbot.sandbox.forges.model import Reply, Request


class GitHubLikeForge(LocalForge):
    """A local forge with GitHub's REST paths; a subclass answers them in its dialect."""

    merge_verb = "PUT"  # of ``/pulls/{n}/merge``

    def add_routes(self) -> None:
        repo = rf"/repos/{self.owner}/{self.repo}"
        self.route("GET", repo + r"/pulls", self.list_pulls)
        self.route("POST", repo + r"/pulls", self.create_pull)
        self.route("GET", repo + r"/pulls/(\d+)", self.get_pull)
        self.route("PATCH", repo + r"/pulls/(\d+)", self.update_pull)
        self.route(self.merge_verb, repo + r"/pulls/(\d+)/merge", self.merge_route)
        self.route("GET", repo + r"/pulls/(\d+)/merge", self.merged_check)
        self.route("GET", repo + r"/pulls/(\d+)/reviews", self.list_reviews)
        self.route("GET", repo + r"/issues/(\d+)/comments", self.list_comments)
        self.route("POST", repo + r"/issues/(\d+)/comments", self.create_comment)
        self.route("PATCH", repo + r"/issues/comments/(\d+)", self.update_comment)
        self.route("DELETE", repo + r"/issues/comments/(\d+)", self.delete_comment)
        self.route("POST", repo + r"/issues/(\d+)/labels", self.add_labels)
        self.route("POST", repo + r"/statuses/([0-9a-f]{7,64})", self.create_status)
        self.route("GET", repo + r"/commits/([^/]+)/statuses", self.list_statuses)
        self.route("GET", repo + r"/collaborators/([^/]+)/permission", self.permission)

    # -- the dialect's handlers (``merged_check`` and the comment and status lists are base.py's)
    def list_pulls(self, req: Request) -> Reply:
        raise NotImplementedError

    def create_pull(self, req: Request) -> Reply:
        raise NotImplementedError

    def get_pull(self, req: Request) -> Reply:
        raise NotImplementedError

    def update_pull(self, req: Request) -> Reply:
        raise NotImplementedError

    def merge_route(self, req: Request) -> Reply:
        raise NotImplementedError

    def list_reviews(self, req: Request) -> Reply:
        raise NotImplementedError

    def add_labels(self, req: Request) -> Reply:
        raise NotImplementedError

    def create_status(self, req: Request) -> Reply:
        raise NotImplementedError

    def permission(self, req: Request) -> Reply:
        raise NotImplementedError
