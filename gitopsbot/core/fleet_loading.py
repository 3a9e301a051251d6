"""Parse fleet repository files from text into ``core.model`` values, with located problems.

Pure: callers hand in the text of each file (``gitopsbot.fleetrepo`` reads them through a
``FileTree``). Every problem names file, line, column and field; an unknown key suggests the
nearest known one; duplicate keys, wrong types, impossible versions, bad durations and cron
expressions are errors. All problems are collected and raised together as one ``FleetError``.
The format is documented in docs/fleet-repo.md.

Time zones: checking that a name exists needs the tz database, which is data on disk, so the
caller passes the known names in (``known_timezones``); without them only the syntax is checked.
"""

from __future__ import annotations

import datetime as dt
import difflib
import re
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from croniter import croniter
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.constructor import DuplicateKeyError
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.nodes import MappingNode, Node, SequenceNode

from gitopsbot.core import secrets
from gitopsbot.core.model import (
    BotSettings,
    ClusterSpec,
    Component,
    CredentialsSpec,
    Environment,
    Fleet,
    ForgeSettings,
    GitAccessSettings,
    Location,
    MaintenanceWindow,
    PoolPolicy,
    ProposalSettings,
    ReleaseSpec,
    RolloutPolicy,
    SecretRef,
    SmokeTest,
)
from gitopsbot.errors import FleetError, Problem

SETTINGS_FILE = "gitopsbot.yaml"
CLUSTERS_DIR = "clusters"
POLICIES_DIR = "policies"
RELEASE_FILE = "release.yaml"
VALUES_FILE = "values.yaml"
ROLLOUT_FILE = "rollout.yaml"
CREDENTIALS_FILE = "credentials.yaml"
SMOKE_TEST_FILE = "smoke-test.yaml"
CLUSTER_FILES = (RELEASE_FILE, VALUES_FILE, ROLLOUT_FILE, CREDENTIALS_FILE, SMOKE_TEST_FILE)
REQUIRED_CLUSTER_FILES = (RELEASE_FILE, VALUES_FILE)

# SemVer 2.0.0, as Helm requires of chart versions (no leading "v" in a fleet repository).
_SEMVER = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[A-Za-z-][0-9A-Za-z-]*)(?:\.(?:0|[1-9]\d*|\d*[A-Za-z-][0-9A-Za-z-]*))*))?"
    r"(?:\+([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?$"
)
# Go-style durations, whole seconds: 30s, 10m, 2h, 1h30m.
_DURATION = re.compile(r"^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")
# DNS-1123 label (namespaces, pool and cluster names) and Helm's release-name rule.
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_RELEASE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_TIMEZONE = re.compile(r"^[A-Za-z][A-Za-z0-9_+\-]*(/[A-Za-z0-9_+\-]+)*$")
_ENV_VAR = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_CHART_REPO = re.compile(r"^(https?|oci)://[^\s/]+\S*$")

T = TypeVar("T")


def _kind(value: object) -> str:
    """A YAML-ish type name for messages (never the value: it may be a secret)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, Mapping):
        return "mapping"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dt.date):
        return "date"
    return type(value).__name__


def nearest(word: str, known: Sequence[str]) -> str:
    """'did you mean ...?' for the nearest known word (difflib), else ''."""
    close = difflib.get_close_matches(word, list(known), n=1, cutoff=0.6)
    return f"did you mean '{close[0]}'?" if close else ""


def suggest(word: str, known: Sequence[str]) -> str:
    """'did you mean ...?' for the nearest known word (difflib), else the known words."""
    close = difflib.get_close_matches(word, list(known), n=1, cutoff=0.6)
    if close:
        return f"did you mean '{close[0]}'?"
    return "known: " + ", ".join(known) if known else ""


def parse_duration(text: str) -> int | None:
    """``1h30m`` → 5400; None when it is not a whole-second Go-style duration."""
    m = _DURATION.match(text.strip())
    if not text.strip() or m is None:
        return None
    h, mi, s = (int(g) if g else 0 for g in m.groups())
    return h * 3600 + mi * 60 + s


def is_semver(version: str) -> bool:
    return bool(_SEMVER.match(version))


@dataclass
class _Reader:
    """Reads one parsed file, recording problems against it."""

    file: str
    problems: list[Problem] = field(default_factory=list)

    # -- locations -------------------------------------------------------------------------

    @staticmethod
    def key_at(node: Any, key: Any) -> tuple[int, int]:
        try:
            if isinstance(node, CommentedMap):
                line, col = node.lc.key(key)
                return line + 1, col + 1
            if isinstance(node, CommentedSeq):
                line, col = node.lc.item(key)
                return line + 1, col + 1
        except (KeyError, IndexError, TypeError):
            pass
        return _Reader.node_at(node)

    @staticmethod
    def value_at(node: Any, key: Any) -> tuple[int, int]:
        try:
            if isinstance(node, CommentedMap):
                line, col = node.lc.value(key)
                return line + 1, col + 1
        except (KeyError, IndexError, TypeError):
            pass
        return _Reader.key_at(node, key)

    @staticmethod
    def node_at(node: Any) -> tuple[int, int]:
        lc = getattr(node, "lc", None)
        if lc is not None and lc.line is not None:
            return lc.line + 1, lc.col + 1
        return 1, 1

    def add(self, at: tuple[int, int], fld: str, message: str, hint: str = "") -> None:
        self.problems.append(Problem(self.file, at[0], at[1], fld, message, hint))

    def loc(self, at: tuple[int, int]) -> Location:
        return Location(self.file, at[0], at[1])

    # -- structure -------------------------------------------------------------------------

    def mapping(self, node: Any, fld: str, at: tuple[int, int]) -> CommentedMap | None:
        if isinstance(node, CommentedMap):
            return node
        self.add(at, fld or "(document)", f"expected a mapping, got {_kind(node)}")
        return None

    def known_keys(self, node: CommentedMap, prefix: str, known: Sequence[str]) -> None:
        for key in node:
            if not isinstance(key, str):
                self.add(
                    self.key_at(node, key),
                    prefix or "(document)",
                    f"key is a {_kind(key)}, not a string",
                )
            elif key not in known:
                self.add(
                    self.key_at(node, key),
                    _join(prefix, key),
                    "unknown key",
                    suggest(key, known),
                )

    def section(
        self, node: CommentedMap, key: str, prefix: str, known: Sequence[str]
    ) -> CommentedMap:
        """An optional nested mapping, checked for unknown keys; empty when absent or wrong."""
        if key not in node or node[key] is None:
            return CommentedMap()
        sub = self.mapping(node[key], _join(prefix, key), self.value_at(node, key))
        if sub is None:
            return CommentedMap()
        self.known_keys(sub, _join(prefix, key), known)
        return sub

    # -- scalars ---------------------------------------------------------------------------

    def _get(
        self,
        node: CommentedMap,
        key: str,
        prefix: str,
        default: T,
        convert: Callable[[Any, str, tuple[int, int]], T | None],
        *,
        required: bool,
    ) -> T:
        fld = _join(prefix, key)
        if key not in node:
            if required:
                self.add(self.node_at(node), fld, "required key is missing")
            return default
        at = self.value_at(node, key)
        value = node[key]
        if value is None and not required:
            return default
        out = convert(value, fld, at)
        return default if out is None else out

    def string(
        self,
        node: CommentedMap,
        key: str,
        prefix: str,
        default: str = "",
        *,
        required: bool = False,
        pattern: re.Pattern[str] | None = None,
        what: str = "",
    ) -> str:
        def conv(value: Any, fld: str, at: tuple[int, int]) -> str | None:
            if not isinstance(value, str):
                hint = "quote it" if isinstance(value, int | float) else ""
                self.add(at, fld, f"expected a string, got {_kind(value)}", hint)
                return None
            if required and not value.strip():
                self.add(at, fld, "must not be empty")
                return None
            if pattern is not None and value and not pattern.match(value):
                self.add(at, fld, f"not a valid {what or 'value'}")
                return None
            return str(value)

        return self._get(node, key, prefix, default, conv, required=required)

    def integer(
        self,
        node: CommentedMap,
        key: str,
        prefix: str,
        default: int,
        *,
        low: int | None = None,
        high: int | None = None,
    ) -> int:
        def conv(value: Any, fld: str, at: tuple[int, int]) -> int | None:
            if isinstance(value, bool) or not isinstance(value, int):
                self.add(at, fld, f"expected an integer, got {_kind(value)}")
                return None
            if (low is not None and value < low) or (high is not None and value > high):
                if high is None:
                    self.add(at, fld, f"must be at least {low}, got {int(value)}")
                else:
                    self.add(at, fld, f"{int(value)} is outside {low}..{high}")
                return None
            return int(value)

        return self._get(node, key, prefix, default, conv, required=False)

    def boolean(self, node: CommentedMap, key: str, prefix: str, default: bool) -> bool:
        def conv(value: Any, fld: str, at: tuple[int, int]) -> bool | None:
            if not isinstance(value, bool):
                hint = "write true or false" if isinstance(value, str) else ""
                self.add(at, fld, f"expected true or false, got {_kind(value)}", hint)
                return None
            return bool(value)

        return self._get(node, key, prefix, default, conv, required=False)

    def duration(
        self,
        node: CommentedMap,
        key: str,
        prefix: str,
        default: T,
        *,
        minimum: int = 1,
        required: bool = False,
    ) -> int | T:
        def conv(value: Any, fld: str, at: tuple[int, int]) -> int | T | None:
            if not isinstance(value, str):
                hint = (
                    f"write '{value}s' for seconds"
                    if isinstance(value, int) and not isinstance(value, bool)
                    else ""
                )
                self.add(
                    at,
                    fld,
                    f"expected a duration such as 30s, 10m, 2h or 1h30m, got {_kind(value)}",
                    hint,
                )
                return None
            seconds = parse_duration(value)
            if seconds is None:
                self.add(at, fld, "not a duration", "use whole h/m/s units: 30s, 10m, 2h, 1h30m")
                return None
            if seconds < minimum:
                self.add(at, fld, f"must be at least {minimum}s")
                return None
            return seconds

        fallback: int | T = default
        return self._get(node, key, prefix, fallback, conv, required=required)

    def choice(
        self,
        node: CommentedMap,
        key: str,
        prefix: str,
        default: str,
        options: Sequence[str],
        *,
        required: bool = False,
    ) -> str:
        def conv(value: Any, fld: str, at: tuple[int, int]) -> str | None:
            if not isinstance(value, str) or value not in options:
                shown = f"'{value}'" if isinstance(value, str) else f"a {_kind(value)}"
                self.add(
                    at,
                    fld,
                    f"{shown} is not one of {', '.join(options)}",
                    nearest(str(value), options) if isinstance(value, str) else "",
                )
                return None
            return value

        return self._get(node, key, prefix, default, conv, required=required)

    def string_list(
        self, node: CommentedMap, key: str, prefix: str, default: tuple[str, ...]
    ) -> tuple[tuple[str, ...], list[tuple[int, int]]]:
        fld = _join(prefix, key)
        if key not in node or node[key] is None:
            return default, []
        value = node[key]
        if not isinstance(value, CommentedSeq):
            self.add(self.value_at(node, key), fld, f"expected a list, got {_kind(value)}")
            return default, []
        items: list[str] = []
        where: list[tuple[int, int]] = []
        for i, item in enumerate(value):
            at = self.key_at(value, i)
            if not isinstance(item, str):
                self.add(at, f"{fld}[{i}]", f"expected a string, got {_kind(item)}")
                continue
            items.append(str(item))
            where.append(at)
        return tuple(items), where


def _join(prefix: str, key: object) -> str:
    return f"{prefix}.{key}" if prefix else str(key)


# -- YAML --------------------------------------------------------------------------------------


def _duplicate_keys(node: Node | None, path: str = "") -> Iterator[tuple[Node, str, int]]:
    """(second key node, dotted path, first line) for every duplicate key under ``node``."""
    if isinstance(node, MappingNode):
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            key = str(key_node.value)
            if key != "<<":
                if key in seen:
                    yield key_node, _join(path, key), seen[key]
                else:
                    seen[key] = key_node.start_mark.line + 1
            yield from _duplicate_keys(value_node, _join(path, key))
    elif isinstance(node, SequenceNode):
        for i, item in enumerate(node.value):
            yield from _duplicate_keys(item, f"{path}[{i}]")


def load_yaml(text: str, file: str) -> tuple[Any, list[Problem]]:
    """Round-trip load one document. Messages carry the location and ruamel's short problem
    text, never the offending source line (it may hold a secret)."""
    yaml = YAML(typ="rt")
    try:
        return yaml.load(text), []
    except DuplicateKeyError:
        problems = [
            Problem(
                file,
                key_node.start_mark.line + 1,
                key_node.start_mark.column + 1,
                key,
                "duplicate key",
                f"first defined at line {first}",
            )
            for key_node, key, first in _duplicate_keys(YAML(typ="rt").compose(text))
        ]
        return None, problems or [Problem(file, 0, 0, "", "duplicate key")]
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark is not None else (0, 0)
        what = (exc.problem or exc.context or "cannot parse").strip()
        return None, [Problem(file, line, col, "", f"malformed YAML: {what[:200]}")]
    except YAMLError as exc:  # unmarked: no location to give
        return None, [Problem(file, 0, 0, "", f"malformed YAML: {type(exc).__name__}")]


def _plain(
    node: Any, path: tuple[str | int, ...], locs: dict[str, Location], reader: _Reader
) -> Any:
    """CommentedMap/Seq → dict/list, recording where each values path is."""
    if isinstance(node, CommentedMap):
        out: dict[str, Any] = {}
        for key, child in node.items():
            k = key if isinstance(key, str) else str(key)
            sub = (*path, k)
            locs[secrets.join_path(sub)] = reader.loc(reader.key_at(node, key))
            out[k] = _plain(child, sub, locs, reader)
        return out
    if isinstance(node, CommentedSeq):
        items: list[Any] = []
        for i, child in enumerate(node):
            sub = (*path, i)
            locs[secrets.join_path(sub)] = reader.loc(reader.key_at(node, i))
            items.append(_plain(child, sub, locs, reader))
        return items
    if isinstance(node, bool) or node is None:
        return node
    if isinstance(node, str):
        return str(node)
    if isinstance(node, int):
        return int(node)
    if isinstance(node, float):
        return float(node)
    if isinstance(node, dt.date):
        return node.isoformat()  # Helm reads an unquoted date as a string
    # Custom tags, !!binary, !!set...: nothing Helm's values can carry.
    where = locs.get(secrets.join_path(path))
    at = (where.line, where.column) if where else (1, 1)
    tag = getattr(getattr(node, "tag", None), "value", None) or _kind(node)
    reader.add(
        at,
        secrets.join_path(path) if path else "(document)",
        f"unsupported YAML value ({tag})",
        "values hold mappings, lists, strings, numbers, booleans and null",
    )
    return None


# -- gitopsbot.yaml ----------------------------------------------------------------------------

_SETTINGS_KEYS = (
    "watchedBranch",
    "stateBranch",
    "pollInterval",
    "author",
    "forge",
    "proposals",
    "git",
)
_GIT_KEYS = ("sshKey",)
_AUTHOR_KEYS = ("name", "email")
_FORGE_KEYS = ("kind", "url", "repository", "token", "webhookSecret")
_PROPOSAL_KEYS = ("enabled", "scope", "interval", "maxOpen", "labels")
_SECRET_REF_KEYS = ("kubernetesSecret", "file", "env")
_K8S_SECRET_KEYS = ("name", "key", "namespace")
_FORGE_KINDS = ("github", "gitlab", "gitea", "git-only")
_SCOPES = ("patch", "minor", "major", "pinned")


def _secret_ref(
    r: _Reader, node: Any, fld: str, at: tuple[int, int], values_path: str
) -> SecretRef | None:
    ref = r.mapping(node, fld, at)
    if ref is None:
        return None
    r.known_keys(ref, fld, _SECRET_REF_KEYS)
    given = [k for k in _SECRET_REF_KEYS if k in ref]
    if len(given) != 1:
        r.add(at, fld, "give exactly one source", "one of kubernetesSecret, file, env")
        return None
    source = given[0]
    if source == "env":
        name = r.string(
            ref, "env", fld, required=True, pattern=_ENV_VAR, what="environment variable name"
        )
        return SecretRef(values_path, "env", name) if name else None
    if source == "file":
        path = r.string(ref, "file", fld, required=True)
        return SecretRef(values_path, "file", path) if path else None
    sub_fld = _join(fld, "kubernetesSecret")
    sub = r.mapping(ref["kubernetesSecret"], sub_fld, r.value_at(ref, "kubernetesSecret"))
    if sub is None:
        return None
    r.known_keys(sub, sub_fld, _K8S_SECRET_KEYS)
    name = r.string(sub, "name", sub_fld, required=True)
    key = r.string(sub, "key", sub_fld, required=True)
    namespace = r.string(sub, "namespace", sub_fld, pattern=_DNS_LABEL, what="namespace")
    if not (name and key):
        return None
    return SecretRef(values_path, "kubernetes-secret", name, key=key, namespace=namespace)


def _settings_label(r: _Reader, at: tuple[int, int], fld: str) -> str:
    """How a gitopsbot.yaml secret is named in messages, e.g. ``gitopsbot.yaml:7: forge.token``.

    Such a ref fills no Helm value: its ``values_path`` is only this label (never a value)."""
    return f"{r.file}:{at[0]}: {fld}"


def _git_access(r: _Reader, git: CommentedMap) -> GitAccessSettings:
    if git.get("sshKey") is None:
        return GitAccessSettings()
    at = r.value_at(git, "sshKey")
    ref = _secret_ref(r, git["sshKey"], "git.sshKey", at, _settings_label(r, at, "git.sshKey"))
    if ref is not None and ref.source == "kubernetes-secret":
        # The bot reads gitopsbot.yaml before it knows any cluster, and needs the key to
        # fetch it: the key must be on the bot's own machine.
        r.add(
            at,
            "git.sshKey",
            "an SSH key must be a file on the bot's machine",
            "give file: /path/to/private_key, or env: VAR (a variable holding that path)",
        )
        return GitAccessSettings()
    return GitAccessSettings(ssh_key=ref)


def _settings(r: _Reader, doc: Any) -> BotSettings:
    if doc is None:
        return BotSettings()
    top = r.mapping(doc, "", (1, 1))
    if top is None:
        return BotSettings()
    r.known_keys(top, "", _SETTINGS_KEYS)
    d = BotSettings()
    author = r.section(top, "author", "", _AUTHOR_KEYS)
    forge = r.section(top, "forge", "", _FORGE_KEYS)
    props = r.section(top, "proposals", "", _PROPOSAL_KEYS)
    fd, pd = ForgeSettings(), ProposalSettings()
    token = webhook = None
    if forge.get("token") is not None:
        at = r.value_at(forge, "token")
        label = _settings_label(r, at, "forge.token")
        token = _secret_ref(r, forge["token"], "forge.token", at, label)
    if forge.get("webhookSecret") is not None:
        at = r.value_at(forge, "webhookSecret")
        label = _settings_label(r, at, "forge.webhookSecret")
        webhook = _secret_ref(r, forge["webhookSecret"], "forge.webhookSecret", at, label)
    git = _git_access(r, r.section(top, "git", "", _GIT_KEYS))
    kind = r.choice(forge, "kind", "forge", fd.kind, _FORGE_KINDS)
    repository = r.string(forge, "repository", "forge", fd.repository)
    if kind != "git-only" and "repository" not in forge and forge:
        r.add(r.node_at(forge), "forge.repository", f"required when kind is {kind}")
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
        ),
        git=git,
        proposals=ProposalSettings(
            enabled=r.boolean(props, "enabled", "proposals", pd.enabled),
            scope=r.choice(props, "scope", "proposals", pd.scope, _SCOPES),  # type: ignore[arg-type]
            interval_seconds=r.duration(
                props, "interval", "proposals", pd.interval_seconds, minimum=60
            ),
            max_open=r.integer(props, "maxOpen", "proposals", pd.max_open, low=0),
            labels=r.string_list(props, "labels", "proposals", pd.labels)[0],
        ),
    )


# -- clusters/<name>/release.yaml ---------------------------------------------------------------

_RELEASE_KEYS = ("chart", "release", "kubeContext", "environment")
_CHART_KEYS = ("repository", "name", "version")
_RELEASE_NAME_KEYS = ("name", "namespace")
_ENVIRONMENTS = tuple(e.value for e in Environment)


def _release(
    r: _Reader, doc: Any, locations: dict[str, Location] | None = None
) -> tuple[ReleaseSpec, Environment] | None:
    top = r.mapping(doc, "", (1, 1))
    if top is None:
        return None
    if locations is not None:
        # Where each value sits, for messages: "release.yaml:chart.version" → file, line.
        for key in ("kubeContext", "environment"):
            if key in top:
                locations[f"{RELEASE_FILE}:{key}"] = r.loc(r.value_at(top, key))
        for section in ("chart", "release"):
            node = top.get(section)
            if isinstance(node, CommentedMap):
                for key in node:
                    locations[f"{RELEASE_FILE}:{section}.{key}"] = r.loc(r.value_at(node, key))
    r.known_keys(top, "", _RELEASE_KEYS)
    before = len(r.problems)
    for key in ("chart", "release", "environment"):
        if key not in top:
            r.add(r.node_at(top), key, "required key is missing")
    chart = r.section(top, "chart", "", _CHART_KEYS) if "chart" in top else CommentedMap()
    rel = r.section(top, "release", "", _RELEASE_NAME_KEYS) if "release" in top else CommentedMap()
    repo = r.string(
        chart,
        "repository",
        "chart",
        required="chart" in top,
        pattern=_CHART_REPO,
        what="chart repository URL (https://, http:// or oci://)",
    )
    name = r.string(chart, "name", "chart", required="chart" in top)
    version = r.string(chart, "version", "chart", required="chart" in top)
    if version and not is_semver(version):
        r.add(
            r.value_at(chart, "version"),
            "chart.version",
            f"'{version}' is not a SemVer version",
            "write MAJOR.MINOR.PATCH, e.g. 1.8.7",
        )
    release_name = r.string(
        rel,
        "name",
        "release",
        required="release" in top,
        pattern=_RELEASE_NAME,
        what="Helm release name (lowercase, digits, '-' and '.')",
    )
    if len(release_name) > 53:
        r.add(r.value_at(rel, "name"), "release.name", "longer than Helm's 53 characters")
    namespace = r.string(
        rel,
        "namespace",
        "release",
        required="release" in top,
        pattern=_DNS_LABEL,
        what="namespace (DNS-1123 label)",
    )
    env = r.choice(top, "environment", "", "", _ENVIRONMENTS, required=False)
    kube_context = r.string(top, "kubeContext", "")
    if len(r.problems) > before:
        return None
    spec = ReleaseSpec(
        chart_repo_url=repo,
        chart_name=name,
        version=version,
        release_name=release_name,
        namespace=namespace,
        kube_context=kube_context,
    )
    return spec, Environment(env)


# -- clusters/<name>/rollout.yaml ---------------------------------------------------------------

_ROLLOUT_KEYS = (
    "order",
    "maxParallelPools",
    "canaryPool",
    "onFailure",
    "controllerReadyTimeout",
    "acknowledgements",
    "pools",
)
_POOL_KEYS = (
    "autoUpdateHypervisor",
    "autoUpdateWorker",
    "autoUpdateClient",
    "batchPercentage",
    "batchInterval",
    "maintenanceWindow",
    "maxDuration",
    "stallTimeout",
    "phases",
    "nodes",
    "canaryBatchPercentage",
)
_WINDOW_KEYS = ("cron", "duration", "timeZone")
_ON_FAILURE = ("rollback", "revert-pr", "halt")
_COMPONENTS = tuple(c.value for c in Component)


def _window(
    r: _Reader, node: Any, fld: str, at: tuple[int, int], known_timezones: Collection[str] | None
) -> MaintenanceWindow | None:
    win = r.mapping(node, fld, at)
    if win is None:
        return None
    r.known_keys(win, fld, _WINDOW_KEYS)
    cron = r.string(win, "cron", fld, required=True)
    if cron:
        fields = cron.split()
        if not (
            len(fields) == 5 or (len(fields) == 1 and cron.startswith("@"))
        ) or not croniter.is_valid(cron):
            r.add(
                r.value_at(win, "cron"),
                _join(fld, "cron"),
                f"'{cron}' is not a valid cron expression",
                "five fields: minute hour day-of-month month day-of-week, e.g. '0 2 * * 6'",
            )
            cron = ""
    duration = r.duration(win, "duration", fld, 0, minimum=60, required=True)
    tz = r.string(
        win, "timeZone", fld, "UTC", pattern=_TIMEZONE, what="time zone name (e.g. Europe/Berlin)"
    )
    if (
        known_timezones is not None
        and "timeZone" in win
        and tz not in known_timezones
        and _TIMEZONE.match(tz)
    ):
        r.add(
            r.value_at(win, "timeZone"),
            _join(fld, "timeZone"),
            f"unknown time zone '{tz}'",
            suggest(tz, sorted(known_timezones)),
        )
    if not cron or not duration:
        return None
    return MaintenanceWindow(cron=cron, duration_seconds=duration, timezone=tz)


def _pool(
    r: _Reader,
    name: str,
    node: CommentedMap,
    fld: str,
    known_timezones: Collection[str] | None,
    locations: dict[str, Location],
) -> PoolPolicy:
    d = PoolPolicy(name=name)
    r.known_keys(node, fld, _POOL_KEYS)
    for key in node:
        locations[f"{ROLLOUT_FILE}:{_join(fld, key)}"] = r.loc(r.key_at(node, key))
    window = None
    if node.get("maintenanceWindow") is not None:
        window = _window(
            r,
            node["maintenanceWindow"],
            _join(fld, "maintenanceWindow"),
            r.value_at(node, "maintenanceWindow"),
            known_timezones,
        )
    names, where = r.string_list(node, "phases", fld, ())
    phases: list[Component] = []
    for i, (phase, at) in enumerate(zip(names, where, strict=True)):
        if phase not in _COMPONENTS:
            r.add(at, f"{fld}.phases[{i}]", f"unknown phase '{phase}'", suggest(phase, _COMPONENTS))
        elif Component(phase) in phases:
            r.add(at, f"{fld}.phases[{i}]", f"phase '{phase}' is listed twice")
        else:
            phases.append(Component(phase))
    if "phases" in node and not names and isinstance(node["phases"], CommentedSeq):
        r.add(r.value_at(node, "phases"), _join(fld, "phases"), "must list at least one phase")
    max_duration: int | None = r.duration(node, "maxDuration", fld, None)
    # A phase whose switch is off (F3) is the policy engine's rule, not a format error.
    return PoolPolicy(
        name=name,
        auto_update_hypervisor=r.boolean(
            node, "autoUpdateHypervisor", fld, d.auto_update_hypervisor
        ),
        auto_update_worker=r.boolean(node, "autoUpdateWorker", fld, d.auto_update_worker),
        auto_update_client=r.boolean(node, "autoUpdateClient", fld, d.auto_update_client),
        batch_percentage=r.integer(
            node, "batchPercentage", fld, d.batch_percentage, low=1, high=100
        ),
        batch_interval_seconds=r.duration(
            node, "batchInterval", fld, d.batch_interval_seconds, minimum=0
        ),
        maintenance_window=window,
        max_duration_seconds=max_duration,
        stall_timeout_seconds=r.duration(node, "stallTimeout", fld, d.stall_timeout_seconds),
        phases=tuple(phases) or d.phases,
        nodes=r.integer(node, "nodes", fld, d.nodes, low=0),
        canary_batch_percentage=r.integer(
            node, "canaryBatchPercentage", fld, d.canary_batch_percentage, low=0, high=100
        ),
    )


def _rollout(
    r: _Reader, doc: Any, known_timezones: Collection[str] | None, locations: dict[str, Location]
) -> RolloutPolicy:
    d = RolloutPolicy()
    if doc is None:
        return d
    top = r.mapping(doc, "", (1, 1))
    if top is None:
        return d
    r.known_keys(top, "", _ROLLOUT_KEYS)
    for key in top:
        locations[f"{ROLLOUT_FILE}:{key}"] = r.loc(r.key_at(top, key))
    pools: list[PoolPolicy] = []
    pools_node: CommentedMap | None = None
    if top.get("pools") is not None:
        pools_node = r.mapping(top["pools"], "pools", r.value_at(top, "pools"))
    for name, node in (pools_node or {}).items():
        fld = _join("pools", name)
        at = r.key_at(pools_node, name)
        if not isinstance(name, str) or not _DNS_LABEL.match(name):
            r.add(at, fld, "pool name must be a DNS-1123 label (lowercase letters, digits, '-')")
            continue
        if node is None:
            node = CommentedMap()
        elif not isinstance(node, CommentedMap):
            r.add(r.value_at(pools_node, name), fld, f"expected a mapping, got {_kind(node)}")
            continue
        pools.append(_pool(r, name, node, fld, known_timezones, locations))
    names = [p.name for p in pools]
    order, order_at = r.string_list(top, "order", "", ())
    for i, (pool, at) in enumerate(zip(order, order_at, strict=True)):
        if pool not in names:
            r.add(at, f"order[{i}]", f"unknown pool '{pool}'", suggest(pool, names))
    if len(set(order)) != len(order):
        r.add(r.value_at(top, "order"), "order", "lists a pool twice")
    canary = r.string(top, "canaryPool", "") or None
    if canary is not None and canary not in names:
        r.add(
            r.value_at(top, "canaryPool"),
            "canaryPool",
            f"unknown pool '{canary}'",
            suggest(canary, names),
        )
    acks: dict[str, str] = {}
    if top.get("acknowledgements") is not None:
        ack_node = r.mapping(
            top["acknowledgements"], "acknowledgements", r.value_at(top, "acknowledgements")
        )
        for rule, reason in (ack_node or {}).items():
            fld = _join("acknowledgements", rule)
            if not isinstance(reason, str) or not reason.strip():
                r.add(
                    r.value_at(ack_node, rule),
                    fld,
                    "give the reason for acknowledging this rule as a non-empty string",
                )
                continue
            acks[str(rule)] = str(reason)
    return RolloutPolicy(
        pools=tuple(pools),
        order=order,
        max_parallel_pools=r.integer(top, "maxParallelPools", "", d.max_parallel_pools, low=1),
        canary_pool=canary,
        on_failure=r.choice(top, "onFailure", "", d.on_failure, _ON_FAILURE),  # type: ignore[arg-type]
        controller_ready_timeout_seconds=r.duration(
            top, "controllerReadyTimeout", "", d.controller_ready_timeout_seconds
        ),
        acknowledgements=acks,
    )


# -- clusters/<name>/credentials.yaml -----------------------------------------------------------

_CREDENTIALS_KEYS = ("rotation", "secretPaths", "secrets")


def _credentials(r: _Reader, doc: Any) -> CredentialsSpec:
    if doc is None:
        return CredentialsSpec()
    top = r.mapping(doc, "", (1, 1))
    if top is None:
        return CredentialsSpec()
    r.known_keys(top, "", _CREDENTIALS_KEYS)
    declared, declared_at = r.string_list(top, "secretPaths", "", ())
    good_paths: list[str] = []
    for i, (path, at) in enumerate(zip(declared, declared_at, strict=True)):
        try:
            secrets.split_path(path)
        except ValueError:
            r.add(
                at,
                f"secretPaths[{i}]",
                f"'{path}' is not a values path",
                "dotted, e.g. agent.agentId",
            )
            continue
        good_paths.append(path)
    refs: list[SecretRef] = []
    if top.get("secrets") is not None:
        node = r.mapping(top["secrets"], "secrets", r.value_at(top, "secrets"))
        for path, ref_node in (node or {}).items():
            fld = _join("secrets", path)
            try:
                secrets.split_path(str(path))
            except ValueError:
                r.add(
                    r.key_at(node, path), fld, "not a values path", "dotted, e.g. agent.enrollToken"
                )
                continue
            ref = _secret_ref(r, ref_node, fld, r.value_at(node, path), str(path))
            if ref is not None:
                refs.append(ref)
    return CredentialsSpec(
        secrets=tuple(refs),
        rotation=r.integer(top, "rotation", "", 0, low=0),
        secret_paths=tuple(good_paths),
    )


# -- clusters/<name>/smoke-test.yaml ------------------------------------------------------------

_SMOKE_KEYS = ("timeout", "manifest")


def _smoke_test(r: _Reader, doc: Any) -> SmokeTest | None:
    if doc is None:
        return None
    top = r.mapping(doc, "", (1, 1))
    if top is None:
        return None
    r.known_keys(top, "", _SMOKE_KEYS)
    timeout = r.duration(top, "timeout", "", 300)
    if "manifest" not in top:
        r.add(r.node_at(top), "manifest", "required key is missing", "a Pod manifest")
        return None
    manifest = r.mapping(top["manifest"], "manifest", r.value_at(top, "manifest"))
    if manifest is None:
        return None
    if manifest.get("kind") != "Pod":
        r.add(
            r.value_at(manifest, "kind") if "kind" in manifest else r.node_at(manifest),
            "manifest.kind",
            "the smoke test must be a Pod (kind: Pod)",
        )
        return None
    plain = _plain(manifest, (), {}, r)
    return SmokeTest(manifest=plain, timeout_seconds=timeout)


# -- a whole cluster ----------------------------------------------------------------------------


def _cluster(
    name: str,
    files: Mapping[str, str],
    directory: str,
    known_timezones: Collection[str] | None,
) -> tuple[ClusterSpec | None, list[Problem]]:
    problems: list[Problem] = []
    if not _DNS_LABEL.match(name):
        problems.append(
            Problem(
                directory,
                0,
                0,
                "",
                "cluster directory name must be a DNS-1123 label (lowercase letters, digits, '-')",
            )
        )
    for fname in sorted(files):
        if fname not in CLUSTER_FILES and fname.endswith((".yaml", ".yml")):
            problems.append(
                Problem(
                    f"{directory}/{fname}",
                    0,
                    0,
                    "",
                    "unknown file in a cluster directory",
                    suggest(fname, CLUSTER_FILES),
                )
            )
    for fname in REQUIRED_CLUSTER_FILES:
        if fname not in files:
            problems.append(
                Problem(
                    f"{directory}/{fname}",
                    0,
                    0,
                    "",
                    f"missing: every cluster directory needs {fname}",
                )
            )

    docs: dict[str, Any] = {}
    readers: dict[str, _Reader] = {}
    for fname in CLUSTER_FILES:
        readers[fname] = _Reader(f"{directory}/{fname}")
        if fname in files:
            doc, errs = load_yaml(files[fname], readers[fname].file)
            problems.extend(errs)
            docs[fname] = doc if not errs else _BROKEN
    locations: dict[str, Location] = {}

    release = None
    if docs.get(RELEASE_FILE, _BROKEN) is not _BROKEN:
        release = _release(readers[RELEASE_FILE], docs[RELEASE_FILE], locations)
    credentials = CredentialsSpec()
    if docs.get(CREDENTIALS_FILE, _BROKEN) is not _BROKEN:
        credentials = _credentials(readers[CREDENTIALS_FILE], docs[CREDENTIALS_FILE])
    rollout = RolloutPolicy()
    if docs.get(ROLLOUT_FILE, _BROKEN) is not _BROKEN:
        rollout = _rollout(readers[ROLLOUT_FILE], docs[ROLLOUT_FILE], known_timezones, locations)
    smoke = None
    if docs.get(SMOKE_TEST_FILE, _BROKEN) is not _BROKEN:
        smoke = _smoke_test(readers[SMOKE_TEST_FILE], docs[SMOKE_TEST_FILE])

    values: dict[str, Any] = {}
    values_locations: dict[str, Location] = {}
    if docs.get(VALUES_FILE, _BROKEN) is not _BROKEN:
        vr = readers[VALUES_FILE]
        doc = docs[VALUES_FILE]
        if doc is not None and vr.mapping(doc, "", (1, 1)) is not None:
            values = _plain(doc, (), values_locations, vr)
        declared = [*credentials.secret_paths, *(s.values_path for s in credentials.secrets)]
        for path in secrets.find_secret_literals(values, declared):
            where = values_locations.get(path, Location(vr.file, 1, 1))
            vr.problems.append(
                Problem(
                    vr.file,
                    where.line,
                    where.column,
                    path,
                    "secret-looking literal: secrets never sit in values.yaml",
                    "leave it empty and reference it in credentials.yaml under secrets:",
                )
            )

    for fname in CLUSTER_FILES:
        problems.extend(readers[fname].problems)
    problems.sort(key=lambda p: (p.file, p.line, p.column))
    if problems or release is None:
        return None, problems
    spec, environment = release
    return (
        ClusterSpec(
            name=name,
            environment=environment,
            release=spec,
            values=values,
            rollout=rollout,
            credentials=credentials,
            smoke_test=smoke,
            files=tuple(f"{directory}/{f}" for f in CLUSTER_FILES if f in files),
            values_locations=values_locations,
            locations=locations,
        ),
        [],
    )


_BROKEN = object()


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
    doc, problems = load_yaml(text, file)
    r = _Reader(file)
    settings = _settings(r, doc) if not problems else BotSettings()
    problems.extend(sorted(r.problems, key=lambda p: (p.line, p.column)))
    if problems:
        raise FleetError(problems)
    return settings


def parse_cluster(
    name: str,
    files: Mapping[str, str],
    *,
    directory: str = "",
    known_timezones: Collection[str] | None = None,
) -> ClusterSpec:
    """One cluster directory: ``files`` maps file name (``release.yaml``...) to its text; every
    YAML file present in the directory should be passed, so unknown ones are reported.
    Raises FleetError with every problem found."""
    spec, problems = _cluster(name, files, directory or f"{CLUSTERS_DIR}/{name}", known_timezones)
    if spec is None:
        raise FleetError(problems)
    return spec


def parse_fleet(
    settings_text: str | None,
    clusters: Mapping[str, Mapping[str, str]],
    *,
    policy_documents: Sequence[tuple[str, str]] = (),
    known_timezones: Collection[str] | None = None,
    extra_problems: Sequence[Problem] = (),
) -> Fleet:
    """The whole repository. ``clusters`` maps cluster name to its files (as ``parse_cluster``).
    ``extra_problems`` are the caller's own (e.g. undecodable bytes), reported with the rest."""
    problems: list[Problem] = list(extra_problems)
    settings = BotSettings()
    try:
        settings = parse_settings(settings_text)
    except FleetError as exc:
        problems.extend(exc.problems)
    specs: dict[str, ClusterSpec] = {}
    if not clusters:
        problems.append(
            Problem(
                f"{CLUSTERS_DIR}/",
                0,
                0,
                "",
                "no clusters: add clusters/<name>/release.yaml and values.yaml",
            )
        )
    for name in sorted(clusters):
        spec, errs = _cluster(name, clusters[name], f"{CLUSTERS_DIR}/{name}", known_timezones)
        problems.extend(errs)
        if spec is not None:
            specs[name] = spec
    if problems:
        raise FleetError(problems)
    return Fleet(settings=settings, clusters=specs, policy_documents=tuple(policy_documents))
