"""Every built-in rule, one case that fires and one that does not; the rule format; acks."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from gitopsbot.core.charts.chart import Chart, ChartIndex, ChartVersion
from gitopsbot.core.charts.observed import DeployedState
from gitopsbot.core.fleet.model import ClusterSpec, Component, Environment
from gitopsbot.core.planning.plan import make_plan
from gitopsbot.core.policy import (
    Decision,
    Outcome,
    PolicyInput,
    Rule,
    Severity,
    decide,
    evaluate,
    load_rules,
    parse_rules,
)
from gitopsbot.errors import FleetError
from tests.core.plan_builders import (
    cluster,
    crd_text,
    default_chart_values,
    desired_values,
    pool,
    small_chart,
)

CANARY = "canary-Zq8xW2pL5n"
OLD = small_chart("1.8.0", "2.13.0", values=default_chart_values("2.13.0"))
NEW = small_chart("1.8.7", "2.17.0")


def index_of(*versions: str) -> ChartIndex:
    return ChartIndex(
        {
            "tensor-fusion": tuple(
                ChartVersion("tensor-fusion", v, "2.17.0", "", "", ()) for v in versions
            )
        }
    )


@dataclass
class Case:
    rule: str
    fires: bool
    desired: ClusterSpec = field(default_factory=cluster)
    deployed_values: dict[str, Any] | None = None
    deployed_chart: Chart | None = OLD
    target: Chart = NEW
    index: ChartIndex | None = None
    deployed_app: str = ""
    expect: Outcome | None = None  # outcome when it fires (default from severity)


def deployed_for(c: Case) -> DeployedState | None:
    if c.deployed_chart is None:
        return None
    values = c.deployed_values if c.deployed_values is not None else dict(c.desired.values)
    return DeployedState(
        chart_version=c.deployed_chart.version,
        app_version=c.deployed_app or c.deployed_chart.app_version,
        values=values,
        revision=4,
    )


HV = "tensorfusion/tensor-fusion-hypervisor:"
PROD = Environment.PRODUCTION
R8_DROPPED = desired_values(alert={"enabled": False})
PORT_OLD = desired_values(
    cluster={
        "hypervisorImage": HV + "2.15.0",
        "pool": {"componentConfig": {"hypervisor": {"portNumber": 8000}}},
    }
)
PORT_NEW = desired_values(
    cluster={
        "hypervisorImage": HV + "2.15.0",
        "pool": {"componentConfig": {"hypervisor": {"portNumber": 8001}}},
    }
)
SCHEMA = (
    '{"type": "object", "properties": {"controller": {"type": "object", "properties": '
    '{"replicaCount": {"type": "integer", "minimum": 1}}}}}'
)
V1_V2 = crd_text(versions=(("v1", True, True), ("v2", True, False)))

CASES = [
    # R2: the app major decides (F5), not the chart's
    Case("R2", True, deployed_chart=small_chart("1.7.5", "1.48.6")),
    Case("R2", False),
    # R4: hypervisor image explicit, and follows when the chart default moves
    Case("R4", True, desired=cluster(values={"controller": {"replicaCount": 2}})),
    Case(
        "R4",
        True,
        deployed_chart=small_chart(
            "1.8.0",
            "2.13.0",
            values={**default_chart_values(), "cluster": {"hypervisorImage": HV + "2.13.0"}},
        ),
    ),
    Case(
        "R4",
        False,
        desired=cluster(values=desired_values(cluster={"hypervisorImage": HV + "2.16.0"})),
        deployed_values=desired_values(),
    ),
    Case(
        "R4",
        True,
        desired=cluster(acks={"R4": "2.15.0 is certified"}),
        deployed_chart=small_chart(
            "1.8.0",
            "2.13.0",
            values={**default_chart_values(), "cluster": {"hypervisorImage": HV + "2.13.0"}},
        ),
        expect=Outcome.ACKNOWLEDGED,
    ),
    # R4 table: a pin that stays put while the default moved fires only when it differs
    # from the new default (2.15.0 pinned, 1.8.0 → 1.8.7 whose default is 2.15.0: silent).
    Case(
        "R4",
        False,
        deployed_chart=small_chart("1.8.0", "2.13.0", values=default_chart_values("2.13.0")),
        target=small_chart("1.8.7", "2.15.0", values=default_chart_values("2.15.0")),
    ),
    Case(
        "R4",
        True,
        deployed_chart=small_chart("1.8.0", "2.13.0", values=default_chart_values("2.13.0")),
        target=small_chart("1.8.7", "2.16.0", values=default_chart_values("2.16.0")),
    ),
    # R5: two controller replicas in production only
    Case(
        "R5",
        True,
        desired=cluster(environment=PROD, values=desired_values(controller={"replicaCount": 1})),
    ),
    Case(
        "R5",
        True,
        desired=cluster(environment=PROD, values={"cluster": {"hypervisorImage": HV + "2.15.0"}}),
    ),  # chart default 1 applies
    Case("R5", False, desired=cluster(environment=PROD)),
    Case("R5", False, desired=cluster(values=desired_values(controller={"replicaCount": 1}))),
    # R8: keys the release had must stay
    Case("R8", True, deployed_values=R8_DROPPED),
    Case("R8", False, deployed_values=desired_values()),
    Case("R8", False, deployed_values=desired_values(agent={"enrollToken": CANARY})),
    # R13: autoUpdateClient needs an acknowledgement
    Case("R13", True, desired=cluster(pools=(pool("p", auto_update_client=True),))),
    Case(
        "R13",
        True,
        desired=cluster(
            pools=(pool("p", auto_update_client=True),), acks={"R13": "apps are Deployments"}
        ),
        expect=Outcome.ACKNOWLEDGED,
    ),
    Case("R13", False),
    # R23: portNumber changes with a version change
    Case("R23", True, desired=cluster(values=PORT_NEW), deployed_values=PORT_OLD),
    Case(
        "R23", False, desired=cluster(values=PORT_NEW), deployed_values=PORT_OLD, deployed_chart=NEW
    ),
    Case("R23", False, desired=cluster(values=PORT_OLD), deployed_values=PORT_OLD),
    # R24: config-only change → restart (warn)
    Case(
        "R24",
        True,
        desired=cluster(values=desired_values(dynamicConfig={"metricsTTL": "7d"})),
        deployed_values=desired_values(),
        deployed_chart=NEW,
    ),
    Case(
        "R24",
        False,
        desired=cluster(values=desired_values(dynamicConfig={"metricsTTL": "7d"})),
        deployed_values=desired_values(),
    ),  # chart upgrade moves the controller image
    # F3: a phase waits on a switched-off component
    Case(
        "F3",
        True,
        desired=cluster(pools=(pool("p", phases=(Component.HYPERVISOR, Component.WORKER)),)),
    ),
    Case(
        "F3",
        False,
        desired=cluster(
            pools=(
                pool("p", auto_update_worker=True, phases=(Component.HYPERVISOR, Component.WORKER)),
            )
        ),
    ),
    # F5: lower appVersion
    Case("F5", True, deployed_app="2.17.0", target=small_chart("1.8.6", "2.16.3")),
    Case("F5", False),
    # CRDs dropping a served version
    Case(
        "CRD-VERSION-DROP",
        True,
        deployed_chart=small_chart("1.8.0", "2.13.0", crds={"a.yaml": V1_V2}),
    ),
    Case("CRD-VERSION-DROP", False),
    # batchPercentage 100 in production
    Case(
        "BATCH-100-PROD",
        True,
        desired=cluster(environment=PROD, pools=(pool("p", batch_percentage=100),)),
    ),
    Case("BATCH-100-PROD", False, desired=cluster(environment=PROD)),
    Case("BATCH-100-PROD", False, desired=cluster(pools=(pool("p", batch_percentage=100),))),
    # target chart version absent from the index
    Case("CHART-NOT-IN-INDEX", True, index=index_of("1.8.6", "1.8.5")),
    Case("CHART-NOT-IN-INDEX", False, index=index_of("1.8.7")),
    Case("CHART-NOT-IN-INDEX", False, index=None),
    # values.schema.json
    Case(
        "VALUES-SCHEMA",
        True,
        target=small_chart(schema=SCHEMA),
        desired=cluster(values=desired_values(controller={"replicaCount": 0})),
    ),
    Case("VALUES-SCHEMA", False, target=small_chart(schema=SCHEMA)),
    # a values key the chart does not know (no schema: judged against the chart defaults)
    Case(
        "VALUES-UNKNOWN-KEY",
        True,
        desired=cluster(values={**desired_values(), "controller": {"replicaCnt": 2}}),
    ),
    Case("VALUES-UNKNOWN-KEY", False),
    Case(
        "VALUES-UNKNOWN-KEY",
        True,  # a key neither the defaults nor the schema know
        target=small_chart(schema=SCHEMA),
        desired=cluster(values={**desired_values(), "controller": {"replicaCnt": 2}}),
    ),
    Case(
        "VALUES-UNKNOWN-KEY",
        False,  # the schema lists it, though the defaults lack it
        target=small_chart(
            values={"controller": {"replicaCount": 1}},
            schema='{"type": "object", "properties": {"controller": {}, "cluster": {}, '
            '"dynamicConfig": {}}}',
        ),
    ),
    # secret literals in values.yaml
    Case(
        "SECRET-LITERAL",
        True,
        desired=cluster(values=desired_values(greptime={"password": CANARY})),
    ),
    Case(
        "SECRET-LITERAL", False, desired=cluster(values=desired_values(greptime={"password": ""}))
    ),
]


def _id(c: Case) -> str:
    return f"{c.rule}-{'fires' if c.fires else 'quiet'}"


@pytest.mark.parametrize("case", CASES, ids=[f"{_id(c)}-{i}" for i, c in enumerate(CASES)])
def test_builtin_rule(case: Case, builtin_rules: tuple[Rule, ...]) -> None:
    plan = make_plan(
        deployed=deployed_for(case),
        desired=case.desired,
        target_chart=case.target,
        deployed_chart=case.deployed_chart,
        index=case.index,
        rules=builtin_rules,
    )
    mine = [v for v in plan.verdicts if v.rule_id == case.rule]
    assert bool(mine) is case.fires, plan.verdicts
    rule = next(r for r in builtin_rules if r.id == case.rule)
    for v in mine:
        default = {
            Severity.DENY: Outcome.DENIED,
            Severity.WARN: Outcome.WARNED,
            Severity.ACKNOWLEDGE: Outcome.NEEDS_ACK,
        }[rule.severity]
        assert v.outcome == (case.expect or default)
        assert v.procedure and v.message
        assert CANARY not in v.message


def test_verdicts_are_located() -> None:
    from gitopsbot.core.fleet.model import Location

    rules = parse_rules(
        "rules:\n"
        "  - {id: A, severity: deny, check: {kind: controller_replicas_below, min: 3}}\n"
        "  - {id: B, severity: deny, check: {kind: phase_without_switch}}\n"
        "  - {id: C, severity: warn, check: {kind: path, path: 'a.b[0].c', op: exists}}\n",
        source="t.yaml",
    )
    spec = replace(
        cluster(
            values={"controller": {"replicaCount": 2}, "a": {"b": [{"c": 1}]}},
            pools=(pool("gpu", phases=(Component.WORKER,)),),
        ),
        values_locations={
            "controller.replicaCount": Location("clusters/c1/values.yaml", 3, 3),
            "a.b": Location("clusters/c1/values.yaml", 9, 3),
        },
        locations={"rollout.yaml:pools.gpu.phases": Location("clusters/c1/rollout.yaml", 7, 5)},
    )
    got = {v.rule_id: v.location for v in evaluate(rules, PolicyInput(cluster=spec))}
    assert got == {
        "A": Location("clusters/c1/values.yaml", 3, 3),
        "B": Location("clusters/c1/rollout.yaml", 7, 5),
        "C": Location("clusters/c1/values.yaml", 9, 3),  # nearest written ancestor
    }


def test_an_unknown_values_key_is_named_with_the_nearest_known_one() -> None:
    rules = parse_rules(
        "rules:\n  - {id: U, severity: warn, check: {kind: values_unknown_keys}}\n", source="t"
    )
    spec = cluster(values={**desired_values(), "controller": {"replicaCnt": 2}})
    found = evaluate(rules, PolicyInput(cluster=spec, target_chart=small_chart()))
    assert [v.message for v in found] == [
        "controller.replicaCnt: the chart has no such key under controller "
        "(did you mean 'replicaCount'?)"
    ]


def test_every_builtin_rule_has_cases(builtin_rules: tuple[Rule, ...]) -> None:
    fired = {c.rule for c in CASES if c.fires}
    quiet = {c.rule for c in CASES if not c.fires}
    ids = {r.id for r in builtin_rules}
    assert ids == fired == quiet


def test_r2_points_to_the_guide(builtin_rules: tuple[Rule, ...]) -> None:
    r2 = next(r for r in builtin_rules if r.id == "R2")
    assert "v1-to-v2" in r2.link and r2.severity == Severity.DENY


def test_deny_wins_over_acknowledgement() -> None:
    rules = parse_rules(
        """
rules:
  - {id: A, severity: deny, check: {kind: path, path: x, op: exists}}
  - {id: B, severity: acknowledge, check: {kind: path, path: x, op: exists}}
""",
        source="t.yaml",
    )
    spec = cluster(values={"x": 1}, acks={"A": "please", "B": "fine"})
    verdicts = evaluate(rules, PolicyInput(cluster=spec))
    assert [v.outcome for v in verdicts] == [Outcome.DENIED, Outcome.ACKNOWLEDGED]
    assert decide(verdicts) == Decision.DENIED
    assert decide(verdicts[1:]) == Decision.ALLOWED
    assert (
        decide(
            evaluate(
                rules[1:],
                PolicyInput(
                    cluster=replace(spec, rollout=replace(spec.rollout, acknowledgements={}))
                ),
            )
        )
        == Decision.NEEDS_ACK
    )


@pytest.mark.parametrize(
    ("op", "value", "values", "fires"),
    [
        ("eq", 2, {"a": {"b": 2}}, True),
        ("eq", 2, {"a": {"b": 3}}, False),
        ("ne", 2, {"a": {"b": 3}}, True),
        ("lt", 3, {"a": {"b": 2}}, True),
        ("lt", 3, {"a": {"b": 3}}, False),
        ("gt", 3, {"a": {"b": 4}}, True),
        ("gt", 3, {"a": {"b": "x"}}, False),  # incomparable: does not fire
        ("exists", None, {"a": {"b": None}}, True),
        ("exists", None, {"a": {}}, False),
        ("absent", None, {"a": {}}, True),
        ("absent", None, {"a": {"b": 1}}, False),
    ],
)
def test_path_rule_ops(op: str, value: Any, values: dict[str, Any], fires: bool) -> None:
    rules = parse_rules(
        f"rules:\n  - id: T\n    severity: warn\n    check: {{kind: path, path: a.b, op: {op}"
        + (f", value: {value}" if value is not None else "")
        + "}\n",
        source="team.yaml",
    )
    assert bool(evaluate(rules, PolicyInput(cluster=cluster(values=values)))) is fires


def test_path_rule_changed_and_environments() -> None:
    rules = parse_rules(
        "- id: T\n  severity: deny\n  environments: [production]\n"
        "  check: {kind: path, path: dynamicConfig, op: changed}\n",
        source="team.yaml",
    )
    base = cluster(environment=PROD, values=desired_values(dynamicConfig={"x": 2}))
    deployed = DeployedState("1.8.7", "2.17.0", desired_values())
    plan = make_plan(
        deployed=deployed,
        desired=base,
        target_chart=NEW,
        deployed_chart=NEW,
        index=None,
        rules=rules,
    )
    assert [v.rule_id for v in plan.verdicts] == ["T"]
    staging = replace(base, environment=Environment.STAGING)
    plan = make_plan(
        deployed=deployed,
        desired=staging,
        target_chart=NEW,
        deployed_chart=NEW,
        index=None,
        rules=rules,
    )
    assert plan.verdicts == ()


@pytest.mark.parametrize(
    ("text", "where", "fragment"),
    [
        ("rules: [", "t.yaml:1:", "malformed YAML"),
        ("rules: {}\n", "t.yaml:1:1", "'rules' list"),
        (
            "rules:\n  - id: A\n    severity: deny\n    chek: {kind: path}\n",
            "t.yaml:4:5",
            "did you mean 'check'",
        ),
        (
            "rules:\n  - id: A\n    severity: block\n    check: {kind: path}\n",
            "t.yaml:3:5",
            "unknown severity",
        ),
        (
            "rules:\n  - id: A\n    severity: deny\n    check: {kind: app_major_chang}\n",
            "t.yaml:4:13",
            "did you mean 'app_major_change'",
        ),
        (
            "rules:\n  - id: A\n    severity: deny\n    check: {kind: path, path: a, op: lte}\n",
            "t.yaml:4:",
            "unknown op",
        ),
        (
            "rules:\n  - id: A\n    severity: deny\n    check: {kind: controller_replicas_below, "
            "minimum: 2}\n",
            "t.yaml:4:",
            "did you mean 'min'",
        ),
        ("rules:\n  - id: A\n    severity: deny\n", "t.yaml:2:", "rules[0].check: missing"),
        (
            "rules:\n  - {id: A, severity: warn, check: {kind: phase_without_switch}}\n"
            "  - {id: A, severity: warn, check: {kind: phase_without_switch}}\n",
            "t.yaml:3",
            "duplicate rule id",
        ),
        (
            "rules:\n  - id: A\n    id: B\n    severity: warn\n    check: {kind: path}\n",
            "t.yaml:",
            "duplicate",
        ),
        ("other: 1\nrules: []\n", "t.yaml:1:1", "other: unknown key"),
    ],
)
def test_bad_rule_documents(text: str, where: str, fragment: str) -> None:
    with pytest.raises(FleetError) as info:
        parse_rules(text, source="t.yaml")
    message = str(info.value)
    assert where in message and fragment in message, message


def test_team_rule_cannot_redefine_builtin() -> None:
    builtin = "rules:\n  - {id: R5, severity: deny, check: {kind: phase_without_switch}}\n"
    team = "rules:\n  - {id: R5, severity: warn, check: {kind: phase_without_switch}}\n"
    with pytest.raises(FleetError, match=r"policies/team\.yaml:2:.*already defined"):
        load_rules([("builtin.yaml", builtin), ("policies/team.yaml", team)])
