"""A whole cluster directory and a whole fleet from the text of each file: every file
format read, every problem collected and raised together as one ``FleetError``.

Time zones: checking that a name exists needs the tz database, which is data on disk, so
the caller passes the known names in (``known_timezones``); without them only the syntax
is checked."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from gitopsbot.core.fleet import located_yaml
from gitopsbot.core.fleet.canary_smoke_file import read_canary_smoke
from gitopsbot.core.fleet.credentials_file import read_credentials
from gitopsbot.core.fleet.fields import DNS_LABEL, FieldReader, suggest
from gitopsbot.core.fleet.layout import (
    CANARY_SMOKE_FILE,
    CLUSTER_FILES,
    CLUSTERS_DIR,
    CREDENTIALS_FILE,
    RELEASE_FILE,
    REQUIRED_CLUSTER_FILES,
    ROLLOUT_FILE,
    SMOKE_TEST_FILE,
    VALUES_FILE,
)
from gitopsbot.core.fleet.located_yaml import DEFAULT_LIMITS, YamlLimits
from gitopsbot.core.fleet.model import (
    BotSettings,
    ClusterSpec,
    CredentialsSpec,
    Fleet,
    Location,
    RolloutPolicy,
)
from gitopsbot.core.fleet.release_file import read_release
from gitopsbot.core.fleet.rollout_file import read_rollout
from gitopsbot.core.fleet.settings_file import parse_settings
from gitopsbot.core.fleet.smoke_test_file import read_smoke_test
from gitopsbot.core.fleet.values_file import read_values
from gitopsbot.errors import FleetError, Problem


def _cluster(
    name: str,
    files: Mapping[str, str],
    directory: str,
    known_timezones: Collection[str] | None,
    limits: YamlLimits = DEFAULT_LIMITS,
    strings: dict[str, str] | None = None,
) -> tuple[ClusterSpec | None, list[Problem]]:
    problems: list[Problem] = []
    if not DNS_LABEL.match(name):
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
    readers: dict[str, FieldReader] = {}
    for fname in CLUSTER_FILES:
        readers[fname] = FieldReader(f"{directory}/{fname}")
        if fname in files and fname != VALUES_FILE:  # values: read_values, below
            doc, errs = located_yaml.read(files[fname], readers[fname].file, limits=limits)
            problems.extend(errs)
            docs[fname] = doc if not errs else _BROKEN
    locations: dict[str, Location] = {}

    release = None
    if docs.get(RELEASE_FILE, _BROKEN) is not _BROKEN:
        release = read_release(readers[RELEASE_FILE], docs[RELEASE_FILE], locations)
    credentials = CredentialsSpec()
    if docs.get(CREDENTIALS_FILE, _BROKEN) is not _BROKEN:
        credentials = read_credentials(readers[CREDENTIALS_FILE], docs[CREDENTIALS_FILE], locations)
    rollout = RolloutPolicy()
    if docs.get(ROLLOUT_FILE, _BROKEN) is not _BROKEN:
        rollout = read_rollout(
            readers[ROLLOUT_FILE], docs[ROLLOUT_FILE], known_timezones, locations, cluster=name
        )
    smoke = None
    if docs.get(SMOKE_TEST_FILE, _BROKEN) is not _BROKEN:
        smoke = read_smoke_test(readers[SMOKE_TEST_FILE], docs[SMOKE_TEST_FILE])

    canary_smoke = None
    if docs.get(CANARY_SMOKE_FILE, _BROKEN) is not _BROKEN:
        canary_smoke = read_canary_smoke(readers[CANARY_SMOKE_FILE], docs[CANARY_SMOKE_FILE])

    values: dict[str, Any] = {}
    values_locations: Mapping[str, Location] = {}
    if VALUES_FILE in files:
        values, values_locations, _ = read_values(
            readers[VALUES_FILE], files[VALUES_FILE], credentials, limits=limits, strings=strings
        )

    for fname in CLUSTER_FILES:
        problems.extend(readers[fname].problems)
    problems.sort(key=lambda p: (p.file, p.line, p.column))
    if problems or release is None:
        return None, problems
    spec, environment, labels = release
    return (
        ClusterSpec(
            name=name,
            environment=environment,
            release=spec,
            values=values,
            rollout=rollout,
            credentials=credentials,
            smoke_test=smoke,
            canary_smoke=canary_smoke,
            files=tuple(f"{directory}/{f}" for f in CLUSTER_FILES if f in files),
            values_locations=values_locations,
            locations=locations,
            labels=labels,
        ),
        [],
    )


_BROKEN = object()


def parse_cluster(
    name: str,
    files: Mapping[str, str],
    *,
    directory: str = "",
    known_timezones: Collection[str] | None = None,
    limits: YamlLimits = DEFAULT_LIMITS,
) -> ClusterSpec:
    """One cluster directory: ``files`` maps file name (``release.yaml``...) to its text; every
    YAML file present in the directory should be passed, so unknown ones are reported.
    ``limits`` bound each file (gitopsbot.yaml's ``limits:``). Raises FleetError with every
    problem found."""
    spec, problems = _cluster(
        name, files, directory or f"{CLUSTERS_DIR}/{name}", known_timezones, limits
    )
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
    parsed: Mapping[str, ClusterSpec] | None = None,
) -> Fleet:
    """The whole repository. ``clusters`` maps cluster name to its files (as ``parse_cluster``).
    ``extra_problems`` are the caller's own (e.g. undecodable bytes), reported with the rest.
    ``parsed``: clusters the caller parsed before from the very same files with the same
    limits (a cluster's spec depends on its own directory and ``limits:`` alone), taken as
    they are."""
    problems: list[Problem] = list(extra_problems)
    settings = BotSettings()
    try:
        settings = parse_settings(settings_text)
    except FleetError as exc:
        problems.extend(exc.problems)
    specs: dict[str, ClusterSpec] = dict(parsed or {})
    if not clusters and not specs:
        problems.append(
            Problem(
                f"{CLUSTERS_DIR}/",
                0,
                0,
                "",
                "no clusters: add clusters/<name>/release.yaml and values.yaml",
            )
        )
    strings: dict[str, str] = {}  # values keys and paths, stored once for the whole fleet
    for name in sorted(clusters):
        spec, errs = _cluster(
            name,
            clusters[name],
            f"{CLUSTERS_DIR}/{name}",
            known_timezones,
            settings.limits,
            strings,
        )
        problems.extend(errs)
        if spec is not None:
            specs[name] = spec
    if problems:
        raise FleetError(problems)
    ordered = {name: specs[name] for name in sorted(specs)}
    return Fleet(settings=settings, clusters=ordered, policy_documents=tuple(policy_documents))
