"""``gitopsbot.yaml``: the bot's settings; an empty file means all defaults."""

from __future__ import annotations

from typing import Any

from gitopsbot.core.fleet import located_yaml
from gitopsbot.core.fleet.credentials_file import setting_ref
from gitopsbot.core.fleet.fields import FieldReader
from gitopsbot.core.fleet.keyrings_settings import read_chart_keyrings
from gitopsbot.core.fleet.layout import SETTINGS_FILE
from gitopsbot.core.fleet.located_yaml import DEFAULT_LIMITS, LocatedMap, YamlLimits
from gitopsbot.core.fleet.model import (
    BotSettings,
    ClearedVersion,
    DriftSettings,
    ForgeSettings,
    GitAccessSettings,
    GitHubAppSettings,
    ProposalSettings,
    RehearsalSettings,
)
from gitopsbot.core.fleet.notifications_file import read_notifications
from gitopsbot.core.fleet.registries_settings import read_chart_registries
from gitopsbot.core.fleet.waves_settings import (
    read_cleared_versions,
    read_failed_versions,
    read_waves,
)
from gitopsbot.errors import FleetError, Problem

_SETTINGS_KEYS = (
    "watchedBranch",
    "stateBranch",
    "pollInterval",
    "author",
    "forge",
    "proposals",
    "git",
    "limits",
    "notifications",
    "waves",
    "failedVersions",
    "clearedVersions",
    "drift",
    "rehearsal",
    "chartRegistries",
    "chartKeyrings",
)
_LIMIT_KEYS = ("maxBytes", "maxDepth", "maxAliases", "maxNodes")
_GIT_KEYS = ("sshKey",)
_AUTHOR_KEYS = ("name", "email")
_FORGE_KEYS = ("kind", "url", "repository", "token", "webhookSecret", "app")
_APP_KEYS = ("appId", "privateKey", "installationId")
_PROPOSAL_KEYS = ("enabled", "scope", "interval", "maxOpen", "labels", "groupBy")
_GROUP_BY = ("cluster", "wave")
_DRIFT_KEYS = ("enabled", "interval", "onDrift", "labels")
_REHEARSAL_KEYS = ("attachToPlan",)
_ON_DRIFT = ("report", "propose-git", "propose-reapply")
_FORGE_KINDS = ("github", "gitlab", "gitea", "git-only")
_SCOPES = ("patch", "minor", "major", "pinned")


def _git_access(r: FieldReader, git: LocatedMap) -> GitAccessSettings:
    # The bot reads gitopsbot.yaml before it knows any cluster, and needs the key to fetch
    # it: the key must be on the bot's own machine.
    local = (
        "an SSH key must be a file on the bot's machine",
        "give file: /path/to/private_key, or env: VAR (a variable holding that path)",
    )
    return GitAccessSettings(ssh_key=setting_ref(r, git, "sshKey", "git.sshKey", local=local))


def _github_app(r: FieldReader, forge: LocatedMap, kind: str) -> GitHubAppSettings | None:
    """``forge.app`` (docs/forges.md, GitHub App): exclusive with ``forge.token``."""
    if forge.get("app") is None:
        return None
    app = r.section(forge, "app", "forge", _APP_KEYS)
    at = r.value_at(forge, "app")
    if kind != "github":
        r.add(at, "forge.app", f"a GitHub App needs kind github, not {kind}")
        return None
    if forge.get("token") is not None:
        r.add(
            at,
            "forge.app",
            "give forge.token or forge.app, not both",
            "an app mints its own tokens: remove forge.token",
        )
        return None
    if "appId" not in app:
        r.add(at, "forge.app.appId", "required key is missing", "the App ID of the app's page")
    app_id = r.integer(app, "appId", "forge.app", 0, low=1)
    installation = r.integer(app, "installationId", "forge.app", 0, low=1)
    if app.get("privateKey") is None:
        r.add(at, "forge.app.privateKey", "required key is missing", "env: VAR or file: PATH")
    # Read before any cluster is known, like git.sshKey: the chart puts it in env.
    local = (
        "the app's key must reach the bot's own process",
        "give env: GITOPSBOT_GITHUB_APP_KEY (the chart's secrets.githubAppKey)",
    )
    key = setting_ref(r, app, "privateKey", "forge.app.privateKey", local=local)
    if key is None or not app_id:
        return None
    return GitHubAppSettings(app_id=app_id, private_key=key, installation_id=installation)


def _limits(r: FieldReader, node: LocatedMap) -> YamlLimits:
    """``limits:``: bounds on every YAML file read from the fleet (docs/fleet-repo.md)."""
    d = DEFAULT_LIMITS
    return YamlLimits(
        max_bytes=r.integer(node, "maxBytes", "limits", d.max_bytes, low=1024, high=64 << 20),
        max_depth=r.integer(
            node, "maxDepth", "limits", d.max_depth, low=2, high=located_yaml.MAX_DEPTH
        ),
        max_aliases=r.integer(node, "maxAliases", "limits", d.max_aliases, low=0),
        max_nodes=r.integer(node, "maxNodes", "limits", d.max_nodes, low=1, high=50_000_000),
    )


def _drift(r: FieldReader, node: LocatedMap) -> DriftSettings:
    """``drift:`` (docs/drift.md)."""
    d = DriftSettings()
    return DriftSettings(
        enabled=r.boolean(node, "enabled", "drift", d.enabled),
        interval_seconds=r.duration(node, "interval", "drift", d.interval_seconds, minimum=60),
        on_drift=r.choice(node, "onDrift", "drift", d.on_drift, _ON_DRIFT),  # type: ignore[arg-type]
        labels=r.string_list(node, "labels", "drift", d.labels)[0],
    )


def read_settings(r: FieldReader, doc: Any) -> BotSettings:
    top = r.document(doc, _SETTINGS_KEYS)
    if top is None:
        return BotSettings()
    d = BotSettings()
    author = r.section(top, "author", "", _AUTHOR_KEYS)
    forge = r.section(top, "forge", "", _FORGE_KEYS)
    props = r.section(top, "proposals", "", _PROPOSAL_KEYS)
    fd, pd = ForgeSettings(), ProposalSettings()
    token = setting_ref(r, forge, "token", "forge.token")
    webhook = setting_ref(r, forge, "webhookSecret", "forge.webhookSecret")
    git = _git_access(r, r.section(top, "git", "", _GIT_KEYS))
    limits = _limits(r, r.section(top, "limits", "", _LIMIT_KEYS))
    notifications = read_notifications(r, top)
    chart_registries = read_chart_registries(r, top)
    chart_keyrings = read_chart_keyrings(r, top)
    waves = read_waves(r, top)
    failed_versions = read_failed_versions(r, top)
    # They reach the policy through core.canary_marks.with_canary_marks (bot.waves).
    cleared_versions = read_cleared_versions(r, top)
    group_by = r.choice(props, "groupBy", "proposals", pd.group_by, _GROUP_BY)
    if group_by == "wave" and top.get("waves") is None:
        r.add(
            r.value_at(props, "groupBy"),
            "proposals.groupBy",
            "'wave' needs waves: no waves are defined",
            "define waves: (docs/fleet-repo.md, Waves) or write groupBy: cluster",
        )
    kind = r.choice(forge, "kind", "forge", fd.kind, _FORGE_KINDS)
    repository = r.string(forge, "repository", "forge", fd.repository)
    if kind != "git-only" and "repository" not in forge and forge:
        r.add(r.node_at(forge), "forge.repository", f"required when kind is {kind}")
    app = _github_app(r, forge, kind)
    return BotSettings(
        watched_branch=r.string(top, "watchedBranch", "", d.watched_branch),
        state_branch=r.string(top, "stateBranch", "", d.state_branch),
        poll_interval_seconds=r.duration(top, "pollInterval", "", d.poll_interval_seconds),
        author_name=r.string(author, "name", "author", d.author_name),
        author_email=r.string(author, "email", "author", d.author_email),
        forge=ForgeSettings(
            kind=kind,  # type: ignore[arg-type]  # checked against _FORGE_KINDS
            url=r.string(forge, "url", "forge", fd.url),
            repository=repository,
            token=token,
            webhook_secret=webhook,
            app=app,
        ),
        git=git,
        limits=limits,
        notifications=notifications,
        waves=waves,
        failed_versions=failed_versions,
        cleared_versions=cleared_versions,
        drift=_drift(r, r.section(top, "drift", "", _DRIFT_KEYS)),
        chart_registries=chart_registries,
        chart_keyrings=chart_keyrings,
        rehearsal=RehearsalSettings(
            attach_to_plan=r.boolean(
                r.section(top, "rehearsal", "", _REHEARSAL_KEYS),
                "attachToPlan",
                "rehearsal",
                RehearsalSettings().attach_to_plan,
            )
        ),
        proposals=ProposalSettings(
            enabled=r.boolean(props, "enabled", "proposals", pd.enabled),
            scope=r.choice(props, "scope", "proposals", pd.scope, _SCOPES),  # type: ignore[arg-type]
            interval_seconds=r.duration(
                props, "interval", "proposals", pd.interval_seconds, minimum=60
            ),
            max_open=r.integer(props, "maxOpen", "proposals", pd.max_open, low=0),
            labels=r.string_list(props, "labels", "proposals", pd.labels)[0],
            group_by=group_by,  # type: ignore[arg-type]  # checked against _GROUP_BY
        ),
    )


def parse_settings(text: str | None, *, file: str = SETTINGS_FILE) -> BotSettings:
    """``gitopsbot.yaml`` → BotSettings; an empty file means all defaults. Raises FleetError."""
    if text is None:
        raise FleetError(
            [
                Problem(
                    file,
                    0,
                    0,
                    "",
                    "missing: is this a fleet repository?",
                    f"it needs {SETTINGS_FILE} at its root",
                )
            ]
        )
    # Read with the default limits: this file is where other limits would be set.
    doc, problems = located_yaml.read(text, file)
    r = FieldReader(file)
    settings = read_settings(r, doc) if not problems else BotSettings()
    problems.extend(sorted(r.problems, key=lambda p: (p.line, p.column)))
    if problems:
        raise FleetError(problems)
    return settings


def parse_cleared_versions(
    text: str | None, *, file: str = SETTINGS_FILE
) -> tuple[ClearedVersion, ...]:
    """``clearedVersions:`` of ``gitopsbot.yaml`` (``core.waves.canary_marks.ClearedVersion``);
    () for a missing or empty file. Raises FleetError as ``parse_settings`` does."""
    if not text:
        return ()
    doc, problems = located_yaml.read(text, file)
    r = FieldReader(file)
    top = r.document(doc) if not problems else None
    cleared = read_cleared_versions(r, top) if top is not None else ()
    problems.extend(sorted(r.problems, key=lambda p: (p.line, p.column)))
    if problems:
        raise FleetError(problems)
    return cleared
