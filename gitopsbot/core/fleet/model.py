"""The desired state read from a fleet repository: settings, clusters, releases, policies.

Frozen values only. Parsing and validation of the files live in ``core.fleet``; this
module is the vocabulary every other part of the bot shares. Durations are seconds (int).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal

from gitopsbot.core.fleet.canary_spec import CanarySmoke
from gitopsbot.core.fleet.gate_specs import Gate, PrometheusEndpoint
from gitopsbot.core.fleet.workload_specs import WorkloadAwareness
from gitopsbot.core.fleet.yaml_bounds import DEFAULT_LIMITS, YamlLimits


class Component(StrEnum):
    """Per-pool components the controller rolls (R3, R10)."""

    HYPERVISOR = "hypervisor"
    WORKER = "worker"
    CLIENT = "client"


class Environment(StrEnum):
    """Production turns on the stricter rules (R5, batch size)."""

    PRODUCTION = "production"
    STAGING = "staging"
    DEVELOPMENT = "development"


@dataclass(frozen=True, slots=True)
class Location:
    """Where a value came from, for messages. 1-based; 0 means unknown."""

    file: str
    line: int = 0
    column: int = 0


@dataclass(frozen=True, slots=True)
class MaintenanceWindow:
    """A window opens at each cron match and lasts ``duration_seconds`` in ``timezone``."""

    cron: str
    duration_seconds: int
    timezone: str = "UTC"


@dataclass(frozen=True, slots=True)
class Share:
    """A count, or a percentage of a whole (``maxUnavailable: 2`` or ``25%``)."""

    value: int
    percent: bool = False

    def of(self, total: int) -> int:
        """The count this share allows out of ``total``: a percentage rounds down, as
        Kubernetes rounds maxUnavailable, but never below 1 (else nothing could move)."""
        if not self.percent:
            return self.value
        return max(1, self.value * total // 100) if total > 0 else 0

    def __str__(self) -> str:
        return f"{self.value}%" if self.percent else str(self.value)


@dataclass(frozen=True, slots=True)
class PoolPolicy:
    """Rollout policy of one GPU pool, as the bot enforces it (R10, R21, R22).

    The switches and batch settings are written into the pool's ``specTemplate``;
    the window, deadline and stall timeout are enforced by the bot, since the controller
    ignores them (R21).
    """

    name: str
    auto_update_hypervisor: bool = True
    auto_update_worker: bool = False
    auto_update_client: bool = False
    batch_percentage: int = 20
    batch_interval_seconds: int = 1
    maintenance_window: MaintenanceWindow | None = None
    max_duration_seconds: int | None = None
    stall_timeout_seconds: int = 600
    # Phases in order; each must have its switch on (F3).
    phases: tuple[Component, ...] = (Component.HYPERVISOR,)
    # Expected GPU node count, for the timeline when the cluster cannot be asked.
    nodes: int = 0
    # Canary: the first batch at this percentage, then a pause for verification (0 = off).
    canary_batch_percentage: int = 0
    # A person holds this pool (docs/pause.md): read from the watched branch's head each pass.
    paused: bool = False
    # "canary-batch": after this pool's verified canary batch, wait for /gitopsbot approve.
    require_approval: str = ""
    # Approval in Git (docs/pause.md): the operation id whose awaited approvals of this pool
    # it gives; read from the watched branch's head each pass, like ``paused``.
    approve: str = ""
    # Availability budget (issue 18): the most GPU nodes out of service at once, counting
    # nodes already NotReady or cordoned; a count, or a percentage of the pool's nodes.
    max_unavailable: Share | None = None
    # Window-fit admission (issue 18): open a batch only if its expected duration fits in
    # what is left of the window and of maxDuration.
    window_fit: bool = True
    # Gates judged after each batch and before the next opens (core.gates): pass opens,
    # fail halts, inconclusive retries gate_retries times gate_retry_interval apart.
    gates: tuple[Gate, ...] = ()
    gate_retries: int = 3
    gate_retry_interval_seconds: int = 60
    # Worker and client batches: wait for sessions to end, and bound the tenants a batch
    # disrupts (core.workload_wait).
    workloads: WorkloadAwareness | None = None

    def switch(self, component: Component) -> bool:
        return {
            Component.HYPERVISOR: self.auto_update_hypervisor,
            Component.WORKER: self.auto_update_worker,
            Component.CLIENT: self.auto_update_client,
        }[component]


OnFailure = Literal["rollback", "revert-pr", "halt"]


@dataclass(frozen=True, slots=True)
class RolloutPolicy:
    """Per-cluster rollout policy: pools in order, concurrency, what to do on failure."""

    pools: tuple[PoolPolicy, ...] = ()
    # Pool names, rolled in this order; pools not listed follow in file order.
    order: tuple[str, ...] = ()
    max_parallel_pools: int = 1
    # A pool rolled (and verified) alone before the others start.
    canary_pool: str | None = None
    on_failure: OnFailure = "revert-pr"
    controller_ready_timeout_seconds: int = 180
    # Acknowledgements for "requires acknowledgement" rules: rule id -> reason.
    acknowledgements: Mapping[str, str] = field(default_factory=dict)
    # A person holds every pool of the cluster (docs/pause.md).
    paused: bool = False
    # "canary-pool": after the canary pool is done, the others wait for /gitopsbot approve.
    require_approval: str = ""
    # Approval in Git: the operation id whose every awaited approval it gives (docs/pause.md).
    approve: str = ""
    # Where the pools' Prometheus and alert gates ask (core.gates; the token stays in the
    # bot's environment, named by tokenEnv).
    prometheus: PrometheusEndpoint | None = None

    def ordered_pools(self) -> tuple[PoolPolicy, ...]:
        by_name = {p.name: p for p in self.pools}
        head = [by_name[n] for n in self.order if n in by_name]
        rest = [p for p in self.pools if p.name not in self.order]
        return (*head, *rest)

    def rollout_order(self) -> tuple[PoolPolicy, ...]:
        """The order the bot moves the pools in: ``canaryPool`` first, then
        ``ordered_pools`` (the operation's phase steps, and ``gitopsbot rehearse``)."""
        pools = list(self.ordered_pools())
        if self.canary_pool:
            pools.sort(key=lambda p: p.name != self.canary_pool)  # stable: canary first
        return tuple(pools)


@dataclass(frozen=True, slots=True)
class ReleaseSpec:
    """Where the chart comes from and where it is installed (never assumed: R5)."""

    chart_repo_url: str
    chart_name: str
    version: str
    release_name: str
    namespace: str
    kube_context: str = ""
    # A kubeconfig kept in a Secret of the bot's own namespace (docs/cluster-access.md);
    # exclusive with kube_context.
    kubeconfig_secret: KubeconfigSecretRef | None = None
    # ``chart.digest``: the archive's sha256 (``sha256:<hex>``) the bot must install, or "".
    chart_digest: str = ""


@dataclass(frozen=True, slots=True)
class KubeconfigSecretRef:
    """``release.yaml: kubeconfigSecret``: a Secret (in the bot's namespace, read with its
    ServiceAccount) holding the kubeconfig of a remote cluster at ``key``."""

    name: str
    key: str = "kubeconfig"


SecretSource = Literal["kubernetes-secret", "file", "env"]


@dataclass(frozen=True, slots=True)
class SecretRef:
    """A values path filled in only at apply time from a secret source; never secret material."""

    values_path: str  # dotted path in values.yaml, e.g. "agent.enrollToken"
    source: SecretSource
    name: str  # Secret name, file path, or environment variable name
    key: str = ""  # key inside the Kubernetes Secret
    namespace: str = ""


@dataclass(frozen=True, slots=True)
class CredentialsSpec:
    """Credential references for a cluster, plus a counter bumped to force a rotation."""

    secrets: tuple[SecretRef, ...] = ()
    rotation: int = 0
    # Further values paths the team declares secret (masked in diffs, refused as literals).
    secret_paths: tuple[str, ...] = ()
    # How long an agent-token rotation waits for the cluster agent to reconnect (R18) before
    # the operation fails (``agentReconnectTimeout``; core.rotation).
    agent_reconnect_timeout_seconds: int = 600


@dataclass(frozen=True, slots=True)
class SmokeTest:
    """Optional CUDA smoke-test workload (R15): a pod manifest whose exit decides."""

    manifest: Mapping[str, Any]
    timeout_seconds: int = 300


@dataclass(frozen=True, slots=True)
class ClusterSpec:
    """One cluster's desired state as Git says it."""

    name: str
    environment: Environment
    release: ReleaseSpec
    values: Mapping[str, Any]
    rollout: RolloutPolicy
    credentials: CredentialsSpec = CredentialsSpec()
    smoke_test: SmokeTest | None = None
    # The GPU-path canary run after a pool's canary batch (issue 18, core.canary_smoke).
    canary_smoke: CanarySmoke | None = None
    # Files this cluster was read from, relative to the fleet root (for messages, revert checks).
    files: tuple[str, ...] = ()
    # Where each values path (``core.fleet.secrets.join_path`` form, e.g. "agent.enrollToken") is
    # written in values.yaml, for located messages from the diff and policy engines.
    values_locations: Mapping[str, Location] = field(default_factory=dict)
    # Where other settings are written, keyed "<file>:<dotted path>", e.g.
    # "rollout.yaml:pools.training.phases" (for located policy verdicts such as F3).
    locations: Mapping[str, Location] = field(default_factory=dict)
    # ``labels:`` of release.yaml: what promotion waves select on (core.promotion).
    labels: Mapping[str, str] = field(default_factory=dict)


ForgeKind = Literal["github", "gitlab", "gitea", "git-only"]
UpgradeScope = Literal["patch", "minor", "major", "pinned"]


@dataclass(frozen=True, slots=True)
class GitHubAppSettings:
    """``forge.app``: authenticate as a GitHub App (docs/forges.md, GitHub App).

    ``private_key`` locates the app's PEM private key (env or file); it is read into memory
    only. ``installation_id`` 0: found from the fleet repository at start."""

    app_id: int
    private_key: SecretRef
    installation_id: int = 0


@dataclass(frozen=True, slots=True)
class ForgeSettings:
    kind: ForgeKind = "git-only"
    url: str = ""
    repository: str = ""  # owner/name (GitHub, Gitea) or project path (GitLab)
    token: SecretRef | None = None
    webhook_secret: SecretRef | None = None
    app: GitHubAppSettings | None = None  # exclusive with ``token``; GitHub only


@dataclass(frozen=True, slots=True)
class GitAccessSettings:
    """How the bot authenticates to the fleet repository's remote (``git:`` in gitopsbot.yaml).

    Separate from ``forge``: a ``git-only`` fleet still needs Git credentials. ``ssh_key``
    locates the SSH private key *file* (a ``file`` ref names its path; an ``env`` ref names a
    variable holding the path) — the key itself never sits in the fleet repository.
    """

    ssh_key: SecretRef | None = None


ProposalGrouping = Literal["cluster", "wave"]


@dataclass(frozen=True, slots=True)
class ProposalSettings:
    """Upstream version proposals (Renovate's job, for this chart)."""

    enabled: bool = True
    scope: UpgradeScope = "minor"
    interval_seconds: int = 3600
    max_open: int = 5
    labels: tuple[str, ...] = ("gitopsbot", "upgrade")
    # "cluster": one request per cluster; "wave": one per wave and version for the clusters
    # a wave selects (unwaved clusters keep one each). docs/proposals.md.
    group_by: ProposalGrouping = "cluster"


OnDrift = Literal["report", "propose-git", "propose-reapply"]


@dataclass(frozen=True, slots=True)
class DriftSettings:
    """``drift:``: how often ``run`` compares each cluster with Git and what it does about a
    difference (docs/drift.md). Never changes the cluster by itself: "propose-reapply" opens
    a pull request whose merge re-applies Git."""

    enabled: bool = True
    interval_seconds: int = 3600
    on_drift: OnDrift = "report"
    labels: tuple[str, ...] = ("gitopsbot", "drift")


NotificationKind = Literal["slack", "webhook"]
# What a notification can be subscribed to (docs/notifications.md), in telling order.
NOTIFICATION_EVENTS = ("halted", "failed", "rollback", "blocked", "succeeded")


@dataclass(frozen=True, slots=True)
class NotificationTarget:
    """One ``notifications[i]`` entry of gitopsbot.yaml: a chat or JSON webhook. ``url`` is a
    secret reference (the URL embeds a token); messages name the target by ``label`` only."""

    index: int
    kind: NotificationKind
    url: SecretRef
    on: tuple[str, ...] = NOTIFICATION_EVENTS
    clusters: tuple[str, ...] = ()  # glob patterns (fnmatch); empty: every cluster
    file: str = "gitopsbot.yaml"
    line: int = 0

    @property
    def label(self) -> str:
        """``gitopsbot.yaml:12: notifications[0] (slack)``: never the URL."""
        return f"{self.file}:{self.line}: notifications[{self.index}] ({self.kind})"


@dataclass(frozen=True, slots=True)
class WaveSelector:
    """Which clusters a wave takes: every criterion given must match (an empty one matches
    nothing, so the reader refuses it)."""

    environment: Environment | None = None
    names: tuple[str, ...] = ()  # glob patterns (fnmatch); any one matches
    labels: Mapping[str, str] = field(default_factory=dict)  # all must match


@dataclass(frozen=True, slots=True)
class Wave:
    """One ``waves[i]`` entry of gitopsbot.yaml: a step of promotion (docs/fleet-repo.md)."""

    name: str
    clusters: WaveSelector
    soak_seconds: int = 0
    # False: only a chart version change waits for the earlier waves; True: a values-only
    # change waits too.
    gate_values: bool = False
    line: int = 0  # where it is written, for messages


@dataclass(frozen=True, slots=True)
class FailedVersion:
    """One ``failedVersions[i]`` entry: a chart version a person (or, later, the bot after a
    rollback) marked as failed. ``wave`` empty: failed for every cluster."""

    version: str
    wave: str = ""
    reason: str = ""
    line: int = 0


@dataclass(frozen=True, slots=True)
class ClearedVersion:
    """One ``clearedVersions[i]`` entry of gitopsbot.yaml: a person clears a version a GPU
    canary marked failed (core.canary_marks). ``operation`` empty: every failure of it."""

    version: str
    reason: str
    operation: str = ""
    line: int = 0

    def clears(self, version: str, op_id: str) -> bool:
        if self.version != version:
            return False
        return not self.operation or self.operation == op_id


@dataclass(frozen=True, slots=True)
class RehearsalSettings:
    """``rehearsal:`` (docs/rehearsal.md): ``attachToPlan`` appends the rehearsal's
    compressed timeline to each pull request's plan comment (off: rehearsing costs seconds
    of helm and simulation per plan)."""

    attach_to_plan: bool = False


@dataclass(frozen=True, slots=True)
class ChartRegistry:
    """One ``chartRegistries[i]`` entry of gitopsbot.yaml: how the bot logs in to the OCI
    registry at ``host`` (``host[:port]``, as in ``oci://host[:port]/path``) to read charts.
    ``password`` is an ``env``/``file`` secret reference (docs/fleet-repo.md)."""

    host: str
    username: str = ""
    password: SecretRef | None = None
    plain_http: bool = False  # no TLS: a registry on loopback or inside the cluster only


@dataclass(frozen=True, slots=True)
class ChartKeyring:
    """One ``chartKeyrings[i]`` entry of gitopsbot.yaml: the charts of the repositories under
    ``repository`` (a chart repository URL or a prefix of whole path segments, ``oci://`` too)
    must carry a provenance file signed by a key of ``keyring`` (a public keyring file on the
    bot's machine, ``gpg --export`` format) (docs/fleet-repo.md, Signed charts)."""

    repository: str
    keyring: str


@dataclass(frozen=True, slots=True)
class BotSettings:
    """``gitopsbot.yaml``."""

    watched_branch: str = "main"
    state_branch: str = "gitopsbot/state"
    poll_interval_seconds: int = 30
    author_name: str = "gitopsbot"
    author_email: str = "gitopsbot@localhost"
    forge: ForgeSettings = ForgeSettings()
    proposals: ProposalSettings = ProposalSettings()
    git: GitAccessSettings = GitAccessSettings()
    # Bounds on every YAML file the bot reads from the fleet (``limits:``).
    limits: YamlLimits = DEFAULT_LIMITS
    # Chat and JSON webhooks told of halts, failures, rollbacks, blocks, successes.
    notifications: tuple[NotificationTarget, ...] = ()
    # Promotion (core.promotion): the ordered waves, and chart versions marked as failed.
    waves: tuple[Wave, ...] = ()
    failed_versions: tuple[FailedVersion, ...] = ()
    # Versions a person cleared of a GPU canary's failed mark (core.canary_marks).
    cleared_versions: tuple[ClearedVersion, ...] = ()
    drift: DriftSettings = DriftSettings()
    rehearsal: RehearsalSettings = RehearsalSettings()
    # Logins to the OCI registries that release.yaml's oci:// repositories name.
    chart_registries: tuple[ChartRegistry, ...] = ()
    # Keyrings that charts of these repositories must be signed with (core.provenance).
    chart_keyrings: tuple[ChartKeyring, ...] = ()


@dataclass(frozen=True, slots=True)
class Fleet:
    """The whole fleet repository at one commit."""

    settings: BotSettings
    clusters: Mapping[str, ClusterSpec]
    # Raw rule documents from the fleet's own policies/ (parsed by core.policy).
    policy_documents: tuple[tuple[str, str], ...] = ()  # (path, text)
