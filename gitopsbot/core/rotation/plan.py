"""A rotation's part of the plan (core.rotation): the ROTATION-ALONE verdict when a rotated
credential rides on other changes, and the steps of a rotation with which components restart
and what a running workload feels (R17-R20)."""

from __future__ import annotations

from gitopsbot.core.charts.values_diff import ValuesDiff, leaf_paths
from gitopsbot.core.fleet.model import ClusterSpec
from gitopsbot.core.fleet.secrets import join_path
from gitopsbot.core.policy import Verdict
from gitopsbot.core.policy.code_rules import ROTATION_ALONE
from gitopsbot.core.records.plan_steps import IMPACT, Step, StepKind
from gitopsbot.core.rotation import credentials as rotation


def rotation_alone(
    rotated: frozenset[rotation.Credential],
    diff: ValuesDiff,
    desired: ClusterSpec,
    chart_changed: bool,
) -> Verdict | None:
    """ROTATION-ALONE: a rotation must not ride on other changes (core.rotation)."""
    secret = [
        *desired.credentials.secret_paths,
        *(r.values_path for r in desired.credentials.secrets),
    ]

    def is_secret(path: str) -> bool:
        return any(path == p or path.startswith(p + ".") for p in secret)

    others: set[str] = set()
    for change in diff.changes:
        # A subtree added or removed whole counts by its leaves: ``agent`` appearing with
        # only ``agent.enrollToken`` in it is the rotated secret, not another change.
        for side in (change.before, change.after):
            for leaf in leaf_paths(side, change.parts) if side is not None else ():
                if not is_secret(join_path(leaf)):
                    others.add(change.path)
    problem = rotation.alone_problem(rotated, chart_changed=chart_changed, values_changed=others)
    if not problem:
        return None
    return ROTATION_ALONE.deny(problem, rotation.credentials_location(desired.locations, rotated))


def rotation_steps(desired: ClusterSpec, rotated: frozenset[rotation.Credential]) -> list[Step]:
    """The plan of a rotation (core.rotation): which components restart, and what a running
    workload feels (R17-R20)."""
    rel = desired.release
    controller = f"deploy/{rel.release_name}-controller"
    imp = rotation.IMPACT
    steps = [
        Step(
            StepKind.BACKUP,
            "Back up the release values and the TensorFusion objects",
            "R6",
            IMPACT["backup"],
        )
    ]
    if rotation.needs_helm_upgrade(rotated):
        what = [
            p
            for c in rotation.ordered(rotated)
            if c is not rotation.Credential.VENDOR_KEYS
            for p in rotation.PATHS[c]
        ]
        steps.append(
            Step(
                StepKind.HELM_UPGRADE,
                f"helm upgrade {rel.release_name} --version {rel.version} -n {rel.namespace} with "
                + (
                    f"the whole values file and the new {', '.join(what)} from its source"
                    if what
                    else "the whole values file, as Git has it (the vendor keys are not values)"
                ),
                "R18"
                if rotation.Credential.AGENT_TOKEN in rotated
                else "R20"
                if rotation.Credential.GREPTIME_PASSWORD in rotated
                else "R17",
                imp["helm-upgrade"],
            )
        )
    if rotation.Credential.VENDOR_KEYS in rotated:
        steps.append(
            Step(
                StepKind.VENDOR_SECRET,
                f"Replace Secret {rel.namespace}/{rotation.VENDOR_SECRET} (keys ak, sk) "
                "server-side from the referenced source; the chart writes it only when absent",
                "R19",
                imp["vendor-secret"],
            )
        )
    if rotation.needs_controller_restart(rotated):
        steps.append(
            Step(
                StepKind.CONTROLLER_RESTART,
                f"rollout restart {controller} so it reads the new credential",
                "R19"
                if rotation.Credential.VENDOR_KEYS in rotated
                else "R18"
                if rotation.Credential.AGENT_TOKEN in rotated
                and rotation.Credential.GREPTIME_PASSWORD not in rotated
                else "R20",
                imp["controller-restart"],
            )
        )
    steps.append(
        Step(
            StepKind.CONTROLLER_READY,
            f"Wait for {controller} to be rolled out "
            f"(timeout {desired.rollout.controller_ready_timeout_seconds}s)",
            "R8",
            IMPACT["controller-ready"],
        )
    )
    if rotation.Credential.AGENT_TOKEN in rotated:
        steps.append(
            Step(
                StepKind.AGENT_RECONNECT,
                f"Check the {rotation.AGENT_CONTAINER} log reports a connection to the console "
                f"(fails after {desired.credentials.agent_reconnect_timeout_seconds}s)",
                "R18",
                imp["agent-reconnect"],
            )
        )
    if rotation.Credential.GREPTIME_PASSWORD in rotated:
        for pool in desired.rollout.ordered_pools():
            steps.append(
                Step(
                    StepKind.HYPERVISOR_RESTART,
                    f"Delete pool {pool.name}'s hypervisor pods in batches of "
                    f"{pool.batch_percentage}% inside its window, if its vector sidecar is on "
                    "(the controller recreates them; skipped when off)",
                    "R20",
                    imp["hypervisor-restart"],
                    pool=pool.name,
                )
            )
    steps.append(
        Step(
            StepKind.VERIFY,
            "Verify the TensorFusionCluster, pools and nodes",
            "R15",
            IMPACT["verify"],
        )
    )
    return steps
