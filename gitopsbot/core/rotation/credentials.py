"""Credential rotation (R17-R20): which credentials a change rotates, and what rotating each
one takes.

A rotation is an operation of its own (``OperationKind.ROTATION``). It starts when a change
of ``clusters/<name>/credentials.yaml`` points the reference of one of the chart's three
credentials elsewhere, or changes ``rotation`` while one is referenced (``rotated``). The
material is never in Git: the bot reads it from the referenced source at apply time, as for
any helm upgrade.

- agent token (``agent.enrollToken``, R18): helm upgrade with the full values and the new
  token, a controller restart (see ``needs_controller_restart``), then a check that the
  ``cluster-agent`` container reconnected (core.agent_reconnect).
- cloud vendor keys (``cloudVendorCredentials.accessKey``/``secretKey``, R19): the chart
  writes Secret ``tf-cloud-vendor-credentials`` only when it is absent, so after the helm
  upgrade every rotation does (see ``needs_helm_upgrade``) the bot replaces it server-side
  (keys ``ak``, ``sk``), then restarts the controller and waits for its rollout.
- GreptimeDB password (``greptime.password``, R20): helm upgrade (the chart re-renders its
  Secret and the vector ConfigMap), controller restart, then the hypervisor pods of pools with
  the vector sidecar on are deleted in batches under each pool's window and batch policy; the
  controller recreates them (core.hypervisor_restart).

A change that rotates a credential and also changes the chart version or the values is
refused (ROTATION-ALONE): the two would share one operation whose failure could not be told
apart, and a rollback of the upgrade would put back a credential the vendor may already
have revoked. Split it. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from enum import StrEnum

from gitopsbot.core.fleet.model import CredentialsSpec, Location, SecretRef
from gitopsbot.core.policy.code_rules import ROTATION_ALONE


class Credential(StrEnum):
    AGENT_TOKEN = "agent-token"
    VENDOR_KEYS = "vendor-keys"
    GREPTIME_PASSWORD = "greptime-password"


# The values paths of each credential (tensorfusion-facts §1.5).
PATHS: Mapping[Credential, tuple[str, ...]] = {
    Credential.AGENT_TOKEN: ("agent.enrollToken",),
    Credential.VENDOR_KEYS: (
        "cloudVendorCredentials.accessKey",
        "cloudVendorCredentials.secretKey",
    ),
    Credential.GREPTIME_PASSWORD: ("greptime.password",),
}
# The order the steps take: the vendor Secret before the controller restart that reads it.
ORDER: tuple[Credential, ...] = (
    Credential.AGENT_TOKEN,
    Credential.GREPTIME_PASSWORD,
    Credential.VENDOR_KEYS,
)
RULES: Mapping[Credential, str] = {
    Credential.AGENT_TOKEN: "R18",
    Credential.VENDOR_KEYS: "R19",
    Credential.GREPTIME_PASSWORD: "R20",
}
# R19: the Secret the chart creates only when absent, and its keys per values path.
VENDOR_SECRET = "tf-cloud-vendor-credentials"
VENDOR_SECRET_KEYS: Mapping[str, str] = {
    "cloudVendorCredentials.accessKey": "ak",
    "cloudVendorCredentials.secretKey": "sk",
}
AGENT_CONTAINER = "cluster-agent"
ALONE_RULE = ROTATION_ALONE.id
ALONE_NAME = ROTATION_ALONE.name

# What a running workload feels, per step (R17-R20), for the plan's impact column.
IMPACT: Mapping[str, str] = {
    "helm-upgrade": (
        "the controller pod is replaced (its credential env or Secret changes); running GPU "
        "workloads keep running; while no controller replica is available, new "
        '`tensor-fusion.ai/enabled: "true"` pods wait'
    ),
    "vendor-secret": "none: the Secret is replaced; the controller reads it after its restart",
    "controller-restart": (
        "the controller restarts: scheduling and node provisioning pause until it is ready; "
        "running GPU workloads keep running"
    ),
    "agent-reconnect": (
        "none: reads the cluster-agent log; the console shows the cluster offline until the "
        "agent reconnects"
    ),
    "hypervisor-restart": (
        "on each node of a batch the hypervisor restarts: running GPU pods keep their "
        "processes, remote sessions through that node's hypervisor reconnect, and the node "
        "takes no new GPU work until the new hypervisor is ready"
    ),
}


def _refs(spec: CredentialsSpec) -> dict[str, SecretRef]:
    return {r.values_path: r for r in spec.secrets}


def referenced(spec: CredentialsSpec) -> frozenset[Credential]:
    """The chart credentials ``spec`` references (every path of it)."""
    refs = _refs(spec)
    return frozenset(c for c in Credential if all(p in refs for p in PATHS[c]))


def rotated(before: CredentialsSpec | None, after: CredentialsSpec) -> frozenset[Credential]:
    """The credentials moving from ``before`` (the last applied credentials.yaml; None when
    unknown, e.g. nothing deployed) to ``after`` rotate: a credential referenced in both whose
    reference changed, or every credential ``after`` references when ``rotation`` changed (up
    as a person bumps it, or down as a revert of that bump puts it back: either way the values
    at the sources are read again).

    A reference added without a change of ``rotation`` is adoption, not a rotation: a team
    moving a value it already has into credentials.yaml, often with an upgrade; that change's
    helm upgrade merges the value in. A removed reference rotates nothing either (the value
    goes; helm applies that)."""
    if before is None:
        return frozenset()
    old, new = _refs(before), _refs(after)
    bumped = after.rotation != before.rotation
    had = referenced(before)
    found: set[Credential] = set()
    for credential in referenced(after):
        changed = credential in had and any(old[p] != new[p] for p in PATHS[credential])
        if bumped or changed:
            found.add(credential)
    return frozenset(found)


def ordered(credentials: Collection[Credential]) -> tuple[Credential, ...]:
    return tuple(c for c in ORDER if c in credentials)


def needs_helm_upgrade(credentials: Collection[Credential]) -> bool:
    """Every rotation applies the release again. R18 and R20 need it (the chart renders those
    credentials from the values); for R19 alone it changes nothing the chart owns (the Secret
    is the bot's, written after), but ``rotation``'s meaning stays one thing: apply the release
    from Git again with fresh secrets (drift's propose-reapply bumps it for that)."""
    return bool(credentials)


def needs_controller_restart(credentials: Collection[Credential]) -> bool:
    """Every rotation restarts the controller. R19 and R20 say so; for R18 the chart puts the
    token in the pod template, so helm's upgrade rolls it anyway, but a chart that reads it
    from a Secret without a checksum annotation would keep the old token running: one more
    roll is cheaper than an agent that never saw its new token."""
    return bool(credentials)


def describe(credentials: Iterable[Credential]) -> str:
    names = {
        Credential.AGENT_TOKEN: "agent token",
        Credential.VENDOR_KEYS: "cloud vendor keys",
        Credential.GREPTIME_PASSWORD: "GreptimeDB password",
    }
    return ", ".join(names[c] for c in ordered(list(credentials)))


def alone_problem(
    credentials: Collection[Credential], *, chart_changed: bool, values_changed: Collection[str]
) -> str:
    """Why a change that rotates ``credentials`` is refused ("" when it is not): it also
    changes the chart version or the values."""
    if not credentials:
        return ""
    what = []
    if chart_changed:
        what.append("the chart version")
    if values_changed:
        shown = ", ".join(sorted(values_changed)[:3])
        more = "…" if len(values_changed) > 3 else ""
        what.append(f"values ({shown}{more})")
    if not what:
        return ""
    return (
        f"this change rotates the {describe(credentials)} and also changes "
        f"{' and '.join(what)}: rotate credentials in a change of its own (R17-R20), so a "
        "failed upgrade never rolls back a credential the vendor may already have revoked"
    )


def credentials_location(
    locations: Mapping[str, Location], credentials: Collection[Credential]
) -> Location | None:
    """Where the first rotated reference is written in credentials.yaml, when known."""
    for credential in ordered(list(credentials)):
        for path in PATHS[credential]:
            found = locations.get(f"credentials.yaml:secrets.{path}")
            if found is not None:
                return found
    return locations.get("credentials.yaml:rotation")
