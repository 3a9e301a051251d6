"""Gitea's own API description holds the Gitea provider and the local Gitea forge.

Gitea publishes its REST API as an OpenAPI 3.0 description in its release
(``templates/swagger/v1_openapi3_json.tmpl``, served at run time next to swagger.v1.json);
npm and PyPI ship none, so the description is the one of the release the ``realgitea`` tier
builds from its Go module (tests/realgitea), and these tests run in that tier.

The same provider calls (open a request with labels, the plan comment written then edited
and shrunk, the policy status, the request read with its reviews, the merged-since list, the
comments and who may write, closing) go to the local Gitea forge and to the real Gitea:

* every request the provider sends, to either, matches an operation of the description
  (method, path template, query parameters and body);
* every answer of the local forge validates against that operation's response for its
  status (the real Gitea's answers are the real thing: not checked).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime

import pytest

from gitopsbot.adapters.forge.provider import ForgeProvider
from gitopsbot.core.forge.forge_types import CommitState, CommitStatus, PullRequestDraft
from gitopsbot.sandbox.forges.gitea import GiteaForge as GiteaServer
from tests.forge.forge_harness import TOKEN, FakeClock, make_client
from tests.forge.openapi_contract import Description, Recorder
from tests.forge.realgitea_harness import RealGiteaRepo, RealGiteaSite

pytestmark = [pytest.mark.realgitea, pytest.mark.slow]


@pytest.fixture(scope="module")
def gitea_api(real_gitea_site: RealGiteaSite) -> Description:
    source = real_gitea_site.gitea.gitea_dir / "templates" / "swagger" / "v1_openapi3_json.tmpl"
    # A Go template with two fields: the site's sub-path (none here) and the version.
    text = source.read_text().replace("{{.SwaggerAppSubUrl}}", "")
    text = text.replace("{{.SwaggerAppVer}}", "0")
    return Description(
        "Gitea's API", lambda: json.loads(text), prefix="/api/v1", null_is_unset=True
    )


def _calls(forge: ForgeProvider, grant: Callable[[str], None]) -> None:
    """What the bot asks of a forge, once each."""
    pr = forge.open_or_update_pull_request(
        PullRequestDraft(
            branch="gitopsbot/a",
            base="main",
            title="t",
            body="b",
            marker="a/1",
            labels=("gitopsbot",),
        )
    )
    forge.upsert_comment(pr.number, marker="plan", body="plan one")
    forge.upsert_comment(pr.number, marker="plan", body="x" * 70_000)  # two parts
    forge.upsert_comment(pr.number, marker="plan", body="plan two")  # one again: a delete
    forge.set_status(pr.head_sha, CommitStatus(CommitState.PENDING, "planning"))
    forge.get_pull_request(pr.number)
    forge.list_merged_since(datetime(2026, 1, 1, tzinfo=UTC))
    grant("wendy")
    for comment in forge.list_comments(pr.number):
        forge.may_write(comment)
    forge.close_pull_request(pr.number, "superseded")


def test_the_provider_and_the_local_forge_are_as_gitea_describes(gitea_api: Description) -> None:
    recorder = Recorder()
    with GiteaServer(token=TOKEN, page_size=2) as srv:
        _calls(make_client(srv, FakeClock(), transport=recorder), lambda u: srv.grant(u, "write"))
    assert recorder.exchanges
    problems = gitea_api.exchange_problems(recorder.exchanges)
    assert not problems, "not as Gitea's API description says:\n" + "\n".join(problems)


def test_the_provider_asks_the_real_gitea_as_gitea_describes(
    gitea_api: Description, real_gitea_repo: RealGiteaRepo
) -> None:
    recorder = Recorder(real_gitea_repo.transport())  # the repository's log, kept too
    forge = make_client(real_gitea_repo, FakeClock(), transport=recorder)
    _calls(forge, lambda u: real_gitea_repo.grant(u, "write"))
    assert recorder.exchanges
    problems = gitea_api.exchange_problems(recorder.exchanges, answers=False)
    assert not problems, "not as Gitea's API description says:\n" + "\n".join(problems)
