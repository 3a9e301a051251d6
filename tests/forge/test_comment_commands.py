"""The forge side of comment commands (ports.forge.ReadsComments), from FakeForge, each
local forge and a real Gitea: people's comments listed oldest first with their author and
after a given id, and the forge's own answer to "may this account write?" (GitHub and Gitea
``collaborators/{login}/permission``, GitLab ``members/all/{id}``)."""

from __future__ import annotations

import pytest

from gitopsbot.core.forge.forge_types import PullComment
from gitopsbot.errors import ForgeUnauthorized
from gitopsbot.ports.forge import ReadsComments
from tests.forge.forge_harness import Harness
from tests.forge.test_contract import _open


def test_comments_and_who_may_write(harness: Harness) -> None:
    forge = harness.forge
    assert isinstance(forge, ReadsComments)
    pr = _open(harness)
    forge.upsert_comment(pr.number, marker="plan", body="the plan")
    harness.grant("wendy", "write")
    harness.grant("rita", "read")
    first = harness.say(pr.number, "wendy", "/gitopsbot pause")
    second = harness.say(pr.number, "rita", "/gitopsbot resume")

    listed = forge.list_comments(pr.number)
    people = [(c.id, c.author, c.body) for c in listed if c.author in ("wendy", "rita")]
    assert people == [(first, "wendy", "/gitopsbot pause"), (second, "rita", "/gitopsbot resume")]
    assert [c.id for c in listed] == sorted(c.id for c in listed)
    assert [c.id for c in forge.list_comments(pr.number, after=first)] == [second]

    by = {c.author: c for c in listed}
    assert forge.may_write(by["wendy"]) is True
    assert forge.may_write(by["rita"]) is False
    nobody = PullComment(id=1, author="no-such-user-x", body="", author_id=987654)
    assert forge.may_write(nobody) is False


@pytest.mark.realgitea
def test_gitea_tells_a_collaborators_permission_only_to_an_admin(harness: Harness) -> None:
    if harness.real is None:
        pytest.skip("a real Gitea only")
    pr = _open(harness)
    harness.real.grant("wendy2", "write", bot_admin=False)  # the bot keeps plain write
    said = harness.say(pr.number, "wendy2", "/gitopsbot pause")
    comment = next(c for c in harness.forge.list_comments(pr.number) if c.id == said)
    with pytest.raises(ForgeUnauthorized, match="403"):
        harness.forge.may_write(comment)
