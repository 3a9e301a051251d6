"""The demo's fleet repository, as text: one cluster pointed at the sandbox.

Pure text generation (no I/O): ``story_fleet_files(...)`` returns ``{path: text}`` for
``gitopsbot.yaml`` and ``clusters/<cluster>/{release,values,rollout}.yaml``. The chart
repository URL and kube context are the sandbox's; the pools are the simulator's (``shared``
and ``pool-2``, ... via the sandbox chart's ``cluster.extraPools``). The first pool has no
maintenance window; every later pool gets one that opens at ``window_opens`` (a minute
boundary, as cron allows) and stays open ``window_minutes``, so the demo shows a pool held by
its window until it opens (R21: the bot, not the controller, enforces windows).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

CLUSTER = "sandbox"
CHART = "tensor-fusion"
TOKEN_ENV = "GITOPSBOT_SANDBOX_FORGE_TOKEN"  # a reference only: the demo wires the token itself
WEBHOOK_SECRET_ENV = "GITOPSBOT_SANDBOX_WEBHOOK_SECRET"
REGISTRY_PASSWORD_ENV = "GITOPSBOT_SANDBOX_REGISTRY_PASSWORD"


@dataclass(frozen=True, slots=True)
class StoryFleet:
    """Where the fleet's cluster lives and how its pools roll."""

    chart_repo_url: str
    kube_context: str
    forge_api_url: str
    forge_repository: str = "acme/fleet"
    chart_version: str = "1.8.0"
    hypervisor_image: str = "tensorfusion/tensor-fusion-hypervisor:2.13.0"
    namespace: str = "tensor-fusion-sys"
    release: str = "tensor-fusion-sys"
    pools: tuple[str, ...] = ("shared", "pool-2")
    nodes: int = 3
    batch_percentage: int = 50
    batch_interval: str = "1s"
    window_opens: datetime | None = None  # None: no pool has a window
    window_minutes: int = 15
    on_failure: str = "rollback"
    stall_timeout: str = "10m"
    poll_interval: str = "5s"
    cluster: str = CLUSTER
    # The forge token as a ``file:`` reference (an absolute path on the bot's machine) instead
    # of the ``env:`` one; ``gitopsbot sandbox up`` writes that file.
    forge_token_file: str | None = None
    # An OCI registry's login for ``chartRegistries`` (host, username; the password from
    # REGISTRY_PASSWORD_ENV, plain HTTP): when chart_repo_url is oci:// and needs one.
    chart_registry: tuple[str, str] | None = None
    # A public keyring the chart repository's charts must be signed with (``chartKeyrings``).
    chart_keyring: str | None = None


def pool_names(count: int) -> tuple[str, ...]:
    """The simulator's pool names for a sandbox with ``count`` pools."""
    return ("shared", *(f"pool-{i}" for i in range(2, count + 1)))


def next_window_start(now: datetime, *, lead_seconds: float) -> datetime:
    """The first whole minute (UTC) at least ``lead_seconds`` after ``now``."""
    at = now.astimezone(UTC) + timedelta(seconds=lead_seconds)
    whole = at.replace(second=0, microsecond=0)
    return whole if whole == at else whole + timedelta(minutes=1)


def window_cron(opens: datetime) -> str:
    """A cron that fires once a year, at ``opens`` (UTC): the window opens then, once."""
    t = opens.astimezone(UTC)
    return f"{t.minute} {t.hour} {t.day} {t.month} *"


def story_fleet_files(fleet: StoryFleet) -> dict[str, str]:
    c = fleet.cluster
    return {
        "gitopsbot.yaml": _settings(fleet),
        f"clusters/{c}/release.yaml": _release(fleet),
        f"clusters/{c}/values.yaml": _values(fleet),
        f"clusters/{c}/rollout.yaml": _rollout(fleet),
    }


def _settings(f: StoryFleet) -> str:
    return f"""\
# gitopsbot settings of the sandbox fleet (docs/fleet-repo.md, docs/demo.md).
watchedBranch: main
stateBranch: gitopsbot/state
pollInterval: {f.poll_interval}
author:
  name: gitopsbot
  email: gitopsbot@sandbox.invalid
forge:
  kind: github
  url: {f.forge_api_url}
  repository: {f.forge_repository}
  token:
    {_token_ref(f)}
  webhookSecret:
    env: {WEBHOOK_SECRET_ENV}
proposals:
  enabled: true
  scope: minor
  interval: 1h
  maxOpen: 3
  labels: [gitopsbot, upgrade]
{_registries(f)}{_keyrings(f)}"""


def _keyrings(f: StoryFleet) -> str:
    if f.chart_keyring is None:
        return ""
    return f"""\
chartKeyrings:
  - repository: {json.dumps(f.chart_repo_url)}
    keyring: {json.dumps(f.chart_keyring)}
"""


def _registries(f: StoryFleet) -> str:
    if f.chart_registry is None:
        return ""
    host, user = f.chart_registry
    return f"""\
chartRegistries:
  - host: {json.dumps(host)}
    username: {json.dumps(user)}
    password:
      env: {REGISTRY_PASSWORD_ENV}
    plainHttp: true
"""


def _token_ref(f: StoryFleet) -> str:
    # A JSON string is a YAML scalar whatever the path holds (spaces, ':', '#').
    return f"file: {json.dumps(f.forge_token_file)}" if f.forge_token_file else f"env: {TOKEN_ENV}"


def _release(f: StoryFleet) -> str:
    return f"""\
# The sandbox cluster: chart from the sandbox chart repository, installed by real helm.
chart:
  repository: {f.chart_repo_url}
  name: {CHART}
  version: {f.chart_version}
release:
  name: {f.release}
  namespace: {f.namespace}
kubeContext: {f.kube_context}
environment: staging
"""


def _values(f: StoryFleet) -> str:
    extra = "".join(f"    - name: {p}\n" for p in f.pools[1:])
    return f"""\
# Helm values for the sandbox cluster, passed to `helm upgrade -f` as a whole (R8).
controller:
  replicaCount: 1
cluster:
  enabled: true
  name: tensor-fusion
  # Set explicitly (R4): it does not follow the controller version (F2).
  hypervisorImage: {f.hypervisor_image}
  pool:
    name: {f.pools[0]}
    nodeSelectorKey: nvidia.com/gpu.present
    defaultIsolationMode: soft
  extraPools:{" []" if not extra else ""}
{extra}"""


def _rollout(f: StoryFleet) -> str:
    order = ", ".join(f.pools)
    if f.window_opens is not None and len(f.pools) > 1:
        what = (
            "the first pool at once, the others in their maintenance window "
            f'(cron "{window_cron(f.window_opens)}" UTC, {f.window_minutes}m).'
        )
    else:
        what = "one pool after the other, in order; no pool has a maintenance window."
    lines = [
        f"# Pool rollouts: {what}",
        f"order: [{order}]",
        "maxParallelPools: 1",
        f"onFailure: {f.on_failure}",
        "controllerReadyTimeout: 60s",
        "pools:",
    ]
    for i, pool in enumerate(f.pools):
        lines += [
            f"  {pool}:",
            "    autoUpdateHypervisor: true",
            f"    batchPercentage: {f.batch_percentage}",
            f"    batchInterval: {f.batch_interval}",
            "    maxDuration: 30m",
            f"    stallTimeout: {f.stall_timeout}",
            "    phases: [hypervisor]",
            f"    nodes: {f.nodes}",
        ]
        if i > 0 and f.window_opens is not None:
            lines += [
                "    maintenanceWindow:",
                f'      cron: "{window_cron(f.window_opens)}"',
                f"      duration: {f.window_minutes}m",
                "      timeZone: UTC",
            ]
    return "\n".join(lines) + "\n"
