"""The pass's walk stays down its layers (issue 28 item 1): from ``Reconciler.reconcile`` down to
the executor's steps and the ports, a call goes back up to a higher layer of the bot only a
handful of times per pass: the parts (intake, driving, reverts, held) are objects given the
pass's context, not mixins sharing one ``self``, and this keeps them from growing back into
one another.

A *climb* is a call into a module of the bot ranked above the nearest bot module it was called
from (a lower layer calling back up: a callback, or a part reaching into the pass that owns it).
The walk is traced with ``sys.setprofile`` over a whole upgrade through the executor's fakes and
a real Git repository (``tests/executor/conftest.py``)."""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from types import FrameType
from typing import Any

from gitopsbot.bot.reconciler import Reconciler
from gitopsbot.core.records.journal import OperationKind, OperationStatus
from tests.executor.conftest import Env, fleet_files

# The bot's layers, top first: the pass, its parts, what the parts share, the executor and its
# steps. Modules not listed (core, ports, adapters, the fakes) are not ranked: the walk through
# them is down by construction (core is pure; adapters import no bot module).
RANKS: dict[str, int] = {
    "gitopsbot.bot.reconciler": 0,
    "gitopsbot.bot.intake": 1,
    "gitopsbot.bot.driving": 1,
    "gitopsbot.bot.reverts": 1,
    "gitopsbot.bot.held": 1,
    "gitopsbot.bot.pass_base": 2,
    "gitopsbot.bot.steps": 3,
}
# A handful: what one pass may climb at most. Measured: the driver hands a failure to the
# remediation (``driving.carry_out -> reverts.remediate``) once in the pass that halts, and no
# other pass climbs at all; the mixin pass measured the same at runtime plus one
# (``intake._admit -> driving.backed_up``), each of them a ``self.x`` resolved across five
# classes where it is now a named part's call.
MOST_PER_PASS = 2


def _unit(module: str) -> tuple[str, int] | None:
    """The layer a module belongs to and its rank; the executor's steps are one unit."""
    for prefix, rank in RANKS.items():
        if module == prefix or module.startswith(prefix + "."):
            return prefix, rank
    return None


class Walk:
    """Counts climbs per pass while installed."""

    def __init__(self) -> None:
        self.climbs: Counter[str] = Counter()
        self.passes = 0
        self._units: dict[Any, tuple[str, int] | None] = {}

    def _code_unit(self, frame: FrameType) -> tuple[str, int] | None:
        code = frame.f_code
        if code not in self._units:
            self._units[code] = _unit(frame.f_globals.get("__name__", ""))
        return self._units[code]

    def profile(self, frame: FrameType, event: str, _arg: object) -> None:
        if event != "call":
            return
        callee = self._code_unit(frame)
        if callee is None:
            return
        caller = frame.f_back
        while caller is not None and self._code_unit(caller) is None:
            caller = caller.f_back
        from_unit = None if caller is None else self._code_unit(caller)
        if caller is None or from_unit is None or from_unit[0] == callee[0]:
            return
        # Down is the walk; a call to the same rank (one part into another) or up is a climb.
        if callee[1] <= from_unit[1]:
            where = f"{caller.f_globals['__name__']}.{caller.f_code.co_name}"
            self.climbs[f"{where} -> {frame.f_globals['__name__']}.{frame.f_code.co_name}"] += 1

    @contextmanager
    def traced(self) -> Iterator[None]:
        sys.setprofile(self.profile)
        try:
            yield
        finally:
            sys.setprofile(None)


def _walk(env: Env, rec: Reconciler, walk: Walk, *, until_kind: OperationKind) -> list[int]:
    """Passes (traced) until an operation of ``until_kind`` has ended; the climbs of each."""
    per_pass: list[int] = []
    for _ in range(80):
        before = sum(walk.climbs.values())
        with walk.traced():
            rec.reconcile("lab")
        per_pass.append(sum(walk.climbs.values()) - before)
        env.world.tick()
        env.clock.t += timedelta(minutes=1)
        current = rec.store.current("lab")
        if current is not None and current.kind is until_kind and not current.active:
            return per_pass
    raise AssertionError(f"not ended: {rec.store.current('lab')}")


def _report(walk: Walk) -> str:
    return "; ".join(f"{k} ×{n}" for k, n in walk.climbs.most_common(12))


def test_an_upgrade_walks_down_its_layers(env: Env) -> None:
    rec = env.reconciler()
    rec.reconcile("lab")  # the baseline
    env.merge_pr(7, "lab: chart 1.1.0, hypervisor hv:2", fleet_files("1.1.0", "hv:2"))
    walk = Walk()
    per_pass = _walk(env, rec, walk, until_kind=OperationKind.UPGRADE)
    done = rec.store.current("lab")
    assert done is not None and done.status is OperationStatus.SUCCEEDED
    assert len(done.steps) == 7 and len(per_pass) >= 7  # every step ran in a traced pass
    assert max(per_pass) <= MOST_PER_PASS, _report(walk)


def test_a_halt_its_revert_and_the_rollback_walk_down_their_layers(env: Env) -> None:
    """The remediation path: maxDuration halts the pool (the controller never moves, so only
    the deadline ends the upgrade), the bot commits the revert, the
    rollback runs to the end (parts handing over to one another: intake, driving, reverts)."""
    rec = env.reconciler()
    rec.reconcile("lab")
    env.merge_pr(4, "lab: hv:2", fleet_files("1.0.0", "hv:2", max_duration="3m"))
    walk = Walk()
    per_pass: list[int] = []
    for _ in range(30):
        before = sum(walk.climbs.values())
        with walk.traced():
            rec.reconcile("lab")
        per_pass.append(sum(walk.climbs.values()) - before)
        env.clock.t += timedelta(minutes=1)
        current = rec.store.current("lab")
        if current is not None and current.kind is OperationKind.ROLLBACK:
            break
    per_pass += _walk(env, rec, walk, until_kind=OperationKind.ROLLBACK)
    done = rec.store.current("lab")
    assert done is not None and done.status is OperationStatus.SUCCEEDED, done
    failed = rec.store.history("lab", done.reverts_op or "")
    assert failed is not None and failed.status is OperationStatus.FAILED
    assert max(per_pass) <= MOST_PER_PASS, _report(walk)
