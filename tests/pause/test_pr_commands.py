"""Comment commands (docs/pause.md): ``/gitopsbot pause|resume|approve [pool]`` parsed; through
the reconciler with the in-memory forge, a pause and a resume from comments during a
batched rollout, each acknowledged by a reply and recorded on the state branch; a comment
from an account without write access ignored with a reply; each comment handled once
(a new bot, and a crash between the reply and the record); the approval gate after a
canary batch and after the canary pool."""

from __future__ import annotations

import pytest

from gitopsbot.core.forge import pr_commands
from gitopsbot.core.forge.forge_types import find_marker
from gitopsbot.core.forge.pr_commands import Verb
from gitopsbot.core.records.journal import OperationStatus, PhaseState, StepState
from gitopsbot.errors import FleetError, ForgeUnauthorized, GitUnavailable
from gitopsbot.fleetrepo import load_fleet
from tests.executor.conftest import Env, fleet_files, rollout_yaml
from tests.executor.test_reconciler_upgrade import drive
from tests.fleet.fleet_testing import MemoryTree
from tests.pause.test_pause_git import M, _files

PR = 5


def test_parse() -> None:
    p = pr_commands.parse
    assert p("looks good") is None
    assert p("/gitopsbot pause") == pr_commands.Command(Verb.PAUSE, "", "/gitopsbot pause")
    assert p("thanks\n  /gitopsbot resume b  \nmore").pool == "b"
    assert p("/gitopsbot APPROVE").verb is Verb.APPROVE
    assert p("/gitopsbot deploy").verb is None
    assert p("/gitopsbot pause a b").verb is None
    assert p("/gitopsbotpause") is None and p("please /gitopsbot pause") is None


def _replies(env: Env) -> dict[int, str]:
    """Comment id → the bot's reply to it."""
    out = {}
    for c in env.forge.comments.get(PR, []):
        tag = find_marker(c.body)
        if tag is not None and tag.marker.startswith("cmd-"):
            out[int(tag.marker[4:])] = c.body
    return out


def _rolling_b(env: Env):
    """A batched rollout of pool b (four batches of 25%), seen after its first batch."""
    env.world.nodes["b"] = 4
    env.forge.writers.add("alice")
    rec = env.reconciler()
    rec.reconcile("lab")
    env.merge_pr(PR, "lab: hv:2", _files())
    for _ in range(60):
        rec.reconcile("lab")
        j = rec.store.current("lab")
        if j.phase("pool/b/hypervisor").progress == 25 and env.world.switch("b"):
            return rec
        env.world.tick()
        env.clock.t += M
    raise AssertionError(rec.store.current("lab"))


def test_pause_and_resume_from_comments_during_a_batched_rollout(env: Env) -> None:
    rec = _rolling_b(env)
    said = env.forge.say(PR, "alice", "Hold on, dashboards look odd.\n/gitopsbot pause b")
    rec.reconcile("lab")
    j = rec.store.current("lab")
    assert not env.world.switch("b")
    assert j.holds == {"b": f"paused by @alice (comment {said.id})"}
    assert j.phase("pool/b/hypervisor").state is PhaseState.PAUSED
    assert j.phase("pool/b/hypervisor").paused_by == f"paused by @alice (comment {said.id})"
    assert j.comment_cursor == said.id
    assert j.commands == (f"comment {said.id}: @alice /gitopsbot pause b: paused",)
    assert "@alice: paused pool `b`" in _replies(env)[said.id]

    # Held past maxDuration (10m): nothing moves, nothing halts.
    for _ in range(4):
        env.clock.t += 10 * M
        rec.reconcile("lab")
        env.world.tick()
    j = rec.store.current("lab")
    assert j.status is OperationStatus.RUNNING and j.phase("pool/b/hypervisor").progress == 25

    # A new bot (a restart) does not apply the comment again; a resume lets b go on.
    rec = env.reconciler()
    rec.reconcile("lab")
    assert len(rec.store.current("lab").commands) == 1
    again = env.forge.say(PR, "alice", "/gitopsbot resume")
    rec.reconcile("lab")
    assert env.world.switch("b")
    j = rec.store.current("lab")
    assert j.holds == {} and j.comment_cursor == again.id
    assert _replies(env)[again.id].split("\n")[0] == "@alice: resumed the rollout of every pool."
    done = drive(env, rec)
    assert done.status is OperationStatus.SUCCEEDED, done.failure
    assert len(done.commands) == 2 and len(_replies(env)) == 2


def test_a_comment_from_a_non_writer_is_ignored_with_a_reply(env: Env) -> None:
    rec = _rolling_b(env)
    said = env.forge.say(PR, "mallory", "/gitopsbot pause")
    rec.reconcile("lab")
    j = rec.store.current("lab")
    assert env.world.switch("b") and j.holds == {}
    assert j.phase("pool/b/hypervisor").paused_by == ""
    reply = _replies(env)[said.id]
    assert reply.startswith("@mallory: `/gitopsbot pause` ignored: the forge says they may not")
    assert j.commands == (
        f"comment {said.id}: @mallory /gitopsbot pause: ignored (the forge says they may not "
        "write to this repository)",
    )
    rec.reconcile("lab")
    assert len(_replies(env)) == 1 and len(rec.store.current("lab").commands) == 1


def test_a_crash_between_reply_and_record_replies_once_and_applies_once(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    rec = _rolling_b(env)
    said = env.forge.say(PR, "alice", "/gitopsbot pause b")
    real = type(rec.store).save
    calls = []

    def failing(self, journal, message, **kw):
        if journal.commands and not calls:
            calls.append(message)
            raise GitUnavailable("state branch push: connection refused")
        return real(self, journal, message, **kw)

    monkeypatch.setattr(type(rec.store), "save", failing)
    with pytest.raises(GitUnavailable):
        rec.reconcile("lab")
    assert said.id in _replies(env) and rec.store.current("lab").commands == ()
    rec.reconcile("lab")
    j = rec.store.current("lab")
    assert len(j.commands) == 1 and j.holds.keys() == {"b"} and not env.world.switch("b")
    mine = [c for c in env.forge.comments[PR] if (find_marker(c.body) or None)]
    assert sum(find_marker(c.body).marker == f"cmd-{said.id}" for c in mine) == 1


def test_unknown_verb_and_pool_are_answered(env: Env) -> None:
    rec = _rolling_b(env)
    verb = env.forge.say(PR, "alice", "/gitopsbot deploy")
    pool = env.forge.say(PR, "alice", "/gitopsbot pause zz")
    rec.reconcile("lab")
    assert "is not a command I know" in _replies(env)[verb.id]
    assert "no pool `zz`" in _replies(env)[pool.id]
    assert env.world.switch("b") and rec.store.current("lab").holds == {}


# -- approval --------------------------------------------------------------------------------


def _approval_files(**kw) -> dict[str, str]:
    files = fleet_files("1.0.0", "hv:2", canary=25, max_duration="1h", stall="1h")
    files["clusters/lab/rollout.yaml"] = files["clusters/lab/rollout.yaml"].replace(
        "    canaryBatchPercentage: 25\n",
        "    canaryBatchPercentage: 25\n    requireApproval: canary-batch\n",
    )
    return files


def test_approval_after_the_canary_batch(env: Env) -> None:
    env.world.nodes["a"] = 4
    env.forge.writers.add("alice")
    rec = env.reconciler()
    rec.reconcile("lab")
    env.merge_pr(PR, "lab: hv:2", _approval_files())
    for _ in range(60):
        rec.reconcile("lab")
        env.world.tick()
        env.clock.t += M
        j = rec.store.current("lab")
        if j.phase("pool/a/hypervisor").paused_by:
            break
    step, phase = j.step("pool/a/hypervisor"), j.phase("pool/a/hypervisor")
    assert phase.canary_done and phase.state is PhaseState.PAUSED
    assert step.detail.startswith("paused: awaiting approval: the canary batch of pool a")
    assert "passed verification at 25%" in step.detail
    assert not env.world.switch("a")
    pr_text = "\n".join(c.body for c in env.forge.comments[PR])
    assert "awaiting approval" in pr_text  # the wait shows on the pull request

    # An hour waits: nothing moves (maxDuration 1h is not burnt), a non-writer cannot approve.
    env.clock.t += 60 * M
    bad = env.forge.say(PR, "mallory", "/gitopsbot approve")
    rec.reconcile("lab")
    assert "ignored" in _replies(env)[bad.id] and not env.world.switch("a")
    ok = env.forge.say(PR, "alice", "/gitopsbot approve")
    rec.reconcile("lab")
    assert "approved; going on: the canary batch of pool a" in _replies(env)[ok.id]
    assert env.world.switch("a")
    assert rec.store.current("lab").approved == ("pool/a/hypervisor",)
    done = drive(env, rec)
    assert done.status is OperationStatus.SUCCEEDED, done.failure
    again = env.forge.say(PR, "alice", "/gitopsbot approve")
    assert again.id not in _replies(env)  # the operation ended: comments are not read


def test_approval_after_the_canary_pool(env: Env) -> None:
    env.forge.writers.add("alice")
    files = fleet_files("1.0.0", "hv:2")
    files["clusters/lab/rollout.yaml"] = (
        "canaryPool: a\nrequireApproval: canary-pool\n" + files["clusters/lab/rollout.yaml"]
    )
    rec = env.reconciler()
    rec.reconcile("lab")
    env.merge_pr(PR, "lab: hv:2", files)
    for _ in range(60):
        rec.reconcile("lab")
        env.world.tick()
        env.clock.t += M
        j = rec.store.current("lab")
        if j.step("pool/a/hypervisor").state is StepState.SUCCEEDED:
            break
    for _ in range(3):
        rec.reconcile("lab")
        env.world.tick()
    j = rec.store.current("lab")
    assert j.step("pool/b/hypervisor").state is StepState.PENDING and not env.world.switch("b")
    assert "awaiting approval: the canary pool a is done" in j.phase("pool/b/hypervisor").paused_by
    early = env.forge.say(PR, "alice", "/gitopsbot approve b")
    rec.reconcile("lab")
    assert "nothing awaits approval in pool `b`" in _replies(env)[early.id]
    ok = env.forge.say(PR, "alice", "/gitopsbot approve")
    rec.reconcile("lab")
    assert env.world.switch("b") and "approved" in _replies(env)[ok.id]
    assert drive(env, rec).status is OperationStatus.SUCCEEDED


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            ("  a:\n", "  a:\n    requireApproval: canary-batch\n"),
            "pools.a.requireApproval: 'canary-batch' needs pools.a.canaryBatchPercentage",
        ),
        (
            ("order:", "requireApproval: canary-pool\norder:"),
            "requireApproval: 'canary-pool' needs canaryPool",
        ),
        (
            ("order:", "requireApproval: canary-batch\norder:"),
            "requireApproval: 'canary-batch' is not one of canary-pool",
        ),
    ],
)
def test_require_approval_errors_are_located(edit: tuple[str, str], message: str) -> None:
    files = fleet_files("1.0.0", "hv:1")
    files["clusters/lab/rollout.yaml"] = rollout_yaml().replace(*edit, 1)
    with pytest.raises(FleetError) as info:
        load_fleet(MemoryTree(files))
    assert "clusters/lab/rollout.yaml:" in str(info.value) and message in str(info.value)


def test_a_reply_refused_for_good_does_not_stop_later_commands(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Someone else's comment carries the reply's marker; the forge refuses the edit (403).
    rec = _rolling_b(env)
    first = env.forge.say(PR, "alice", "/gitopsbot pause b")
    real = type(env.forge).upsert_comment

    def refusing(self, number, *, marker, body):
        if marker == f"cmd-{first.id}":
            raise ForgeUnauthorized("PATCH issues/comments/9: 403 Must have admin rights")
        return real(self, number, marker=marker, body=body)

    monkeypatch.setattr(type(env.forge), "upsert_comment", refusing)
    second = env.forge.say(PR, "alice", "/gitopsbot resume b")
    rec.reconcile("lab")
    j = rec.store.current("lab")
    assert j.comment_cursor == second.id and len(j.commands) == 2 and j.holds == {}
    assert first.id not in _replies(env) and second.id in _replies(env)
