"""The JSON objects of the local GitHub forge, whole, as GitHub's published descriptions require.

GitHub's REST description (``@octokit/openapi``, ``api.github.com.json``) and its webhooks
description (``@octokit/openapi-webhooks``) name the properties every answer and every
delivery has; the tests hold the local forge's answers and webhooks to them
(tests/forge/test_github_openapi.py). Most of those properties are URLs and counters the
bot never reads: they are made up here from the forge's address, the same way every time, so
that a client written against GitHub finds what GitHub would send. What the bot does read
(numbers, refs, shas, bodies, states, logins, times) comes from the forge's state.
"""

from __future__ import annotations

import base64
from typing import Any

Json = Any
ORG_ID = 10_000  # the owner organisation's account id, apart from the users' (1, 2, ...)

# Repository URL templates GitHub lists on every repository object: (property, path suffix).
_REPO_TEMPLATES = (
    ("archive_url", "/{archive_format}{/ref}"),
    ("assignees_url", "/assignees{/user}"),
    ("blobs_url", "/git/blobs{/sha}"),
    ("branches_url", "/branches{/branch}"),
    ("collaborators_url", "/collaborators{/collaborator}"),
    ("comments_url", "/comments{/number}"),
    ("commits_url", "/commits{/sha}"),
    ("compare_url", "/compare/{base}...{head}"),
    ("contents_url", "/contents/{+path}"),
    ("contributors_url", "/contributors"),
    ("deployments_url", "/deployments"),
    ("downloads_url", "/downloads"),
    ("events_url", "/events"),
    ("forks_url", "/forks"),
    ("git_commits_url", "/git/commits{/sha}"),
    ("git_refs_url", "/git/refs{/sha}"),
    ("git_tags_url", "/git/tags{/sha}"),
    ("hooks_url", "/hooks"),
    ("issue_comment_url", "/issues/comments{/number}"),
    ("issue_events_url", "/issues/events{/number}"),
    ("issues_url", "/issues{/number}"),
    ("keys_url", "/keys{/key_id}"),
    ("labels_url", "/labels{/name}"),
    ("languages_url", "/languages"),
    ("merges_url", "/merges"),
    ("milestones_url", "/milestones{/number}"),
    ("notifications_url", "/notifications{?since,all,participating}"),
    ("pulls_url", "/pulls{/number}"),
    ("releases_url", "/releases{/id}"),
    ("stargazers_url", "/stargazers"),
    ("statuses_url", "/statuses/{sha}"),
    ("subscribers_url", "/subscribers"),
    ("subscription_url", "/subscription"),
    ("tags_url", "/tags"),
    ("teams_url", "/teams"),
    ("trees_url", "/git/trees{/sha}"),
)


def node_id(kind: str, number: int) -> str:
    """A global node id in GitHub's legacy shape (base64 of "NN:Kind<id>")."""
    return base64.b64encode(f"0{len(kind)}:{kind}{number}".encode()).decode()


class GitHubShapes:
    """Builds GitHub's objects for one repository served at ``api`` (the API root URL) and
    ``web`` (the site's root URL)."""

    def __init__(self, *, api: str, web: str, owner: str, repo: str) -> None:
        self.api = api
        self.web = web
        self.owner = owner
        self.repo = repo
        self.repo_api = f"{api}/repos/{owner}/{repo}"

    def user(self, login: str, uid: int, *, kind: str = "User") -> Json:
        """A simple-user."""
        api = f"{self.api}/users/{login}"
        return {
            "login": login,
            "id": uid,
            "node_id": node_id(kind, uid),
            "avatar_url": f"{self.web}/avatars/u/{uid}",
            "gravatar_id": "",
            "url": api,
            "html_url": f"{self.web}/{login}",
            "followers_url": f"{api}/followers",
            "following_url": f"{api}/following{{/other_user}}",
            "gists_url": f"{api}/gists{{/gist_id}}",
            "starred_url": f"{api}/starred{{/owner}}{{/repo}}",
            "subscriptions_url": f"{api}/subscriptions",
            "organizations_url": f"{api}/orgs",
            "repos_url": f"{api}/repos",
            "events_url": f"{api}/events{{/privacy}}",
            "received_events_url": f"{api}/received_events",
            "type": kind,
            "site_admin": False,
            "user_view_type": "public",
        }

    def repository(self, *, created: str | None, updated: str | None) -> Json:
        """The repository, as pull requests (``head.repo``, ``base.repo``) and webhooks show it."""
        full = f"{self.owner}/{self.repo}"
        host = self.web.split("://", 1)[-1]
        out: Json = {
            "id": 1,
            "node_id": node_id("Repository", 1),
            "name": self.repo,
            "full_name": full,
            "owner": self.user(self.owner, ORG_ID, kind="Organization"),
            "private": True,
            "html_url": f"{self.web}/{full}",
            "description": None,
            "fork": False,
            "url": self.repo_api,
            "clone_url": f"{self.web}/{full}.git",
            "git_url": f"git://{host}/{full}.git",
            "ssh_url": f"git@{host}:{full}.git",
            "svn_url": f"{self.web}/{full}",
            "mirror_url": None,
            "homepage": None,
            "language": None,
            "default_branch": "main",
            "forks": 0,
            "forks_count": 0,
            "open_issues": 0,
            "open_issues_count": 0,
            "stargazers_count": 0,
            "watchers": 0,
            "watchers_count": 0,
            "size": 0,
            "has_downloads": False,
            "has_issues": True,
            "has_projects": False,
            "has_wiki": False,
            "has_pages": False,
            "archived": False,
            "disabled": False,
            "license": None,
            "pushed_at": updated,
            "created_at": created,
            "updated_at": updated,
        }
        for name, suffix in _REPO_TEMPLATES:
            out[name] = self.repo_api + suffix
        return out

    def links(self, number: int) -> Json:
        """A pull request's ``_links``."""
        issue = f"{self.repo_api}/issues/{number}"
        pull = f"{self.repo_api}/pulls/{number}"
        return {
            "self": {"href": pull},
            "html": {"href": f"{self.web}/{self.owner}/{self.repo}/pull/{number}"},
            "issue": {"href": issue},
            "comments": {"href": f"{issue}/comments"},
            "review_comments": {"href": f"{pull}/comments"},
            "review_comment": {"href": f"{self.repo_api}/pulls/comments{{/number}}"},
            "commits": {"href": f"{pull}/commits"},
            "statuses": {"href": f"{self.repo_api}/statuses/{{sha}}"},
        }

    def pull_urls(self, number: int) -> Json:
        pull = f"{self.repo_api}/pulls/{number}"
        html = f"{self.web}/{self.owner}/{self.repo}/pull/{number}"
        return {
            "url": pull,
            "html_url": html,
            "diff_url": html + ".diff",
            "patch_url": html + ".patch",
            "issue_url": f"{self.repo_api}/issues/{number}",
            "comments_url": f"{self.repo_api}/issues/{number}/comments",
            "commits_url": f"{pull}/commits",
            "review_comments_url": f"{pull}/comments",
            "review_comment_url": f"{self.repo_api}/pulls/comments{{/number}}",
        }

    def label(self, name: str, lid: int) -> Json:
        return {
            "id": lid,
            "node_id": node_id("Label", lid),
            "url": f"{self.repo_api}/labels/{name}",
            "name": name,
            "description": "",  # a pull request's labels have a string here, never null
            "color": "ededed",
            "default": False,
        }
